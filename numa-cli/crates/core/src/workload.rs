//! What `numatrace workload ... --summary FILE` writes: the workload's
//! own view of a run (its pids, mappings, accesses and where its pages
//! ended), which the VM tests and benches read as this type.
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub pid: u32,
    pub slow_node: u32,
    pub dram_node: u32,
    pub slow_pages: usize,
    /// `[start, end)` of the accessed slow-node mapping, and of the cold
    /// one (`--cold-mb`).
    pub slow_vma: [u64; 2],
    pub cold_vma: Option<[u64; 2]>,
    pub cold_pages_on_dram_node_at_end: Option<usize>,
    /// Not asked with `--late-populate-ms`: a query of every page's node is
    /// CPU time, on which the scanner runs, at the ends of the run.
    pub slow_pages_on_slow_node_at_start: Option<usize>,
    /// Pages of this process's slow mapping: a child's own are not counted.
    pub slow_pages_on_dram_node_at_end: Option<usize>,
    /// Visits and accesses of this process (all its threads); each child
    /// makes as many with `--visits`.
    pub chunk_visits: u64,
    pub accesses: u64,
    /// From the start of this process's access phase to the end of the
    /// last process's (`--procs`).
    pub elapsed_s: f64,
    /// Microseconds spent accessing (idle gaps excluded): the RFC's "score".
    pub score_us: u64,
    /// CPU time of the access phase, this process's threads only: system
    /// time is where hint faults (and any probe on them) are paid.
    pub user_ms: f64,
    pub sys_ms: f64,
    /// System-wide vmstat numa_hint_faults during the access phase, until
    /// the last process's ended.
    pub numa_hint_faults: u64,
    /// Processes (this one and its children) and access threads in each.
    pub procs: u64,
    pub threads: u64,
    /// Pages of the `--shared-mb` mapping (0 without one) and its
    /// `[start, end)`, the same in every process.
    pub shared_pages: usize,
    pub shared_vma: Option<[u64; 2]>,
    /// None without a shared mapping, or when the page queries are left
    /// out (`--late-populate-ms`).
    pub shared_pages_on_dram_node_at_end: Option<usize>,
    pub child_pids: Vec<u32>,
}
