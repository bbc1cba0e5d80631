//! The `fault-count` model: the RFC's patches as written
//! (seeds/fault-count-hint-latency-rfc.txt), and an idealised variant.
//!
//! `Mode::Patch` is should_numa_migrate_memory of a kernel with patch 1/2
//! (and with `stamp=latest` patch 2/2): the free-space shortcut first; then
//! `latency = count - (stored << 16)` in the patch's int arithmetic, where
//! `count` is the faulting mm's counter (incremented at every PTE hint
//! fault, reset by init_numa_balancing) and `stored` what the folio's
//! cpupid field holds (`count >> 16` of the scanner's mm when it protected
//! the folio, or of an earlier fault's decision, which exchanges its own
//! count in); rejected when `latency >= threshold`; then the kernel's rate
//! limit on the node-wide candidate count. Patch 1/2 drops the adaptive
//! threshold. `Mode::Exact` is the idealised question the RFC asks: exact
//! 64-bit deltas of numatrace's own counters since the scan that protected
//! the folio, no shortcut, no fault-time exchange.
use std::collections::BTreeMap;

use numa_ebpf_common::FaultEvent;

use super::{
    decision,
    limits::{Candidates, RateLimiter},
    shortcut, Decision, FaultView, Policy, Shortcut, Step, FREE_SPACE, HOT, NO_STAMP, OTHER,
    RATE_LIMIT,
};

const FAULT_COUNT: Decision = decision(false, "fault_count", Step::Threshold);

/// PAGE_FAULT_COUNT_BUCKETS: the patch stores `count >> 16`.
pub(super) const PAGE_FAULT_COUNT_BUCKETS: u32 = 16;

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

/// What the model computes: the patched kernel, or the idealised deltas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Patch,
    Exact,
}

/// `fault-count` (the RFC): promote when fewer than `threshold` hint faults
/// happened between the stamp and this fault.
#[derive(Debug, Clone)]
pub struct FaultCount {
    pub threshold: u64,
    pub counter: Counter,
    pub stamp: StampKind,
    pub mode: Mode,
    pub rate: Option<RateLimiter>,
    /// LAST_CPUPID_MASK: the width of the folio field the count is kept in.
    pub cpupid_mask: u32,
    pub candidates: Candidates,
}

/// The patch's numa_hint_fault_latency: `count - (last << 16)` with
/// `last = folio_xchg_last_cpupid(folio, stored >> 16)` (masked to the
/// field), computed as the kernel's int arithmetic does (the shift and the
/// subtraction wrap at 32 bits, the sign shift of a negative count is
/// arithmetic) and read as the `unsigned int latency` it is assigned to.
/// A counter that wrapped since the stamp still gives the faults between;
/// one reset since the stamp gives a huge latency (the fault is refused).
pub fn patch_latency(count: u32, stored: u32, cpupid_mask: u32) -> u32 {
    let field = ((stored as i32) >> PAGE_FAULT_COUNT_BUCKETS) as u32 & cpupid_mask;
    count.wrapping_sub(field.wrapping_shl(PAGE_FAULT_COUNT_BUCKETS))
}

/// The count the patched folio field was last written with for this
/// fault: patch 1/2's (the protecting scan, or an earlier fault's
/// exchange), or with patch 2/2 also a later pass that found the PTE still
/// PROT_NONE and re-stamped it.
fn patch_stored(ev: &FaultEvent, view: &FaultView, stamp: StampKind) -> Option<u32> {
    let stored = ev
        .has_stored_fault_count()
        .then_some((ev.stored_fault_count, ev.stored_fault_count_ns));
    let pass = match stamp {
        StampKind::First => None,
        StampKind::Latest => view
            .latest_scan
            .and_then(|s| s.mm_fault_count.map(|c| (c, s.ts_ns))),
    };
    match (stored, pass) {
        (Some((_, at)), Some((c, ts))) if ts > at => Some(c),
        (Some((v, _)), _) => Some(v),
        (None, Some((c, _))) => Some(c),
        (None, None) => None,
    }
}

/// Faults between the stamp and this fault (this one included); counters
/// are compared with wrapping arithmetic. The `exact` mode's measure.
pub fn fault_delta(
    ev: &FaultEvent,
    view: &FaultView,
    counter: Counter,
    stamp: StampKind,
) -> Option<u64> {
    let (scan_g, scan_m) = match stamp {
        StampKind::First => {
            if !ev.has_stamp() {
                return None;
            }
            (ev.scan_seq_global, ev.scan_seq_mm)
        }
        StampKind::Latest => {
            // The latest pass over the range, or the folio's own stamp when
            // that is newer (a pass that found the PTE still accessible).
            // A pass whose counters are ahead of the fault's (read after
            // it, as recordings of older probes did at a pass's end) says
            // nothing about it.
            let s = view
                .latest_scan
                .filter(|s| s.seq_global <= ev.seq_global && s.seq_mm <= ev.seq_mm);
            match (s, ev.has_stamp()) {
                (Some(s), true) if s.ts_ns > ev.scan_ns => (s.seq_global, s.seq_mm),
                (_, true) => (ev.scan_seq_global, ev.scan_seq_mm),
                (Some(s), false) => (s.seq_global, s.seq_mm),
                (None, false) => return None,
            }
        }
    };
    match counter {
        Counter::Global => Some(ev.seq_global.wrapping_sub(scan_g)),
        Counter::Mm if ev.stamp_other_mm() && stamp == StampKind::First => None,
        Counter::Mm => Some(ev.seq_mm.wrapping_sub(scan_m)),
    }
}

impl FaultCount {
    fn decide_patch(&mut self, ev: &FaultEvent, view: &FaultView) -> Decision {
        self.candidates.observe(ev);
        match shortcut(ev) {
            Shortcut::FreeSpace => return FREE_SPACE,
            Shortcut::Before => return OTHER,
            Shortcut::ThresholdPath => {}
        }
        if !ev.has_mm_fault_count() {
            return NO_STAMP;
        }
        let Some(stored) = patch_stored(ev, view, self.stamp) else {
            return NO_STAMP;
        };
        let latency = patch_latency(ev.mm_fault_count, stored, self.cpupid_mask);
        if u64::from(latency) >= self.threshold {
            return FAULT_COUNT;
        }
        self.rate_step(ev)
    }

    fn decide_exact(&mut self, ev: &FaultEvent, view: &FaultView) -> Decision {
        let Some(delta) = fault_delta(ev, view, self.counter, self.stamp) else {
            return NO_STAMP;
        };
        if delta >= self.threshold {
            return FAULT_COUNT;
        }
        self.rate_step(ev)
    }

    /// A candidate: counted on its node, then the rate limit if on.
    fn rate_step(&mut self, ev: &FaultEvent) -> Decision {
        let nr_cand = self
            .candidates
            .add(ev.dst_nid, u64::from(ev.nr_pages.max(1)));
        if let Some(r) = &mut self.rate {
            if r.limited(ev.dst_nid, ev.ts_ns / 1_000_000, nr_cand) {
                return RATE_LIMIT;
            }
        }
        HOT
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
            (
                "mode".into(),
                match self.mode {
                    Mode::Patch => "patch",
                    Mode::Exact => "exact",
                }
                .into(),
            ),
        ]);
        if let Some(r) = &self.rate {
            p.insert("rate_limit_pages_per_s".into(), r.pages_per_s.to_string());
        }
        p
    }

    fn decide(&mut self, ev: &FaultEvent, view: &FaultView) -> Decision {
        match self.mode {
            Mode::Patch => self.decide_patch(ev, view),
            Mode::Exact => self.decide_exact(ev, view),
        }
    }

    fn threshold(&self) -> Option<f64> {
        Some(self.threshold as f64)
    }
}
