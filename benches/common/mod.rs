//! What the per-tick benches share: timing a call. Not a bench of its own (Cargo finds bench
//! targets only at `benches/*.rs`).

use std::time::{Duration, Instant};

/// Microseconds per call of `f`: at least `min_iters` calls and at least `min_time` of them,
/// after one call to warm up (dentries of /proc/PID, page cache of the binary and files).
pub fn micros_per_call(min_iters: u32, min_time: Duration, mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    let mut iters = 0u32;
    while iters < min_iters || start.elapsed() < min_time {
        f();
        iters += 1;
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(iters)
}
