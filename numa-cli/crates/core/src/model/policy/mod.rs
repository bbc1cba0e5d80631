//! Promotion policies run in shadow beside the kernel. Each sees the same
//! hint faults (with the kernel's decision and the scan stamps) and says
//! whether *it* would promote. Pure: time comes from the events.
mod bank;
mod build;
mod fault_count;
mod kernel_time;
mod limits;
mod two_touch;

use std::collections::BTreeMap;

use numa_ebpf_common::FaultEvent;

pub use self::{
    bank::{Answer, Answers, Kernel, PolicyBank},
    build::{
        build, build_all, check_threshold, threshold_message, KernelDefaults, ModelDefaults,
        DEFAULT_MODELS, THRESHOLD_RANGE,
    },
    fault_count::{fault_delta, patch_latency, Counter, FaultCount, Mode, StampKind},
    kernel_time::KernelTime,
    limits::{AdaptiveThreshold, Candidates, RateLimiter, NUMA_MIGRATION_ADJUST_STEPS},
    two_touch::TwoTouch,
};
use super::scans::RangeScan;

/// What a policy sees besides the fault itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultView {
    /// The latest range scan covering the page before the fault.
    pub latest_scan: Option<RangeScan>,
}

/// A model's parameters as `k=v` joined by `sep`, in their key order.
pub fn params_text(params: &BTreeMap<String, String>, sep: &str) -> String {
    let kv: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    kv.join(sep)
}

/// Where a decision ended in the kernel's sequence of checks (the
/// benchmark-style counters a model projects, see `shadow::Projected`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Promoted by the free-space shortcut (not a candidate).
    FreeSpace,
    /// Passed the threshold and the rate limit: a promoted candidate.
    Promoted,
    /// Rejected by the threshold (latency, fault count).
    Threshold,
    /// Passed the threshold, rejected by the rate limit (a candidate).
    RateLimit,
    /// Anything else: no stamp, no memory on the destination, or a model
    /// without the kernel's steps.
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub promote: bool,
    pub reason: &'static str,
    pub step: Step,
}

impl Decision {
    /// Whether the kernel would count this fault in PGPROMOTE_CANDIDATE.
    pub fn candidate(&self) -> bool {
        matches!(self.step, Step::Promoted | Step::RateLimit)
    }
}

const fn decision(promote: bool, reason: &'static str, step: Step) -> Decision {
    Decision {
        promote,
        reason,
        step,
    }
}

/// The kernel's own answers, shared by the kernel-like models.
const FREE_SPACE: Decision = decision(true, "free_space", Step::FreeSpace);
const HOT: Decision = decision(true, "hot", Step::Promoted);
const RATE_LIMIT: Decision = decision(false, "rate_limit", Step::RateLimit);
const NO_STAMP: Decision = decision(false, "no_stamp", Step::Other);
/// Rejected before the threshold path (the destination has no memory).
const OTHER: Decision = decision(false, "other", Step::Other);

/// How a fault the kernel decided in tiering mode left the free-space
/// shortcut: promoted by it, rejected before it (no memory on the
/// destination), or on to the threshold path, as the kernel's (and the
/// patched kernel's) should_numa_migrate_memory orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shortcut {
    FreeSpace,
    Before,
    ThresholdPath,
}

fn shortcut(ev: &FaultEvent) -> Shortcut {
    use numa_ebpf_common::Outcome;
    if ev.typed_outcome() == Outcome::PromoteFreeSpace {
        Shortcut::FreeSpace
    } else if ev.threshold_path() {
        Shortcut::ThresholdPath
    } else {
        Shortcut::Before
    }
}

pub trait Policy {
    fn name(&self) -> String;
    fn params(&self) -> BTreeMap<String, String>;
    /// Called for every hint fault the kernel decided in tiering mode on a
    /// slow-node folio (the decisions the policies compete on).
    fn decide(&mut self, ev: &FaultEvent, view: &FaultView) -> Decision;
    /// [`decide`](Self::decide) with the fault's page key packed by the
    /// caller (`pagetable::pack` of its tgid and address, 0 when it does
    /// not pack): the [`PolicyBank`] packs it once per fault for every
    /// model.
    fn decide_keyed(&mut self, ev: &FaultEvent, view: &FaultView, _key: u64) -> Decision {
        self.decide(ev, view)
    }
    /// Told of a fault some events before `decide` sees it, with its page
    /// key as [`decide_keyed`](Self::decide_keyed) gets it: a policy with
    /// per-page state may start loading it (a hint; no effect on results).
    fn prefetch(&self, _key: u64) {}
    /// Whether [`prefetch`](Self::prefetch) does anything: the engine
    /// calls it only for the policies that say so.
    fn prefetches(&self) -> bool {
        false
    }
    /// The threshold to mark on latency/delta charts, if the policy has one.
    fn threshold(&self) -> Option<f64> {
        None
    }
}

#[cfg(test)]
mod tests;
