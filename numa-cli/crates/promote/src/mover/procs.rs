//! The processes the mover serves, pinned ([`Pinned`]): a request is for
//! the process its pid named at the fault, and every move_pages call checks
//! that the pid still names it. A process that exited (or refused) is
//! remembered with its start time, so a later process that gets its pid is
//! told apart: under `--all` or `--cgroup` it is served on its own account,
//! under `--pid` it is not in scope.
//!
//! Not a `ProcTable` (numa-core's per-process table): there a process is
//! gone after a silence in trace time and the least recently active goes
//! first, while here a process is gone when the kernel says so (ESRCH, its
//! pidfd, its start time), a silent one with queued pages stays pinned,
//! and what may be forgotten is decided by the queue and the moved pages
//! still to be checked, not by how recently a process faulted.
use std::collections::HashMap;

use super::{Env, Mover};
use crate::{process::Pinned, queue::Request, scope::Scope};

/// Pidfds held at most (one per process served); past that, processes
/// are told apart by their start time alone, so the fd limit is never
/// reached.
const MAX_PIDFDS: usize = 256;
/// Processes remembered before those without queued pages are forgotten.
pub(super) const MAX_TRACKED: usize = 4096;
/// A process gone (or refusing) is looked at again at most this often.
const RECHECK_NS: u64 = 1_000_000_000;

#[derive(Debug)]
pub(super) struct Tracked {
    /// None once the process has exited or refused.
    pin: Option<Pinned>,
    start_ticks: u64,
    /// It refused (EPERM) rather than exited.
    refused: bool,
    /// When it was found gone, and last looked at since, ns.
    gone_ns: u64,
    checked_ns: u64,
}

#[derive(Debug, Default)]
pub(super) struct Procs {
    map: HashMap<u32, Tracked>,
    pidfds: usize,
    forget_above: usize,
}

impl Procs {
    fn insert(&mut self, pid: u32, pin: Pinned) {
        self.pidfds += usize::from(pin.has_pidfd());
        let old = self.map.insert(
            pid,
            Tracked {
                start_ticks: pin.start_ticks,
                pin: Some(pin),
                refused: false,
                gone_ns: 0,
                checked_ns: 0,
            },
        );
        if old.and_then(|t| t.pin).is_some_and(|p| p.has_pidfd()) {
            self.pidfds -= 1;
        }
    }

    /// Marks `pid` gone (exited, or refused) at `now`, closing its pidfd.
    pub(super) fn gone(&mut self, pid: u32, now: u64, refused: bool) {
        if let Some(t) = self.map.get_mut(&pid) {
            if t.pin.take().is_some_and(|p| p.has_pidfd()) {
                self.pidfds -= 1;
            }
            t.refused = refused;
            t.gone_ns = now;
            t.checked_ns = now;
        }
    }

    pub(super) fn pin(&self, pid: u32) -> Option<&Pinned> {
        self.map.get(&pid)?.pin.as_ref()
    }

    /// Processes remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}

impl<E: Env> Mover<E> {
    /// Pins the processes of a `--pid` scope: the pid must still name the
    /// process the scope was made for.
    pub(super) fn pin_scope(&mut self) {
        let Scope::Pids(pids) = &self.scope else {
            return;
        };
        let pids: Vec<(u32, u64)> = pids.iter().map(|(p, t)| (*p, *t)).collect();
        for (pid, ticks) in pids {
            match self.env.pin(pid, true) {
                Some(p) if p.start_ticks == ticks => self.procs.insert(pid, p),
                _ => {
                    self.procs.insert(pid, Pinned::with_start(pid, ticks));
                    let esrch = std::io::Error::from_raw_os_error(libc::ESRCH);
                    self.drop_process(pid, &esrch, 0);
                }
            }
        }
    }

    /// Is `r` for a process to serve? Pins its process at first sight.
    pub(super) fn admit(&mut self, r: &Request) -> bool {
        let pids_scope = matches!(self.scope, Scope::Pids(_));
        let now = self.env.now_ns();
        let (ticks, fresh) = match self.procs.map.get(&r.pid) {
            Some(t) if t.pin.is_some() => return true,
            // A fault before the process was found gone is the old one's;
            // after, only a new process's (or, after a refusal, the same
            // one's: the start time tells, looked at now and then).
            Some(t) => (
                Some(t.start_ticks),
                r.ts_ns > t.gone_ns && (!t.refused || now >= t.checked_ns + RECHECK_NS),
            ),
            // Outside a --pid scope: dropped as such before any move.
            None if pids_scope => return true,
            None => (None, true),
        };
        if pids_scope || !fresh {
            self.report.dropped_exited += 1;
            return false;
        }
        if let Some(t) = self.procs.map.get_mut(&r.pid) {
            t.checked_ns = now;
        }
        match self.env.pin(r.pid, self.procs.pidfds < MAX_PIDFDS) {
            Some(p) if Some(p.start_ticks) != ticks => {
                self.forget_idle();
                self.procs.insert(r.pid, p);
                if ticks.is_some() {
                    self.report.pids_reused += 1;
                    let row = self.report.per_process.entry(r.pid).or_default();
                    row.exited = false;
                    row.refused = false;
                }
                true
            }
            _ => {
                self.report.dropped_exited += 1;
                false
            }
        }
    }

    /// Forgets processes without queued pages once many are remembered
    /// (`--all` meets every process that faults). One with moved pages
    /// still to be checked at the end is kept, without its pidfd.
    fn forget_idle(&mut self) {
        let p = &mut self.procs;
        if p.map.len() < p.forget_above.max(MAX_TRACKED) {
            return;
        }
        let (queue, moved) = (&self.queue, &self.moved);
        let before = p.map.len();
        let mut freed = 0;
        p.map.retain(|pid, t| {
            if queue.has_process(*pid) {
                return true;
            }
            let fd = t.pin.as_ref().is_some_and(Pinned::has_pidfd);
            freed += usize::from(fd);
            if !moved.contains_key(pid) {
                return false;
            }
            if fd {
                t.pin = Some(Pinned::with_start(*pid, t.start_ticks));
            }
            true
        });
        p.pidfds -= freed;
        // Not again before the table has doubled: forgetting stays cheap
        // per request even when every process remembered is kept.
        p.forget_above = 2 * p.map.len().max(before / 2);
    }

    /// Right before a call for `pid`: is it still the process pinned? If
    /// not, its pages (`batch` taken off the queue for this call, and the
    /// rest) are dropped and false returned.
    pub(super) fn still_there(&mut self, pid: u32, batch: usize) -> bool {
        let alive = self.procs.pin(pid).is_some_and(|p| self.env.alive(p));
        if !alive {
            let esrch = std::io::Error::from_raw_os_error(libc::ESRCH);
            self.drop_process(pid, &esrch, batch);
        }
        alive
    }

    /// Has every process of a `--pid` scope exited? (Never, for `--all`
    /// and `--cgroup`, which take processes started later.)
    pub fn scope_exited(&mut self) -> bool {
        let Scope::Pids(pids) = &self.scope else {
            return false;
        };
        let pids: Vec<u32> = pids.keys().copied().collect();
        let mut all = true;
        for pid in pids {
            if self.procs.pin(pid).is_some() {
                all &= !self.still_there(pid, 0);
            }
        }
        all
    }
}
