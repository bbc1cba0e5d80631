//! The kernel's promotion decision: `should_numa_migrate_memory` returns
//! whether the faulting folio should move to the faulting CPU's node.
use aya_ebpf::{
    macros::{fexit, kretprobe},
    programs::{FExitContext, RetProbeContext},
};
use numa_ebpf_common::Counter;

use crate::maps::count;

#[inline(always)]
fn decided(promote: bool) {
    count(Counter::Decisions, 1);
    count(
        if promote {
            Counter::DecisionPromote
        } else {
            Counter::DecisionReject
        },
        1,
    );
}

#[fexit]
pub fn fexit_decision(ctx: FExitContext) -> u32 {
    // bool return: only the low byte is defined.
    let ret: u64 = ctx.ret().unwrap_or(0);
    decided(ret & 0xff != 0);
    0
}

#[kretprobe]
pub fn kretprobe_decision(ctx: RetProbeContext) -> u32 {
    let ret: u64 = ctx.ret();
    decided(ret & 0xff != 0);
    0
}
