//! What `top`'s background aggregator publishes every refresh interval and
//! its UI draws: plain data, cheap to clone, serialisable (`top --once
//! --json`), here so that readers of that JSON need not depend on the TUI.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One published state of everything `top` shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Frame {
    /// Increases with every publication.
    pub seq: u64,
    /// `live` or `replay FILE`.
    pub source: String,
    /// Set when the source ended (trace end, duration, command exit).
    pub ended: Option<String>,
    /// Seconds of event time since the first snapshot.
    pub elapsed_s: f64,
    /// Event time covered by the rates of this frame, in seconds.
    pub interval_s: f64,
    /// Events aggregated so far (faults, scans, skips).
    pub events: u64,
    pub header: HeaderView,
    pub warnings: Warnings,
    pub rates: Vec<RateSeries>,
    pub models: Vec<ModelView>,
    /// Every process with hint faults, busiest first.
    pub processes: Vec<ProcRow>,
    /// The same columns summed over all processes.
    pub system: ProcRow,
    /// The same columns per cgroup (v2): every cgroup whose tasks took
    /// hint faults or were scanned, busiest first (`pid` 0, `cgroup` set).
    #[serde(default)]
    pub cgroups: Vec<ProcRow>,
    /// Latency and fault-count histograms of the focused selection.
    pub hist: HistView,
    pub detail: Option<Detail>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HeaderView {
    pub kernel: String,
    pub numa_balancing: Option<u32>,
    /// e.g. `10/10 hooks: fentry 3, fexit 5, tracepoint 2`.
    pub plan: String,
    /// Hooks that are missing, refused or run through the kprobe fallback.
    pub degraded: Vec<String>,
    pub tiers: Vec<TierView>,
    pub hot_threshold_ms: Option<u64>,
    pub rate_limit_mbps: Option<u64>,
    /// `scan delay 1000 ms, period 1000-60000 ms, size 256 MB`.
    pub scan: String,
    /// The kernel's threshold in force per destination node, from the most
    /// recent decisions that exposed it.
    pub kernel_threshold_ms: BTreeMap<i32, u32>,
    pub sample_every: u64,
    /// One slow folio in this many followed, and the share of slow PFNs
    /// (per-folio sampling under `--map-budget`; 1 and 1.0 when all are).
    pub folio_rate: u64,
    pub folio_coverage: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TierView {
    pub id: u32,
    pub nodes: Vec<NodeMem>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NodeMem {
    pub id: u32,
    pub total_kb: u64,
    pub free_kb: u64,
    pub cpus: usize,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Warnings {
    pub ring_drops: u64,
    /// Probe runs the kernel skipped (preempted on their CPU).
    pub runs_missed: u64,
    pub evictions: u64,
    pub stamp_misses: u64,
}

/// One system rate with its recent history (one point per publication).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RateSeries {
    pub name: String,
    /// What it counts per second: `folios` (one per hint fault, a THP's
    /// too), `pages` (as vmstat counts them, a THP is 512), or `%`.
    pub unit: String,
    /// Per second, or a percentage for `local %`.
    pub current: f64,
    /// Oldest first, at most [`crate::agg::HISTORY`] points.
    pub history: Vec<f64>,
    /// `% local` for hint faults; empty otherwise.
    pub note: String,
}

/// Which axis a model's threshold belongs to.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    /// Scan-to-fault latency, ms.
    #[default]
    LatencyMs,
    /// Hint faults between scan and fault.
    FaultDelta,
    /// Time between two faults on a page, ms (drawn on the latency axis).
    WindowMs,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ModelView {
    pub name: String,
    /// Column heading, at most 6 characters.
    pub short: String,
    pub params: String,
    pub threshold: Option<f64>,
    pub axis: Axis,
    /// Would-promote per second, system-wide, current.
    pub promote_s: f64,
    pub agree_pct: Option<f64>,
}

/// One process's rates: hint faults and decisions in folios (one per
/// fault, a THP's too), `promoted_pages_s` in pages.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcRow {
    pub pid: u32,
    pub comm: String,
    pub faults_s: f64,
    pub local_pct: Option<f64>,
    pub decisions_s: f64,
    /// Folios the kernel decided to promote, per second.
    pub promoted_s: f64,
    /// Pages migrated to the top tier per second (vmstat's
    /// pgpromote_success counts these).
    pub promoted_pages_s: f64,
    pub rej_latency_s: f64,
    pub rej_rate_limit_s: f64,
    /// Would-promote per second, per model (frame.models order).
    pub model_s: Vec<f64>,
    /// Agreement with the kernel since start, per model.
    pub agree_pct: Vec<Option<f64>>,
    /// Scan-to-fault latency quantiles since start, ms (bucket upper bounds).
    pub lat_p50_ms: Option<f64>,
    pub lat_p99_ms: Option<f64>,
    /// Median per-process fault-count delta since start (bucket upper bound).
    pub delta_p50: Option<u64>,
    pub faults_total: u64,
    /// Of its promotions since start, the share demoted again within the
    /// lifecycle's window (ping-pong), %.
    #[serde(default)]
    pub pingpong_pct: Option<f64>,
    /// Resident pages per node (live, from /proc/PID/numa_maps).
    pub resident: Option<Vec<(u32, u64)>>,
    /// Where its slow-tier pages stop, in a few words (the funnel's
    /// verdict): `unscanned 42 s: pid_inactive`, `cold`, `promoted`, ...
    pub verdict: Option<String>,
    /// The cgroup (v2) path below the cgroup2 mount: a process's (of its
    /// latest fault or scan), or a cgroup row's own; `id N` when no
    /// cgroup has that id here (removed since, or a trace of another boot).
    #[serde(default)]
    pub cgroup: Option<String>,
}

/// Log2 histograms of one selection, split by the kernel's decision.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HistView {
    /// `all processes` or `PID COMM`.
    pub title: String,
    pub pid: Option<u32>,
    /// Scan-to-fault latency in ns, bucket b = (2^(b-1), 2^b].
    pub latency_promoted: Vec<u64>,
    pub latency_rejected: Vec<u64>,
    /// Per-process hint faults between scan and fault.
    pub delta_promoted: Vec<u64>,
    pub delta_rejected: Vec<u64>,
    /// The kernel's threshold in force (largest over nodes), else hot_threshold_ms.
    pub kernel_threshold_ms: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Detail {
    pub pid: u32,
    pub comm: String,
    pub faults_total: u64,
    /// From /proc/PID/maps when live; `None` in replay or when unreadable.
    pub vmas: Option<Vec<VmaRow>>,
    pub scan_passes: u64,
    pub ptes_updated: u64,
    /// Scanned ranges (by start address), most recently scanned first.
    pub ranges: Vec<RangeRow>,
    /// VMA skips by reason (sched_skip_vma_numa).
    pub skips: BTreeMap<String, u64>,
    pub heat: Heat,
    /// The funnel's verdict for the process, and for each of its VMAs.
    pub verdict: Option<String>,
    pub vma_verdicts: Vec<VmaVerdict>,
    /// What became of its promotions (demoted again by reclaimer,
    /// ping-pong): the lifecycle's record of the process.
    #[serde(default)]
    pub trips: Option<crate::model::lifecycle::TripCounts>,
}

/// One VMA's verdict: a range a skip named (`named`), else the span of
/// the scanner's passes there.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct VmaVerdict {
    pub start: u64,
    pub end: u64,
    pub named: bool,
    pub verdict: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct VmaRow {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub path: String,
    /// Hint faults in the 2 MiB chunks overlapping the VMA.
    pub faults: u64,
    pub scan_passes: u64,
    pub ptes_updated: u64,
    /// Latest skip reason the kernel reported for this VMA.
    pub skip: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RangeRow {
    pub start: u64,
    pub end: u64,
    pub passes: u64,
    pub ptes_updated: u64,
    pub faults: u64,
    /// Seconds of event time since its latest pass.
    pub age_s: f64,
    pub skip: Option<String>,
}

/// Hint faults per address region (rows, low addresses first) per
/// publication interval (columns, oldest first).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Heat {
    pub rows: Vec<HeatRow>,
    /// Columns in each row.
    pub slots: usize,
    pub max: u32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HeatRow {
    pub start: u64,
    pub end: u64,
    pub faults: Vec<u32>,
    /// The scanner passed over the region in that interval.
    pub scanned: Vec<bool>,
}
