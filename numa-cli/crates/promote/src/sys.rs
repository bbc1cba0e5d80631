//! The syscall edge of the promoter: every `move_pages(2)` goes through
//! [`syscall`], which tests replace with a thread-local fake
//! ([`fake::set`]), the way aya's `sys/fake.rs` does.
use std::io;

/// `MPOL_MF_MOVE`: move pages mapped only by this process (include/uapi/linux/mempolicy.h).
pub const MPOL_MF_MOVE: i32 = 1 << 1;

/// The calls the promoter makes.
#[derive(Debug)]
pub enum Syscall<'a> {
    /// `move_pages(pid, count, pages, nodes, status, flags)`; `nodes: None`
    /// only queries where the pages are.
    MovePages {
        pid: u32,
        pages: &'a [u64],
        nodes: Option<&'a [i32]>,
        status: &'a mut [i32],
        flags: i32,
    },
}

/// Runs `call`; `Ok` is the kernel's non-negative return value.
pub fn syscall(call: Syscall<'_>) -> io::Result<i64> {
    #[cfg(test)]
    let mut call = call;
    #[cfg(test)]
    {
        if let Some(r) = fake::call(&mut call) {
            return r;
        }
    }
    real(call)
}

fn real(call: Syscall<'_>) -> io::Result<i64> {
    match call {
        Syscall::MovePages {
            pid,
            pages,
            nodes,
            status,
            flags,
        } => {
            if nodes.is_some_and(|n| n.len() != pages.len()) || status.len() != pages.len() {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            // SAFETY: `pages`, `nodes` (when given) and `status` are valid
            // for `pages.len()` elements (checked above); the kernel only
            // reads the first two and writes `status`. The addresses are
            // *values* in the target's address space, never dereferenced here.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_move_pages,
                    pid as libc::c_long,
                    pages.len() as libc::c_ulong,
                    pages.as_ptr(),
                    nodes.map_or(std::ptr::null(), <[i32]>::as_ptr),
                    status.as_mut_ptr(),
                    flags as libc::c_long,
                )
            };
            if rc < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(rc)
            }
        }
    }
}

/// Moves `pages` of `pid` to `nodes` (one node per page), statuses into `status`.
pub fn move_pages(pid: u32, pages: &[u64], nodes: &[i32], status: &mut [i32]) -> io::Result<i64> {
    syscall(Syscall::MovePages {
        pid,
        pages,
        nodes: Some(nodes),
        status,
        flags: MPOL_MF_MOVE,
    })
}

/// Where `pages` of `pid` are: node per page in `status`, or -errno.
pub fn query_pages(pid: u32, pages: &[u64], status: &mut [i32]) -> io::Result<i64> {
    syscall(Syscall::MovePages {
        pid,
        pages,
        nodes: None,
        status,
        flags: 0,
    })
}

#[cfg(test)]
pub mod fake {
    //! A thread-local replacement for the kernel in tests.
    use std::{cell::RefCell, io};

    use super::Syscall;

    type Handler = Box<dyn FnMut(&mut Syscall<'_>) -> io::Result<i64>>;

    thread_local! {
        static HANDLER: RefCell<Option<Handler>> = const { RefCell::new(None) };
    }

    /// Every syscall of this thread goes to `f` until [`clear`].
    pub fn set(f: impl FnMut(&mut Syscall<'_>) -> io::Result<i64> + 'static) {
        HANDLER.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    pub fn clear() {
        HANDLER.with(|h| *h.borrow_mut() = None);
    }

    pub(super) fn call(call: &mut Syscall<'_>) -> Option<io::Result<i64>> {
        HANDLER.with(|h| h.borrow_mut().as_mut().map(|f| f(call)))
    }
}
