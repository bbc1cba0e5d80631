//! The promotion funnel per process (`numa_core::model::funnel`): the
//! table's verdict column and the detail view's verdict lines.
use numa_core::{decode::Event, model::lifecycle::Trips};

use crate::frame::VmaVerdict;

use super::Aggregator;

impl Aggregator {
    pub(super) fn funnel_event(&mut self, ev: &Event) {
        match ev {
            Event::Fault(f) => {
                let slow = numa_core::model::funnel::slow_tier(f.src_nid, self.toptier_mask);
                self.funnel.fault(f, slow);
            }
            Event::Scan(s) => self.funnel.scan(s),
            Event::Skip(s) => self.funnel.skip(s),
            // The funnel follows NUMA balancing's stages; DAMON is not one.
            Event::Demote(_) | Event::Damon(_) => {}
        }
    }

    /// Process `pid`'s promotions followed across tiers.
    fn trips(&self, pid: u32) -> Option<&Trips> {
        self.lifecycle.process(pid)
    }

    /// The verdict of `pid` in a few words, judged at `now`.
    pub(super) fn verdict_short(&self, pid: u32, now: u64) -> Option<String> {
        let p = self.funnel.process(pid, now)?;
        let v = p.judged.with_hotness(self.hotness);
        Some(v.with_pingpong(self.trips(pid)).short())
    }

    /// The verdict of `pid` in full, and each VMA's, judged at `now`.
    pub(super) fn verdict_lines(&self, pid: u32, now: u64) -> (Option<String>, Vec<VmaVerdict>) {
        let Some(mut p) = self.funnel.process(pid, now) else {
            return (None, Vec::new());
        };
        numa_core::model::funnel::with_hotness(std::slice::from_mut(&mut p), self.hotness);
        numa_core::model::funnel::with_pingpong(std::slice::from_mut(&mut p), |pid| {
            self.trips(pid)
        });
        // A VMA with no slow-tier page protected or faulted (a guard page
        // skipped as inaccessible) says nothing about why pages stop.
        let vmas = p
            .vmas
            .iter()
            .filter(|v| v.stages.ptes_protected > 0 || v.stages.slow_faults > 0)
            .map(|v| VmaVerdict {
                start: v.start,
                end: v.end,
                named: v.named,
                verdict: v.verdict.clone(),
            })
            .collect();
        (Some(p.verdict), vmas)
    }
}
