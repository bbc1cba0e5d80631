//! The shadow report of the `recording` test's live run, and its replay
//! from that test's trace.
use std::path::Path;

use anyhow::{ensure, Context, Result};
use numa_core::model::shadow::{ModelReport, ShadowReport};

use crate::kernels::Series;
use crate::results::{read_json, read_report};

pub(super) const SCRIPT: &str = include_str!("shadow.sh");

/// The live shadow report shows latency rejections, the
/// kernel-time model agrees with the kernel on >= 95% of decisions, and a
/// replay of the recording reproduces the live report exactly.
pub(super) fn check(dir: &Path, console: &str, _series: Series) -> Result<()> {
    let report: ShadowReport = read_report(dir, "shadow.json")?;
    let live = read_json(dir, "shadow.json")?;
    let replay = read_json(dir, "replay.json")?;
    ensure!(
        report.kernel.reject_latency > 0,
        "shadow reports no reject_latency"
    );
    let models = &report.models;
    let kt = models
        .iter()
        .find(|m| m.name == "kernel-time")
        .context("no kernel-time model in the report")?;
    let pct = kt.agreement_pct;
    println!("    kernel-time agrees with the kernel on {pct:.2}% of decisions");
    ensure!(
        pct >= 95.0,
        "kernel-time agrees on {pct:.2}% < 95% of decisions"
    );
    check_fault_count(models)?;
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

/// The default `fault-count` (the patched kernel) had the patch's inputs
/// for the decisions of a workload started under numatrace (every folio it
/// faults on was stamped while attached), and its projected counters are
/// consistent.
fn check_fault_count(models: &[ModelReport]) -> Result<()> {
    let fc = models
        .iter()
        .find(|m| m.name == "fault-count")
        .context("no fault-count model in the report")?;
    let mode = fc.params.get("mode");
    ensure!(
        mode.is_some_and(|m| m == "patch"),
        "fault-count runs in mode {mode:?}, not the patch"
    );
    let decisions = fc.promote + fc.reject;
    let no_stamp = fc.reasons.get("no_stamp").copied().unwrap_or(0);
    println!(
        "    fault-count (the patch) had no stored count for {no_stamp} of {decisions} decisions"
    );
    ensure!(
        decisions > 0 && no_stamp * 100 <= decisions,
        "fault-count lacked the patch's inputs for {no_stamp} of {decisions} decisions (> 1%)"
    );
    let p = &fc.projected;
    ensure!(
        p.promote_pages >= fc.promote && p.candidate_pages >= p.reject_rate_limit,
        "fault-count's projected counters are inconsistent: {p:?}"
    );
    Ok(())
}
