//! Reclaim's demotions, one record per folio tried and one per reclaim
//! batch: who demoted (kswapd, direct reclaim, khugepaged), between which
//! nodes, how many folios found no room on the lower tier, and the pages
//! each batch demoted as the kernel counts them.
use std::collections::{BTreeMap, HashMap};

use numa_ebpf_common::{demote_flags, reclaimer, DemoteEvent};
use serde::{Deserialize, Serialize};

/// Node pairs kept apart; demotions between further pairs are summed in
/// one row (a crafted trace could name a million pairs).
pub const MAX_NODE_PAIRS: usize = 64;
/// Threads whose open batch is kept for telling a retry from a new folio,
/// and folios kept per open batch (the kernel's batches are far smaller);
/// past either a retry counts as a folio.
pub const MAX_OPEN_BATCHES: usize = 256;
pub const MAX_BATCH_FOLIOS: usize = 4096;

#[derive(Debug, Default, Clone)]
pub struct Demotions {
    folios: u64,
    folio_pages: u64,
    retries: u64,
    size_unknown: u64,
    alloc_failed: u64,
    pairs: BTreeMap<(i32, i32), u64>,
    other_pairs: u64,
    /// The sources each thread tried since its last batch end: a second
    /// try of one is `migrate_pages()` retrying it, not another folio.
    open: HashMap<u64, Vec<u64>>,
    batches: u64,
    /// Pages by reclaimer: from batch ends, as the kernel counts them.
    batch_pages: [u64; reclaimer::NAMES.len()],
    /// Pages by reclaimer from folio records (kernels without the batch
    /// hook).
    folio_pages_by: [u64; reclaimer::NAMES.len()],
}

impl Demotions {
    /// Counts record `d`; whether it was a folio demoted (not a batch's
    /// end, a try without room below or a retry of one already counted).
    pub fn record(&mut self, d: &DemoteEvent) -> bool {
        if d.flags & demote_flags::BATCH_END != 0 {
            self.batches += 1;
            self.open.remove(&d.pid_tgid);
            if let Some(n) = self.batch_pages.get_mut(d.reclaimer as usize) {
                *n += u64::from(d.nr_pages);
            }
            return false;
        }
        if d.dst_nid < 0 {
            self.alloc_failed += 1;
            return false;
        }
        if self.retried(d) {
            self.retries += 1;
            return false;
        }
        self.folios += 1;
        self.folio_pages += u64::from(d.nr_pages);
        if d.nr_pages == 0 {
            self.size_unknown += 1;
        }
        if let Some(n) = self.folio_pages_by.get_mut(d.reclaimer as usize) {
            *n += u64::from(d.nr_pages);
        }
        super::add_bounded(
            &mut self.pairs,
            (d.src_nid, d.dst_nid),
            1,
            MAX_NODE_PAIRS,
            &mut self.other_pairs,
        );
        true
    }

    /// Whether `d`'s source was already tried in its thread's open batch
    /// (noting it if not).
    fn retried(&mut self, d: &DemoteEvent) -> bool {
        let room = self.open.len() < MAX_OPEN_BATCHES;
        let Some(tried) = (match self.open.get_mut(&d.pid_tgid) {
            Some(t) => Some(t),
            None if room => Some(self.open.entry(d.pid_tgid).or_default()),
            None => None,
        }) else {
            return false;
        };
        if tried.contains(&d.src_pfn) {
            return true;
        }
        if tried.len() < MAX_BATCH_FOLIOS {
            tried.push(d.src_pfn);
        }
        false
    }

    /// Pages moved down a tier: the batches' counts where the kernel
    /// reported any, else the folio records'.
    fn pages_by_reclaimer(&self) -> &[u64; reclaimer::NAMES.len()] {
        if self.batches > 0 {
            &self.batch_pages
        } else {
            &self.folio_pages_by
        }
    }

    pub fn report(&self) -> DemotionReport {
        let by = self.pages_by_reclaimer();
        DemotionReport {
            pages: by.iter().sum(),
            batches: self.batches,
            by_reclaimer: by_reclaimer_name(by),
            folios: self.folios,
            folio_pages: self.folio_pages,
            retries: self.retries,
            size_unknown: self.size_unknown,
            alloc_failed: self.alloc_failed,
            by_nodes: node_pair_rows(&self.pairs, self.other_pairs),
        }
    }
}

/// Rows of a count per (source, destination) node, and the pairs past
/// the table's bound summed in a row without nodes.
pub fn node_pair_rows(pairs: &BTreeMap<(i32, i32), u64>, other: u64) -> Vec<NodePairRow> {
    let mut rows: Vec<NodePairRow> = pairs
        .iter()
        .map(|(&(src, dst), &folios)| NodePairRow {
            src: Some(src),
            dst: Some(dst),
            folios,
        })
        .collect();
    if other != 0 {
        rows.push(NodePairRow {
            src: None,
            dst: None,
            folios: other,
        });
    }
    rows
}

/// Counts indexed by [`reclaimer`] value, by the reclaimer's name.
pub fn by_reclaimer_name(counts: &[u64; reclaimer::NAMES.len()]) -> BTreeMap<String, u64> {
    reclaimer::NAMES
        .iter()
        .zip(counts)
        .map(|(name, n)| ((*name).to_owned(), *n))
        .collect()
}

/// Demotions in a report.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemotionReport {
    /// Pages moved down a tier, as the kernel's `pgdemote_*` count them:
    /// the sum of each reclaim batch's result (`batches` of them), or of
    /// the folio records on a kernel without the batch hook (`batches` 0).
    pub pages: u64,
    pub batches: u64,
    /// Of those, by who reclaimed: `kswapd`, `direct`, `khugepaged` (the
    /// kernel's `pgdemote_kswapd`, `pgdemote_direct`,
    /// `pgdemote_khugepaged`; before 6.8 khugepaged's count as direct).
    pub by_reclaimer: BTreeMap<String, u64>,
    /// Folios demoted, one record each where reclaim allocated its place
    /// on the lower tier, and their pages. A folio whose move then failed
    /// (locked, under writeback) is in them, one freed while it waited is
    /// not: `folio_pages` can differ from `pages` by those.
    pub folios: u64,
    pub folio_pages: u64,
    /// Further tries of a folio in the same batch (`migrate_pages()`
    /// retrying it), not counted as folios.
    pub retries: u64,
    /// Large folios whose size could not be read (not in `folio_pages`).
    pub size_unknown: u64,
    /// Folios reclaim chose to demote that found no room on the lower tier.
    pub alloc_failed: u64,
    /// Folios by (source, destination) node; `null` nodes: the pairs past
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
    use numa_ebpf_common::{demote_flags, EventKind};

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
        let events = [
            demotion(reclaimer::KSWAPD, 0, 2),
            demotion(reclaimer::KSWAPD, 0, 2),
            DemoteEvent {
                nr_pages: 512,
                ..demotion(reclaimer::DIRECT, 1, 2)
            },
            demotion(reclaimer::DIRECT, 0, -1),
            DemoteEvent {
                nr_pages: 0,
                ..demotion(reclaimer::KHUGEPAGED, 1, 2)
            },
        ];
        for (pfn, ev) in events.iter().enumerate() {
            d.record(&DemoteEvent {
                src_pfn: pfn as u64,
                ..*ev
            });
        }
        let r = d.report();
        assert_eq!((r.folios, r.folio_pages, r.size_unknown), (4, 514, 1));
        // Without batch records the pages are the folios'.
        assert_eq!((r.pages, r.batches), (514, 0));
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
    fn batch_ends_give_the_kernel_s_pages_and_a_retry_is_not_a_folio() {
        let mut d = Demotions::default();
        let tried = |pfn| DemoteEvent {
            src_pfn: pfn,
            pid_tgid: 7,
            ..demotion(reclaimer::KSWAPD, 0, 1)
        };
        d.record(&tried(100));
        d.record(&tried(101));
        // migrate_pages() retried 100 (-EAGAIN), then 101 failed for good.
        d.record(&tried(100));
        d.record(&DemoteEvent {
            flags: demote_flags::BATCH_END,
            pid_tgid: 7,
            nr_pages: 1,
            ..demotion(reclaimer::KSWAPD, -1, -1)
        });
        // The next batch may try 100 again: a folio of its own.
        d.record(&tried(100));
        let r = d.report();
        assert_eq!((r.folios, r.retries, r.batches), (3, 1, 1));
        assert_eq!((r.pages, r.by_reclaimer["kswapd"]), (1, 1));
    }

    #[test]
    fn node_pairs_past_the_bound_are_summed_in_one_row() {
        let mut d = Demotions::default();
        for src in 0..(MAX_NODE_PAIRS as i32 + 10) {
            d.record(&DemoteEvent {
                src_pfn: src as u64,
                ..demotion(reclaimer::KSWAPD, src, 1000)
            });
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
