//! Reading what a guest left in its results directory: JSON and text files,
//! and numbers inside JSON that fail with the path they were looked up at.
use std::path::Path;

use anyhow::{ensure, Context, Result};
use std::borrow::Borrow;
use std::collections::BTreeMap;

use numa_core::model::totals::Report;
use numa_core::workload::Summary;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub(crate) fn read_json(dir: &Path, name: &str) -> Result<Value> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).with_context(|| format!("no {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// The JSON file `name` in `dir` as the report type numatrace wrote it
/// with: a field the type lost or renamed fails to compile in the check,
/// one missing from the file fails here and names it.
pub(crate) fn read_report<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<T> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).with_context(|| format!("no {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not the report numatrace writes", path.display()))
}

/// The pages of the workload's slow mapping found on DRAM at its end (the
/// workload leaves the query out with `--late-populate-ms`).
pub(crate) fn on_dram_at_end(w: &Summary) -> Result<u64> {
    w.slow_pages_on_dram_node_at_end
        .map(|n| n as u64)
        .context("the workload's summary has no slow_pages_on_dram_node_at_end (--late-populate-ms leaves it out)")
}

/// The text file `name` in `dir` (a missing file is named without `dir`).
pub(crate) fn text(dir: &Path, name: &str) -> Result<String> {
    std::fs::read_to_string(dir.join(name)).with_context(|| format!("no {name}"))
}

/// The count `key` of a report's map `what` (vmstat's or the kernel
/// counters' names), failing when the report does not have it.
pub(crate) fn entry<K: Borrow<str> + Ord>(
    map: &BTreeMap<K, u64>,
    what: &str,
    key: &str,
) -> Result<u64> {
    map.get(key)
        .copied()
        .with_context(|| format!("{what} has no {key}"))
}

/// numatrace's count `ours` of something the kernel counted `kernel` times:
/// equal, but for the probe runs the kernel skipped (`missed`, a probe
/// preempted on its CPU), each of which hides at most one event.
pub(crate) fn equal_but_missed(what: &str, ours: u64, kernel: u64, missed: u64) -> Result<()> {
    anyhow::ensure!(
        ours <= kernel && kernel <= ours.saturating_add(missed),
        "{what}: numatrace counted {ours}, the kernel {kernel} ({missed} probe runs missed)"
    );
    Ok(())
}

/// A `stats --json` report's hint faults as numatrace counted them.
pub(crate) struct FaultCounts {
    pub vmstat: u64,
    pub decisions: u64,
    pub records: u64,
    pub drops: u64,
    pub missed: u64,
}

/// The decisions and the fault records (with ring drops) of a live
/// `stats --json` report, each equal to vmstat's numa_hint_faults but for
/// the probe runs missed; fails on a run without hint faults.
pub(crate) fn faults_match_vmstat(s: &Report) -> Result<FaultCounts> {
    let c = FaultCounts {
        vmstat: entry(&s.vmstat_delta, "vmstat_delta", "numa_hint_faults")?,
        decisions: entry(&s.kernel_counters, "kernel_counters", "decisions")?,
        records: s.hint_faults,
        drops: s.drops,
        missed: s.runs_missed,
    };
    anyhow::ensure!(
        c.vmstat > 0,
        "the workload caused no hint faults (vmstat delta 0): nothing was measured"
    );
    equal_but_missed(
        "should_numa_migrate_memory calls vs vmstat numa_hint_faults",
        c.decisions,
        c.vmstat,
        c.missed,
    )?;
    equal_but_missed(
        "hint fault records + drops vs vmstat numa_hint_faults",
        c.records + c.drops,
        c.vmstat,
        c.missed,
    )?;
    Ok(c)
}

/// A missed probe run hides at most one fault: up to a huge page's pages.
const PAGES_PER_MISSED_RUN: u64 = 512;

/// A `stats --json` report's promotions in pages against vmstat's page
/// counters: pages migrated from a lower tier to the top tier against
/// pgpromote_success, and the pages of decisions that passed the
/// threshold (promoted hot, or refused by the rate limit, which counts
/// them first) against pgpromote_candidate. Equal but for the probe runs
/// missed, each up to a huge page.
pub(crate) fn promoted_pages_match_vmstat(s: &Report) -> Result<()> {
    let missed = s.runs_missed.saturating_mul(PAGES_PER_MISSED_RUN);
    let vm = |k: &str| entry(&s.vmstat_delta, "vmstat_delta", k);
    equal_but_missed(
        "promoted pages vs vmstat pgpromote_success",
        s.pages.promoted,
        vm("pgpromote_success")?,
        missed,
    )?;
    let by = |o: &str| s.pages.by_outcome.get(o).copied().unwrap_or(0);
    equal_but_missed(
        "pages of decisions past the threshold (promote_hot + reject_rate_limit) vs vmstat pgpromote_candidate",
        by("promote_hot") + by("reject_rate_limit"),
        vm("pgpromote_candidate")?,
        missed,
    )
}

/// The fault-count counter numatrace keeps for the patch stepped as the
/// patch's does: every epoch of every mm (from a reset or the mm's first
/// fault) carried the counts 1..=n, whatever order its threads' records
/// arrived in.
pub(crate) fn patch_counter_whole(s: &Report) -> Result<()> {
    let p = &s.checks.patch_inputs;
    let (checked, off) = (p.epochs_checked, p.epochs_off);
    println!(
        "    fault-count counter: {checked} epochs ({} after a reset), {off} not 1..=n; {} records reordered, {} unanchored",
        p.epochs_after_reset, p.faults_reordered, p.faults_unanchored
    );
    ensure!(
        checked > 0 && off == 0,
        "the fault-count counter stepped wrongly in {off} of {checked} epochs"
    );
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use numa_core::model::totals::{Report, Totals};
    use numa_core::plan::ProgramStat;

    /// A `stats` report of nothing, for a check's test to fill in.
    pub(crate) fn empty_report() -> Report {
        Totals::new(1).report(0, 0)
    }

    /// A program's run statistics: `runs` runs, nothing else.
    pub(crate) fn program(name: &str, runs: u64) -> ProgramStat {
        ProgramStat {
            name: name.to_owned(),
            run_count: runs,
            run_time_ns: 0,
            ns_per_run: 0.0,
            xlated_bytes: 0,
            jited_bytes: 0,
            runs_missed: 0,
        }
    }

    #[test]
    fn only_missed_runs_excuse_a_shortfall() {
        use super::equal_but_missed as e;
        assert!(e("x", 10, 10, 0).is_ok());
        assert!(e("x", 8, 10, 2).is_ok());
        assert!(e("x", 8, 10, 1).is_err());
        assert!(e("x", 11, 10, 5).is_err(), "never more than the kernel");
    }
}
