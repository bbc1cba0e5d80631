//! The kernel's per-node promotion limits: the candidate rate limit and the
//! adaptive hot threshold.
/// The kernel's promotion rate limit (numa_promotion_rate_limit), per
/// destination node, on the policy's own candidate count.
#[derive(Debug, Clone, Default)]
pub struct RateLimiter {
    /// Pages per second; 0 disables.
    pub pages_per_s: u64,
    /// Per node: a handful, a linear scan beats a map.
    nodes: Vec<(i32, RlState)>,
}

#[derive(Debug, Clone, Default)]
struct RlState {
    nr_cand: u64,
    start_ms: u64,
    start_cand: u64,
}

impl RateLimiter {
    pub fn new(mbps: u64) -> Self {
        RateLimiter {
            pages_per_s: mbps << (20 - 12),
            nodes: Vec::new(),
        }
    }

    /// Counts `nr` candidate pages at `now_ms`; true when over the limit.
    pub fn limited(&mut self, node: i32, now_ms: u64, nr: u64) -> bool {
        if self.pages_per_s == 0 {
            return false;
        }
        let s = node_entry(&mut self.nodes, node, RlState::default);
        s.nr_cand = s.nr_cand.saturating_add(nr);
        if now_ms.saturating_sub(s.start_ms) > 1000 {
            s.start_ms = now_ms;
            s.start_cand = s.nr_cand;
        }
        s.nr_cand - s.start_cand >= self.pages_per_s
    }

    pub fn candidates(&self, node: i32) -> u64 {
        self.nodes
            .iter()
            .find(|(n, _)| *n == node)
            .map_or(0, |(_, s)| s.nr_cand)
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

    pub fn current(&self, ref_th: u64) -> u64 {
        if self.th_ms == 0 {
            ref_th
        } else {
            self.th_ms
        }
    }

    /// Starts from an observed kernel state: the threshold in force, with
    /// the adjustment period starting now.
    pub fn sync(&mut self, th_ms: u64, now_ms: u64, nr_cand: u64) {
        self.th_ms = th_ms;
        self.start_ms = Some(now_ms);
        self.nr_cand_at_start = nr_cand;
    }
}
