//! The mover's queue: pages waiting to be promoted, coalesced per process
//! (one entry per page however often it faults), with retry bookkeeping.
use std::collections::{BTreeMap, HashMap};

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
}

/// One process's waiting pages.
#[derive(Debug, Default)]
struct ProcQueue {
    pages: BTreeMap<u64, Pending>,
    /// Pages with a retry time (`due_ns > 0`): while there are none, every
    /// page is due and nothing needs scanning.
    backoff: usize,
}

#[derive(Debug, Default)]
pub struct Queue {
    procs: HashMap<u32, ProcQueue>,
    len: usize,
    pub counts: QueueCounts,
}

impl Queue {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a request; a page already waiting keeps its place and tries.
    pub fn push(&mut self, r: &Request) -> bool {
        let pages = &mut self.procs.entry(r.pid).or_default().pages;
        if pages.contains_key(&r.addr) {
            self.counts.coalesced += 1;
            return false;
        }
        pages.insert(
            r.addr,
            Pending {
                target: r.target,
                nr_pages: r.nr_pages.max(1),
                tries: 0,
                due_ns: 0,
            },
        );
        self.len += 1;
        self.counts.queued += 1;
        true
    }

    /// Puts back a page that failed, due after `due_ns`.
    pub fn retry(&mut self, pid: u32, addr: u64, p: Pending) {
        let q = self.procs.entry(pid).or_default();
        match q.pages.insert(addr, p) {
            None => self.len += 1,
            Some(old) => q.backoff -= usize::from(old.due_ns > 0),
        }
        q.backoff += usize::from(p.due_ns > 0);
    }

    /// Drops every page of `pid`; returns how many.
    pub fn drop_process(&mut self, pid: u32) -> usize {
        let n = self.procs.remove(&pid).map_or(0, |p| p.pages.len());
        self.len -= n;
        n
    }

    /// The process with the most due pages, or the earliest due time when
    /// none is due yet.
    pub fn next_process(&self, now_ns: u64) -> Result<u32, Option<u64>> {
        let mut best: Option<(usize, u32)> = None;
        let mut earliest: Option<u64> = None;
        for (pid, q) in &self.procs {
            let pages = &q.pages;
            // O(1) unless some pages wait for a retry.
            let due = if q.backoff == 0 {
                pages.len()
            } else {
                pages.values().filter(|p| p.due_ns <= now_ns).count()
            };
            if due > 0 {
                if best.is_none_or(|(n, b)| due > n || (due == n && *pid < b)) {
                    best = Some((due, *pid));
                }
            } else if let Some(t) = pages.values().map(|p| p.due_ns).min() {
                earliest = Some(earliest.map_or(t, |e| e.min(t)));
            }
        }
        best.map(|(_, pid)| pid).ok_or(earliest)
    }

    /// The target of the first due page of `pid`.
    pub fn peek_target(&self, pid: u32, now_ns: u64) -> Option<u32> {
        self.procs
            .get(&pid)?
            .pages
            .values()
            .find(|p| p.due_ns <= now_ns)
            .map(|p| p.target)
    }

    /// Takes up to `budget_pages` base pages of `pid` that are due, all for
    /// the target of the first due one, in address order.
    pub fn take_batch(&mut self, pid: u32, now_ns: u64, budget_pages: u64) -> Vec<(u64, Pending)> {
        let Some(q) = self.procs.get_mut(&pid) else {
            return Vec::new();
        };
        let pages = &mut q.pages;
        let Some(target) = pages
            .values()
            .find(|p| p.due_ns <= now_ns)
            .map(|p| p.target)
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut used = 0u64;
        if q.backoff == 0 {
            // Every page is due: when the batch is a prefix of the address
            // order (no page for another target in between), split it off
            // at once instead of removing page by page.
            let mut cut = None;
            let mut mixed = false;
            for (addr, p) in pages.iter() {
                if p.target != target {
                    mixed = true;
                    break;
                }
                if used + u64::from(p.nr_pages) > budget_pages {
                    cut = Some(*addr);
                    break;
                }
                used += u64::from(p.nr_pages);
            }
            if !mixed {
                let rest = cut.map_or_else(BTreeMap::new, |c| pages.split_off(&c));
                out.extend(std::mem::replace(pages, rest));
                if q.pages.is_empty() {
                    self.procs.remove(&pid);
                }
                self.len -= out.len();
                return out;
            }
            used = 0;
        }
        for (addr, p) in pages.iter() {
            if p.due_ns > now_ns || p.target != target {
                continue;
            }
            if used + u64::from(p.nr_pages) > budget_pages {
                break;
            }
            used += u64::from(p.nr_pages);
            out.push((*addr, *p));
        }
        for (addr, p) in &out {
            pages.remove(addr);
            q.backoff -= usize::from(p.due_ns > 0);
        }
        if q.pages.is_empty() {
            self.procs.remove(&pid);
        }
        self.len -= out.len();
        out
    }

    pub fn processes(&self) -> usize {
        self.procs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pid: u32, page: u64, target: u32) -> Request {
        Request {
            pid,
            addr: page * 4096,
            src_node: 1,
            target,
            nr_pages: 1,
            ts_ns: 0,
        }
    }

    #[test]
    fn duplicates_coalesce_per_process() {
        let mut q = Queue::default();
        assert!(q.push(&req(1, 5, 0)));
        assert!(!q.push(&req(1, 5, 0)));
        assert!(q.push(&req(2, 5, 0)));
        assert_eq!(q.len(), 2);
        assert_eq!(
            q.counts,
            QueueCounts {
                queued: 2,
                coalesced: 1
            }
        );
    }

    #[test]
    fn batches_are_per_process_per_target_in_address_order() {
        let mut q = Queue::default();
        for p in [9, 3, 7] {
            q.push(&req(1, p, 0));
        }
        q.push(&req(1, 5, 2));
        q.push(&req(2, 1, 0));
        assert_eq!(q.next_process(0), Ok(1));
        let b = q.take_batch(1, 0, 2);
        let addrs: Vec<u64> = b.iter().map(|(a, _)| a / 4096).collect();
        assert_eq!(addrs, vec![3, 7]);
        // Page 5 wants node 2: not in a node-0 batch.
        let b = q.take_batch(1, 0, 10);
        assert_eq!(b.iter().map(|(a, _)| a / 4096).collect::<Vec<_>>(), vec![5]);
        assert_eq!(b[0].1.target, 2);
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn prefix_batches_split_off_in_order() {
        let mut q = Queue::default();
        for p in (0..1000).rev() {
            q.push(&req(1, p, 0));
        }
        let b = q.take_batch(1, 0, 300);
        let pages: Vec<u64> = b.iter().map(|(a, _)| a / 4096).collect();
        assert_eq!(pages, (0..300).collect::<Vec<_>>());
        assert_eq!(q.len(), 700);
        // A page for another target ends the prefix: the general path
        // still takes the later pages of the first target.
        q.push(&req(1, 5000, 2));
        q.push(&req(1, 5001, 0));
        let b = q.take_batch(1, 0, 10_000);
        assert_eq!(b.len(), 701);
        assert_eq!(b.last().map(|(a, _)| a / 4096), Some(5001));
        assert_eq!(q.take_batch(1, 0, 10).len(), 1);
        assert!(q.is_empty());
        assert_eq!(q.next_process(0), Err(None));
    }

    #[test]
    fn budget_counts_base_pages_of_huge_folios() {
        let mut q = Queue::default();
        let mut thp = req(1, 512, 0);
        thp.nr_pages = 512;
        q.push(&req(1, 1, 0));
        q.push(&thp);
        assert_eq!(q.take_batch(1, 0, 100).len(), 1);
        assert_eq!(q.take_batch(1, 0, 100).len(), 0, "a THP over budget waits");
        assert_eq!(q.take_batch(1, 0, 512).len(), 1);
    }

    #[test]
    fn retries_wait_until_due_and_exits_drop_all() {
        let mut q = Queue::default();
        q.push(&req(1, 1, 0));
        let b = q.take_batch(1, 0, 10);
        let mut p = b[0].1;
        p.tries += 1;
        p.due_ns = 100;
        q.retry(1, b[0].0, p);
        assert_eq!(q.next_process(50), Err(Some(100)));
        assert_eq!(q.take_batch(1, 50, 10).len(), 0);
        assert_eq!(q.next_process(100), Ok(1));
        q.push(&req(1, 2, 0));
        assert_eq!(q.drop_process(1), 2);
        assert!(q.is_empty());
        assert_eq!(q.next_process(0), Err(None));
    }

    #[test]
    fn the_busiest_process_with_due_pages_goes_first() {
        let mut q = Queue::default();
        (0..5).for_each(|p| {
            q.push(&req(1, p, 0));
        });
        (0..3).for_each(|p| {
            q.push(&req(2, p, 0));
        });
        assert_eq!(q.next_process(0), Ok(1));
        // Four of process 1's pages back off until 100: process 2 has more due.
        for (addr, mut p) in q.take_batch(1, 0, 4) {
            p.due_ns = 100;
            q.retry(1, addr, p);
        }
        assert_eq!(q.next_process(50), Ok(2));
        assert_eq!(q.next_process(100), Ok(1));
        // Taken again at 100, retried without backoff: all due at once.
        for (addr, mut p) in q.take_batch(1, 100, 10) {
            p.due_ns = 0;
            q.retry(1, addr, p);
        }
        assert_eq!(q.procs[&1].backoff, 0);
        assert_eq!(q.next_process(0), Ok(1));
        assert_eq!(q.len(), 8);
    }
}
