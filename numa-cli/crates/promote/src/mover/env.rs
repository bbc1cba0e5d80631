//! Time, node memory and process liveness, replaceable in tests.
use super::{exit::stat_says_exiting, floor};

/// Time and node memory, replaceable in tests.
pub trait Env {
    fn now_ns(&self) -> u64;
    /// `(MemFree, MemTotal)` in KiB.
    fn node_meminfo(&self, node: u32) -> Option<(u64, u64)>;
    /// The process is gone, exiting (its address space being torn down),
    /// or has no address space any more.
    fn process_has_no_memory(&self, pid: u32) -> bool;
}

pub struct SysEnv;

impl Env for SysEnv {
    fn now_ns(&self) -> u64 {
        numa_host::clock::monotonic_ns()
    }
    fn node_meminfo(&self, node: u32) -> Option<(u64, u64)> {
        floor::read_node_meminfo(node)
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
