//! `cargo xtask bench rfc`: the fault-count RFC's microbenchmark table
//! (the cover letter's table, docs/kernel.md cites the thread) on the test bed: the
//! same hot-chunks run on the stock 6.12 kernel (Default), on the RFC's
//! patched kernel (Patched), and numatrace's `fault-count` shadow of the
//! stock run (Predicted: what the patched decision would have done with
//! the stock kernel's hint faults).
//!
//! The seed's shape, scaled to the test bed: memory on DRAM and on the
//! slow node in one process, DRAM full (the process's idle part takes all
//! of node 0's free memory but [`DRAM_LEFT_MB`], less than the slow part,
//! so promoting the slow part makes the kernel demote), the slow part
//! accessed in randomly chosen chunks of random 4K pages, repeated, with
//! idle gaps; demotion on, as on the seed's machine (its table has
//! pgdemote_kswapd), default thresholds (hot_threshold_ms 1000,
//! fault_count_threshold 1e6).
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use numa_core::model::shadow::{ModelReport, ShadowReport};

use crate::results::{read_report, text};
use numa_core::workload::Summary;

/// Node 0's free memory the idle part leaves (MiB), numatrace's own
/// memory included: less than half the slow part, so that promoting it
/// all needs demotions.
const DRAM_LEFT_MB: u64 = 96;

/// The slow part (MiB).
const SLOW_MB: u64 = 256;

/// The guest script, the same on both kernels.
pub(crate) fn script() -> String {
    let w = format!("numatrace workload hot-chunks --dram-mb $dram_mb --slow-mb {SLOW_MB} --chunk-mb 8 --accesses 20000 --idle-ms 100 --duration 60 --seed 1 --summary workload.json");
    format!(
        r#"cd /results
echo true > /sys/kernel/mm/numa/demotion_enabled || exit 1
echo 2 > /proc/sys/kernel/numa_balancing
free_mb=$(awk '/MemFree/ {{ print int($4 / 1024) }}' /sys/devices/system/node/node0/meminfo)
dram_mb=$((free_mb - {DRAM_LEFT_MB}))
[ "$dram_mb" -gt 0 ] || {{ echo "node 0 has only $free_mb MiB free" >&2; exit 1; }}
echo "$dram_mb" > dram-mb.txt
# Per-CPU parts of the node counters (pgpromote_*, pgdemote_*) folded
# into /proc/vmstat first.
cat /proc/sys/vm/stat_refresh > /dev/null; cat /proc/vmstat > vmstat0.txt
numatrace shadow --json -o shadow.json --model fault-count:stamp=latest -- {w} || exit 1
cat /proc/sys/vm/stat_refresh > /dev/null; cat /proc/vmstat > vmstat1.txt
"#
    )
}

/// The RFC table's vmstat rows, in its order.
const VMSTAT_ROWS: [&str; 8] = [
    "numa_pte_updates",
    "numa_hint_faults",
    "numa_hint_faults_local",
    "numa_pages_migrated",
    "pgpromote_success",
    "pgpromote_candidate",
    "pgdemote_kswapd",
    "pgdemote_direct",
];

/// Rows the shadow cannot change (it does not touch the scanner): the
/// Predicted column repeats the stock kernel's figure.
const SCAN_ROWS: [&str; 3] = [
    "numa_pte_updates",
    "numa_hint_faults",
    "numa_hint_faults_local",
];

/// One boot's results.
struct Run {
    score_us: u64,
    vmstat: BTreeMap<String, u64>,
    shadow: ShadowReport,
}

impl Run {
    fn read(dir: &Path) -> Result<Run> {
        let score_us = read_report::<Summary>(dir, "workload.json")?.score_us;
        let parse = |name: &str| -> Result<BTreeMap<String, u64>> {
            Ok(text(dir, name)?
                .lines()
                .filter_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    Some((k.to_owned(), v.trim().parse().ok()?))
                })
                .collect())
        };
        let (a, b) = (parse("vmstat0.txt")?, parse("vmstat1.txt")?);
        let vmstat = b
            .iter()
            .map(|(k, v)| (k.clone(), v.saturating_sub(a.get(k).copied().unwrap_or(0))))
            .collect();
        Ok(Run {
            score_us,
            vmstat,
            shadow: read_report(dir, "shadow.json")?,
        })
    }

    fn vm(&self, key: &str) -> Option<u64> {
        self.vmstat.get(key).copied()
    }

    fn decisions(&self) -> u64 {
        self.shadow.decisions
    }

    /// The kernel's rejections on its own threshold (latency or fault count).
    fn threshold_rejects(&self) -> u64 {
        self.shadow.kernel.reject_latency
    }

    /// The `fault-count` model of this run's shadow.
    fn model(&self) -> Option<&ModelReport> {
        self.shadow.models.iter().find(|m| m.name == "fault-count")
    }
}

/// A one-line file of a run's results, or `-` when the run or the file is
/// missing (results of an older bench).
fn text_or_dash(dir: Option<&Path>, name: &str) -> String {
    dir.and_then(|d| text(d, name).ok())
        .map_or_else(|| "-".to_owned(), |t| t.trim().to_owned())
}

/// The three columns of one row.
type Row = (String, Option<u64>, Option<u64>, Option<String>);

fn rows(stock: Option<&Run>, patched: Option<&Run>) -> Vec<Row> {
    let model = stock.and_then(Run::model);
    let model_promote = model.map(|m| m.promote);
    let mut rows: Vec<Row> = vec![(
        "Benchmark score (us, lower is better)".into(),
        stock.map(|r| r.score_us),
        patched.map(|r| r.score_us),
        None,
    )];
    for key in VMSTAT_ROWS {
        let predicted = if SCAN_ROWS.contains(&key) {
            stock.and_then(|r| r.vm(key)).map(|v| format!("{v}*"))
        } else if matches!(
            key,
            "numa_pages_migrated" | "pgpromote_success" | "pgpromote_candidate"
        ) {
            model_promote.map(|v| v.to_string())
        } else {
            None
        };
        rows.push((
            key.into(),
            stock.and_then(|r| r.vm(key)),
            patched.and_then(|r| r.vm(key)),
            predicted,
        ));
    }
    rows.push((
        "should_numa_migrate_memory calls".into(),
        stock.map(Run::decisions),
        patched.map(Run::decisions),
        stock.map(|r| format!("{}*", r.decisions())),
    ));
    rows.push((
        "promoted, demoted within T (ping-pong)".into(),
        stock.map(|r| r.shadow.lifecycle.pingpong),
        patched.map(|r| r.shadow.lifecycle.pingpong),
        model.map(|m| format!("{}+", m.pingpong.shared)),
    ));
    rows.push((
        "promoted, demoted, promoted again".into(),
        stock.map(|r| r.shadow.lifecycle.repromotions),
        patched.map(|r| r.shadow.lifecycle.repromotions),
        None,
    ));
    rows.push((
        "rejected on the threshold".into(),
        stock.map(Run::threshold_rejects),
        patched.map(Run::threshold_rejects),
        model
            .map(|m| m.reasons.get("fault_count").copied().unwrap_or(0))
            .map(|v| v.to_string()),
    ));
    rows
}

/// Prints the table from the two boots' results (`None`: that half was
/// not run, shown as `-`).
pub(crate) fn report(stock_dir: Option<&Path>, patched_dir: Option<&Path>) -> Result<()> {
    let stock = stock_dir.map(Run::read).transpose()?;
    let patched = patched_dir.map(Run::read).transpose()?;
    let dash = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    let dram = |run: Option<&Path>| text_or_dash(run, "dram-mb.txt");
    println!(
        "hot-chunks: DRAM filled to {DRAM_LEFT_MB} MiB free by an idle part (Default {} MiB, Patched {} MiB)",
        dram(stock_dir),
        dram(patched_dir)
    );
    println!(
        "+ {SLOW_MB} MiB on the slow node in 8 MiB chunks, 20000 random 4K accesses per visit,"
    );
    println!("100 ms idle gaps, 60 s; demotion on; QEMU TCG");
    println!();
    println!(
        "{:<40} {:>14} {:>14} {:>14}",
        "", "Default", "Patched", "Predicted"
    );
    println!("{}", "-".repeat(85));
    for (name, d, p, pred) in rows(stock.as_ref(), patched.as_ref()) {
        println!(
            "{:<40} {:>14} {:>14} {:>14}",
            name,
            dash(d),
            dash(p),
            pred.unwrap_or_else(|| "-".into())
        );
    }
    println!("{}", "-".repeat(85));
    println!("Default: stock 6.12 (latency threshold); Patched: 6.12 + the RFC's two patches");
    println!(
        "(fault-count threshold); Predicted: numatrace's fault-count:stamp=latest shadow of the"
    );
    println!(
        "Default run (every promotion counted as a success; a page the Default kernel refused"
    );
    println!("and faulted again is counted at each fault, so where Default refused the same pages");
    println!("repeatedly Predicted's promotions are an upper bound). * the shadow does not change");
    println!(
        "scanning: the Default run's figure. + a lower bound: the Default kernel's ping-pongs"
    );
    println!("the model would also have made; its own extra promotions never ran, so whether they");
    println!("would have been demoted again is not observable. T: the lifecycle's window.");
    if let Some(run) = stock.as_ref().or(patched.as_ref()) {
        println!("T = {} s", run.shadow.lifecycle.window_s);
    }
    for (name, run) in [("Default", &stock), ("Patched", &patched)] {
        if let Some(m) = run.as_ref().and_then(Run::model) {
            println!(
                "fault-count agrees with the {name} kernel's decisions on {:.2}%",
                m.agreement_pct
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use numa_core::model::lifecycle::LifecycleReport;
    use numa_core::model::shadow::{KernelCounts, PingpongCost};

    fn run(score: u64, faults: u64, promote: u64) -> Run {
        Run {
            score_us: score,
            vmstat: BTreeMap::from([
                ("numa_hint_faults".to_owned(), faults),
                ("pgpromote_success".to_owned(), promote),
            ]),
            shadow: ShadowReport {
                decisions: faults,
                kernel: KernelCounts {
                    reject_latency: faults - promote,
                    ..KernelCounts::default()
                },
                models: vec![ModelReport {
                    name: "fault-count".into(),
                    promote: 70,
                    reasons: [("fault_count".into(), 30)].into(),
                    agreement_pct: 50.0,
                    pingpong: PingpongCost {
                        shared: promote / 2,
                        avoided: promote / 4,
                    },
                    ..ModelReport::default()
                }],
                lifecycle: LifecycleReport {
                    pingpong: promote / 2 + promote / 4,
                    repromotions: promote / 10,
                    ..LifecycleReport::default()
                },
                ..ShadowReport::default()
            },
        }
    }

    #[test]
    fn columns_come_from_their_runs() {
        let (s, p) = (run(1000, 100, 10), run(900, 120, 90));
        let rows = rows(Some(&s), Some(&p));
        let row = |n: &str| rows.iter().find(|r| r.0 == n).cloned().expect(n);
        let score = row("Benchmark score (us, lower is better)");
        assert_eq!((score.1, score.2, score.3), (Some(1000), Some(900), None));
        let faults = row("numa_hint_faults");
        assert_eq!(
            (faults.1, faults.2, faults.3.as_deref()),
            (Some(100), Some(120), Some("100*"))
        );
        let ok = row("pgpromote_success");
        assert_eq!(
            (ok.1, ok.2, ok.3.as_deref()),
            (Some(10), Some(90), Some("70"))
        );
        let rej = row("rejected on the threshold");
        assert_eq!(
            (rej.1, rej.2, rej.3.as_deref()),
            (Some(90), Some(30), Some("30"))
        );
        assert_eq!(row("pgdemote_direct").3, None);
        let pp = row("promoted, demoted within T (ping-pong)");
        assert_eq!(
            (pp.1, pp.2, pp.3.as_deref()),
            (Some(7), Some(67), Some("5+"))
        );
        let again = row("promoted, demoted, promoted again");
        assert_eq!((again.1, again.2, again.3), (Some(1), Some(9), None));
    }

    #[test]
    fn a_half_not_run_is_empty() {
        let p = run(900, 120, 90);
        let rows = rows(None, Some(&p));
        assert!(rows.iter().all(|r| r.1.is_none() && r.3.is_none()));
        assert!(rows.iter().any(|r| r.2 == Some(900)));
    }
}
