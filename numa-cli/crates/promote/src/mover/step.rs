//! One step of the mover: at most one batch, for the first target in turn
//! that can take pages now. A target at its floor (or whose free memory
//! cannot be read) is skipped until it may have room again, so it never
//! holds back another; the rate limit is global and makes every target
//! wait alike.
use super::{Env, Mover, Step, PAGE};

/// How long a target at its floor is left alone before it is read again.
const FLOOR_RECHECK_NS: u64 = 100_000_000;
/// How long a target whose meminfo cannot be read is left alone.
const MEMINFO_RETRY_NS: u64 = 1_000_000_000;
/// The least a rate-limit wait lasts.
const MIN_RATE_WAIT_NS: u64 = 1_000_000;

/// What serving one target came to.
enum Served {
    /// A call was made, or work dropped: step again.
    Worked,
    /// This target cannot take pages for this many ns; try another.
    Blocked(u64),
    /// The rate limit: nothing may move for this many ns.
    Rate(u64),
}

impl<E: Env> Mover<E> {
    /// One batch at most.
    pub fn step(&mut self) -> Step {
        if self.cfg.dry_run {
            // Nothing is ever moved.
            return Step::Idle;
        }
        let now = self.env.now_ns();
        self.queue.release_due(now);
        if self.queue.is_empty() {
            return Step::Idle;
        }
        let ns = self.bucket.wait_ns(now, PAGE);
        if ns > 0 {
            self.report.rate_waits += 1;
            return Step::Wait(ns.max(MIN_RATE_WAIT_NS));
        }
        let mut wait = self.queue.next_due().map(|d| d.saturating_sub(now).max(1));
        let mut targets = std::mem::take(&mut self.targets);
        self.queue.ready_targets(&mut targets);
        // Round robin: start after the target served last.
        let start = self
            .last_target
            .and_then(|last| targets.iter().position(|t| *t > last))
            .unwrap_or(0);
        let mut step = None;
        for i in 0..targets.len() {
            let target = targets[(start + i) % targets.len()];
            match self.serve(target, now) {
                Served::Worked => {
                    self.last_target = Some(target);
                    step = Some(Step::Worked);
                    break;
                }
                Served::Blocked(ns) => wait = Some(wait.map_or(ns, |w| w.min(ns))),
                Served::Rate(ns) => {
                    step = Some(Step::Wait(ns));
                    break;
                }
            }
        }
        self.targets = targets;
        step.unwrap_or(wait.map_or(Step::Idle, Step::Wait))
    }

    fn block(&mut self, target: u32, now: u64, ns: u64) -> Served {
        self.blocked.insert(target, now + ns);
        Served::Blocked(ns)
    }

    /// A batch for `target` from the process whose turn it is there.
    fn serve(&mut self, target: u32, now: u64) -> Served {
        if let Some(&until) = self.blocked.get(&target) {
            if until > now {
                return Served::Blocked(until - now);
            }
            self.blocked.remove(&target);
        }
        let Some((pid, head)) = self.queue.front(target) else {
            return Served::Blocked(FLOOR_RECHECK_NS);
        };
        if !self.scope.allows_now(pid) {
            self.report.dropped_out_of_scope += self.queue.drop_process(pid) as u64;
            self.settle(pid);
            self.sync_pending();
            return Served::Worked;
        }
        let want = self.sizer.pages() as u64;
        let Some(headroom) = self.headroom(target, now, want.max(head)) else {
            // Without the node's free memory the floor cannot be kept.
            self.report.meminfo_errors += 1;
            return self.block(target, now, MEMINFO_RETRY_NS);
        };
        let headroom_pages = headroom / PAGE;
        if headroom_pages < head {
            self.report.floor_waits += 1;
            return self.block(target, now, FLOOR_RECHECK_NS);
        }
        let rate_pages = self.bucket.available(now) / PAGE;
        let mut budget = want.min(headroom_pages).min(rate_pages);
        if budget < head {
            // A folio larger than the batch or the tokens left: it goes
            // alone once the bucket holds it (or is full, for one larger
            // than the burst: the bucket then runs into debt).
            let ns = self.bucket.wait_ns(now, head * PAGE);
            if ns > 0 {
                self.report.rate_waits += 1;
                return Served::Rate(ns.max(MIN_RATE_WAIT_NS));
            }
            budget = head;
        }
        let (pid, batch) = self.queue.take_batch(target, budget);
        if !batch.is_empty() {
            self.execute(pid, target, batch);
        }
        self.settle(pid);
        self.sync_pending();
        Served::Worked
    }
}
