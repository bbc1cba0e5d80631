//! The mover's queue: pages waiting to be promoted, one entry per page
//! however often it faults, bounded, with retry bookkeeping.
//!
//! Pages ready to move wait in lanes, one per (target node, process), in
//! address order; the processes of a target take turns. Pages waiting for a
//! retry sit apart, ordered by when they are due. So the mover can serve
//! any target, skip one that cannot take pages now, and take a batch in
//! time that follows the batch, not the queue: nothing here scans all
//! waiting pages.
use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;

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
    pub nr_pages: u32,
    /// When the fault happened (CLOCK_MONOTONIC ns).
    pub ts_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub target: u32,
    pub nr_pages: u32,
    /// Failed attempts so far.
    pub tries: u32,
    /// Not before this time (retry backoff), ns.
    pub due_ns: u64,
}

#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct QueueCounts {
    /// Requests accepted as new pages.
    pub queued: u64,
    /// Requests for a page already waiting (coalesced into it).
    pub coalesced: u64,
    /// Requests dropped because the queue was full, and waiting pages
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

/// Where a waiting page is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// In its target's lane, ready.
    Ready { target: u32 },
    /// Backing off; the key of its entry in [`Queue::backoff`].
    Backoff { seq: u64 },
}

/// The ready pages of one target node.
#[derive(Debug, Default)]
struct Lanes {
    by_pid: HashMap<u32, BTreeMap<u64, Pending>>,
    /// Processes with ready pages, in turn order (each exactly once).
    turn: VecDeque<u32>,
    ready: usize,
}

impl Lanes {
    fn insert(&mut self, pid: u32, addr: u64, p: Pending) {
        let lane = self.by_pid.entry(pid).or_default();
        if lane.is_empty() {
            self.turn.push_back(pid);
        }
        lane.insert(addr, p);
        self.ready += 1;
    }
}

#[derive(Debug)]
pub struct Queue {
    cap: usize,
    /// Every waiting page, by process and address.
    pages: BTreeMap<(u32, u64), Slot>,
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
            pages: BTreeMap::new(),
            lanes: BTreeMap::new(),
            backoff: BTreeMap::new(),
            seq: 0,
            counts: QueueCounts::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.pages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Adds a request; a page already waiting keeps its place, target and
    /// tries. When the queue is full, the target with the most ready pages
    /// (the one least able to take them, most likely) gives up its last
    /// page to a request for another target; a request for that target
    /// itself is dropped.
    pub fn push(&mut self, r: &Request) -> Pushed {
        if self.pages.contains_key(&(r.pid, r.addr)) {
            self.counts.coalesced += 1;
            return Pushed::Coalesced;
        }
        if self.pages.len() >= self.cap && !self.evict_for(r.target) {
            self.counts.dropped_full += 1;
            return Pushed::Dropped;
        }
        let p = Pending {
            target: r.target,
            nr_pages: r.nr_pages.max(1),
            tries: 0,
            due_ns: 0,
        };
        self.pages
            .insert((r.pid, r.addr), Slot::Ready { target: r.target });
        self.lanes
            .entry(r.target)
            .or_default()
            .insert(r.pid, r.addr, p);
        self.counts.queued += 1;
        Pushed::New
    }

    /// Drops one ready page of the fullest target unless that is `target`.
    fn evict_for(&mut self, target: u32) -> bool {
        let Some((&fullest, lanes)) = self.lanes.iter_mut().max_by_key(|(_, l)| l.ready) else {
            return false;
        };
        if fullest == target || lanes.ready == 0 {
            return false;
        }
        let Some(&pid) = lanes.turn.back() else {
            return false;
        };
        let Some(lane) = lanes.by_pid.get_mut(&pid) else {
            return false;
        };
        let Some((addr, _)) = lane.pop_last() else {
            return false;
        };
        if lane.is_empty() {
            lanes.by_pid.remove(&pid);
            lanes.turn.pop_back();
        }
        lanes.ready -= 1;
        self.pages.remove(&(pid, addr));
        self.counts.dropped_full += 1;
        true
    }

    /// Puts back a page that failed, ready again at `p.due_ns`.
    pub fn retry(&mut self, pid: u32, addr: u64, p: Pending) {
        if self.pages.contains_key(&(pid, addr)) {
            return;
        }
        self.seq += 1;
        self.backoff.insert((p.due_ns, self.seq), (pid, addr, p));
        self.pages
            .insert((pid, addr), Slot::Backoff { seq: self.seq });
    }

    /// Moves the pages due by `now_ns` from backoff to their lanes.
    pub fn release_due(&mut self, now_ns: u64) {
        while let Some(e) = self.backoff.first_entry() {
            if e.key().0 > now_ns {
                break;
            }
            let ((_, seq), (pid, addr, p)) = e.remove_entry();
            let Some(slot) = self.pages.get_mut(&(pid, addr)) else {
                continue;
            };
            if *slot != (Slot::Backoff { seq }) {
                continue;
            }
            *slot = Slot::Ready { target: p.target };
            self.lanes.entry(p.target).or_default().insert(pid, addr, p);
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
    pub fn front(&self, target: u32) -> Option<(u32, u32)> {
        let lanes = self.lanes.get(&target)?;
        let pid = *lanes.turn.front()?;
        let (_, p) = lanes.by_pid.get(&pid)?.first_key_value()?;
        Some((pid, p.nr_pages))
    }

    /// Takes up to `budget_pages` base pages for `target` from the process
    /// whose turn it is, in address order; that process then goes to the
    /// back of the turn. Empty when its first folio alone is over budget.
    pub fn take_batch(&mut self, target: u32, budget_pages: u64) -> (u32, Vec<(u64, Pending)>) {
        let mut out = Vec::new();
        let Some(lanes) = self.lanes.get_mut(&target) else {
            return (0, out);
        };
        let Some(pid) = lanes.turn.pop_front() else {
            return (0, out);
        };
        let Some(lane) = lanes.by_pid.get_mut(&pid) else {
            return (pid, out);
        };
        let mut used = 0u64;
        while let Some(e) = lane.first_entry() {
            let n = u64::from(e.get().nr_pages);
            if used + n > budget_pages {
                break;
            }
            used += n;
            out.push(e.remove_entry());
        }
        if lane.is_empty() {
            lanes.by_pid.remove(&pid);
        } else if out.is_empty() {
            lanes.turn.push_front(pid);
        } else {
            lanes.turn.push_back(pid);
        }
        lanes.ready -= out.len();
        for (addr, _) in &out {
            self.pages.remove(&(pid, *addr));
        }
        (pid, out)
    }

    /// Drops every page of `pid`; returns how many.
    pub fn drop_process(&mut self, pid: u32) -> usize {
        let keys: Vec<(u32, u64)> = self
            .pages
            .range((pid, 0)..=(pid, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in &keys {
            self.pages.remove(k);
        }
        // Ready pages leave with their lanes; backoff entries go stale.
        for lanes in self.lanes.values_mut() {
            if let Some(lane) = lanes.by_pid.remove(&pid) {
                lanes.ready -= lane.len();
                lanes.turn.retain(|p| *p != pid);
            }
        }
        keys.len()
    }

    /// Has `pid` pages waiting?
    pub fn has_process(&self, pid: u32) -> bool {
        self.pages
            .range((pid, 0)..=(pid, u64::MAX))
            .next()
            .is_some()
    }
}

#[cfg(test)]
mod tests;
