//! Host-side checks of the VM tests that exercise the probes and the shadow
//! engine: each reads the JSON numatrace left in the test's results
//! directory and fails with the numbers that disagree.
use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use crate::kernels::Series;

pub fn read_json(dir: &Path, name: &str) -> Result<Value> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).with_context(|| format!("no {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// The value at `path` (JSON object keys), or what is there instead.
fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |cur, p| &cur[*p])
}

pub fn u(v: &Value, path: &[&str]) -> Result<u64> {
    let cur = at(v, path);
    cur.as_u64()
        .with_context(|| format!("{} is not a number: {cur}", path.join(".")))
}

fn f(v: &Value, path: &[&str]) -> Result<f64> {
    let cur = at(v, path);
    cur.as_f64()
        .with_context(|| format!("{} is not a number: {cur}", path.join(".")))
}

/// Issue 2: a probe attached through the plan counts
/// should_numa_migrate_memory calls equal to vmstat's numa_hint_faults delta.
pub fn check_probe_count(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    let s = read_json(dir, "stats.json")?;
    let vm_faults = u(&s, &["vmstat_delta", "numa_hint_faults"])?;
    let decisions = u(&s, &["kernel_counters", "decisions"])?;
    let seen = u(&s, &["hint_faults"])?;
    ensure!(
        vm_faults > 0,
        "the workload caused no hint faults (vmstat delta 0): nothing was measured"
    );
    ensure!(
        decisions == vm_faults,
        "should_numa_migrate_memory calls {decisions} != vmstat numa_hint_faults delta {vm_faults}"
    );
    ensure!(
        seen == vm_faults,
        "hint fault events {seen} != vmstat numa_hint_faults delta {vm_faults}"
    );
    check_empty_programs(&read_json(dir, "empty.json")?)
}

/// `--empty-programs --bpf-stats`: only the programs that do nothing ran,
/// the hint-fault one once per hint fault, and nothing was recorded.
fn check_empty_programs(s: &Value) -> Result<()> {
    let vm_faults = u(s, &["vmstat_delta", "numa_hint_faults"])?;
    ensure!(
        vm_faults > 0,
        "--empty-programs: the workload caused no hint faults"
    );
    ensure!(
        u(s, &["hint_faults"])? == 0,
        "--empty-programs recorded hint faults: the real programs ran"
    );
    let programs = s["bpf_programs"]
        .as_array()
        .context("--empty-programs --bpf-stats: no bpf_programs")?;
    let mut hint_runs = None;
    for p in programs {
        let name = p["name"].as_str().unwrap_or("");
        ensure!(
            name.starts_with("empty_"),
            "--empty-programs ran {name}, not an empty program"
        );
        if name == "empty_fentry_hint_fault" {
            hint_runs = p["run_count"].as_u64();
        }
    }
    ensure!(
        hint_runs == Some(vm_faults),
        "empty_fentry_hint_fault ran {hint_runs:?} times for {vm_faults} hint faults"
    );
    Ok(())
}

/// Issue 3: one recording with DRAM filled and idle gaps, checked against
/// the kernel's own counters and the invariants of the measurements.
pub fn check_recording(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    let s = read_json(dir, "stats.json")?;
    let w = read_json(dir, "workload.json")?;
    let vm = |k: &str| u(&s, &["vmstat_delta", k]);
    let faults = u(&s, &["hint_faults"])?;
    ensure!(faults > 0, "no hint faults recorded");
    ensure!(
        faults == vm("numa_hint_faults")?,
        "hint faults {faults} != vmstat numa_hint_faults {}",
        vm("numa_hint_faults")?
    );
    let ok = u(&s, &["migrate", "success"])?;
    ensure!(
        ok == vm("pgpromote_success")?,
        "successful migrations {ok} != vmstat pgpromote_success {}",
        vm("pgpromote_success")?
    );
    let on_dram = u(&w, &["slow_pages_on_dram_node_at_end"])?;
    ensure!(
        on_dram == ok,
        "the workload found {on_dram} of its pages on DRAM, numatrace saw {ok} promotions"
    );
    let decisions = u(&s, &["decisions"])?;
    let slow = u(&s, &["checks", "slow_node_faults"])?;
    ensure!(
        decisions == slow,
        "decisions {decisions} != hint faults on slow-node folios {slow}"
    );
    ensure!(
        u(&s, &["checks", "negative_latencies"])? == 0,
        "latencies below zero"
    );
    let max_ms = f(&s, &["checks", "max_latency_ms"])?;
    let window_ms = f(&s, &["checks", "since_attach_s"])? * 1000.0;
    ensure!(
        max_ms <= window_ms,
        "a latency of {max_ms} ms exceeds the recording ({window_ms} ms since attach)"
    );
    let reject_latency = u(&s, &["kernel_reject", "latency"])?;
    ensure!(
        reject_latency > 0,
        "no rejection on latency: DRAM was not filled enough for the threshold path"
    );
    ensure!(
        u(&s, &["checks", "latency_rejects_below_threshold"])? == 0,
        "rejections with reason latency whose kernel latency < threshold"
    );
    ensure!(
        u(&s, &["checks", "inconsistent_deltas"])? == 0,
        "fault-count deltas inconsistent with sequence numbers"
    );
    ensure!(
        u(&s, &["drops"])? == 0,
        "ring buffer drops at default sizes"
    );
    ensure!(
        s["kernel_histograms_match"] == Value::Bool(true),
        "in-kernel histograms differ from the events'"
    );
    let gap = u(&s, &["checks", "max_kernel_latency_gap_ms"])?;
    // Two jiffy roundings (4 ms each at HZ=250) plus the time from the hint
    // fault's entry to the decision, which TCG stretches: 50 ms is far below
    // any threshold and far above what a wrong stamp would give (seconds).
    ensure!(
        gap <= 50,
        "the kernel's own latency and numatrace's differ by {gap} ms (> 50 ms: a stamp is wrong)"
    );
    Ok(())
}

/// Issue 4: the live shadow report shows latency rejections, the
/// kernel-time model agrees with the kernel on >= 95% of decisions, and a
/// replay of the recording reproduces the live report exactly.
pub fn check_shadow(dir: &Path, console: &str, _series: Series) -> Result<()> {
    let live = read_json(dir, "shadow.json")?;
    let replay = read_json(dir, "replay.json")?;
    ensure!(
        u(&live, &["kernel", "reject_latency"])? > 0,
        "shadow reports no reject_latency"
    );
    let models = live["models"]
        .as_array()
        .context("models is not an array")?;
    let kt = models
        .iter()
        .find(|m| m["name"] == "kernel-time")
        .context("no kernel-time model in the report")?;
    let pct = f(kt, &["agreement_pct"])?;
    println!("    kernel-time agrees with the kernel on {pct:.2}% of decisions");
    ensure!(
        pct >= 95.0,
        "kernel-time agrees on {pct:.2}% < 95% of decisions"
    );
    if live != replay {
        let diff: Vec<String> = live
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| replay.get(k.as_str()) != Some(v))
            .map(|(k, _)| k.clone())
            .collect();
        anyhow::bail!(
            "replay differs from the live report in: {}",
            diff.join(", ")
        );
    }
    let _ = console;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn empty_run(programs: Value, recorded: u64) -> Value {
        json!({"hint_faults": recorded, "vmstat_delta": {"numa_hint_faults": 700},
            "bpf_programs": programs})
    }

    #[test]
    fn empty_programs_check_passes_only_when_just_empty_programs_ran_per_fault() {
        let good = json!([{"name": "empty_fentry_hint_fault", "run_count": 700},
            {"name": "empty_fexit_decision", "run_count": 700}]);
        check_empty_programs(&empty_run(good.clone(), 0)).unwrap();
        assert!(check_empty_programs(&empty_run(good, 5)).is_err());
        let real = json!([{"name": "empty_fentry_hint_fault", "run_count": 700},
            {"name": "fentry_fault_account", "run_count": 700}]);
        assert!(check_empty_programs(&empty_run(real, 0)).is_err());
        let short = json!([{"name": "empty_fentry_hint_fault", "run_count": 699}]);
        assert!(check_empty_programs(&empty_run(short, 0)).is_err());
    }
}
