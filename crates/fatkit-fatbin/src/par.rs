//! Work spread over the cores, results in input order. Scoped threads, no pool: one call per
//! file or member, each with enough work to pay for its threads.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The cores this process may use, asked of the system once: the question reads the
/// cgroup's files (`/sys/fs/cgroup/.../cpu.max`), whose opening and reading, asked per call,
/// cost an environment's audit a twentieth of its time.
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `f` over every item on up to `available_parallelism` threads, each with its own `state`;
/// the results in the order of `items`.
pub fn map<T: Sync, S, R: Send>(
    items: &[T],
    state: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, &T) -> R + Sync,
) -> Vec<R> {
    let threads = cores().min(items.len());
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

/// Every offset of `needle` in `haystack`, ascending: large buffers are searched in chunks on
/// every core (chunks overlap by the needle's length, so no match is lost or found twice).
pub(crate) fn find_all(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    find_all_with(haystack, &memchr::memmem::Finder::new(needle))
}

/// [`find_all`] with a finder built once (for many small haystacks).
pub(crate) fn find_all_with(haystack: &[u8], finder: &memchr::memmem::Finder<'_>) -> Vec<usize> {
    const CHUNK: usize = 16 << 20;
    let needle = finder.needle();
    if haystack.len() <= CHUNK || needle.is_empty() {
        return finder.find_iter(haystack).collect();
    }
    let starts: Vec<usize> = (0..haystack.len()).step_by(CHUNK).collect();
    let per_chunk = map(
        &starts,
        || (),
        |_, &start| {
            let end = (start + CHUNK + needle.len() - 1).min(haystack.len());
            haystack
                .get(start..end)
                .map(|chunk| {
                    finder
                        .find_iter(chunk)
                        .map(|at| start + at)
                        .filter(|&at| at < start + CHUNK)
                        .collect::<Vec<usize>>()
                })
                .unwrap_or_default()
        },
    );
    per_chunk.into_iter().flatten().collect()
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    #[test]
    fn finds_across_chunk_edges() {
        let chunk = 16 << 20;
        let mut hay = vec![0u8; 2 * chunk + 100];
        let needle = b"NEEDLE";
        let at = [0, 10, chunk - 3, chunk + 5, 2 * chunk - 6, 2 * chunk + 94];
        for &a in &at {
            hay[a..a + needle.len()].copy_from_slice(needle);
        }
        assert_eq!(super::find_all(&hay, needle), at);
        assert_eq!(super::find_all(b"xxNEEDLExx", needle), [2]);
    }

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
