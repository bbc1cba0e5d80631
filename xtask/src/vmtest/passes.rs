//! Many scanner passes over one hot page: the seed microbenchmark's shape
//! (DRAM filled by another process, a 64 MiB region on the slow node read
//! at random with computing in between) with `scan_period_max_ms` at 1 s.
//!
//! The kernel's scanner runs on the task's CPU time: a task that computes
//! between accesses is scanned on schedule, one that sleeps hardly at all.
//! 160 accesses per 100 ms of computing reach a given page about every
//! 10 s, long after the scanner protected it, so the kernel refuses most
//! faults on latency, the page stays on the slow node and the next pass
//! protects it again: measured here, about five protections per page in
//! 120 s on 6.12 and 7.x. Each fault's first-scan stamp (the kernel's,
//! from the protecting pass) then often lies before a later pass that
//! found the PTE still PROT_NONE (the latest-scan stamp of the RFC's
//! patch 2/2), and refused pages fault again.
use std::path::Path;

use anyhow::{ensure, Context, Result};
use numa_core::model::shadow::ShadowReport;
use numa_core::model::totals::Report;

use crate::kernels::Series;

mod sampling;
use crate::results::read_report;

/// The guest script (`$RESULTS` is the test's results directory).
///
/// A second recorder runs beside the shadow with a `--map-budget` that
/// leaves room for exactly one slow folio in 8 (doctor's plan: the other
/// maps' bytes plus an eighth of the slow PFNs' slots, in KiB rounded up),
/// so the sampled and the full run see the same faults.
pub(super) const SCRIPT: &str = concat!(
    include_str!("passes/budget.sh"),
    fill_dram!(400, 240),
    include_str!("passes/run.sh")
);

/// At least one fault per page of the region: the scanner protected all
/// of it once, and the assertions below are about what came after.
const MIN_FAULTS: u64 = 16384;
/// Faults on folios protected three times or more: the stated minimum of
/// re-protection (measured in 100-s runs: 21,333 on 6.12, 29,979 on 6.1;
/// 9,720 of 6.12's within its first 70 s, the run's length now).
const MIN_THIRD_PROTECTIONS: u64 = 1000;

pub(super) fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    let stats: Report = read_report(dir, "stats.json")?;
    let shadow: ShadowReport = read_report(dir, "shadow.json")?;
    let faults = stats.hint_faults;
    let p = &stats.checks.faults_by_protections;
    let (once, twice, more) = (p.once, p.twice, p.three_or_more);
    let newer = stats.checks.latest_scan_newer_than_stamp;
    println!(
        "    passes: {faults} hint faults; by protections of their folio: {once} once, {twice} twice, {more} three or more; latest scan newer than the stamp on {newer}"
    );
    ensure!(
        faults >= MIN_FAULTS,
        "{faults} hint faults, fewer than one per page of the region ({MIN_FAULTS}): the scanner did not cover it"
    );
    ensure!(
        more >= MIN_THIRD_PROTECTIONS,
        "only {more} faults on folios protected three times or more (at least {MIN_THIRD_PROTECTIONS} expected)"
    );
    ensure!(
        newer > 0,
        "no fault had a latest-scan stamp newer than its first-scan stamp"
    );
    check_refaults(&shadow)?;
    sampling::check(dir, &stats)
}

/// Pages the kernel refused fault again, among them pages the fault-count
/// model would have promoted.
fn check_refaults(shadow: &ShadowReport) -> Result<()> {
    let refused = shadow.kernel.reject_latency;
    let fc = shadow
        .models
        .iter()
        .find(|m| m.name == "fault-count")
        .context("no fault-count model in the shadow report")?;
    let model_only = fc.refault_after_model_only.refaulted;
    let neither = shadow.refault_after_neither.refaulted;
    println!(
        "    passes: kernel refused {refused} on latency; refaulted after fault-count only {model_only}, after neither {neither}"
    );
    ensure!(refused > 0, "the kernel refused nothing on latency");
    ensure!(
        model_only > 0,
        "no page fault-count would have promoted and the kernel refused faulted again"
    );
    Ok(())
}
