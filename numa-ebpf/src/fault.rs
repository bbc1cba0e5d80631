//! The NUMA hint fault. `do_numa_page` is inlined on every kernel we know, so
//! the fault is seen where it calls out: `numa_migrate_check` (6.12+) or
//! `numa_migrate_prep` (6.1), both also used by `do_huge_pmd_numa_page`, and
//! both with the folio/page as argument 0 and the address as argument 2.
//! The record is completed by the decision and migration hooks and emitted
//! from `task_numa_fault`, which ends every hint fault with its flags.
use aya_ebpf::{
    macros::{fentry, kprobe, tracepoint},
    programs::{FEntryContext, ProbeContext, TracePointContext},
};
use numa_ebpf_common::{
    ext_flags as xf, fault_flags as ff, scan_ext_flags, tnf, Counter, EventKind, FaultEvent,
    HistEntry, MmFaultCount, Outcome, Stamp, ACCESS_UNKNOWN, OUTCOME_BASE,
};

use aya_log_ebpf::{debug, warn};

use crate::maps::{
    access_now, access_time_buckets, add, as_number, candidate_counts, cgroup_id, count,
    count_mm_fault, count_rare, cpu, cpu_node, cpupid_mask, current_comm, current_mm, emit,
    existing_stamp, existing_thread_ctx, fault_count_kernel, folio_access, folio_access_typed,
    folio_identity, folio_pfn, next_global_seq, now_ns, occupied, pfn_stamp_slot, pid_tgid,
    thread_ctx, vmf_address, wanted, zero, NoSlot, ThreadCtx, COUNTERS, HIST_DELTA, HIST_LATENCY,
    HIST_SUM,
};

const PAGE_MASK: u64 = !0xfff;
/// HPAGE_PMD_MASK on x86-64 (2 MiB PMDs).
const HPAGE_PMD_MASK: u64 = !((2 << 20) - 1);

/// The fault-count patch's exchange at this fault (folio_xchg_fault_count
/// in its decision), written ahead into the folio's slot: what the folio
/// held goes into the event and `ctx` (restored at the fault's end if the
/// decision made no exchange), the fault's count into the slot. What the
/// folio held is the slot's count only when the folio was not protected
/// again since (else the count of the pass that protected it, which
/// userspace adds with the pass). A folio without a slot gets one from the
/// decision, once it is known to have exchanged (see
/// `decision::exchanged_in`).
#[inline(always)]
fn fault_count_exchange(
    ctx: &mut ThreadCtx,
    stamp: Option<*mut Stamp>,
    mm_count: MmFaultCount,
    now: u64,
) {
    let Some(stamp) = stamp else {
        ctx.fault_count_exchanged = 2;
        return;
    };
    ctx.fault_count_exchanged = 1;
    // SAFETY: map value pointer, see on_hint_fault.
    let stamp = unsafe { &mut *stamp };
    ctx.prev_fault_count_known = stamp.fault_count_known;
    ctx.prev_fault_count = stamp.stored_fault_count;
    ctx.prev_fault_count_ns = stamp.written_ns;
    let ev = &mut ctx.ev;
    if stamp.fault_count_known != 0 && !ev.needs_pass() {
        ev.ext_flags |= xf::STORED_FAULT_COUNT;
        ev.stored_fault_count = stamp.stored_fault_count;
        ev.stored_fault_count_ns = stamp.written_ns;
    }
    stamp.stored_fault_count = mm_count.count;
    stamp.fault_count_known = 1;
    stamp.written_ns = now;
}

/// The decision made no exchange (free-space shortcut, no decision, not
/// tiering) and the folio did not move: put back what it held.
#[inline(always)]
fn fault_count_unexchange(ctx: &ThreadCtx) {
    if let Some(stamp) = existing_stamp(ctx.ev.folio) {
        // SAFETY: map value pointer.
        let stamp = unsafe { &mut *stamp };
        stamp.fault_count_known = ctx.prev_fault_count_known;
        stamp.stored_fault_count = ctx.prev_fault_count;
        stamp.written_ns = ctx.prev_fault_count_ns;
    }
}

/// Whether the folio was protected since its last fault numatrace saw: the
/// folio's access value (read at the fault's entry) is not the one that
/// fault's decision left. Then its stamp is the pass that wrote the value
/// (`NEEDS_PASS`: found in userspace from the pass records); else there is
/// no stamp, the kernel compares with what that fault left (a shared or
/// large folio's other PTE), and when that fault was another process's
/// the folio's value is another mm's (`STAMP_OTHER_MM`).
#[inline(always)]
fn protected_again(ev: &mut FaultEvent, stamp: Option<&mut Stamp>, access: u32) {
    let (left_by_fault, writer) = match stamp {
        Some(stamp) => {
            let left = stamp.access;
            // The decision will exchange its own value in.
            stamp.access = ACCESS_UNKNOWN;
            if left != access || access == ACCESS_UNKNOWN {
                stamp.scan_count = stamp.scan_count.wrapping_add(1);
            }
            ev.scan_count = stamp.scan_count;
            (left, stamp.tgid)
        }
        None => (ACCESS_UNKNOWN, 0),
    };
    if access != ACCESS_UNKNOWN && access != left_by_fault {
        ev.ext_flags |= xf::NEEDS_PASS;
        return;
    }
    count(Counter::StampMisses, 1);
    if access != ACCESS_UNKNOWN && writer != ev.tgid() {
        ev.flags |= ff::STAMP_OTHER_MM;
    }
}

/// A hint fault on `folio` at `addr`; `access` is the folio's access value
/// ([`folio_access`]), read by the caller where its argument is typed.
#[inline(always)]
fn on_hint_fault(folio: u64, addr: u64, access: u32) {
    count(Counter::HintFaults, 1);
    let key = pid_tgid();
    let seq_global = next_global_seq();
    let Some(ctx) = thread_ctx() else {
        return no_thread_ctx();
    };
    // SAFETY: `ctx` points to this thread's storage; only this thread
    // writes it.
    let ctx = unsafe { &mut *ctx };
    let folio = as_number(&mut ctx.number, folio);
    if ctx.ev.kind == EventKind::Fault as u32 {
        finish_late(ctx, 0);
    }
    // The first access-time exchange from here until the decision returns
    // is the decision's (see decision::on_decision_xchg).
    ctx.xchg_seen = 0;
    // Not in the scanner: a pass still open here lost its end.
    if ctx.scanning != 0 {
        crate::scan::end_pass(ctx, 0, scan_ext_flags::LATE_END);
    }
    let pmd = ctx.thp_haddr != 0 && ctx.thp_haddr == addr;
    ctx.thp_haddr = 0;
    ctx.fault_count_exchanged = 0;
    candidate_watch(ctx, access);
    let mm_count = count_mm_fault(current_mm(), !pmd);
    let now = now_ns();
    let ev = &mut ctx.ev;
    zero(ev);
    ev.kind = EventKind::Fault as u32;
    ev.cpu = cpu();
    ev.ts_ns = now;
    ev.pid_tgid = key;
    ev.cgroup_id = cgroup_id();
    ev.addr = addr & PAGE_MASK;
    ev.folio = folio;
    ev.seq_global = seq_global;
    ev.src_nid = -1;
    ev.dst_nid = -1;
    ev.outcome = Outcome::NoDecision as u8;
    ev.flags = ff::HAS_FAULT_HOOK;
    ev.access_at_fault = access;
    ev.access_after = ACCESS_UNKNOWN;
    if access != ACCESS_UNKNOWN {
        ev.ext_flags |= xf::ACCESS_AT_FAULT;
    }
    if pmd {
        ev.ext_flags |= xf::PMD_FAULT;
        count(Counter::PmdHintFaults, 1);
    }
    if let Some(mm_count) = mm_count {
        ev.seq_mm = mm_count.seq;
        ev.mm_fault_count = mm_count.count;
        ev.ext_flags |= xf::MM_FAULT_COUNT;
        if mm_count.base_known != 0 {
            ev.ext_flags |= xf::FAULT_COUNT_BASE_KNOWN;
        }
        if mm_count.base_known == MmFaultCount::BASE_RESET {
            ev.ext_flags |= xf::FAULT_COUNT_AFTER_RESET;
        }
    }
    let pfn = folio_pfn(folio);
    ev.src_pfn = pfn.unwrap_or(0);
    let slot = pfn_stamp_slot(pfn);
    let stamp = slot.ok().and_then(occupied);
    match slot {
        Err(NoSlot::NotSlow) => {}
        Err(NoSlot::Unfollowed) => {
            (ev.mapping, ev.index) = folio_identity(folio);
            ev.ext_flags |= xf::UNFOLLOWED;
            count(Counter::Unfollowed, 1);
            protected_again(ev, None, access);
        }
        Ok(_) => {
            (ev.mapping, ev.index) = folio_identity(folio);
            // SAFETY: map value pointer; concurrent writers only race on
            // the same folio, which the kernel serialises by the PTE lock.
            protected_again(ev, stamp.map(|s| unsafe { &mut *s }), access);
        }
    }
    if let Some(mm_count) = mm_count {
        fault_count_exchange(ctx, stamp, mm_count, now);
    }
}

/// The decision's exchange is known from the folio's value changing
/// across it (`decision::infer_exchange`), but it can exchange the value
/// the folio already holds: when the folio's value is the kernel's access
/// clock now (written in this jiffy, by the scan or by another PTE's
/// fault). The folio cannot tell that from no exchange (the free-space
/// shortcut) then; the node's candidate count, which the threshold path
/// changes on this CPU, can: it is read now, for such faults only, and
/// again at the decision.
#[inline(always)]
fn candidate_watch(ctx: &mut ThreadCtx, access: u32) {
    ctx.candidates_read = 0;
    if access == ACCESS_UNKNOWN || fault_count_kernel() || access != access_now() {
        return;
    }
    if let Some((diff, count)) = candidate_counts(cpu_node(cpu())) {
        ctx.candidates_read = 1;
        ctx.candidate_diff = u32::from(diff);
        ctx.candidates = count;
    }
}

#[fentry]
pub fn fentry_hint_fault(ctx: FEntryContext) -> u32 {
    let folio: *const u64 = ctx.arg(0);
    // SAFETY: the program's own folio (page on 6.1) argument.
    let access = unsafe { folio_access_typed(folio, -1) };
    on_hint_fault(folio as u64, ctx.arg(2), access);
    0
}

#[kprobe]
pub fn kprobe_hint_fault(ctx: ProbeContext) -> u32 {
    let folio = ctx.arg(0).unwrap_or(0);
    on_hint_fault(folio, ctx.arg(2).unwrap_or(0), folio_access(folio, -1));
    0
}

/// The fault's histogram entry, for a fault whose record did not reach the
/// ring (userspace counts the others from their records).
#[inline(always)]
fn hist(ev: &FaultEvent) {
    let h = match HistEntry::of(ev) {
        Some(h) => h,
        None if !fault_count_kernel() => match unstamped_hist(ev) {
            Some(h) => h,
            None => return,
        },
        None => return,
    };
    let sum = h.sum_slot() as u32;
    add(&HIST_LATENCY, h.slot(h.latency_ns) as u32, 1);
    add(&HIST_SUM, sum, h.latency_ns);
    if h.own_mm {
        add(&HIST_DELTA, h.slot(h.delta) as u32, 1);
        add(&HIST_SUM, sum + 1, h.delta);
    }
}

/// The entry of a fault without a stamp (its pass is found in userspace,
/// from a record this fault does not send): the kernel's latency when its
/// decision exchanged, else the folio's value dated by the kernel's access
/// clock now.
#[inline(always)]
fn unstamped_hist(ev: &FaultEvent) -> Option<HistEntry> {
    if let Some(h) = HistEntry::of_kernel_latency(ev) {
        return Some(h);
    }
    let clock = access_now();
    if clock == ACCESS_UNKNOWN {
        return None;
    }
    HistEntry::of_access_clock(ev, now_ns(), clock, cpupid_mask(), access_time_buckets())
}

/// The kernel could not give this thread its task-local context: the
/// fault or scan cannot be followed.
#[inline(always)]
pub fn no_thread_ctx() {
    if let Some(n) = count_rare(Counter::ThreadCtxUnavailable) {
        warn!(
            &(),
            "no task-local storage for a thread (kernel memory short?): faults or scans not followed on this CPU: {}",
            n
        );
    }
}

/// A fault's end without its beginning: the probes were attached while
/// the fault was under way, or the hint-fault program's run was skipped.
#[inline(always)]
fn fault_without_context() {
    if let Some(n) = count_rare(Counter::FaultWithoutContext) {
        debug!(
            &(),
            "task_numa_fault without the start of its hint fault (attached mid-fault, or a skipped run); on this CPU: {}",
            n
        );
    }
}

/// task_numa_fault(last_cpupid, mem_node, pages, flags): the end of a hint
/// fault. Completes the record and emits it.
#[inline(always)]
fn on_fault_account(mem_node: i32, pages: i32, flags: i32) {
    let ctx = match existing_thread_ctx() {
        // SAFETY: this thread's storage, see on_hint_fault.
        Some(ctx) => unsafe { &mut *ctx },
        None => return fault_without_context(),
    };
    if ctx.ev.kind != EventKind::Fault as u32 {
        return fault_without_context();
    }
    finish(ctx, mem_node, pages as u32, flags as u32);
}

/// The thread's previous hint fault never reached task_numa_fault's probe
/// (`why`: the thread's next hint fault or scanner pass, or its exit).
/// Either the kernel skipped that run, the probe being busy on the CPU
/// with a preempted task (`RunsMissed`), or the migration failed and the
/// kernel returned without task_numa_fault because the PTE changed
/// meanwhile. The record goes out now, with what task_numa_fault would
/// have said inferred: every hint fault the kernel counts has a record.
#[inline(always)]
pub fn finish_late(ctx: &mut ThreadCtx, why: u64) {
    let ev = &mut ctx.ev;
    ev.ext_flags |= xf::LATE_END | why;
    let pmd = ev.pmd_fault();
    let (mem_node, flags) = match (ev.migrate_tried(), ev.migrate_ok != 0) {
        (true, true) => (ev.dst_nid, tnf::MIGRATED),
        (true, false) => {
            ev.ext_flags |= xf::NO_ACCOUNT;
            (ev.src_nid, tnf::MIGRATE_FAIL)
        }
        (false, _) => (ev.src_nid, 0),
    };
    finish(ctx, mem_node, if pmd { 512 } else { 1 }, flags);
}

/// sched:sched_process_exit, in every exiting thread: its last hint
/// fault's record, if still open, goes out before its storage does.
#[tracepoint]
pub fn tp_thread_exit(_ctx: TracePointContext) -> u32 {
    if let Some(ctx) = existing_thread_ctx() {
        // SAFETY: this thread's storage.
        let ctx = unsafe { &mut *ctx };
        if ctx.ev.kind == EventKind::Fault as u32 {
            finish_late(ctx, xf::AT_EXIT);
        }
    }
    0
}

/// Completes the record of the fault in `ctx` with task_numa_fault's
/// arguments, counts it and emits it.
#[inline(always)]
fn finish(ctx: &mut ThreadCtx, mem_node: i32, pages: u32, flags: u32) {
    if ctx.fault_count_exchanged == 1 && !ctx.ev.threshold_path() && flags & tnf::MIGRATED == 0 {
        fault_count_unexchange(ctx);
    }
    let ev = &mut ctx.ev;
    ev.nr_pages = pages;
    ev.tnf_flags = flags;
    if ev.src_nid < 0 {
        // No decision: the folio did not move, mem_node is where it is.
        ev.src_nid = mem_node;
    }
    if !ev.decided() && flags & tnf::MIGRATED != 0 {
        ev.dst_nid = mem_node;
    }
    add(&COUNTERS, OUTCOME_BASE + (ev.outcome as u32 & 7), 1);
    let tgid = ev.tgid();
    let sent = wanted(tgid, ev.seq_global) && {
        current_comm(&mut ev.comm);
        emit::<FaultEvent>(ev)
    };
    if !sent {
        hist(ev);
    }
    // Mark consumed so a stray task_numa_fault cannot emit it twice.
    ev.kind = 0;
}

#[fentry]
pub fn fentry_fault_account(ctx: FEntryContext) -> u32 {
    on_fault_account(ctx.arg(1), ctx.arg(2), ctx.arg(3));
    0
}

#[kprobe]
pub fn kprobe_fault_account(ctx: ProbeContext) -> u32 {
    on_fault_account(
        ctx.arg(1).unwrap_or(-1),
        ctx.arg(2).unwrap_or(0),
        ctx.arg(3).unwrap_or(0),
    );
    0
}

/// do_huge_pmd_numa_page(vmf): the hint fault that follows at the PMD's
/// address is a PMD fault, which the fault-count patch does not count.
#[inline(always)]
fn on_thp_fault(vmf: u64) {
    count(Counter::ThpFaults, 1);
    let addr = vmf_address(vmf);
    if addr == 0 {
        return;
    }
    if let Some(ctx) = thread_ctx() {
        // SAFETY: this thread's storage.
        unsafe { (*ctx).thp_haddr = addr & HPAGE_PMD_MASK };
    }
}

#[fentry]
pub fn fentry_thp_fault(ctx: FEntryContext) -> u32 {
    on_thp_fault(ctx.arg(0));
    0
}

#[kprobe]
pub fn kprobe_thp_fault(ctx: ProbeContext) -> u32 {
    on_thp_fault(ctx.arg(0).unwrap_or(0));
    0
}
