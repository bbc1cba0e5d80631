//! The NUMA scanner. `change_pte_range` is inlined on Debian 6.1/6.12, so
//! the scanned range comes from `change_prot_numa` (its return value is the
//! number of PTEs made PROT_NONE) and the tiering scan stamp from the
//! last_cpupid exchange the scanner makes (`folio_xchg_last_cpupid`, or
//! `page_cpupid_xchg_last` on 6.1). `change_huge_pmd` covers THP.
use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use numa_ebpf_common::Counter;

use crate::maps::count;

#[fentry]
pub fn fentry_scan_stamp(_ctx: FEntryContext) -> u32 {
    count(Counter::CpupidXchg, 1);
    0
}

#[kprobe]
pub fn kprobe_scan_stamp(_ctx: ProbeContext) -> u32 {
    count(Counter::CpupidXchg, 1);
    0
}

#[inline(always)]
fn scanned(ptes_updated: u64) {
    count(Counter::ScanRanges, 1);
    count(Counter::ScanPtesUpdated, ptes_updated);
}

#[fexit]
pub fn fexit_scan_range(ctx: FExitContext) -> u32 {
    let updated: u64 = ctx.ret().unwrap_or(0);
    scanned(updated);
    0
}

#[kretprobe]
pub fn kretprobe_scan_range(ctx: RetProbeContext) -> u32 {
    scanned(ctx.ret());
    0
}

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
