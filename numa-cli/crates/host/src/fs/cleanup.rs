//! Temporary files removed, and numatrace's kdamond stopped, on a stop
//! signal. A process that has not taken
//! SIGINT, SIGTERM and SIGHUP for a clean stop of its own
//! ([`stop_signals_handled`]) is killed by them, which runs no destructor:
//! a temporary being written (`dump -o`, tens of MB) would stay behind, and
//! the kdamond numatrace started while attaching would keep running. So
//! while one exists, a handler removes every temporary listed here, stops
//! the kdamond, and then dies of the same signal, as it would have without
//! the handler.
//!
//! The handler may only use async-signal-safe calls: the names are kept in
//! fixed buffers, never allocated or freed while it might read them.
use std::{
    cell::UnsafeCell,
    path::Path,
    sync::{
        atomic::{AtomicBool, AtomicU8, Ordering},
        Once,
    },
};

/// Temporaries alive at once: one per output being written (a command
/// writes one or two). One more is not cleaned on a signal, nothing worse.
const SLOTS: usize = 8;
/// Longest name kept (with its NUL); a longer one is not cleaned.
const NAME_MAX: usize = 4096;

const FREE: u8 = 0;
const FILLING: u8 = 1;
const LIVE: u8 = 2;
/// Taken by the handler, which never gives it back: the process dies.
const DYING: u8 = 3;

struct Entry {
    state: AtomicU8,
    name: UnsafeCell<[u8; NAME_MAX]>,
}

// SAFETY: `name` is written only by the thread that moved `state` from
// FREE to FILLING, and read only by the handler after it moved it from
// LIVE to DYING; the state's acquire/release orders the two.
unsafe impl Sync for Entry {}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Entry = Entry {
    state: AtomicU8::new(FREE),
    name: UnsafeCell::new([0; NAME_MAX]),
};
static ENTRIES: [Entry; SLOTS] = [EMPTY; SLOTS];
static GRACEFUL: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

/// Says that this process now stops cleanly on SIGINT, SIGTERM and SIGHUP
/// (its own handler returns through the destructors, which remove the
/// temporaries): the handler here then leaves those signals alone.
pub fn stop_signals_handled() {
    GRACEFUL.store(true, Ordering::SeqCst);
}

/// A temporary file's entry; dropping it takes the name off the list.
pub(crate) struct Slot(usize);

impl Slot {
    /// Lists `path` for removal on a stop signal (`None`: no room, or a
    /// name too long).
    pub(crate) fn enter(path: &Path) -> Option<Slot> {
        let bytes = path.as_os_str().as_encoded_bytes();
        if bytes.len() >= NAME_MAX || bytes.contains(&0) {
            return None;
        }
        INSTALL.call_once(install);
        let i = ENTRIES.iter().position(|e| {
            e.state
                .compare_exchange(FREE, FILLING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })?;
        // SAFETY: FILLING makes this thread the entry's only user.
        let name = unsafe { &mut *ENTRIES[i].name.get() };
        name[..bytes.len()].copy_from_slice(bytes);
        name[bytes.len()] = 0;
        ENTRIES[i].state.store(LIVE, Ordering::Release);
        Some(Slot(i))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Fails only when the handler has taken the entry: the process is
        // about to die and the entry must stay as the handler reads it.
        let _ =
            ENTRIES[self.0]
                .state
                .compare_exchange(LIVE, FREE, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// numatrace's kdamond, stopped by the handler as the kdamond's own
/// destructor would: its `state` file takes `off`, then the kdamond list's
/// `nr_kdamonds` takes `0`. One at most: a process starts one kdamond.
struct KdamondEntry {
    state: AtomicU8,
    /// The two files, NUL-terminated, one after the other.
    paths: UnsafeCell<[u8; NAME_MAX]>,
}

// SAFETY: as `Entry`: written only while FILLING by the thread that took
// it, read by the handler only after it moved LIVE to DYING.
unsafe impl Sync for KdamondEntry {}

static KDAMOND: KdamondEntry = KdamondEntry {
    state: AtomicU8::new(FREE),
    paths: UnsafeCell::new([0; NAME_MAX]),
};

/// While it lives, a stop signal that would kill the process stops the
/// kdamond whose files these are first.
#[derive(Debug)]
pub(crate) struct KdamondSlot;

impl KdamondSlot {
    /// `None`: one is listed already, or the names do not fit.
    pub(crate) fn enter(state_file: &Path, count_file: &Path) -> Option<KdamondSlot> {
        let (a, b) = (
            state_file.as_os_str().as_encoded_bytes(),
            count_file.as_os_str().as_encoded_bytes(),
        );
        if a.len() + b.len() + 2 > NAME_MAX || a.contains(&0) || b.contains(&0) {
            return None;
        }
        INSTALL.call_once(install);
        KDAMOND
            .state
            .compare_exchange(FREE, FILLING, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // SAFETY: FILLING makes this thread the entry's only user.
        let paths = unsafe { &mut *KDAMOND.paths.get() };
        paths[..a.len()].copy_from_slice(a);
        paths[a.len()] = 0;
        paths[a.len() + 1..a.len() + 1 + b.len()].copy_from_slice(b);
        paths[a.len() + 1 + b.len()] = 0;
        KDAMOND.state.store(LIVE, Ordering::Release);
        Some(KdamondSlot)
    }
}

impl Drop for KdamondSlot {
    fn drop(&mut self) {
        // As `Slot`'s: the handler may have taken it.
        let _ = KDAMOND
            .state
            .compare_exchange(LIVE, FREE, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Writes `value` to the NUL-terminated file name at `path`, with
/// async-signal-safe calls only.
///
/// # Safety
/// `path` points to a NUL-terminated name no one changes meanwhile.
unsafe fn write_attr(path: *const libc::c_char, value: &[u8]) {
    // SAFETY: the caller's; open, write and close are async-signal-safe.
    unsafe {
        let fd = libc::open(path, libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC);
        if fd >= 0 {
            libc::write(fd, value.as_ptr().cast(), value.len());
            libc::close(fd);
        }
    }
}

fn stop_kdamond() {
    if KDAMOND
        .state
        .compare_exchange(LIVE, DYING, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let paths = KDAMOND.paths.get().cast::<u8>();
    // SAFETY: DYING keeps the buffer as it is: two NUL-terminated names.
    unsafe {
        let state = paths.cast::<libc::c_char>();
        write_attr(state, b"off");
        let count = state.add(libc::strlen(state) + 1);
        write_attr(count, b"0");
    }
}

/// Registers the handler for each stop signal this process does not
/// ignore (`nohup` ignores SIGHUP: that stays so).
fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: an all-zero sigaction is a valid value for sigaction to
        // fill; a null new action only reads the current one.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0
            || old.sa_sigaction == libc::SIG_IGN
        {
            continue;
        }
        // SAFETY: `on_signal` only makes async-signal-safe calls (atomics,
        // unlink, open, write, close, strlen, signal, raise) and reads
        // buffers no one frees.
        let _ = unsafe { signal_hook_registry::register(sig, move || on_signal(sig)) };
    }
}

fn on_signal(sig: libc::c_int) {
    if GRACEFUL.load(Ordering::SeqCst) {
        return;
    }
    stop_kdamond();
    for e in &ENTRIES {
        if e.state
            .compare_exchange(LIVE, DYING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: DYING keeps the buffer as it is: a NUL-terminated name.
            unsafe { libc::unlink(e.name.get().cast()) };
        }
    }
    // Die of the signal, as without a handler: the exit status says so.
    // SAFETY: both are async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handler_s_stop_writes_off_then_an_empty_list() {
        let dir =
            std::env::temp_dir().join(format!("numatrace-kdamond-slot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (state, count) = (dir.join("state"), dir.join("nr_kdamonds"));
        std::fs::write(&state, "on").expect("state");
        std::fs::write(&count, "1").expect("count");
        // Other tests' kdamonds take the one slot for a moment.
        let slot = (0..500)
            .find_map(|_| {
                KdamondSlot::enter(&state, &count).or_else(|| {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    None
                })
            })
            .expect("the slot");
        stop_kdamond();
        let read = |p: &Path| std::fs::read_to_string(p).expect("read");
        // Written in place, as sysfs takes it: "off" over "on", "0" over "1".
        assert_eq!((read(&state), read(&count)), ("off".into(), "0".into()));
        drop(slot);
        assert_eq!(
            KDAMOND.state.load(Ordering::SeqCst),
            DYING,
            "the handler keeps it"
        );
        KDAMOND.state.store(FREE, Ordering::SeqCst);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
