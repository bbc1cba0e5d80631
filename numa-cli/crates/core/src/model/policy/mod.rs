//! Promotion policies run in shadow beside the kernel. Each sees the same
//! hint faults (with the kernel's decision and the scan stamps) and says
//! whether *it* would promote. Pure: time comes from the events.
mod build;
mod fault_count;
mod kernel_time;
mod limits;
mod two_touch;

use std::collections::BTreeMap;

use numa_ebpf_common::FaultEvent;

pub use self::{
    build::{build, build_all, KernelDefaults, ModelDefaults, DEFAULT_MODELS},
    fault_count::{fault_delta, Counter, FaultCount, StampKind},
    kernel_time::KernelTime,
    limits::{AdaptiveThreshold, RateLimiter, NUMA_MIGRATION_ADJUST_STEPS},
    two_touch::TwoTouch,
};
use super::scans::RangeScan;

/// What a policy sees besides the fault itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultView {
    /// The latest range scan covering the page before the fault.
    pub latest_scan: Option<RangeScan>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub promote: bool,
    pub reason: &'static str,
}

const fn yes(reason: &'static str) -> Verdict {
    Verdict {
        promote: true,
        reason,
    }
}
const fn no(reason: &'static str) -> Verdict {
    Verdict {
        promote: false,
        reason,
    }
}

pub trait Policy {
    fn name(&self) -> String;
    fn params(&self) -> BTreeMap<String, String>;
    /// Called for every hint fault the kernel decided in tiering mode on a
    /// slow-node folio (the decisions the policies compete on).
    fn decide(&mut self, ev: &FaultEvent, view: &FaultView) -> Verdict;
    /// Told of a fault some events before `decide` sees it: a policy with
    /// per-page state may start loading it (a hint; no effect on results).
    fn prefetch(&self, _ev: &FaultEvent) {}
    /// The threshold to mark on latency/delta charts, if the policy has one.
    fn threshold(&self) -> Option<f64> {
        None
    }
}

#[cfg(test)]
mod tests;
