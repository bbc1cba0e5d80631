//! Maps and settings shared by every hook, and small helpers.
//!
//! Settings are read-only globals that userspace sets before load
//! (`EbpfLoader::override_global`), the Rust spelling of libbpf's
//! `const volatile`.
use aya_ebpf::{
    bindings::{
        bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE, BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE,
        BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP,
    },
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel,
        generated::{
            bpf_get_current_ancestor_cgroup_id, bpf_get_current_cgroup_id, bpf_get_current_comm,
            bpf_get_current_task_btf, bpf_get_smp_processor_id, bpf_jiffies64,
            bpf_task_storage_get,
        },
    },
    macros::{btf_map, map},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
};
use numa_ebpf_common::{
    Counter, FaultEvent, MmFaultCount, Stamp, ACCESS_UNKNOWN, COUNTER_SLOTS, DEFAULT_RING_BYTES,
    FOLLOW_HASH, HIST_SLOTS, MAX_CPUS, MAX_SPANS, MIGRATE_REASONS, MM_FAULT_COUNT_ENTRIES,
    OUTCOMES,
};

/// Per-CPU event counters, indexed by [`Counter`]; userspace sums the CPUs.
#[map(name = "COUNTERS")]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);

/// Fault, scan and skip records for userspace. Resized by userspace.
#[map(name = "EVENTS")]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

/// Per-folio scan stamps: one slot per followed PFN of the slow nodes'
/// spans (see [`stamp_slot`]). An array, not a hash: a slot is found by
/// arithmetic, costs only its value's bytes, and is never evicted. Sized by
/// userspace from the spans and the sampling rate.
#[map(name = "STAMPS")]
pub static STAMPS: Array<Stamp> = Array::with_max_entries(1, 0);

/// `vmemmap_base` once read (slot 0; 0 until the first lookup), so the
/// probe-read happens once, not on every folio.
#[map(name = "VMEMMAP")]
pub static VMEMMAP: Array<u64> = Array::with_max_entries(1, 0);

/// `NODE_DATA(nid)` of nodes below 64 once read (0 until the first
/// lookup): a node's pglist_data never moves once the node is online.
#[map(name = "PGDAT")]
pub static PGDAT: Array<u64> = Array::with_max_entries(64, 0);

/// The global hint-fault sequence number (slot 0).
#[map(name = "GLOBAL_SEQ")]
pub static GLOBAL_SEQ: Array<u64> = Array::with_max_entries(1, 0);

/// Per mm_struct address: the fault-count patch's `mm->hint_faults` and
/// numatrace's per-process hint-fault sequence number (one lookup a fault
/// for both; the scanner runs in a thread of the mm it scans). A plain
/// hash, not an LRU, so a counter is never silently restarted; an entry
/// goes with its mm (`__mmdrop`), and a full map is counted
/// (`FaultCountUnavailable`) with the fault's counters unknown.
#[map(name = "MM_FAULT_COUNT")]
pub static MM_FAULT_COUNT: HashMap<u64, MmFaultCount> =
    HashMap::with_max_entries(MM_FAULT_COUNT_ENTRIES, 0);

/// What one thread is in the middle of: a hint fault being decided, or a
/// scanner pass. Task local storage: the kernel hangs the value off the
/// task itself, so a lookup is a pointer walk instead of hashing pid_tgid
/// into a shared LRU map on every hook (the hottest ones run several times
/// per hint fault), and it cannot fill up or be evicted.
///
/// # Minimum kernel version
///
/// bpf_task_storage_get in tracing and kprobe programs: 5.11.
#[btf_map(name = "THREADS")]
pub static THREADS: TaskStorage<ThreadCtx> = TaskStorage::new();

/// A BTF map definition of a task storage map (aya-ebpf 0.2.1 has the
/// inode, socket and cgroup kinds but not this one): the layout its
/// `btf_map_def!` generates, which aya's loader reads from BTF.
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: the fields are placeholders the loader reads from BTF; they are
// never dereferenced.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    pub const fn new() -> Self {
        TaskStorage {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    /// The current task's value; created zeroed when `create` and absent.
    #[inline(always)]
    fn current(&self, create: bool) -> Option<*mut T> {
        let flags = if create {
            BPF_LOCAL_STORAGE_GET_F_CREATE as u64
        } else {
            0
        };
        // SAFETY: the map pointer is this map's definition (relocated by the
        // loader) and the task is the current one, a BTF pointer the
        // verifier accepts; the helper returns NULL or a pointer to a value
        // of the map's value size.
        let p = unsafe {
            bpf_task_storage_get(
                core::ptr::from_ref(self).cast_mut().cast(),
                bpf_get_current_task_btf().cast(),
                core::ptr::null_mut(),
                flags,
            )
        };
        if p.is_null() {
            None
        } else {
            Some(p.cast())
        }
    }
}

/// CPU -> NUMA node, filled by userspace from sysfs.
#[map(name = "CPU_NODE")]
pub static CPU_NODE: Array<u32> = Array::with_max_entries(MAX_CPUS, 0);

/// Log2 histograms, slot `numa_ebpf_common::hist_slot(outcome, bucket)`.
#[map(name = "HIST_LATENCY")]
pub static HIST_LATENCY: PerCpuArray<u64> = PerCpuArray::with_max_entries(HIST_SLOTS as u32, 0);
#[map(name = "HIST_DELTA")]
pub static HIST_DELTA: PerCpuArray<u64> = PerCpuArray::with_max_entries(HIST_SLOTS as u32, 0);
/// Sums for the histograms: `outcome * 2` latency ns, `outcome * 2 + 1` delta.
#[map(name = "HIST_SUM")]
pub static HIST_SUM: PerCpuArray<u64> = PerCpuArray::with_max_entries((OUTCOMES * 2) as u32, 0);

/// mm_migrate_pages pages by reason: `reason * 2` succeeded, `+ 1` failed.
#[map(name = "MIGRATE_REASON_PAGES")]
pub static MIGRATE_REASON_PAGES: PerCpuArray<u64> =
    PerCpuArray::with_max_entries(MIGRATE_REASONS * 2, 0);

/// Per-thread state; see [`THREADS`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ThreadCtx {
    pub ev: FaultEvent,
    /// The access-time exchange seen inside the decision, and its new value.
    pub xchg_seen: u32,
    pub xchg_new: u32,
    /// Inside a scanner pass, with its range, its start and the kernel's
    /// access clock then.
    pub scanning: u32,
    pub scan_access_first: u32,
    pub scan_start: u64,
    pub scan_end: u64,
    pub scan_start_ns: u64,
    /// The decision's kprobe saves src_nid << 32 | dst_cpu for its kretprobe.
    pub saved_arg: u64,
    /// do_huge_pmd_numa_page's `vmf->address & HPAGE_PMD_MASK`: the next
    /// hint fault at that address is its PMD fault (0: none pending).
    pub thp_haddr: u64,
    /// The hint-fault counters at the pass's start, read with its
    /// timestamp: a fault during the pass never precedes them.
    pub scan_seq_global: u64,
    pub scan_seq_mm: u64,
    /// The scanned mm's fault-count counter at the pass's start.
    pub scan_fault_count: u32,
    pub scan_fault_count_known: u32,
    /// The folio's fault-count field before this fault's exchange was
    /// written ahead of the decision: restored when the decision made none.
    /// `fault_count_exchanged`: 0 no counter, 1 written ahead, 2 the folio has no
    /// stamp (the decision makes one if it exchanges).
    pub fault_count_exchanged: u32,
    pub prev_fault_count_known: u32,
    pub prev_fault_count: u32,
    pub prev_fault_count_ns: u64,
    /// Where a pointer argument becomes a number (see [`as_number`]).
    pub number: u64,
    /// [`candidate_counts`] at the hint fault's entry, when the folio's
    /// value was the access clock's then (`candidates_read` 1): the
    /// decision's exchange may leave it unchanged.
    pub candidates_read: u32,
    pub candidate_diff: u32,
    pub candidates: u64,
    /// The folio the decision's exchange was made on, and the access
    /// value the kernel kept in it before (read from the folio,
    /// `ACCESS_UNKNOWN` when the layout is not known).
    pub xchg_folio: u64,
    pub folio_access: u32,
}

// Settings (see module docs). `#[no_mangle]` keeps the names userspace sets.
#[no_mangle]
static SYM_NB_MODE: u64 = 0;
#[no_mangle]
static NB_MODE_AT_LOAD: u32 = 2;
#[no_mangle]
static SYM_HOT_THRESHOLD: u64 = 0;
#[no_mangle]
static SYM_NODE_DATA: u64 = 0;
#[no_mangle]
static OFF_NBP_THRESHOLD: u32 = 0;
#[no_mangle]
static TOPTIER_MASK: u64 = 1;
#[no_mangle]
static CPUPID_MASK: u32 = (1 << 21) - 1;
#[no_mangle]
static ACCESS_TIME_BUCKETS: u32 = 0;
/// jiffies_to_msecs(j) = ceil(j * JIFFY_MS_NUM / JIFFY_MS_DEN), from the
/// kernel's HZ (JIFFY_MS_NUM 0: HZ unknown).
#[no_mangle]
static JIFFY_MS_NUM: u64 = 0;
#[no_mangle]
static JIFFY_MS_DEN: u64 = 1;
/// Where a folio's LAST_CPUPID field is: its shift in page->flags and the
/// node field's (0: unknown), or the byte offset of `_last_cpupid` where
/// the kernel keeps it outside the flags (0: in the flags).
#[no_mangle]
static ACCESS_PGSHIFT: u32 = 0;
#[no_mangle]
static NODES_PGSHIFT: u32 = 0;
#[no_mangle]
static OFF_LAST_CPUPID: u32 = 0;
/// task_struct.mm, vm_fault.address (inside its anonymous struct) and
/// pglist_data.vm_stat[PGPROMOTE_CANDIDATE], from BTF (0: unknown).
#[no_mangle]
static OFF_TASK_MM: u32 = 0;
#[no_mangle]
static OFF_VMF_ADDRESS: u32 = 0;
/// task_struct.comm, from BTF (0: unknown).
#[no_mangle]
static OFF_TASK_COMM: u32 = 0;
/// task_struct.flags (PF_KSWAPD tells kswapd's demotions).
#[no_mangle]
static OFF_TASK_FLAGS: u32 = 0;
/// PG_head in page->flags (64: unknown), and where a large folio keeps
/// its order (a byte: folio._flags_1 on 6.12+, folio._folio_order on 6.1).
#[no_mangle]
static PG_HEAD_BIT: u32 = 64;
#[no_mangle]
static OFF_FOLIO_ORDER: u32 = 0;
#[no_mangle]
static OFF_PROMOTE_CANDIDATE: u32 = 0;
/// `__per_cpu_offset`, pglist_data.per_cpu_nodestats and
/// per_cpu_nodestat.vm_node_stat_diff[PGPROMOTE_CANDIDATE] (0: unknown):
/// where a CPU's share of the node's candidate count waits to be folded.
#[no_mangle]
static SYM_PER_CPU_OFFSET: u64 = 0;
#[no_mangle]
static OFF_PCP_NODESTATS: u32 = 0;
#[no_mangle]
static OFF_CANDIDATE_DIFF: u32 = 0;
/// mm_struct.hint_faults on the fault-count RFC's kernel; 0 on every other
/// kernel.
#[no_mangle]
static OFF_MM_HINT_FAULTS: u32 = 0;
#[no_mangle]
static SAMPLE_EVERY: u64 = 1;
#[no_mangle]
static FILTER_TGID: u32 = 0;
#[no_mangle]
static FILTER_CGROUP: u64 = 0;
/// Depth of `FILTER_CGROUP` below the cgroup v2 root (the root is 0): the
/// task matches when its ancestor at this depth is that cgroup, so the
/// filter takes in every descendant.
#[no_mangle]
static FILTER_CGROUP_LEVEL: u32 = 0;
/// Where `struct page`s live: the address of the kernel variable
/// `vmemmap_base` (randomised with the memory layout), or 0 when the kernel
/// has none and the fixed `VMEMMAP_FIXED` holds.
#[no_mangle]
static VMEMMAP_SYM: u64 = 0;
#[no_mangle]
static VMEMMAP_FIXED: u64 = 0xffff_ea00_0000_0000;
/// sizeof(struct page), from BTF.
#[no_mangle]
static PAGE_STRUCT_SIZE: u64 = 64;
/// One PFN in `1 << FOLLOW_SHIFT` is followed (see [`stamp_slot`]).
#[no_mangle]
static FOLLOW_SHIFT: u32 = 0;
/// The slow nodes' PFN spans `[SPAN_START, SPAN_END)` and the `STAMPS`
/// slot each begins at; unused spans are empty.
#[no_mangle]
static SPAN_START: [u64; MAX_SPANS] = [0; MAX_SPANS];
#[no_mangle]
static SPAN_END: [u64; MAX_SPANS] = [0; MAX_SPANS];
#[no_mangle]
static SPAN_BASE: [u64; MAX_SPANS] = [0; MAX_SPANS];
/// Pending bytes in `EVENTS` that wake the reader at once (see [`emit`]).
#[no_mangle]
static RING_WAKE_BYTES: u64 = (DEFAULT_RING_BYTES / 4) as u64;

macro_rules! setting {
    ($name:ident) => {
        // SAFETY: a plain read of a global that is constant after load.
        unsafe { core::ptr::read_volatile(&$name) }
    };
}

/// Counts one occurrence of a rare condition. Returns this CPU's count
/// when it is a power of two (1, 2, 4, ...): the caller logs then, so the
/// first occurrence is always reported and a flood costs a few dozen log
/// records per CPU, never one per event.
#[inline(always)]
pub fn count_rare(counter: Counter) -> Option<u64> {
    let slot = COUNTERS.get_ptr_mut(counter as u32)?;
    // SAFETY: as in `add`: this CPU's slot, preemption off.
    let n = unsafe {
        *slot += 1;
        *slot
    };
    (n & (n - 1) == 0).then_some(n)
}

/// The value `numa_balancing` had when the probes were attached.
#[inline(always)]
pub fn numa_balancing_mode_at_load() -> u32 {
    setting!(NB_MODE_AT_LOAD)
}

/// Adds `n` to a per-CPU counter. Per-CPU slots need no atomics.
#[inline(always)]
pub fn count(counter: Counter, n: u64) {
    add(&COUNTERS, counter as u32, n);
}

/// Adding 0 is skipped: it would cost a map lookup, and a variable count
/// is often 0 (a promotion moves one folio: its succeeded or its failed
/// page count is 0). A constant count folds the test away.
#[inline(always)]
pub fn add(array: &PerCpuArray<u64>, index: u32, n: u64) {
    if n == 0 {
        return;
    }
    if let Some(slot) = array.get_ptr_mut(index) {
        // SAFETY: the pointer comes from a successful per-CPU array lookup and
        // only this CPU writes to its slot (preemption is off in BPF programs).
        unsafe { *slot += n };
    }
}

#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
pub fn cpu() -> u32 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_smp_processor_id() }
}

#[inline(always)]
pub fn cgroup_id() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_current_cgroup_id() }
}

/// The id of the current task's cgroup ancestor at `level` (its own cgroup
/// when that is its depth; 0 when it is shallower).
#[inline(always)]
pub fn ancestor_cgroup_id(level: u32) -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_current_ancestor_cgroup_id(level as i32) }
}

/// The current task's name, read straight from the task as two words (the
/// verifier allows word loads anywhere inside a char array of a typed
/// kernel pointer) instead of bpf_get_current_comm's string copy, which
/// costs about 140 instructions more. The kernel keeps `comm` NUL-padded,
/// so the words are what the helper would have copied.
#[inline(always)]
pub fn current_comm(comm: &mut [u8; 16]) {
    let off = setting!(OFF_TASK_COMM);
    if off == 0 {
        // SAFETY: the helper writes at most 16 bytes into `comm`.
        unsafe { bpf_get_current_comm(comm.as_mut_ptr().cast(), 16) };
        return;
    }
    let dst = comm.as_mut_ptr().cast::<u64>();
    // SAFETY: the current task is valid for the program's run and `off`
    // is task_struct.comm (from BTF, checked again by the verifier); `comm`
    // is 16 bytes, and 8-aligned in every record that holds one.
    unsafe {
        let src = bpf_get_current_task_btf().cast::<u8>().add(off as usize);
        dst.write_unaligned(core::ptr::read_volatile(src.cast::<u64>()));
        dst.add(1)
            .write_unaligned(core::ptr::read_volatile(src.add(8).cast::<u64>()));
    }
}

/// The current task's `flags` (PF_*), 0 when its offset is unknown.
#[inline(always)]
pub fn current_task_flags() -> u32 {
    let off = setting!(OFF_TASK_FLAGS);
    if off == 0 {
        return 0;
    }
    // SAFETY: the current task is valid for the program's run and `off`
    // is task_struct.flags (from BTF, checked again by the verifier).
    unsafe {
        let src = bpf_get_current_task_btf().cast::<u8>().add(off as usize);
        core::ptr::read_volatile(src.cast::<u32>())
    }
}

#[inline(always)]
pub fn pid_tgid() -> u64 {
    bpf_get_current_pid_tgid()
}

/// Atomically takes the next value of a sequence number (1 for the first).
#[inline(always)]
fn next_seq(slot: *mut u64) -> u64 {
    // SAFETY: `slot` points into a map value. SeqCst, not Relaxed: with
    // Relaxed LLVM emits a plain `lock add` and the returned old value is
    // garbage (the BPF backend has no fetching relaxed add); SeqCst emits
    // BPF atomic_fetch_add.
    unsafe {
        core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::SeqCst }>(
            slot, 1,
        ) + 1
    }
}

/// Takes the next global hint-fault sequence number.
#[inline(always)]
pub fn next_global_seq() -> u64 {
    GLOBAL_SEQ.get_ptr_mut(0).map_or(0, next_seq)
}

/// The current (not incremented) global sequence number.
#[inline(always)]
pub fn current_global_seq() -> u64 {
    // SAFETY: a read of a map value; a torn read is impossible for an
    // aligned u64.
    GLOBAL_SEQ
        .get_ptr_mut(0)
        .map_or(0, |p| unsafe { core::ptr::read_volatile(p) })
}

/// A u64 of kernel memory at `addr` (None for 0 or an unreadable address).
#[inline(always)]
pub fn read_kernel_u64(addr: u64) -> Option<u64> {
    if addr == 0 {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel copes with any address.
    unsafe { bpf_probe_read_kernel(addr as *const u64) }.ok()
}

/// `task->mm` (0 when unknown or a kernel thread).
#[inline(always)]
pub fn task_mm(task: u64) -> u64 {
    let off = setting!(OFF_TASK_MM);
    if off == 0 || task == 0 {
        return 0;
    }
    read_kernel_u64(task + u64::from(off)).unwrap_or(0)
}

/// `current->mm`, read straight from the task: the current task is a
/// typed pointer to the verifier, and the offset a constant it checks
/// against the kernel's BTF, so no probe-read helper is needed.
#[inline(always)]
pub fn current_mm() -> u64 {
    let off = setting!(OFF_TASK_MM);
    if off == 0 {
        return 0;
    }
    // SAFETY: the current task is valid for the program's run; the field
    // at `off` is task_struct.mm (from BTF, checked again by the verifier).
    unsafe {
        let task = bpf_get_current_task_btf().cast::<u8>();
        core::ptr::read_volatile(task.add(off as usize).cast::<u64>())
    }
}

/// `vmf->address` (0 when unknown).
#[inline(always)]
pub fn vmf_address(vmf: u64) -> u64 {
    let off = setting!(OFF_VMF_ADDRESS);
    if off == 0 || vmf == 0 {
        return 0;
    }
    read_kernel_u64(vmf + u64::from(off)).unwrap_or(0)
}

/// The counters of `mm` at a hint fault: the patch's, do_numa_page's
/// `atomic_inc(&mm->hint_faults)` for a PTE fault, a plain read for a PMD
/// one (should_numa_migrate_memory's `atomic_read`); and the next
/// per-process sequence number, for every hint fault. An mm numatrace has
/// not seen yet starts at 0 (its counter before attach is not known).
#[inline(always)]
pub fn count_mm_fault(mm: u64, pte: bool) -> Option<MmFaultCount> {
    if mm == 0 {
        return None;
    }
    let slot = match MM_FAULT_COUNT.get_ptr_mut(&mm) {
        Some(p) => p,
        None => {
            // BPF_NOEXIST: a racing thread's insert wins.
            let _ = MM_FAULT_COUNT.insert(&mm, &MmFaultCount::default(), 1);
            let Some(p) = MM_FAULT_COUNT.get_ptr_mut(&mm) else {
                count(Counter::FaultCountUnavailable, 1);
                return None;
            };
            p
        }
    };
    // SAFETY: map value pointer; `count` is the first field.
    let c = unsafe { &mut *slot };
    let count = if pte {
        // SAFETY: as above, an aligned u32 in the map value. SeqCst for
        // a fetching add (see next_seq).
        unsafe {
            core::intrinsics::atomic_xadd::<u32, u32, { core::intrinsics::AtomicOrdering::SeqCst }>(
                &mut c.count,
                1,
            )
            .wrapping_add(1)
        }
    } else {
        // SAFETY: as above.
        unsafe { core::ptr::read_volatile(&c.count) }
    };
    // A reset the probes saw (`BASE_RESET`) is taken by the first PTE
    // fault after it, once even when threads race: the record says so.
    let base_known = if pte && c.base_known == MmFaultCount::BASE_RESET {
        // SAFETY: as above.
        let (_, won) = unsafe {
            core::intrinsics::atomic_cxchg::<
                u32,
                { core::intrinsics::AtomicOrdering::SeqCst },
                { core::intrinsics::AtomicOrdering::SeqCst },
            >(
                &mut c.base_known,
                MmFaultCount::BASE_RESET,
                MmFaultCount::BASE_KNOWN,
            )
        };
        if won {
            MmFaultCount::BASE_RESET
        } else {
            MmFaultCount::BASE_KNOWN
        }
    } else {
        c.base_known
    };
    Some(MmFaultCount {
        count,
        base_known,
        seq: next_seq(&mut c.seq),
    })
}

/// The counters of `mm` now (the patch's: the scanner's atomic_read), made
/// at 0 for an mm numatrace has not seen fault yet: the scanner usually
/// passes over a new mm before its first hint fault.
#[inline(always)]
pub fn mm_fault_count_now(mm: u64) -> Option<MmFaultCount> {
    if mm == 0 {
        return None;
    }
    let slot = match MM_FAULT_COUNT.get_ptr(&mm) {
        Some(p) => p,
        None => {
            // BPF_NOEXIST: a racing fault's insert wins.
            let _ = MM_FAULT_COUNT.insert(&mm, &MmFaultCount::default(), 1);
            let Some(p) = MM_FAULT_COUNT.get_ptr(&mm) else {
                count(Counter::FaultCountUnavailable, 1);
                return None;
            };
            p
        }
    };
    // SAFETY: a read of a map value.
    Some(unsafe { core::ptr::read_volatile(slot) })
}

/// `node_page_state(NODE_DATA(nid), PGPROMOTE_CANDIDATE)`: the node's
/// folded count, clamped at 0 as the kernel does.
#[inline(always)]
pub fn node_candidates(nid: i32) -> Option<u64> {
    let off = setting!(OFF_PROMOTE_CANDIDATE);
    if off == 0 {
        return None;
    }
    let v = read_kernel_u64(pgdat(nid)? + u64::from(off))? as i64;
    Some(v.max(0) as u64)
}

/// PGPROMOTE_CANDIDATE of node `nid` as this CPU sees it: its own
/// not-yet-folded diff and the node's count. The kernel's threshold path
/// counts a candidate with mod_node_page_state on the faulting CPU, which
/// changes one of the two (the diff, or the count when the diff folds
/// into it); nothing else counts candidates. Three or four probe reads:
/// for the few faults that need it (see `fault::candidate_watch`).
#[inline(always)]
pub fn candidate_counts(nid: i32) -> Option<(u8, u64)> {
    let (per_cpu, pcp_off, diff_off) = (
        setting!(SYM_PER_CPU_OFFSET),
        setting!(OFF_PCP_NODESTATS),
        setting!(OFF_CANDIDATE_DIFF),
    );
    if per_cpu == 0 || pcp_off == 0 {
        return None;
    }
    let pcp = read_kernel_u64(pgdat(nid)? + u64::from(pcp_off))?;
    let cpu_off = read_kernel_u64(per_cpu + 8 * u64::from(cpu()))?;
    let at = pcp.wrapping_add(cpu_off).wrapping_add(u64::from(diff_off));
    // SAFETY: bpf_probe_read_kernel copes with any address.
    let diff = unsafe { bpf_probe_read_kernel(at as *const u8) }.ok()?;
    Some((diff, node_candidates(nid)?))
}

/// `NODE_DATA(nid)`, read once per node below 64.
#[inline(always)]
fn pgdat(nid: i32) -> Option<u64> {
    let node_data = setting!(SYM_NODE_DATA);
    if node_data == 0 || !(0..1024).contains(&nid) {
        return None;
    }
    read_kernel_u64_once(&PGDAT, nid as u32, node_data + 8 * nid as u64)
}

/// The current thread's context, created zeroed if absent (ThreadCtx is
/// plain integers: all-zero is valid). None only when the kernel cannot
/// allocate it or the storage is busy on this CPU (a nested program).
#[inline(always)]
pub fn thread_ctx() -> Option<*mut ThreadCtx> {
    THREADS.current(true)
}

/// The current thread's context if it has one.
#[inline(always)]
pub fn existing_thread_ctx() -> Option<*mut ThreadCtx> {
    THREADS.current(false)
}

/// Sends `value` to the `EVENTS` ring, counting a full ring as a drop;
/// false when it was dropped.
///
/// The kernel copies the record (bpf_ringbuf_output): a copy in the
/// program would be a call to the BPF target's memcpy, which moves one byte
/// per eight instructions.
///
/// The reader drains the ring on its own timer; a record wakes it only
/// when a quarter of the ring is pending. A wakeup is an irq_work whose
/// self-IPI lands inside this program and wakes the reader, which on a
/// preemptible kernel often preempts the faulting task right here, with
/// the program still marked running on this CPU: every other task's run
/// of it on this CPU is then skipped by the kernel (`RunsMissed`).
#[inline(always)]
pub fn emit<T: Copy + 'static>(value: &T) -> bool {
    let pending = EVENTS.query(BPF_RB_AVAIL_DATA as u64) + core::mem::size_of::<T>() as u64;
    let flags = if pending >= setting!(RING_WAKE_BYTES) {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    let sent = EVENTS.output::<T>(value, flags as u64).is_ok();
    if !sent {
        count(Counter::RingDrops, 1);
    }
    sent
}

/// Zeroes `value` a word at a time. A struct literal or `Default` would
/// compile to a call of the BPF target's memset, one byte per six
/// instructions.
#[inline(always)]
pub fn zero<T: Copy>(value: &mut T) {
    const { assert!(core::mem::size_of::<T>() % 8 == 0 && core::mem::align_of::<T>() == 8) };
    let words = core::ptr::from_mut(value).cast::<u64>();
    for i in 0..core::mem::size_of::<T>() / 8 {
        // SAFETY: within `value`, aligned (checked above).
        unsafe { words.add(i).write_volatile(0) };
    }
}

/// `v` as a plain number. A tracing program's pointer argument is a typed
/// kernel pointer to the verifier, which refuses arithmetic on it
/// (a folio's PFN is its offset in vmemmap); read back from map memory it
/// is a number.
#[inline(always)]
pub fn as_number(slot: &mut u64, v: u64) -> u64 {
    // SAFETY: a map value's field; volatile so the store and load are kept.
    unsafe {
        core::ptr::write_volatile(slot, v);
        core::ptr::read_volatile(slot)
    }
}

#[inline(always)]
fn read_kernel_u32(addr: u64) -> Option<u32> {
    if addr == 0 {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel copes with any address.
    unsafe { bpf_probe_read_kernel(addr as *const u32) }.ok()
}

/// sysctl_numa_balancing_mode, read live when its address is known.
#[inline(always)]
pub fn numa_balancing_mode() -> u32 {
    read_kernel_u32(setting!(SYM_NB_MODE)).unwrap_or(setting!(NB_MODE_AT_LOAD))
}

#[inline(always)]
pub fn is_toptier(nid: i32) -> bool {
    if !(0..64).contains(&nid) {
        return true;
    }
    setting!(TOPTIER_MASK) >> nid & 1 != 0
}

#[inline(always)]
pub fn cpu_node(cpu: u32) -> i32 {
    CPU_NODE.get(cpu).map_or(-1, |n| *n as i32)
}

/// The threshold should_numa_migrate_memory compares against:
/// `pgdat->nbp_threshold ?: sysctl_numa_balancing_hot_threshold`, in ms.
/// The sysctl is read only when the node has no threshold of its own
/// (before its first adjustment period), as the kernel uses it: one probe
/// read a decision instead of two.
#[inline(always)]
pub fn kernel_threshold_ms(dst_nid: i32) -> u32 {
    let off = setting!(OFF_NBP_THRESHOLD);
    let nbp = if off == 0 {
        None
    } else {
        pgdat(dst_nid).and_then(|p| read_kernel_u32(p + u64::from(off)))
    };
    match nbp {
        Some(nbp) if nbp != 0 => nbp,
        _ => read_kernel_u32(setting!(SYM_HOT_THRESHOLD)).unwrap_or(0),
    }
}

/// LAST_CPUPID_MASK: the access field's width.
#[inline(always)]
pub fn cpupid_mask() -> u32 {
    setting!(CPUPID_MASK)
}

/// PAGE_ACCESS_TIME_BUCKETS: the access time's shift in the field.
#[inline(always)]
pub fn access_time_buckets() -> u32 {
    setting!(ACCESS_TIME_BUCKETS)
}

/// What folio_xchg_last_cpupid(folio, new) stores: `new` masked to the
/// field's width.
#[inline(always)]
pub fn stored_cpupid(new: u32) -> u32 {
    new & setting!(CPUPID_MASK)
}

/// The access value the kernel keeps in `folio` (its LAST_CPUPID field:
/// in tiering mode the time of the scan that protected it or of its last
/// fault; the fault count on the fault-count RFC's kernel).
/// [`ACCESS_UNKNOWN`] (never a field's value: it is masked) when the
/// layout is unknown or, with `nid` >= 0, the flags' node field is not
/// `nid` (a layout numatrace got wrong). A plain sentinel, not an Option:
/// the verifier rejects the compare of an Option's unset payload.
#[inline(always)]
pub fn folio_access(folio: u64, nid: i32) -> u32 {
    let off = setting!(OFF_LAST_CPUPID);
    if off != 0 {
        return read_kernel_u32(folio.wrapping_add(u64::from(off)))
            .map_or(ACCESS_UNKNOWN, stored_cpupid);
    }
    if !access_in_flags() {
        return ACCESS_UNKNOWN;
    }
    match read_kernel_u64(folio) {
        Some(flags) => access_of_flags(flags, nid),
        None => ACCESS_UNKNOWN,
    }
}

/// [`folio_access`] of a folio (or page) pointer an fentry/fexit program
/// got as its argument: a typed pointer to the verifier, so page->flags
/// (its first field) is read by a plain load the verifier checks against
/// BTF, not by the probe-read helper (a few hundred instructions a call
/// on the fault path, where every instruction lengthens the fault).
///
/// # Safety
///
/// `folio` must be the program's own `struct folio *`/`struct page *`
/// argument, unchanged.
#[inline(always)]
pub unsafe fn folio_access_typed(folio: *const u64, nid: i32) -> u32 {
    if setting!(OFF_LAST_CPUPID) != 0 || !access_in_flags() {
        return folio_access(folio as u64, nid);
    }
    // SAFETY: the caller's typed argument; the verifier makes the load
    // fault-safe.
    access_of_flags(unsafe { core::ptr::read_volatile(folio) }, nid)
}

/// Whether the LAST_CPUPID field's place in page->flags is known.
#[inline(always)]
fn access_in_flags() -> bool {
    let (shift, node_shift) = (setting!(ACCESS_PGSHIFT), setting!(NODES_PGSHIFT));
    shift != 0 && shift < 64 && node_shift != 0 && node_shift < 64
}

/// The LAST_CPUPID field of page->flags `flags` ([`ACCESS_UNKNOWN`] when,
/// with `nid` >= 0, the flags' node field is not `nid`).
#[inline(always)]
fn access_of_flags(flags: u64, nid: i32) -> u32 {
    let (shift, node_shift) = (setting!(ACCESS_PGSHIFT), setting!(NODES_PGSHIFT));
    if !access_in_flags() || (nid >= 0 && flags >> (node_shift & 63) != nid as u64) {
        return ACCESS_UNKNOWN;
    }
    stored_cpupid((flags >> (shift & 63)) as u32)
}

/// The kernel's `(time - last_time) & PAGE_ACCESS_TIME_MASK` from the two
/// values folio_xchg_last_cpupid exchanged (both shifted right by buckets).
#[inline(always)]
pub fn kernel_latency_ms(new: u32, old: u32) -> u32 {
    let b = setting!(ACCESS_TIME_BUCKETS) & 31;
    let mask = setting!(CPUPID_MASK) << b;
    (new << b).wrapping_sub(old << b) & mask
}

/// The access value the kernel writes into a slow-tier folio it protects
/// or decides on now: `jiffies_to_msecs(jiffies) >> PAGE_ACCESS_TIME_BUCKETS`,
/// on the fault-count RFC's kernel the current mm's hint-fault count
/// `>> PAGE_FAULT_COUNT_BUCKETS`, masked to the field. [`ACCESS_UNKNOWN`]
/// when HZ or the counter is unknown.
#[inline(always)]
pub fn access_now() -> u32 {
    if fault_count_kernel() {
        return kernel_fault_count_now()
            .map_or(ACCESS_UNKNOWN, |c| stored_cpupid(c >> FAULT_COUNT_BUCKETS));
    }
    let num = setting!(JIFFY_MS_NUM);
    if num == 0 {
        return ACCESS_UNKNOWN;
    }
    let den = setting!(JIFFY_MS_DEN).max(1);
    // SAFETY: a helper without arguments.
    let jiffies = unsafe { bpf_jiffies64() };
    // unsigned int jiffies_to_msecs(const unsigned long j): truncated.
    let ms = (jiffies.wrapping_mul(num).wrapping_add(den - 1) / den) as u32;
    stored_cpupid(ms >> (setting!(ACCESS_TIME_BUCKETS) & 31))
}

/// PAGE_FAULT_COUNT_BUCKETS of the fault-count RFC.
const FAULT_COUNT_BUCKETS: u32 = 16;

/// Whether the kernel is the fault-count RFC's (its threshold counts hint
/// faults, not milliseconds).
#[inline(always)]
pub fn fault_count_kernel() -> bool {
    setting!(OFF_MM_HINT_FAULTS) != 0
}

/// The fault-count RFC's `count - folio_xchg_fault_count(folio, count)`:
/// `count` is current->mm->hint_faults (the decision runs in the faulting
/// task and reads it there), `old` what the exchange took out. None when
/// the counter cannot be read.
#[inline(always)]
pub fn kernel_fault_count_latency(old: u32) -> Option<u32> {
    let count = kernel_fault_count_now()?;
    Some(count.wrapping_sub((old & setting!(CPUPID_MASK)) << FAULT_COUNT_BUCKETS))
}

/// The fault-count RFC's current->mm->hint_faults (None on other kernels
/// or when it cannot be read).
#[inline(always)]
fn kernel_fault_count_now() -> Option<u32> {
    let off = setting!(OFF_MM_HINT_FAULTS);
    if off == 0 {
        return None;
    }
    let mm = current_mm();
    if mm == 0 {
        return None;
    }
    read_kernel_u32(mm + u64::from(off))
}

/// Whether this fault's record goes to the ring buffer (filters, sampling).
#[inline(always)]
pub fn wanted(tgid: u32, seq_global: u64) -> bool {
    let f = setting!(FILTER_TGID);
    if f != 0 && f != tgid {
        return false;
    }
    let cg = setting!(FILTER_CGROUP);
    if cg != 0 && cg != ancestor_cgroup_id(setting!(FILTER_CGROUP_LEVEL)) {
        return false;
    }
    let n = setting!(SAMPLE_EVERY);
    n <= 1 || seq_global % n == 0
}

/// Why a folio has no stamp slot.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum NoSlot {
    /// Not on a slow node's span (DRAM, or memory added after load).
    NotSlow,
    /// On a slow node, but sampling follows another PFN of its block.
    Unfollowed,
}

/// The `vmemmap_base` the kernel uses, read once.
#[inline(always)]
fn vmemmap() -> Option<u64> {
    let sym = setting!(VMEMMAP_SYM);
    if sym == 0 {
        return Some(setting!(VMEMMAP_FIXED));
    }
    read_kernel_u64_once(&VMEMMAP, 0, sym)
}

/// The non-zero u64 of kernel memory at `addr`, for a value the kernel
/// never changes once set: read once, then kept in `cache[index]` (read
/// every time when the slot is missing).
#[inline(always)]
fn read_kernel_u64_once(cache: &Array<u64>, index: u32, addr: u64) -> Option<u64> {
    let read = || read_kernel_u64(addr).filter(|&v| v != 0);
    let Some(slot) = cache.get_ptr_mut(index) else {
        return read();
    };
    // SAFETY: array value pointer; every CPU writes the same value.
    unsafe {
        if *slot == 0 {
            *slot = read()?;
        }
        Some(*slot)
    }
}

/// `struct page`'s (and `struct folio`'s) `mapping` and `index`, the same
/// on every kernel numatrace plans for (flags, then the lru list head,
/// then these two).
const OFF_MAPPING: u64 = 24;
const OFF_INDEX: u64 = 32;

/// The identity of the folio at `folio`, which migration copies to its
/// new folio: (`mapping`, `index`), zeros when unreadable.
#[inline(always)]
pub fn folio_identity(folio: u64) -> (u64, u64) {
    (
        read_kernel_u64(folio + OFF_MAPPING).unwrap_or(0),
        read_kernel_u64(folio + OFF_INDEX).unwrap_or(0),
    )
}

/// The PFN of the folio whose head `struct page` is at `folio` (its offset
/// in vmemmap), None when vmemmap is unknown or `folio` is not in it.
#[inline(always)]
pub fn folio_pfn(folio: u64) -> Option<u64> {
    let base = vmemmap()?;
    let size = setting!(PAGE_STRUCT_SIZE);
    (folio >= base && size != 0).then(|| (folio - base) / size)
}

/// The memory cgroup's place from the folio (`folio.memcg_data`), the
/// cgroup's from the memcg (`mem_cgroup.css.cgroup`: u32::MAX unknown),
/// its kernfs node's and that node's id (`cgroup.kn`, `kernfs_node.id`),
/// from BTF (0: unknown).
#[no_mangle]
static OFF_MEMCG_DATA: u32 = 0;
#[no_mangle]
static OFF_MEMCG_CGROUP: u32 = u32::MAX;
/// `obj_cgroup.memcg` where `memcg_data` holds an object cgroup (u32::MAX:
/// it holds the memcg itself).
#[no_mangle]
static OFF_OBJCG_MEMCG: u32 = u32::MAX;
#[no_mangle]
static OFF_CGROUP_KN: u32 = 0;
#[no_mangle]
static OFF_KN_ID: u32 = 0;

/// The low bits of `memcg_data` that mark an object cgroup vector or a
/// kernel page: such a folio is no user page of a memory cgroup.
const MEMCG_DATA_FLAGS: u64 = 0x7;

/// The cgroup id (its kernfs node's id, what bpf_get_current_cgroup_id
/// gives a task) of the memory cgroup the folio at `folio` is charged to;
/// 0 when uncharged, flagged, unreadable or its layout unknown.
#[inline(always)]
pub fn folio_memcg_id(folio: u64) -> u64 {
    let (off_data, off_cgroup) = (setting!(OFF_MEMCG_DATA), setting!(OFF_MEMCG_CGROUP));
    let (off_kn, off_id) = (setting!(OFF_CGROUP_KN), setting!(OFF_KN_ID));
    if off_data == 0 || off_cgroup == u32::MAX || off_kn == 0 || off_id == 0 {
        return 0;
    }
    let Some(data) = read_kernel_u64(folio + u64::from(off_data)) else {
        return 0;
    };
    if data == 0 || data & MEMCG_DATA_FLAGS != 0 {
        return 0;
    }
    let off_objcg = setting!(OFF_OBJCG_MEMCG);
    let memcg = if off_objcg == u32::MAX {
        data
    } else {
        match read_kernel_u64(data + u64::from(off_objcg)) {
            Some(m) if m != 0 => m,
            _ => return 0,
        }
    };
    let Some(cgroup) = read_kernel_u64(memcg + u64::from(off_cgroup)) else {
        return 0;
    };
    let Some(kn) = read_kernel_u64(cgroup + u64::from(off_kn)) else {
        return 0;
    };
    read_kernel_u64(kn + u64::from(off_id)).unwrap_or(0)
}

/// The flags word of the folio at `folio`, its node and size both read
/// from it (one probe read for the two).
#[inline(always)]
pub fn folio_flags(folio: u64) -> Option<u64> {
    read_kernel_u64(folio)
}

/// The node of the folio at `folio`, from the node field of its flags
/// (-1 when unreadable or its place in the flags is unknown).
#[inline(always)]
pub fn folio_nid(folio: u64) -> i32 {
    flags_nid(folio_flags(folio))
}

/// The node field of a folio's `flags` (-1 when unread or its place in
/// the flags is unknown).
#[inline(always)]
pub fn flags_nid(flags: Option<u64>) -> i32 {
    let node_shift = setting!(NODES_PGSHIFT);
    if node_shift == 0 || node_shift >= 64 {
        return -1;
    }
    flags.map_or(-1, |flags| (flags >> node_shift) as i32)
}

/// The size in base pages of the folio at `folio` whose flags word is
/// `flags`: 1 without PG_head, else 1 << its order (a byte of its second
/// page, from BTF); 0 when either is unknown or unreadable.
#[inline(always)]
pub fn folio_nr_pages(folio: u64, flags: Option<u64>) -> u32 {
    let head = setting!(PG_HEAD_BIT);
    let Some(flags) = flags else {
        return 0;
    };
    if head >= 64 {
        return 0;
    }
    if flags & (1 << head) == 0 {
        return 1;
    }
    let off = setting!(OFF_FOLIO_ORDER);
    if off == 0 {
        return 0;
    }
    read_kernel_u32(folio + u64::from(off)).map_or(0, |v| 1 << (v & 0xff).min(31))
}

/// The stamp slot of the folio whose head `struct page` is at `folio`.
///
/// The folio's PFN is its offset in vmemmap. Each slow span is cut into
/// aligned blocks of `1 << FOLLOW_SHIFT` PFNs and one PFN per block, picked
/// by a multiplicative hash of the block number, is followed: deterministic
/// (the same folio is followed by every hook and every run), one slot per
/// block so the array has no collisions, and unbiased towards any stride a
/// workload or the allocator may have. Mirrored by userspace's map plan.
#[inline(always)]
pub fn stamp_slot(folio: u64) -> Result<*mut Stamp, NoSlot> {
    pfn_stamp_slot(folio_pfn(folio))
}

/// [`stamp_slot`] of the folio at `pfn` (None: not in vmemmap).
#[inline(always)]
pub fn pfn_stamp_slot(pfn: Option<u64>) -> Result<*mut Stamp, NoSlot> {
    let pfn = pfn.ok_or(NoSlot::NotSlow)?;
    let shift = setting!(FOLLOW_SHIFT) & 63;
    for i in 0..MAX_SPANS {
        // SAFETY: plain reads of constant-after-load globals.
        let (start, end) = unsafe {
            (
                core::ptr::read_volatile(&SPAN_START[i]),
                core::ptr::read_volatile(&SPAN_END[i]),
            )
        };
        if pfn < start || pfn >= end {
            continue;
        }
        let off = pfn - start;
        let block = off >> shift;
        if shift != 0 {
            let chosen = block.wrapping_mul(FOLLOW_HASH) >> (64 - shift);
            if chosen != off & ((1 << shift) - 1) {
                return Err(NoSlot::Unfollowed);
            }
        }
        // SAFETY: as above.
        let slot = unsafe { core::ptr::read_volatile(&SPAN_BASE[i]) } + block;
        return STAMPS.get_ptr_mut(slot as u32).ok_or(NoSlot::NotSlow);
    }
    Err(NoSlot::NotSlow)
}

/// The slot of a folio a fault wrote at least once (every write sets
/// `written_ns`).
#[inline(always)]
pub fn existing_stamp(folio: u64) -> Option<*mut Stamp> {
    occupied(stamp_slot(folio).ok()?)
}

/// `slot` if it holds a stamp.
#[inline(always)]
pub fn occupied(slot: *mut Stamp) -> Option<*mut Stamp> {
    // SAFETY: an array value pointer from `stamp_slot`.
    (unsafe { (*slot).written_ns } != 0).then_some(slot)
}

pub(crate) use setting;
