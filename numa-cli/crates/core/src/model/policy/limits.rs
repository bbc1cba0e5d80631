//! The kernel's per-node promotion limits: the node-wide candidate count
//! they read, the candidate rate limit and the adaptive hot threshold.
use numa_ebpf_common::{FaultEvent, Outcome};

/// The node-wide PGPROMOTE_CANDIDATE count in a model's world, per node.
///
/// The kernel's rate limit and threshold adjustment read the node's
/// count, to which every process's candidates add, not only those of the
/// faults numatrace kept (`--pid`, `--cgroup` and `--sample` keep a
/// subset, a full ring drops some). Here the count is the model's own
/// candidates among the faults it saw plus the candidates of the faults it
/// did not see, as the kernel counted them: the node's count at each
/// decision (read by the probes when the decision returned) less the
/// kernel's own candidates among the faults seen. That unseen part never
/// decreases (the node's count is folded from per-CPU batches and can lag
/// the faults seen). Without the node's count (records without
/// `NODE_CANDIDATES`) it is 0.
#[derive(Debug, Clone, Default)]
pub struct Candidates {
    nodes: Vec<(i32, Feed)>,
}

#[derive(Debug, Clone, Default)]
struct Feed {
    own: u64,
    kernel_seen: u64,
    /// The node's count before the first fault seen.
    base: Option<u64>,
    unseen: u64,
}

/// Whether the kernel counted this fault as a candidate: it passed the
/// threshold and reached numa_promotion_rate_limit.
#[inline]
fn kernel_candidate(ev: &FaultEvent) -> bool {
    ev.outcome == Outcome::PromoteHot as u8 || ev.outcome == Outcome::RejectRateLimit as u8
}

impl Candidates {
    /// Takes in what a decided fault tells of the node's count; called
    /// once per fault, before the model counts its own candidate. Returns
    /// the destination node's count then (what [`count`](Self::count)
    /// says).
    #[inline]
    pub fn observe(&mut self, ev: &FaultEvent) -> u64 {
        let f = node_entry(&mut self.nodes, ev.dst_nid, Feed::default);
        if kernel_candidate(ev) {
            f.kernel_seen += u64::from(ev.nr_pages.max(1));
        }
        if ev.has_node_candidates() {
            let nc = ev.node_candidates;
            let base = *f.base.get_or_insert(nc.saturating_sub(f.kernel_seen));
            let unseen = nc.saturating_sub(base).saturating_sub(f.kernel_seen);
            f.unseen = f.unseen.max(unseen);
        }
        f.own + f.unseen
    }

    /// The node's count now.
    #[inline]
    pub fn count(&self, node: i32) -> u64 {
        self.nodes
            .iter()
            .find(|(n, _)| *n == node)
            .map_or(0, |(_, f)| f.own + f.unseen)
    }

    /// Counts `nr` candidate pages of the model's; the node's count after.
    #[inline]
    pub fn add(&mut self, node: i32, nr: u64) -> u64 {
        let f = node_entry(&mut self.nodes, node, Feed::default);
        f.own += nr;
        f.own + f.unseen
    }
}

/// The kernel's promotion rate limit (numa_promotion_rate_limit), per
/// destination node, on the node's candidate count.
#[derive(Debug, Clone, Default)]
pub struct RateLimiter {
    /// Pages per second (`promote_rate_limit_MBps << (20 - PAGE_SHIFT)`);
    /// 0 limits every candidate, as in the kernel.
    pub pages_per_s: u64,
    /// Per node: a handful, a linear scan beats a map.
    nodes: Vec<(i32, RlState)>,
}

#[derive(Debug, Clone, Default)]
struct RlState {
    start_ms: Option<u64>,
    start_cand: u64,
}

impl RateLimiter {
    pub fn new(mbps: u64) -> Self {
        RateLimiter {
            pages_per_s: mbps << (20 - 12),
            nodes: Vec::new(),
        }
    }

    /// With the node's count `nr_cand` just raised by a candidate at
    /// `now_ms`: true when over the limit. A window opens more than a
    /// second after the previous one, at the count including the fault
    /// that opens it (the kernel's nbp_rl_start/nbp_rl_nr_cand).
    pub fn limited(&mut self, node: i32, now_ms: u64, nr_cand: u64) -> bool {
        let s = node_entry(&mut self.nodes, node, RlState::default);
        if s.start_ms
            .is_none_or(|start| now_ms.saturating_sub(start) > 1000)
        {
            s.start_ms = Some(now_ms);
            s.start_cand = nr_cand;
        }
        nr_cand.saturating_sub(s.start_cand) >= self.pages_per_s
    }
}

/// The state of `node` in a small per-node list, made by `new` if absent.
#[inline]
pub(super) fn node_entry<T>(
    nodes: &mut Vec<(i32, T)>,
    node: i32,
    new: impl FnOnce() -> T,
) -> &mut T {
    let i = match nodes.iter().position(|(n, _)| *n == node) {
        Some(i) => i,
        None => {
            nodes.push((node, new()));
            nodes.len() - 1
        }
    };
    &mut nodes[i].1
}

pub const NUMA_MIGRATION_ADJUST_STEPS: u64 = 16;

/// numa_promotion_adjust_threshold's state for one node.
#[derive(Debug, Clone, Default)]
pub struct AdaptiveThreshold {
    pub th_ms: u64,
    start_ms: Option<u64>,
    nr_cand_at_start: u64,
    /// The kernel was seen adjusting, so the period's start is known.
    anchored: bool,
}

impl AdaptiveThreshold {
    /// One adjustment step, as the kernel does at each decision: every
    /// `period_ms` (scan_period_max) compare the candidates of the period
    /// with what the rate limit allows, and move the threshold by
    /// `ref_th * 2 / 16` within `[unit, 2 * ref_th]`.
    pub fn adjust(
        &mut self,
        now_ms: u64,
        period_ms: u64,
        ref_th: u64,
        rate_pages_per_s: u64,
        nr_cand: u64,
    ) {
        let due = match self.start_ms {
            None => true,
            Some(s) => now_ms.saturating_sub(s) > period_ms,
        };
        if !due {
            return;
        }
        self.start_ms = Some(now_ms);
        let ref_cand = rate_pages_per_s.saturating_mul(period_ms) / 1000;
        let diff = nr_cand.saturating_sub(self.nr_cand_at_start);
        let unit = (ref_th * 2 / NUMA_MIGRATION_ADJUST_STEPS).max(1);
        let th = if self.th_ms == 0 { ref_th } else { self.th_ms };
        let th = if diff > ref_cand * 11 / 10 {
            th.saturating_sub(unit).max(unit)
        } else if diff < ref_cand * 9 / 10 {
            (th + unit).min(ref_th * 2)
        } else {
            th
        };
        self.nr_cand_at_start = nr_cand;
        self.th_ms = th;
    }

    /// The free-space shortcut's reset: `pgdat->nbp_threshold = 0`, and
    /// nothing else (the adjustment period and its count go on).
    pub fn reset_threshold(&mut self) {
        self.th_ms = 0;
    }

    pub fn current(&self, ref_th: u64) -> u64 {
        if self.th_ms == 0 {
            ref_th
        } else {
            self.th_ms
        }
    }

    /// Follows the threshold the kernel compared with (`kernel_th_ms`, from
    /// the record) until the kernel is seen adjusting it; returns whether
    /// the model's own adjustment applies. Attached mid-period, the model
    /// cannot know when the kernel's period started (`nbp_th_start`), so a
    /// guessed start would adjust at the wrong moment. The first change the
    /// model's own reset does not explain is the kernel's adjustment: its
    /// period starts there, and from then on the model adjusts by itself.
    pub fn follow_kernel(
        &mut self,
        kernel_th_ms: u64,
        ref_th: u64,
        now_ms: u64,
        nr_cand: u64,
    ) -> bool {
        if self.anchored {
            return true;
        }
        if self.start_ms.is_none() {
            // First sight: the state at attach.
            self.sync(kernel_th_ms, now_ms, nr_cand);
            return false;
        }
        if kernel_th_ms != self.current(ref_th) {
            self.sync(kernel_th_ms, now_ms, nr_cand);
            self.anchored = true;
        }
        self.anchored
    }

    /// Starts from an observed kernel state: the threshold in force, with
    /// the adjustment period starting now.
    pub fn sync(&mut self, th_ms: u64, now_ms: u64, nr_cand: u64) {
        self.th_ms = th_ms;
        self.start_ms = Some(now_ms);
        self.nr_cand_at_start = nr_cand;
    }
}
