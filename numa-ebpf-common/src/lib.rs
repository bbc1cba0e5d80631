//! Types shared by the BPF programs (`numa-ebpf`) and userspace (`numa-cli`):
//! counter indices, map names, program names and `#[repr(C)]` records.
//!
//! `no_std` so the BPF side can use it; the `user` feature adds the
//! `aya::Pod` impls userspace needs to read these types out of maps.
#![no_std]

/// Bumped whenever a layout in this crate changes; the BPF object carries it
/// in `ABI_VERSION` and userspace refuses an object with another value.
pub const ABI_VERSION: u32 = 1;

/// Indices into the per-CPU `COUNTERS` array. Each BPF program bumps the
/// counter of the event it saw; userspace sums across CPUs.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// NUMA hint faults (numa_migrate_check / numa_migrate_prep entries).
    HintFaults = 0,
    /// should_numa_migrate_memory returns.
    Decisions = 1,
    /// should_numa_migrate_memory returned true.
    DecisionPromote = 2,
    /// should_numa_migrate_memory returned false.
    DecisionReject = 3,
    /// last_cpupid exchanges (the tiering scan stamp and other callers).
    CpupidXchg = 4,
    /// change_prot_numa calls (one scanned range each).
    ScanRanges = 5,
    /// PTEs change_prot_numa reported as updated.
    ScanPtesUpdated = 6,
    /// migrate_misplaced_{folio,page} calls that succeeded.
    MigrateSuccess = 7,
    /// migrate_misplaced_{folio,page} calls that failed.
    MigrateFail = 8,
    /// task_numa_fault calls.
    FaultAccount = 9,
    /// do_huge_pmd_numa_page calls.
    ThpFaults = 10,
    /// change_huge_pmd calls.
    ThpScans = 11,
    /// sched:sched_skip_vma_numa events.
    VmaSkips = 12,
    /// migrate:mm_migrate_pages events.
    MigrateTpEvents = 13,
    /// Hits of doctor's trial probes.
    TrialHits = 14,
    /// Ring buffer reservations that failed (events lost).
    RingDrops = 15,
    /// Per-folio state entries evicted before use.
    MapEvictions = 16,
    /// Hint faults whose folio had no scan stamp.
    StampMisses = 17,
}

/// Number of slots in `COUNTERS` (room to grow without an ABI bump).
pub const COUNTER_SLOTS: u32 = 32;

/// Map names, as userspace looks them up.
pub mod maps {
    pub const COUNTERS: &str = "COUNTERS";
}

/// Program names (the Rust function names in `numa-ebpf`). Each logical hook
/// has one program per mechanism; userspace picks one through the attach plan.
pub mod programs {
    pub const FENTRY_HINT_FAULT: &str = "fentry_hint_fault";
    pub const KPROBE_HINT_FAULT: &str = "kprobe_hint_fault";
    pub const FEXIT_DECISION: &str = "fexit_decision";
    pub const KRETPROBE_DECISION: &str = "kretprobe_decision";
    pub const FENTRY_SCAN_STAMP: &str = "fentry_scan_stamp";
    pub const KPROBE_SCAN_STAMP: &str = "kprobe_scan_stamp";
    pub const FEXIT_SCAN_RANGE: &str = "fexit_scan_range";
    pub const KRETPROBE_SCAN_RANGE: &str = "kretprobe_scan_range";
    pub const FEXIT_MIGRATE: &str = "fexit_migrate";
    pub const KRETPROBE_MIGRATE: &str = "kretprobe_migrate";
    pub const FENTRY_FAULT_ACCOUNT: &str = "fentry_fault_account";
    pub const KPROBE_FAULT_ACCOUNT: &str = "kprobe_fault_account";
    pub const FENTRY_THP_FAULT: &str = "fentry_thp_fault";
    pub const KPROBE_THP_FAULT: &str = "kprobe_thp_fault";
    pub const FENTRY_THP_SCAN: &str = "fentry_thp_scan";
    pub const KPROBE_THP_SCAN: &str = "kprobe_thp_scan";
    pub const TP_SKIP_VMA: &str = "tp_skip_vma";
    pub const TP_MIGRATE_PAGES: &str = "tp_migrate_pages";
    pub const TRIAL_FENTRY: &str = "trial_fentry";
    pub const TRIAL_KPROBE: &str = "trial_kprobe";
    pub const TRIAL_TRACEPOINT: &str = "trial_tracepoint";
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
