//! The misplaced-folio migration that follows a positive decision, and the
//! migrate tracepoints (promotions vs demotions by reason).
use aya_ebpf::{
    macros::{fexit, kretprobe, tracepoint},
    programs::{FExitContext, RetProbeContext, TracePointContext},
};
use numa_ebpf_common::{Counter, MigrateRet};

use crate::maps::count;

/// Set by userspace before load from the attach plan (see [`MigrateRet`]).
#[no_mangle]
static MIGRATE_RET_CONVENTION: u32 = MigrateRet::ZeroOnSuccess as u32;

#[inline(always)]
fn migrated(ret: i64) {
    // SAFETY: a plain read of a global set before load.
    let convention = unsafe { core::ptr::read_volatile(&MIGRATE_RET_CONVENTION) };
    let ok = if convention == MigrateRet::OneOnSuccess as u32 {
        ret as i32 == 1
    } else {
        ret as i32 == 0
    };
    count(
        if ok {
            Counter::MigrateSuccess
        } else {
            Counter::MigrateFail
        },
        1,
    );
}

#[fexit]
pub fn fexit_migrate(ctx: FExitContext) -> u32 {
    let ret: i64 = ctx.ret().unwrap_or(-1);
    migrated(ret);
    0
}

#[kretprobe]
pub fn kretprobe_migrate(ctx: RetProbeContext) -> u32 {
    migrated(ctx.ret());
    0
}

#[tracepoint]
pub fn tp_migrate_pages(_ctx: TracePointContext) -> u32 {
    count(Counter::MigrateTpEvents, 1);
    0
}

#[tracepoint]
pub fn tp_skip_vma(_ctx: TracePointContext) -> u32 {
    count(Counter::VmaSkips, 1);
    0
}
