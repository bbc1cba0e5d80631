//! `cargo xtask bench`: benchmarks measured side by side in one VM boot
//! (`overhead`, `production`, `promote`, `table`) or on the host (`top`), one file each;
//! here, what their reports share: reading a round's runs and the spread
//! of a figure over the rounds.
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::results::read_json;

pub(crate) mod observer;
pub(crate) mod overhead;
pub(crate) mod production;
pub(crate) mod promote;
pub(crate) mod rfc;
pub(crate) mod table;
pub(crate) mod top;

fn num(v: &Value, key: &str) -> Result<f64> {
    v[key]
        .as_f64()
        .with_context(|| format!("{key} missing in {v}"))
}

/// Round `i`'s order of `runs`: rotated by one per round, so that drift
/// over the boot (page cache, scanner state) does not favour one run.
fn rotated<T: Copy>(runs: &[T], i: usize) -> impl Iterator<Item = T> + '_ {
    (0..runs.len()).map(move |k| runs[(i + k) % runs.len()])
}

/// Round `i`'s result of each run, `<name>_<i>.json`, in `runs`' order.
fn round_runs(dir: &Path, runs: &[(&str, &str)], i: usize) -> Result<Vec<Value>> {
    runs.iter()
        .map(|(name, _)| read_json(dir, &format!("{name}_{i}.json")))
        .collect()
}

/// Median, min and max.
#[derive(Clone, Copy)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    /// (max - min) / median, in percent.
    fn spread_pct(&self) -> f64 {
        100.0 * (self.max - self.min) / self.median.abs().max(f64::MIN_POSITIVE)
    }

    fn of(v: &[f64]) -> Spread {
        let mut v = v.to_vec();
        let median = median(&mut v);
        Spread {
            median,
            min: v.first().copied().unwrap_or(f64::NAN),
            max: v.last().copied().unwrap_or(f64::NAN),
        }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = f.precision().unwrap_or(3);
        write!(
            f,
            "median {:.p$} (min {:.p$}, max {:.p$})",
            self.median, self.min, self.max
        )
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
