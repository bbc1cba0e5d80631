//! What the shadow engine reports: per-model decisions and agreement, the
//! kernel's own counts, refault evidence and the per-process and node-pair
//! tables.
use std::collections::BTreeMap;

use serde::Serialize;

#[derive(Debug, Default, Clone, Serialize)]
pub struct Agreement {
    pub both: u64,
    pub kernel_only: u64,
    pub model_only: u64,
    pub neither: u64,
}

impl Agreement {
    pub fn agree_pct(&self) -> f64 {
        let total = self.both + self.kernel_only + self.model_only + self.neither;
        if total == 0 {
            100.0
        } else {
            100.0 * (self.both + self.neither) as f64 / total as f64
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RefaultReport {
    /// Refusals followed (distinct pages at the time of refusal).
    pub pages: u64,
    /// Of those, faulted again before the end of the window.
    pub refaulted: u64,
    pub refaulted_pct: f64,
    pub delay_ms_p50: Option<u64>,
    pub delay_ms_p90: Option<u64>,
    /// Refusals not followed because the tracking table was full.
    pub untracked: u64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct KernelCounts {
    pub promote: u64,
    pub reject_latency: u64,
    pub reject_rate_limit: u64,
    pub reject_other: u64,
    pub free_space: u64,
    pub migrate_success: u64,
    pub migrate_fail: u64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct ProcessRow {
    pub pid: u32,
    pub comm: String,
    pub hint_faults: u64,
    pub decisions: u64,
    pub kernel_promote: u64,
    pub reject_latency: u64,
    /// Would-promote per model, in model order.
    pub model_promote: Vec<u64>,
    /// Of the decisions the kernel refused, those each model would have
    /// promoted (model order): what the model would change for it.
    pub model_promote_refused: Vec<u64>,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct NodePairRow {
    pub src_node: i32,
    pub dst_node: i32,
    pub decisions: u64,
    pub kernel_promote: u64,
    pub model_promote: Vec<u64>,
}

/// The benchmark counters a model projects for the window: what the
/// kernel's vmstat and the RFC's tables would have shown had the model
/// decided every fault numatrace kept (a lower bound under `--sample` or
/// filters). Pages where vmstat counts pages.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Projected {
    /// Pages the model would promote (pgpromote_success if every
    /// migration succeeded; the free-space shortcut's included).
    pub promote_pages: u64,
    /// Pages past the threshold, rate limited or not (pgpromote_candidate).
    pub candidate_pages: u64,
    /// Faults rejected by the threshold (the RFC's "rejected due to hint
    /// fault latency being higher than threshold").
    pub reject_threshold: u64,
    /// Faults past the threshold rejected by the rate limit.
    pub reject_rate_limit: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelReport {
    pub name: String,
    pub params: BTreeMap<String, String>,
    pub promote: u64,
    pub reject: u64,
    pub reasons: BTreeMap<&'static str, u64>,
    pub agreement: Agreement,
    pub agreement_pct: f64,
    /// Pages this model wanted and the kernel refused: faulted again later?
    pub refault_after_model_only: RefaultReport,
    pub threshold: Option<f64>,
    pub projected: Projected,
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencySample {
    pub latency_ms: u32,
    pub threshold_ms: u32,
    pub promoted: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ShadowReport {
    pub duration_s: f64,
    pub hint_faults: u64,
    pub decisions: u64,
    /// The decisions the models judged: those on followed folios. Every
    /// model figure is over these; with per-folio sampling they are a
    /// sample of `decisions`, and `sampling` says how to scale and how far
    /// to trust them.
    pub judged_decisions: u64,
    pub sampling: Option<crate::sampling::SampledShadow>,
    pub kernel: KernelCounts,
    pub models: Vec<ModelReport>,
    /// Pages the kernel refused and no model wanted: faulted again later?
    pub refault_after_neither: RefaultReport,
    pub latency_threshold_samples: Vec<LatencySample>,
    pub processes: Vec<ProcessRow>,
    pub node_pairs: Vec<NodePairRow>,
    pub drops: u64,
    pub evidence_note: &'static str,
}

pub const EVIDENCE_NOTE: &str = "A refusal followed by another hint fault on the same page means the page was \
still being accessed after the kernel kept it on slow memory: evidence that promoting it would have served later \
accesses from DRAM. It is a lower bound on reuse (a page is seen again only when the scanner re-protects it, so \
accesses between scans are invisible), it cannot show what the promotion would have cost (DRAM pressure, demotions, \
migration bandwidth), and pages refaulting after a promotion by another path are not counted here.";
