//! Which processes and stages the funnel chart draws; the axes size it
//! from the same choice.
use numa_core::model::funnel::{ProcessFunnel, StageRow};

/// A funnel stage's count in a process's stages.
pub(super) type StageValue = fn(&StageRow) -> u64;

/// The funnel's stages as the chart shows them, a value per process: pages
/// (a THP's 512) on one axis, the VMA skips in records.
pub(super) const FUNNEL_STAGES: [(&str, StageValue); 8] = [
    ("VMA skips", |s| s.skips.values().map(|k| k.count).sum()),
    ("PTEs protected", |s| s.ptes_protected),
    ("faulted", |s| s.slow_fault_pages),
    ("decided", |s| s.decision_pages),
    ("promoted", |s| s.promoted_pages),
    ("refused: latency", |s| s.rejected_latency_pages),
    ("refused: rate limit", |s| s.rejected_rate_limit_pages),
    ("refused: other", |s| s.rejected_other_pages),
];

/// Processes the funnel chart draws (the report's busiest).
const FUNNEL_PROCESSES: usize = 3;

/// The processes the funnel chart draws: the busiest with slow-tier
/// activity.
pub(super) fn funnel_rows(rows: &[ProcessFunnel]) -> Vec<&ProcessFunnel> {
    rows.iter()
        .filter(|p| p.verdict_kind != "quiet")
        .take(FUNNEL_PROCESSES)
        .collect()
}
