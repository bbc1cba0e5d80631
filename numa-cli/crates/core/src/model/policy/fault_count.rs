//! The `fault-count` model.
use std::collections::BTreeMap;

use numa_ebpf_common::{fault_flags as ff, FaultEvent};

use super::{limits::RateLimiter, no, yes, FaultView, Policy, Verdict};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Mm,
    Global,
}

impl Counter {
    /// The spelling of the `counter` option.
    pub fn name(self) -> &'static str {
        match self {
            Counter::Mm => "mm",
            Counter::Global => "global",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampKind {
    First,
    Latest,
}

impl StampKind {
    /// The spelling of the `stamp` option.
    pub fn name(self) -> &'static str {
        match self {
            StampKind::First => "first",
            StampKind::Latest => "latest",
        }
    }
}

/// `fault-count` (the RFC): promote when fewer than `threshold` hint faults
/// happened between the protecting scan and this fault.
#[derive(Debug, Clone)]
pub struct FaultCount {
    pub threshold: u64,
    pub counter: Counter,
    pub stamp: StampKind,
    pub rate: Option<RateLimiter>,
}

/// Faults between the stamp and this fault (this one included); counters
/// are compared with wrapping arithmetic.
pub fn fault_delta(
    ev: &FaultEvent,
    view: &FaultView,
    counter: Counter,
    stamp: StampKind,
) -> Option<u64> {
    let (scan_g, scan_m) = match stamp {
        StampKind::First => {
            if ev.flags & ff::HAS_STAMP == 0 {
                return None;
            }
            (ev.scan_seq_global, ev.scan_seq_mm)
        }
        StampKind::Latest => {
            // The latest pass over the range, or the folio's own stamp when
            // that is newer (a pass that found the PTE still accessible).
            let s = view.latest_scan;
            match (s, ev.flags & ff::HAS_STAMP != 0) {
                (Some(s), true) if s.ts_ns > ev.scan_ns => (s.seq_global, s.seq_mm),
                (_, true) => (ev.scan_seq_global, ev.scan_seq_mm),
                (Some(s), false) => (s.seq_global, s.seq_mm),
                (None, false) => return None,
            }
        }
    };
    match counter {
        Counter::Global => Some(ev.seq_global.wrapping_sub(scan_g)),
        Counter::Mm if ev.flags & ff::STAMP_OTHER_MM != 0 && stamp == StampKind::First => None,
        Counter::Mm => Some(ev.seq_mm.wrapping_sub(scan_m)),
    }
}

impl Policy for FaultCount {
    fn name(&self) -> String {
        "fault-count".into()
    }

    fn params(&self) -> BTreeMap<String, String> {
        let mut p = BTreeMap::from([
            ("threshold".into(), self.threshold.to_string()),
            ("counter".into(), self.counter.name().into()),
            ("stamp".into(), self.stamp.name().into()),
        ]);
        if let Some(r) = &self.rate {
            p.insert("rate_limit_pages_per_s".into(), r.pages_per_s.to_string());
        }
        p
    }

    fn decide(&mut self, ev: &FaultEvent, view: &FaultView) -> Verdict {
        let Some(delta) = fault_delta(ev, view, self.counter, self.stamp) else {
            return no("no_stamp");
        };
        if delta >= self.threshold {
            return no("fault_count");
        }
        if let Some(r) = &mut self.rate {
            if r.limited(
                ev.dst_nid,
                ev.ts_ns / 1_000_000,
                u64::from(ev.nr_pages.max(1)),
            ) {
                return no("rate_limit");
            }
        }
        yes("hot")
    }

    fn threshold(&self) -> Option<f64> {
        Some(self.threshold as f64)
    }
}
