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

/// What `numatrace workload known --log FILE` writes: a workload whose hot
/// pages are known by construction, with what a truth file needs to tell
/// each true access's page and whether a visit made it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KnownLog {
    pub pid: u32,
    pub slow_node: u32,
    pub chunk_pages: u64,
    /// The visited mapping holds the steady chunks, then the burst chunks,
    /// then the rare page (when there is one).
    pub steady_chunks: u64,
    pub burst_chunks: u64,
    pub rare_page: Option<u64>,
    pub slow_vma: [u64; 2],
    pub cold_vma: Option<[u64; 2]>,
    /// CLOCK_MONOTONIC when every page was placed (and its frame read),
    /// and when the access phase began and ended.
    pub placed_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The frames of both mappings' pages as placed.
    pub slow_frames: Vec<FrameRun>,
    pub cold_frames: Vec<FrameRun>,
    /// Every visit in the order they began, up to [`KnownLog::MAX_VISITS`];
    /// those past it are counted only.
    pub visits: Vec<Visit>,
    pub visits_not_logged: u64,
    pub accesses: u64,
}

impl KnownLog {
    /// The most visits a log keeps: its memory is bounded whatever the
    /// run's length and pace.
    pub const MAX_VISITS: usize = 1_000_000;

    /// The chunk (or `Rare`) that page `page` of the visited mapping lies
    /// in, or None past it.
    pub fn part_of(&self, page: u64) -> Option<Part> {
        let chunk = page / self.chunk_pages.max(1);
        if chunk < self.steady_chunks {
            Some(Part::Steady(chunk))
        } else if chunk < self.steady_chunks + self.burst_chunks {
            Some(Part::Burst(chunk))
        } else if self.rare_page == Some(page) {
            Some(Part::Rare)
        } else {
            None
        }
    }
}

/// Consecutive pages of a mapping on consecutive frames: pages `first_page`
/// to `first_page + pages` lie at frames `pfn` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameRun {
    pub first_page: u64,
    pub pfn: u64,
    pub pages: u64,
}

impl FrameRun {
    /// Frames in page order as runs; a page with no frame (0) ends a run
    /// and starts none.
    pub fn runs(frames: impl IntoIterator<Item = u64>) -> Vec<FrameRun> {
        let mut runs = Vec::new();
        for (page, pfn) in frames.into_iter().enumerate() {
            FrameRun::push(&mut runs, page as u64, pfn);
        }
        runs
    }

    /// Adds page `page` at frame `pfn` (pages in increasing order) to
    /// `runs`: the last run grows when it continues on both, a new one
    /// starts otherwise; a page with no frame (0) adds nothing.
    pub fn push(runs: &mut Vec<FrameRun>, page: u64, pfn: u64) {
        if pfn == 0 {
            return;
        }
        match runs.last_mut() {
            Some(r) if r.first_page + r.pages == page && r.pfn + r.pages == pfn => r.pages += 1,
            _ => runs.push(FrameRun {
                first_page: page,
                pfn,
                pages: 1,
            }),
        }
    }
}

/// Where a page of the visited mapping lies in the workload's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// A chunk visited every `--revisit-ms` (its number).
    Steady(u64),
    /// A chunk hot in one burst (its number in the mapping).
    Burst(u64),
    Rare,
}

/// A chunk's visit (a burst's visits back to back are one), or a touch of
/// the rare page, on CLOCK_MONOTONIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Visit {
    pub part: Part,
    pub start_ns: u64,
    pub end_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_in_page_order_make_runs_broken_by_gaps_and_holes() {
        let runs = FrameRun::runs([10, 11, 12, 20, 0, 22, 23]);
        let r = |first_page, pfn, pages| FrameRun {
            first_page,
            pfn,
            pages,
        };
        assert_eq!(runs, vec![r(0, 10, 3), r(3, 20, 1), r(5, 22, 2)]);
    }

    #[test]
    fn a_page_is_told_by_its_chunk() {
        let log = KnownLog {
            chunk_pages: 4,
            steady_chunks: 2,
            burst_chunks: 1,
            rare_page: Some(12),
            ..KnownLog::default()
        };
        assert_eq!(log.part_of(0), Some(Part::Steady(0)));
        assert_eq!(log.part_of(7), Some(Part::Steady(1)));
        assert_eq!(log.part_of(8), Some(Part::Burst(2)));
        assert_eq!(log.part_of(12), Some(Part::Rare));
        assert_eq!(log.part_of(13), None);
    }
}
