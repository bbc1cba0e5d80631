//! Failed pages go back to the queue with a growing backoff, until
//! `max_retries`.
use super::{Env, Mover, MoverConfig, MoverReport};
use crate::queue::{Pending, Queue};

impl<E: Env> Mover<E> {
    pub(super) fn retry_or_give_up(&mut self, pid: u32, addr: u64, p: Pending, now: u64) {
        p_retry(
            &mut self.queue,
            &mut self.report,
            &self.cfg,
            pid,
            addr,
            p,
            now,
        );
    }
}

/// Puts a failed page back with a backoff, or gives up on it after
/// `max_retries` (a free function: callers hold other borrows of the mover).
pub(super) fn p_retry(
    queue: &mut Queue,
    report: &mut MoverReport,
    cfg: &MoverConfig,
    pid: u32,
    addr: u64,
    mut p: Pending,
    now: u64,
) {
    p.tries += 1;
    if p.tries > cfg.max_retries {
        report.gave_up += 1;
    } else {
        p.due_ns = now + cfg.retry_backoff_ms * 1_000_000 * u64::from(p.tries);
        queue.retry(pid, addr, p);
    }
}
