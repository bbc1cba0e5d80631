//! `cargo xtask bench observer`: does the kernel behave under numatrace as
//! it does without it? One boot per kernel in instruction-count mode (the
//! guest's time is its instruction count, so the host's load cannot
//! explain a difference), the workload of [`crate::observer`] run
//! [`ROUNDS`] times bare, under `stats --live`, under `stats --live
//! --empty-programs` and under the two controls of [`RUNS`], rotated, with
//! the kernel's own `/proc/vmstat` deltas and the run's CPU time taken
//! around each run by the guest script, not by numatrace.
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::{num, rotated, round_runs, Spread};
use crate::observer::{deviation_pct, COUNTERS, SETUP, WORKLOAD};

pub(crate) const ROUNDS: usize = 3;

/// (name, command prefix): the runs of each round. Two controls tell the
/// kernel's side from numatrace's userspace: `stopped` is `traced` with
/// numatrace's process stopped while the workload runs (the programs run
/// and fill the ring, which holds a whole run; nothing reads it until the
/// workload has ended), `hog` is the bare workload beside a busy loop.
/// In instruction-count mode the vCPUs take turns on one guest clock, so
/// instructions run on the other vCPU are time the workload's vCPU does
/// not get: `hog` measures how much that alone moves the kernel, and
/// `pinned` is `traced` with numatrace and the workload on one vCPU,
/// where the kernel accounts the reader's time as its own (the
/// [`crate::observer`] docs).
pub(crate) const RUNS: [(&str, &str); 6] = [
    ("bare", ""),
    ("traced", "numatrace -q stats --live --"),
    ("pinned", "$pin numatrace -q stats --live --"),
    ("empty", "numatrace -q stats --live --empty-programs --"),
    (
        "stopped",
        "numatrace -q stats --live -- sh -c 'kill -STOP $PPID; \"$@\"; s=$?; kill -CONT $PPID; exit $s' sh",
    ),
    (
        "hog",
        "sh -c 'while :; do :; done & h=$!; \"$@\"; s=$?; kill $h; exit $s' sh",
    ),
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
            let cpu = children_cpu_s(dir, &format!("{name}_{i}"))?;
            let mut line = format!("  round {i} {name:>7}: cpu {cpu:>6.2} s");
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

/// The CPU time (user + system, guest seconds) the run's command and its
/// children took: the difference of the two lines of `NAME.times`, each
/// the shell's `times` for its children (`XmY.ZZZs XmY.ZZZs`).
fn children_cpu_s(dir: &Path, name: &str) -> Result<f64> {
    let path = dir.join(format!("{name}.times"));
    let text = std::fs::read_to_string(&path).with_context(|| format!("no {}", path.display()))?;
    let total = |line: &str| -> Option<f64> {
        line.split_whitespace()
            .map(|t| {
                let (m, s) = t.strip_suffix('s')?.split_once('m')?;
                Some(m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
            })
            .sum()
    };
    let mut lines = text.lines().map(total);
    match (lines.next(), lines.next()) {
        (Some(Some(before)), Some(Some(after))) => Ok(after - before),
        _ => bail!(
            "{}: not two lines of `times` output: {text:?}",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_s_cpu_time_is_the_difference_of_its_two_times_lines() {
        let dir = std::env::temp_dir().join(format!("observer-times-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("r.times"),
            "0m1.500s 0m0.250s\n1m2.000s 0m0.750s\n",
        )
        .unwrap();
        let cpu = children_cpu_s(&dir, "r").unwrap();
        assert!((cpu - 61.0).abs() < 1e-9, "{cpu}");
        std::fs::write(dir.join("bad.times"), "0m1.500s\n").unwrap();
        assert!(children_cpu_s(&dir, "bad").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
