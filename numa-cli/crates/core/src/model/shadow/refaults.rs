//! Follows the pages the kernel refused: whether they fault again, and when,
//! for each model's set at once.
use rustc_hash::FxHashMap;

use super::RefaultReport;
use crate::model::{
    log2::Log2Hist,
    pagetable::{self, PageTable, Vacant},
};

/// At most this many refused pages are followed per set (memory bound).
const MAX_TRACKED: usize = 1 << 22;

/// Follows refused pages: did they fault again (still hot), and when?
/// One entry per refused page for all models at once, with the sets it
/// counts in: bit `i` = model `i` wanted it, bit `models` = no model did.
#[derive(Debug, Default)]
pub(super) struct Refaults {
    /// Pending refusals: `[packed (tgid, addr), packed (ts_ns, sets)]`,
    /// 16 bytes each: the table is what every event touches.
    table: PageTable<2>,
    /// Pending refusals whose key or value does not pack (never a
    /// kernel's key; a time beyond the packed range): exact, slower.
    wide: FxHashMap<(u32, u64), Pending>,
    sets: Vec<RefaultSet>,
    /// Origin of the packed times (set at the first refusal).
    base_ns: Option<u64>,
    /// Low bits of a packed value: `ts_ns - base_ns`; high bits: sets.
    ts_bits: u32,
    /// How much older than the first refusal's a packed time may be.
    slack_ns: u64,
    /// At most this many pending ([`MAX_TRACKED`]; smaller in tests).
    max_tracked: usize,
}

/// A packed time may be this much older than the first refusal's (less
/// with many models: a sixteenth of the packed range).
const BASE_SLACK_NS: u64 = 1 << 32;

#[derive(Debug, Clone, Copy)]
struct Pending {
    ts_ns: u64,
    sets: u64,
}

/// A page key, packed once per event.
#[derive(Debug, Clone, Copy)]
pub(super) struct Page {
    tgid: u32,
    addr: u64,
    packed: Option<u64>,
}

impl Page {
    /// The page with its key already packed (0: it does not pack).
    #[inline]
    pub(super) fn packed_as(tgid: u32, addr: u64, key: u64) -> Self {
        let packed = (key != 0).then_some(key);
        debug_assert_eq!(packed, pagetable::pack(tgid, addr));
        Page { tgid, addr, packed }
    }
}

/// The table slot of a pending refusal that a fault has just answered:
/// logically removed, physically kept until [`Refaults::refused`] reuses
/// it or [`Refaults::release`] frees it; or, with none, where a refusal
/// would be inserted (one probe per event, not three).
#[must_use]
#[derive(Debug, Clone, Copy)]
pub(super) struct Held(Result<usize, Vacant>);

/// Models at once: their sets and the "no model wanted" set fit a u64.
pub(super) const MAX_MODELS: usize = 63;

/// One set's refusals: folios, and their pages beside.
#[derive(Debug, Default, Clone)]
struct RefaultSet {
    tracked: u64,
    tracked_pages: u64,
    untracked: u64,
    untracked_pages: u64,
    refaulted: u64,
    /// The pages of the refaulting folios: a pending refusal keeps no
    /// size (16 bytes a page), and the folio as it faults again is what
    /// is still hot.
    refaulted_pages: u64,
    delay_ms: Log2Hist,
}

impl Refaults {
    pub(super) fn new(models: usize) -> Self {
        Refaults {
            // Half full at most, as two-touch's: three faults in four end
            // in a lookup, a removal or an insert that walks its probe run
            // to the end, which gets long in a fuller table. Up to twice
            // the slots below MAX_TRACKED, the same 8 Mi (128 MiB) at it:
            // a power of two fills exactly half of them.
            table: PageTable::with_max_load(1, 2),
            wide: FxHashMap::default(),
            sets: vec![RefaultSet::default(); models + 1],
            base_ns: None,
            ts_bits: 64 - (models as u32 + 1),
            slack_ns: BASE_SLACK_NS.min(1 << (64 - (models as u32 + 1)).saturating_sub(4)),
            max_tracked: MAX_TRACKED,
        }
    }

    /// Table slots allocated for pending refusals.
    pub(super) fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Starts loading the table slot of a packed page key.
    #[inline]
    pub(super) fn prefetch(&self, key: u64) {
        self.table.prefetch(key);
    }

    /// Refusals pending.
    pub(super) fn len(&self) -> usize {
        self.table.len() + self.wide.len()
    }

    #[inline]
    fn pack_value(&mut self, ts_ns: u64, sets: u64) -> Option<u64> {
        let base = *self
            .base_ns
            .get_or_insert(ts_ns.saturating_sub(self.slack_ns));
        let off = ts_ns.checked_sub(base)?;
        (off >> self.ts_bits == 0).then_some(off | sets << self.ts_bits)
    }

    #[inline]
    fn unpack_value(&self, v: u64) -> (u64, u64) {
        let off = v & ((1 << self.ts_bits) - 1);
        (self.base_ns.unwrap_or(0) + off, v >> self.ts_bits)
    }

    /// A fault on `page`, a folio of `pages` pages: answers a pending
    /// refusal of that page.
    #[inline]
    pub(super) fn fault(&mut self, page: &Page, ts_ns: u64, pages: u64) -> Held {
        let found = match page.packed {
            Some(key) => self.table.lookup(key),
            None => Err(Vacant::NONE),
        };
        if let Ok(i) = found {
            let (then, sets) = self.unpack_value(self.table.slot(i)[1]);
            self.answer(then, sets, ts_ns, pages);
            return Held(found);
        }
        if !self.wide.is_empty() {
            if let Some(p) = self.wide.remove(&(page.tgid, page.addr)) {
                self.answer(p.ts_ns, p.sets, ts_ns, pages);
            }
        }
        Held(found)
    }

    #[inline]
    fn answer(&mut self, then_ns: u64, sets: u64, ts_ns: u64, pages: u64) {
        let delay = ts_ns.saturating_sub(then_ns) / 1_000_000;
        for i in Bits(sets) {
            let set = &mut self.sets[i as usize];
            set.refaulted += 1;
            set.refaulted_pages += pages;
            set.delay_ms.add(delay);
        }
    }

    /// Drops the pending refusals of processes that are gone: they can no
    /// longer be answered, and a pid that comes back is a new process.
    #[cold]
    pub(super) fn forget(&mut self, pids: &[u32]) {
        let pids: rustc_hash::FxHashSet<u32> = pids.iter().copied().collect();
        if self
            .table
            .iter()
            .any(|e| pids.contains(&pagetable::unpack(e[0]).0))
        {
            self.table
                .retain(|e| !pids.contains(&pagetable::unpack(e[0]).0));
        }
        self.wide.retain(|(tgid, _), _| !pids.contains(tgid));
    }

    /// Frees the slot of an answered refusal that is not renewed.
    #[inline]
    pub(super) fn release(&mut self, held: Held) {
        if let Ok(i) = held.0 {
            self.table.remove_at(i);
        }
    }

    /// The page, a folio of `pages` pages, was refused by the kernel;
    /// `sets` says who wanted it.
    #[inline]
    pub(super) fn refused(&mut self, held: Held, page: &Page, ts_ns: u64, sets: u64, pages: u64) {
        if sets == 0 {
            self.release(held);
            return;
        }
        // The held entry is already answered: it does not count.
        if self.len() - usize::from(held.0.is_ok()) >= self.max_tracked {
            self.release(held);
            for i in Bits(sets) {
                let set = &mut self.sets[i as usize];
                set.untracked += 1;
                set.untracked_pages += pages;
            }
            return;
        }
        match (page.packed, self.pack_value(ts_ns, sets), held.0) {
            (Some(_), Some(v), Ok(i)) => self.table.value_mut(i)[0] = v,
            (Some(key), Some(v), Err(vacant)) => self.table.insert_at(vacant, [key, v]),
            _ => {
                self.release(held);
                self.wide
                    .insert((page.tgid, page.addr), Pending { ts_ns, sets });
            }
        }
        for i in Bits(sets) {
            let set = &mut self.sets[i as usize];
            set.tracked += 1;
            set.tracked_pages += pages;
        }
    }

    pub(super) fn report(&self, i: usize) -> RefaultReport {
        let s = &self.sets[i];
        let pct = |n: u64, of: u64| {
            if of == 0 {
                0.0
            } else {
                100.0 * n as f64 / of as f64
            }
        };
        RefaultReport {
            pages: s.tracked,
            followed_pages: s.tracked_pages,
            refaulted: s.refaulted,
            refaulted_pages: s.refaulted_pages,
            refaulted_pct: pct(s.refaulted, s.tracked),
            refaulted_pages_pct: pct(s.refaulted_pages, s.tracked_pages),
            delay_ms_p50: s.delay_ms.quantile(0.5),
            delay_ms_p90: s.delay_ms.quantile(0.9),
            untracked: s.untracked,
            untracked_pages: s.untracked_pages,
        }
    }
}

/// Iterates the set bits of a mask.
struct Bits(u64);
impl Iterator for Bits {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        if self.0 == 0 {
            return None;
        }
        let b = self.0.trailing_zeros();
        self.0 &= self.0 - 1;
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// The refusal tracking as it was before the packed table: one map
    /// entry per pending refusal, removed by the next fault.
    struct RefRefaults {
        pending: FxHashMap<(u32, u64), (u64, u64)>,
        sets: Vec<RefaultSet>,
        max: usize,
    }

    impl RefRefaults {
        fn fault(&mut self, key: (u32, u64), ts: u64, pages: u64) {
            if let Some((then, mask)) = self.pending.remove(&key) {
                for i in Bits(mask) {
                    let s = &mut self.sets[i as usize];
                    s.refaulted += 1;
                    s.refaulted_pages += pages;
                    s.delay_ms.add(ts.saturating_sub(then) / 1_000_000);
                }
            }
        }
        fn refused(&mut self, key: (u32, u64), ts: u64, mask: u64, pages: u64) {
            let full = self.pending.len() >= self.max;
            if !full {
                self.pending.insert(key, (ts, mask));
            }
            for i in Bits(mask) {
                let s = &mut self.sets[i as usize];
                if full {
                    s.untracked += 1;
                    s.untracked_pages += pages;
                } else {
                    s.tracked += 1;
                    s.tracked_pages += pages;
                }
            }
        }
    }

    /// Random faults and refusals, with keys and times that do not pack
    /// (huge tgids, unaligned or huge addresses, times before the base or
    /// beyond the packed range), a full table, and few or many models.
    #[test]
    fn refaults_match_the_plain_map() {
        for (models, max, seed) in [
            (1usize, 1 << 20, 1u64),
            (3, 300, 2),
            (40, 1 << 20, 3),
            (62, 50, 4),
        ] {
            let mut new = Refaults::new(models);
            new.max_tracked = max;
            let mut old = RefRefaults {
                pending: FxHashMap::default(),
                sets: vec![RefaultSet::default(); models + 1],
                max,
            };
            let mut r = Rng::new(0x2545_F491_4F6C_DD1D ^ seed);
            let mut ts = 1u64 << 40;
            let (mut saw_table, mut saw_wide) = (false, false);
            for _ in 0..300_000 {
                ts += r.next_u64() % 3_000_000;
                let t = match r.next_u64() % 100 {
                    0 => ts - (1 << 33),
                    1 => u64::MAX - r.next_u64() % 1000,
                    2 => ts + (1 << 50),
                    _ => ts,
                };
                let tgid = match r.next_u64() % 50 {
                    0 => u32::MAX,
                    1 => 1 << 22,
                    n => (n % 4) as u32,
                };
                let addr = match r.next_u64() % 50 {
                    0 => 0x7f00_0000_0123,
                    1 => !0xfff,
                    _ => 0x7f00_0000_0000 + (r.next_u64() % 600) * 4096,
                };
                let page = Page::packed_as(tgid, addr, pagetable::pack(tgid, addr).unwrap_or(0));
                // A THP's fault now and then, beside 4 KiB ones.
                let pages = if r.next_u64().is_multiple_of(8) {
                    512
                } else {
                    1
                };
                let held = new.fault(&page, t, pages);
                old.fault((tgid, addr), t, pages);
                if r.next_u64().is_multiple_of(4) {
                    new.release(held);
                } else {
                    let sets = match r.next_u64() % (models as u64 + 2) {
                        0 => 1 << models,
                        _ => (r.next_u64() & ((1 << models) - 1)).max(1),
                    };
                    new.refused(held, &page, t, sets, pages);
                    old.refused((tgid, addr), t, sets, pages);
                }
                assert_eq!(new.len(), old.pending.len());
                saw_table |= !new.table.is_empty();
                saw_wide |= !new.wide.is_empty();
            }
            assert!(saw_wide && (saw_table || models > 60), "{models} models");
            for (i, o) in old.sets.iter().enumerate() {
                let n = &new.sets[i];
                let counts = |s: &RefaultSet| {
                    [
                        s.tracked,
                        s.tracked_pages,
                        s.untracked,
                        s.untracked_pages,
                        s.refaulted,
                        s.refaulted_pages,
                    ]
                };
                assert_eq!(counts(n), counts(o), "set {i}");
                assert_eq!(n.delay_ms, o.delay_ms, "set {i}");
            }
        }
    }
}
