//! The processes the mover serves, pinned ([`Pinned`]): a request is for
//! the process its pid named at the fault, and every move_pages call checks
//! that the pid still names it. A process that exited (or refused) is
//! remembered with its start time, so a later process that gets its pid is
//! told apart: under `--all` or `--cgroup` it is served on its own account,
//! under `--pid` it is not in scope.
//!
//! The table is numa-core's [`ProcTable`], on the faults' trace time: a
//! process silent for its gone bound, or the least recently active past
//! [`MAX_TRACKED`], is forgotten, except while the mover still has work
//! for it, which holds it ([`Mover::settle`]): pages queued, moved pages to
//! check at the end, or a `--pid` scope's process (whose identity must
//! outlive its exit, so that a reuse of its pid stays out of scope). A
//! process is gone for the mover when the kernel says so (ESRCH, its
//! pidfd, its start time); that is kept in the entry, not by dropping it.
use numa_core::model::proctable::ProcTable;

use super::{Env, Mover};
use crate::{process::Pinned, queue::Request, scope::Scope};

/// Pidfds held at most (one per process served); past that, processes
/// are told apart by their start time alone, so the fd limit is never
/// reached.
const MAX_PIDFDS: usize = 256;
/// Processes remembered, held ones aside, before the least recently
/// active go.
pub(super) const MAX_TRACKED: usize = 4096;
/// A process gone (or refusing) is looked at again at most this often.
const RECHECK_NS: u64 = 1_000_000_000;

#[derive(Debug, Default)]
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

impl Tracked {
    fn pinned(pin: Pinned) -> Tracked {
        Tracked {
            start_ticks: pin.start_ticks,
            pin: Some(pin),
            refused: false,
            gone_ns: 0,
            checked_ns: 0,
        }
    }

    fn has_pidfd(&self) -> bool {
        self.pin.as_ref().is_some_and(Pinned::has_pidfd)
    }
}

#[derive(Debug)]
pub(super) struct Procs {
    table: ProcTable<Tracked>,
    /// Pidfds open in the table's entries.
    pidfds: usize,
}

impl Default for Procs {
    fn default() -> Self {
        Procs::new(MAX_TRACKED)
    }
}

impl Procs {
    fn new(max_tracked: usize) -> Self {
        Procs {
            table: ProcTable::new(max_tracked, usize::MAX).keep_dropped(),
            pidfds: 0,
        }
    }

    /// Remembers `pin` for `pid`, active at `ts_ns`, replacing what the
    /// pid named before.
    fn insert(&mut self, pid: u32, pin: Pinned, ts_ns: u64) {
        self.pidfds += usize::from(pin.has_pidfd());
        let slot = self.table.touch(pid, ts_ns, Tracked::default);
        let old = std::mem::replace(slot, Tracked::pinned(pin));
        self.pidfds -= usize::from(old.has_pidfd());
        self.reap();
    }

    /// Moves the table's clock to `ts_ns`: processes silent since the
    /// gone bound are forgotten.
    fn advance(&mut self, ts_ns: u64) {
        self.table.advance(ts_ns);
        self.reap();
    }

    /// Marks `pid`, held in the table as of `ts_ns`, active then.
    fn active(&mut self, pid: u32, ts_ns: u64) {
        self.advance(ts_ns);
        if self.table.contains(pid) {
            self.table.touch(pid, ts_ns, Tracked::default);
        }
    }

    /// Accounts the pidfds of the entries the table dropped (closed with
    /// them).
    fn reap(&mut self) {
        for (_, t) in self.table.take_dropped() {
            self.pidfds -= usize::from(t.has_pidfd());
        }
    }

    /// Marks `pid` gone (exited, or refused) at `now`, closing its pidfd.
    pub(super) fn gone(&mut self, pid: u32, now: u64, refused: bool) {
        if let Some(t) = self.table.get_mut(pid) {
            if t.pin.take().is_some_and(|p| p.has_pidfd()) {
                self.pidfds -= 1;
            }
            t.refused = refused;
            t.gone_ns = now;
            t.checked_ns = now;
        }
    }

    pub(super) fn pin(&self, pid: u32) -> Option<&Pinned> {
        self.table.get(pid)?.pin.as_ref()
    }

    /// Processes remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }
}

impl<E: Env> Mover<E> {
    /// Pins the processes of a `--pid` scope: the pid must still name the
    /// process the scope was made for. They are held for the whole run.
    pub(super) fn pin_scope(&mut self) {
        let Scope::Pids(pids) = &self.scope else {
            return;
        };
        let pids: Vec<(u32, u64)> = pids.iter().map(|(p, t)| (*p, *t)).collect();
        for (pid, ticks) in pids {
            match self.env.pin(pid, true) {
                Some(p) if p.start_ticks == ticks => self.procs.insert(pid, p, 0),
                _ => {
                    self.procs.insert(pid, Pinned::with_start(pid, ticks), 0);
                    let esrch = std::io::Error::from_raw_os_error(libc::ESRCH);
                    self.drop_process(pid, &esrch, 0);
                }
            }
            self.settle(pid);
        }
    }

    /// Holds `pid` in the table while the mover has work for it (pages
    /// queued, moved pages to check at the end, or a `--pid` scope's
    /// process), and releases it to the table's rules when it has none.
    pub(super) fn settle(&mut self, pid: u32) {
        let held = self.scope.pinned(pid)
            || self.queue.has_process(pid)
            || self.moved.get(&pid).is_some_and(|m| !m.is_empty());
        if held {
            self.procs.table.hold(pid);
        } else {
            self.procs.table.release(pid);
        }
    }

    /// Is `r` for a process to serve? Pins its process at first sight.
    pub(super) fn admit(&mut self, r: &Request) -> bool {
        let pids_scope = matches!(self.scope, Scope::Pids(_));
        let now = self.env.now_ns();
        self.procs.advance(r.ts_ns);
        let (ticks, fresh) = match self.procs.table.get(r.pid) {
            Some(t) if t.pin.is_some() => {
                self.procs.active(r.pid, r.ts_ns);
                return true;
            }
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
        if let Some(t) = self.procs.table.get_mut(r.pid) {
            t.checked_ns = now;
        }
        match self.env.pin(r.pid, self.procs.pidfds < MAX_PIDFDS) {
            Some(p) if Some(p.start_ticks) != ticks => {
                self.procs.insert(r.pid, p, r.ts_ns);
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

#[cfg(test)]
mod tests {
    use numa_core::model::GONE_AFTER_NS;

    use super::*;

    fn own_pin() -> Pinned {
        let pin = Pinned::pin(std::process::id(), true);
        let pin = pin.filter(Pinned::has_pidfd);
        assert!(pin.is_some(), "this host's kernel gives no pidfd");
        pin.unwrap_or_else(|| Pinned::with_start(0, 0))
    }

    fn open_pidfds(p: &Procs) -> usize {
        p.table.values().filter(|t| t.has_pidfd()).count()
    }

    /// Entries the table drops (past its bound, gone after a silence,
    /// replaced) close their pidfds, and the count of open ones follows.
    #[test]
    fn dropped_entries_give_back_their_pidfds() {
        let mut p = Procs::new(4);
        for pid in 1..=20 {
            p.insert(pid, own_pin(), u64::from(pid));
            assert_eq!(p.pidfds, open_pidfds(&p));
        }
        assert_eq!((p.len(), p.pidfds), (4, 4));
        p.insert(20, own_pin(), 21);
        p.gone(19, 22, false);
        assert_eq!((p.pidfds, open_pidfds(&p)), (3, 3));
        p.active(20, 20 + GONE_AFTER_NS);
        assert_eq!((p.len(), p.pidfds, open_pidfds(&p)), (1, 1, 1));
        p.active(20, 20 + 2 * GONE_AFTER_NS);
        assert_eq!((p.len(), p.pidfds), (0, 0));
    }

    /// A held process outlives the bound and the silence, then goes by the
    /// table's rules once released.
    #[test]
    fn held_processes_are_kept_until_released() {
        let mut p = Procs::new(2);
        p.insert(1, own_pin(), 0);
        p.table.hold(1);
        for pid in 2..10 {
            p.insert(pid, own_pin(), u64::from(pid) * GONE_AFTER_NS);
        }
        assert!(p.pin(1).is_some_and(Pinned::has_pidfd));
        assert_eq!((p.len(), p.pidfds), (2, 2));
        p.table.release(1);
        p.insert(10, own_pin(), 10 * GONE_AFTER_NS);
        assert!(p.pin(1).is_none());
        assert_eq!(p.pidfds, open_pidfds(&p));
    }
}
