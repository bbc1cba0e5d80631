//! The promoter state file other processes (`numatrace top`, the exporter)
//! read: the mover's live counters, published about once a second.
use std::sync::atomic::Ordering;

use numa_host::promoter_state::{PromoterState, Writer, PUBLISH_EVERY_S};

use super::{Env, Mover, PromoterStats};

impl<E: Env> Mover<E> {
    /// The live counters for the state file (the caller sets identity,
    /// scope and model once).
    pub fn fill_state(&self, s: &mut PromoterState) {
        let r = &self.report;
        let st = &r.statuses;
        let live = PromoterStats::read(&self.shared, 0);
        // Pages, as moved_bytes and vmstat's pgpromote_success count.
        s.moved_pages = r.moved_pages;
        s.moved_bytes = r.moved_bytes;
        s.already_on_target = st.already_on_target;
        s.failures = st.failures();
        s.failures_by_status = [
            ("ebusy", st.ebusy),
            ("enomem", st.enomem),
            ("eacces", st.eacces),
            ("efault", st.efault),
            ("enoent", st.enoent),
            ("not_migrated", st.not_migrated),
            ("other", st.other),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        s.queue_depth = live.queue_depth;
        s.queue_overflows = live.queue_overflows;
        s.would_move_pages = r.would_move_pages;
        s.rate_limit_bytes_per_s = self.cfg.rate_bytes_per_s;
        s.batch_ms = self.cfg.batch_ms;
        s.batch_pages = self.sizer.pages() as u64;
        s.move_calls = r.move_calls;
        s.move_pages_seconds = (r.move_ns + r.query_ns) as f64 / 1e9;
        s.mean_call_ms = (r.move_calls > 0).then(|| r.move_ns as f64 / 1e6 / r.move_calls as f64);
        s.rate_waits = r.rate_waits;
        s.floor_waits = r.floor_waits;
        s.scan_index_entries = self.shared.scan_index_entries.load(Ordering::Relaxed);
        s.scan_index_processes = self.shared.scan_index_processes.load(Ordering::Relaxed);
        s.pingpong = self.shared.pingpong.load(Ordering::Relaxed);
    }
}

/// The state file of a running promoter: where, and the fields set once.
pub struct StatePublisher {
    pub writer: Writer,
    pub base: PromoterState,
    last_ns: Option<u64>,
    warned: bool,
}

impl StatePublisher {
    pub fn new(writer: Writer, base: PromoterState) -> Self {
        StatePublisher {
            writer,
            base,
            last_ns: None,
            warned: false,
        }
    }

    /// Publishes when [`PUBLISH_EVERY_S`] has passed (or `force`).
    pub(super) fn tick<E: Env>(&mut self, mover: &Mover<E>, force: bool) {
        let now = mover.env.now_ns();
        if !force
            && self
                .last_ns
                .is_some_and(|t| (now.saturating_sub(t) as f64) < PUBLISH_EVERY_S * 1e9)
        {
            return;
        }
        self.last_ns = Some(now);
        mover.fill_state(&mut self.base);
        if let Err(e) = self.writer.publish(&mut self.base) {
            if !self.warned {
                log::warn!(
                    "cannot publish the promoter state: {e} (top and export will not show it)"
                );
                self.warned = true;
            }
        }
    }
}
