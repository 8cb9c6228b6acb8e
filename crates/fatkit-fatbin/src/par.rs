//! Work spread over the cores, results in input order. Scoped threads, no pool: one call per
//! file or member, each with enough work to pay for its threads.

use std::sync::atomic::{AtomicUsize, Ordering};

/// `f` over every item on up to `available_parallelism` threads, each with its own `state`;
/// the results in the order of `items`.
pub fn map<T: Sync, S, R: Send>(
    items: &[T],
    state: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, &T) -> R + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if threads <= 1 {
        let mut s = state();
        return items.iter().map(|item| f(&mut s, item)).collect();
    }
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut s = state();
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        out.push((i, f(&mut s, item)));
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn keeps_the_order_and_uses_each_state() {
        let items: Vec<u32> = (0..1000).collect();
        let out = super::map(&items, Vec::<u32>::new, |seen, &x| {
            seen.push(x);
            x * 2
        });
        assert_eq!(out, items.iter().map(|x| x * 2).collect::<Vec<_>>());
        assert!(super::map(&[] as &[u8], || (), |_, &x| x).is_empty());
    }
}
