//! A dry run: what would be moved, each folio counted once with its
//! pages, and the rate that would take. Nothing is queued for a move.
use std::sync::atomic::Ordering;

use super::{Env, Mover, PAGE};
use crate::queue::Request;

impl<E: Env> Mover<E> {
    /// Counts a folio the first time it is asked for. The folios seen are
    /// remembered up to the queue's capacity; beyond it requests are
    /// dropped and counted, so the report is a lower bound and says so.
    pub(super) fn push_dry(&mut self, r: &Request) {
        let counts = &mut self.queue.counts;
        if self.seen.contains(&(r.pid, r.addr)) {
            counts.coalesced += 1;
            return;
        }
        if self.seen.len() >= self.cfg.max_queued_pages.max(1) {
            counts.dropped_full += 1;
            self.shared
                .dropped
                .store(counts.dropped_full, Ordering::Relaxed);
            return;
        }
        self.seen.insert((r.pid, r.addr));
        counts.queued += 1;
        let pages = r.nr_pages.max(1);
        let bytes = pages * PAGE;
        *self
            .would_by_second
            .entry(r.ts_ns / 1_000_000_000)
            .or_default() += bytes;
        self.report.would_move_folios += 1;
        self.report.would_move_pages += pages;
        self.report.would_move_bytes += bytes;
        *self
            .report
            .would_move_by_target
            .entry(r.target)
            .or_default() += pages;
        let row = self.report.per_process.entry(r.pid).or_default();
        row.would_move += 1;
        row.would_move_pages += pages;
    }
}
