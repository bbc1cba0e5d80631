//! The decode stage that gives a hint fault its stamp: the scanner pass
//! that protected its folio. The probes do nothing per folio inside the
//! scanner (the kernel charges its scanner 32 times its own runtime, so
//! every instruction there delays the next scan); a pass records the
//! kernel's access clock at its entry and end, between which lie the
//! values it wrote into the folios it protected, and a fault records the
//! value its folio held (`ext_flags::NEEDS_PASS`). The
//! pass whose values contain it, of the faulting process, over the
//! faulting address, is the stamp (else the pass of another process at the
//! same address, a folio shared across a fork: `STAMP_OTHER_MM`); the
//! record is then what the models
//! always read (`HAS_STAMP`, `scan_ns`, `scan_seq_*`, and the count the
//! fault-count patch would have stored).
//!
//! A pass's record is sent when the pass ends, and another thread of the
//! process can fault on a page the pass protected before that: a fault no
//! recorded pass explains waits, in order with everything after it, until
//! [`WAIT_NS`] of trace time have passed or [`MAX_HELD`] items wait. One
//! still unexplained then (a shared folio another process's scan protected
//! at another address, a page protected before attach, a lost pass record,
//! or more than [`PASSES_PER_CHUNK`](crate::model::scans::PASSES_PER_CHUNK)
//! newer passes over its chunk) goes on
//! without a stamp, marked `STAMP_UNMATCHED`.
//!
//! A page keeps its pass's value until it faults, however many passes go
//! over it meanwhile (they skip a protected page), so a process's passes
//! are kept in time order, as far back as half the field's wrap (about 17
//! minutes in ms on Debian's kernels) and [`MAX_PASSES`] over all
//! processes, and searched by value.
use std::collections::VecDeque;

use numa_ebpf_common::{ext_flags as xf, fault_flags as ff, FaultEvent, ScanEvent};

use crate::decode::{Event, Snapshot};
use crate::model::proctable::{ProcTable, MAX_PROCS};
use crate::params::{KernelHotness, KernelParams};

/// Trace time an unexplained fault waits for its pass's record: a pass
/// takes a few milliseconds (a few tens in an emulated guest).
pub const WAIT_NS: u64 = 250_000_000;
/// Items (records and snapshots) held at most behind waiting faults; past
/// it the oldest waiting fault goes on unmatched.
pub const MAX_HELD: usize = 1 << 16;

/// What the stage hands on, in the order it was given.
#[derive(Debug)]
pub enum Item {
    Event(Event),
    Snapshot(Snapshot),
}

/// Passes kept over all processes (and in any one), about 64 bytes each;
/// beyond it the least recently active processes' go first, then the
/// oldest of the one process left.
pub const MAX_PASSES: usize = 1 << 20;
/// Processes whose passes are searched for a folio's value when none of
/// the faulting process's wrote it (a folio shared at the same address):
/// each costs one binary search.
pub const MAX_SHARER_SEARCH: usize = 64;

/// One pass as the stage keeps it.
#[derive(Debug, Clone, Copy)]
struct Pass {
    start: u64,
    end: u64,
    ts_ns: u64,
    seq_global: u64,
    seq_mm: u64,
    mm_fault_count: Option<u32>,
    first: u32,
    last: u32,
}

/// One process's passes that wrote access values, oldest first.
#[derive(Debug, Default)]
struct PassLog {
    passes: VecDeque<Pass>,
}

impl PassLog {
    /// How far `x` lies before the newest value, in the field's units.
    fn age(&self, x: u32, mask: u32) -> u32 {
        let newest = self.passes.back().map_or(x, |p| p.last);
        newest.wrapping_sub(x) & mask
    }

    /// Appends `p`; the passes it makes ambiguous (half the field's wrap
    /// older) go.
    fn push(&mut self, p: Pass, mask: u32) {
        self.passes.push_back(p);
        while self
            .passes
            .front()
            .is_some_and(|old| self.age(old.first, mask) > mask / 2)
        {
            self.passes.pop_front();
        }
    }

    /// The pass that wrote `v` over `addr`: the values of the passes grow
    /// with time, so the passes whose range holds `v` are found by a binary
    /// search, then the one covering `addr` among them.
    fn find(&self, v: u32, addr: u64, mask: u32) -> Option<&Pass> {
        let av = self.age(v, mask);
        let from = self.passes.partition_point(|p| self.age(p.last, mask) > av);
        self.passes
            .range(from..)
            .take_while(|p| self.age(p.first, mask) >= av)
            .filter(|p| p.start <= addr && addr < p.end)
            .last()
    }
}

/// The stage: the passes, the items held in order.
#[derive(Debug)]
pub struct Stamper {
    passes: ProcTable<PassLog>,
    /// The folio field's mask (LAST_CPUPID_MASK): the values wrap there.
    mask: u32,
    /// The values are the kernel's clock in ms shifted right by this much
    /// (PAGE_ACCESS_TIME_BUCKETS); None: they are not a time (the
    /// fault-count RFC's counts).
    ms_shift: Option<u32>,
    held: VecDeque<Item>,
    /// Held faults still waiting for their pass.
    waiting: usize,
    /// The latest trace time seen.
    now_ns: u64,
}

impl Stamper {
    /// A stage for values kept in a field of `mask` (LAST_CPUPID_MASK).
    pub fn new(mask: u32) -> Self {
        Stamper {
            passes: ProcTable::new(MAX_PROCS, MAX_PASSES),
            mask: mask.max(1),
            ms_shift: None,
            held: VecDeque::new(),
            waiting: 0,
            now_ns: 0,
        }
    }

    /// The stage for the running kernel's values: on a kernel that
    /// promotes on time, a fault's folio is dated within its pass by its
    /// value, as the kernel's own latency is.
    pub fn of(k: &KernelParams) -> Self {
        let mut st = Stamper::new(k.cpupid_mask);
        if k.hotness == KernelHotness::Latency {
            st.ms_shift = Some(k.access_time_buckets.min(31));
        }
        st
    }

    fn record(&mut self, s: &ScanEvent) {
        // A pass that protected nothing wrote no value.
        let protected = s.ptes_updated > 0 || s.late_end();
        if !s.has_access_range() || s.end <= s.start || !protected {
            return;
        }
        let pass = Pass {
            start: s.start,
            end: s.end,
            ts_ns: s.ts_ns,
            seq_global: s.seq_global,
            seq_mm: s.seq_mm,
            mm_fault_count: s.has_mm_fault_count().then_some(s.mm_fault_count),
            first: s.access_first & self.mask,
            last: s.access_last & self.mask,
        };
        let (tgid, mask) = (s.tgid(), self.mask);
        let log = self.passes.touch(tgid, s.ts_ns, PassLog::default);
        log.push(pass, mask);
        // Over the bound alone: this process's oldest passes go.
        let mut cost = log.passes.len();
        while self.passes.set_cost(tgid, cost) {
            let Some(log) = self.passes.get_mut(tgid) else {
                break;
            };
            if log.passes.pop_front().is_none() {
                break;
            }
            cost = log.passes.len();
        }
    }

    /// Takes one event; hands on to `out` every item no longer held.
    pub fn event<E>(
        &mut self,
        ev: Event,
        out: &mut impl FnMut(Item) -> Result<(), E>,
    ) -> Result<(), E> {
        let ev = match ev {
            Event::Scan(s) => {
                self.record(&s);
                self.advance(s.ts_ns);
                if self.waiting > 0 {
                    self.retry();
                }
                Event::Scan(s)
            }
            Event::Fault(mut f) if f.needs_pass() => {
                self.advance(f.ts_ns);
                if !self.stamp(&mut f) {
                    if self.held.is_empty() && !may_wait(self.now_ns, &f) {
                        unmatched(&mut f);
                    } else {
                        self.waiting += 1;
                    }
                }
                Event::Fault(f)
            }
            Event::Fault(f) => {
                self.advance(f.ts_ns);
                Event::Fault(f)
            }
            other => other,
        };
        self.held.push_back(Item::Event(ev));
        self.release(out, false)
    }

    /// Takes one snapshot, in order with the events around it.
    pub fn snapshot<E>(
        &mut self,
        s: Snapshot,
        out: &mut impl FnMut(Item) -> Result<(), E>,
    ) -> Result<(), E> {
        self.held.push_back(Item::Snapshot(s));
        self.release(out, false)
    }

    /// The stream ended: everything goes on, unexplained faults unmatched.
    pub fn flush<E>(&mut self, out: &mut impl FnMut(Item) -> Result<(), E>) -> Result<(), E> {
        self.release(out, true)
    }

    fn advance(&mut self, ts_ns: u64) {
        self.now_ns = self.now_ns.max(ts_ns);
    }

    /// Fills `f`'s stamp from the pass that wrote its folio's value: one
    /// of the faulting process's, else of another process whose pass at
    /// the same address did (a folio shared across a fork). Processes
    /// forked together scan in step, so two of them can protect a shared
    /// folio within the same tick: every one of their passes holds the
    /// value, and the latest, the last writer when both wrote in that
    /// tick, is the stamp, marked `STAMP_AMBIGUOUS`.
    fn stamp(&mut self, f: &mut FaultEvent) -> bool {
        let (tgid, v, mask) = (f.tgid(), f.access_at_fault & self.mask, self.mask);
        self.passes.advance(f.ts_ns);
        if let Some(pass) = self
            .passes
            .get(tgid)
            .and_then(|log| log.find(v, f.addr, mask))
        {
            fill(f, pass, self.written_ns(pass, v, f.ts_ns));
            return true;
        }
        let mut elsewhere = self
            .passes
            .iter()
            .filter(|&(t, _)| t != tgid)
            .take(MAX_SHARER_SEARCH)
            .filter_map(|(_, log)| log.find(v, f.addr, mask));
        let Some(mut pass) = elsewhere.next().copied() else {
            return false;
        };
        let mut ambiguous = false;
        for other in elsewhere {
            ambiguous = true;
            if other.ts_ns > pass.ts_ns {
                pass = *other;
            }
        }
        fill(f, &pass, self.written_ns(&pass, v, f.ts_ns));
        f.flags |= ff::STAMP_OTHER_MM;
        if ambiguous {
            f.ext_flags |= xf::STAMP_AMBIGUOUS;
        }
        true
    }

    /// When `pass` wrote the value `v`: its start, plus the kernel's clock
    /// from the pass's first value to `v` where the values are a time, so
    /// that a folio protected late in a long pass is not dated at its
    /// start (within a jiffy, the clock's resolution). The pass's start
    /// falls anywhere within the jiffy of its first value, so a fault in
    /// the jiffy of its folio's value can come before that estimate: the
    /// folio was written before its fault (`fault_ns`), never after.
    fn written_ns(&self, pass: &Pass, v: u32, fault_ns: u64) -> u64 {
        let Some(shift) = self.ms_shift else {
            return pass.ts_ns;
        };
        let ms = u64::from(v.wrapping_sub(pass.first) & self.mask) << shift;
        pass.ts_ns.saturating_add(ms * 1_000_000).min(fault_ns)
    }

    /// A new pass record: the waiting faults look again (a shared
    /// folio's may be another process's).
    fn retry(&mut self) {
        let mut held = std::mem::take(&mut self.held);
        for item in held.iter_mut() {
            if let Item::Event(Event::Fault(f)) = item {
                if f.needs_pass() && self.stamp(f) {
                    self.waiting -= 1;
                }
            }
        }
        self.held = held;
    }

    /// Hands on the items before the first fault still waiting (all of
    /// them when `all`); a waiting fault past its time, or past the bound,
    /// goes on unmatched.
    fn release<E>(
        &mut self,
        out: &mut impl FnMut(Item) -> Result<(), E>,
        all: bool,
    ) -> Result<(), E> {
        let over = self.held.len() > MAX_HELD;
        while let Some(front) = self.held.front_mut() {
            if let Item::Event(Event::Fault(f)) = front {
                if f.needs_pass() {
                    if !all && !over && may_wait(self.now_ns, f) {
                        return Ok(());
                    }
                    unmatched(f);
                    self.waiting -= 1;
                }
            }
            if let Some(item) = self.held.pop_front() {
                out(item)?;
            }
            if over && !all && self.held.len() <= MAX_HELD {
                return self.release(out, false);
            }
        }
        Ok(())
    }

    /// Items held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

/// A fault can wait for its pass only while the trace time `now_ns` is
/// within [`WAIT_NS`] of it.
fn may_wait(now_ns: u64, f: &FaultEvent) -> bool {
    now_ns < f.ts_ns.saturating_add(WAIT_NS)
}

/// The record as if the probes had stamped it at `scan_ns`, in `pass`.
fn fill(f: &mut FaultEvent, pass: &Pass, scan_ns: u64) {
    f.flags |= ff::HAS_STAMP;
    f.scan_ns = scan_ns;
    f.scan_seq_global = pass.seq_global;
    f.scan_seq_mm = pass.seq_mm;
    f.ext_flags = (f.ext_flags & !xf::NEEDS_PASS) | xf::STAMP_FROM_PASS;
    if let Some(mm_count) = pass.mm_fault_count {
        if f.has_mm_fault_count() && !f.has_stored_fault_count() {
            f.stored_fault_count = mm_count;
            f.stored_fault_count_ns = pass.ts_ns;
            f.ext_flags |= xf::STORED_FAULT_COUNT;
        }
    }
}

fn unmatched(f: &mut FaultEvent) {
    f.ext_flags = (f.ext_flags & !xf::NEEDS_PASS) | xf::STAMP_UNMATCHED;
}

#[cfg(test)]
mod tests;
