//! Reclaim's demotions, one record per folio: who demoted (kswapd, direct
//! reclaim, khugepaged), between which nodes, and how many folios found
//! no room on the lower tier.
use std::collections::BTreeMap;

use numa_ebpf_common::{reclaimer, DemoteEvent};
use serde::{Deserialize, Serialize};

/// Node pairs kept apart; demotions between further pairs are summed in
/// one row (a crafted trace could name a million pairs).
pub const MAX_NODE_PAIRS: usize = 64;

#[derive(Debug, Default, Clone)]
pub struct Demotions {
    folios: u64,
    /// Pages, by reclaimer.
    by_reclaimer: [u64; reclaimer::NAMES.len()],
    size_unknown: u64,
    alloc_failed: u64,
    pairs: BTreeMap<(i32, i32), u64>,
    other_pairs: u64,
}

impl Demotions {
    pub fn record(&mut self, d: &DemoteEvent) {
        if d.dst_nid < 0 {
            self.alloc_failed += 1;
            return;
        }
        self.folios += 1;
        if d.nr_pages == 0 {
            self.size_unknown += 1;
        }
        if let Some(n) = self.by_reclaimer.get_mut(d.reclaimer as usize) {
            *n += u64::from(d.nr_pages);
        }
        let key = (d.src_nid, d.dst_nid);
        let room = self.pairs.len() < MAX_NODE_PAIRS;
        match self.pairs.get_mut(&key) {
            Some(n) => *n += 1,
            None if room => {
                self.pairs.insert(key, 1);
            }
            None => self.other_pairs += 1,
        }
    }

    /// Pages moved down a tier (a lower-tier folio was allocated).
    pub fn pages(&self) -> u64 {
        self.by_reclaimer.iter().sum()
    }

    pub fn report(&self) -> DemotionReport {
        let mut by_nodes: Vec<NodePairRow> = self
            .pairs
            .iter()
            .map(|(&(src, dst), &folios)| NodePairRow {
                src: Some(src),
                dst: Some(dst),
                folios,
            })
            .collect();
        if self.other_pairs != 0 {
            by_nodes.push(NodePairRow {
                src: None,
                dst: None,
                folios: self.other_pairs,
            });
        }
        DemotionReport {
            folios: self.folios,
            pages: self.pages(),
            size_unknown: self.size_unknown,
            by_reclaimer: reclaimer::NAMES
                .iter()
                .zip(self.by_reclaimer)
                .map(|(name, n)| ((*name).to_owned(), n))
                .collect(),
            alloc_failed: self.alloc_failed,
            by_nodes,
        }
    }
}

/// Demotions in a report. Counted where reclaim allocates each folio's
/// destination: a folio whose move then fails (rare: it was locked or
/// under writeback) is counted too, one freed while it waited is not, so
/// the kernel's `pgdemote_*` can differ by those.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemotionReport {
    /// Folios moved down a tier.
    pub folios: u64,
    /// Their pages (as the kernel's `pgdemote_*` count).
    pub pages: u64,
    /// Large folios whose size could not be read (not in `pages`).
    pub size_unknown: u64,
    /// Pages, by who reclaimed: `kswapd`, `direct`, `khugepaged` (the
    /// kernel's `pgdemote_kswapd`, `pgdemote_direct`,
    /// `pgdemote_khugepaged`; before 6.8 khugepaged's count as direct).
    pub by_reclaimer: BTreeMap<String, u64>,
    /// Folios reclaim chose to demote that found no room on the lower tier.
    pub alloc_failed: u64,
    /// By (source, destination) node; `null` nodes: the pairs past
    /// [`MAX_NODE_PAIRS`], summed.
    pub by_nodes: Vec<NodePairRow>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePairRow {
    pub src: Option<i32>,
    pub dst: Option<i32>,
    pub folios: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use numa_ebpf_common::EventKind;

    fn demotion(reclaimer: u32, src_nid: i32, dst_nid: i32) -> DemoteEvent {
        DemoteEvent {
            kind: EventKind::Demote as u32,
            reclaimer,
            src_nid,
            dst_nid,
            nr_pages: 1,
            ..DemoteEvent::default()
        }
    }

    #[test]
    fn demotions_are_counted_by_reclaimer_and_node_pair_and_failures_apart() {
        let mut d = Demotions::default();
        d.record(&demotion(reclaimer::KSWAPD, 0, 2));
        d.record(&demotion(reclaimer::KSWAPD, 0, 2));
        d.record(&DemoteEvent {
            nr_pages: 512,
            ..demotion(reclaimer::DIRECT, 1, 2)
        });
        d.record(&demotion(reclaimer::DIRECT, 0, -1));
        d.record(&DemoteEvent {
            nr_pages: 0,
            ..demotion(reclaimer::KHUGEPAGED, 1, 2)
        });
        let r = d.report();
        assert_eq!((r.folios, r.pages, r.size_unknown), (4, 514, 1));
        assert_eq!(r.alloc_failed, 1);
        assert_eq!(r.by_reclaimer["kswapd"], 2);
        assert_eq!(r.by_reclaimer["direct"], 512);
        assert_eq!(r.by_reclaimer["khugepaged"], 0);
        assert_eq!(
            r.by_nodes,
            vec![
                NodePairRow {
                    src: Some(0),
                    dst: Some(2),
                    folios: 2
                },
                NodePairRow {
                    src: Some(1),
                    dst: Some(2),
                    folios: 2
                },
            ]
        );
    }

    #[test]
    fn node_pairs_past_the_bound_are_summed_in_one_row() {
        let mut d = Demotions::default();
        for src in 0..(MAX_NODE_PAIRS as i32 + 10) {
            d.record(&demotion(reclaimer::KSWAPD, src, 1000));
        }
        let r = d.report();
        assert_eq!(r.by_nodes.len(), MAX_NODE_PAIRS + 1);
        assert_eq!(
            r.by_nodes.last().map(|row| (row.src, row.folios)),
            Some((None, 10))
        );
        assert_eq!(r.folios, MAX_NODE_PAIRS as u64 + 10);
    }
}
