//! The one per-process table: state kept per tgid, with one notion of a
//! process that is gone ([`GONE_AFTER_NS`] of trace time without an event),
//! one bound on what all processes hold together (a cost the user states
//! per process: entries, rows, bytes), and one eviction order (least
//! recently active first).
//!
//! Every operation is O(1) amortised: the processes are kept in a queue by
//! their latest activity, so the gone ones and the least recently active
//! one are found at its front instead of by a walk over the table. A touch
//! appends the process to the back (or moves its place there in place when
//! it is the latest already); its older place in the queue goes stale and
//! is skipped (the queue is compacted when stale places outnumber live
//! ones).
//!
//! A pid silent for [`GONE_AFTER_NS`] is dropped before anything else
//! reads the table at a later time, so what a process's pid finds never
//! depends on when the table last looked: a pid that comes back after that
//! silence is a new process.
//!
//! What bounds a single process is the user's part: the table drops whole
//! processes, the user trims inside one (its cost must not pass
//! [`ProcTable::max_cost`] either).
//!
//! A process the user still has work for (pages queued, moves to check)
//! is *held* ([`ProcTable::hold`]): it leaves the activity queue, so it is
//! neither gone after a silence nor evicted, until released. Held
//! processes count towards the process bound but are never what makes
//! room; their number is the user's to bound.
use std::{cmp::Ordering, collections::VecDeque};

use rustc_hash::FxHashMap;

use super::GONE_AFTER_NS;

#[derive(Debug, Clone)]
struct Slot<T> {
    value: T,
    last_ns: u64,
    cost: usize,
    held: bool,
}

#[derive(Debug, Clone)]
pub struct ProcTable<T> {
    slots: FxHashMap<u32, Slot<T>>,
    /// `(time, tgid)` in order of activity; a place is live while the
    /// process's `last_ns` is still that time.
    order: VecDeque<(u64, u32)>,
    now_ns: u64,
    cost: usize,
    max_cost: usize,
    max_procs: usize,
    /// Values of processes found gone or evicted, kept for the user when
    /// asked ([`Self::keep_dropped`]).
    dropped: Option<Vec<(u32, T)>>,
    evicted: u64,
}

/// Processes a table holds at most unless told otherwise: more than a
/// host runs at once in practice (the kernel's `pid_max` ceiling is 4 Mi);
/// past it the least recently active process's state goes.
pub const MAX_PROCS: usize = 1 << 20;

impl<T> Default for ProcTable<T> {
    /// At most [`MAX_PROCS`] processes, at a cost of 1 each.
    fn default() -> Self {
        ProcTable::new(MAX_PROCS, usize::MAX)
    }
}

impl<T> ProcTable<T> {
    /// A table holding at most `max_procs` processes and `max_cost` of
    /// cost over all of them.
    pub fn new(max_procs: usize, max_cost: usize) -> Self {
        ProcTable {
            slots: FxHashMap::default(),
            order: VecDeque::new(),
            now_ns: 0,
            cost: 0,
            max_cost,
            max_procs: max_procs.max(1),
            dropped: None,
            evicted: 0,
        }
    }

    /// Keeps the values of the processes the table drops (gone or
    /// evicted) until [`Self::take_dropped`], for a user that retires rows
    /// rather than forgetting them.
    pub fn keep_dropped(mut self) -> Self {
        self.dropped = Some(Vec::new());
        self
    }

    pub fn max_cost(&self) -> usize {
        self.max_cost
    }

    /// The latest event time seen.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Processes held, and their cost.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn cost(&self) -> usize {
        self.cost
    }

    /// Processes dropped to stay within the bounds (not gone ones).
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Moves the clock to `ts_ns` (never back) and drops the processes
    /// gone by then.
    #[inline]
    pub fn advance(&mut self, ts_ns: u64) {
        self.now_ns = self.now_ns.max(ts_ns);
        while let Some(&(t, tgid)) = self.order.front() {
            if self.now_ns.saturating_sub(t) < GONE_AFTER_NS {
                break;
            }
            self.order.pop_front();
            if self.is_live(t, tgid) {
                self.drop_proc(tgid, false);
            }
        }
    }

    /// The state of `tgid`, active at `ts_ns`, made by `new` when the pid
    /// is new or its previous process is gone. Past the process bound, the
    /// least recently active other process goes.
    #[inline]
    pub fn touch(&mut self, tgid: u32, ts_ns: u64, new: impl FnOnce() -> T) -> &mut T {
        self.advance(ts_ns);
        let now = self.now_ns;
        if self.slots.len() >= self.max_procs && !self.slots.contains_key(&tgid) {
            while self.slots.len() >= self.max_procs && self.evict_least_recent(tgid) {}
        }
        if self.order.len() > 2 * self.slots.len() + 64 {
            self.compact();
        }
        let mut fresh = false;
        let slot = self.slots.entry(tgid).or_insert_with(|| {
            fresh = true;
            Slot {
                value: new(),
                last_ns: now,
                cost: 0,
                held: false,
            }
        });
        if fresh {
            self.order.push_back((now, tgid));
        } else {
            active(&mut self.order, slot, tgid, now);
        }
        &mut slot.value
    }

    /// The state of `tgid`, active at `ts_ns`, when it is held (one lookup
    /// for a caller that does not add processes).
    #[inline]
    pub fn touch_existing(&mut self, tgid: u32, ts_ns: u64) -> Option<&mut T> {
        self.advance(ts_ns);
        if self.order.len() > 2 * self.slots.len() + 64 {
            self.compact();
        }
        let now = self.now_ns;
        let slot = self.slots.get_mut(&tgid)?;
        active(&mut self.order, slot, tgid, now);
        Some(&mut slot.value)
    }

    /// Whether `tgid` is held (not gone as of the latest time seen).
    pub fn contains(&self, tgid: u32) -> bool {
        self.slots.contains_key(&tgid)
    }

    /// The state of `tgid` without marking it active.
    pub fn get(&self, tgid: u32) -> Option<&T> {
        self.slots.get(&tgid).map(|s| &s.value)
    }

    pub fn get_mut(&mut self, tgid: u32) -> Option<&mut T> {
        self.slots.get_mut(&tgid).map(|s| &mut s.value)
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots.iter().map(|(t, s)| (*t, &s.value))
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.values().map(|s| &s.value)
    }

    /// Every process's state, without marking any active.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.values_mut().map(|s| &mut s.value)
    }

    /// States `tgid`'s cost now; past the cost bound, the least recently
    /// active other processes go. Returns whether `tgid` alone is still
    /// over the bound (the user then trims it).
    pub fn set_cost(&mut self, tgid: u32, cost: usize) -> bool {
        let Some(slot) = self.slots.get_mut(&tgid) else {
            return false;
        };
        self.cost = self.cost - slot.cost + cost;
        slot.cost = cost;
        while self.cost > self.max_cost && self.evict_least_recent(tgid) {}
        self.cost > self.max_cost
    }

    /// Holds `tgid` until [`Self::release`]: it is neither gone nor
    /// evicted meanwhile.
    pub fn hold(&mut self, tgid: u32) {
        if let Some(s) = self.slots.get_mut(&tgid) {
            s.held = true;
        }
    }

    /// Ends a hold: `tgid` counts as active now, and goes by the table's
    /// rules again.
    pub fn release(&mut self, tgid: u32) {
        let now = self.now_ns;
        if let Some(s) = self.slots.get_mut(&tgid).filter(|s| s.held) {
            s.held = false;
            s.last_ns = now;
            self.order.push_back((now, tgid));
        }
    }

    /// Drops `tgid` now.
    pub fn remove(&mut self, tgid: u32) -> Option<T> {
        let slot = self.slots.remove(&tgid)?;
        self.cost -= slot.cost;
        Some(slot.value)
    }

    /// Every process's state, the table emptied.
    pub fn into_values(self) -> impl Iterator<Item = T> {
        self.slots.into_values().map(|s| s.value)
    }

    /// Values dropped since the last call (only with [`Self::keep_dropped`]).
    pub fn take_dropped(&mut self) -> Vec<(u32, T)> {
        self.dropped
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Drops the least recently active process other than `keep`; false
    /// when there is none.
    fn evict_least_recent(&mut self, keep: u32) -> bool {
        let mut skipped = None;
        let mut found = false;
        while let Some((t, tgid)) = self.order.pop_front() {
            if !self.is_live(t, tgid) {
                continue;
            }
            if tgid == keep {
                skipped = Some((t, tgid));
                continue;
            }
            self.drop_proc(tgid, true);
            found = true;
            break;
        }
        if let Some(k) = skipped {
            self.order.push_front(k);
        }
        found
    }

    /// Whether `(t, tgid)` is the process's current place in the order
    /// (a held process has none).
    fn is_live(&self, t: u64, tgid: u32) -> bool {
        self.slots
            .get(&tgid)
            .is_some_and(|s| !s.held && s.last_ns == t)
    }

    fn drop_proc(&mut self, tgid: u32, evicted: bool) {
        if let Some(v) = self.remove(tgid) {
            self.evicted += u64::from(evicted);
            if let Some(d) = self.dropped.as_mut() {
                d.push((tgid, v));
            }
        }
    }

    /// Keeps only the live places, in order.
    #[cold]
    fn compact(&mut self) {
        let slots = &self.slots;
        self.order
            .retain(|(t, tgid)| slots.get(tgid).is_some_and(|s| !s.held && s.last_ns == *t));
    }
}

/// Rows of processes a [`ProcTable`] dropped, kept while they may rank
/// among a report's top `top_n` rows (in the report's order, `order`).
///
/// A dropped row's counts no longer grow while every other row's can only
/// grow, so once `top_n` dropped rows rank above it, `top_n` rows of any
/// report will: dropping it then cannot change the report. Trimming when
/// twice `top_n` are kept costs O(1) amortised per row and holds at most
/// `2 * top_n + 1` rows.
#[derive(Debug, Clone)]
pub struct Retired<T> {
    rows: Vec<T>,
    top_n: usize,
    dropped: u64,
}

impl<T> Retired<T> {
    pub fn new(top_n: usize) -> Self {
        Retired {
            rows: Vec::new(),
            top_n,
            dropped: 0,
        }
    }

    pub fn rows(&self) -> &[T] {
        &self.rows
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Rows dropped because they could no longer rank.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Keeps `row` while it may rank.
    pub fn push(&mut self, row: T, order: impl Fn(&T, &T) -> Ordering) {
        self.rows.push(row);
        if self.rows.len() > 2 * self.top_n {
            self.trim(order);
        }
    }

    /// Keeps the `top_n` rows that rank first.
    pub fn trim(&mut self, order: impl Fn(&T, &T) -> Ordering) {
        if self.rows.len() > self.top_n {
            if self.top_n > 0 {
                self.rows.select_nth_unstable_by(self.top_n - 1, order);
            }
            self.dropped += (self.rows.len() - self.top_n) as u64;
            self.rows.truncate(self.top_n);
        }
    }

    /// Takes the rows kept.
    pub fn take(&mut self) -> Vec<T> {
        std::mem::take(&mut self.rows)
    }
}

/// Marks `slot` (of `tgid`) active at `now`. Its place in `order` is the
/// last one when it was the latest active: it moves to `now` where it is,
/// leaving no stale place behind.
#[inline]
fn active<T>(order: &mut VecDeque<(u64, u32)>, slot: &mut Slot<T>, tgid: u32, now: u64) {
    if slot.last_ns == now {
        return;
    }
    match order.back_mut() {
        _ if slot.held => {}
        Some(back) if *back == (slot.last_ns, tgid) => back.0 = now,
        _ => order.push_back((now, tgid)),
    }
    slot.last_ns = now;
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn gone_processes_are_dropped_whenever_the_table_is_read() {
        let mut t = ProcTable::new(usize::MAX, usize::MAX);
        *t.touch(1, S, || 0) += 1;
        *t.touch(2, 2 * S, || 0) += 1;
        // Just under the bound: still there.
        t.advance(S + GONE_AFTER_NS - 1);
        assert!(t.contains(1));
        // At the bound: gone; the other one is not yet.
        t.advance(S + GONE_AFTER_NS);
        assert!(!t.contains(1) && t.contains(2));
        // A pid that comes back is a new process.
        assert_eq!(*t.touch(1, S + GONE_AFTER_NS, || 10), 10);
    }

    #[test]
    fn churn_keeps_only_the_processes_active_within_the_gone_bound() {
        let mut t = ProcTable::new(usize::MAX, usize::MAX);
        let mut peak = 0;
        // 100 000 processes, one a second, each active once; one process
        // active throughout.
        for i in 0..100_000u64 {
            t.touch(1_000_000 + i as u32, i * S, || ());
            t.touch(1, i * S, || ());
            peak = peak.max(t.len());
            assert!(t.order.len() <= 2 * t.len() + 65);
        }
        assert!(peak as u64 <= GONE_AFTER_NS / S + 1, "{peak}");
        assert!(t.contains(1));
    }

    /// A process active again while still the latest keeps one place in
    /// the order: a burst of one process leaves nothing to compact.
    #[test]
    fn the_latest_process_moves_its_place_in_place() {
        let mut t = ProcTable::new(usize::MAX, usize::MAX);
        t.touch(1, 0, || ());
        for ts in 1..1000 {
            t.touch(2, ts, || ());
        }
        assert_eq!(t.order.len(), 2);
        // 1 is now the least recent, at its one place.
        assert_eq!(t.order.front(), Some(&(0, 1)));
        t.touch(1, 1000, || ());
        assert_eq!(t.order.len(), 3, "2's place is live, 1's old one stale");
    }

    #[test]
    fn past_the_cost_bound_the_least_recent_go_but_never_the_one_charged() {
        let mut t = ProcTable::new(usize::MAX, 10);
        for tgid in 1..=5 {
            t.touch(tgid, u64::from(tgid), || ());
            assert!(!t.set_cost(tgid, 3));
        }
        // 5 processes of 3: the oldest two went.
        assert_eq!((t.len(), t.cost()), (3, 9));
        assert!(!t.contains(1) && !t.contains(2) && t.contains(5));
        // 3 became active again: 4 is now the least recent.
        t.touch(3, 10, || ());
        t.touch(6, 11, || ());
        t.set_cost(6, 3);
        assert!(!t.contains(4) && t.contains(3));
        // One process over the bound alone: the rest go, it stays, and the
        // caller is told to trim it.
        t.touch(7, 12, || ());
        assert!(t.set_cost(7, 11));
        assert_eq!(t.len(), 1);
        assert_eq!(t.evicted(), 6);
    }

    #[test]
    fn past_the_process_bound_the_least_recent_goes() {
        let mut t = ProcTable::new(3, usize::MAX).keep_dropped();
        for tgid in 1..=4 {
            t.touch(tgid, u64::from(tgid), || tgid);
        }
        assert_eq!(t.len(), 3);
        assert_eq!(t.take_dropped(), vec![(1, 1)]);
    }

    #[test]
    fn a_held_process_is_neither_gone_nor_evicted_until_released() {
        let mut t = ProcTable::new(2, usize::MAX).keep_dropped();
        t.touch(1, 0, || 1);
        t.hold(1);
        // Silent far past the gone bound, and the least recent when the
        // bound is met: the others make room.
        for tgid in 2..10 {
            t.touch(tgid, u64::from(tgid) * GONE_AFTER_NS, || tgid);
            assert!(t.contains(1));
        }
        assert_eq!(t.len(), 2);
        // Held, touched: still no place in the order.
        t.touch(1, 10 * GONE_AFTER_NS, || 0);
        assert!(t.order.iter().all(|p| !t.is_live(p.0, 1)));
        // Released: active now, then gone after a silence like any other.
        t.release(1);
        t.advance(11 * GONE_AFTER_NS - 1);
        assert!(t.contains(1));
        t.advance(11 * GONE_AFTER_NS);
        assert!(!t.contains(1));
        assert_eq!(t.take_dropped().last(), Some(&(1, 1)));
    }

    /// With every process held, the bound gives way instead of looping.
    #[test]
    fn held_processes_may_pass_the_bound() {
        let mut t = ProcTable::new(2, usize::MAX);
        for tgid in 1..=4 {
            t.touch(tgid, u64::from(tgid), || ());
            t.hold(tgid);
        }
        assert_eq!((t.len(), t.evicted()), (4, 0));
    }

    /// Evicting from a full table costs what inserting into an empty one
    /// does, not a walk over the table: timed side by side.
    #[test]
    fn eviction_from_a_full_table_is_not_a_walk() {
        const FULL: u32 = 200_000;
        const N: u32 = 20_000;
        let time = |prefill: u32| {
            let mut t = ProcTable::new(usize::MAX, FULL as usize);
            for tgid in 0..prefill {
                t.touch(tgid, u64::from(tgid), || ());
                t.set_cost(tgid, 1);
            }
            let start = Instant::now();
            for i in 0..N {
                let tgid = FULL + i;
                t.touch(tgid, u64::from(tgid), || ());
                t.set_cost(tgid, 1);
            }
            (start.elapsed(), t.evicted())
        };
        let (empty, none) = time(0);
        let (full, evicted) = time(FULL);
        assert_eq!((none, evicted), (0, u64::from(N)));
        assert!(
            full.as_secs_f64() < 20.0 * empty.as_secs_f64() + 0.05,
            "full {full:?} vs empty {empty:?}"
        );
    }

    #[test]
    fn retired_rows_keep_the_top_and_stay_bounded() {
        let mut r = Retired::new(3);
        for v in 0..1000u32 {
            r.push(v * 7 % 1000, |a, b| b.cmp(a));
            assert!(r.len() <= 7);
        }
        r.trim(|a, b| b.cmp(a));
        assert_eq!(r.dropped(), 997);
        let mut top = r.rows().to_vec();
        top.sort_unstable();
        assert_eq!(top, [997, 998, 999]);
    }
}
