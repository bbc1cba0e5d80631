//! Maps shared by every hook, and the counter helper.
use aya_ebpf::{macros::map, maps::PerCpuArray};
use numa_ebpf_common::{Counter, COUNTER_SLOTS};

/// Per-CPU event counters, indexed by [`Counter`]; userspace sums the CPUs.
#[map(name = "COUNTERS")]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);

/// Adds `n` to a per-CPU counter. Per-CPU slots need no atomics.
#[inline(always)]
pub fn count(counter: Counter, n: u64) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: the pointer comes from a successful per-CPU array lookup and
        // only this CPU writes to its slot (preemption is off in BPF programs).
        unsafe { *slot += n };
    }
}
