//! The promotion funnel's verdicts on workloads shaped to stop their
//! slow-tier pages at a known stage, each recorded on its own:
//!
//! - `promoted`: a small region accessed without pause while DRAM is free.
//! - `refused`: DRAM filled by another process, chunks with idle gaps, so
//!   each page's next access comes seconds after the scanner protected it,
//!   and `hot_threshold_ms` at 50, far below that even after the kernel
//!   doubles it (refused on latency); beside it a cold VMA, populated whole before
//!   the scanner first comes by and never touched again.
//! - `unscanned`: a 256 MiB VMA whose first chunk is populated at once and
//!   the rest only after the scanner's first two sequences over it, the
//!   only ones in which 6.7+ kernels scan a VMA whatever threads fault in
//!   it. Nothing in the rest is protected, so no hint fault ever marks the
//!   VMA as the scanning thread's. 64 idle threads started after it hold
//!   off the kernel's two ways of scanning such a VMA anyway: a forced
//!   rescan every (threads) sequences, and, when a walk finds nothing
//!   else, a forced scan of the first skipped VMA in address order, which
//!   their stacks (mapped below it) are. Every later visit is a
//!   `pid_inactive` skip. (With 256 threads the walks grow costly enough
//!   that the kernel's scan throttle stops visiting the process at all on
//!   7.x: no skip, and the protected first chunk reads as cold.) On 6.1,
//!   which has no such skip (and no skip tracepoint), the report must say
//!   that the skip stage cannot be seen there.
//!
//! The `refused` recording is replayed too: the shadow report's funnel
//! must give the verdicts `stats` gives.
use std::path::Path;

use anyhow::{ensure, Context, Result};
use numa_core::model::funnel::ProcessFunnel;
use numa_core::model::totals::Report;

use crate::kernels::Series;
use crate::results::{read_report, text};
use numa_core::workload::Summary;

pub(super) const SCRIPT: &str = include_str!("funnel.sh");

pub(super) fn check(dir: &Path, _console: &str, series: Series) -> Result<()> {
    let promoted = Run::read(dir, "promoted")?;
    promoted.expect_process("promoted")?;
    let refused = Run::read(dir, "refused")?;
    refused.expect_process("refused_latency")?;
    let [cold, _] = refused
        .workload
        .cold_vma
        .context("the refused run's workload names no cold VMA")?;
    refused.expect_vma(cold, "cold")?;
    check_replay(dir, &refused)?;
    let unscanned = Run::read(dir, "unscanned")?;
    if series == Series::V6_1 {
        ensure!(
            unscanned.stats.skips_observable == Some(false),
            "6.1 has no sched_skip_vma_numa, but the report's skips_observable is {:?}",
            unscanned.stats.skips_observable
        );
        let txt = text(dir, "unscanned.txt")?;
        ensure!(
            txt.contains("skips not observable on this kernel"),
            "6.1: stats does not say the skip stage cannot be seen:\n{txt}"
        );
        return Ok(());
    }
    ensure!(
        unscanned.stats.skips_observable == Some(true),
        "the skip tracepoint was not attached: skips_observable is {:?}",
        unscanned.stats.skips_observable
    );
    let p = unscanned.expect_process("not_scanned")?;
    let verdict = &p.verdict;
    ensure!(
        verdict.contains("pid_inactive"),
        "the unscanned VMA's verdict names another reason than pid_inactive: {verdict}"
    );
    // The workload fences its mapping with guard pages, so the kernel's
    // VMA is exactly its range.
    let vma = serde_json::to_value(unscanned.workload.slow_vma)?;
    let verdict_vma = serde_json::to_value(p.verdict_vma)?;
    ensure!(
        verdict_vma == vma,
        "the verdict is about VMA {verdict_vma}, the workload's is {vma}"
    );
    Ok(())
}

/// One recording: its `stats --json` and its workload's summary.
struct Run {
    name: &'static str,
    stats: Report,
    workload: Summary,
}

impl Run {
    fn read(dir: &Path, name: &'static str) -> Result<Run> {
        Ok(Run {
            name,
            stats: read_report(dir, &format!("{name}.json"))?,
            workload: read_report(dir, &format!("{name}-workload.json"))?,
        })
    }

    /// The workload's process in the funnel, with verdict `kind`.
    fn expect_process(&self, kind: &str) -> Result<&ProcessFunnel> {
        let p = process(&self.stats.funnel, &self.workload).with_context(|| {
            format!("{}: the workload's process is not in the funnel", self.name)
        })?;
        ensure!(
            p.verdict_kind == kind,
            "{}: the workload's verdict is {:?} ({:?}), expected {kind}; its VMAs: {}",
            self.name,
            p.verdict_kind,
            p.verdict,
            vma_lines(p)
        );
        Ok(p)
    }

    /// The workload's VMA starting at `start`, with verdict `kind`.
    fn expect_vma(&self, start: u64, kind: &str) -> Result<()> {
        let p = process(&self.stats.funnel, &self.workload).context("no workload process")?;
        let vma = p.vmas.iter().find(|v| v.start == start).with_context(|| {
            format!(
                "{}: no funnel VMA starts at {start:#x}; its VMAs: {}",
                self.name,
                vma_lines(p)
            )
        })?;
        ensure!(
            vma.verdict_kind == kind,
            "{}: VMA {start:#x} is {:?} ({:?}), expected {kind}",
            self.name,
            vma.verdict_kind,
            vma.verdict
        );
        Ok(())
    }
}

/// The workload's process in a report's funnel.
fn process<'a>(funnel: &'a [ProcessFunnel], workload: &Summary) -> Option<&'a ProcessFunnel> {
    funnel.iter().find(|p| p.pid == workload.pid)
}

/// A process's VMAs and their verdicts, for a failure message.
fn vma_lines(p: &ProcessFunnel) -> String {
    p.vmas
        .iter()
        .map(|v| format!("\n  {:#x}-{:#x}: {:?}", v.start, v.end, v.verdict))
        .collect()
}

/// What this check reads of `replay --json`: the shadow report beside the
/// funnel of the same events (the binary's output type holds both).
#[derive(serde::Deserialize)]
struct Replay {
    funnel: Vec<ProcessFunnel>,
}

/// The shadow report of the same recording carries the same funnel.
fn check_replay(dir: &Path, refused: &Run) -> Result<()> {
    let replay: Replay = read_report(dir, "refused-replay.json")?;
    let shadow = process(&replay.funnel, &refused.workload)
        .context("the replay's funnel does not list the workload's process")?;
    let stats = process(&refused.stats.funnel, &refused.workload).context("no workload process")?;
    ensure!(
        shadow.verdict == stats.verdict,
        "replay's verdict {:?} differs from stats' {:?}",
        shadow.verdict,
        stats.verdict
    );
    Ok(())
}
