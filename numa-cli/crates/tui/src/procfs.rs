//! Per-process facts `top` reads from procfs when live: resident pages per
//! node (`/proc/PID/numa_maps`) and the VMAs (`/proc/PID/maps`). Readers
//! return `None` when the process is gone or unreadable.
use numa_core::procfs::{parse_maps, parse_numa_maps, Vma};

pub fn numa_maps(pid: u32) -> Option<Vec<(u32, u64)>> {
    std::fs::read_to_string(format!("/proc/{pid}/numa_maps"))
        .ok()
        .map(|t| parse_numa_maps(&t))
}

pub fn maps(pid: u32) -> Option<Vec<Vma>> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .ok()
        .map(|t| parse_maps(&t))
}
