//! The kernel's promotion decision, should_numa_migrate_memory(p, folio,
//! src_nid, dst_cpu), and the reason behind it.
//!
//! The reason is reconstructed from what the kernel did inside the call
//! (see docs/kernel.md, "Decision reason"): in tiering mode for a
//! slow-node folio the kernel exchanges the folio's access time
//! (folio_xchg_last_cpupid) only after the free-space shortcut, and then
//! compares `(now - last) & mask` with `pgdat->nbp_threshold ?: hot_threshold`
//! (on the fault-count RFC's kernel: `count - (last << 16)` hint faults with
//! `fault_count_threshold`).
//!
//! The exchange is known from the folio itself (its LAST_CPUPID field,
//! where BTF says it is): it held one value at the hint fault's entry and
//! holds the exchange's new value when the decision returns. No program
//! runs on the exchange on kernels that promote on time: the scanner makes
//! the same exchange for every slow-node folio it protects, and the kernel
//! charges its scanner 32 times the scan's runtime. The fault-count RFC's
//! kernel stores counts in units of 65,536 hint faults, so its exchange
//! often leaves the value as it was: there a program on the exchange
//! (`fentry_decision_xchg`) sees it, the first one after the hint fault
//! and before the decision returns (numa_migrate_check/numa_migrate_prep
//! exchange nothing before calling mpol_misplaced; migration, the only
//! other exchanger in a fault, comes after the decision). fexit sees the
//! arguments, so one program per call.
use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use numa_ebpf_common::{
    decision, ext_flags as xf, fault_flags as ff, Counter, EventKind, Outcome, ACCESS_UNKNOWN,
};

use aya_log_ebpf::warn;

use crate::maps::{
    candidate_counts, count, count_rare, cpu_node, existing_thread_ctx, fault_count_kernel,
    folio_access, folio_access_typed, is_toptier, kernel_fault_count_latency, kernel_latency_ms,
    kernel_threshold_ms, node_candidates, numa_balancing_mode, numa_balancing_mode_at_load,
    stamp_slot, stored_cpupid, zero, ThreadCtx,
};

const NUMA_BALANCING_MEMORY_TIERING: u32 = 2;

/// Someone changed `numa_balancing` while the probes were attached: the
/// kernel's policy (and which decisions go through the tiering path) is no
/// longer the one the session started with.
#[inline(always)]
fn mode_changed(mode: u32) {
    if let Some(n) = count_rare(Counter::BalancingModeChanged) {
        warn!(
            &(),
            "numa_balancing is {} now, {} when the probes were attached (decisions under the new mode on this CPU: {})",
            mode,
            numa_balancing_mode_at_load(),
            n
        );
    }
}

#[inline(always)]
fn dst_node(dst_cpu: i32) -> i32 {
    if dst_cpu >= 0 {
        cpu_node(dst_cpu as u32)
    } else {
        -1
    }
}

/// kprobe half: a kretprobe cannot read the arguments, so save them.
#[inline(always)]
fn on_decision_entry(src_nid: i32, dst_cpu: i32) {
    let Some(ctx) = existing_thread_ctx() else {
        return;
    };
    // SAFETY: this thread's storage.
    let ctx = unsafe { &mut *ctx };
    ctx.saved_arg = ((src_nid as u32 as u64) << 32) | dst_cpu as u32 as u64;
}

/// The decision returned `ret`; `after(src_nid)` reads the folio's access
/// value now (typed where the caller can).
#[inline(always)]
fn on_decision_exit(ret: u64, src_nid: i32, dst_cpu: i32, after: impl Fn(u64, i32) -> u32) {
    let promote = ret & 0xff != 0;
    count(
        if promote {
            Counter::DecisionPromote
        } else {
            Counter::DecisionReject
        },
        1,
    );
    let Some(ctx) = existing_thread_ctx() else {
        return;
    };
    // SAFETY: this thread's storage.
    let ctx = unsafe { &mut *ctx };
    if ctx.ev.kind != EventKind::Fault as u32 || ctx.ev.decided() {
        // Not inside a hint fault we saw (attach race), or already decided.
        return;
    }
    let ev = &mut ctx.ev;
    ev.flags |= ff::DECIDED;
    ev.src_nid = src_nid;
    ev.dst_nid = dst_node(dst_cpu);
    ev.decision = decision::of(promote);
    let mode = numa_balancing_mode();
    if mode != numa_balancing_mode_at_load() {
        mode_changed(mode);
    }
    let tiering = mode & NUMA_BALANCING_MEMORY_TIERING != 0 && !is_toptier(ev.src_nid);
    let after = after(ev.folio, src_nid);
    ev.access_after = after;
    if tiering && ctx.xchg_seen == 0 {
        infer_exchange(ctx, after);
    }
    let old = if ctx.xchg_seen != 0 {
        decision_old(ctx, after)
    } else {
        ACCESS_UNKNOWN
    };
    let ev = &mut ctx.ev;
    if tiering {
        // What the kernel's rate limit and threshold adjustment read: the
        // node's count, every process's candidates included.
        if let Some(nc) = node_candidates(ev.dst_nid) {
            ev.node_candidates = nc;
            ev.ext_flags |= xf::NODE_CANDIDATES;
        }
        if ctx.xchg_seen != 0 {
            ev.ext_flags |= xf::THRESHOLD_PATH;
        }
    }
    let outcome = if !tiering {
        Outcome::NotTiering
    } else if ctx.xchg_seen == 0 {
        if promote {
            Outcome::PromoteFreeSpace
        } else {
            Outcome::RejectOther
        }
    } else if let Some(latency) = kernel_latency(ctx.xchg_new, old) {
        let th = kernel_threshold_ms(ev.dst_nid);
        ev.kernel_latency_ms = latency;
        ev.threshold_ms = th;
        ev.flags |= ff::KERNEL_LATENCY;
        if promote {
            Outcome::PromoteHot
        } else if latency >= th {
            Outcome::RejectLatency
        } else {
            Outcome::RejectRateLimit
        }
    } else if promote {
        Outcome::PromoteHot
    } else {
        Outcome::RejectOther
    };
    ev.outcome = outcome as u8;
    if ctx.xchg_seen != 0 {
        exchanged_in(ctx);
    }
}

/// No exchange was seen, but the folio's access value is not the one it
/// held at the fault's entry, or it is and the threshold path counted a
/// candidate meanwhile (see `fault::candidate_watch`): the exchange ran
/// (with no program on it, or its program's run skipped: the kernel skips
/// a program already running on the CPU). The values before and after are
/// its input and result.
#[inline(always)]
fn infer_exchange(ctx: &mut ThreadCtx, after: u32) {
    let before = ctx.ev.access_at_fault;
    if !ctx.ev.has_access_at_fault() || after == ACCESS_UNKNOWN {
        return;
    }
    if after == before && !counted_candidate(ctx) {
        return;
    }
    ctx.xchg_seen = 1;
    ctx.xchg_new = after;
    ctx.xchg_folio = ctx.ev.folio;
    ctx.folio_access = before;
    ctx.ev.ext_flags |= xf::XCHG_INFERRED;
}

/// Whether this CPU counted a promotion candidate on the destination node
/// since the hint fault's entry: its diff changed, or folded into the
/// node's count (which leaves it 0).
#[inline(always)]
fn counted_candidate(ctx: &ThreadCtx) -> bool {
    if ctx.candidates_read == 0 {
        return false;
    }
    candidate_counts(ctx.ev.dst_nid).is_some_and(|(diff, count)| {
        let diff = u32::from(diff);
        diff != ctx.candidate_diff || (diff == 0 && count != ctx.candidates)
    })
}

/// What the decision's exchange took out: the value read from the folio
/// before it, trusted when the folio holds the exchange's new value after
/// it (`after`: the layout is right and no other fault exchanged
/// meanwhile); else unknown.
#[inline(always)]
fn decision_old(ctx: &mut ThreadCtx, after: u32) -> u32 {
    if ctx.folio_access == ACCESS_UNKNOWN || after != stored_cpupid(ctx.xchg_new) {
        return ACCESS_UNKNOWN;
    }
    let ev = &mut ctx.ev;
    ev.ext_flags |= xf::FOLIO_ACCESS;
    if ev.has_access_at_fault() && ev.access_at_fault != ctx.folio_access {
        ev.ext_flags |= xf::STAMP_ACCESS_DIFFERS;
    }
    ctx.folio_access
}

/// The decision's exchange left its new value in the folio: the next hint
/// fault on it without a scan in between (another process's PTE of a
/// shared folio, another PTE of a large one) finds it there and is known
/// not to be protected again. The folio's slot is made at its first fault
/// numatrace sees, with the fault-count patch's exchange when the fault
/// had no slot to write it ahead into (see `fault::fault_count_exchange`).
#[inline(always)]
fn exchanged_in(ctx: &ThreadCtx) {
    let ev = &ctx.ev;
    let Ok(slot) = stamp_slot(ev.folio) else {
        return;
    };
    // SAFETY: array value pointer; the PTE lock serialises the faults of
    // one mapping of the folio.
    let slot = unsafe { &mut *slot };
    if slot.written_ns == 0 {
        count(Counter::StampInserts, 1);
        zero(slot);
        slot.written_ns = ev.ts_ns;
        slot.tgid = ev.tgid();
    }
    slot.access = stored_cpupid(ctx.xchg_new);
    slot.tgid = ev.tgid();
    if ctx.fault_count_exchanged == 2 && ev.threshold_path() {
        slot.written_ns = ev.ts_ns;
        slot.stored_fault_count = ev.mm_fault_count;
        slot.fault_count_known = 1;
    }
}

/// What should_numa_migrate_memory compared with its threshold, from the
/// values its exchange put in (`new`) and took out (`old`): ms on mainline,
/// hint faults on the fault-count RFC's kernel. None when `old` is unknown
/// (neither a scan nor a decision numatrace saw put it in the folio): the
/// threshold path ran, but the kernel's latency is unknown.
#[inline(always)]
fn kernel_latency(new: u32, old: u32) -> Option<u32> {
    if old == ACCESS_UNKNOWN {
        None
    } else if fault_count_kernel() {
        kernel_fault_count_latency(old)
    } else {
        Some(kernel_latency_ms(new, old))
    }
}

#[fexit]
pub fn fexit_decision(ctx: FExitContext) -> u32 {
    let folio: *const u64 = ctx.arg(1);
    on_decision_exit(ctx.ret().unwrap_or(0), ctx.arg(2), ctx.arg(3), |_, nid| {
        // SAFETY: the program's own folio (page on 6.1) argument: the
        // faulting folio, whose record `ev.folio` is.
        unsafe { folio_access_typed(folio, nid) }
    });
    0
}

#[kprobe]
pub fn kprobe_decision(ctx: ProbeContext) -> u32 {
    on_decision_entry(ctx.arg(2).unwrap_or(-1), ctx.arg(3).unwrap_or(-1));
    0
}

#[kretprobe]
pub fn kretprobe_decision(ctx: RetProbeContext) -> u32 {
    let saved = match existing_thread_ctx() {
        // SAFETY: this thread's storage.
        Some(c) => unsafe { (*c).saved_arg },
        None => u64::MAX,
    };
    on_decision_exit(
        ctx.ret(),
        (saved >> 32) as i32,
        saved as u32 as i32,
        folio_access,
    );
    0
}

/// folio_xchg_last_cpupid(folio, new) (page_cpupid_xchg_last on 6.1), on
/// the fault-count RFC's kernel only (see the module docs): the first
/// exchange inside a hint fault before its decision returns is the
/// decision's. The scanner's exchanges find no fault open.
/// `access` reads the folio's access value at entry: what the exchange is
/// about to take out.
#[inline(always)]
fn on_decision_xchg(folio: u64, new: u32, access: impl Fn() -> u32) {
    let Some(ctx) = existing_thread_ctx() else {
        return;
    };
    // SAFETY: this thread's storage.
    let ctx = unsafe { &mut *ctx };
    if ctx.ev.kind == EventKind::Fault as u32 && !ctx.ev.decided() && ctx.xchg_seen == 0 {
        ctx.xchg_seen = 1;
        ctx.xchg_new = new;
        ctx.xchg_folio = folio;
        ctx.folio_access = access();
    }
}

#[fentry]
pub fn fentry_decision_xchg(ctx: FEntryContext) -> u32 {
    let folio: *const u64 = ctx.arg(0);
    // SAFETY: the program's own folio (page on 6.1) argument.
    on_decision_xchg(folio as u64, ctx.arg(1), || unsafe {
        folio_access_typed(folio, -1)
    });
    0
}

#[kprobe]
pub fn kprobe_decision_xchg(ctx: ProbeContext) -> u32 {
    let folio = ctx.arg(0).unwrap_or(0);
    on_decision_xchg(folio, ctx.arg::<u64>(1).unwrap_or(0) as u32, || {
        folio_access(folio, -1)
    });
    0
}
