//! What the mover counts: per-page statuses, per-process results, the
//! counters shared with other threads, and the final report with its
//! where-are-they-now check.
use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
};

use serde::{Deserialize, Serialize};

use super::{Env, Mover};
use crate::{queue::QueueCounts, sys};

/// What each folio's move ended as: move_pages' status for the folio's
/// one address in the call (a THP moves whole, 512 pages under one
/// status). Folios; [`MoverReport::moved_pages`] has the pages moved.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StatusCounts {
    pub moved: u64,
    /// On the target, or already in a tier no lower than it, when queried.
    pub already_on_target: u64,
    pub ebusy: u64,
    pub enomem: u64,
    pub eacces: u64,
    pub efault: u64,
    pub enoent: u64,
    /// The call stopped early (a migration failure aborts the rest of the
    /// batch) or left the page where it was.
    pub not_migrated: u64,
    pub other: u64,
}

impl StatusCounts {
    pub fn failures(&self) -> u64 {
        self.ebusy
            + self.enomem
            + self.eacces
            + self.efault
            + self.enoent
            + self.not_migrated
            + self.other
    }

    /// Counts one failed folio; true when it is worth retrying.
    pub(super) fn fail(&mut self, errno: i32) -> bool {
        match errno {
            libc::EBUSY => {
                self.ebusy += 1;
                true
            }
            libc::ENOMEM => {
                self.enomem += 1;
                true
            }
            libc::EACCES => {
                // Mapped by several processes: MPOL_MF_MOVE leaves it.
                self.eacces += 1;
                false
            }
            libc::EFAULT => {
                self.efault += 1;
                false
            }
            libc::ENOENT => {
                self.enoent += 1;
                false
            }
            _ => {
                self.other += 1;
                true
            }
        }
    }
}

/// Per-process results of the mover: folios, and pages where named.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcMoves {
    pub moved: u64,
    pub moved_pages: u64,
    pub already_on_target: u64,
    pub failed: u64,
    pub would_move: u64,
    pub would_move_pages: u64,
    /// move_pages said the process no longer exists (ESRCH).
    pub exited: bool,
    /// move_pages refused (EPERM): not ours to move.
    pub refused: bool,
}

/// Counters shared with the pipeline thread and with live displays.
#[derive(Debug, Default)]
pub struct Shared {
    /// Requests (one per folio) the pipeline put on the channel.
    pub sent: AtomicU64,
    /// Requests dropped because the channel was full.
    pub overflows: AtomicU64,
    /// Requests (and waiting folios) dropped because the mover's queue was
    /// full.
    pub dropped: AtomicU64,
    pub received: AtomicU64,
    /// Folios waiting in the mover's queue.
    pub pending: AtomicU64,
    /// Pages moved (a THP's 512), and their bytes.
    pub moved_pages: AtomicU64,
    pub moved_bytes: AtomicU64,
    /// Folios whose move failed.
    pub failures: AtomicU64,
    pub started_ns: AtomicU64,
    /// Every process of a `--pid` scope has exited: nothing is left to do.
    pub scope_exited: AtomicBool,
    /// The model's index of scan passes: chunks held, and processes.
    pub scan_index_entries: AtomicU64,
    pub scan_index_processes: AtomicU64,
    /// Moved folios reclaim demoted again within the lifecycle's window.
    pub pingpong: AtomicU64,
}

/// A snapshot of promoter activity in this process. Other processes
/// (`numatrace top`, the exporter) see it through the state file the mover
/// thread publishes ([`numa_host::promoter_state`], [`Mover::fill_state`]).
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq)]
pub struct PromoterStats {
    pub ts_ns: u64,
    /// Pages moved (a THP's 512), and their bytes.
    pub moved_pages: u64,
    pub moved_bytes: u64,
    /// Folios whose move failed.
    pub failures: u64,
    /// Requests on the channel plus folios in the mover's queue.
    pub queue_depth: u64,
    /// Requests dropped because the channel or the mover's queue was full.
    pub queue_overflows: u64,
}

impl PromoterStats {
    pub fn read(s: &Shared, now_ns: u64) -> Self {
        let in_channel = s
            .sent
            .load(Ordering::Relaxed)
            .saturating_sub(s.received.load(Ordering::Relaxed));
        PromoterStats {
            ts_ns: now_ns,
            moved_pages: s.moved_pages.load(Ordering::Relaxed),
            moved_bytes: s.moved_bytes.load(Ordering::Relaxed),
            failures: s.failures.load(Ordering::Relaxed),
            queue_depth: in_channel + s.pending.load(Ordering::Relaxed),
            queue_overflows: s.overflows.load(Ordering::Relaxed)
                + s.dropped.load(Ordering::Relaxed),
        }
    }

    /// Pages moved per second since `prev`.
    pub fn moved_per_s(&self, prev: &PromoterStats) -> f64 {
        let dt = self.ts_ns.saturating_sub(prev.ts_ns) as f64 / 1e9;
        if dt <= 0.0 {
            0.0
        } else {
            self.moved_pages.saturating_sub(prev.moved_pages) as f64 / dt
        }
    }
}

/// Where the moved folios were at the end (a move_pages query of each
/// one's address).
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Verify {
    pub checked: u64,
    pub on_target: u64,
    /// On another node (demoted again, or moved by someone else).
    pub elsewhere: u64,
    /// Unmapped, or the process exited.
    pub gone: u64,
    /// Moved folios not remembered (more than the check keeps).
    pub unchecked: u64,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct MoverReport {
    pub dry_run: bool,
    /// Folios by their move's status.
    pub statuses: StatusCounts,
    /// Pages moved (`statuses.moved` folios, a THP's 512), and their bytes.
    pub moved_pages: u64,
    pub moved_bytes: u64,
    pub queue: QueueCounts,
    pub move_calls: u64,
    pub move_ns: u64,
    pub query_calls: u64,
    pub query_ns: u64,
    /// Base pages per call at the end, and the learnt cost per page and
    /// per call.
    pub batch_pages: usize,
    pub ns_per_page: Option<f64>,
    pub fixed_ns_per_call: Option<f64>,
    /// Reads of the target nodes' meminfo (the free floor).
    pub meminfo_reads: u64,
    pub rate_waits: u64,
    pub floor_waits: u64,
    /// Node -> floor in KiB (as last computed).
    pub floor_kb: BTreeMap<u32, u64>,
    /// Node -> the least headroom seen before a batch, KiB.
    pub min_headroom_kb: BTreeMap<u32, u64>,
    pub meminfo_errors: u64,
    /// Folios that failed more than `max_retries` times.
    pub gave_up: u64,
    /// Folios dropped because their process exited (ESRCH) or refused (EPERM).
    pub dropped_exited: u64,
    pub processes_exited: u64,
    pub processes_refused: u64,
    /// Pids served again, for a new process, after theirs exited or
    /// refused (`--all`, `--cgroup`).
    pub pids_reused: u64,
    /// Folios dropped at move time because their process left the scope.
    pub dropped_out_of_scope: u64,
    /// Folios left in the queue when the mover stopped.
    pub left_in_queue: u64,
    pub per_process: BTreeMap<u32, ProcMoves>,
    pub verify: Verify,
    /// Dry run: what would have moved, in folios, pages and bytes, and
    /// the most bytes in one second of fault time.
    pub would_move_folios: u64,
    pub would_move_pages: u64,
    pub would_move_bytes: u64,
    pub would_move_peak_bytes_per_s: u64,
    /// Dry run: pages per target node.
    pub would_move_by_target: BTreeMap<u32, u64>,
}

impl<E: Env> Mover<E> {
    /// Stops: where are the moved pages now? Returns the report.
    pub fn finish(mut self) -> MoverReport {
        self.report.left_in_queue = self.queue.len() as u64;
        self.report.queue = self.queue.counts.clone();
        self.report.batch_pages = self.sizer.pages();
        self.report.ns_per_page = self.sizer.ns_per_page();
        self.report.fixed_ns_per_call = self.sizer.fixed_ns();
        self.report.would_move_peak_bytes_per_s =
            self.would_by_second.values().copied().max().unwrap_or(0);
        for (pid, pages) in std::mem::take(&mut self.moved) {
            if !self.procs.pin(pid).is_some_and(|p| self.env.alive(p)) {
                // Exited: its pid, if reused, names another process.
                self.report.verify.checked += pages.len() as u64;
                self.report.verify.gone += pages.len() as u64;
                continue;
            }
            let mut pages: Vec<(u64, u32)> = pages.into_iter().map(|(a, (t, _))| (a, t)).collect();
            pages.sort_unstable();
            for chunk in pages.chunks(crate::batch::MAX_PAGES) {
                let addrs: Vec<u64> = chunk.iter().map(|(a, _)| *a).collect();
                let mut status = vec![i32::MIN; addrs.len()];
                let v = &mut self.report.verify;
                v.checked += addrs.len() as u64;
                match sys::query_pages(pid, &addrs, &mut status) {
                    Ok(_) => {
                        for ((_, target), s) in chunk.iter().zip(status) {
                            if s == *target as i32 {
                                v.on_target += 1;
                            } else if s >= 0 {
                                v.elsewhere += 1;
                            } else {
                                v.gone += 1;
                            }
                        }
                    }
                    Err(_) => v.gone += addrs.len() as u64,
                }
            }
        }
        self.report
    }
}
