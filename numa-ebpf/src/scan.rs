//! The NUMA scanner. The pass over a range is seen at `change_pte_range`
//! (one page table, <= 2 MiB, per call; its callers are inlined) where the
//! kernel keeps it a function, else at `change_prot_numa(vma, start, end)`,
//! the whole pass (Debian 6.1/6.12 inline `change_pte_range`). Both return
//! the number of PTEs made PROT_NONE. In tiering mode the scanner writes
//! its access clock (`jiffies_to_msecs(jiffies)`, the hint-fault count on
//! the fault-count RFC's kernel) into every slow-node folio it protects; a
//! pass records the clock at its entry and exit, so a fault finds its pass
//! from the value its folio holds. Nothing runs per folio: the kernel
//! charges its scanner 32 times the scan's runtime (`p->node_stamp += 32 *
//! diff`), so every instruction per protected PTE would delay the next
//! scan. `change_huge_pmd` covers THP: counted inside a whole pass, a pass
//! of its own beside `change_pte_range`.
use aya_ebpf::{
    helpers::bpf_probe_read_kernel,
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use numa_ebpf_common::{
    scan_ext_flags, Counter, EventKind, MmFaultCount, ScanEvent, ACCESS_UNKNOWN,
};

use crate::maps::{
    access_now, cgroup_id, count, cpu, current_global_seq, current_mm, emit, existing_thread_ctx,
    mm_fault_count_now, now_ns, pid_tgid, task_mm, thread_ctx, ThreadCtx, MM_FAULT_COUNT,
};
/// `MM_CP_PROT_NUMA` (include/linux/mm.h, `1UL << 1` in 6.1 through 7.2;
/// 7.2's change_prot_numa passes 2): the change_pte_range and
/// change_huge_pmd calls of the NUMA scanner, not of mprotect.
const MM_CP_PROT_NUMA: u64 = 1 << 1;
/// HPAGE_PMD_SIZE on x86-64: the range one huge PMD maps.
const HPAGE_PMD_SIZE: u64 = 2 << 20;

#[inline(always)]
fn on_scan_entry(start: u64, end: u64) {
    let Some(ctx) = thread_ctx() else {
        return crate::fault::no_thread_ctx();
    };
    // SAFETY: this thread's storage.
    let ctx = unsafe { &mut *ctx };
    // The scanner never runs inside a fault: a fault still open here had
    // no end the probes saw (see `finish_late`); it goes out now. So does
    // a pass still open, which lost its end.
    if ctx.ev.kind == EventKind::Fault as u32 {
        crate::fault::finish_late(ctx, 0);
    }
    if ctx.scanning != 0 {
        end_pass(ctx, 0, scan_ext_flags::LATE_END);
    }
    ctx.scanning = 1;
    ctx.scan_start = start;
    ctx.scan_end = end;
    ctx.scan_start_ns = now_ns();
    ctx.scan_access_first = access_now();
    ctx.scan_seq_global = current_global_seq();
    // The patch stamps each folio with atomic_read(&mm->hint_faults); read
    // once per pass here (the scanner runs in a thread of the mm it scans):
    // faults of the mm's other threads during the pass are not in it.
    let mm_count = mm_fault_count_now(current_mm());
    ctx.scan_seq_mm = mm_count.map_or(0, |c| c.seq);
    ctx.scan_fault_count = mm_count.map_or(0, |c| c.count);
    ctx.scan_fault_count_known = u32::from(mm_count.is_some());
}

/// The pass ends. `ret` is the functions' PTE count; negative is a pass
/// that did nothing (change_pte_range's -EAGAIN, retried by its caller as
/// a new pass; see `thp_scan_ptes`) and records nothing.
#[inline(always)]
fn on_scan_exit(ret: i64) {
    let Some(ctx) = existing_thread_ctx() else {
        return;
    };
    // SAFETY: this thread's storage.
    let ctx = unsafe { &mut *ctx };
    if ctx.scanning == 0 {
        return;
    }
    if ret < 0 {
        ctx.scanning = 0;
        return;
    }
    let ptes_updated = ret as u64;
    count(Counter::ScanRanges, 1);
    count(Counter::ScanPtesUpdated, ptes_updated);
    end_pass(ctx, ptes_updated, 0);
}

/// Ends the thread's open pass and sends its record. A pass whose exit
/// the probes never saw (the kernel skipped that program's run) is ended
/// by the thread's next pass or hint fault (`late`: `LATE_END`, its PTE
/// count unknown): its clock range then runs to that moment, which still
/// holds every value it wrote.
#[inline(always)]
pub fn end_pass(ctx: &mut ThreadCtx, ptes_updated: u64, late: u32) {
    ctx.scanning = 0;
    let (first, last) = (ctx.scan_access_first, access_now());
    let range = first != ACCESS_UNKNOWN && last != ACCESS_UNKNOWN;
    let ev = ScanEvent {
        kind: EventKind::Scan as u32,
        cpu: cpu(),
        ts_ns: ctx.scan_start_ns,
        pid_tgid: pid_tgid(),
        start: ctx.scan_start,
        end: ctx.scan_end,
        ptes_updated,
        stamps: 0,
        seq_global: ctx.scan_seq_global,
        seq_mm: ctx.scan_seq_mm,
        mm_fault_count: ctx.scan_fault_count,
        ext_flags: late
            | if ctx.scan_fault_count_known != 0 {
                scan_ext_flags::MM_FAULT_COUNT
            } else {
                0
            }
            | if range {
                scan_ext_flags::ACCESS_RANGE
            } else {
                0
            },
        access_first: first,
        access_last: last,
        cgroup_id: cgroup_id(),
    };
    emit(&ev);
}

/// change_prot_numa(vma, start, end): the whole pass.
#[fentry]
pub fn fentry_scan_range(ctx: FEntryContext) -> u32 {
    on_scan_entry(ctx.arg(1), ctx.arg(2));
    0
}

/// Both passes' exit: change_prot_numa's unsigned long and
/// change_pte_range's long PTE counts.
#[fexit]
pub fn fexit_scan_range(ctx: FExitContext) -> u32 {
    on_scan_exit(ctx.ret::<i64>().unwrap_or(0));
    0
}

#[kprobe]
pub fn kprobe_scan_range(ctx: ProbeContext) -> u32 {
    on_scan_entry(ctx.arg(1).unwrap_or(0), ctx.arg(2).unwrap_or(0));
    0
}

#[kretprobe]
pub fn kretprobe_scan_range(ctx: RetProbeContext) -> u32 {
    on_scan_exit(ctx.ret());
    0
}

/// change_pte_range(tlb, vma, pmd, addr, end, newprot, cp_flags): one page
/// table of a pass; every mprotect comes here too, without MM_CP_PROT_NUMA.
#[fentry]
pub fn fentry_scan_pte(ctx: FEntryContext) -> u32 {
    if ctx.arg::<u64>(6) & MM_CP_PROT_NUMA != 0 {
        on_scan_entry(ctx.arg(3), ctx.arg(4));
    }
    0
}

/// cp_flags, the seventh argument, is on the stack: above the return
/// address at function entry (the kernel's regs_get_kernel_argument).
#[kprobe]
pub fn kprobe_scan_pte(ctx: ProbeContext) -> u32 {
    // SAFETY: the probe's own register frame.
    let sp = unsafe { (*ctx.regs).rsp };
    // SAFETY: a kernel stack slot, read through the checked helper.
    let cp_flags = unsafe { bpf_probe_read_kernel((sp + 8) as *const u64) }.unwrap_or(0);
    if cp_flags & MM_CP_PROT_NUMA != 0 {
        on_scan_entry(ctx.arg(3).unwrap_or(0), ctx.arg(4).unwrap_or(0));
    }
    0
}

/// change_huge_pmd inside a whole pass: counted.
#[fentry]
pub fn fentry_thp_scan(_ctx: FEntryContext) -> u32 {
    count(Counter::ThpScans, 1);
    0
}

#[kprobe]
pub fn kprobe_thp_scan(_ctx: ProbeContext) -> u32 {
    count(Counter::ThpScans, 1);
    0
}

/// change_huge_pmd(tlb, vma, pmd, addr, newprot, cp_flags) beside
/// change_pte_range: a pass over one huge PMD.
#[inline(always)]
fn on_thp_scan_entry(addr: u64, cp_flags: u64) {
    count(Counter::ThpScans, 1);
    if cp_flags & MM_CP_PROT_NUMA != 0 {
        on_scan_entry(addr, addr.wrapping_add(HPAGE_PMD_SIZE));
    }
}

#[fentry]
pub fn fentry_thp_scan_pass(ctx: FEntryContext) -> u32 {
    on_thp_scan_entry(ctx.arg(3), ctx.arg(5));
    0
}

/// change_huge_pmd returns HPAGE_PMD_NR when it changed the PMD, 1 when
/// the PMD needed no change, 0 when it could not lock it (the caller then
/// goes on to change_pte_range): PTEs updated as the kernel counts them
/// (numa_pte_updates), and no pass for 0.
#[inline(always)]
fn thp_scan_ptes(ret: i32) -> i64 {
    match ret {
        1 => 0,
        0 => -1,
        n => i64::from(n),
    }
}

#[fexit]
pub fn fexit_thp_scan_pass(ctx: FExitContext) -> u32 {
    on_scan_exit(thp_scan_ptes(ctx.ret::<i32>().unwrap_or(0)));
    0
}

#[kprobe]
pub fn kprobe_thp_scan_pass(ctx: ProbeContext) -> u32 {
    on_thp_scan_entry(ctx.arg(3).unwrap_or(0), ctx.arg(5).unwrap_or(0));
    0
}

#[kretprobe]
pub fn kretprobe_thp_scan_pass(ctx: RetProbeContext) -> u32 {
    on_scan_exit(thp_scan_ptes(ctx.ret::<i32>()));
    0
}

/// init_numa_balancing(clone_flags, p), called by every clone/fork before
/// the child gets its own mm: `p->mm` is still the parent's, whose counter
/// the fault-count patch resets (`atomic_set(&mm->hint_faults, 0)`).
#[inline(always)]
fn on_fault_count_reset(task: u64) {
    let mm = task_mm(task);
    if mm == 0 {
        return;
    }
    count(Counter::FaultCountResets, 1);
    if MM_FAULT_COUNT.get_ptr_mut(&mm).is_none() {
        // BPF_NOEXIST: a racing fault's new entry is reset below instead.
        let _ = MM_FAULT_COUNT.insert(&mm, &MmFaultCount::default(), 1);
    }
    match MM_FAULT_COUNT.get_ptr_mut(&mm) {
        // SAFETY: map value pointer. The sequence number goes on: it
        // counts the mm's faults, which the patch's reset does not touch.
        Some(c) => unsafe {
            (*c).count = 0;
            (*c).base_known = MmFaultCount::BASE_RESET;
        },
        None => count(Counter::FaultCountUnavailable, 1),
    }
}

#[fentry]
pub fn fentry_fault_count_reset(ctx: FEntryContext) -> u32 {
    on_fault_count_reset(ctx.arg(1));
    0
}

#[kprobe]
pub fn kprobe_fault_count_reset(ctx: ProbeContext) -> u32 {
    on_fault_count_reset(ctx.arg(1).unwrap_or(0));
    0
}

/// __mmdrop(mm): the mm is freed, and its counter with it (a new mm at the
/// same address starts from 0, as mm_alloc's zeroed one does).
#[inline(always)]
fn on_fault_count_drop(mm: u64) {
    if mm != 0 && MM_FAULT_COUNT.remove(&mm).is_ok() {
        count(Counter::FaultCountDrops, 1);
    }
}

#[fentry]
pub fn fentry_fault_count_drop(ctx: FEntryContext) -> u32 {
    on_fault_count_drop(ctx.arg(0));
    0
}

#[kprobe]
pub fn kprobe_fault_count_drop(ctx: ProbeContext) -> u32 {
    on_fault_count_drop(ctx.arg(0).unwrap_or(0));
    0
}
