//! The window of a report: counts since the first counter snapshot, up to
//! the latest. The kernel-side counters and histograms are cumulative since
//! attach, so every figure a report states about them is a difference of
//! two snapshots, taken here in one way for every consumer.
use std::collections::BTreeMap;

use numa_ebpf_common::{hist_slot, Counter, HIST_BUCKETS, MIGRATE_REASONS};

use crate::{decode::Snapshot, topology};

/// How much a cumulative series grew from `before` to `after`, slot by
/// slot (missing slots count as 0; a counter that went back counts 0).
fn grew(after: &[u64], before: &[u64], slot: usize) -> u64 {
    let at = |v: &[u64]| v.get(slot).copied().unwrap_or(0);
    at(after).saturating_sub(at(before))
}

impl Snapshot {
    /// Counter slot `slot` (a [`Counter`] or an outcome slot) since `before`.
    pub fn counter_since(&self, before: &Snapshot, slot: usize) -> u64 {
        grew(&self.counters, &before.counters, slot)
    }

    /// One outcome's row of a histogram (`which`: `hist_latency` or
    /// `hist_delta`) since `before`.
    pub fn hist_row_since(
        &self,
        before: &Snapshot,
        which: fn(&Snapshot) -> &Vec<u64>,
        outcome: usize,
    ) -> Vec<u64> {
        (0..HIST_BUCKETS)
            .map(|b| grew(which(self), which(before), hist_slot(outcome, b)))
            .collect()
    }

    /// `HIST_SUM` slot `slot` (`outcome * 2`: latency ns, `+ 1`: delta)
    /// since `before`.
    pub fn hist_sum_since(&self, before: &Snapshot, slot: usize) -> u64 {
        grew(&self.hist_sum, &before.hist_sum, slot)
    }

    /// Pages mm_migrate_pages moved, every reason, since `before`.
    pub fn migrated_pages_since(&self, before: &Snapshot) -> u64 {
        (0..MIGRATE_REASONS as usize)
            .map(|r| {
                grew(
                    &self.migrate_reason_pages,
                    &before.migrate_reason_pages,
                    r * 2,
                )
            })
            .sum()
    }

    /// The named vmstat counters summed, since `before`.
    pub fn vmstat_since(&self, before: &Snapshot, keys: &[&str]) -> u64 {
        keys.iter()
            .map(|k| {
                let at = |s: &Snapshot| s.vmstat.get(*k).copied().unwrap_or(0);
                at(self).saturating_sub(at(before))
            })
            .sum()
    }
}

/// The first and the latest snapshot seen.
#[derive(Debug, Clone, Default)]
pub struct Window {
    first: Option<Snapshot>,
    last: Option<Snapshot>,
}

impl Window {
    pub fn push(&mut self, s: &Snapshot) {
        if self.first.is_none() {
            self.first = Some(s.clone());
        }
        self.last = Some(s.clone());
    }

    pub fn first(&self) -> Option<&Snapshot> {
        self.first.as_ref()
    }

    pub fn last(&self) -> Option<&Snapshot> {
        self.last.as_ref()
    }

    fn pair(&self) -> Option<(&Snapshot, &Snapshot)> {
        Some((self.first.as_ref()?, self.last.as_ref()?))
    }

    /// Snapshot time from the first to the latest snapshot, ns.
    pub fn span_ns(&self) -> u64 {
        self.pair()
            .map_or(0, |(a, b)| b.ts_ns.saturating_sub(a.ts_ns))
    }

    /// Counter slot `slot` over the window.
    pub fn counter(&self, slot: usize) -> u64 {
        self.pair().map_or(0, |(a, b)| b.counter_since(a, slot))
    }

    /// [`Counter`] `c` over the window.
    pub fn count(&self, c: Counter) -> u64 {
        self.counter(c as usize)
    }

    /// Stamps the STAMPS map must have evicted: inserts beyond its
    /// capacity (an LRU map evicts only when full).
    pub fn evictions(&self, stamp_capacity: u64) -> u64 {
        self.count(Counter::StampInserts)
            .saturating_sub(stamp_capacity)
    }

    /// One outcome's histogram row over the window (zeros without a
    /// snapshot).
    pub fn hist_row(&self, which: fn(&Snapshot) -> &Vec<u64>, outcome: usize) -> Vec<u64> {
        match self.pair() {
            Some((a, b)) => b.hist_row_since(a, which, outcome),
            None => vec![0; HIST_BUCKETS],
        }
    }

    /// `HIST_SUM` slot `slot` over the window.
    pub fn hist_sum(&self, slot: usize) -> u64 {
        self.pair().map_or(0, |(a, b)| b.hist_sum_since(a, slot))
    }

    /// Pages mm_migrate_pages moved over the window.
    pub fn migrated_pages(&self) -> u64 {
        self.pair().map_or(0, |(a, b)| b.migrated_pages_since(a))
    }

    /// The named vmstat counters summed over the window.
    pub fn vmstat(&self, keys: &[&str]) -> u64 {
        self.pair().map_or(0, |(a, b)| b.vmstat_since(a, keys))
    }

    /// Every NUMA vmstat counter over the window.
    pub fn vmstat_all(&self) -> BTreeMap<String, u64> {
        self.pair().map_or_else(BTreeMap::new, |(a, b)| {
            topology::vmstat_delta(&a.vmstat, &b.vmstat)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(ts_ns: u64, inserts: u64, latency_slot: usize, promote: u64) -> Snapshot {
        let mut counters = vec![0; Counter::StampInserts as usize + 1];
        counters[Counter::StampInserts as usize] = inserts;
        let mut hist_latency = vec![0; numa_ebpf_common::HIST_SLOTS];
        hist_latency[latency_slot] = 5;
        Snapshot {
            ts_ns,
            counters,
            hist_latency,
            vmstat: BTreeMap::from([("pgpromote_success".to_owned(), promote)]),
            ..Snapshot::default()
        }
    }

    #[test]
    fn deltas_are_over_first_to_latest() {
        let mut w = Window::default();
        assert_eq!((w.span_ns(), w.count(Counter::StampInserts)), (0, 0));
        w.push(&snap(10, 100, hist_slot(2, 3), 7));
        w.push(&snap(20, 150, hist_slot(2, 3), 8));
        w.push(&snap(30, 400, hist_slot(2, 4), 9));
        assert_eq!(w.span_ns(), 20);
        assert_eq!(w.count(Counter::StampInserts), 300);
        assert_eq!(w.evictions(250), 50);
        assert_eq!(w.evictions(1000), 0);
        assert_eq!(w.vmstat(&["pgpromote_success"]), 2);
        let row = w.hist_row(|s| &s.hist_latency, 2);
        assert_eq!((row.len(), row[3], row[4]), (HIST_BUCKETS, 0, 5));
        let none = Window::default().hist_row(|s| &s.hist_latency, 2);
        assert_eq!(none, vec![0; HIST_BUCKETS]);
    }

    #[test]
    fn migrated_pages_are_the_succeeded_slots_of_every_reason() {
        let reasons = |pages: &[(usize, u64)]| {
            let mut v = vec![0; MIGRATE_REASONS as usize * 2];
            for &(slot, n) in pages {
                v[slot] = n;
            }
            Snapshot {
                migrate_reason_pages: v,
                ..Snapshot::default()
            }
        };
        let mut w = Window::default();
        w.push(&reasons(&[(0, 1), (1, 50), (2 * 5, 10)]));
        w.push(&reasons(&[
            (0, 4),
            (1, 90),
            (2 * 5, 30),
            (2 * 15, 7),
            (2 * 15 + 1, 9),
        ]));
        assert_eq!(w.migrated_pages(), 3 + 20 + 7);
        assert_eq!(Window::default().migrated_pages(), 0);
    }

    #[test]
    fn a_counter_that_went_back_counts_zero() {
        let (a, b) = (snap(1, 10, 0, 5), snap(2, 3, 0, 1));
        assert_eq!(b.counter_since(&a, Counter::StampInserts as usize), 0);
        assert_eq!(b.vmstat_since(&a, &["pgpromote_success", "absent"]), 0);
    }
}
