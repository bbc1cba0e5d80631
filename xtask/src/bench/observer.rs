//! `cargo xtask bench observer`: does the kernel behave under numatrace as
//! it does without it? One boot per kernel in instruction-count mode (the
//! guest's time is its instruction count, so the host's load cannot
//! explain a difference), the same workload run [`ROUNDS`] times bare,
//! under `stats --live` and under `stats --live --empty-programs`,
//! rotated, with the kernel's own `/proc/vmstat` deltas taken around each
//! run by the guest script, not by numatrace.
//!
//! The workload ([`WORKLOAD`]): DRAM filled, a
//! 256 MiB slow-node region visited in 64 MiB chunks in turn after 4 s of
//! sleep each, with `hot_threshold_ms` at 100. The kernel scans a task on
//! its CPU time and charges the scanner 32 times its own runtime
//! (`p->node_stamp += 32 * diff`), and after an idle gap it scans a VMA
//! only if the scanning thread faulted there lately: time numatrace adds
//! inside the scanner delays every scan, and a late scan finds the VMA
//! inactive and skips it. So this workload sits on a cliff between all
//! 65,536 of its pages faulted and a few thousand.
use std::path::Path;

use anyhow::Result;

use super::{num, rotated, Spread};
use crate::kernels::Series;
use crate::results::read_json;

pub const ROUNDS: usize = 3;

/// Guest shell: the workload's settings and `run NAME CMD...`, which runs
/// CMD and writes the vmstat deltas of [`COUNTERS`] around it to
/// NAME.json (CMD's output to NAME.out; a failed CMD fails the script).
pub const SETUP: &str = r#"echo 2 > /proc/sys/kernel/numa_balancing
echo 1 > /sys/kernel/mm/numa/demotion_enabled
nb=/sys/kernel/debug/sched/numa_balancing
echo 16 > $nb/scan_size_mb
echo 100 > $nb/hot_threshold_ms
export TERM=dumb
counters() { grep -E '^(numa_hint_faults|numa_pte_updates|pgpromote_success) ' /proc/vmstat; }
run() {
	name=$1; shift
	counters > /tmp/before
	"$@" > $name.out 2>&1 || { echo "$name failed:"; tail -20 $name.out; exit 1; }
	counters > /tmp/after
	paste /tmp/before /tmp/after | awk 'BEGIN { printf "{" } { printf "%s\"%s\":%d", sep, $1, $4 - $2; sep = "," } END { print "}" }' > $name.json
}
"#;

/// The kernel counters each run reports, as vmstat names them.
pub const COUNTERS: [&str; 3] = ["numa_hint_faults", "numa_pte_updates", "pgpromote_success"];

/// One process: 700 MiB of DRAM filled and left idle, 256 MiB on the slow
/// node touched once, then four 64 MiB chunks in turn, each after 4 s of
/// sleep, with 4 Mi random page reads and writes per chunk.
pub const WORKLOAD: &str = "numatrace workload hot-chunks --dram-mb 700 --slow-mb 256 \
    --chunk-mb 64 --idle-ms 4000 --accesses 4194304 --visits 4 --in-turn \
    --max-duration 900 --summary /dev/null";

/// (name, command prefix): the runs of each round.
pub const RUNS: [(&str, &str); 3] = [
    ("bare", ""),
    ("traced", "numatrace -q stats --live --"),
    ("empty", "numatrace -q stats --live --empty-programs --"),
];

/// The runs of [`RUNS`] after a warm-up run whose figures are not used:
/// the first run of a boot is an outlier (0 hint faults, bare, on 6.12
/// and 7.2, where every later bare run takes 65,536).
pub fn script() -> String {
    let mut s = format!("{SETUP}cd /results\nrun warmup {WORKLOAD}\n");
    for i in 0..ROUNDS {
        for (name, prefix) in rotated(&RUNS, i) {
            s.push_str(&format!("run {name}_{i} {prefix} {WORKLOAD}\n"));
        }
    }
    s
}

/// vCPUs of the boot: 2, but 1 on 6.1, which hangs bringing up a second
/// CPU in instruction-count mode.
pub fn cpus(series: Series) -> u32 {
    if series == Series::V6_1 {
        1
    } else {
        2
    }
}

/// `traced / bare - 1` in percent (0 when both are 0).
pub fn deviation_pct(traced: f64, bare: f64) -> f64 {
    if bare == 0.0 {
        if traced == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        100.0 * (traced / bare - 1.0)
    }
}

/// One kernel's runs: each counter per run, then each tool's deviation
/// from the bare run of the same round.
pub fn report(kernel: &str, dir: &Path) -> Result<()> {
    println!(
        "kernel {kernel}: {ROUNDS} rounds of {} runs, rotated; vmstat deltas around each run",
        RUNS.len()
    );
    let mut dev: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); COUNTERS.len()]; RUNS.len()];
    for i in 0..ROUNDS {
        let runs: Vec<_> = RUNS
            .iter()
            .map(|(name, _)| read_json(dir, &format!("{name}_{i}.json")))
            .collect::<Result<_>>()?;
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

    #[test]
    fn deviation_is_relative_to_the_bare_run() {
        assert_eq!(deviation_pct(8192.0, 65536.0), -87.5);
        assert_eq!(deviation_pct(0.0, 0.0), 0.0);
        assert!(deviation_pct(1.0, 0.0).is_infinite());
    }
}
