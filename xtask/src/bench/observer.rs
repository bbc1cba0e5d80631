//! `cargo xtask bench observer`: does the kernel behave under numatrace as
//! it does without it? One boot per kernel in instruction-count mode (the
//! guest's time is its instruction count, so the host's load cannot
//! explain a difference), the workload of [`crate::observer`] run
//! [`ROUNDS`] times bare, under `stats --live` and under `stats --live
//! --empty-programs`, rotated, with the kernel's own `/proc/vmstat` deltas
//! taken around each run by the guest script, not by numatrace.
use std::path::Path;

use anyhow::Result;

use super::{num, rotated, round_runs, Spread};
use crate::observer::{deviation_pct, COUNTERS, SETUP, WORKLOAD};

pub(crate) const ROUNDS: usize = 3;

/// (name, command prefix): the runs of each round.
pub(crate) const RUNS: [(&str, &str); 3] = [
    ("bare", ""),
    ("traced", "numatrace -q stats --live --"),
    ("empty", "numatrace -q stats --live --empty-programs --"),
];

/// The runs of [`RUNS`] after a warm-up run whose figures are not used:
/// the first run of a boot is an outlier (0 hint faults, bare, on 6.12
/// and 7.2, where every later bare run takes 65,536).
pub(crate) fn script() -> String {
    let mut s = format!("{SETUP}cd /results\nrun warmup {WORKLOAD}\n");
    for i in 0..ROUNDS {
        for (name, prefix) in rotated(&RUNS, i) {
            s.push_str(&format!("run {name}_{i} {prefix} {WORKLOAD}\n"));
        }
    }
    s
}

/// One kernel's runs: each counter per run, then each tool's deviation
/// from the bare run of the same round.
pub(crate) fn report(kernel: &str, dir: &Path) -> Result<()> {
    println!(
        "kernel {kernel}: {ROUNDS} rounds of {} runs, rotated; vmstat deltas around each run",
        RUNS.len()
    );
    let mut dev: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); COUNTERS.len()]; RUNS.len()];
    for i in 0..ROUNDS {
        let runs = round_runs(dir, &RUNS, i)?;
        for (k, (name, _)) in RUNS.iter().enumerate() {
            let mut line = format!("  round {i} {name:>6}:");
            for (c, counter) in COUNTERS.iter().enumerate() {
                let v = num(&runs[k], counter)?;
                let d = deviation_pct(v, num(&runs[0], counter)?);
                dev[k][c].push(d);
                line.push_str(&format!(" {counter} {v:>7.0}"));
                if k > 0 {
                    line.push_str(&format!(" ({d:+.1}%)"));
                }
            }
            println!("{line}");
        }
    }
    for (k, (name, _)) in RUNS.iter().enumerate().skip(1) {
        for (c, counter) in COUNTERS.iter().enumerate() {
            let s = Spread::of(&dev[k][c]);
            let worst = dev[k][c].iter().fold(0f64, |w, d| w.max(d.abs()));
            let verdict = if worst <= 2.0 {
                "within 2%"
            } else {
                "OUTSIDE 2%"
            };
            println!(
                "  {name} vs bare, {counter}: deviation {s:.1} %, worst {worst:.1}%: {verdict}"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_of_every_round_is_in_the_script_once() {
        let s = script();
        for i in 0..ROUNDS {
            for (name, prefix) in RUNS {
                let line = format!("run {name}_{i} {prefix} {WORKLOAD}");
                assert_eq!(s.matches(&line).count(), 1, "{line}");
            }
        }
    }
}
