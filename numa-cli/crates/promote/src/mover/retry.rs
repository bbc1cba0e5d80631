//! Failed pages go back to the queue with a growing backoff, until
//! `max_retries`.
use super::{Env, Mover};
use crate::queue::Pending;

impl<E: Env> Mover<E> {
    /// Puts a failed page back with a backoff, or gives up on it after
    /// `max_retries`.
    pub(super) fn retry_or_give_up(&mut self, pid: u32, addr: u64, mut p: Pending, now: u64) {
        p.tries += 1;
        if p.tries > self.cfg.max_retries {
            self.report.gave_up += 1;
        } else {
            p.due_ns = now + self.cfg.retry_backoff_ms * 1_000_000 * u64::from(p.tries);
            self.queue.retry(pid, addr, p);
        }
    }
}
