//! What `numatrace workload ... --summary FILE` writes: the workload's
//! own view of a run (its pids, mappings, accesses and where its pages
//! ended), and what `workload move-pages` prints, which the VM tests and
//! benches read as these types.
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
    /// Each phase's length in seconds with `--phase-ms` (the last one's
    /// until the run ended), this process's; the first 1,000 at most.
    #[serde(default)]
    pub phase_s: Vec<f64>,
}

/// What `numatrace workload move-pages` prints: one way of promoting a
/// buffer on the slow node, timed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MovePagesSummary {
    /// `baseline` (one move_pages call) or `mover` (the promoter's).
    pub via: String,
    pub pages: u64,
    pub moved: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    pub pages_per_s: f64,
    pub calls: u64,
    pub on_dram_after: u64,
    /// Mover only: where its time went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mover: Option<MoverTimes>,
}

/// Where the promoter's mover spent a `move-pages` run's time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MoverTimes {
    pub move_calls: u64,
    pub move_s: f64,
    pub query_calls: u64,
    pub query_s: f64,
    pub meminfo_reads: u64,
    pub batch_pages: usize,
    pub ns_per_page: Option<f64>,
    pub fixed_ns_per_call: Option<f64>,
    /// The end-of-run check of where the moved pages are (not timed).
    pub verify_s: f64,
}
