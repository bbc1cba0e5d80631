//! One batch: the location query (when a move could go downwards), the
//! move itself, and the accounting of every page's status.
use std::{io, sync::atomic::Ordering};

use super::{exit::all_gone, Env, Mover, MAX_VERIFY, PAGE};
use crate::{queue::Pending, sys};

/// Pages of one process, by address, as taken off the queue.
type Batch = Vec<(u64, Pending)>;

impl<E: Env> Mover<E> {
    fn whole_call_failed(&mut self, pid: u32, batch: Batch, e: &io::Error) {
        match e.raw_os_error() {
            Some(libc::ESRCH) | Some(libc::EPERM) => self.drop_process(pid, e, batch.len()),
            // A process being killed has released its memory before its pid
            // goes: move_pages finds no mm and says EINVAL. It has exited.
            Some(libc::EINVAL) if self.env.process_has_no_memory(pid) => {
                self.drop_process(pid, &io::Error::from_raw_os_error(libc::ESRCH), batch.len())
            }
            errno => {
                let now = self.env.now_ns();
                for (addr, p) in batch {
                    let retry = self.report.statuses.fail(errno.unwrap_or(0));
                    self.shared.failures.fetch_add(1, Ordering::Relaxed);
                    self.report.per_process.entry(pid).or_default().failed += 1;
                    if retry {
                        self.retry_or_give_up(pid, addr, p, now);
                    }
                }
            }
        }
    }

    /// Fills the reused address buffer from `batch` and lends out the
    /// status buffer sized to it; the caller puts it back in `self.status`.
    fn buffers_for(&mut self, batch: &[(u64, Pending)]) -> Vec<i32> {
        self.addrs.clear();
        self.addrs.extend(batch.iter().map(|(a, _)| *a));
        let mut status = std::mem::take(&mut self.status);
        status.clear();
        status.resize(self.addrs.len(), i32::MIN);
        status
    }

    /// The batch and the call's per-page statuses, unless the call failed
    /// as a whole or showed that the process has exited; those batches are
    /// dealt with here and `None` is returned.
    fn call_outcome(
        &mut self,
        pid: u32,
        r: io::Result<i64>,
        status: Vec<i32>,
        batch: Batch,
    ) -> Option<(Batch, Vec<i32>)> {
        if let Err(e) = r {
            self.status = status;
            self.whole_call_failed(pid, batch, &e);
            return None;
        }
        if all_gone(&status) && self.env.process_has_no_memory(pid) {
            // An exiting process unmapping its memory: it has exited.
            self.status = status;
            let esrch = io::Error::from_raw_os_error(libc::ESRCH);
            self.drop_process(pid, &esrch, batch.len());
            return None;
        }
        Some((batch, status))
    }

    /// Where are they now? Pages already on the target, or in a tier no
    /// lower than it, are accounted and left; gone ones fail. Returns what
    /// is still to move (`None`: the call failed as a whole).
    fn query(&mut self, pid: u32, target: u32, batch: Batch) -> Option<Batch> {
        if !self.still_there(pid, batch.len()) {
            return None;
        }
        let mut status = self.buffers_for(&batch);
        let t0 = self.env.now_ns();
        let r = sys::query_pages(pid, &self.addrs, &mut status);
        let t1 = self.env.now_ns();
        self.report.query_calls += 1;
        self.report.query_ns += t1.saturating_sub(t0);
        let (batch, status) = self.call_outcome(pid, r, status, batch)?;
        let target_tier = self.tier(target as i32);
        let mut to_move = Vec::with_capacity(batch.len());
        let (mut already, mut failed) = (0u64, 0u64);
        for ((addr, p), &s) in batch.into_iter().zip(&status) {
            if s == target as i32 {
                already += 1;
            } else if s >= 0 {
                // Only ever from a lower tier to a higher one.
                match (self.cfg.tier_of.get(&s), target_tier) {
                    (Some(cur), Some(t)) if t < *cur => to_move.push((addr, p)),
                    _ => already += 1,
                }
            } else {
                failed += 1;
                if self.report.statuses.fail(-s) {
                    self.retry_or_give_up(pid, addr, p, t1);
                }
            }
        }
        self.status = status;
        self.report.statuses.already_on_target += already;
        self.shared.failures.fetch_add(failed, Ordering::Relaxed);
        let row = self.report.per_process.entry(pid).or_default();
        row.already_on_target += already;
        row.failed += failed;
        Some(to_move)
    }

    pub(super) fn execute(&mut self, pid: u32, target: u32, batch: Batch) {
        let t0 = self.env.now_ns();
        // 1. The location query, unless a move to `target` can only ever be
        // upwards or a no-op (see `sole_top`).
        let to_move = if self.sole_top.contains(&target) {
            batch
        } else {
            match self.query(pid, target, batch) {
                Some(v) => v,
                None => return,
            }
        };
        if to_move.is_empty() || !self.still_there(pid, to_move.len()) {
            return;
        }
        // 2. Move.
        let (r, status, t2) = self.move_call(pid, target, &to_move, t0);
        let Some((to_move, status)) = self.call_outcome(pid, r, status, to_move) else {
            return;
        };
        self.account_moves(pid, target, to_move, &status, t2);
        self.status = status;
    }

    /// The move_pages call for `to_move`, charged to the rate limit and
    /// the target's free estimate before it is made. Returns its result,
    /// the per-page statuses and when it returned.
    fn move_call(
        &mut self,
        pid: u32,
        target: u32,
        to_move: &[(u64, Pending)],
        t0: u64,
    ) -> (io::Result<i64>, Vec<i32>, u64) {
        let pages: u64 = to_move.iter().map(|(_, p)| p.nr_pages).sum();
        let bytes = pages * PAGE;
        let t1 = self.env.now_ns();
        self.bucket.take(t1, bytes);
        if let Some(e) = self.free.get_mut(&target) {
            e.sent_bytes += bytes;
        }
        let mut status = self.buffers_for(to_move);
        self.nodes.clear();
        self.nodes.resize(self.addrs.len(), target as i32);
        let r = sys::move_pages(pid, &self.addrs, &self.nodes, &mut status);
        let t2 = self.env.now_ns();
        self.report.move_calls += 1;
        self.report.move_ns += t2.saturating_sub(t1);
        // The budget covers the query too. Learnt per base page, the unit
        // batches are taken in: a THP costs about its 512 pages' copy.
        self.sizer.observe(
            usize::try_from(pages).unwrap_or(usize::MAX),
            t2.saturating_sub(t0),
        );
        (r, status, t2)
    }

    /// Accounts each folio of a move by its status: moved ones are
    /// remembered for the final check, failed ones retried when worth it.
    fn account_moves(&mut self, pid: u32, target: u32, to_move: Batch, status: &[i32], now: u64) {
        let (mut moved, mut moved_pages, mut failed, mut already) = (0u64, 0u64, 0u64, 0u64);
        // Out of the map while the loop retries pages on `self`.
        let mut verify = self.moved.remove(&pid).unwrap_or_default();
        for ((addr, p), &s) in to_move.into_iter().zip(status) {
            if s == target as i32 {
                if verify
                    .get(&addr)
                    .is_some_and(|&(t, moved_ns)| t == target && p.fault_ns <= moved_ns)
                {
                    // A request from a fault that came before this page's
                    // move but reached the queue after it: moved once. A
                    // fault after the move found it below again (demoted):
                    // this is a move of its own.
                    already += 1;
                    continue;
                }
                // Also a page the kernel promoted itself since the fault
                // when the query was skipped: it is on the target either way.
                moved += 1;
                moved_pages += p.nr_pages;
                if let Some(seen) = verify.get_mut(&addr) {
                    *seen = (target, now);
                } else if self.moved_len < MAX_VERIFY {
                    self.moved_len += 1;
                    verify.insert(addr, (target, now));
                } else {
                    self.report.verify.unchecked += 1;
                }
                continue;
            }
            failed += 1;
            let retry = if s >= 0 || s == i32::MIN {
                self.report.statuses.not_migrated += 1;
                true
            } else {
                self.report.statuses.fail(-s)
            };
            if retry {
                self.retry_or_give_up(pid, addr, p, now);
            }
        }
        self.moved.insert(pid, verify);
        let moved_bytes = moved_pages * PAGE;
        self.report.statuses.moved += moved;
        self.report.statuses.already_on_target += already;
        self.report.moved_pages += moved_pages;
        self.report.moved_bytes += moved_bytes;
        self.shared
            .moved_pages
            .fetch_add(moved_pages, Ordering::Relaxed);
        self.shared
            .moved_bytes
            .fetch_add(moved_bytes, Ordering::Relaxed);
        self.shared.failures.fetch_add(failed, Ordering::Relaxed);
        let row = self.report.per_process.entry(pid).or_default();
        row.moved += moved;
        row.moved_pages += moved_pages;
        row.failed += failed;
        row.already_on_target += already;
    }
}
