//! Trivial programs `numatrace doctor` loads and attaches to prove that a
//! mechanism works on this kernel, independently of the NUMA hooks.
use aya_ebpf::{
    macros::{fentry, kprobe, tracepoint},
    programs::{FEntryContext, ProbeContext, TracePointContext},
};
use numa_ebpf_common::Counter;

use crate::maps::count;

#[fentry]
pub fn trial_fentry(_ctx: FEntryContext) -> u32 {
    count(Counter::TrialHits, 1);
    0
}

#[kprobe]
pub fn trial_kprobe(_ctx: ProbeContext) -> u32 {
    count(Counter::TrialHits, 1);
    0
}

#[tracepoint]
pub fn trial_tracepoint(_ctx: TracePointContext) -> u32 {
    count(Counter::TrialHits, 1);
    0
}
