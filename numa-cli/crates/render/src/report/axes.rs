//! The axis ranges of the report's charts. One trace's charts span what
//! that trace holds; on a page of several traces each row of charts
//! shares the widest ranges of its columns, so bars and lines of
//! different hosts or runs compare by eye.
use numa_core::model::{funnel::ProcessFunnel, log2::Log2Hist, shadow::ShadowReport};
use numa_ebpf_common::OUTCOMES;

use super::{
    funnel::{funnel_rows, FUNNEL_STAGES},
    Gathered,
};

/// The buckets shown and the height of a stacked log2 histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HistAxes {
    pub first: usize,
    pub last: usize,
    /// The tallest stack (at least 1).
    pub max: u64,
    /// No bucket holds anything: the range above is a placeholder that a
    /// merge with a non-empty histogram replaces.
    empty: bool,
}

impl HistAxes {
    fn of(hists: &[Log2Hist; OUTCOMES]) -> HistAxes {
        let mut all = Log2Hist::default();
        for h in hists {
            all.merge(h);
        }
        HistAxes::of_one(&all)
    }

    fn of_one(all: &Log2Hist) -> HistAxes {
        let first = all.buckets.iter().position(|c| *c > 0);
        let last = all.buckets.iter().rposition(|c| *c > 0);
        HistAxes {
            first: first.unwrap_or(0),
            last: last.unwrap_or(0),
            max: all.buckets.iter().copied().max().unwrap_or(0).max(1),
            empty: first.is_none(),
        }
    }

    fn merge(self, o: HistAxes) -> HistAxes {
        match (self.empty, o.empty) {
            (true, _) => HistAxes {
                max: self.max.max(o.max),
                ..o
            },
            (_, true) => o.merge(self),
            _ => HistAxes {
                first: self.first.min(o.first),
                last: self.last.max(o.last),
                max: self.max.max(o.max),
                empty: false,
            },
        }
    }
}

/// The ranges of every chart of the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Axes {
    pub latency: HistAxes,
    pub delta: HistAxes,
    /// Last second and highest threshold (ms) of the threshold timeline.
    pub timeline: (u64, u32),
    /// Highest agreement cell of any model.
    pub agreement_max: u64,
    /// Most promotions of any sweep threshold, or of the kernel.
    pub sweep_max: u64,
    /// The largest stage count of the funnel chart's processes.
    pub funnel_max: u64,
    /// Ping-pongs by time on the top tier.
    pub residency: HistAxes,
}

impl Axes {
    /// What one trace's charts need to show all of it.
    pub(super) fn of(g: &Gathered, hot_ms: u64) -> Axes {
        Axes {
            latency: HistAxes::of(&g.totals.latency_ns),
            delta: HistAxes::of(&g.totals.delta_mm),
            timeline: g.timeline.extent(hot_ms),
            agreement_max: agreement_max(&g.models),
            sweep_max: sweep_max(&g.sweep),
            funnel_max: funnel_max(&g.stats.funnel),
            residency: HistAxes::of_one(g.totals.lifecycle.residency()),
        }
    }

    /// Ranges that hold both `self` and `o`.
    pub(super) fn merge(self, o: Axes) -> Axes {
        Axes {
            latency: self.latency.merge(o.latency),
            delta: self.delta.merge(o.delta),
            timeline: (
                self.timeline.0.max(o.timeline.0),
                self.timeline.1.max(o.timeline.1),
            ),
            agreement_max: self.agreement_max.max(o.agreement_max),
            sweep_max: self.sweep_max.max(o.sweep_max),
            funnel_max: self.funnel_max.max(o.funnel_max),
            residency: self.residency.merge(o.residency),
        }
    }
}

fn agreement_max(r: &ShadowReport) -> u64 {
    r.models
        .iter()
        .flat_map(|m| {
            let a = &m.agreement;
            [a.both, a.kernel_only, a.model_only, a.neither]
        })
        .max()
        .unwrap_or(0)
        .max(1)
}

fn funnel_max(rows: &[ProcessFunnel]) -> u64 {
    funnel_rows(rows)
        .into_iter()
        .flat_map(|p| FUNNEL_STAGES.iter().map(|(_, v)| v(&p.stages)))
        .max()
        .unwrap_or(0)
        .max(1)
}

fn sweep_max(r: &ShadowReport) -> u64 {
    r.models
        .iter()
        .map(|m| m.promote)
        .max()
        .unwrap_or(0)
        .max(r.kernel.promote)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(first: usize, last: usize, max: u64) -> HistAxes {
        HistAxes {
            first,
            last,
            max,
            empty: false,
        }
    }

    #[test]
    fn merged_histogram_axes_span_both_and_an_empty_one_adds_nothing() {
        let empty = HistAxes::of(&Default::default());
        assert!(empty.empty);
        assert_eq!(hist(3, 9, 50).merge(hist(5, 12, 80)), hist(3, 12, 80));
        assert_eq!(empty.merge(hist(5, 12, 80)), hist(5, 12, 80));
        assert_eq!(hist(5, 12, 80).merge(empty), hist(5, 12, 80));
        assert!(empty.merge(empty).empty);
    }
}
