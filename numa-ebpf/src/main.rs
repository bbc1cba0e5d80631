//! numatrace's BPF programs: one logical hook per file, each in two
//! mechanisms (fentry/fexit, and kprobe/kretprobe for kernels that refuse
//! tracing programs). Userspace picks one per hook through the attach plan.
//!
//! Programs never fail: a missing map slot or an unreadable argument ends the
//! program early (a reachable panic would be a verifier rejection).
#![no_std]
#![no_main]
#![feature(core_intrinsics)]
#![expect(
    internal_features,
    reason = "atomic_xadd with SeqCst: see maps::next_seq"
)]

mod damon;
mod decision;
mod demote;
mod empty;
mod fault;
mod maps;
mod migrate;
mod scan;
mod trial;

/// The license the kernel checks before it lets a program call GPL-only
/// helpers (task storage, probe reads): GPL-compatible, as aya's template
/// declares it for crates under MIT or Apache-2.0.
#[no_mangle]
#[link_section = "license"]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
