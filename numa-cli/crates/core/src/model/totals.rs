//! Totals over an event stream: what `numatrace stats` prints. Pure: fed
//! events and kernel snapshots, never reads the clock or the system.
use std::borrow::Cow;
use std::collections::BTreeMap;

use super::named;

use numa_ebpf_common::{Counter, FaultEvent, Outcome, OUTCOMES, OUTCOME_BASE};
use serde::Serialize;

use super::{
    cgroups::{CgroupRow, Cgroups},
    funnel::{Funnel, ProcessFunnel},
    log2::{BucketCount, Log2Hist},
    proctable::ProcTable,
    scans::ScanIndex,
    window::Window,
};
use crate::decode::{Event, Snapshot};
use crate::params::KernelHotness;
use crate::sampling::Sampling;

/// Kernel and numatrace latencies further apart than this are counted.
pub const LATENCY_GAP_MS: u64 = 50;

/// Aggregates events; `report` turns them into [`Report`].
#[derive(Debug, Default)]
pub struct Totals {
    pub faults: u64,
    pub decisions: u64,
    pub promotes: u64,
    pub outcomes: [u64; OUTCOMES],
    pub migrate_ok: u64,
    pub migrate_fail: u64,
    pub scan_ranges: u64,
    pub scan_ptes: u64,
    pub vma_skips: BTreeMap<String, u64>,
    pub demotions: super::demotions::Demotions,
    pub lifecycle: super::lifecycle::Lifecycle,
    pub latency_ns: [Log2Hist; OUTCOMES],
    pub delta_mm: [Log2Hist; OUTCOMES],
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: u64,
    /// Faults whose stamp was a first scan while a later range scan also
    /// covered the page (the kernel's stamp is older than the latest scan).
    pub latest_scan_newer: u64,
    /// Faults with a stamp where a covering range scan was known.
    pub latest_scan_known: u64,
    /// Stamped faults by how often the scanner had protected their folio
    /// while followed: once, twice, three times or more.
    pub protections: [u64; 3],
    /// Most negative / largest checks for the fidelity tests.
    pub max_latency_ns: u64,
    /// |kernel latency - numatrace latency| in ms, max over stamped decisions.
    pub max_kernel_latency_gap_ms: u64,
    /// Decisions with both latencies.
    pub kernel_latencies: u64,
    /// Decisions whose latencies differ by more than [`LATENCY_GAP_MS`].
    pub kernel_latency_gaps: u64,
    /// Decisions whose kernel input was read from the folio, and those
    /// where the folio held another value at the fault's entry.
    pub folio_access: u64,
    pub stamp_access_differs: u64,
    /// Slow-node faults on a folio protected again since its last fault:
    /// stamped from the pass that wrote its value, or not found.
    pub stamps_from_pass: u64,
    pub stamps_unmatched: u64,
    pub stamps_ambiguous: u64,
    /// Decisions whose exchange was inferred from the folio's change (its
    /// program's run skipped).
    pub exchanges_inferred: u64,
    /// Fault-count deltas inconsistent with sequence numbers (scan seq > fault seq).
    pub inconsistent_deltas: u64,
    /// Rejections on latency whose kernel latency was below the threshold.
    pub latency_rejects_below_threshold: u64,
    pub scans: ScanIndex,
    pub window: Window,
    /// Nodes the kernel treats as top tier (bit per node).
    pub toptier_mask: u64,
    /// Hint faults on folios of lower-tier nodes.
    pub slow_faults: u64,
    /// Stamps later than their fault (impossible unless the clock is wrong).
    pub negative_latencies: u64,
    /// Records sent at the thread's next fault, their end's probe run
    /// having been skipped (`LATE_END`).
    pub late_records: u64,
    /// Late records of failed migrations (`NO_ACCOUNT`) and of exiting
    /// threads (`AT_EXIT`).
    pub no_account_records: u64,
    pub exit_records: u64,
    /// The faults' folios in pages (see [`PageCounts`]).
    pub pages: PageCounts,
    pub patch: PatchInputs,
    pub funnel: Funnel,
    /// The same page counts per cgroup.
    pub cgroups: Cgroups,
}

/// Consistency of the fault-count patch's inputs the probes give (see
/// docs/kernel.md, "The fault-count patch, rule by rule").
#[derive(Debug, Default, Clone, Serialize, serde::Deserialize)]
pub struct PatchInputs {
    /// Slow-node hint faults with the patch's counter, and without it.
    pub faults_with_counter: u64,
    pub faults_without_counter: u64,
    /// The mm's counter checked per epoch: from a reset (`FAULT_COUNT_AFTER_RESET`)
    /// or the mm's first fault the probes counted, its PTE faults must
    /// carry the counts 1..=n, each once, in whatever order their records
    /// arrive (threads of one mm fault on several CPUs). Epochs checked,
    /// and those whose counts were not 1..=n.
    pub epochs_checked: u64,
    pub epochs_off: u64,
    /// Epochs begun by a reset the probes saw (a clone in the mm).
    pub epochs_after_reset: u64,
    /// PTE faults of a process whose first fault in the trace was not its
    /// mm's first (a trace begun mid-run), or before its first epoch, or
    /// of an epoch one of whose records arrived too long before its
    /// start to be kept: not checked.
    pub faults_unanchored: u64,
    /// PTE faults whose count arrived below one already seen in their
    /// epoch: records of concurrent threads crossing in the ring.
    pub faults_reordered: u64,
    /// Faults compared with an earlier fault's count (the fault-time
    /// exchange: no scan stamp in between).
    pub stored_by_a_fault: u64,
    /// Decisions past the free-space shortcut with and without the node's
    /// candidate count.
    pub threshold_path: u64,
    pub threshold_path_without_node_count: u64,
    /// Each process's epochs, judged and forgotten when it is gone.
    #[serde(skip)]
    epochs: Epochs,
}

/// Each process's mm, judged when the process is gone.
#[derive(Debug, Clone)]
struct Epochs(ProcTable<MmCounts>);

impl Default for Epochs {
    fn default() -> Self {
        Epochs(ProcTable::default().keep_dropped())
    }
}

/// Records of a process that came before its epoch's first (threads'
/// records cross in the ring) kept until that one arrives; past this many
/// the lowest in sequence goes (most likely a fault from before the
/// epoch: a process whose first hint fault was on a huge page takes PTE
/// faults before its first clone's reset begins one).
const MAX_EARLY: usize = 64;

/// One process's mm as the counter check sees it: the epoch being filled,
/// the one before (a record of it may still arrive after the reset), and
/// records that arrived before any epoch began.
#[derive(Debug, Default, Clone)]
struct MmCounts {
    cur: CountEpoch,
    prev: Option<CountEpoch>,
    early: Vec<(u64, u32)>,
    /// The highest sequence number of a record let go from `early`: an
    /// epoch that begins below it misses that record's count.
    early_lost: u64,
}

/// The PTE faults' counts of one mm since its epoch began.
#[derive(Debug, Default, Clone, Copy)]
struct CountEpoch {
    /// `seq_mm` of the fault that began it; 0 before any did.
    start_seq: u64,
    faults: u64,
    max: u32,
    sum: u128,
    /// A record of it was let go before it began: not judged.
    partial: bool,
}

impl CountEpoch {
    fn anchored(&self) -> bool {
        self.start_seq != 0
    }

    /// Adds a count; true when it is below one already seen (reordered).
    fn add(&mut self, count: u32) -> bool {
        let reordered = count < self.max;
        self.faults += 1;
        self.max = self.max.max(count);
        self.sum += u128::from(count);
        reordered
    }

    /// The counts were exactly 1..=faults.
    fn whole(&self) -> bool {
        let n = u128::from(self.faults);
        u64::from(self.max) == self.faults && self.sum == n * (n + 1) / 2
    }
}

impl PatchInputs {
    fn fault(&mut self, f: &FaultEvent) {
        if !f.has_mm_fault_count() {
            self.faults_without_counter += 1;
            return;
        }
        self.faults_with_counter += 1;
        if !f.pmd_fault() {
            self.count_step(f);
        }
        if f.has_stored_fault_count() && !f.has_stamp() {
            self.stored_by_a_fault += 1;
        }
        if f.threshold_path() {
            self.threshold_path += 1;
            if !f.has_node_candidates() {
                self.threshold_path_without_node_count += 1;
            }
        }
    }

    /// A PTE fault's count into its mm's epoch (a PMD fault reads the
    /// counter without adding: nothing to check).
    fn count_step(&mut self, f: &FaultEvent) {
        let reset = f.fault_count_after_reset();
        // seq_mm 1: the first hint fault of an mm the probes counted from
        // its start (a new process, or an exec's new mm).
        let begins = reset || f.seq_mm == 1;
        let (seq, count) = (f.seq_mm, f.mm_fault_count);
        let tgid = f.tgid();
        self.epochs.0.advance(f.ts_ns);
        for (_, gone) in self.epochs.0.take_dropped() {
            self.judge_mm(&gone);
        }
        let mm = self.epochs.0.touch(tgid, f.ts_ns, MmCounts::default);
        let mut judged = Vec::new();
        let mut reordered = 0;
        let mut unanchored = 0;
        if begins {
            judged.extend(mm.prev.take());
            if mm.cur.anchored() {
                mm.prev = Some(mm.cur);
            }
            mm.cur = CountEpoch {
                start_seq: seq.max(1),
                partial: mm.early_lost > seq,
                ..CountEpoch::default()
            };
            mm.early_lost = 0;
            mm.cur.add(count);
            for (s, c) in std::mem::take(&mut mm.early) {
                if s > seq {
                    reordered += u64::from(mm.cur.add(c));
                } else {
                    unanchored += 1;
                }
            }
            self.epochs_after_reset += u64::from(reset);
        } else if !mm.cur.anchored() {
            mm.early.push((seq, count));
            if mm.early.len() > MAX_EARLY {
                let lowest = (0..mm.early.len()).min_by_key(|&i| mm.early[i].0);
                if let Some(i) = lowest {
                    let (lost, _) = mm.early.swap_remove(i);
                    mm.early_lost = mm.early_lost.max(lost);
                    unanchored += 1;
                }
            }
        } else {
            let epoch = match &mut mm.prev {
                Some(prev) if seq < mm.cur.start_seq => prev,
                _ => &mut mm.cur,
            };
            reordered += u64::from(epoch.add(count));
        }
        self.faults_reordered += reordered;
        self.faults_unanchored += unanchored;
        for e in judged {
            self.judge(&e);
        }
    }

    fn judge(&mut self, e: &CountEpoch) {
        if e.partial {
            self.faults_unanchored += e.faults;
            return;
        }
        self.epochs_checked += 1;
        self.epochs_off += u64::from(!e.whole());
    }

    /// A process's epochs as they stand, and its records that never found
    /// one.
    fn judge_mm(&mut self, mm: &MmCounts) {
        for e in mm.prev.iter().chain([&mm.cur]).filter(|e| e.anchored()) {
            self.judge(e);
        }
        self.faults_unanchored += mm.early.len() as u64;
    }

    /// The figures with the epochs still open judged as they stand.
    fn report(&self) -> PatchInputs {
        let mut r = PatchInputs {
            epochs: Epochs::default(),
            ..self.clone()
        };
        for mm in self.epochs.0.values() {
            r.judge_mm(mm);
        }
        r
    }
}

/// The same figures in pages, as vmstat counts pages: a hint fault or a
/// decision is one per folio, a THP's is one of 512 pages.
#[derive(Debug, Default, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct PageCounts {
    /// Pages of the faulting folios.
    pub hint_faults: u64,
    pub decisions: u64,
    pub kernel_promote: u64,
    /// By outcome ([`Outcome::name`]).
    pub by_outcome: ByOutcome,
    pub migrate_success: u64,
    pub migrate_fail: u64,
    /// Migrated from a lower-tier node to a top-tier one: what vmstat's
    /// pgpromote_success counts.
    pub promoted: u64,
    /// Demoted by reclaim (folio records, each folio once): in a cgroup's
    /// row, the folios charged to its memory cgroup (what its
    /// memory.stat's pgdemote_* count).
    #[serde(default)]
    pub demoted: u64,
}

impl PageCounts {
    pub(crate) fn fault(&mut self, f: &FaultEvent, outcome: Outcome, toptier_mask: u64) {
        let pages = f.pages();
        self.hint_faults += pages;
        self.by_outcome.add(outcome, pages);
        if f.decided() {
            self.decisions += pages;
            if f.kernel_promoted() {
                self.kernel_promote += pages;
            }
        }
        if !f.migrate_tried() {
            return;
        }
        if f.migrate_failed() {
            self.migrate_fail += pages;
            return;
        }
        self.migrate_success += pages;
        if super::funnel::promoted_folio(f, toptier_mask) {
            self.promoted += pages;
        }
    }
}

/// Pages by kernel outcome: an array indexed by the outcome, counted on
/// every fault (a name lookup there costs a string comparison per map
/// level); shown as a map of [`Outcome::name`] to the non-zero counts.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ByOutcome([u64; numa_ebpf_common::OUTCOMES]);

impl ByOutcome {
    pub fn add(&mut self, outcome: Outcome, pages: u64) {
        let slot = &mut self.0[outcome as usize];
        *slot = slot.saturating_add(pages);
    }

    /// The count of the outcome named `name`, if it is one.
    pub fn get(&self, name: &str) -> Option<&u64> {
        let i = Outcome::ALL.iter().position(|o| o.name() == name)?;
        self.0.get(i)
    }

    /// The non-zero counts by name, in [`Outcome::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Outcome::ALL
            .iter()
            .zip(self.0)
            .filter(|(_, n)| *n > 0)
            .map(|(o, n)| (o.name(), n))
    }
}

impl std::ops::Index<&str> for ByOutcome {
    type Output = u64;
    fn index(&self, name: &str) -> &u64 {
        self.get(name).unwrap_or(&0)
    }
}

impl Serialize for ByOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> serde::Deserialize<'de> for ByOutcome {
    /// Names this numatrace does not know (a newer report's) are left out.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let named = BTreeMap::<String, u64>::deserialize(d)?;
        let mut out = ByOutcome::default();
        for o in Outcome::ALL {
            if let Some(n) = named.get(o.name()) {
                out.add(o, *n);
            }
        }
        Ok(out)
    }
}

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Rejects {
    pub latency: u64,
    pub rate_limit: u64,
    pub other: u64,
}

/// Hint faults counted in the window without a record in the totals.
#[derive(Debug, Default, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Unrecorded {
    /// Ended faults whose record was not sent: filtered out (`--pid`,
    /// `--cgroup`), sampled out (`--sample-every`) or dropped by a full
    /// ring (see `drops`). The kernel-side counters and histograms have
    /// them.
    pub not_sent: u64,
    /// Faults with no end yet at the last snapshot (their record goes out
    /// at the thread's next fault, scanner pass or exit), or without a
    /// thread context.
    pub open_at_end: u64,
}

impl Unrecorded {
    /// From the window's hint-fault counter, its faults ended (one
    /// per-outcome count each) and the records in the totals.
    fn of(counted: u64, ended: u64, records: u64) -> Self {
        Unrecorded {
            not_sent: ended.saturating_sub(records),
            open_at_end: counted.saturating_sub(ended),
        }
    }
}

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Migrations {
    pub success: u64,
    pub fail: u64,
}

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Report {
    pub duration_s: f64,
    pub hint_faults: u64,
    pub decisions: u64,
    pub kernel_promote: u64,
    pub kernel_reject: Rejects,
    /// What the kernel's threshold measures, and so what its rejections on
    /// it (`kernel_reject.latency`) mean: see [`Report::with_hotness`].
    pub kernel_hotness: KernelHotness,
    pub kernel_threshold_reason: Cow<'static, str>,
    pub free_space_promote: u64,
    pub not_tiering: u64,
    pub no_decision: u64,
    /// Folios (one per hint fault); `pages` has the same in pages.
    pub migrate: Migrations,
    pub pages: PageCounts,
    /// Hint faults the kernel counted (numatrace's counter at the fault's
    /// entry) whose records are not in the totals, and why.
    pub unrecorded: Unrecorded,
    pub scan_ranges: u64,
    pub scan_ptes_updated: u64,
    pub vma_skips: BTreeMap<String, u64>,
    pub drops: u64,
    /// Program runs the kernel skipped (a run preempted on the same CPU):
    /// events lost or incomplete, in counters and histograms too.
    pub runs_missed: u64,
    /// Of the hint faults, records sent without task_numa_fault's probe
    /// (a skipped run, a failed migration, a thread's exit).
    pub late_records: u64,
    /// Of those, failed migrations (after which the kernel may return
    /// without task_numa_fault) and records sent at a thread's exit.
    pub no_account_records: u64,
    pub exit_records: u64,
    pub evictions: u64,
    pub stamp_misses: u64,
    pub vmstat_delta: BTreeMap<String, u64>,
    /// Scan-to-fault latency (first-scan stamp), all outcomes, ms.
    pub latency_ms: Vec<BucketCount>,
    /// Per-process hint faults between the stamp and the fault.
    pub fault_delta: Vec<BucketCount>,
    pub latency_ms_by_outcome: BTreeMap<Cow<'static, str>, Vec<BucketCount>>,
    /// The same totals from the in-kernel counters (exact even when events
    /// were sampled or dropped).
    pub kernel_counters: BTreeMap<Cow<'static, str>, u64>,
    /// In-kernel histograms equal the event-derived ones (no drops, no sampling).
    pub kernel_histograms_match: bool,
    pub checks: Checks,
    /// Run count and time of each BPF program (live with --bpf-stats).
    pub bpf_programs: Vec<crate::plan::ProgramStat>,
    /// What the programs add inside the scanner (live with --bpf-stats).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scanner_cost: Option<crate::plan::ScannerCost>,
    /// What the programs add to each hint fault (live with --bpf-stats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_cost: Option<crate::plan::FaultPathCost>,
    /// numatrace's own CPU time in a live run (None from a trace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numatrace_cpu: Option<SelfCpu>,
    /// numatrace's kdamond (`--truth damon`): its sample's resolution and
    /// its CPU cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damon: Option<crate::damon::Summary>,
    /// The processes with the most slow-tier activity, stage by stage,
    /// with their verdicts (see [`super::funnel`]).
    pub funnel: Vec<ProcessFunnel>,
    /// Whether the kernel reports the VMAs its scanner skips
    /// (sched_skip_vma_numa, 6.7 on): without it the funnel's skip stage
    /// is empty because it cannot be seen. None: the trace does not say.
    pub skips_observable: Option<bool>,
    /// Quantiles of the latency and delta histograms (bucket upper bounds).
    pub estimates: Estimates,
    /// The budget, sampling rate and coverage of per-folio state (None: a
    /// trace made before it was recorded).
    pub sampling: Option<Sampling>,
    /// Page counts per cgroup, the most hint faults first (`--by cgroup`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_cgroup: Vec<CgroupRow>,
    /// Reclaim's demotions, per folio (see [`super::demotions`]).
    #[serde(default)]
    pub demotions: super::demotions::DemotionReport,
    /// Whether the probes saw demotions per folio (the `demote` hook
    /// attached; None: no plan to tell, as in traces older than it).
    #[serde(default)]
    pub demotions_observable: Option<bool>,
    /// Promotions linked to the demotions that undo them (ping-pong).
    #[serde(default)]
    pub lifecycle: super::lifecycle::LifecycleReport,
}

/// numatrace's own process CPU time (not the command it runs): loading,
/// verifying and attaching the programs, then the run itself (reading and
/// decoding records, the models, snapshots, timers), and the records read.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct SelfCpu {
    pub attach_s: f64,
    pub run_s: f64,
    pub records: u64,
    /// `run_s` per record, ns (0 without records).
    pub run_ns_per_record: f64,
}

impl SelfCpu {
    /// From process CPU times (ns) before attaching, after attaching and
    /// after the run, and the records read.
    pub fn new(start_ns: u64, attached_ns: u64, end_ns: u64, records: u64) -> Self {
        let run_ns = end_ns.saturating_sub(attached_ns) as f64;
        SelfCpu {
            attach_s: attached_ns.saturating_sub(start_ns) as f64 / 1e9,
            run_s: run_ns / 1e9,
            records,
            run_ns_per_record: if records == 0 {
                0.0
            } else {
                run_ns / records as f64
            },
        }
    }
}

/// The latency and fault-delta quantiles, and how far a sampled run's may
/// be from the full population's.
#[derive(Debug, Default, Serialize, serde::Deserialize)]
pub struct Estimates {
    /// By quantile name (`p50`, `p90`, `p99`): the bucket's upper bound.
    pub latency_ms: BTreeMap<Cow<'static, str>, Option<f64>>,
    pub fault_delta: BTreeMap<Cow<'static, str>, Option<f64>>,
    /// A sampled p-quantile lies between the full population's (p - e) and
    /// (p + e) quantiles, at 99.9% (0: every folio followed).
    pub rank_error: f64,
}

/// The quantiles every report gives.
pub const QUANTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

fn quantiles(h: &Log2Hist, unit: f64) -> BTreeMap<&'static str, Option<f64>> {
    QUANTILES
        .iter()
        .map(|&(name, q)| (name, h.quantile(q).map(|v| v as f64 / unit)))
        .collect()
}

impl Report {
    /// The records the totals were made from: faults, scanner passes and
    /// VMA skips.
    pub fn records(&self) -> u64 {
        self.hint_faults + self.scan_ranges + self.vma_skips.values().sum::<u64>()
    }

    /// The report of a run whose per-folio state followed `sampling`.
    pub fn with_sampling(mut self, sampling: Option<Sampling>) -> Report {
        self.estimates.rank_error = sampling.as_ref().map_or(0.0, Sampling::rank_error);
        self.sampling = sampling;
        self
    }

    /// The report of a kernel whose threshold measures `hotness` (the
    /// fault-count RFC's kernel rejects on a hint-fault count, not a time).
    pub fn with_hotness(mut self, hotness: KernelHotness) -> Report {
        self.kernel_hotness = hotness;
        self.kernel_threshold_reason = hotness.reject_reason().into();
        super::funnel::with_hotness(&mut self.funnel, hotness);
        self
    }

    /// The report of probes attached by `plan`.
    pub fn with_plan(mut self, plan: Option<&crate::plan::AttachPlan>) -> Report {
        self.skips_observable = skips_observable(plan);
        self.demotions_observable = plan.map(|p| {
            p.hook(crate::plan::Hook::Demote)
                .is_some_and(|h| h.status == crate::plan::HookStatus::Attached)
        });
        self
    }
}

/// Whether probes attached by `plan` see the VMAs the scanner skips (None:
/// no plan to tell).
pub fn skips_observable(plan: Option<&crate::plan::AttachPlan>) -> Option<bool> {
    plan.map(|p| {
        p.hook(crate::plan::Hook::VmaSkip)
            .is_some_and(|h| h.status == crate::plan::HookStatus::Attached)
    })
}

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Checks {
    /// From the start of attaching to the last snapshot: the upper bound of
    /// any scan-to-fault latency numatrace can measure.
    pub since_attach_s: f64,
    pub slow_node_faults: u64,
    pub negative_latencies: u64,
    pub max_latency_ms: f64,
    pub max_kernel_latency_gap_ms: u64,
    /// Decisions with both latencies (the kernel's, from jiffies at the
    /// decision, and numatrace's, from the clock at the fault's entry).
    pub kernel_latencies: u64,
    /// Decisions whose two latencies differ by more than 50 ms. Jiffies
    /// roundings alone give 8 ms at HZ=250; more comes from a task
    /// preempted between its fault's entry and the decision (7.x's
    /// PREEMPT_LAZY) or from jiffies lagging the clock in a starved guest.
    pub kernel_latency_gaps_over_50ms: u64,
    /// Decisions whose kernel input (the value its exchange took out) was
    /// read from the folio itself and checked there, and of those the
    /// ones where the folio held another value at the fault's entry
    /// (another exchange came between).
    pub kernel_access_from_folio: u64,
    pub kernel_access_differs_from_stamp: u64,
    /// Slow-node faults on a folio protected again since its last fault
    /// whose stamp was found from the pass that wrote the folio's access
    /// value, and those no pass of the faulting process explains (a
    /// shared folio another process's scan protected, a page protected
    /// before attach, a lost pass record): no stamp.
    pub stamps_from_pass: u64,
    pub stamps_unmatched: u64,
    /// Of those found, the ones several other processes' passes could
    /// each have written (a shared folio protected by concurrent passes):
    /// stamped from the latest.
    pub stamps_ambiguous: u64,
    /// Decisions whose access-time exchange was inferred from the folio's
    /// value changing across the decision (the exchange's program run
    /// was skipped by the kernel).
    pub exchanges_inferred: u64,
    pub inconsistent_deltas: u64,
    pub latency_rejects_below_threshold: u64,
    pub latest_scan_known: u64,
    pub latest_scan_newer_than_stamp: u64,
    pub faults_by_protections: Protections,
    pub patch_inputs: PatchInputs,
}

/// Stamped faults by how many times the scanner had protected their folio
/// (made its PTE PROT_NONE) since numatrace began following it.
#[derive(Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Protections {
    pub once: u64,
    pub twice: u64,
    pub three_or_more: u64,
}

/// The event-derived histograms of a report.
struct Histograms {
    all_latency: Log2Hist,
    all_delta: Log2Hist,
    by_outcome: BTreeMap<&'static str, Vec<BucketCount>>,
    /// Every per-outcome histogram equals the in-kernel one.
    kernel_match: bool,
}

impl Totals {
    pub fn new(toptier_mask: u64) -> Self {
        Totals {
            toptier_mask,
            ..Totals::default()
        }
    }

    pub fn event(&mut self, ev: &Event) {
        // Events from before the first snapshot precede the window the
        // kernel counters and vmstat deltas describe (the attach itself).
        let ts = ev.ts_ns();
        if self.window.first().is_some_and(|s| ts < s.ts_ns) {
            return;
        }
        match ev {
            Event::Fault(f) => self.fault(f),
            Event::Scan(s) => {
                self.scan_ranges += 1;
                self.scan_ptes = self.scan_ptes.saturating_add(s.ptes_updated);
                self.scans.record(s);
                self.funnel.scan(s);
                self.seen(s.ts_ns);
                // A cgroup whose pages are scanned but never faulted on
                // has a row too: its verdict (cold) is the answer.
                if s.cgroup_id != 0 {
                    self.cgroups.row_mut(s.cgroup_id);
                }
            }
            Event::Demote(d) => {
                if self.demotions.record(d) && d.memcg_id != 0 {
                    self.cgroups.row_mut(d.memcg_id).demoted += u64::from(d.nr_pages);
                }
                self.lifecycle.demote(d);
                self.seen(d.ts_ns);
            }
            Event::Skip(s) => {
                *self
                    .vma_skips
                    .entry(crate::decode::skip_reason_name(s.reason))
                    .or_default() += 1;
                self.funnel.skip(s);
                self.seen(s.ts_ns);
            }
            // Totals count NUMA balancing; DAMON's regions are not its events.
            Event::Damon(_) => {}
        }
    }

    fn seen(&mut self, ts: u64) {
        self.first_ts_ns.get_or_insert(ts);
        self.last_ts_ns = self.last_ts_ns.max(ts);
    }

    fn fault(&mut self, f: &FaultEvent) {
        self.faults += 1;
        self.late_records += u64::from(f.late_end());
        self.no_account_records += u64::from(f.no_account());
        self.exit_records += u64::from(f.at_exit());
        self.seen(f.ts_ns);
        let outcome = f.typed_outcome();
        let o = outcome as usize;
        self.outcomes[o] += 1;
        self.pages.fault(f, outcome, self.toptier_mask);
        self.cgroups.fault(f, outcome, self.toptier_mask);
        self.lifecycle.fault(f, self.toptier_mask);
        if f.decided() {
            self.decisions += 1;
            self.promotes += u64::from(f.kernel_promoted());
        }
        if f.migrate_tried() {
            if f.migrated() {
                self.migrate_ok += 1;
            } else {
                self.migrate_fail += 1;
            }
        }
        let slow = super::funnel::slow_tier(f.src_nid, self.toptier_mask);
        if slow {
            self.slow_faults += 1;
            self.patch.fault(f);
            if f.folio_access() {
                self.folio_access += 1;
                self.stamp_access_differs += u64::from(f.stamp_access_differs());
            }
            self.stamps_from_pass += u64::from(f.stamp_from_pass());
            self.stamps_unmatched += u64::from(f.stamp_unmatched());
            self.stamps_ambiguous += u64::from(f.stamp_ambiguous());
            self.exchanges_inferred += u64::from(f.xchg_inferred());
        }
        self.funnel.fault(f, slow);
        // Looked up for every fault, stamped or not: each one tells the
        // index its process is still there.
        let tgid = f.tgid();
        let latest_scan = self.scans.latest(tgid, f.addr, f.ts_ns);
        if f.has_stamp() {
            if f.scan_ns > f.ts_ns {
                self.negative_latencies += 1;
            }
            let latency = f.ts_ns.saturating_sub(f.scan_ns);
            self.protections[f.scan_count.clamp(1, 3) as usize - 1] += 1;
            self.max_latency_ns = self.max_latency_ns.max(latency);
            self.latency_ns[o].add(latency);
            if !f.stamp_other_mm() {
                self.delta_mm[o].add(f.seq_mm.saturating_sub(f.scan_seq_mm));
            }
            if f.scan_seq_global >= f.seq_global
                || (!f.stamp_other_mm() && f.scan_seq_mm >= f.seq_mm)
            {
                self.inconsistent_deltas += 1;
            }
            if f.has_kernel_latency() {
                self.kernel_latency(latency / 1_000_000, u64::from(f.kernel_latency_ms));
            }
            if let Some(s) = latest_scan {
                self.latest_scan_known += 1;
                if s.ts_ns > f.scan_ns {
                    self.latest_scan_newer += 1;
                }
            }
        }
        if outcome == Outcome::RejectLatency && f.kernel_latency_ms < f.threshold_ms {
            self.latency_rejects_below_threshold += 1;
        }
    }

    pub fn snapshot(&mut self, s: &Snapshot) {
        self.window.push(s);
    }

    /// Followed folios first stamped (by the scanner or a decision).
    pub fn stamped_folios(&self) -> u64 {
        self.window.count(Counter::StampInserts)
    }

    /// `stamp_capacity` is the STAMPS map size, for the eviction estimate;
    /// `attach_started_ns` bounds every latency (no stamp is older).
    pub fn report(&self, stamp_capacity: u64, attach_started_ns: u64) -> Report {
        let hists = self.histograms();
        let oc = |o: Outcome| self.outcomes[o as usize];
        let vmstat_delta = self.window.vmstat_all();
        let kc = |c: Counter| self.window.count(c);
        Report {
            duration_s: self.duration_s(),
            hint_faults: self.faults,
            decisions: self.decisions,
            kernel_promote: self.promotes,
            kernel_reject: Rejects {
                latency: oc(Outcome::RejectLatency),
                rate_limit: oc(Outcome::RejectRateLimit),
                other: oc(Outcome::RejectOther),
            },
            kernel_hotness: KernelHotness::Latency,
            kernel_threshold_reason: KernelHotness::Latency.reject_reason().into(),
            free_space_promote: oc(Outcome::PromoteFreeSpace),
            not_tiering: oc(Outcome::NotTiering),
            no_decision: oc(Outcome::NoDecision),
            migrate: Migrations {
                success: self.migrate_ok,
                fail: self.migrate_fail,
            },
            pages: self.pages.clone(),
            unrecorded: Unrecorded::of(kc(Counter::HintFaults), self.faults_ended(), self.faults),
            scan_ranges: self.scan_ranges,
            scan_ptes_updated: self.scan_ptes,
            vma_skips: self.vma_skips.clone(),
            drops: kc(Counter::RingDrops),
            runs_missed: kc(Counter::RunsMissed),
            late_records: self.late_records,
            no_account_records: self.no_account_records,
            exit_records: self.exit_records,
            evictions: self.window.evictions(stamp_capacity),
            stamp_misses: kc(Counter::StampMisses),
            vmstat_delta,
            estimates: Estimates {
                latency_ms: named(quantiles(&hists.all_latency, 1e6)),
                fault_delta: named(quantiles(&hists.all_delta, 1.0)),
                rank_error: 0.0,
            },
            sampling: None,
            latency_ms: hists.all_latency.rows(1e6),
            fault_delta: hists.all_delta.rows(1.0),
            latency_ms_by_outcome: named(hists.by_outcome),
            kernel_counters: named(self.kernel_counters()),
            kernel_histograms_match: hists.kernel_match,
            bpf_programs: Vec::new(),
            scanner_cost: None,
            fault_cost: None,
            numatrace_cpu: None,
            damon: None,
            checks: self.checks(attach_started_ns),
            funnel: {
                let mut rows = self.funnel.report(self.end_ns());
                super::funnel::with_pingpong(&mut rows, |pid| self.lifecycle.process(pid));
                rows
            },
            skips_observable: None,
            by_cgroup: Vec::new(),
            demotions: self.demotions.report(),
            demotions_observable: None,
            lifecycle: self.lifecycle.report(),
        }
    }

    /// Every cgroup's row, the most hint faults first, with its funnel
    /// judged for a kernel whose threshold measures `hotness`; paths from
    /// `path_of`.
    pub fn cgroup_rows(
        &self,
        path_of: impl Fn(u64) -> Option<String>,
        hotness: KernelHotness,
    ) -> Vec<CgroupRow> {
        let end_ns = self.end_ns();
        let mut rows = self.cgroups.rows(path_of);
        for r in &mut rows {
            r.funnel = self.funnel.cgroup_funnel(r.id, end_ns, hotness);
        }
        rows
    }

    /// The end of what was seen: the last snapshot or event.
    pub fn end_ns(&self) -> u64 {
        self.window
            .last()
            .map_or(self.last_ts_ns, |s| s.ts_ns.max(self.last_ts_ns))
    }

    /// The snapshot window's span when there is one, else the span of the
    /// events seen.
    fn duration_s(&self) -> f64 {
        match self.window.first() {
            Some(_) => self.window.span_ns() as f64 / 1e9,
            None => {
                self.last_ts_ns
                    .saturating_sub(self.first_ts_ns.unwrap_or(0)) as f64
                    / 1e9
            }
        }
    }

    /// Merges the per-outcome histograms and compares each with the
    /// in-kernel one.
    fn histograms(&self) -> Histograms {
        let mut all_latency = Log2Hist::default();
        let mut all_delta = Log2Hist::default();
        let mut by_outcome = BTreeMap::new();
        let mut kernel_match = self.window.first().is_some();
        for o in Outcome::ALL {
            let i = o as usize;
            all_latency.merge(&self.latency_ns[i]);
            all_delta.merge(&self.delta_mm[i]);
            if self.latency_ns[i].count > 0 {
                by_outcome.insert(o.name(), self.latency_ns[i].rows(1e6));
            }
            kernel_match &= self.window.hist_row(|s| &s.hist_latency, i)
                == self.latency_ns[i].buckets.to_vec()
                && self.window.hist_row(|s| &s.hist_delta, i) == self.delta_mm[i].buckets.to_vec();
        }
        Histograms {
            all_latency,
            all_delta,
            by_outcome,
            kernel_match,
        }
    }

    /// Faults the probes ended in the window (each adds to one outcome).
    fn faults_ended(&self) -> u64 {
        Outcome::ALL
            .iter()
            .map(|&o| self.window.counter((OUTCOME_BASE + o as u32) as usize))
            .sum()
    }

    /// Compares numatrace's latency with the kernel's for one decision.
    fn kernel_latency(&mut self, ours_ms: u64, kernel_ms: u64) {
        self.kernel_latencies += 1;
        let gap = ours_ms.abs_diff(kernel_ms);
        self.max_kernel_latency_gap_ms = self.max_kernel_latency_gap_ms.max(gap);
        if gap > LATENCY_GAP_MS {
            self.kernel_latency_gaps += 1;
        }
    }

    fn kernel_counters(&self) -> BTreeMap<&'static str, u64> {
        let kc = |c: Counter| self.window.count(c);
        BTreeMap::from([
            ("hint_faults", kc(Counter::HintFaults)),
            (
                "decisions",
                kc(Counter::DecisionPromote) + kc(Counter::DecisionReject),
            ),
            ("decision_promote", kc(Counter::DecisionPromote)),
            ("decision_reject", kc(Counter::DecisionReject)),
            (
                "reject_latency",
                self.window
                    .counter((OUTCOME_BASE + Outcome::RejectLatency as u32) as usize),
            ),
            (
                "reject_rate_limit",
                self.window
                    .counter((OUTCOME_BASE + Outcome::RejectRateLimit as u32) as usize),
            ),
            ("migrate_success", kc(Counter::MigrateSuccess)),
            ("migrate_fail", kc(Counter::MigrateFail)),
            ("scan_ranges", kc(Counter::ScanRanges)),
            ("stamp_inserts", kc(Counter::StampInserts)),
            ("faults_without_context", kc(Counter::FaultWithoutContext)),
            ("thread_ctx_unavailable", kc(Counter::ThreadCtxUnavailable)),
            ("balancing_mode_changed", kc(Counter::BalancingModeChanged)),
            ("scan_ptes_updated", kc(Counter::ScanPtesUpdated)),
            ("thp_faults", kc(Counter::ThpFaults)),
            ("thp_scans", kc(Counter::ThpScans)),
            ("vma_skips", kc(Counter::VmaSkips)),
            ("migrate_tp_pages", self.window.migrated_pages()),
            ("fault_count_resets", kc(Counter::FaultCountResets)),
            ("fault_count_drops", kc(Counter::FaultCountDrops)),
            (
                "fault_count_unavailable",
                kc(Counter::FaultCountUnavailable),
            ),
            ("pmd_hint_faults", kc(Counter::PmdHintFaults)),
            ("runs_missed", kc(Counter::RunsMissed)),
        ])
    }

    fn checks(&self, attach_started_ns: u64) -> Checks {
        Checks {
            since_attach_s: self.window.last().map_or(0.0, |s| {
                s.ts_ns.saturating_sub(attach_started_ns) as f64 / 1e9
            }),
            slow_node_faults: self.slow_faults,
            negative_latencies: self.negative_latencies,
            max_latency_ms: self.max_latency_ns as f64 / 1e6,
            max_kernel_latency_gap_ms: self.max_kernel_latency_gap_ms,
            kernel_latencies: self.kernel_latencies,
            kernel_latency_gaps_over_50ms: self.kernel_latency_gaps,
            kernel_access_from_folio: self.folio_access,
            kernel_access_differs_from_stamp: self.stamp_access_differs,
            stamps_from_pass: self.stamps_from_pass,
            stamps_unmatched: self.stamps_unmatched,
            stamps_ambiguous: self.stamps_ambiguous,
            exchanges_inferred: self.exchanges_inferred,
            inconsistent_deltas: self.inconsistent_deltas,
            latency_rejects_below_threshold: self.latency_rejects_below_threshold,
            latest_scan_known: self.latest_scan_known,
            latest_scan_newer_than_stamp: self.latest_scan_newer,
            faults_by_protections: Protections {
                once: self.protections[0],
                twice: self.protections[1],
                three_or_more: self.protections[2],
            },
            patch_inputs: self.patch.report(),
        }
    }
}

impl crate::sink::Sink for Totals {
    fn header(&mut self, h: &crate::trace::Header) -> anyhow::Result<()> {
        self.lifecycle.set_top_tier(h);
        Ok(())
    }
    fn event(&mut self, ev: &Event) -> anyhow::Result<()> {
        Totals::event(self, ev);
        Ok(())
    }
    fn snapshot(&mut self, s: &Snapshot) -> anyhow::Result<()> {
        Totals::snapshot(self, s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use numa_ebpf_common::{
        ext_flags as xf, fault_flags as ff, Outcome, ScanEvent, COUNTER_SLOTS, MIGRATE_REASONS,
    };

    use super::*;
    use crate::decode::fixtures::fault;

    /// A demoted folio counts for the cgroup its memory is charged to,
    /// once however often its batch retried it; batch ends count for none.
    #[test]
    fn demoted_pages_count_for_the_folios_memory_cgroup() {
        use crate::decode::fixtures::demotion;
        let mut t = Totals::new(1);
        let d = numa_ebpf_common::DemoteEvent {
            memcg_id: 77,
            nr_pages: 512,
            ..demotion(10, 0xa1, 1)
        };
        t.event(&Event::Demote(d));
        t.event(&Event::Demote(d));
        let end = numa_ebpf_common::DemoteEvent {
            flags: numa_ebpf_common::demote_flags::BATCH_END,
            ..d
        };
        t.event(&Event::Demote(end));
        let rows = t.cgroup_rows(|_| None, KernelHotness::default());
        let demoted: Vec<(u64, u64)> = rows.iter().map(|r| (r.id, r.counts.demoted)).collect();
        assert_eq!(demoted, vec![(77, 512)]);
    }

    #[test]
    fn patch_inputs_step_like_the_patchs_counter() {
        let mut p = PatchInputs::default();
        let mut a = fault(1, 1, 5, Outcome::PromoteHot);
        a.ext_flags |= xf::NODE_CANDIDATES;
        p.fault(&a);
        let mut pmd = fault(2, 2, 5, Outcome::PromoteHot);
        pmd.mm_fault_count = 10; // a PMD fault reads without adding
        pmd.ext_flags |= xf::PMD_FAULT;
        p.fault(&pmd);
        let mut skipped = fault(3, 3, 5, Outcome::RejectLatency);
        skipped.mm_fault_count = 2;
        skipped.flags &= !ff::HAS_STAMP; // compared with an earlier fault's count
        p.fault(&skipped);
        assert_eq!(p.stored_by_a_fault, 1);
        assert_eq!(
            (p.threshold_path, p.threshold_path_without_node_count),
            (3, 2)
        );
        let mut none = fault(14, 4, 5, Outcome::PromoteHot);
        none.ext_flags &= !xf::MM_FAULT_COUNT;
        p.fault(&none);
        assert_eq!((p.faults_with_counter, p.faults_without_counter), (3, 1));
        let r = p.report();
        assert_eq!((r.epochs_checked, r.epochs_off), (1, 0));
    }

    /// Counts 1..=n in any order make a whole epoch; a reset begins the
    /// next; a count skipped or repeated is found.
    #[test]
    fn count_epochs_take_threads_and_resets() {
        let pte = |seq: u64, count: u32, reset: bool| {
            let mut f = fault(seq, seq, 5, Outcome::PromoteHot);
            f.mm_fault_count = count;
            if reset {
                f.ext_flags |= xf::FAULT_COUNT_AFTER_RESET;
            }
            f
        };
        let mut p = PatchInputs::default();
        // Two threads' records crossing, then a clone's reset.
        for (seq, count, reset) in [
            (1, 1, false),
            (2, 3, false),
            (3, 2, false),
            (4, 1, true),
            (5, 2, false),
        ] {
            p.fault(&pte(seq, count, reset));
        }
        let r = p.report();
        assert_eq!((r.epochs_checked, r.epochs_off), (2, 0));
        assert_eq!((r.epochs_after_reset, r.faults_reordered), (1, 1));
        // A count repeated (a lost increment) and one skipped.
        p.fault(&pte(6, 2, false));
        p.fault(&pte(7, 1, true));
        p.fault(&pte(8, 3, false));
        let r = p.report();
        assert_eq!((r.epochs_checked, r.epochs_off), (3, 2));
        // Records crossing an epoch's start: a thread's record before the
        // mm's first, the old epoch's last after the reset.
        let mut c = PatchInputs::default();
        for (seq, count, reset) in [
            (2, 2, false),
            (1, 1, false),
            (4, 1, true),
            (3, 3, false),
            (5, 2, false),
        ] {
            c.fault(&pte(seq, count, reset));
        }
        let r = c.report();
        assert_eq!(
            (r.epochs_checked, r.epochs_off, r.faults_unanchored),
            (2, 0, 0)
        );
        // More records before the first epoch than are kept: the lowest
        // in sequence go (faults before a reset, uncounted), and a record
        // of the epoch let go leaves it unjudged rather than wrong.
        let mut e = PatchInputs::default();
        for seq in 2..2 + MAX_EARLY as u64 {
            e.fault(&pte(seq, seq as u32, false));
        }
        e.fault(&pte(101, 2, false));
        e.fault(&pte(100, 1, true));
        e.fault(&pte(102, 3, false));
        let r = e.report();
        assert_eq!(
            (r.epochs_checked, r.epochs_off, r.faults_unanchored),
            (1, 0, MAX_EARLY as u64)
        );
        let mut e = PatchInputs::default();
        for seq in 101..101 + MAX_EARLY as u64 + 1 {
            e.fault(&pte(seq, (seq - 99) as u32, false));
        }
        e.fault(&pte(100, 1, true));
        let r = e.report();
        assert_eq!((r.epochs_checked, r.epochs_off), (0, 0));
        assert_eq!(r.faults_unanchored, MAX_EARLY as u64 + 2);
        // A process first seen mid-run is not judged.
        let mut q = PatchInputs::default();
        q.fault(&pte(40, 40, false));
        q.fault(&pte(41, 41, false));
        let r = q.report();
        assert_eq!((r.epochs_checked, r.faults_unanchored), (0, 2));
    }

    #[test]
    fn patch_inputs_forget_gone_processes() {
        let mut p = PatchInputs::default();
        // 20 000 processes, one a second, each faulting once.
        for i in 0..20_000u64 {
            let mut f = fault(i, i, 5, Outcome::PromoteHot);
            f.ts_ns = i * 1_000_000_000;
            f.pid_tgid = (100 + i) << 32;
            p.fault(&f);
        }
        let bound = (crate::model::GONE_AFTER_NS / 1_000_000_000) as usize + 1;
        assert!(p.epochs.0.len() <= bound, "{}", p.epochs.0.len());
    }

    #[test]
    fn pages_by_outcome_read_and_write_as_a_map_of_names() {
        let mut b = ByOutcome::default();
        b.add(Outcome::RejectLatency, 512);
        b.add(Outcome::PromoteHot, 1);
        let json = serde_json::to_string(&b).expect("json");
        assert_eq!(json, r#"{"promote_hot":1,"reject_latency":512}"#);
        assert_eq!((b["reject_latency"], b["nonsense"]), (512, 0));
        let newer = r#"{"promote_hot":1,"reject_latency":512,"from_the_future":9}"#;
        let back: ByOutcome = serde_json::from_str(newer).expect("read");
        assert_eq!(back, b);
    }

    /// The figures the probes no longer count are derived from the ones
    /// they do, the same way for a recorded trace that still has them.
    #[test]
    fn decisions_and_migrated_pages_are_derived_from_their_parts() {
        let snap = |promote: u64, reject: u64, moved: u64| {
            let mut counters = vec![0; COUNTER_SLOTS as usize];
            counters[Counter::DecisionPromote as usize] = promote;
            counters[Counter::DecisionReject as usize] = reject;
            counters[Counter::Decisions as usize] = 1000;
            let mut migrate_reason_pages = vec![0; MIGRATE_REASONS as usize * 2];
            migrate_reason_pages[2 * 3] = moved;
            migrate_reason_pages[2 * 3 + 1] = 1000;
            Snapshot {
                counters,
                migrate_reason_pages,
                ..Snapshot::default()
            }
        };
        let mut t = Totals::new(1);
        t.snapshot(&snap(1, 2, 3));
        t.snapshot(&snap(11, 7, 8));
        let c = t.kernel_counters();
        assert_eq!((c["decisions"], c["decision_promote"]), (15, 10));
        assert_eq!(c["migrate_tp_pages"], 5);
        for gone in ["cpupid_xchg", "fault_account", "migrate_tp_events"] {
            assert!(!c.contains_key(gone), "{gone}");
        }
    }

    /// A THP promotion is one fault and one migration of 512 pages; only
    /// slow-to-top-tier migrations are what vmstat's pgpromote_success adds.
    #[test]
    fn pages_are_counted_beside_folios() {
        let mut t = Totals::new(1);
        let migrated = |seq, pages, ok: bool, src: i32| {
            let mut f = fault(seq, seq, 5, Outcome::PromoteHot);
            (f.nr_pages, f.src_nid, f.migrate_ok) = (pages, src, u8::from(ok));
            f.flags |= ff::MIGRATE_TRIED;
            f
        };
        for f in [
            migrated(1, 512, true, 1),
            migrated(2, 1, true, 1),
            migrated(3, 1, false, 1),
            // DRAM to DRAM: migrated, not promoted.
            migrated(4, 512, true, 0),
            fault(5, 5, 2000, Outcome::RejectLatency),
        ] {
            t.event(&Event::Fault(f));
        }
        let r = t.report(1 << 20, 0);
        assert_eq!(
            (r.hint_faults, r.migrate.success, r.migrate.fail),
            (5, 3, 1)
        );
        let p = &r.pages;
        assert_eq!(
            (p.hint_faults, p.decisions, p.kernel_promote),
            (1027, 1027, 1026)
        );
        assert_eq!(
            (p.migrate_success, p.migrate_fail, p.promoted),
            (1025, 1, 513)
        );
        assert_eq!(p.by_outcome["promote_hot"], 1026);
        assert_eq!(p.by_outcome["reject_latency"], 1);
    }

    /// Hint faults the probes counted without a record in the totals are
    /// named: ended but not sent, or not ended by the last snapshot.
    #[test]
    fn faults_without_records_are_split_by_why() {
        let u = Unrecorded::of(10, 8, 7);
        assert_eq!((u.not_sent, u.open_at_end), (1, 2));
        // Records of faults begun before the window never make it negative.
        assert_eq!(Unrecorded::of(5, 6, 7), Unrecorded::default());
    }

    #[test]
    fn late_records_are_counted_by_why() {
        let mut t = Totals::new(1);
        let mut f = fault(1, 1, 5, Outcome::PromoteHot);
        f.ext_flags |= xf::LATE_END | xf::NO_ACCOUNT | xf::AT_EXIT;
        t.event(&Event::Fault(f));
        let r = t.report(1 << 20, 0);
        assert_eq!(
            (r.late_records, r.no_account_records, r.exit_records),
            (1, 1, 1)
        );
    }

    #[test]
    fn own_cpu_is_split_at_the_attach_and_divided_by_the_records() {
        let c = SelfCpu::new(1_000, 3_001_000, 5_001_000, 1_000);
        assert_eq!((c.attach_s, c.run_s), (0.003, 0.002));
        assert_eq!(c.run_ns_per_record, 2_000.0);
        assert_eq!(SelfCpu::new(0, 5, 9, 0).run_ns_per_record, 0.0);
    }

    #[test]
    fn scan_sums_saturate_on_damaged_records() {
        let mut t = Totals::new(1);
        let scan = ScanEvent {
            ptes_updated: u64::MAX,
            end: 4096,
            ..ScanEvent::default()
        };
        t.event(&Event::Scan(scan));
        t.event(&Event::Scan(scan));
        let r = t.report(1 << 20, 0);
        assert_eq!(r.scan_ptes_updated, u64::MAX);
    }

    #[test]
    fn kernel_latency_gaps_beyond_50_ms_are_counted() {
        let mut t = Totals::new(1);
        t.kernel_latency(1000, 1004); // jiffy rounding
        t.kernel_latency(2000, 1996);
        t.kernel_latency(3000, 3099); // decided 99 ms after the fault's entry
        t.kernel_latency(4000, 4050);
        t.kernel_latency(5037, 4986); // jiffies lagging the clock at the decision
        let c = t.checks(0);
        assert_eq!(c.kernel_latencies, 5);
        assert_eq!(c.max_kernel_latency_gap_ms, 99);
        assert_eq!(c.kernel_latency_gaps_over_50ms, 2);
    }

    #[test]
    fn stamped_faults_are_counted_by_their_folios_protections() {
        let mut t = Totals::new(1);
        for (i, n) in [1, 2, 3, 7, 0].into_iter().enumerate() {
            let mut f = fault(10 + i as u64, 1, 5, Outcome::RejectLatency);
            f.scan_count = n;
            t.event(&Event::Fault(f));
        }
        let mut unstamped = fault(20, 1, 5, Outcome::RejectLatency);
        unstamped.flags &= !ff::HAS_STAMP;
        unstamped.scan_count = 3;
        t.event(&Event::Fault(unstamped));
        let p = t.checks(0).faults_by_protections;
        // A stamped folio was protected at least once, whatever its count.
        assert_eq!((p.once, p.twice, p.three_or_more), (2, 1, 2));
    }
}
