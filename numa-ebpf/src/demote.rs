//! Demotion, one record per folio: reclaim's allocation callback, which
//! `migrate_pages()` calls through a function pointer once for every folio
//! reclaim moves down a tier (so it is never inlined), and the end of each
//! reclaim batch's demotion with the pages it moved. Only reclaim calls
//! them: promotions pay nothing for these hooks.
use aya_ebpf::{macros::fexit, programs::FExitContext};
use numa_ebpf_common::{demote_flags, reclaimer, DemoteEvent, EventKind};

use crate::maps::{
    as_number, current_comm, current_task_flags, emit, flags_nid, folio_flags, folio_identity,
    folio_memcg_id, folio_nid, folio_nr_pages, folio_pfn, now_ns, pid_tgid, thread_ctx,
};

/// PF_KSWAPD in task_struct.flags: unchanged since 2.6.
const PF_KSWAPD: u32 = 0x0002_0000;

/// Which of the kernel's pgdemote_* counters this demotion goes to.
#[inline(always)]
fn current_reclaimer() -> u32 {
    if current_task_flags() & PF_KSWAPD != 0 {
        return reclaimer::KSWAPD;
    }
    let mut comm = [0u8; 16];
    current_comm(&mut comm);
    if comm.starts_with(b"khugepaged\0") {
        reclaimer::KHUGEPAGED
    } else {
        reclaimer::DIRECT
    }
}

/// `src` is the folio (page on 6.1) to demote, `dst` the folio allocated
/// for it on the lower tier (0: none could be).
#[inline(always)]
fn on_demote_alloc(src: u64, dst: u64) {
    let Some(ctx) = thread_ctx() else {
        return;
    };
    // SAFETY: this thread's storage.
    let number = unsafe { &mut (*ctx).number };
    let src = as_number(number, src);
    let dst = as_number(number, dst);
    let (dst_pfn, dst_nid) = if dst == 0 {
        (0, -1)
    } else {
        (folio_pfn(dst).unwrap_or(0), folio_nid(dst))
    };
    let (mapping, index) = folio_identity(src);
    let src_flags = folio_flags(src);
    let ev = DemoteEvent {
        kind: EventKind::Demote as u32,
        reclaimer: current_reclaimer(),
        ts_ns: now_ns(),
        pid_tgid: pid_tgid(),
        src_pfn: folio_pfn(src).unwrap_or(0),
        dst_pfn,
        src_nid: flags_nid(src_flags),
        dst_nid,
        mapping,
        index,
        nr_pages: folio_nr_pages(src, src_flags),
        flags: 0,
        memcg_id: folio_memcg_id(src),
    };
    emit(&ev);
}

#[fexit]
pub fn fexit_demote(ctx: FExitContext) -> u32 {
    let src: u64 = ctx.arg(0);
    on_demote_alloc(src, ctx.ret().unwrap_or(0));
    0
}

/// demote_folio_list() returned the pages its batch demoted, the number
/// the kernel adds to pgdemote_* (retried and failed folios excluded).
#[fexit]
pub fn fexit_demote_batch(ctx: FExitContext) -> u32 {
    let ev = DemoteEvent {
        kind: EventKind::Demote as u32,
        reclaimer: current_reclaimer(),
        ts_ns: now_ns(),
        pid_tgid: pid_tgid(),
        src_pfn: 0,
        dst_pfn: 0,
        src_nid: -1,
        dst_nid: -1,
        mapping: 0,
        index: 0,
        nr_pages: ctx.ret::<u32>().unwrap_or(0),
        flags: demote_flags::BATCH_END,
        memcg_id: 0,
    };
    emit(&ev);
    0
}
