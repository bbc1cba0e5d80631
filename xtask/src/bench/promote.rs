//! `cargo xtask bench promote`: rounds of `numatrace workload move-pages`
//! on the same 192 MiB page set: the baseline (one move_pages call), the
//! mover at the default `--batch-ms 20` and at `--batch-ms 100`, order
//! rotating; numa_balancing off so the kernel moves nothing itself.
use std::path::Path;

use anyhow::{ensure, Result};

use numa_core::workload::MovePagesSummary;

use super::{median, rotated};
use crate::results::read_report;

/// Eight rounds: on a shared host one round's ratio swings by 2x.
pub(crate) const ROUNDS: usize = 8;

const RUNS: [(&str, &str); 3] = [
    ("base", "--via baseline"),
    ("mover20", "--via mover --rate-limit 0 --batch-ms 20"),
    ("mover100", "--via mover --rate-limit 0 --batch-ms 100"),
];

pub(crate) fn script() -> String {
    let mut s = String::from("echo 0 > /proc/sys/kernel/numa_balancing\ncd /results\n");
    for i in 0..ROUNDS {
        for (name, args) in rotated(&RUNS, i) {
            s.push_str(&format!(
                "numatrace workload move-pages --mb 192 {args} > {name}_{i}.json || exit 1\n"
            ));
        }
    }
    s
}

pub(crate) fn report(dir: &Path) -> Result<()> {
    let mut ratios: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    println!("round  baseline MB/s pages/s | mover 20 ms MB/s pages/s calls ratio | mover 100 ms MB/s pages/s calls ratio");
    for i in 0..ROUNDS {
        let runs: Vec<MovePagesSummary> = RUNS
            .iter()
            .map(|(name, _)| read_report(dir, &format!("{name}_{i}.json")))
            .collect::<Result<_>>()?;
        for ((name, _), v) in RUNS.iter().zip(&runs) {
            ensure!(
                v.moved == v.pages && v.on_dram_after == v.pages,
                "{name} run {i} did not move every page: {v:?}"
            );
        }
        let base = runs[0].mb_per_s;
        let mut line = format!("{i:>5}  {base:>13.1} {:>7.0}", runs[0].pages_per_s);
        for (k, m) in runs[1..].iter().enumerate() {
            let r = m.mb_per_s / base;
            ratios[k].push(r);
            line.push_str(&format!(
                " | {:>16.1} {:>7.0} {:>5} {r:>5.3}",
                m.mb_per_s, m.pages_per_s, m.calls
            ));
        }
        println!("{line}");
    }
    println!();
    for (k, label) in ["--batch-ms 20 (default)", "--batch-ms 100"]
        .iter()
        .enumerate()
    {
        let med = median(&mut ratios[k]);
        println!(
            "mover {label} / baseline throughput: median {med:.3} over {ROUNDS} rounds (target >= 0.80): {}",
            if med >= 0.8 { "ok" } else { "below target" }
        );
    }
    println!("(QEMU TCG: absolute MB/s are emulated; each batch pays a fixed cost of a few ms");
    println!(" here (move_pages' own: lru_cache_disable's RCU grace period and per-CPU drain;");
    println!(" no location query when the target is alone in the top tier, node meminfo read");
    println!(" at most every 200 ms far from the floor), which longer batches amortise)");
    Ok(())
}
