//! Telling a process that exited (or is exiting) from pages that failed:
//! its pages are dropped, not retried or counted as failures.
use std::io;

use super::{Env, Mover};

/// PF_EXITING in the flags of a /proc/PID/stat line: the process is in
/// do_exit, unmapping its memory (move_pages then fails page by page).
pub(super) fn stat_says_exiting(stat: &str) -> bool {
    const PF_EXITING: u64 = 0x4;
    // After the comm's closing parenthesis: state ppid pgrp session tty_nr
    // tpgid flags ...
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0)
}

/// Every page of a call failed as gone (EFAULT: no mapping; ENOENT).
pub(super) fn all_gone(status: &[i32]) -> bool {
    !status.is_empty()
        && status
            .iter()
            .all(|&s| s == -libc::EFAULT || s == -libc::ENOENT)
}

impl<E: Env> Mover<E> {
    /// Drops `pid`'s pages (`batch` taken off the queue, and the rest) and
    /// remembers it gone: exited (ESRCH), or refusing (EPERM).
    pub(super) fn drop_process(&mut self, pid: u32, err: &io::Error, batch: usize) {
        let exited = err.raw_os_error() == Some(libc::ESRCH);
        let now = self.env.now_ns();
        self.procs.gone(pid, now, !exited);
        let n = self.queue.drop_process(pid) + batch;
        self.settle(pid);
        self.report.dropped_exited += n as u64;
        let p = self.report.per_process.entry(pid).or_default();
        if exited {
            if !p.exited {
                self.report.processes_exited += 1;
            }
            p.exited = true;
        } else {
            if !p.refused {
                self.report.processes_refused += 1;
            }
            p.refused = true;
        }
    }
}
