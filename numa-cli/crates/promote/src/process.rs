//! A process, not just its number. A pid is reused once its process has
//! exited, and move_pages(2) takes a pid: pages queued for one process
//! must never be moved in another that got its number. [`Pinned`] holds
//! the process's start time (field 22 of /proc/PID/stat, fixed for its
//! life and different for the next process with that pid) and, where the
//! kernel gives one, a pidfd: it stays bound to that process, and polls
//! readable once it has exited, whatever its pid names since.
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use numa_host::promoter_state::pid_start_ticks;

/// One process, pinned when first seen.
#[derive(Debug)]
pub struct Pinned {
    pub pid: u32,
    /// `starttime` of /proc/PID/stat (clock ticks after boot).
    pub start_ticks: u64,
    pidfd: Option<OwnedFd>,
}

impl Pinned {
    /// Pins the process that `pid` names now (None: no such process, or it
    /// exited while being pinned). With `pidfd`, also opens a pidfd when
    /// the kernel allows (else the start time alone tells processes apart).
    pub fn pin(pid: u32, pidfd: bool) -> Option<Pinned> {
        let before = pid_start_ticks(pid)?;
        let fd = if pidfd { pidfd_open(pid) } else { None };
        // The pidfd is of the process the pid named when it was opened:
        // the same start time before and after means it is this one.
        let after = pid_start_ticks(pid)?;
        (before == after).then_some(Pinned {
            pid,
            start_ticks: after,
            pidfd: fd,
        })
    }

    /// A pin without a pidfd, for a process whose start time is known
    /// (tests stand in for processes this way).
    pub fn with_start(pid: u32, start_ticks: u64) -> Pinned {
        Pinned {
            pid,
            start_ticks,
            pidfd: None,
        }
    }

    pub fn has_pidfd(&self) -> bool {
        self.pidfd.is_some()
    }

    /// Is the pinned process still running (not exited, pid not reused)?
    pub fn alive(&self) -> bool {
        match &self.pidfd {
            Some(fd) => !pidfd_readable(fd),
            None => pid_start_ticks(self.pid) == Some(self.start_ticks),
        }
    }
}

/// `pidfd_open(2)`; None where pidfds are unavailable (before 5.3, or
/// refused by a seccomp filter) or the fd limit is reached.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1;
    // no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A pidfd polls readable once its process has exited.
fn pidfd_readable(fd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a zero timeout; poll only writes `revents`.
    let rc = unsafe { libc::poll(&mut p, 1, 0) };
    rc > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_alive_until_it_exits_and_its_pin_says_so_after() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let pid = child.id();
        let with_fd = Pinned::pin(pid, true).expect("the child is pinned");
        let by_start = Pinned::pin(pid, false).expect("the child is pinned");
        assert!(with_fd.alive() && by_start.alive());
        assert_eq!(with_fd.start_ticks, by_start.start_ticks);
        child.kill().expect("kill");
        child.wait().expect("reaped");
        assert!(!with_fd.alive(), "the pidfd sees the exit");
        assert!(!by_start.alive(), "the start time is gone with it");
        assert!(Pinned::pin(pid, true).is_none_or(|p| p.start_ticks != with_fd.start_ticks));
        // Another start time: another process, whatever the pid names.
        let me = std::process::id();
        let ticks = pid_start_ticks(me).expect("own stat");
        assert!(Pinned::with_start(me, ticks).alive());
        assert!(!Pinned::with_start(me, ticks + 1).alive());
    }
}
