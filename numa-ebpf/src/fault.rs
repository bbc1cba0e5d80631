//! The NUMA hint fault. `do_numa_page` is inlined on every kernel we know, so
//! the hint fault is seen where it calls out: `numa_migrate_check` (6.12+) or
//! `numa_migrate_prep` (6.1); both also serve `do_huge_pmd_numa_page`.
//! `task_numa_fault` carries the fault's flags; `do_huge_pmd_numa_page` marks THP.
use aya_ebpf::{
    macros::{fentry, kprobe},
    programs::{FEntryContext, ProbeContext},
};
use numa_ebpf_common::Counter;

use crate::maps::count;

#[fentry]
pub fn fentry_hint_fault(_ctx: FEntryContext) -> u32 {
    count(Counter::HintFaults, 1);
    0
}

#[kprobe]
pub fn kprobe_hint_fault(_ctx: ProbeContext) -> u32 {
    count(Counter::HintFaults, 1);
    0
}

#[fentry]
pub fn fentry_fault_account(_ctx: FEntryContext) -> u32 {
    count(Counter::FaultAccount, 1);
    0
}

#[kprobe]
pub fn kprobe_fault_account(_ctx: ProbeContext) -> u32 {
    count(Counter::FaultAccount, 1);
    0
}

#[fentry]
pub fn fentry_thp_fault(_ctx: FEntryContext) -> u32 {
    count(Counter::ThpFaults, 1);
    0
}

#[kprobe]
pub fn kprobe_thp_fault(_ctx: ProbeContext) -> u32 {
    count(Counter::ThpFaults, 1);
    0
}
