//! The top tier's side of the lifecycle: each promotion still on the top
//! tier, at the PFN its migration allocated (`FaultEvent::dst_pfn`), in an
//! array over the top tier's spans whose memory `--map-budget` bounds as it
//! bounds the kernel's stamp array. When the whole top tier does not fit,
//! one PFN in each aligned block of `rate` is followed, chosen by the stamp
//! array's hash ([`crate::mapplan::followed`]), and each promotion followed
//! counts for `rate`. Slots are allocated a chunk at a time when first
//! written: the memory held is what promotions reached, never more than the
//! budget.
//!
//! A slot keeps the folio's identity beside its trip, which is how a PFN
//! freed and reused by another folio is told from the folio promoted there:
//! a demotion from that PFN of another identity is not its ping-pong.
use serde::{Deserialize, Serialize};

use super::Trip;
use crate::mapplan::{top_spans, MapPlan, PfnSpan};

/// Slots allocated together.
const CHUNK: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Slot {
    key: (u64, u64),
    trip: Trip,
}

/// Bytes of one slot, as the budget counts them.
const SLOT_BYTES: u64 = std::mem::size_of::<Option<Slot>>() as u64;

#[derive(Debug, Clone)]
pub(super) struct DramTable {
    plan: MapPlan,
    chunks: Vec<Option<Box<[Option<Slot>]>>>,
    /// Chunks allocated.
    allocated: u64,
    /// Promotions stored over a slot still holding an earlier one (that
    /// folio left the PFN without a demotion: freed, or moved on the tier).
    overwritten: u64,
}

/// What a demotion found at the PFN it left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Found {
    /// The PFN is not in the table (not on the top tier, or not followed).
    Unfollowed,
    /// Followed, and no promotion is there.
    Empty,
    /// The trip of the folio promoted there, which this demotion ends.
    Promoted(Trip),
    /// A promotion of another folio is there: the PFN was reused.
    Other,
}

impl DramTable {
    /// The table over the top tier of `all` within `budget` bytes; None
    /// when there is no top tier or not even its sparsest plan fits.
    pub(super) fn new(all: &[PfnSpan], toptier_mask: u64, budget: u64) -> Option<DramTable> {
        let spans = top_spans(all, toptier_mask);
        if spans.is_empty() {
            return None;
        }
        let plan = MapPlan::choose(budget, 0, SLOT_BYTES, spans).ok()?;
        let chunks = usize::try_from(plan.slots.div_ceil(CHUNK as u64)).ok()?;
        Some(DramTable {
            plan,
            chunks: vec![None; chunks],
            allocated: 0,
            overwritten: 0,
        })
    }

    /// One top-tier PFN in this many is followed.
    pub(super) fn rate(&self) -> u64 {
        self.plan.rate()
    }

    /// The slot index of `pfn`, when it is a followed top-tier PFN.
    fn index(&self, pfn: u64) -> Option<usize> {
        usize::try_from(self.plan.slot_of(pfn)?).ok()
    }

    /// Slot `i`, its chunk allocated first when `allocate`.
    fn slot(&mut self, i: usize, allocate: bool) -> Option<&mut Option<Slot>> {
        let chunk = self.chunks.get_mut(i / CHUNK)?;
        if chunk.is_none() && allocate {
            *chunk = Some(vec![None; CHUNK].into_boxed_slice());
            self.allocated += 1;
        }
        chunk.as_mut()?.get_mut(i % CHUNK)
    }

    /// Keeps `trip` of folio `key` at `pfn`; false when `pfn` is not
    /// followed.
    pub(super) fn promoted(&mut self, pfn: u64, key: (u64, u64), trip: Trip) -> bool {
        let Some(slot) = self.index(pfn).and_then(|i| self.slot(i, true)) else {
            return false;
        };
        let overwritten = slot.replace(Slot { key, trip }).is_some();
        self.overwritten += u64::from(overwritten);
        true
    }

    /// A demotion of folio `key` from `pfn`: what was there, now cleared.
    pub(super) fn demoted(&mut self, pfn: u64, key: (u64, u64)) -> Found {
        let Some(i) = self.index(pfn) else {
            return Found::Unfollowed;
        };
        match self.slot(i, false).and_then(Option::take) {
            None => Found::Empty,
            Some(s) if s.key == key => Found::Promoted(s.trip),
            Some(_) => Found::Other,
        }
    }

    pub(super) fn report(&self) -> DramReport {
        DramReport {
            rate: self.rate(),
            top_pfns: self.plan.slow_pfns(),
            followed_pfns: self.plan.followed_pfns(),
            budget_bytes: self.plan.budget_bytes,
            bytes: self.allocated * CHUNK as u64 * SLOT_BYTES,
            overwritten: self.overwritten,
        }
    }
}

/// The top tier's table in a report.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DramReport {
    /// One top-tier PFN in this many is followed: each promotion to a
    /// followed PFN counts for this many.
    pub rate: u64,
    pub top_pfns: u64,
    pub followed_pfns: u64,
    /// `--map-budget`, which bounds the table, and what it holds now.
    pub budget_bytes: u64,
    pub bytes: u64,
    /// Promotions stored where an earlier one still was: that folio left
    /// the PFN without a demotion (freed, or moved on the tier).
    pub overwritten: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trip(tgid: u32) -> Trip {
        Trip {
            moved_ns: 1,
            promoted: true,
            was_promoted: false,
            faulted: false,
            tgid,
            cgroup_id: 0,
            nodes: (1, 0),
            tag: 0,
            pfn: 0,
        }
    }

    fn spans(top_pfns: u64) -> Vec<PfnSpan> {
        vec![
            PfnSpan {
                node: 0,
                start: 0,
                end: top_pfns,
            },
            PfnSpan {
                node: 1,
                start: top_pfns,
                end: 2 * top_pfns,
            },
        ]
    }

    #[test]
    fn a_demotion_finds_the_promotion_at_its_pfn_or_tells_a_reused_pfn() {
        let mut t = DramTable::new(&spans(1 << 16), 1, 64 << 20).expect("a table");
        assert_eq!(t.rate(), 1);
        assert!(t.promoted(77, (0xa1, 7), trip(42)));
        assert!(t.promoted(78, (0xa1, 8), trip(42)));
        assert!(matches!(t.demoted(77, (0xa1, 7)), Found::Promoted(x) if x.tgid == 42));
        assert_eq!(t.demoted(77, (0xa1, 7)), Found::Empty, "cleared");
        assert_eq!(t.demoted(78, (0xb1, 8)), Found::Other, "another folio");
        assert_eq!(t.demoted(78, (0xa1, 8)), Found::Empty, "cleared by it");
        // The slow node's PFNs are not the table's.
        assert!(!t.promoted(1 << 16, (0xa1, 9), trip(42)));
        assert_eq!(t.demoted(1 << 16, (0xa1, 9)), Found::Unfollowed);
        let r = t.report();
        assert_eq!((r.top_pfns, r.followed_pfns), (1 << 16, 1 << 16));
        assert_eq!(r.bytes, CHUNK as u64 * SLOT_BYTES, "one chunk written");
        assert_eq!(SLOT_BYTES, 64, "the size the docs state");
    }

    #[test]
    fn a_top_tier_past_the_budget_is_followed_one_pfn_in_rate() {
        // 2^24 PFNs (64 GiB) in 64 MiB: one PFN in 32 or so.
        let budget = 64 << 20;
        let mut t = DramTable::new(&spans(1 << 24), 1, budget).expect("a table");
        let rate = t.rate();
        assert!(
            rate > 1 && (1 << 24) / rate * SLOT_BYTES <= budget,
            "{rate}"
        );
        let followed = (0..1u64 << 16)
            .filter(|&pfn| t.promoted(pfn, (0xa1, pfn), trip(1)))
            .count() as u64;
        let want = (1 << 16) / rate;
        assert!(followed.abs_diff(want) <= want / 10, "{followed} of {want}");
        assert!(t.report().bytes <= budget);
        let pfn = (0..rate).find(|&p| t.demoted(p, (0, 0)) != Found::Unfollowed);
        let pfn = pfn.expect("one PFN of the first block is followed");
        assert!(t.promoted(pfn, (0xa1, 1), trip(1)));
        assert!(t.promoted(pfn, (0xa1, 2), trip(1)));
        assert_eq!(t.report().overwritten, 1);
    }

    #[test]
    fn no_top_tier_no_table() {
        let slow_only = vec![PfnSpan {
            node: 1,
            start: 0,
            end: 1 << 16,
        }];
        assert!(DramTable::new(&slow_only, 1, 64 << 20).is_none());
    }
}
