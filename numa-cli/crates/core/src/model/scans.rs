//! Where and when the scanner passed: an index of range scans per process
//! at 2 MiB granularity, so a fault can find the *latest* scan of the
//! range covering its page (the RFC's patch 2/2 stamp), next to the
//! kernel's per-folio *first* scan.
//!
//! Each chunk keeps its last [`PASSES_PER_CHUNK`] passes, newest first, so
//! a newer pass over part of a chunk does not hide an older one that
//! covered the faulting address. A pass is stored once per process and
//! shared by the chunks it covers.
//!
//! Bounded by [`ProcTable`]: the entries of a process that is gone (see
//! [`GONE_AFTER_NS`](super::GONE_AFTER_NS)) are dropped, and past
//! [`MAX_ENTRIES`] the least recently active processes' entries go first;
//! a process that holds more than [`MAX_ENTRIES`] alone loses its oldest
//! passes (and the chunks only they held).
use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use numa_ebpf_common::ScanEvent;

use super::proctable::ProcTable;

const CHUNK_SHIFT: u32 = 21;
/// Cap on chunks updated per scan event (a 64 GiB range); bigger ranges
/// are indexed at their ends only.
const MAX_CHUNKS_PER_SCAN: u64 = 32768;
/// Passes remembered per chunk: the latest covering pass of an address is
/// found unless this many newer passes each covered another part of its
/// chunk.
pub const PASSES_PER_CHUNK: usize = 4;
/// Entries (chunks plus stored passes, at most about 64 bytes each) kept at
/// most over all processes and in any one, about 256 MiB: beyond it, whole
/// processes are dropped, least recently active first, then the oldest
/// passes of the one process left.
pub const MAX_ENTRIES: usize = 1 << 22;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeScan {
    pub start: u64,
    pub end: u64,
    /// When the pass started; `seq_global`, `seq_mm` and `mm_fault_count` were
    /// read then too.
    pub ts_ns: u64,
    pub seq_global: u64,
    pub seq_mm: u64,
    /// The scanned mm's fault-count counter as the patch keeps it, when
    /// the probes had it (what patch 2/2 re-stamps PROT_NONE folios with).
    pub mm_fault_count: Option<u32>,
}

#[derive(Debug)]
pub struct ScanIndex {
    /// Each process's entries as its cost, at most [`MAX_ENTRIES`]
    /// (smaller in tests).
    procs: ProcTable<ProcScans>,
}

impl Default for ScanIndex {
    fn default() -> Self {
        ScanIndex::with_cap(MAX_ENTRIES)
    }
}

/// A chunk's passes by id, newest first; 0 is an empty slot.
type Slots = [u32; PASSES_PER_CHUNK];

/// A stored pass, the chunks it was stored in (`first..=last`, or those
/// two alone when `ends_only`) and how many chunks' slots hold it.
#[derive(Debug)]
struct Pass {
    scan: RangeScan,
    refs: u32,
    first: u64,
    last: u64,
    ends_only: bool,
}

/// One process's passes and scanned chunks.
#[derive(Debug)]
struct ProcScans {
    /// `passes[i]` has id `first_id + i`; the front is always referenced.
    passes: VecDeque<Pass>,
    first_id: u32,
    /// Passes some chunk still holds.
    live: usize,
    chunks: FxHashMap<u64, Slots>,
}

impl Default for ProcScans {
    fn default() -> Self {
        ProcScans {
            passes: VecDeque::new(),
            first_id: 1,
            live: 0,
            chunks: FxHashMap::default(),
        }
    }
}

impl ProcScans {
    /// Chunks and stored passes.
    fn entries(&self) -> usize {
        self.chunks.len() + self.passes.len()
    }

    fn pass(&self, id: u32) -> Option<&RangeScan> {
        let i = id.checked_sub(self.first_id)?;
        self.passes.get(i as usize).map(|p| &p.scan)
    }

    /// Stores `scan` as the newest pass of the chunks `first..=last` (or
    /// of those two alone when the range is too big to index whole).
    fn record(&mut self, scan: RangeScan, first: u64, last: u64) {
        if self.next_id().is_none() {
            self.compact();
        }
        let Some(id) = self.next_id() else {
            return;
        };
        let ends_only = last - first >= MAX_CHUNKS_PER_SCAN;
        self.passes.push_back(Pass {
            scan,
            refs: 0,
            first,
            last,
            ends_only,
        });
        self.live += 1;
        if !ends_only {
            for c in first..=last {
                self.hold(c, id);
            }
        } else {
            self.hold(first, id);
            self.hold(last, id);
        }
        self.pop_unheld();
        if self.passes.len() > 2 * self.live + 64 {
            self.compact();
        }
    }

    fn pop_unheld(&mut self) {
        while self.passes.front().is_some_and(|p| p.refs == 0) {
            self.passes.pop_front();
            self.first_id += 1;
        }
    }

    /// Drops the oldest stored pass from every chunk that holds it, and
    /// the chunks left empty; false when there is none. Costs the chunks
    /// the pass was stored in, paid once per pass.
    #[cold]
    fn drop_oldest_pass(&mut self) -> bool {
        let Some(p) = self.passes.front() else {
            return false;
        };
        let (id, first, last, ends_only) = (self.first_id, p.first, p.last, p.ends_only);
        let mut release = |c: u64| {
            let Some(slots) = self.chunks.get_mut(&c) else {
                return;
            };
            let Some(i) = slots.iter().position(|&s| s == id) else {
                return;
            };
            slots.copy_within(i + 1.., i);
            slots[PASSES_PER_CHUNK - 1] = 0;
            if slots[0] == 0 {
                self.chunks.remove(&c);
            }
        };
        if ends_only {
            release(first);
            release(last);
        } else {
            (first..=last).for_each(&mut release);
        }
        self.live -= 1;
        self.passes.pop_front();
        self.first_id += 1;
        self.pop_unheld();
        true
    }

    fn next_id(&self) -> Option<u32> {
        let n = u32::try_from(self.passes.len()).ok()?;
        self.first_id.checked_add(n)
    }

    /// Pass `id` becomes chunk `c`'s newest; its oldest pass drops out.
    fn hold(&mut self, c: u64, id: u32) {
        let slots = self.chunks.entry(c).or_default();
        let evicted = slots[PASSES_PER_CHUNK - 1];
        slots.copy_within(0..PASSES_PER_CHUNK - 1, 1);
        slots[0] = id;
        self.adjust(id, true);
        if evicted != 0 {
            self.adjust(evicted, false);
        }
    }

    fn adjust(&mut self, id: u32, up: bool) {
        let Some(p) = id
            .checked_sub(self.first_id)
            .and_then(|i| self.passes.get_mut(i as usize))
        else {
            return;
        };
        if up {
            p.refs += 1;
        } else {
            p.refs = p.refs.saturating_sub(1);
            if p.refs == 0 {
                self.live -= 1;
            }
        }
    }

    /// Drops the passes no chunk holds and numbers the rest from 1 again.
    #[cold]
    fn compact(&mut self) {
        let first = self.first_id;
        let mut new_id = vec![0u32; self.passes.len()];
        let mut next = 1u32;
        for (i, p) in self.passes.iter().enumerate() {
            if p.refs > 0 {
                new_id[i] = next;
                next += 1;
            }
        }
        self.passes.retain(|p| p.refs > 0);
        self.first_id = 1;
        for slots in self.chunks.values_mut() {
            for s in slots.iter_mut().filter(|s| **s != 0) {
                *s = new_id[(*s - first) as usize];
            }
        }
    }

    /// The newest of the chunk's passes that covers `addr` and started by
    /// `ts_ns`.
    fn latest(&self, addr: u64, ts_ns: u64) -> Option<RangeScan> {
        let slots = self.chunks.get(&(addr >> CHUNK_SHIFT))?;
        slots
            .iter()
            .filter_map(|&id| self.pass(id))
            .find(|s| s.start <= addr && addr < s.end && s.ts_ns <= ts_ns)
            .copied()
    }
}

impl ScanIndex {
    fn with_cap(cap: usize) -> Self {
        ScanIndex {
            procs: ProcTable::new(super::proctable::MAX_PROCS, cap),
        }
    }

    pub fn record(&mut self, ev: &ScanEvent) {
        let tgid = ev.tgid();
        let scan = RangeScan {
            start: ev.start,
            end: ev.end,
            ts_ns: ev.ts_ns,
            seq_global: ev.seq_global,
            seq_mm: ev.seq_mm,
            mm_fault_count: ev.has_mm_fault_count().then_some(ev.mm_fault_count),
        };
        if ev.end <= ev.start {
            return;
        }
        let p = self.procs.touch(tgid, ev.ts_ns, ProcScans::default);
        p.record(scan, ev.start >> CHUNK_SHIFT, (ev.end - 1) >> CHUNK_SHIFT);
        let mut cost = p.entries();
        // Over the bound alone: this process's oldest passes go.
        while self.procs.set_cost(tgid, cost) {
            let Some(p) = self.procs.get_mut(tgid) else {
                break;
            };
            if !p.drop_oldest_pass() {
                break;
            }
            cost = p.entries();
        }
    }

    /// The latest scan of `tgid` covering `addr` that started by `ts_ns`
    /// (a fault at `ts_ns` asks: the process is still there).
    #[inline]
    pub fn latest(&mut self, tgid: u32, addr: u64, ts_ns: u64) -> Option<RangeScan> {
        self.procs.touch_existing(tgid, ts_ns)?.latest(addr, ts_ns)
    }

    /// Entries held (chunks and passes over all processes) and processes.
    pub fn len(&self) -> (usize, usize) {
        (self.procs.cost(), self.procs.len())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::model::GONE_AFTER_NS;

    fn scan(start: u64, end: u64, ts: u64) -> ScanEvent {
        ScanEvent {
            kind: 2,
            pid_tgid: 7 << 32,
            start,
            end,
            ts_ns: ts,
            seq_global: ts,
            ..Default::default()
        }
    }

    #[test]
    fn latest_covering_scan_wins() {
        let mut idx = ScanIndex::default();
        idx.record(&scan(0x4000_0000, 0x5000_0000, 100));
        idx.record(&scan(0x4800_0000, 0x4900_0000, 200));
        assert_eq!(idx.latest(7, 0x4810_0000, 300).map(|s| s.ts_ns), Some(200));
        assert_eq!(idx.latest(7, 0x4010_0000, 300).map(|s| s.ts_ns), Some(100));
        // Before the newer pass, the older one.
        assert_eq!(idx.latest(7, 0x4810_0000, 150).map(|s| s.ts_ns), Some(100));
        // Other process, outside any range, or every scan after the fault.
        assert_eq!(idx.latest(8, 0x4810_0000, 300), None);
        assert_eq!(idx.latest(7, 0x6000_0000, 300), None);
        assert_eq!(idx.latest(7, 0x4810_0000, 50), None);
    }

    #[test]
    fn a_newer_partial_pass_does_not_hide_an_older_covering_one() {
        let mut idx = ScanIndex::default();
        // One pass over a whole chunk, then newer ones over its upper half.
        idx.record(&scan(0x4000_0000, 0x4020_0000, 100));
        for ts in [200, 300, 400] {
            idx.record(&scan(0x4010_0000, 0x4020_0000, ts));
        }
        assert_eq!(idx.latest(7, 0x4000_1000, 500).map(|s| s.ts_ns), Some(100));
        assert_eq!(idx.latest(7, 0x4010_1000, 500).map(|s| s.ts_ns), Some(400));
        // A fault between passes gets the pass before it.
        assert_eq!(idx.latest(7, 0x4010_1000, 250).map(|s| s.ts_ns), Some(200));
        // A fourth newer partial pass pushes the covering one out of the
        // chunk's memory: no stamp rather than a wrong one.
        idx.record(&scan(0x4010_0000, 0x4020_0000, 450));
        assert_eq!(idx.latest(7, 0x4000_1000, 500), None);
    }

    #[test]
    fn passes_stay_bounded_by_what_chunks_hold() {
        let mut idx = ScanIndex::default();
        // One chunk scanned once, then another scanned 100 000 times: the
        // old pass stays findable, the superseded ones are dropped.
        idx.record(&scan(0x1000_0000, 0x1020_0000, 1));
        for ts in 2..100_002 {
            idx.record(&scan(0x4000_0000, 0x4020_0000, ts));
            let (entries, _) = idx.len();
            assert!(entries <= 2 + 2 * (PASSES_PER_CHUNK + 1) + 64, "{entries}");
        }
        assert_eq!(idx.latest(7, 0x1000_1000, S).map(|s| s.ts_ns), Some(1));
        assert_eq!(
            idx.latest(7, 0x4000_1000, S).map(|s| s.ts_ns),
            Some(100_001)
        );
        assert_eq!(
            idx.latest(7, 0x4000_1000, 99_999).map(|s| s.ts_ns),
            Some(99_999)
        );
    }

    fn scan_of(tgid: u64, start: u64, end: u64, ts: u64) -> ScanEvent {
        ScanEvent {
            pid_tgid: tgid << 32,
            ..scan(start, end, ts)
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn pid_churn_keeps_the_index_bounded() {
        let mut idx = ScanIndex::default();
        // 20 000 short-lived processes, one a second, each scanned over
        // 8 MiB (4 chunks) and faulting once; one long-lived process
        // scanned and faulting throughout.
        let mut peak = (0, 0);
        for i in 0..20_000u64 {
            let ts = 1_000 * S + i * S;
            idx.record(&scan_of(1_000_000 + i, 0x4000_0000, 0x4080_0000, ts));
            assert!(idx
                .latest((1_000_000 + i) as u32, 0x4010_0000, ts + 1)
                .is_some());
            idx.record(&scan_of(7, 0x1000_0000, 0x1020_0000, ts));
            assert!(idx.latest(7, 0x1010_0000, ts + 1).is_some());
            let (e, p) = idx.len();
            peak = (peak.0.max(e), peak.1.max(p));
        }
        // Gone after 600 s, swept every 150 s: at most 750 processes of 4
        // chunks and one pass, and the long-lived one's chunk and passes.
        let gone = (GONE_AFTER_NS + GONE_AFTER_NS / 4) / S;
        assert!(peak.1 as u64 <= gone + 2, "{peak:?}");
        let long_lived = 1 + 2 * PASSES_PER_CHUNK as u64 + 64;
        assert!(peak.0 as u64 <= 5 * (gone + 1) + long_lived, "{peak:?}");
        // The long-lived process kept its entry all along.
        assert!(idx.latest(7, 0x1010_0000, 1_000 * S + 20_000 * S).is_some());
    }

    #[test]
    fn a_gone_process_is_forgotten_whenever_the_sweep_runs() {
        // The same silence, with and without other activity that runs
        // sweeps in between: the same answers.
        for busy in [false, true] {
            let mut idx = ScanIndex::default();
            idx.record(&scan_of(7, 0x4000_0000, 0x4020_0000, 10 * S));
            if busy {
                for t in (11..10 + 600).step_by(10) {
                    idx.record(&scan_of(8, 0, 0x1000, t * S));
                }
            }
            // Just under the bound: still there (and active again).
            let at = 10 * S + GONE_AFTER_NS - 1;
            assert_eq!(
                idx.latest(7, 0x4010_0000, at).map(|s| s.ts_ns),
                Some(10 * S)
            );
            // Silent for the bound since: gone, the pid is a new process.
            let later = at + GONE_AFTER_NS;
            assert_eq!(idx.latest(7, 0x4010_0000, later), None, "busy {busy}");
        }
    }

    #[test]
    fn past_the_entry_cap_the_least_recent_process_goes() {
        let mut idx = ScanIndex::with_cap(4 * 1025);
        // Each scan covers 1024 chunks (2 GiB), one pass: 4 processes fill
        // the cap.
        let span = 1024 << CHUNK_SHIFT;
        for tgid in 1..=6 {
            idx.record(&scan_of(tgid, 0, span, S + tgid));
        }
        assert_eq!(idx.len(), (4 * 1025, 4));
        // The first two went, the last four are there.
        assert_eq!(idx.latest(1, 0x1000, 2 * S), None);
        assert_eq!(idx.latest(2, 0x1000, 2 * S), None);
        assert!((3..=6).all(|t| idx.latest(t, 0x1000, 2 * S).is_some()));
    }

    #[test]
    fn one_process_alone_stays_within_the_cap() {
        let mut idx = ScanIndex::with_cap(4 * 1025);
        // One process's passes, each over 1024 fresh chunks: the cap holds
        // for it alone, its oldest passes going first.
        let span = 1024 << CHUNK_SHIFT;
        for i in 0..40u64 {
            idx.record(&scan_of(7, i * span, (i + 1) * span, S + i));
            let (entries, procs) = idx.len();
            assert!(entries <= 4 * 1025, "{entries} entries after pass {i}");
            assert_eq!(procs, 1);
        }
        // The newest passes are still found, the oldest are not.
        assert_eq!(
            idx.latest(7, 39 * span + 0x1000, 2 * S).map(|s| s.ts_ns),
            Some(S + 39)
        );
        assert_eq!(idx.latest(7, 0x1000, 2 * S), None);
        // The default cap holds for one process too: 64 GiB passes (the
        // most indexed whole) over fresh address space.
        let mut idx = ScanIndex::default();
        let span = MAX_CHUNKS_PER_SCAN << CHUNK_SHIFT;
        for i in 0..200u64 {
            idx.record(&scan_of(7, i * span, (i + 1) * span - 1, S + i));
            assert!(idx.len().0 <= MAX_ENTRIES, "{:?}", idx.len());
        }
    }

    /// Past the cap, each new process's scan evicts the least recent one:
    /// as cheap with the index full of processes as with it empty.
    #[test]
    fn eviction_from_a_full_index_is_not_a_walk() {
        const FULL: u64 = 100_000;
        const N: u64 = 10_000;
        let time = |prefill: u64| {
            // Each process scans one chunk: one chunk and one pass.
            let mut idx = ScanIndex::with_cap(2 * FULL as usize);
            for t in 0..prefill {
                idx.record(&scan_of(t + 1, 0, 0x1000, t + 1));
            }
            let start = Instant::now();
            for t in FULL..FULL + N {
                idx.record(&scan_of(t + 1, 0, 0x1000, t + 1));
            }
            (start.elapsed(), idx.len())
        };
        let (empty, _) = time(0);
        let (full, len) = time(FULL);
        assert_eq!(len, (2 * FULL as usize, FULL as usize));
        assert!(
            full.as_secs_f64() < 20.0 * empty.as_secs_f64() + 0.05,
            "full {full:?} vs empty {empty:?}"
        );
    }
}
