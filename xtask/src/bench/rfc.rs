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
//!
//! Each boot runs under the test bed's truth plugin and records a trace
//! (on the guest's tmpfs, so in its DRAM: its size is printed); the host
//! replays it with the truth, which gives the shadow's figures and the
//! scorecard: the slow-tier access share, precision and recall of the
//! kernel as it ran and of the fault-count model.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use numa_core::model::shadow::{ModelReport, ShadowReport};

use crate::results::{read_report, text};
use numa_core::workload::Summary;

/// Node 0's free memory the idle part leaves (MiB), numatrace's own
/// memory included: less than half the slow part, so that promoting it
/// all needs demotions.
const DRAM_LEFT_MB: u64 = 96;

/// The slow part (MiB).
const SLOW_MB: u64 = 256;

/// The trace each boot records, and the truth file beside it.
const TRACE: &str = "run.trace";
pub(crate) const TRUTH: &str = "run.truth";
/// The truth's windows (ms), and the scorecard's hot rules (accesses a
/// window; a visit makes about 20 to each page of its chunk) and horizon.
pub(crate) const WINDOW_MS: &str = "500";
const HOT_RULES: &str = "1,32";
const HORIZON_S: &str = "10";

/// The host's replay of a boot's trace with its truth: the shadow of the
/// `fault-count` model and the scorecard, into `shadow.json`.
pub(crate) fn replay(dir: &Path) -> Result<()> {
    let report = crate::vm::truth::replay(
        &crate::binary::path(true),
        &dir.join(TRACE),
        &dir.join(TRUTH),
        (HORIZON_S, HOT_RULES),
        &["fault-count:stamp=latest"],
    )
    .with_context(|| format!("replaying {}", dir.display()))?;
    std::fs::write(dir.join("shadow.json"), serde_json::to_vec(&report)?)?;
    Ok(())
}

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
numatrace record -o {TRACE} -- {w} || exit 1
cat /proc/sys/vm/stat_refresh > /dev/null; cat /proc/vmstat > vmstat1.txt
wc -c < {TRACE} > trace-bytes.txt
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
    /// The replay's scorecard against the truth.
    card: serde_json::Value,
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
        let replayed: serde_json::Value = read_report(dir, "shadow.json")?;
        Ok(Run {
            score_us,
            vmstat,
            shadow: serde_json::from_value(replayed.clone())
                .context("shadow.json: not a replay's report")?,
            card: replayed["scorecard"].clone(),
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

/// A policy's entry in a scorecard's list `list` (`shares`, or a rule's
/// `policies`): the kernel's, or the model's whose name starts with
/// `policy`.
fn entry<'a>(list: &'a serde_json::Value, policy: &str) -> Option<&'a serde_json::Value> {
    list.as_array()?
        .iter()
        .find(|p| p["policy"].as_str().is_some_and(|n| n.starts_with(policy)))
}

/// The rows scored against the truth: Default and Patched are each
/// kernel as it ran, Predicted the fault-count model on Default's run.
fn truth_rows(stock: Option<&Run>, patched: Option<&Run>) -> Vec<(String, [Option<String>; 3])> {
    let pct = |v: Option<&serde_json::Value>| {
        v.and_then(serde_json::Value::as_f64)
            .map(|x| format!("{:.1}%", 100.0 * x))
    };
    // Default's kernel, Patched's kernel, and the model on Default's run.
    let three = |value: &dyn Fn(&Run, &str) -> Option<String>| {
        [
            stock.and_then(|r| value(r, "kernel")),
            patched.and_then(|r| value(r, "kernel")),
            stock.and_then(|r| value(r, "fault-count")),
        ]
    };
    let mut rows: Vec<_> = [
        ("slow-tier access share", "slow_access_share"),
        ("... of the slow pages' accesses", "slow_page_access_share"),
    ]
    .into_iter()
    .map(|(name, key)| {
        let cols = three(&|r, policy| pct(entry(&r.card["shares"], policy).map(|s| &s[key])));
        (name.to_owned(), cols)
    })
    .collect();
    let rules = stock
        .or(patched)
        .and_then(|r| r.card["rules"].as_array().cloned())
        .unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        for key in ["precision", "recall"] {
            let cols = three(&|r, policy| {
                pct(entry(&r.card["rules"][i]["policies"], policy).map(|p| &p[key]))
            });
            let name = format!("{key} (hot: >= {} accesses/window)", rule["hot_accesses"]);
            rows.push((name, cols));
        }
    }
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
    for (name, cols) in truth_rows(stock.as_ref(), patched.as_ref()) {
        let [d, p, pred] = cols.map(|c| c.unwrap_or_else(|| "-".into()));
        println!("{name:<40} {d:>14} {p:>14} {pred:>14}");
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
    println!(
        "Against the truth plugin's accesses ({WINDOW_MS} ms windows, horizon {HORIZON_S} s): the share of"
    );
    println!("all user accesses served by the slow tier (numatrace's own included), and of the");
    println!("accesses to pages that were on it (measured for each kernel, projected for");
    println!("Predicted: a page's accesses from DRAM once the model would have promoted it);");
    println!("precision: promoted pages hot again within the horizon; recall: hot slow-tier pages");
    println!(
        "promoted within it. Traces on the guest's tmpfs (DRAM): Default {} bytes, Patched {} bytes.",
        text_or_dash(stock_dir, "trace-bytes.txt"),
        text_or_dash(patched_dir, "trace-bytes.txt")
    );
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
            card: serde_json::json!({
                "shares": [
                    {"policy": "kernel", "slow_access_share": score as f64 / 1e4,
                     "slow_page_access_share": 0.5},
                    {"policy": "fault-count counter=mm", "slow_access_share": 0.25},
                ],
                "rules": [{"hot_accesses": 1, "policies": [
                    {"policy": "kernel", "precision": 0.5, "recall": 0.125},
                    {"policy": "fault-count counter=mm", "precision": 0.75, "recall": 1.0},
                ]}],
            }),
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
    fn truth_rows_take_each_kernel_and_the_model_of_the_default_run() {
        let (s, p) = (run(1000, 100, 10), run(900, 120, 90));
        let rows = truth_rows(Some(&s), Some(&p));
        let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "slow-tier access share",
                "... of the slow pages' accesses",
                "precision (hot: >= 1 accesses/window)",
                "recall (hot: >= 1 accesses/window)"
            ]
        );
        let cols = |i: usize| rows[i].1.clone().map(|c| c.unwrap_or_default());
        assert_eq!(cols(0), ["10.0%", "9.0%", "25.0%"]);
        assert_eq!(cols(1), ["50.0%", "50.0%", ""]);
        assert_eq!(cols(3), ["12.5%", "12.5%", "100.0%"]);
        let half = truth_rows(None, Some(&p));
        assert_eq!(half[0].1, [None, Some("9.0%".into()), None]);
    }

    #[test]
    fn a_half_not_run_is_empty() {
        let p = run(900, 120, 90);
        let rows = rows(None, Some(&p));
        assert!(rows.iter().all(|r| r.1.is_none() && r.3.is_none()));
        assert!(rows.iter().any(|r| r.2 == Some(900)));
    }
}
