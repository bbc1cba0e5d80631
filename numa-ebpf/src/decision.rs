//! The kernel's promotion decision, should_numa_migrate_memory(p, folio,
//! src_nid, dst_cpu), and the reason behind it.
//!
//! The reason is reconstructed from what the kernel did inside the call
//! (see ARCHITECTURE.md "How exact is the reason"): in tiering mode for a
//! slow-node folio the kernel exchanges the folio's access time
//! (folio_xchg_last_cpupid) only after the free-space shortcut, and then
//! compares `(now - last) & mask` with `pgdat->nbp_threshold ?: hot_threshold`.
use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use numa_ebpf_common::{fault_flags as ff, Counter, Outcome};

use crate::maps::{
    count, cpu_node, existing_thread_ctx, is_toptier, kernel_latency_ms, kernel_threshold_ms,
    numa_balancing_mode, pid_tgid,
};

const NUMA_BALANCING_MEMORY_TIERING: u32 = 2;

#[inline(always)]
fn on_decision_entry(src_nid: i32, dst_cpu: i32) {
    let Some(ctx) = existing_thread_ctx(pid_tgid()) else {
        return;
    };
    // SAFETY: this thread's map value.
    let ctx = unsafe { &mut *ctx };
    ctx.deciding = 1;
    ctx.xchg_seen = 0;
    ctx.ev.src_nid = src_nid;
    ctx.ev.dst_nid = if dst_cpu >= 0 {
        cpu_node(dst_cpu as u32)
    } else {
        -1
    };
}

#[inline(always)]
fn on_decision_exit(ret: u64) {
    let promote = ret & 0xff != 0;
    count(Counter::Decisions, 1);
    count(
        if promote {
            Counter::DecisionPromote
        } else {
            Counter::DecisionReject
        },
        1,
    );
    let Some(ctx) = existing_thread_ctx(pid_tgid()) else {
        return;
    };
    // SAFETY: this thread's map value.
    let ctx = unsafe { &mut *ctx };
    if ctx.deciding == 0 {
        return;
    }
    ctx.deciding = 0;
    let ev = &mut ctx.ev;
    ev.flags |= ff::DECIDED;
    ev.decision = if promote { 1 } else { 2 };
    let tiering =
        numa_balancing_mode() & NUMA_BALANCING_MEMORY_TIERING != 0 && !is_toptier(ev.src_nid);
    let outcome = if !tiering {
        Outcome::NotTiering
    } else if ctx.xchg_seen == 0 {
        if promote {
            Outcome::PromoteFreeSpace
        } else {
            Outcome::RejectOther
        }
    } else {
        let latency = kernel_latency_ms(ctx.xchg_new, ctx.xchg_old);
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
    };
    ev.outcome = outcome as u8;
}

#[fentry]
pub fn fentry_decision(ctx: FEntryContext) -> u32 {
    on_decision_entry(ctx.arg(2), ctx.arg(3));
    0
}

#[fexit]
pub fn fexit_decision(ctx: FExitContext) -> u32 {
    on_decision_exit(ctx.ret().unwrap_or(0));
    0
}

#[kprobe]
pub fn kprobe_decision(ctx: ProbeContext) -> u32 {
    on_decision_entry(ctx.arg(2).unwrap_or(-1), ctx.arg(3).unwrap_or(-1));
    0
}

#[kretprobe]
pub fn kretprobe_decision(ctx: RetProbeContext) -> u32 {
    on_decision_exit(ctx.ret());
    0
}
