//! The misplaced-folio migration that follows a positive decision, and the
//! migrate/sched tracepoints (pages moved by reason, VMAs the scanner skipped).
use aya_ebpf::{
    macros::{fexit, kretprobe, tracepoint},
    programs::{FExitContext, RetProbeContext, TracePointContext},
    EbpfContext,
};
use numa_ebpf_common::{
    fault_flags as ff, Counter, EventKind, MigrateRet, SkipEvent, MIGRATE_REASONS,
};

use crate::maps::{
    add, as_number, cgroup_id, count, emit, existing_thread_ctx, folio_pfn, now_ns, pid_tgid,
    setting, MIGRATE_REASON_PAGES,
};

/// Set by userspace before load from the attach plan (see [`MigrateRet`]).
#[no_mangle]
static MIGRATE_RET_CONVENTION: u32 = MigrateRet::ZeroOnSuccess as u32;
/// Field offsets of migrate:mm_migrate_pages, from its tracefs format.
#[no_mangle]
static TP_MIGRATE_SUCCEEDED_OFF: u32 = 8;
#[no_mangle]
static TP_MIGRATE_FAILED_OFF: u32 = 16;
#[no_mangle]
static TP_MIGRATE_REASON_OFF: u32 = 0;
/// The mm_migrate_pages reason of migrate_misplaced_*, when the tracepoint
/// reports the migration result (then fexit_migrate is not attached:
/// one trampoline fewer per promotion); `u32::MAX` otherwise.
#[no_mangle]
static TP_REASON_NUMA_MISPLACED: u32 = u32::MAX;

#[inline(always)]
fn migrated(ret: i64) {
    record_migration(
        if setting!(MIGRATE_RET_CONVENTION) == MigrateRet::OneOnSuccess as u32 {
            ret as i32 == 1
        } else {
            ret as i32 == 0
        },
    );
}

/// The misplaced-folio migration of the current hint fault ended.
#[inline(always)]
fn record_migration(ok: bool) {
    count(
        if ok {
            Counter::MigrateSuccess
        } else {
            Counter::MigrateFail
        },
        1,
    );
    if let Some(ctx) = existing_thread_ctx() {
        // SAFETY: this thread's storage.
        let ev = unsafe { &mut (*ctx).ev };
        ev.flags |= ff::MIGRATE_TRIED;
        ev.migrate_ok = ok as u8;
    }
}

#[fexit]
pub fn fexit_migrate(ctx: FExitContext) -> u32 {
    migrated(ctx.ret().unwrap_or(-1));
    0
}

#[kretprobe]
pub fn kretprobe_migrate(ctx: RetProbeContext) -> u32 {
    migrated(ctx.ret());
    0
}

/// The misplaced migration allocated `dst` on the top tier for the
/// current hint fault's folio (0: none could be). Only that migration
/// calls the callback, once per promotion tried, in the faulting thread.
#[inline(always)]
fn promotion_allocated(dst: u64) {
    if dst == 0 {
        return;
    }
    if let Some(ctx) = existing_thread_ctx() {
        // SAFETY: this thread's storage.
        let ctx = unsafe { &mut *ctx };
        let dst = as_number(&mut ctx.number, dst);
        if ctx.ev.kind == EventKind::Fault as u32 {
            ctx.ev.dst_pfn = folio_pfn(dst).unwrap_or(0);
        }
    }
}

#[fexit]
pub fn fexit_promote_dst(ctx: FExitContext) -> u32 {
    promotion_allocated(ctx.ret().unwrap_or(0));
    0
}

#[kretprobe]
pub fn kretprobe_promote_dst(ctx: RetProbeContext) -> u32 {
    promotion_allocated(ctx.ret());
    0
}

#[tracepoint]
pub fn tp_migrate_pages(ctx: TracePointContext) -> u32 {
    let off = setting!(TP_MIGRATE_REASON_OFF);
    if off == 0 {
        return 0;
    }
    let (ok_off, failed_off) = (
        setting!(TP_MIGRATE_SUCCEEDED_OFF),
        setting!(TP_MIGRATE_FAILED_OFF),
    );
    let (reason, ok, failed) = (
        tp_u32(&ctx, off).unwrap_or(u32::MAX),
        tp_u64(&ctx, ok_off).unwrap_or(0),
        tp_u64(&ctx, failed_off).unwrap_or(0),
    );
    if reason < MIGRATE_REASONS {
        add(&MIGRATE_REASON_PAGES, reason * 2, ok);
        add(&MIGRATE_REASON_PAGES, reason * 2 + 1, failed);
    }
    // migrate_misplaced_* calls migrate_pages once, for this one folio,
    // in the faulting thread (MIGRATE_ASYNC): its result is the folio's.
    if reason == setting!(TP_REASON_NUMA_MISPLACED) {
        record_migration(failed == 0 && ok > 0);
    }
    0
}

/// Loads of a tracepoint record's fields straight from the context. The
/// verifier accepts a context load only at an offset written in the
/// instruction, and the offsets come from the format file at load time, so
/// each offset a field can have is a load of its own; an offset outside
/// them is read with the probe-read helper, which costs more than the whole
/// comparison chain.
macro_rules! tp_field {
    ($name:ident, $t:ty, $($off:literal)*) => {
        #[inline(always)]
        fn $name(ctx: &TracePointContext, off: u32) -> Option<$t> {
            let p = ctx.as_ptr().cast::<u8>();
            match off {
                // SAFETY: inside the record (the format file's offsets);
                // the verifier checks the bounds again.
                $($off => Some(unsafe { p.add($off).cast::<$t>().read_volatile() }),)*
                // SAFETY: bpf_probe_read_kernel copes with any address.
                _ => unsafe { ctx.read_at::<$t>(off as usize) }.ok(),
            }
        }
    };
}

tp_field!(tp_u64, u64, 8 16 24 32 40 48 56 64);
tp_field!(tp_u32, u32, 40 44 48 52 56 60 64 68 72);

/// sched:sched_skip_vma_numa: numa_scan_offset@8, vm_start@16, vm_end@24,
/// reason@32 (include/trace/events/sched.h, 6.12+; common header 8 bytes).
#[tracepoint]
pub fn tp_skip_vma(ctx: TracePointContext) -> u32 {
    count(Counter::VmaSkips, 1);
    // SAFETY: fixed layout of this tracepoint, see above.
    let ev = unsafe {
        SkipEvent {
            kind: EventKind::VmaSkip as u32,
            reason: ctx.read_at::<u32>(32).unwrap_or(u32::MAX),
            ts_ns: now_ns(),
            pid_tgid: pid_tgid(),
            vm_start: ctx.read_at::<u64>(16).unwrap_or(0),
            vm_end: ctx.read_at::<u64>(24).unwrap_or(0),
            cgroup_id: cgroup_id(),
        }
    };
    emit(&ev);
    0
}
