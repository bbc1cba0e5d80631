//! What the shadow engine reports: per-model decisions and agreement, the
//! kernel's own counts, refault evidence and the per-process and node-pair
//! tables.
//!
//! Two units: a count without a suffix is of folios (one per hint fault
//! record, as vmstat's numa_hint_faults counts), its `_pages` twin of the
//! same folios' pages (a THP's 512, as vmstat's pgpromote_success and
//! pgpromote_candidate count). Compare the pages with vmstat's page
//! counters.
use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Decisions by who would promote: the kernel, the model, both or
/// neither. Folios, and the same cells in pages.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Agreement {
    pub both: u64,
    pub kernel_only: u64,
    pub model_only: u64,
    pub neither: u64,
    pub both_pages: u64,
    pub kernel_only_pages: u64,
    pub model_only_pages: u64,
    pub neither_pages: u64,
}

impl Agreement {
    /// Adds `folios` decisions holding `pages` pages to the cell of
    /// (the kernel promoted, the model would).
    pub fn count(&mut self, kernel: bool, model: bool, folios: u64, pages: u64) {
        let (f, p) = match (kernel, model) {
            (true, true) => (&mut self.both, &mut self.both_pages),
            (true, false) => (&mut self.kernel_only, &mut self.kernel_only_pages),
            (false, true) => (&mut self.model_only, &mut self.model_only_pages),
            (false, false) => (&mut self.neither, &mut self.neither_pages),
        };
        *f += folios;
        *p += pages;
    }

    /// Of the decisions (folios), the percentage both sides agree on.
    pub fn agree_pct(&self) -> f64 {
        pct_agreed(self.both + self.neither, self.kernel_only + self.model_only)
    }

    /// Of the decisions' pages, the percentage both sides agree on.
    pub fn agree_pages_pct(&self) -> f64 {
        pct_agreed(
            self.both_pages + self.neither_pages,
            self.kernel_only_pages + self.model_only_pages,
        )
    }
}

/// 100 % with nothing to disagree on.
fn pct_agreed(agreed: u64, disagreed: u64) -> f64 {
    let total = agreed + disagreed;
    if total == 0 {
        100.0
    } else {
        100.0 * agreed as f64 / total as f64
    }
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct RefaultReport {
    /// Refusals followed: folios, one per refusal (a page address each,
    /// whatever the folio's size); `followed_pages` counts their pages.
    pub pages: u64,
    pub followed_pages: u64,
    /// Of those, faulted again before the end of the window: folios, and
    /// the pages of the folios that faulted (a THP still whole: 512).
    pub refaulted: u64,
    pub refaulted_pages: u64,
    /// `refaulted` of `pages`, and `refaulted_pages` of `followed_pages`.
    pub refaulted_pct: f64,
    pub refaulted_pages_pct: f64,
    pub delay_ms_p50: Option<u64>,
    pub delay_ms_p90: Option<u64>,
    /// Refusals not followed because the tracking table was full: folios,
    /// and their pages.
    pub untracked: u64,
    pub untracked_pages: u64,
}

/// The kernel's decisions and migrations: folios, and their pages.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct KernelCounts {
    pub promote: u64,
    pub promote_pages: u64,
    pub reject_latency: u64,
    pub reject_latency_pages: u64,
    pub reject_rate_limit: u64,
    pub reject_rate_limit_pages: u64,
    pub reject_other: u64,
    pub reject_other_pages: u64,
    /// Of `promote`, by the free-space shortcut.
    pub free_space: u64,
    pub free_space_pages: u64,
    pub migrate_success: u64,
    pub migrate_success_pages: u64,
    pub migrate_fail: u64,
    pub migrate_fail_pages: u64,
}

/// One process: folios, and their pages beside.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct ProcessRow {
    pub pid: u32,
    pub comm: String,
    pub hint_faults: u64,
    pub hint_fault_pages: u64,
    pub decisions: u64,
    pub decision_pages: u64,
    pub kernel_promote: u64,
    pub kernel_promote_pages: u64,
    pub reject_latency: u64,
    pub reject_latency_pages: u64,
    /// Would-promote per model, in model order.
    pub model_promote: Vec<u64>,
    pub model_promote_pages: Vec<u64>,
    /// Of the decisions the kernel refused, those each model would have
    /// promoted (model order): what the model would change for it.
    pub model_promote_refused: Vec<u64>,
    pub model_promote_refused_pages: Vec<u64>,
}

/// Decisions from one node to another: folios, and their pages beside.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct NodePairRow {
    pub src_node: i32,
    pub dst_node: i32,
    pub decisions: u64,
    pub decision_pages: u64,
    pub kernel_promote: u64,
    pub kernel_promote_pages: u64,
    /// Would-promote per model, in model order.
    pub model_promote: Vec<u64>,
    pub model_promote_pages: Vec<u64>,
}

/// The benchmark counters a model projects for the window: what the
/// kernel's vmstat and the RFC's tables would have shown had the model
/// decided every fault numatrace kept (a lower bound under `--sample` or
/// filters). Pages to compare with vmstat, folios beside.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Projected {
    /// Pages the model would promote (pgpromote_success if every
    /// migration succeeded; the free-space shortcut's included). Their
    /// folios are the model's `promote`.
    pub promote_pages: u64,
    /// Past the threshold, rate limited or not: pages (pgpromote_candidate)
    /// and folios.
    pub candidate_pages: u64,
    pub candidate_folios: u64,
    /// Faults (folios) rejected by the threshold (the RFC's "rejected due
    /// to hint fault latency being higher than threshold"), and their pages.
    pub reject_threshold: u64,
    pub reject_threshold_pages: u64,
    /// Faults (folios) past the threshold rejected by the rate limit, and
    /// their pages.
    pub reject_rate_limit: u64,
    pub reject_rate_limit_pages: u64,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct ModelReport {
    pub name: String,
    pub params: BTreeMap<String, String>,
    /// Decisions (folios) the model would promote; their pages are
    /// `projected.promote_pages`.
    pub promote: u64,
    /// Decisions (folios) the model would refuse, and their pages.
    pub reject: u64,
    pub reject_pages: u64,
    /// Decisions (folios) by the model's reason, and their pages.
    pub reasons: BTreeMap<Cow<'static, str>, u64>,
    pub reasons_pages: BTreeMap<Cow<'static, str>, u64>,
    pub agreement: Agreement,
    /// Agreement over the decisions (folios), and over their pages.
    pub agreement_pct: f64,
    pub agreement_pages_pct: f64,
    /// The same cells over the faults whose folio another process's scan
    /// stamped (shared folios).
    pub agreement_stamped_elsewhere: Agreement,
    /// Pages this model wanted and the kernel refused: faulted again later?
    pub refault_after_model_only: RefaultReport,
    pub threshold: Option<f64>,
    pub projected: Projected,
    /// The kernel's promotions that reclaim demoted again (its
    /// ping-pongs): how many this model would also have made.
    #[serde(default)]
    pub pingpong: PingpongCost,
}

/// Of the kernel's ping-pongs among the decisions the models judged, those
/// a model would also have promoted (its cost in bounced folios) and those
/// it would have refused (avoided). What a model promotes that the kernel
/// refused stays on the slow tier in the trace: whether it would have
/// bounced is not observable.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PingpongCost {
    pub shared: u64,
    pub avoided: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencySample {
    pub latency_ms: u32,
    pub threshold_ms: u32,
    pub promoted: bool,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct ShadowReport {
    pub duration_s: f64,
    /// Hint faults and tiering decisions: folios, and their pages.
    pub hint_faults: u64,
    pub hint_fault_pages: u64,
    pub decisions: u64,
    pub decision_pages: u64,
    /// The decisions the models judged: those on followed folios. Every
    /// model figure is over these; with per-folio sampling they are a
    /// sample of `decisions`, and `sampling` says how to scale and how far
    /// to trust them.
    pub judged_decisions: u64,
    pub judged_decision_pages: u64,
    pub sampling: Option<crate::sampling::SampledShadow>,
    pub kernel: KernelCounts,
    pub models: Vec<ModelReport>,
    /// Pages the kernel refused and no model wanted: faulted again later?
    pub refault_after_neither: RefaultReport,
    pub latency_threshold_samples: Vec<LatencySample>,
    pub processes: Vec<ProcessRow>,
    pub node_pairs: Vec<NodePairRow>,
    /// Records (of any kind) lost to a full ring.
    pub drops: u64,
    pub evidence_note: Cow<'static, str>,
    /// The folios' trips across tiers: the kernel's ping-pongs.
    #[serde(default)]
    pub lifecycle: crate::model::lifecycle::LifecycleReport,
}

pub const EVIDENCE_NOTE: &str = "A refusal followed by another hint fault on the same page means the page was \
still being accessed after the kernel kept it on slow memory: evidence that promoting it would have served later \
accesses from DRAM. It is a lower bound on reuse (a page is seen again only when the scanner re-protects it, so \
accesses between scans are invisible), it cannot show what the promotion would have cost (DRAM pressure, demotions, \
migration bandwidth), and pages refaulting after a promotion by another path are not counted here.";
