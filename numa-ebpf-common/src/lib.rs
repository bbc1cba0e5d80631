//! Types shared by the BPF programs (`numa-ebpf`) and userspace (`numa-cli`):
//! counter indices, map names, program names and `#[repr(C)]` records.
//!
//! `no_std` so the BPF side can use it; the `user` feature adds the
//! `aya::Pod` impls userspace needs to read these types out of maps.
#![no_std]
// Dev-dependencies are for the integration tests and benches.
#![cfg_attr(test, allow(unused_crate_dependencies))]

/// Bumped whenever a record layout in this crate changes. The BPF object is
/// built into the same binary as the userspace that reads it, so only
/// traces can disagree: every trace header carries it and the trace reader
/// refuses a trace with another value.
pub const ABI_VERSION: u32 = 7;

/// The layout before the folio's access values were appended to
/// [`FaultEvent`] and [`ScanEvent`]: its records are prefixes of today's
/// and carry their stamps as the probes made them.
pub const ABI_VERSION_V2: u32 = 2;
/// Record sizes (fault, scan, skip) of [`ABI_VERSION_V2`].
pub const RECORD_SIZES_V2: [usize; 3] = [168, 80, 40];

/// The layout before the scanning task's cgroup was appended to
/// [`ScanEvent`] and [`SkipEvent`]: its records are prefixes of today's.
pub const ABI_VERSION_V3: u32 = 3;
/// Record sizes (fault, scan, skip) of [`ABI_VERSION_V3`].
pub const RECORD_SIZES_V3: [usize; 3] = [176, 88, 40];

/// The layout before demotion records and the folio's identity in
/// [`FaultEvent`]: its records are prefixes of today's.
pub const ABI_VERSION_V4: u32 = 4;
/// Record sizes (fault, scan, skip) of [`ABI_VERSION_V4`].
pub const RECORD_SIZES_V4: [usize; 3] = [176, 96, 48];

/// The layout before the demoted folio's memory cgroup was appended to
/// [`DemoteEvent`]: fault, scan and skip records are today's, demotion
/// records prefixes of today's.
pub const ABI_VERSION_V5: u32 = 5;
/// Size of a demotion record of [`ABI_VERSION_V5`].
pub const DEMOTE_RECORD_SIZE_V5: usize = 72;

/// The layout before the promotion's destination PFN was appended to
/// [`FaultEvent`]: fault records are prefixes of today's, the others
/// today's. [`ABI_VERSION_V5`]'s fault, scan and skip records too.
pub const ABI_VERSION_V6: u32 = 6;
/// Record sizes (fault, scan, skip) of [`ABI_VERSION_V6`].
pub const RECORD_SIZES_V6: [usize; 3] = [192, 96, 48];

/// Indices into the per-CPU `COUNTERS` array. Each BPF program bumps the
/// counter of the event it saw; userspace sums across CPUs.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// NUMA hint faults (numa_migrate_check / numa_migrate_prep entries).
    HintFaults = 0,
    /// Not counted by the probes: the decisions are `DecisionPromote` plus
    /// `DecisionReject`, one of which every return counts. The slot stays
    /// so that recorded traces keep their counter indexes.
    Decisions = 1,
    /// should_numa_migrate_memory returned true.
    DecisionPromote = 2,
    /// should_numa_migrate_memory returned false.
    DecisionReject = 3,
    /// Not counted (the exchange runs about four times per promoted hint
    /// fault; its run count is in the program's `bpf_stats`). The slot
    /// stays so that recorded traces keep their counter indexes.
    CpupidXchg = 4,
    /// change_prot_numa calls (one scanned range each).
    ScanRanges = 5,
    /// PTEs change_prot_numa reported as updated.
    ScanPtesUpdated = 6,
    /// migrate_misplaced_{folio,page} calls that succeeded.
    MigrateSuccess = 7,
    /// migrate_misplaced_{folio,page} calls that failed.
    MigrateFail = 8,
    /// Not counted (its run count is in the program's `bpf_stats`). The
    /// slot stays so that recorded traces keep their counter indexes.
    FaultAccount = 9,
    /// do_huge_pmd_numa_page calls.
    ThpFaults = 10,
    /// change_huge_pmd calls.
    ThpScans = 11,
    /// sched:sched_skip_vma_numa events.
    VmaSkips = 12,
    /// Not counted (its run count is in the program's `bpf_stats`). The
    /// slot stays so that recorded traces keep their counter indexes.
    MigrateTpEvents = 13,
    /// Hits of doctor's trial probes.
    TrialHits = 14,
    /// Ring buffer reservations that failed (events lost).
    RingDrops = 15,
    /// Decisions taken while `numa_balancing` differed from its value when
    /// the probes were attached (someone changed the mode under them).
    BalancingModeChanged = 16,
    /// Hint faults whose folio had no pending scan stamp.
    StampMisses = 17,
    /// New folios entered into `STAMPS` (evictions >= inserts - capacity).
    StampInserts = 18,
    /// Not counted: the probes run nothing per folio in the scanner (the
    /// slot stays so that counter numbers keep their meaning).
    ScanStamps = 19,
    /// The thread's task-local context could not be had (task storage
    /// allocation failed): a fault or scan could not be tracked.
    ThreadCtxUnavailable = 20,
    /// task_numa_fault without a hint fault seen first (attach races).
    FaultWithoutContext = 21,
    /// Not counted: the pages mm_migrate_pages moved are the succeeded
    /// slots of `MIGRATE_REASON_PAGES` summed. The slot stays so that
    /// recorded traces keep their counter indexes.
    MigrateTpPages = 22,
    /// Resets of an mm's fault-count counter seen (init_numa_balancing).
    FaultCountResets = 23,
    /// Hint faults per [`Outcome`]: slot `OUTCOME_BASE + outcome`.
    OutcomeBase = 24,
    /// Hint faults whose mm had no fault-count counter and none could be
    /// made (`MM_FAULT_COUNT` full): the patch's counter is unknown for them.
    FaultCountUnavailable = 32,
    /// mm teardowns that dropped a fault-count counter (`__mmdrop`).
    FaultCountDrops = 33,
    /// PMD (THP) hint faults seen at the hint-fault hook, which the
    /// fault-count patch does not count.
    PmdHintFaults = 34,
    /// Program runs the kernel skipped because the same program was
    /// already running on that CPU: a run preempted midway (kernels with
    /// full or lazy preemption) and another task hitting the hook
    /// meanwhile. Each is an event lost or left incomplete. Never written
    /// by BPF: userspace fills it from the programs' `recursion_misses`.
    RunsMissed = 35,
    /// Hint faults on slow-node folios that per-folio sampling does not
    /// follow (`--map-budget`): counted and recorded, without a stamp.
    Unfollowed = 36,
}

/// First slot of the per-outcome fault counters in `COUNTERS`.
pub const OUTCOME_BASE: u32 = Counter::OutcomeBase as u32;

/// Number of slots in `COUNTERS` (room to grow without an ABI bump).
pub const COUNTER_SLOTS: u32 = 37;

/// Slow-node PFN spans the stamp array covers (more are merged).
pub const MAX_SPANS: usize = 4;
/// The multiplier of the hash that picks the followed PFN of each block
/// (2^64 / golden ratio: consecutive blocks get well-spread picks).
pub const FOLLOW_HASH: u64 = 0x9E37_79B9_7F4A_7C15;

/// Map names, as userspace looks them up.
pub mod maps {
    pub const COUNTERS: &str = "COUNTERS";
    pub const EVENTS: &str = "EVENTS";
    pub const STAMPS: &str = "STAMPS";
    pub const VMEMMAP: &str = "VMEMMAP";
    pub const CPU_NODE: &str = "CPU_NODE";
    pub const HIST_LATENCY: &str = "HIST_LATENCY";
    pub const HIST_DELTA: &str = "HIST_DELTA";
    pub const HIST_SUM: &str = "HIST_SUM";
    pub const MIGRATE_REASON_PAGES: &str = "MIGRATE_REASON_PAGES";
    pub const MM_FAULT_COUNT: &str = "MM_FAULT_COUNT";
}

/// Program names (the Rust function names in `numa-ebpf`). Each logical hook
/// has one program per mechanism; userspace picks one through the attach plan.
pub mod programs {
    pub const FENTRY_HINT_FAULT: &str = "fentry_hint_fault";
    pub const KPROBE_HINT_FAULT: &str = "kprobe_hint_fault";
    /// No longer in the object (fexit_decision reads the arguments); kept
    /// so the name stays reserved.
    pub const FENTRY_DECISION: &str = "fentry_decision";
    pub const FEXIT_DECISION: &str = "fexit_decision";
    pub const KPROBE_DECISION: &str = "kprobe_decision";
    pub const KRETPROBE_DECISION: &str = "kretprobe_decision";
    /// An entry program: the exchanged-out value is not needed (see
    /// `Stamp::access`), and fexit costs a trampoline that calls the
    /// function itself on the hottest hook.
    pub const FENTRY_DECISION_XCHG: &str = "fentry_decision_xchg";
    pub const KPROBE_DECISION_XCHG: &str = "kprobe_decision_xchg";
    pub const FENTRY_SCAN_RANGE: &str = "fentry_scan_range";
    pub const FEXIT_SCAN_RANGE: &str = "fexit_scan_range";
    pub const KPROBE_SCAN_RANGE: &str = "kprobe_scan_range";
    pub const KRETPROBE_SCAN_RANGE: &str = "kretprobe_scan_range";
    /// change_pte_range's entry; its exit is the `*_SCAN_RANGE` one.
    pub const FENTRY_SCAN_PTE: &str = "fentry_scan_pte";
    pub const KPROBE_SCAN_PTE: &str = "kprobe_scan_pte";
    pub const FEXIT_MIGRATE: &str = "fexit_migrate";
    pub const KRETPROBE_MIGRATE: &str = "kretprobe_migrate";
    pub const FENTRY_FAULT_ACCOUNT: &str = "fentry_fault_account";
    pub const KPROBE_FAULT_ACCOUNT: &str = "kprobe_fault_account";
    pub const FENTRY_THP_FAULT: &str = "fentry_thp_fault";
    pub const KPROBE_THP_FAULT: &str = "kprobe_thp_fault";
    pub const FENTRY_THP_SCAN: &str = "fentry_thp_scan";
    pub const KPROBE_THP_SCAN: &str = "kprobe_thp_scan";
    /// change_huge_pmd as a scan pass of its own (beside change_pte_range).
    pub const FENTRY_THP_SCAN_PASS: &str = "fentry_thp_scan_pass";
    pub const FEXIT_THP_SCAN_PASS: &str = "fexit_thp_scan_pass";
    pub const KPROBE_THP_SCAN_PASS: &str = "kprobe_thp_scan_pass";
    pub const KRETPROBE_THP_SCAN_PASS: &str = "kretprobe_thp_scan_pass";
    pub const TP_SKIP_VMA: &str = "tp_skip_vma";
    pub const TP_MIGRATE_PAGES: &str = "tp_migrate_pages";
    /// sched:sched_process_exit: a thread's last fault record goes out.
    pub const TP_THREAD_EXIT: &str = "tp_thread_exit";
    /// The allocation callback reclaim's demotion calls once per folio.
    pub const FEXIT_DEMOTE: &str = "fexit_demote";
    /// The allocation callback of a promotion's migration: its new folio.
    pub const FEXIT_PROMOTE_DST: &str = "fexit_promote_dst";
    pub const KRETPROBE_PROMOTE_DST: &str = "kretprobe_promote_dst";
    /// demote_folio_list: one reclaim batch's demotion and its result.
    pub const FEXIT_DEMOTE_BATCH: &str = "fexit_demote_batch";
    /// init_numa_balancing: where the fault-count patch resets its counter.
    pub const FENTRY_FAULT_COUNT_RESET: &str = "fentry_fault_count_reset";
    pub const KPROBE_FAULT_COUNT_RESET: &str = "kprobe_fault_count_reset";
    /// __mmdrop: an mm's counter is dropped with it.
    pub const FENTRY_FAULT_COUNT_DROP: &str = "fentry_fault_count_drop";
    pub const KPROBE_FAULT_COUNT_DROP: &str = "kprobe_fault_count_drop";
    /// damon:damon_aggregated: numatrace's own kdamond's regions at the end
    /// of each aggregation interval.
    pub const TP_DAMON_AGGREGATED: &str = "tp_damon_aggregated";
    pub const TRIAL_FENTRY: &str = "trial_fentry";
    pub const TRIAL_KPROBE: &str = "trial_kprobe";
    pub const TRIAL_TRACEPOINT: &str = "trial_tracepoint";

    /// Each fentry/fexit/tracepoint program and its twin that does nothing
    /// (`--empty-programs`: what attaching alone costs). Programs that
    /// never attach in the same run (a hook's variants) share a twin.
    pub const EMPTY_TWINS: [(&str, &str); 21] = [
        (FENTRY_HINT_FAULT, "empty_fentry_hint_fault"),
        (FENTRY_SCAN_RANGE, "empty_fentry_scan_range"),
        (FENTRY_FAULT_ACCOUNT, "empty_fentry_fault_account"),
        (FENTRY_THP_FAULT, "empty_fentry_thp_fault"),
        (FENTRY_THP_SCAN, "empty_fentry_thp_scan"),
        (FENTRY_SCAN_PTE, "empty_fentry_scan_range"),
        (FENTRY_THP_SCAN_PASS, "empty_fentry_thp_scan"),
        (FEXIT_THP_SCAN_PASS, "empty_fexit_thp_scan"),
        (FEXIT_DECISION, "empty_fexit_decision"),
        (FENTRY_DECISION_XCHG, "empty_fentry_decision_xchg"),
        (FEXIT_SCAN_RANGE, "empty_fexit_scan_range"),
        (FEXIT_MIGRATE, "empty_fexit_migrate"),
        (TP_SKIP_VMA, "empty_tp_skip_vma"),
        (TP_MIGRATE_PAGES, "empty_tp_migrate_pages"),
        (TP_THREAD_EXIT, "empty_tp_thread_exit"),
        (TP_DAMON_AGGREGATED, "empty_tp_damon_aggregated"),
        (FEXIT_DEMOTE, "empty_fexit_demote"),
        (FEXIT_DEMOTE_BATCH, "empty_fexit_demote"),
        (FEXIT_PROMOTE_DST, "empty_fexit_demote"),
        (FENTRY_FAULT_COUNT_RESET, "empty_fentry_fault_count_reset"),
        (FENTRY_FAULT_COUNT_DROP, "empty_fentry_fault_count_drop"),
    ];

    /// The program that does nothing at `name`'s attach point, if any.
    pub fn empty_twin(name: &str) -> Option<&'static str> {
        EMPTY_TWINS
            .iter()
            .find(|(real, _)| *real == name)
            .map(|&(_, empty)| empty)
    }
}

/// How migrate_misplaced_* reports its result on this kernel; userspace sets
/// `MIGRATE_RET_CONVENTION` before load.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrateRet {
    /// 6.1 migrate_misplaced_page: returns 1 when the page was migrated, 0 otherwise.
    OneOnSuccess = 0,
    /// 6.12+ migrate_misplaced_folio: returns 0 on success, -errno on failure.
    ZeroOnSuccess = 1,
}

/// Record kinds on the `EVENTS` ring buffer; every record starts with a
/// `u32` kind so userspace can dispatch before reading the rest.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Fault = 1,
    Scan = 2,
    VmaSkip = 3,
    Demote = 4,
    Damon = 5,
}

/// The kernel's promotion decision for one hint fault, as numatrace infers
/// it (see docs/kernel.md, "Decision reason").
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// Promoted: the kernel's latency was below its threshold (tiering).
    PromoteHot = 0,
    /// Promoted without the threshold check: the destination had room
    /// (`pgdat_free_space_enough`), seen as "no access-time exchange".
    PromoteFreeSpace = 1,
    /// Rejected: the kernel's latency >= its threshold.
    RejectLatency = 2,
    /// Rejected after passing the threshold: the promotion rate limit.
    RejectRateLimit = 3,
    /// Rejected before any tiering check (destination without memory).
    RejectOther = 4,
    /// Decided by normal NUMA balancing (not tiering, or a top-tier folio).
    NotTiering = 5,
    /// A hint fault without a should_numa_migrate_memory call.
    NoDecision = 6,
}

pub const OUTCOMES: usize = 7;

impl Outcome {
    pub const ALL: [Outcome; OUTCOMES] = [
        Outcome::PromoteHot,
        Outcome::PromoteFreeSpace,
        Outcome::RejectLatency,
        Outcome::RejectRateLimit,
        Outcome::RejectOther,
        Outcome::NotTiering,
        Outcome::NoDecision,
    ];

    pub fn from_u8(v: u8) -> Option<Outcome> {
        Outcome::ALL.get(v as usize).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            Outcome::PromoteHot => "promote_hot",
            Outcome::PromoteFreeSpace => "promote_free_space",
            Outcome::RejectLatency => "reject_latency",
            Outcome::RejectRateLimit => "reject_rate_limit",
            Outcome::RejectOther => "reject_other",
            Outcome::NotTiering => "not_tiering",
            Outcome::NoDecision => "no_decision",
        }
    }

    pub fn promoted(self) -> bool {
        matches!(self, Outcome::PromoteHot | Outcome::PromoteFreeSpace)
    }

    pub fn is_decision(self) -> bool {
        self != Outcome::NoDecision
    }
}

/// Log2 histogram: bucket `b` holds values `v` with `ceil(log2 v) == b`,
/// i.e. `2^(b-1) < v <= 2^b`; bucket 0 holds 0 and 1. Its upper bound
/// (Prometheus `le`) is `2^b`. The last bucket (63) also takes everything
/// above `2^63` (never reached by ns latencies, ~292 years).
pub const HIST_BUCKETS: usize = 64;

#[inline(always)]
pub fn log2_bucket(v: u64) -> usize {
    if v <= 1 {
        return 0;
    }
    // ceil(log2 v) = floor(log2 (v-1)) + 1, by binary search (no clz in BPF).
    let mut x = v - 1;
    let mut r = 0usize;
    let mut shift = 32u32;
    while shift > 0 {
        if x >> shift != 0 {
            x >>= shift;
            r += shift as usize;
        }
        shift >>= 1;
    }
    if r + 1 < HIST_BUCKETS {
        r + 1
    } else {
        HIST_BUCKETS - 1
    }
}

/// The slot of `bucket` in a per-outcome histogram map (`HIST_LATENCY`,
/// `HIST_DELTA`, `HIST_SUM`): one row of [`HIST_BUCKETS`] per outcome.
#[inline(always)]
pub const fn hist_slot(outcome: usize, bucket: usize) -> usize {
    outcome * HIST_BUCKETS + bucket
}

/// Slots of every outcome's histogram row.
pub const HIST_SLOTS: usize = OUTCOMES * HIST_BUCKETS;

/// What one hint fault adds to the histograms: a latency and, when the
/// stamp was made in its own process, a fault-count delta, in its
/// outcome's row. Each fault is counted once: by the probes when its
/// record does not reach the ring (sampled out, dropped), else by
/// userspace from the record, both through this one function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistEntry {
    pub outcome: usize,
    pub latency_ns: u64,
    /// The fault-count delta, counted when `own_mm`. A plain number, not
    /// an Option: the BPF verifier refuses the spill of an Option's
    /// undefined payload that LLVM emits.
    pub delta: u64,
    pub own_mm: bool,
}

impl HistEntry {
    /// The entry of `ev`; None for a fault without a stamp.
    #[inline(always)]
    pub fn of(ev: &FaultEvent) -> Option<HistEntry> {
        let outcome = ev.outcome as usize;
        if !ev.has_stamp() || outcome >= OUTCOMES {
            return None;
        }
        Some(HistEntry {
            outcome,
            latency_ns: ev.ts_ns.saturating_sub(ev.scan_ns),
            delta: ev.seq_mm.saturating_sub(ev.scan_seq_mm),
            own_mm: !ev.stamp_other_mm(),
        })
    }

    /// The entry of a fault without a stamp whose decision gave the
    /// kernel's latency (ms, the jiffy's resolution): no delta. For a
    /// fault the probes do not send (filters, sampling), whose stamp
    /// userspace would have found from the pass records.
    #[inline(always)]
    pub fn of_kernel_latency(ev: &FaultEvent) -> Option<HistEntry> {
        let outcome = ev.outcome as usize;
        if !ev.has_kernel_latency() || outcome >= OUTCOMES {
            return None;
        }
        Some(HistEntry {
            outcome,
            latency_ns: u64::from(ev.kernel_latency_ms) * 1_000_000,
            delta: 0,
            own_mm: false,
        })
    }

    /// The entry of a fault without a stamp on a folio protected again
    /// (`NEEDS_PASS`), dated by the kernel's access clock: it read `clock`
    /// at `clock_ns`, so at the fault it read `clock` plus the time
    /// between, and the folio's value is its scan's time (ms, the jiffy's
    /// resolution, within the field's `mask`, shifted by `buckets`). No
    /// delta.
    #[inline(always)]
    pub fn of_access_clock(
        ev: &FaultEvent,
        clock_ns: u64,
        clock: u32,
        mask: u32,
        buckets: u32,
    ) -> Option<HistEntry> {
        let outcome = ev.outcome as usize;
        if !ev.needs_pass() || !ev.has_access_at_fault() || clock_ns == 0 || outcome >= OUTCOMES {
            return None;
        }
        let b = buckets & 31;
        let now = if ev.ts_ns >= clock_ns {
            clock.wrapping_add((((ev.ts_ns - clock_ns) / 1_000_000) >> b) as u32)
        } else {
            clock.wrapping_sub((((clock_ns - ev.ts_ns) / 1_000_000) >> b) as u32)
        };
        let latency_ms = (now.wrapping_sub(ev.access_at_fault) & mask) << b;
        Some(HistEntry {
            outcome,
            latency_ns: u64::from(latency_ms) * 1_000_000,
            delta: 0,
            own_mm: false,
        })
    }

    /// Slot of the latency in `HIST_LATENCY`, and of `delta` in `HIST_DELTA`.
    #[inline(always)]
    pub fn slot(&self, v: u64) -> usize {
        hist_slot(self.outcome, log2_bucket(v))
    }

    /// Slot of the latency sum in `HIST_SUM`; the delta sum's is the next.
    #[inline(always)]
    pub fn sum_slot(&self) -> usize {
        self.outcome * 2
    }
}

/// Flags in [`FaultEvent::flags`].
pub mod fault_flags {
    /// The folio had a first-scan stamp: latency and deltas are valid.
    pub const HAS_STAMP: u8 = 1;
    /// The folio's stored value was written in another process (a shared
    /// folio): by that process's scan (the stamp; the per-mm delta compares
    /// two different counters and is not reported), or, without a stamp,
    /// by that process's fault.
    pub const STAMP_OTHER_MM: u8 = 2;
    /// should_numa_migrate_memory ran for this fault.
    pub const DECIDED: u8 = 4;
    /// The kernel's own access-time exchange was seen inside the decision.
    pub const KERNEL_LATENCY: u8 = 8;
    /// migrate_misplaced_* ran; `migrate_ok` tells the result.
    pub const MIGRATE_TRIED: u8 = 16;
    /// The hint-fault hook saw this fault (else only task_numa_fault did).
    pub const HAS_FAULT_HOOK: u8 = 32;
}

/// Flags in [`FaultEvent::ext_flags`]: what numatrace knows of the inputs
/// the fault-count patch (seeds/fault-count-hint-latency-rfc.txt) would
/// have had.
pub mod ext_flags {
    /// A PMD (THP) hint fault, do_huge_pmd_numa_page: the patch counts
    /// only do_numa_page's PTE faults.
    pub const PMD_FAULT: u64 = 1;
    /// `mm_fault_count` is the mm's counter as the patch keeps it.
    pub const MM_FAULT_COUNT: u64 = 2;
    /// `stored_fault_count`/`stored_fault_count_ns`: the count the patched kernel would have
    /// in the folio's cpupid field (the scanner's or an earlier fault's).
    pub const STORED_FAULT_COUNT: u64 = 4;
    /// `node_candidates` holds the destination node's PGPROMOTE_CANDIDATE.
    pub const NODE_CANDIDATES: u64 = 8;
    /// The mm's counter was reset (init_numa_balancing) or made with its
    /// mm while numatrace watched: its absolute value, not only its
    /// differences, is the patch's.
    pub const FAULT_COUNT_BASE_KNOWN: u64 = 16;
    /// The decision passed the free-space shortcut and ran the threshold
    /// path (its access-time exchange was seen).
    pub const THRESHOLD_PATH: u64 = 32;
    /// task_numa_fault's probe did not run for this fault: the record was
    /// sent at the thread's next hint fault, scanner pass or exit, with
    /// `nr_pages` and `tnf_flags` inferred (a PMD fault's 512 pages;
    /// MIGRATED or MIGRATE_FAIL from the migration's result). Either the
    /// kernel skipped the run (see `Counter::RunsMissed`) or, with
    /// [`NO_ACCOUNT`], the fault had no task_numa_fault to see.
    pub const LATE_END: u64 = 64;
    /// The folio is on a slow node but per-folio sampling does not follow
    /// it: no stamp, latency or delta by design (not a miss).
    pub const UNFOLLOWED: u64 = 128;
    /// With [`LATE_END`]: a failed migration, after which the kernel
    /// returns without task_numa_fault when the PTE (or PMD) changed
    /// meanwhile, so the kernel's own fault statistics may not have it
    /// either (vmstat's numa_hint_faults does).
    pub const NO_ACCOUNT: u64 = 256;
    /// With [`LATE_END`]: sent when its thread exited.
    pub const AT_EXIT: u64 = 512;
    /// The first PTE fault counted after the mm's counter was reset
    /// (init_numa_balancing, at every clone of a thread of the mm):
    /// `mm_fault_count` starts again from 1 here.
    pub const FAULT_COUNT_AFTER_RESET: u64 = 1024;
    /// The value the decision's exchange took out (`kernel_latency_ms`'s
    /// input) was read from the folio, where the kernel keeps it, and the
    /// exchange's new value was found there after: the kernel's own input.
    pub const FOLIO_ACCESS: u64 = 2048;
    /// With [`FOLIO_ACCESS`]: the value the folio held at the hint fault's
    /// entry differs from the one the decision's exchange took out
    /// (another exchange came between them).
    pub const STAMP_ACCESS_DIFFERS: u64 = 4096;
    /// `access_at_fault` is the folio's access value at the hint fault's
    /// entry, read where BTF places it.
    pub const ACCESS_AT_FAULT: u64 = 8192;
    /// The folio was protected again since its last hint fault numatrace
    /// saw (its access value is not the one that fault left): its stamp is
    /// the scanner pass whose access values contain `access_at_fault`,
    /// which userspace finds from the pass records (see
    /// `numa_core::stamping`). Cleared once that search is made.
    pub const NEEDS_PASS: u64 = 16384;
    /// The stamp (`HAS_STAMP`) was found among the pass records by the
    /// folio's access value.
    pub const STAMP_FROM_PASS: u64 = 32768;
    /// The folio was protected again, but no pass of the faulting process
    /// numatrace saw wrote its access value: protected by another
    /// process's scan (a shared folio), before the probes were attached,
    /// or by a pass whose record was lost. No stamp.
    pub const STAMP_UNMATCHED: u64 = 65536;
    /// The decision's exchange is known from the folio's access value
    /// changing between the hint fault's entry and the decision's return,
    /// not from a program on the exchange: there is none on kernels that
    /// promote on time (its cost would fall on the scanner), and its run
    /// may be skipped on the fault-count RFC's (the kernel skips a program
    /// busy on its CPU). The threshold path ran, with the values read
    /// before and after as its input and result.
    pub const XCHG_INFERRED: u64 = 131072;
    /// With `STAMP_OTHER_MM`: passes of several other processes over the
    /// faulting address wrote values containing the folio's (a shared
    /// folio protected by concurrent passes): the stamp is the latest of
    /// them, its time right to the clock's resolution, its sequence
    /// numbers and stored count those of that process's pass.
    pub const STAMP_AMBIGUOUS: u64 = 262144;
}

/// Flags in [`ScanEvent::ext_flags`].
pub mod scan_ext_flags {
    /// `mm_fault_count` is the scanned mm's fault-count counter at the pass's start.
    pub const MM_FAULT_COUNT: u32 = 1;
    /// `access_first`/`access_last` are the kernel's access clock at the
    /// pass's entry and end.
    pub const ACCESS_RANGE: u32 = 2;
    /// The probes did not see the pass end (the kernel skipped that
    /// program's run): sent at the thread's next pass or hint fault, its
    /// `ptes_updated` unknown (0).
    pub const LATE_END: u32 = 4;
}

/// Values of [`FaultEvent::decision`]: what should_numa_migrate_memory
/// returned. Read them through [`FaultEvent::kernel_promoted`].
pub mod decision {
    /// No decision seen (the record's `fault_flags::DECIDED` is clear).
    pub const NONE: u8 = 0;
    /// The kernel's decision said promote (it returned true).
    pub const PROMOTE: u8 = 1;
    /// The kernel's decision said no (it returned false).
    pub const REJECT: u8 = 2;

    /// The value recording a decision that returned `promote`.
    #[inline(always)]
    pub const fn of(promote: bool) -> u8 {
        if promote {
            PROMOTE
        } else {
            REJECT
        }
    }
}

/// The process (thread group) id in a `bpf_get_current_pid_tgid` value.
#[inline(always)]
pub const fn tgid_of(pid_tgid: u64) -> u32 {
    (pid_tgid >> 32) as u32
}

/// The thread id in a `bpf_get_current_pid_tgid` value.
#[inline(always)]
pub const fn tid_of(pid_tgid: u64) -> u32 {
    pid_tgid as u32
}

/// TNF_* flags of task_numa_fault (include/linux/sched/numa_balancing.h).
pub mod tnf {
    pub const MIGRATED: u32 = 0x01;
    pub const NO_GROUP: u32 = 0x02;
    pub const SHARED: u32 = 0x04;
    pub const FAULT_LOCAL: u32 = 0x08;
    pub const MIGRATE_FAIL: u32 = 0x10;
}

/// One NUMA hint fault with the kernel's decision, emitted when the fault
/// is accounted (task_numa_fault), i.e. after the decision and migration.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultEvent {
    pub kind: u32,
    pub cpu: u32,
    pub ts_ns: u64,
    pub pid_tgid: u64,
    pub cgroup_id: u64,
    /// Faulting virtual address, page aligned.
    pub addr: u64,
    /// Kernel address of the folio (struct page of its head): its identity.
    pub folio: u64,
    /// Global and per-process hint-fault sequence numbers of this fault.
    pub seq_global: u64,
    pub seq_mm: u64,
    /// The stamp: time and sequence numbers when the scanner protected the
    /// folio (first scan after its previous fault). Valid with HAS_STAMP.
    pub scan_ns: u64,
    pub scan_seq_global: u64,
    pub scan_seq_mm: u64,
    /// The kernel's own latency (ms) from its stored access time, and the
    /// threshold it compared against. Valid with KERNEL_LATENCY.
    pub kernel_latency_ms: u32,
    pub threshold_ms: u32,
    pub nr_pages: u32,
    pub src_nid: i32,
    /// Node of the CPU the decision was for (-1 without a decision).
    pub dst_nid: i32,
    pub tnf_flags: u32,
    /// How many times the scanner stamped this folio while tracked.
    pub scan_count: u32,
    /// [`Outcome`] as u8.
    pub outcome: u8,
    pub decision: u8,
    pub migrate_ok: u8,
    /// [`fault_flags`].
    pub flags: u8,
    pub comm: [u8; 16],
    // Appended in ABI 2.
    /// The destination node's PGPROMOTE_CANDIDATE (node_page_state, the
    /// node-wide count every process adds to) when the decision returned.
    /// Valid with `ext_flags::NODE_CANDIDATES`.
    pub node_candidates: u64,
    /// When the count in `stored_fault_count` was written. Valid with `STORED_FAULT_COUNT`.
    pub stored_fault_count_ns: u64,
    /// The faulting mm's hint-fault count as the patch keeps it (an
    /// `atomic_t`, incremented at every PTE hint fault, this one included,
    /// reset by init_numa_balancing). Valid with `ext_flags::MM_FAULT_COUNT`.
    pub mm_fault_count: u32,
    /// The full count the patched kernel last wrote into this folio (the
    /// kernel keeps `count >> 16`, masked). Valid with `STORED_FAULT_COUNT`.
    pub stored_fault_count: u32,
    /// [`ext_flags`].
    pub ext_flags: u64,
    // Appended in ABI 3 (an older trace reads them as zero, flags clear).
    /// The folio's access value (LAST_CPUPID field, masked) at the hint
    /// fault's entry: in tiering mode the time (ms) the scanner or the
    /// last decision wrote. Valid with `ext_flags::ACCESS_AT_FAULT`.
    pub access_at_fault: u32,
    /// The folio's access value when the decision returned.
    pub access_after: u32,
    // Appended in ABI 5.
    /// A slow-tier folio's identity, which migration keeps (see
    /// [`DemoteEvent::mapping`]); 0 for top-tier folios and in older traces.
    pub mapping: u64,
    pub index: u64,
    // Appended in ABI 7.
    /// The PFN of the faulting folio (0: vmemmap unknown, or an older
    /// trace): a demotion's `dst_pfn` names it again.
    pub src_pfn: u64,
    /// The PFN of the folio the migration allocated on the top tier for
    /// this folio (`alloc_misplaced_dst_folio`'s result), where a
    /// promotion was tried; 0 when none was allocated, the hook is not
    /// attached, or in older traces. With `migrate_ok` the folio's new
    /// place, which a later demotion's `src_pfn` names again.
    pub dst_pfn: u64,
}

/// Typed reads of the record's raw fields: what each flag and value means
/// is said once, here, for the BPF programs and userspace alike.
impl FaultEvent {
    /// The faulting process (thread group) id.
    #[inline(always)]
    pub const fn tgid(&self) -> u32 {
        tgid_of(self.pid_tgid)
    }

    /// The faulting thread's id.
    #[inline(always)]
    pub const fn tid(&self) -> u32 {
        tid_of(self.pid_tgid)
    }

    /// The record's [`Outcome`]; an unknown value (a crafted or damaged
    /// trace) reads as [`Outcome::NoDecision`].
    #[inline(always)]
    pub fn typed_outcome(&self) -> Outcome {
        Outcome::from_u8(self.outcome).unwrap_or(Outcome::NoDecision)
    }

    /// should_numa_migrate_memory ran for this fault.
    #[inline(always)]
    pub const fn decided(&self) -> bool {
        self.flags & fault_flags::DECIDED != 0
    }

    /// A decision the kernel made in tiering mode for a slow-node folio:
    /// the ones the promotion policies compete on.
    #[inline(always)]
    pub fn tiering_decision(&self) -> bool {
        self.decided()
            && !matches!(
                self.typed_outcome(),
                Outcome::NoDecision | Outcome::NotTiering
            )
    }

    /// The kernel's decision said promote (whether or not the migration
    /// then succeeded: see [`migrated`](Self::migrated)).
    #[inline(always)]
    pub const fn kernel_promoted(&self) -> bool {
        self.decision == decision::PROMOTE
    }

    /// migrate_misplaced_* ran for this fault.
    #[inline(always)]
    pub const fn migrate_tried(&self) -> bool {
        self.flags & fault_flags::MIGRATE_TRIED != 0
    }

    /// migrate_misplaced_* ran and moved the folio.
    #[inline(always)]
    pub const fn migrated(&self) -> bool {
        self.migrate_tried() && self.migrate_ok != 0
    }

    /// migrate_misplaced_* ran and failed.
    #[inline(always)]
    pub const fn migrate_failed(&self) -> bool {
        self.migrate_tried() && self.migrate_ok == 0
    }

    /// The folio had a scan stamp: `scan_*`, latency and deltas are valid.
    #[inline(always)]
    pub const fn has_stamp(&self) -> bool {
        self.flags & fault_flags::HAS_STAMP != 0
    }

    /// The folio's stored value was written in another process (its scan,
    /// or without a stamp its fault): a per-mm delta compares two
    /// different counters.
    #[inline(always)]
    pub const fn stamp_other_mm(&self) -> bool {
        self.flags & fault_flags::STAMP_OTHER_MM != 0
    }

    /// `kernel_latency_ms` and `threshold_ms` are the kernel's.
    #[inline(always)]
    pub const fn has_kernel_latency(&self) -> bool {
        self.flags & fault_flags::KERNEL_LATENCY != 0
    }

    /// The hint-fault hook saw this fault (else only task_numa_fault did).
    #[inline(always)]
    pub const fn has_fault_hook(&self) -> bool {
        self.flags & fault_flags::HAS_FAULT_HOOK != 0
    }

    /// task_numa_fault said the fault was on the faulting CPU's node.
    #[inline(always)]
    pub const fn fault_local(&self) -> bool {
        self.tnf_flags & tnf::FAULT_LOCAL != 0
    }

    /// A PMD (THP) hint fault.
    #[inline(always)]
    pub const fn pmd_fault(&self) -> bool {
        self.ext_flags & ext_flags::PMD_FAULT != 0
    }

    /// `mm_fault_count` is valid.
    #[inline(always)]
    pub const fn has_mm_fault_count(&self) -> bool {
        self.ext_flags & ext_flags::MM_FAULT_COUNT != 0
    }

    /// `stored_fault_count` and `stored_fault_count_ns` are valid.
    #[inline(always)]
    pub const fn has_stored_fault_count(&self) -> bool {
        self.ext_flags & ext_flags::STORED_FAULT_COUNT != 0
    }

    /// `node_candidates` is valid.
    #[inline(always)]
    pub const fn has_node_candidates(&self) -> bool {
        self.ext_flags & ext_flags::NODE_CANDIDATES != 0
    }

    /// The decision ran the threshold path (past the free-space shortcut).
    #[inline(always)]
    pub const fn threshold_path(&self) -> bool {
        self.ext_flags & ext_flags::THRESHOLD_PATH != 0
    }

    /// The first PTE fault counted after the mm's counter was reset.
    #[inline(always)]
    pub const fn fault_count_after_reset(&self) -> bool {
        self.ext_flags & ext_flags::FAULT_COUNT_AFTER_RESET != 0
    }

    /// The record was sent without task_numa_fault's probe (inferred end).
    #[inline(always)]
    pub const fn late_end(&self) -> bool {
        self.ext_flags & ext_flags::LATE_END != 0
    }

    /// A late record of a failed migration the kernel may not account.
    #[inline(always)]
    pub const fn no_account(&self) -> bool {
        self.ext_flags & ext_flags::NO_ACCOUNT != 0
    }

    /// A late record sent when its thread exited.
    #[inline(always)]
    pub const fn at_exit(&self) -> bool {
        self.ext_flags & ext_flags::AT_EXIT != 0
    }

    /// A slow-node folio per-folio sampling does not follow (no stamp by
    /// design).
    #[inline(always)]
    pub const fn unfollowed(&self) -> bool {
        self.ext_flags & ext_flags::UNFOLLOWED != 0
    }

    /// The decision's exchanged-out value was read from the folio.
    #[inline(always)]
    pub const fn folio_access(&self) -> bool {
        self.ext_flags & ext_flags::FOLIO_ACCESS != 0
    }

    /// With [`folio_access`](Self::folio_access): the value at the fault's
    /// entry differs from the one the exchange took out.
    #[inline(always)]
    pub const fn stamp_access_differs(&self) -> bool {
        self.ext_flags & ext_flags::STAMP_ACCESS_DIFFERS != 0
    }

    /// `access_at_fault` is valid.
    #[inline(always)]
    pub const fn has_access_at_fault(&self) -> bool {
        self.ext_flags & ext_flags::ACCESS_AT_FAULT != 0
    }

    /// The stamp is still to be found among the pass records.
    #[inline(always)]
    pub const fn needs_pass(&self) -> bool {
        self.ext_flags & ext_flags::NEEDS_PASS != 0
    }

    /// The stamp was found among the pass records.
    #[inline(always)]
    pub const fn stamp_from_pass(&self) -> bool {
        self.ext_flags & ext_flags::STAMP_FROM_PASS != 0
    }

    /// Protected again, by no pass of this process numatrace saw.
    #[inline(always)]
    pub const fn stamp_unmatched(&self) -> bool {
        self.ext_flags & ext_flags::STAMP_UNMATCHED != 0
    }

    /// Stamped from one of several other processes' passes that could
    /// each have written the folio's value.
    #[inline(always)]
    pub const fn stamp_ambiguous(&self) -> bool {
        self.ext_flags & ext_flags::STAMP_AMBIGUOUS != 0
    }

    /// The decision's exchange was inferred from the folio's change.
    #[inline(always)]
    pub const fn xchg_inferred(&self) -> bool {
        self.ext_flags & ext_flags::XCHG_INFERRED != 0
    }

    /// The pages of the fault's folio as the kernel counts them
    /// (task_numa_fault's `pages`: 512 for a PMD fault, the folio's size
    /// on 6.12+), at least 1: vmstat's page counters (pgpromote_*) add
    /// these, its numa_hint_faults adds 1 per record.
    pub fn pages(&self) -> u64 {
        u64::from(self.nr_pages.max(1))
    }
}

/// One scanner pass over a range (change_prot_numa); `ts_ns` is when the
/// pass started, so stamps made during it are never "older" than it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanEvent {
    pub kind: u32,
    pub cpu: u32,
    pub ts_ns: u64,
    pub pid_tgid: u64,
    pub start: u64,
    pub end: u64,
    /// PTEs made PROT_NONE (change_prot_numa's return value).
    pub ptes_updated: u64,
    /// Not measured: 0 (the probes run nothing per folio in the scanner;
    /// traces of older numatrace hold the folios it stamped).
    pub stamps: u64,
    /// The global and the process's hint-fault sequence numbers at the
    /// pass's start, read with `ts_ns`.
    pub seq_global: u64,
    pub seq_mm: u64,
    // Appended in ABI 2.
    /// The scanned mm's fault-count counter (the patch's) at the pass's
    /// start: what patch 2/2 re-stamps the pass's PROT_NONE folios with.
    /// Valid with `scan_ext_flags::MM_FAULT_COUNT`.
    pub mm_fault_count: u32,
    /// [`scan_ext_flags`].
    pub ext_flags: u32,
    // Appended in ABI 3.
    /// The kernel's access clock (masked, as a folio keeps it) at the
    /// pass's entry and end: the folios it protected hold a value in
    /// between. Valid with `scan_ext_flags::ACCESS_RANGE`. (Traces of older
    /// numatrace hold the values of the pass's first and last exchange.)
    pub access_first: u32,
    pub access_last: u32,
    // Appended in ABI 4.
    /// The scanning task's cgroup (v2) id: the scanner runs in the task
    /// whose memory it scans. 0 in older traces.
    pub cgroup_id: u64,
}

impl ScanEvent {
    /// The scanning process (thread group) id.
    #[inline(always)]
    pub const fn tgid(&self) -> u32 {
        tgid_of(self.pid_tgid)
    }

    /// `mm_fault_count` is valid.
    #[inline(always)]
    pub const fn has_mm_fault_count(&self) -> bool {
        self.ext_flags & scan_ext_flags::MM_FAULT_COUNT != 0
    }

    /// `access_first`/`access_last` are valid.
    #[inline(always)]
    pub const fn has_access_range(&self) -> bool {
        self.ext_flags & scan_ext_flags::ACCESS_RANGE != 0
    }

    /// Sent without its end (`ptes_updated` unknown).
    #[inline(always)]
    pub const fn late_end(&self) -> bool {
        self.ext_flags & scan_ext_flags::LATE_END != 0
    }
}

/// Names of `enum numa_vmaskip_reason` (include/trace/events/sched.h, 6.12).
pub const VMA_SKIP_REASONS: [&str; 7] = [
    "unsuitable",
    "shared_ro",
    "inaccessible",
    "scan_delay",
    "pid_inactive",
    "ignore_pid_inactive",
    "seq_completed",
];

/// A VMA the scanner skipped (sched:sched_skip_vma_numa, 6.12+).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkipEvent {
    pub kind: u32,
    pub reason: u32,
    pub ts_ns: u64,
    pub pid_tgid: u64,
    pub vm_start: u64,
    pub vm_end: u64,
    // Appended in ABI 4.
    /// The scanning task's cgroup (v2) id. 0 in older traces.
    pub cgroup_id: u64,
}

impl SkipEvent {
    /// The scanning process (thread group) id.
    #[inline(always)]
    pub const fn tgid(&self) -> u32 {
        tgid_of(self.pid_tgid)
    }
}

/// Who demoted a folio: the thread that ran reclaim's demotion.
pub mod reclaimer {
    /// A node's kswapd (PF_KSWAPD), the kernel's `pgdemote_kswapd`.
    pub const KSWAPD: u32 = 0;
    /// Direct reclaim by an allocating task, `pgdemote_direct`.
    pub const DIRECT: u32 = 1;
    /// khugepaged's reclaim, `pgdemote_khugepaged` (6.8+; `pgdemote_direct`
    /// before).
    pub const KHUGEPAGED: u32 = 2;
    /// Names, by value.
    pub const NAMES: [&str; 3] = ["kswapd", "direct", "khugepaged"];
}

/// One folio reclaim chose to demote, seen where `migrate_pages()` asks
/// reclaim's allocation callback for its destination on a lower tier:
/// once per folio tried. `dst_pfn` is 0 when the allocation failed (the
/// folio then stays, and reclaim may free or keep it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DemoteEvent {
    pub kind: u32,
    /// A [`reclaimer`] value.
    pub reclaimer: u32,
    pub ts_ns: u64,
    /// The reclaiming thread.
    pub pid_tgid: u64,
    pub src_pfn: u64,
    pub dst_pfn: u64,
    pub src_nid: i32,
    /// -1 when the allocation failed.
    pub dst_nid: i32,
    /// The folio's identity, which migration keeps: `mapping` (an
    /// anon_vma with bit 0 set, or an address_space) and `index` (the page
    /// offset in it). A PFN freed and reused holds another identity.
    pub mapping: u64,
    pub index: u64,
    /// The folio's size in base pages (0: unknown, a large folio on a
    /// kernel whose folio order numatrace cannot find); in a
    /// [`demote_flags::BATCH_END`] record, the pages the batch demoted.
    pub nr_pages: u32,
    /// [`demote_flags`].
    pub flags: u32,
    /// The cgroup (v2) id of the memory cgroup the folio is charged to (0:
    /// uncharged, a kernel object's, or not readable here).
    pub memcg_id: u64,
}

impl DemoteEvent {
    /// The reclaimer's name ([`reclaimer::NAMES`]); "other" for a value
    /// this numatrace does not know (decoding refuses those).
    pub fn reclaimer_name(&self) -> &'static str {
        reclaimer::NAMES
            .get(self.reclaimer as usize)
            .copied()
            .unwrap_or("other")
    }
}

/// One region of a DAMON target at the end of an aggregation interval
/// (damon:damon_aggregated), from the kdamond numatrace started: what DAMON
/// saw accessed, beside what NUMA balancing decided.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DamonEvent {
    pub kind: u32,
    /// Regions of the target in this aggregation.
    pub nr_regions: u32,
    /// CLOCK_MONOTONIC, like the other records.
    pub ts_ns: u64,
    pub target_id: u64,
    /// The region `[start, end)`: physical byte addresses (DAMON's paddr
    /// operations).
    pub start: u64,
    pub end: u64,
    /// Samples of this aggregation that found the access bit set.
    pub nr_accesses: u32,
    /// Aggregations the region's access rate has kept.
    pub age: u32,
    /// The kdamond thread that reported it.
    pub kdamond_tid: u32,
    pub _pad: u32,
}

/// Bits of [`DemoteEvent::flags`].
pub mod demote_flags {
    /// Not a folio: the end of one reclaim batch's demotion
    /// (`demote_folio_list` returning), with the pages it demoted as the
    /// kernel adds them to `pgdemote_*`; the thread's folio records since
    /// its previous batch end were this batch's tries.
    pub const BATCH_END: u32 = 1;
}

/// What the probes keep of a folio between its hint faults, a slot of the
/// `STAMPS` array (all zero until a fault first writes it; `written_ns` is
/// never 0 after). Written only at hint faults: the scanner's own
/// exchanges are left alone (their pass is found from the folio's access
/// value, see `ext_flags::NEEDS_PASS`), since every instruction there is
/// charged to the scanner 32-fold and delays the next scan.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Stamp {
    /// When a fault last wrote the slot.
    pub written_ns: u64,
    /// The process of the last fault whose decision exchanged.
    pub tgid: u32,
    /// Protections seen at the folio's faults (one per fault that found
    /// it protected again since the one before).
    pub scan_count: u32,
    /// The access value the last decision's exchange left in the folio
    /// (masked to the field's width): a fault that finds it there was not
    /// protected again since. [`ACCESS_UNKNOWN`] while a fault is under
    /// way or when that decision made no exchange.
    pub access: u32,
    /// The count the fault-count patch would hold in the folio when the
    /// folio was not protected again since: the count of the last fault
    /// whose decision exchanged it (at `written_ns`). Valid while
    /// `fault_count_known` is 1.
    pub stored_fault_count: u32,
    pub fault_count_known: u32,
    pub reserved: u32,
}

/// `Stamp::access` when the folio's stored access time is not known.
pub const ACCESS_UNKNOWN: u32 = u32::MAX;

/// The per-mm counters (`MM_FAULT_COUNT`, keyed by the mm_struct's address,
/// dropped with the mm).
pub const MM_FAULT_COUNT_ENTRIES: u32 = 65536;

/// One `MM_FAULT_COUNT` entry: the mm's counter as the patch keeps it, and its
/// hint-fault sequence number.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MmFaultCount {
    /// The patch's `atomic_t hint_faults` (wrapping like an int).
    pub count: u32,
    /// [`MmFaultCount::BASE_KNOWN`] once numatrace saw the counter's last
    /// reset, [`MmFaultCount::BASE_RESET`] until a PTE fault counts after it.
    pub base_known: u32,
    /// numatrace's count of the mm's hint faults since attach, PTE and PMD
    /// alike (`FaultEvent::seq_mm`); never reset while the mm lives.
    pub seq: u64,
}

impl MmFaultCount {
    pub const BASE_KNOWN: u32 = 1;
    pub const BASE_RESET: u32 = 2;
}
/// Default ring buffer size in bytes.
pub const DEFAULT_RING_BYTES: u32 = 16 << 20;
/// Reasons of mm_migrate_pages counted per slot in `MIGRATE_REASON_PAGES`.
pub const MIGRATE_REASONS: u32 = 16;
/// CPUs covered by the `CPU_NODE` map.
pub const MAX_CPUS: u32 = 8192;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] integers and byte arrays, any bit pattern valid.
    unsafe impl aya::Pod for super::FaultEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ScanEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SkipEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Stamp {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::MmFaultCount {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_buckets_are_ceil_log2() {
        assert_eq!(log2_bucket(0), 0);
        assert_eq!(log2_bucket(1), 0);
        assert_eq!(log2_bucket(2), 1);
        assert_eq!(log2_bucket(3), 2);
        assert_eq!(log2_bucket(4), 2);
        assert_eq!(log2_bucket(5), 3);
        assert_eq!(log2_bucket(1 << 40), 40);
        assert_eq!(log2_bucket((1 << 40) + 1), 41);
        assert_eq!(log2_bucket(u64::MAX), 63);
        for b in 1..63 {
            // every value in (2^(b-1), 2^b] lands in b
            assert_eq!(log2_bucket((1u64 << (b - 1)) + 1), b);
            assert_eq!(log2_bucket(1u64 << b), b);
        }
    }

    #[test]
    fn ids_are_the_halves_of_pid_tgid() {
        let f = FaultEvent {
            pid_tgid: (7u64 << 32) | 9,
            ..FaultEvent::default()
        };
        assert_eq!((f.tgid(), f.tid()), (7, 9));
        let s = ScanEvent {
            pid_tgid: (u64::from(u32::MAX) << 32) | 1,
            ..ScanEvent::default()
        };
        assert_eq!(s.tgid(), u32::MAX);
        let k = SkipEvent {
            pid_tgid: 3 << 32,
            ..SkipEvent::default()
        };
        assert_eq!(k.tgid(), 3);
    }

    #[test]
    fn decision_values_read_back() {
        assert_eq!(decision::of(true), 1);
        assert_eq!(decision::of(false), 2);
        let mut f = FaultEvent::default();
        assert_eq!(f.decision, decision::NONE);
        assert!(!f.kernel_promoted());
        f.decision = decision::of(true);
        assert!(f.kernel_promoted());
        f.decision = decision::of(false);
        assert!(!f.kernel_promoted());
        // Unknown values (a damaged trace) are not a promotion.
        f.decision = 3;
        assert!(!f.kernel_promoted());
    }

    #[test]
    fn tiering_decision_needs_the_flag_and_a_tiering_outcome() {
        let mut f = FaultEvent {
            outcome: Outcome::RejectLatency as u8,
            ..FaultEvent::default()
        };
        assert!(!f.decided() && !f.tiering_decision());
        f.flags = fault_flags::DECIDED;
        assert!(f.decided() && f.tiering_decision());
        for o in [Outcome::NotTiering as u8, Outcome::NoDecision as u8, 200] {
            f.outcome = o;
            assert!(!f.tiering_decision(), "{o}");
        }
        assert_eq!(f.typed_outcome(), Outcome::NoDecision);
    }

    #[test]
    fn migration_reads_the_flag_and_the_result() {
        let mut f = FaultEvent {
            migrate_ok: 1,
            ..FaultEvent::default()
        };
        // Without MIGRATE_TRIED the result is not one.
        assert!(!f.migrate_tried() && !f.migrated() && !f.migrate_failed());
        f.flags = fault_flags::MIGRATE_TRIED;
        assert!(f.migrate_tried() && f.migrated() && !f.migrate_failed());
        f.migrate_ok = 0;
        assert!(f.migrate_tried() && !f.migrated() && f.migrate_failed());
    }

    #[test]
    fn each_flag_accessor_reads_its_own_bit() {
        type Read = fn(&FaultEvent) -> bool;
        let flags: [(u8, Read); 4] = [
            (fault_flags::HAS_STAMP, FaultEvent::has_stamp),
            (fault_flags::STAMP_OTHER_MM, FaultEvent::stamp_other_mm),
            (fault_flags::KERNEL_LATENCY, FaultEvent::has_kernel_latency),
            (fault_flags::HAS_FAULT_HOOK, FaultEvent::has_fault_hook),
        ];
        let ext: [(u64, Read); 17] = [
            (ext_flags::PMD_FAULT, FaultEvent::pmd_fault),
            (ext_flags::MM_FAULT_COUNT, FaultEvent::has_mm_fault_count),
            (
                ext_flags::STORED_FAULT_COUNT,
                FaultEvent::has_stored_fault_count,
            ),
            (ext_flags::NODE_CANDIDATES, FaultEvent::has_node_candidates),
            (ext_flags::THRESHOLD_PATH, FaultEvent::threshold_path),
            (
                ext_flags::FAULT_COUNT_AFTER_RESET,
                FaultEvent::fault_count_after_reset,
            ),
            (ext_flags::LATE_END, FaultEvent::late_end),
            (ext_flags::NO_ACCOUNT, FaultEvent::no_account),
            (ext_flags::AT_EXIT, FaultEvent::at_exit),
            (ext_flags::UNFOLLOWED, FaultEvent::unfollowed),
            (ext_flags::FOLIO_ACCESS, FaultEvent::folio_access),
            (
                ext_flags::STAMP_ACCESS_DIFFERS,
                FaultEvent::stamp_access_differs,
            ),
            (ext_flags::ACCESS_AT_FAULT, FaultEvent::has_access_at_fault),
            (ext_flags::NEEDS_PASS, FaultEvent::needs_pass),
            (ext_flags::STAMP_FROM_PASS, FaultEvent::stamp_from_pass),
            (ext_flags::STAMP_UNMATCHED, FaultEvent::stamp_unmatched),
            (ext_flags::XCHG_INFERRED, FaultEvent::xchg_inferred),
        ];
        for (bit, read) in flags {
            let on = FaultEvent {
                flags: bit,
                ..FaultEvent::default()
            };
            let others = FaultEvent {
                flags: !bit,
                ext_flags: u64::MAX,
                tnf_flags: u32::MAX,
                ..FaultEvent::default()
            };
            assert!(read(&on) && !read(&others), "flag {bit}");
        }
        for (bit, read) in ext {
            let on = FaultEvent {
                ext_flags: bit,
                ..FaultEvent::default()
            };
            let others = FaultEvent {
                ext_flags: !bit,
                flags: u8::MAX,
                tnf_flags: u32::MAX,
                ..FaultEvent::default()
            };
            assert!(read(&on) && !read(&others), "ext flag {bit}");
        }
        let local = FaultEvent {
            tnf_flags: tnf::FAULT_LOCAL,
            ..FaultEvent::default()
        };
        assert!(local.fault_local());
        let others = FaultEvent {
            tnf_flags: !tnf::FAULT_LOCAL,
            flags: u8::MAX,
            ext_flags: u64::MAX,
            ..FaultEvent::default()
        };
        assert!(!others.fault_local());
        let scan = ScanEvent {
            ext_flags: scan_ext_flags::MM_FAULT_COUNT,
            ..ScanEvent::default()
        };
        assert!(scan.has_mm_fault_count());
        assert!(!ScanEvent::default().has_mm_fault_count());
    }

    #[test]
    fn an_unsent_fault_is_dated_by_the_kernels_access_clock() {
        let mask = (1 << 21) - 1;
        let ev = FaultEvent {
            ts_ns: 10_000_000_000,
            access_at_fault: mask - 5,
            ext_flags: ext_flags::NEEDS_PASS | ext_flags::ACCESS_AT_FAULT,
            ..FaultEvent::default()
        };
        // The clock read 20 ms (wrapped) 2 s before the fault: 2,026 ms
        // since the folio's value.
        let h = HistEntry::of_access_clock(&ev, 8_000_000_000, 20, mask, 0);
        assert_eq!(h.map(|h| h.latency_ns), Some(2_026_000_000));
        // A clock read after the fault counts back.
        let h = HistEntry::of_access_clock(&ev, 10_500_000_000, 520, mask, 0);
        assert_eq!(h.map(|h| h.latency_ns), Some(26_000_000));
        // Without a clock, or for a folio not protected again: nothing.
        assert!(HistEntry::of_access_clock(&ev, 0, 20, mask, 0).is_none());
        let plain = FaultEvent {
            ext_flags: ext_flags::ACCESS_AT_FAULT,
            ..ev
        };
        assert!(HistEntry::of_access_clock(&plain, 8_000_000_000, 20, mask, 0).is_none());
    }

    #[test]
    fn layouts_are_stable() {
        assert_eq!(core::mem::size_of::<FaultEvent>(), 208);
        assert_eq!(
            core::mem::offset_of!(FaultEvent, src_pfn),
            RECORD_SIZES_V6[0]
        );
        assert_eq!(
            [
                core::mem::size_of::<ScanEvent>(),
                core::mem::size_of::<SkipEvent>()
            ],
            [RECORD_SIZES_V6[1], RECORD_SIZES_V6[2]]
        );
        assert_eq!(core::mem::size_of::<ScanEvent>(), 96);
        assert_eq!(core::mem::size_of::<SkipEvent>(), 48);
        assert_eq!(core::mem::size_of::<DemoteEvent>(), 80);
        assert_eq!(
            core::mem::offset_of!(DemoteEvent, memcg_id),
            DEMOTE_RECORD_SIZE_V5
        );
        assert_eq!(core::mem::size_of::<DamonEvent>(), 56);
        assert_eq!(core::mem::offset_of!(DamonEvent, ts_ns), 8);
        assert_eq!(core::mem::offset_of!(DamonEvent, start), 24);
        assert_eq!(core::mem::offset_of!(DamonEvent, nr_accesses), 40);
        assert_eq!(core::mem::offset_of!(DamonEvent, kdamond_tid), 48);
        assert_eq!(core::mem::size_of::<Stamp>(), 32);
        assert_eq!(
            core::mem::offset_of!(FaultEvent, mapping),
            RECORD_SIZES_V4[0]
        );
        assert_eq!(
            [
                core::mem::size_of::<ScanEvent>(),
                core::mem::size_of::<SkipEvent>()
            ],
            [RECORD_SIZES_V4[1], RECORD_SIZES_V4[2]]
        );
        // Appended fields: the older records are prefixes.
        assert_eq!(
            core::mem::offset_of!(FaultEvent, access_at_fault),
            RECORD_SIZES_V2[0]
        );
        assert_eq!(
            core::mem::offset_of!(ScanEvent, access_first),
            RECORD_SIZES_V2[1]
        );
        assert_eq!(
            core::mem::offset_of!(FaultEvent, mapping),
            RECORD_SIZES_V3[0]
        );
        assert_eq!(
            core::mem::offset_of!(ScanEvent, cgroup_id),
            RECORD_SIZES_V3[1]
        );
        assert_eq!(
            core::mem::offset_of!(SkipEvent, cgroup_id),
            RECORD_SIZES_V3[2]
        );
    }
}
