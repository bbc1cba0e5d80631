//! The mover's own thread: drains the channel, steps the mover, and sleeps
//! only as long as the next step has to wait.
use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc::{Receiver, RecvTimeoutError, TryRecvError},
        Arc,
    },
    time::Duration,
};

use super::{Env, Mover, MoverReport, StatePublisher, Step};
use crate::queue::Request;

/// How long the mover sleeps at most before looking at the channel again.
const POLL_NS: u64 = 50_000_000;
/// How often the processes of a `--pid` scope are checked for an exit.
const SCOPE_CHECK_NS: u64 = 250_000_000;

/// Runs `mover` on its own thread until `stop` (after the call in flight)
/// or until the channel closes and the queue is empty. With `state`, the
/// live counters are published about once a second, and the file is
/// removed at the end. Once every process of a `--pid` scope has exited,
/// `Shared::scope_exited` says so (the run has nothing left to do).
pub fn spawn<E: Env + Send + 'static>(
    mut mover: Mover<E>,
    rx: Receiver<Request>,
    stop: Arc<AtomicBool>,
    mut state: Option<StatePublisher>,
) -> std::io::Result<std::thread::JoinHandle<MoverReport>> {
    std::thread::Builder::new()
        .name("promote-mover".into())
        .spawn(move || {
            let started = mover.env.now_ns();
            mover.shared.started_ns.store(started, Ordering::Relaxed);
            let mut open = true;
            let mut scope_checked = started;
            while !stop.load(Ordering::Acquire) {
                if let Some(p) = &mut state {
                    p.tick(&mover, false);
                }
                let now = mover.env.now_ns();
                if now.saturating_sub(scope_checked) >= SCOPE_CHECK_NS {
                    scope_checked = now;
                    if mover.scope_exited() {
                        mover.shared.scope_exited.store(true, Ordering::Release);
                    }
                }
                while open {
                    match rx.try_recv() {
                        Ok(r) => mover.push(r),
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => open = false,
                    }
                }
                let wait_ns = match mover.step() {
                    Step::Worked => continue,
                    Step::Idle if !open => break,
                    Step::Idle => POLL_NS,
                    Step::Wait(ns) => ns.min(POLL_NS),
                };
                if open {
                    match rx.recv_timeout(Duration::from_nanos(wait_ns)) {
                        Ok(r) => mover.push(r),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => open = false,
                    }
                } else {
                    std::thread::sleep(Duration::from_nanos(wait_ns));
                }
            }
            if let Some(p) = &mut state {
                p.tick(&mover, true);
                p.writer.remove();
            }
            mover.finish()
        })
}
