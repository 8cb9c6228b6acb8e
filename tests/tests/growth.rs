//! Issue 41: audit work bounded by the input. Every hostile shape the adversarial rounds found
//! (`fatkit_fuzz::hostile::SHAPES`), at three scales doubling each time: the audit's time and
//! its peak memory must grow no faster than the input (within a margin for noise), and it
//! must answer, or say what was too large, never hang. `cargo xtask bench hostile` runs the
//! same shapes at large scales.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Counts the bytes allocated now and the most at once since [`reset`].
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = NOW.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(now, Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        if new > layout.size() {
            let now = NOW.fetch_add(new - layout.size(), Relaxed) + new - layout.size();
            PEAK.fetch_max(now, Relaxed);
        } else {
            NOW.fetch_sub(layout.size() - new, Relaxed);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// One audit of `path`: (time, peak bytes above what was allocated before, exit code).
fn audit(path: &std::path::Path, args: &[&str]) -> (Duration, usize, u8) {
    let base = NOW.load(Relaxed);
    PEAK.store(base, Relaxed);
    let start = Instant::now();
    let mut argv = vec!["audit", path.to_str().unwrap()];
    argv.extend(args);
    let (code, _, _) = fatkit_tests::fatkit_in_process(&argv);
    let took = start.elapsed();
    (took, PEAK.load(Relaxed).saturating_sub(base), code)
}

fn size_of(path: &std::path::Path) -> u64 {
    if path.is_dir() {
        std::fs::read_dir(path)
            .unwrap()
            .flatten()
            .map(|e| size_of(&e.path()))
            .sum()
    } else {
        std::fs::metadata(path).map_or(0, |m| m.len())
    }
}

#[test]
fn every_hostile_shape_audits_in_time_and_memory_linear_in_its_size() {
    let dir = fatkit_tests::temp_dir("growth");
    let mut report = Vec::new();
    let mut superlinear = Vec::new();
    for shape in fatkit_fuzz::hostile::SHAPES {
        let only = std::env::var("FATKIT_GROWTH_SHAPE").ok();
        if only.as_deref().is_some_and(|o| o != shape.name) {
            continue;
        }
        let mut rows = Vec::new();
        for scale in [1, 2, 4] {
            let n = shape.small * scale;
            let case = dir.join(format!("{}-{n}", shape.name));
            let path = (shape.make)(n, &case);
            let bytes = size_of(&path);
            // The least of two runs: the time the work takes, less the machine's noise.
            let (t1, m1, code) = audit(&path, shape.args);
            let (t2, m2, _) = audit(&path, shape.args);
            rows.push((n, bytes, t1.min(t2), m1.min(m2), code));
            let _ = std::fs::remove_dir_all(&case);
        }
        for (n, bytes, t, m, code) in &rows {
            report.push(format!(
                "{:32} n={n:>8} {bytes:>10} B {:>9.3} s {:>8.1} MiB exit {code}",
                shape.name,
                t.as_secs_f64(),
                *m as f64 / (1 << 20) as f64
            ));
        }
        let (first, last) = (rows[0], rows[2]);
        // 4x the input: linear work takes about 4x; quadratic 16x. Small times are noise.
        let time_ratio = last.2.as_secs_f64() / first.2.as_secs_f64().max(0.02);
        let mem_ratio = last.3 as f64 / (first.3.max(1 << 20)) as f64;
        if time_ratio > 8.0 || mem_ratio > 8.0 {
            superlinear.push(format!(
                "{}: 4x the input took {time_ratio:.1}x the time and {mem_ratio:.1}x the memory ({})",
                shape.name, shape.finding
            ));
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(
        superlinear.is_empty(),
        "{}\n{}",
        superlinear.join("\n"),
        report.join("\n")
    );
}
