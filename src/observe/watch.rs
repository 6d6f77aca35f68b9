//! Pure judgements over memory samples: whether a soft bound (`--max-rss`, `--max-gpu`,
//! `--min-available`) has been crossed for long enough to stop the job, and whether memory is
//! growing steadily enough to warn that it will hit a ceiling within the hour.
//!
//! It sees plain numbers; sampling them is [`crate::observe::sampler`]'s job and stopping the job
//! [`crate::supervise`]'s.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use crate::observe::units::human_bytes;

/// How many consecutive samples must cross a bound before the job is stopped: one spike (a
/// momentary fork, a page-cache blip) is not a reason to kill hours of training.
pub const CONSECUTIVE: u32 = 3;

/// The machine memory a `--min-available` bound keeps free.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Available {
    Bytes(u64),
    /// Percent of MemTotal.
    Percent(f64),
}

impl Available {
    fn bytes(self, total_bytes: Option<u64>) -> Option<u64> {
        match self {
            Available::Bytes(b) => Some(b),
            Available::Percent(p) => total_bytes.map(|t| (t as f64 * p / 100.0) as u64),
        }
    }
}

/// The soft bounds of a run; all optional.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bounds {
    pub max_rss_bytes: Option<u64>,
    pub max_gpu_bytes: Option<u64>,
    pub min_available: Option<Available>,
}

/// One sample's numbers, as the bounds read them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    /// The job's memory: the cgroup's usage when it has one, else the tree's PSS (or RSS).
    pub job_bytes: Option<u64>,
    pub gpu_bytes: Option<u64>,
    pub available_bytes: Option<u64>,
    pub total_bytes: Option<u64>,
}

/// Which bound was crossed, by how much.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crossing {
    /// The flag: `--max-rss`, `--max-gpu`, `--min-available`.
    pub bound: &'static str,
    pub value_bytes: u64,
    pub limit_bytes: u64,
}

impl fmt::Display for Crossing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, relation) = match self.bound {
            "--max-rss" => ("job memory", "over"),
            "--max-gpu" => ("job GPU memory", "over"),
            _ => ("machine's available memory", "under"),
        };
        write!(
            f,
            "{what} {} {relation} {} {} for {CONSECUTIVE} samples",
            human_bytes(self.value_bytes),
            self.bound,
            human_bytes(self.limit_bytes)
        )
    }
}

/// Counts consecutive crossings of each bound.
#[derive(Debug, Clone, Default)]
pub struct BoundWatch {
    bounds: Bounds,
    streaks: [u32; 3],
}

impl BoundWatch {
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            streaks: [0; 3],
        }
    }

    /// Feeds one sample; returns the crossing once a bound has been crossed for
    /// [`CONSECUTIVE`] samples in a row. An unknown value breaks no streak and extends none.
    pub fn observe(&mut self, r: &Reading) -> Option<Crossing> {
        let b = &self.bounds;
        let checks: [Option<Crossing>; 3] = [
            over(r.job_bytes, b.max_rss_bytes, "--max-rss"),
            over(r.gpu_bytes, b.max_gpu_bytes, "--max-gpu"),
            b.min_available.and_then(|min| {
                let limit = min.bytes(r.total_bytes)?;
                let value = r.available_bytes?;
                (value < limit).then_some(Crossing {
                    bound: "--min-available",
                    value_bytes: value,
                    limit_bytes: limit,
                })
            }),
        ];
        let mut fired = None;
        for (streak, crossing) in self.streaks.iter_mut().zip(checks) {
            match crossing {
                Some(c) => {
                    *streak += 1;
                    if *streak >= CONSECUTIVE && fired.is_none() {
                        fired = Some(c);
                    }
                }
                None => *streak = 0,
            }
        }
        fired
    }
}

fn over(value: Option<u64>, limit: Option<u64>, bound: &'static str) -> Option<Crossing> {
    let (value, limit) = (value?, limit?);
    (value > limit).then_some(Crossing {
        bound,
        value_bytes: value,
        limit_bytes: limit,
    })
}

/// A least-squares fit of memory over time in a sliding window.
#[derive(Debug, Clone)]
pub struct Trend {
    window: Duration,
    /// (seconds since start, bytes), at most one point per `window / POINTS`.
    points: VecDeque<(f64, f64)>,
}

/// Points kept per window: enough for a stable fit, few enough to refit every tick for free.
const POINTS: usize = 120;

/// A steady growth: its rate and how well a straight line explains it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Growth {
    pub bytes_per_s: f64,
    /// Coefficient of determination of the linear fit, 0..=1.
    pub r2: f64,
}

impl Trend {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            points: VecDeque::with_capacity(POINTS + 1),
        }
    }

    /// Adds a sample taken `at` after the attempt started.
    pub fn push(&mut self, at: Duration, bytes: u64) {
        let t = at.as_secs_f64();
        let spacing = self.window.as_secs_f64() / POINTS as f64;
        if self
            .points
            .back()
            .is_some_and(|(last, _)| t - last < spacing)
        {
            return;
        }
        self.points.push_back((t, bytes as f64));
        while self
            .points
            .front()
            .is_some_and(|(first, _)| t - first > self.window.as_secs_f64())
        {
            self.points.pop_front();
        }
    }

    /// The growth over the window, once the window is at least half full: `None` before, or
    /// when memory is flat or shrinking, or when the points do not fall on a line (spikes).
    pub fn growth(&self) -> Option<Growth> {
        let n = self.points.len();
        let (first, last) = (self.points.front()?, self.points.back()?);
        if n < 10 || last.0 - first.0 < self.window.as_secs_f64() / 2.0 {
            return None;
        }
        let nf = n as f64;
        let mean_t = self.points.iter().map(|p| p.0).sum::<f64>() / nf;
        let mean_b = self.points.iter().map(|p| p.1).sum::<f64>() / nf;
        let (mut stt, mut stb, mut sbb) = (0.0, 0.0, 0.0);
        for &(t, b) in &self.points {
            stt += (t - mean_t) * (t - mean_t);
            stb += (t - mean_t) * (b - mean_b);
            sbb += (b - mean_b) * (b - mean_b);
        }
        if stt == 0.0 || sbb == 0.0 {
            return None;
        }
        let slope = stb / stt;
        let r2 = stb * stb / (stt * sbb);
        (slope > 0.0 && r2 >= 0.8).then_some(Growth {
            bytes_per_s: slope,
            r2,
        })
    }
}

/// How long until `current` grows to `ceiling` at `growth`, if it ever does.
pub fn time_to_reach(current_bytes: u64, ceiling_bytes: u64, growth: Growth) -> Option<Duration> {
    let left = ceiling_bytes.checked_sub(current_bytes)? as f64;
    Some(Duration::from_secs_f64(left / growth.bytes_per_s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn reading(job: u64, gpu: u64, avail: u64) -> Reading {
        Reading {
            job_bytes: Some(job),
            gpu_bytes: Some(gpu),
            available_bytes: Some(avail),
            total_bytes: Some(16 * GIB),
        }
    }

    #[test]
    fn a_bound_fires_after_three_consecutive_crossings_only() {
        let mut watch = BoundWatch::new(Bounds {
            max_rss_bytes: Some(10 * GIB),
            ..Bounds::default()
        });
        // Spikes with a dip between them never fire.
        for job in [11, 11, 9, 11, 11, 9] {
            assert_eq!(watch.observe(&reading(job * GIB, 0, 8 * GIB)), None);
        }
        assert_eq!(watch.observe(&reading(11 * GIB, 0, 0)), None);
        assert_eq!(watch.observe(&reading(12 * GIB, 0, 0)), None);
        let fired = watch.observe(&reading(13 * GIB, 0, 0)).unwrap();
        assert_eq!(fired.bound, "--max-rss");
        assert_eq!(fired.value_bytes, 13 * GIB);
        assert_eq!(
            fired.to_string(),
            "job memory 13.0 GiB over --max-rss 10.0 GiB for 3 samples"
        );
    }

    #[test]
    fn each_bound_reads_its_own_number() {
        // (bounds, reading, fires)
        let table = [
            (
                Bounds {
                    max_gpu_bytes: Some(70 * GIB),
                    ..Bounds::default()
                },
                reading(0, 75 * GIB, 8 * GIB),
                Some("--max-gpu"),
            ),
            (
                Bounds {
                    max_gpu_bytes: Some(70 * GIB),
                    ..Bounds::default()
                },
                reading(99 * GIB, 65 * GIB, 0),
                None,
            ),
            (
                Bounds {
                    min_available: Some(Available::Bytes(2 * GIB)),
                    ..Bounds::default()
                },
                reading(0, 0, GIB),
                Some("--min-available"),
            ),
            // 10% of 16 GiB is 1.6 GiB: 1 GiB available is under it, 2 GiB is not.
            (
                Bounds {
                    min_available: Some(Available::Percent(10.0)),
                    ..Bounds::default()
                },
                reading(0, 0, GIB),
                Some("--min-available"),
            ),
            (
                Bounds {
                    min_available: Some(Available::Percent(10.0)),
                    ..Bounds::default()
                },
                reading(0, 0, 2 * GIB),
                None,
            ),
            (Bounds::default(), reading(99 * GIB, 99 * GIB, 0), None),
        ];
        for (bounds, r, want) in table {
            let mut watch = BoundWatch::new(bounds);
            let fired = (0..CONSECUTIVE).filter_map(|_| watch.observe(&r)).last();
            assert_eq!(fired.map(|c| c.bound), want, "{bounds:?}");
        }
        // Unknown numbers never fire.
        let mut watch = BoundWatch::new(Bounds {
            max_rss_bytes: Some(1),
            ..Bounds::default()
        });
        assert!((0..5).all(|_| watch.observe(&Reading::default()).is_none()));
    }

    #[test]
    fn steady_growth_is_seen_and_spikes_are_not() {
        let window = Duration::from_secs(600);
        let mut steady = Trend::new(window);
        let mut spiky = Trend::new(window);
        let mut flat = Trend::new(window);
        for s in 0..=600u64 {
            let at = Duration::from_secs(s);
            steady.push(at, 4 * GIB + s * 1_000_000 + (s % 7) * 3_000_000);
            spiky.push(at, if s % 50 == 0 { 12 * GIB } else { 4 * GIB });
            flat.push(at, 4 * GIB);
        }
        let growth = steady.growth().unwrap();
        assert!((growth.bytes_per_s - 1e6).abs() < 1e5, "{growth:?}");
        assert_eq!(spiky.growth(), None);
        assert_eq!(flat.growth(), None);
        // 1 GB left at 1 MB/s: 1000 s.
        let eta = time_to_reach(5_000_000_000, 6_000_000_000, growth).unwrap();
        assert!((900..1100).contains(&eta.as_secs()), "{eta:?}");
        assert_eq!(time_to_reach(7, 6, growth), None);
        // Too early in the window to judge.
        let mut young = Trend::new(window);
        for s in 0..100u64 {
            young.push(Duration::from_secs(s), s * 1_000_000);
        }
        assert_eq!(young.growth(), None);
    }
}
