//! The mover's queue: pages waiting to be promoted, one entry per folio
//! (the faulting address; a THP moves whole) however often it faults,
//! bounded in entries, with retry bookkeeping. Batches are taken by base
//! pages, the unit of the rate limit and the free floor.
//!
//! Pages ready to move wait in lanes, one per (target node, process), in
//! address order; the processes of a target take turns. Pages waiting for a
//! retry sit apart, ordered by when they are due. So the mover can serve
//! any target, skip one that cannot take pages now, and take a batch in
//! time that follows the batch, not the queue: nothing here scans all
//! waiting pages.
use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

/// One request from the event pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub pid: u32,
    /// Page-aligned user address.
    pub addr: u64,
    /// Node the page was on at the fault (a lower tier).
    pub src_node: i32,
    /// Top-tier node to move it to.
    pub target: u32,
    /// Base pages of the folio (a THP moves whole).
    pub nr_pages: u64,
    /// When the fault happened (CLOCK_MONOTONIC ns).
    pub ts_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub target: u32,
    /// Base pages of the folio, at least 1.
    pub nr_pages: u64,
    /// Failed attempts so far.
    pub tries: u32,
    /// Not before this time (retry backoff), ns.
    pub due_ns: u64,
    /// The latest hint fault that asked for it (CLOCK_MONOTONIC, ns): one
    /// after this run moved the page means it went down again since.
    pub fault_ns: u64,
}

/// Requests, one per folio.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct QueueCounts {
    /// Requests accepted as new folios.
    pub queued: u64,
    /// Requests for a folio already waiting (coalesced into it).
    pub coalesced: u64,
    /// Requests dropped because the queue was full, and waiting folios
    /// dropped to make room for a target that can move.
    pub dropped_full: u64,
}

/// What became of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    New,
    Coalesced,
    /// The queue is full.
    Dropped,
}

/// One process's waiting pages.
#[derive(Debug, Default)]
struct Proc {
    /// Ready pages by (target node, address).
    ready: BTreeMap<(u32, u64), Pending>,
    /// Ready pages per target node (a process's pages mostly go to one).
    per_target: BTreeMap<u32, usize>,
    /// Pages backing off: address -> the key of its entry in
    /// [`Queue::backoff`].
    backoff: HashMap<u64, (u64, u64)>,
}

impl Proc {
    fn len(&self) -> usize {
        self.ready.len() + self.backoff.len()
    }

    fn contains(&self, addr: u64) -> bool {
        self.backoff.contains_key(&addr) || self.ready_key(addr).is_some()
    }

    /// The key of `addr` among the ready pages, if it is one.
    fn ready_key(&self, addr: u64) -> Option<(u32, u64)> {
        self.per_target
            .keys()
            .map(|t| (*t, addr))
            .find(|k| self.ready.contains_key(k))
    }

    /// The addresses of `target`'s ready pages, in order.
    fn range(&self, target: u32) -> impl DoubleEndedIterator<Item = (&(u32, u64), &Pending)> {
        self.ready.range((target, 0)..=(target, u64::MAX))
    }
}

/// The processes with ready pages for one target node, in turn order
/// (each once), and how many pages they hold.
#[derive(Debug, Default)]
struct Lanes {
    turn: VecDeque<u32>,
    ready: usize,
}

#[derive(Debug)]
pub struct Queue {
    cap: usize,
    len: usize,
    procs: HashMap<u32, Proc>,
    lanes: BTreeMap<u32, Lanes>,
    /// Pages backing off, by (due time, sequence). An entry whose page was
    /// dropped meanwhile is stale and skipped when due.
    backoff: BTreeMap<(u64, u64), (u32, u64, Pending)>,
    seq: u64,
    pub counts: QueueCounts,
}

impl Queue {
    /// A queue of at most `cap` pages (at least one).
    pub fn new(cap: usize) -> Self {
        Queue {
            cap: cap.max(1),
            len: 0,
            procs: HashMap::new(),
            lanes: BTreeMap::new(),
            backoff: BTreeMap::new(),
            seq: 0,
            counts: QueueCounts::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a request; a page already waiting keeps its place, target and
    /// tries. When the queue is full, the target with the most ready pages
    /// (the one least able to take them, most likely) gives up its last
    /// page to a request for another target; a request for that target
    /// itself is dropped.
    pub fn push(&mut self, r: &Request) -> Pushed {
        if self.procs.get(&r.pid).is_some_and(|p| p.contains(r.addr)) {
            self.note_fault(r.pid, r.addr, r.ts_ns);
            self.counts.coalesced += 1;
            return Pushed::Coalesced;
        }
        if self.len >= self.cap && !self.evict_for(r.target) {
            self.counts.dropped_full += 1;
            return Pushed::Dropped;
        }
        let p = Pending {
            target: r.target,
            nr_pages: r.nr_pages.max(1),
            tries: 0,
            due_ns: 0,
            fault_ns: r.ts_ns,
        };
        self.insert_ready(r.pid, r.addr, p);
        self.len += 1;
        self.counts.queued += 1;
        Pushed::New
    }

    /// A later fault on a waiting page: its request stands for that one.
    fn note_fault(&mut self, pid: u32, addr: u64, ts_ns: u64) {
        let Some(proc) = self.procs.get_mut(&pid) else {
            return;
        };
        let waiting = match proc.backoff.get(&addr) {
            Some(key) => self.backoff.get_mut(key).map(|(_, _, p)| p),
            None => proc.ready_key(addr).and_then(|k| proc.ready.get_mut(&k)),
        };
        if let Some(p) = waiting {
            p.fault_ns = p.fault_ns.max(ts_ns);
        }
    }

    fn insert_ready(&mut self, pid: u32, addr: u64, p: Pending) {
        let proc = self.procs.entry(pid).or_default();
        proc.ready.insert((p.target, addr), p);
        let n = proc.per_target.entry(p.target).or_default();
        *n += 1;
        let lanes = self.lanes.entry(p.target).or_default();
        if *n == 1 {
            lanes.turn.push_back(pid);
        }
        lanes.ready += 1;
    }

    /// Takes `n` ready pages' worth of bookkeeping off `pid` at `target`.
    fn ready_taken(&mut self, pid: u32, target: u32, n: usize) -> bool {
        let Some(proc) = self.procs.get_mut(&pid) else {
            return true;
        };
        let left = proc.per_target.get(&target).map_or(0, |c| c - n);
        if left == 0 {
            proc.per_target.remove(&target);
        } else {
            proc.per_target.insert(target, left);
        }
        if let Some(l) = self.lanes.get_mut(&target) {
            l.ready -= n;
        }
        self.len -= n;
        if proc.len() == 0 {
            self.procs.remove(&pid);
        }
        left == 0
    }

    /// Drops one ready page of the fullest target unless that is `target`.
    fn evict_for(&mut self, target: u32) -> bool {
        let Some((&fullest, lanes)) = self.lanes.iter().max_by_key(|(_, l)| l.ready) else {
            return false;
        };
        if fullest == target || lanes.ready == 0 {
            return false;
        }
        let Some(&pid) = lanes.turn.back() else {
            return false;
        };
        let Some(proc) = self.procs.get_mut(&pid) else {
            return false;
        };
        let Some(key) = proc.range(fullest).next_back().map(|(k, _)| *k) else {
            return false;
        };
        proc.ready.remove(&key);
        if self.ready_taken(pid, fullest, 1) {
            if let Some(l) = self.lanes.get_mut(&fullest) {
                l.turn.pop_back();
            }
        }
        self.counts.dropped_full += 1;
        true
    }

    /// Puts back a page that failed, ready again at `p.due_ns`.
    pub fn retry(&mut self, pid: u32, addr: u64, p: Pending) {
        let proc = self.procs.entry(pid).or_default();
        if proc.contains(addr) {
            return;
        }
        self.seq += 1;
        proc.backoff.insert(addr, (p.due_ns, self.seq));
        self.backoff.insert((p.due_ns, self.seq), (pid, addr, p));
        self.len += 1;
    }

    /// Moves the pages due by `now_ns` from backoff to their lanes.
    pub fn release_due(&mut self, now_ns: u64) {
        while let Some(e) = self.backoff.first_entry() {
            if e.key().0 > now_ns {
                break;
            }
            let ((_, seq), (pid, addr, p)) = e.remove_entry();
            let Some(proc) = self.procs.get_mut(&pid) else {
                continue;
            };
            if proc.backoff.get(&addr).map(|k| k.1) != Some(seq) {
                continue;
            }
            proc.backoff.remove(&addr);
            self.insert_ready(pid, addr, p);
        }
    }

    /// When the next page backing off is due.
    pub fn next_due(&self) -> Option<u64> {
        self.backoff.first_key_value().map(|((due, _), _)| *due)
    }

    /// Targets with ready pages, in node order.
    pub fn ready_targets(&self, out: &mut Vec<u32>) {
        out.clear();
        out.extend(
            self.lanes
                .iter()
                .filter(|(_, l)| l.ready > 0)
                .map(|(t, _)| *t),
        );
    }

    /// The process whose turn it is at `target`, and the base pages of its
    /// first ready folio.
    pub fn front(&self, target: u32) -> Option<(u32, u64)> {
        let pid = *self.lanes.get(&target)?.turn.front()?;
        let (_, p) = self.procs.get(&pid)?.range(target).next()?;
        Some((pid, p.nr_pages))
    }

    /// Takes up to `budget_pages` base pages for `target` from the process
    /// whose turn it is, in address order; that process then goes to the
    /// back of the turn. Empty when its first folio alone is over budget.
    pub fn take_batch(&mut self, target: u32, budget_pages: u64) -> (u32, Vec<(u64, Pending)>) {
        let mut out = Vec::new();
        let Some(pid) = self.lanes.get_mut(&target).and_then(|l| l.turn.pop_front()) else {
            return (0, out);
        };
        let Some(proc) = self.procs.get_mut(&pid) else {
            return (pid, out);
        };
        let mut used = 0u64;
        let mut cut = None;
        for (key, p) in proc.range(target) {
            let n = p.nr_pages;
            if used + n > budget_pages {
                cut = Some(*key);
                break;
            }
            used += n;
            out.push((key.1, *p));
        }
        if proc.per_target.len() == 1 {
            // Every ready page is for `target`: the batch is a prefix of
            // the map, split off at once rather than removed page by page.
            let rest = cut.map_or_else(BTreeMap::new, |c| proc.ready.split_off(&c));
            proc.ready = rest;
        } else {
            for (addr, _) in &out {
                proc.ready.remove(&(target, *addr));
            }
        }
        let emptied = self.ready_taken(pid, target, out.len());
        if let Some(l) = self.lanes.get_mut(&target) {
            match (emptied, out.is_empty()) {
                (true, _) => {}
                (false, true) => l.turn.push_front(pid),
                (false, false) => l.turn.push_back(pid),
            }
        }
        (pid, out)
    }

    /// Drops every page of `pid`; returns how many.
    pub fn drop_process(&mut self, pid: u32) -> usize {
        let Some(proc) = self.procs.remove(&pid) else {
            return 0;
        };
        // Its backoff entries go stale.
        for (target, n) in &proc.per_target {
            if let Some(l) = self.lanes.get_mut(target) {
                l.ready -= n;
                l.turn.retain(|p| *p != pid);
            }
        }
        self.len -= proc.len();
        proc.len()
    }

    /// Has `pid` pages waiting?
    pub fn has_process(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }
}

#[cfg(test)]
mod tests;
