//! The `kernel-time` model.
use std::collections::BTreeMap;

use numa_ebpf_common::{fault_flags as ff, FaultEvent, Outcome};

use super::{
    limits::{node_entry, AdaptiveThreshold, RateLimiter},
    no, yes, FaultView, Policy, Verdict,
};

/// `kernel-time`: should_numa_migrate_memory's tiering branch re-implemented.
#[derive(Debug, Clone)]
pub struct KernelTime {
    pub hot_threshold_ms: u64,
    pub scan_period_max_ms: u64,
    pub rate: RateLimiter,
    nodes: Vec<(i32, AdaptiveThreshold)>,
}

impl KernelTime {
    pub fn new(hot_threshold_ms: u64, scan_period_max_ms: u64, rate_limit_mbps: u64) -> Self {
        KernelTime {
            hot_threshold_ms,
            scan_period_max_ms,
            rate: RateLimiter::new(rate_limit_mbps),
            nodes: Vec::new(),
        }
    }
}

/// The kernel's own latency when numatrace saw it, else numatrace's.
fn latency_ms(ev: &FaultEvent) -> Option<u64> {
    if ev.flags & ff::KERNEL_LATENCY != 0 {
        Some(u64::from(ev.kernel_latency_ms))
    } else if ev.flags & ff::HAS_STAMP != 0 {
        Some(ev.ts_ns.saturating_sub(ev.scan_ns) / 1_000_000)
    } else {
        None
    }
}

impl Policy for KernelTime {
    fn name(&self) -> String {
        "kernel-time".into()
    }

    fn params(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("hot_threshold_ms".into(), self.hot_threshold_ms.to_string()),
            (
                "scan_period_max_ms".into(),
                self.scan_period_max_ms.to_string(),
            ),
            (
                "rate_limit_pages_per_s".into(),
                self.rate.pages_per_s.to_string(),
            ),
        ])
    }

    fn decide(&mut self, ev: &FaultEvent, _view: &FaultView) -> Verdict {
        // pgdat_free_space_enough() is not observable per fault; the kernel's
        // own answer (no access-time exchange before promoting) is the input.
        if ev.outcome == Outcome::PromoteFreeSpace as u8 {
            self.nodes.retain(|(n, _)| *n != ev.dst_nid);
            return yes("free_space");
        }
        let Some(latency) = latency_ms(ev) else {
            return no("no_stamp");
        };
        let now_ms = ev.ts_ns / 1_000_000;
        let nr_cand = self.rate.candidates(ev.dst_nid);
        let (ref_th, period, rate) = (
            self.hot_threshold_ms,
            self.scan_period_max_ms,
            self.rate.pages_per_s,
        );
        let node = node_entry(&mut self.nodes, ev.dst_nid, || {
            // Start from the kernel's threshold at attach when seen.
            let mut t = AdaptiveThreshold::default();
            if ev.threshold_ms > 0 {
                t.sync(u64::from(ev.threshold_ms), now_ms, nr_cand);
            }
            t
        });
        node.adjust(now_ms, period, ref_th, rate, nr_cand);
        if latency >= node.current(ref_th) {
            return no("latency");
        }
        if self
            .rate
            .limited(ev.dst_nid, now_ms, u64::from(ev.nr_pages.max(1)))
        {
            return no("rate_limit");
        }
        yes("hot")
    }

    fn threshold(&self) -> Option<f64> {
        Some(
            self.nodes
                .iter()
                .map(|(_, n)| n.current(self.hot_threshold_ms))
                .max()
                .unwrap_or(self.hot_threshold_ms) as f64,
        )
    }
}
