//! Time, node memory and process identity and liveness, replaceable in
//! tests.
use super::{exit::stat_says_exiting, floor};
use crate::process::Pinned;

/// Time and node memory, replaceable in tests.
pub trait Env {
    fn now_ns(&self) -> u64;
    /// `(MemFree, MemTotal)` in KiB.
    fn node_meminfo(&self, node: u32) -> Option<(u64, u64)>;
    /// The process is gone, exiting (its address space being torn down),
    /// or has no address space any more.
    fn process_has_no_memory(&self, pid: u32) -> bool;
    /// Pins the process `pid` names now (with a pidfd when `pidfd`).
    fn pin(&self, pid: u32, pidfd: bool) -> Option<Pinned>;
    /// Is the pinned process still running, its pid not reused?
    fn alive(&self, p: &Pinned) -> bool;
}

pub struct SysEnv;

impl Env for SysEnv {
    fn now_ns(&self) -> u64 {
        numa_host::clock::monotonic_ns()
    }
    fn node_meminfo(&self, node: u32) -> Option<(u64, u64)> {
        floor::read_node_meminfo(node)
    }
    fn pin(&self, pid: u32, pidfd: bool) -> Option<Pinned> {
        Pinned::pin(pid, pidfd)
    }
    fn alive(&self, p: &Pinned) -> bool {
        p.alive()
    }
    fn process_has_no_memory(&self, pid: u32) -> bool {
        // /proc/PID/statm is all zeros without an mm.
        let no_mm = std::fs::read_to_string(format!("/proc/{pid}/statm")).map_or(true, |s| {
            s.split_whitespace().next().is_none_or(|v| v == "0")
        });
        no_mm
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| stat_says_exiting(&s))
    }
}
