//! The `kernel-time` model.
use std::collections::BTreeMap;

use numa_ebpf_common::FaultEvent;

use super::{
    decision,
    limits::{node_entry, AdaptiveThreshold, Candidates, RateLimiter},
    shortcut, Decision, FaultView, Policy, Shortcut, Step, FREE_SPACE, HOT, NO_STAMP, OTHER,
    RATE_LIMIT,
};

const LATENCY: Decision = decision(false, "latency", Step::Threshold);

/// `kernel-time`: should_numa_migrate_memory's tiering branch re-implemented.
#[derive(Debug, Clone)]
pub struct KernelTime {
    pub hot_threshold_ms: u64,
    pub scan_period_max_ms: u64,
    pub rate: RateLimiter,
    /// PAGE_ACCESS_TIME_MASK and PAGE_ACCESS_TIME_BUCKETS of the kernel.
    access_mask: u32,
    access_buckets: u32,
    candidates: Candidates,
    nodes: Vec<(i32, AdaptiveThreshold)>,
}

impl KernelTime {
    pub fn new(hot_threshold_ms: u64, scan_period_max_ms: u64, rate_limit_mbps: u64) -> Self {
        KernelTime {
            hot_threshold_ms,
            scan_period_max_ms,
            rate: RateLimiter::new(rate_limit_mbps),
            access_mask: (1 << 21) - 1,
            access_buckets: 0,
            candidates: Candidates::default(),
            nodes: Vec::new(),
        }
    }

    /// The kernel's cpupid field: LAST_CPUPID_MASK and the buckets the
    /// access time is shifted by to fit it.
    pub fn with_access_time(mut self, cpupid_mask: u32, buckets: u32) -> Self {
        let b = buckets.min(31);
        self.access_buckets = b;
        self.access_mask = cpupid_mask << b;
        self
    }

    /// The kernel's `(now - last) & PAGE_ACCESS_TIME_MASK`: its own value
    /// when numatrace saw it, else from numatrace's stamp (ms of the
    /// monotonic clock for jiffies_to_msecs; the same result unless the
    /// stored time is shifted by buckets).
    fn latency_ms(&self, ev: &FaultEvent) -> Option<u64> {
        if ev.has_kernel_latency() {
            return Some(u64::from(ev.kernel_latency_ms & self.access_mask));
        }
        if !ev.has_stamp() {
            return None;
        }
        let b = self.access_buckets;
        let now = (ev.ts_ns / 1_000_000) as u32;
        let last = ((ev.scan_ns / 1_000_000) as u32 >> b) << b;
        Some(u64::from(now.wrapping_sub(last) & self.access_mask))
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

    fn decide(&mut self, ev: &FaultEvent, _view: &FaultView) -> Decision {
        let nr_cand = self.candidates.observe(ev);
        let now_ms = ev.ts_ns / 1_000_000;
        let (ref_th, period, rate) = (
            self.hot_threshold_ms,
            self.scan_period_max_ms,
            self.rate.pages_per_s,
        );
        let node = node_entry(&mut self.nodes, ev.dst_nid, AdaptiveThreshold::default);
        match shortcut(ev) {
            // pgdat_free_space_enough() is not observable per fault; the
            // kernel's own answer is the input. It resets the threshold.
            Shortcut::FreeSpace => {
                node.reset_threshold();
                return FREE_SPACE;
            }
            Shortcut::Before => return OTHER,
            Shortcut::ThresholdPath => {}
        }
        // Every decision past the shortcut adjusts, with or without a stamp,
        // once the kernel's period is known (records without the kernel's
        // threshold leave the model to its own).
        let kernel_th = u64::from(ev.threshold_ms);
        if kernel_th == 0 || node.follow_kernel(kernel_th, ref_th, now_ms, nr_cand) {
            node.adjust(now_ms, period, ref_th, rate, nr_cand);
        }
        let th = node.current(ref_th);
        let Some(latency) = self.latency_ms(ev) else {
            return NO_STAMP;
        };
        if latency >= th {
            return LATENCY;
        }
        let nr_cand = self
            .candidates
            .add(ev.dst_nid, u64::from(ev.nr_pages.max(1)));
        if self.rate.limited(ev.dst_nid, now_ms, nr_cand) {
            return RATE_LIMIT;
        }
        HOT
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
