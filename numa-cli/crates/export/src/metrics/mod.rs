//! The exported metric set as plain data ([`MetricsState`], built by the
//! pipeline once per kernel snapshot) and its encodings: OpenMetrics text
//! through `prometheus-client`'s encoder ([`encode_openmetrics`]), and the
//! classic Prometheus text format (0.0.4) converted from it line by line
//! ([`to_prometheus_text`]), because `prometheus-client` only speaks
//! OpenMetrics.
//!
//! Pure: no IO, no clock.
mod encode;
mod text;

use std::collections::BTreeMap;

pub use encode::{encode_openmetrics, encode_openmetrics_with};
pub use text::{to_prometheus_text, Format, OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE};

/// Buckets of the in-kernel log2 histograms (`numa_ebpf_common::HIST_BUCKETS`).
pub const HIST_BUCKETS: usize = 64;

/// Labels of `numatrace_info`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Info {
    pub version: String,
    pub kernel: String,
    /// `fentry`, `kprobe` or `mixed` (how the required hooks are attached);
    /// `replay:<mode>` when serving a recording.
    pub attach_mode: String,
}

/// One in-kernel log2 histogram (one outcome): bucket `b` counts values
/// `v` with `2^(b-1) < v <= 2^b` (b = 0: 0 and 1), `sum` in the recorded
/// unit (ns or faults).
#[derive(Debug, Clone, PartialEq)]
pub struct OutcomeHist {
    pub outcome: &'static str,
    pub buckets: Vec<u64>,
    pub sum: u64,
}

impl OutcomeHist {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// What the BPF counters and histograms say, since the first snapshot
/// (the window `numatrace stats` reports).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelMetrics {
    /// One per fault (a folio's PTE or a PMD), as vmstat's numa_hint_faults.
    pub hint_faults: u64,
    /// Folios: one per migrate_misplaced_* call ([`MigratedPages`] has
    /// their pages).
    pub migrations_success: u64,
    pub migrations_fail: u64,
    pub ring_drops: u64,
    pub runs_missed: u64,
    pub map_evictions: u64,
    /// Hint faults on slow-node folios per-folio sampling does not follow.
    pub unfollowed_faults: u64,
    /// The per-folio plan: budget, the kernel's figure for all maps, one
    /// folio in `sample_rate` followed, coverage of the slow PFNs.
    pub map_budget_bytes: u64,
    pub map_bytes: u64,
    pub folio_sample_rate: u64,
    pub folio_coverage: f64,
    /// Scan-to-fault latency in ns, one per outcome.
    pub latency_ns: Vec<OutcomeHist>,
    /// Per-process hint faults between scan and fault, one per outcome.
    pub fault_delta: Vec<OutcomeHist>,
}

/// Pages of the folios the kernel tried to migrate on hint faults, from
/// the fault records (scaled by `--sample`): the in-kernel migration
/// counters count folios, vmstat counts pages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigratedPages {
    pub success: u64,
    pub fail: u64,
    /// Of `success`, from a lower tier to the top tier: what vmstat's
    /// pgpromote_success counts.
    pub promoted: u64,
}

/// Decisions of one (result, reason, node pair): `count` folios (one per
/// hint fault) holding `pages` pages.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub promote: bool,
    pub reason: &'static str,
    pub src_node: i32,
    pub dst_node: i32,
    pub count: u64,
    pub pages: u64,
}

/// A shadow model's verdicts: decisions (folios), and their pages beside.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelMetrics {
    pub model: String,
    pub promote: u64,
    pub both: u64,
    pub kernel_only: u64,
    pub model_only: u64,
    pub neither: u64,
    pub promote_pages: u64,
    pub both_pages: u64,
    pub kernel_only_pages: u64,
    pub model_only_pages: u64,
    pub neither_pages: u64,
}

/// One process: hint faults and decisions (folios), decisions' pages.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessMetrics {
    pub pid: u32,
    pub comm: String,
    pub hint_faults: u64,
    pub promote: u64,
    pub reject: u64,
    pub promote_pages: u64,
    pub reject_pages: u64,
    /// The funnel's verdict (`not_scanned`, `cold`, `refused_latency`, ...;
    /// empty while it has none).
    pub verdict: &'static str,
    /// Demotions of the folios it promoted, by reclaimer, and of those the
    /// ping-pongs (demoted within the lifecycle's window).
    pub demoted_by: BTreeMap<String, u64>,
    pub pingpong: u64,
}

/// One cgroup of `--per-cgroup` (or the rest summed, `cgroup` "other"):
/// page counts as its memory.stat names them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CgroupMetrics {
    /// Its path below the cgroup2 mount, `id N` when none was found, or
    /// `other` for the cgroups past the top.
    pub cgroup: String,
    pub hint_faults: u64,
    pub promote: u64,
    pub reject: u64,
    /// Pages migrated from a lower tier to the top tier (pgpromote_success).
    pub promoted: u64,
    /// Where its slow-tier pages stop (the funnel's verdict kind; empty
    /// for `other`).
    pub verdict: &'static str,
}

/// The promotion funnel's stages a scrape can count: where slow-tier pages
/// stop, system-wide.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FunnelMetrics {
    /// The scanner's passes and the PTEs it protected (BPF counters).
    pub scan_passes: u64,
    pub ptes_protected: u64,
    /// VMAs the scanner skipped, by the kernel's reason (skip events).
    pub vma_skips: Vec<(String, u64)>,
    /// The most active processes (the funnel's report) by verdict.
    pub processes_by_verdict: Vec<(&'static str, u64)>,
}

/// Promotions undone by demotion (see numa_core::model::lifecycle).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pingpong {
    pub folios: u64,
    pub pages: u64,
    pub repromotions: u64,
    /// Time on the top tier, ns, log2 buckets.
    pub residency_ns: Vec<u64>,
    pub residency_sum_ns: u64,
    /// Folios are followed 1 in this many (1: every one).
    pub sampled_one_in: u64,
}

/// Everything one scrape shows. Built by the pipeline, read by the HTTP
/// side and the textfile writer; never mutated after publication.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsState {
    /// Increases with every published state (cache key of the encodings).
    pub generation: u64,
    pub info: Info,
    /// `None` until the first kernel snapshot.
    pub kernel: Option<KernelMetrics>,
    pub migrated_pages: MigratedPages,
    pub decisions: Vec<Decision>,
    pub models: Vec<ModelMetrics>,
    pub processes: Vec<ProcessMetrics>,
    pub cgroups: Vec<CgroupMetrics>,
    pub funnel: FunnelMetrics,
    /// Pages reclaim demoted, by reclaimer (demotion events).
    pub demotions: Vec<(String, u64)>,
    /// Promotions demoted again within the window.
    pub pingpong: Pingpong,
    /// System-wide NUMA vmstat counters (`/proc/vmstat`, since boot).
    pub vmstat: Vec<(String, u64)>,
    /// Per-node vmstat counters (`/sys/devices/system/node/nodeN/vmstat`,
    /// since boot); live runs only.
    pub node_vmstat: Vec<(u32, Vec<(String, u64)>)>,
    pub snapshots: u64,
    pub events: u64,
    /// Wall-clock time of the last snapshot (Unix seconds), 0 before any.
    pub last_snapshot_unix_s: f64,
}

/// `le` of bucket `b` in the exported unit: `2^b / scale` (scale 1e9 turns
/// ns into seconds). f64 division of two exact values is correctly
/// rounded, so this is the f64 nearest to the true boundary.
pub fn bucket_le(b: usize, scale: f64) -> f64 {
    (1u64 << b.min(63)) as f64 / scale
}

/// Bucket list for `encode_histogram` (per-bucket counts, the encoder
/// accumulates): buckets 0..=62 with their exact upper bounds, and the
/// last kernel bucket (63, which also takes every larger value) as `+Inf`.
pub fn prometheus_buckets(buckets: &[u64], scale: f64) -> Vec<(f64, u64)> {
    let count = |b: usize| buckets.get(b).copied().unwrap_or(0);
    (0..HIST_BUCKETS - 1)
        .map(|b| (bucket_le(b, scale), count(b)))
        .chain(std::iter::once((f64::MAX, count(HIST_BUCKETS - 1))))
        .collect()
}

#[cfg(test)]
mod tests;
