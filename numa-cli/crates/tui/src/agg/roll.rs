//! The end of an interval: rates per second, the rate histories, heat
//! slots, and pruning of idle processes.
use numa_core::decode::Snapshot;

use super::{procs::rates_of, Aggregator, HISTORY, MIN_ROLL_NS};

impl Aggregator {
    /// Starts a new interval at `now` (event-time ns): rates, histories,
    /// heat slots. Returns false when too little time passed.
    pub(super) fn roll(&mut self, now: u64) -> bool {
        let last = match self.last_roll_ts {
            Some(t) => t,
            None => self
                .window
                .first()
                .map(|s| s.ts_ns)
                .or(self.first_ts)
                .unwrap_or(now),
        };
        if now < last.saturating_add(MIN_ROLL_NS) {
            return false;
        }
        let dt_s = (now - last) as f64 / 1e9;
        self.last_roll_ts = Some(now);
        self.last_dt_s = dt_s;
        self.sys_rates.counts = rates_of(&self.sys, &self.sys_prev, dt_s);
        self.sys_prev = self.sys;
        self.sys_rates.models = self
            .models
            .iter_mut()
            .map(|m| {
                let r = m.promote.saturating_sub(m.prev_promote) as f64 / dt_s;
                m.prev_promote = m.promote;
                r
            })
            .collect();
        self.roll_vmstat();
        let (pingpong, _, _) = self.lifecycle.counts();
        self.pingpong_s = pingpong.saturating_sub(self.pingpong_at_roll) as f64 / dt_s;
        self.pingpong_at_roll = pingpong;
        for p in self.procs.values_mut() {
            p.tally.roll(dt_s);
            p.roll_heat();
        }
        for (_, t) in self.cgroups.iter_mut() {
            t.roll(dt_s);
        }
        self.procs.advance(now);
        let r = &self.sys_rates.counts;
        let local_pct = if r[0] > 0.0 { 100.0 * r[1] / r[0] } else { 0.0 };
        // In BASE_SERIES' order.
        let v = &self.vmstat_rates;
        let mut points = vec![
            r[0],
            r[2],
            r[3],
            r[8],
            v.promoted,
            r[4],
            r[5],
            r[6],
            v.demoted,
            self.pingpong_s,
            r[7],
            local_pct,
        ];
        points.extend(self.sys_rates.models.iter().copied());
        for (h, v) in self.history.iter_mut().zip(points) {
            if h.len() == HISTORY {
                h.pop_front();
            }
            h.push_back(v);
        }
        true
    }
}

/// The vmstat counters `top` shows, in pages as vmstat counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct VmstatPages<T> {
    pub(super) demoted: T,
    /// pgpromote_success.
    pub(super) promoted: T,
}

impl VmstatPages<u64> {
    fn of(s: &Snapshot) -> Self {
        let sum = |keys: &[&str]| keys.iter().filter_map(|k| s.vmstat.get(*k)).sum();
        VmstatPages {
            demoted: sum(&["pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged"]),
            promoted: sum(&["pgpromote_success"]),
        }
    }
}

impl Aggregator {
    /// vmstat's rates from the snapshot of the last roll (at first, the
    /// window's first) to the latest, when a newer one came (snapshots may
    /// come slower than rolls).
    fn roll_vmstat(&mut self) {
        let (Some(first), Some(last)) = (self.window.first(), self.window.last()) else {
            return;
        };
        let (t0, before) = self
            .snap_at_roll
            .unwrap_or_else(|| (first.ts_ns, VmstatPages::of(first)));
        if last.ts_ns <= t0 {
            self.snap_at_roll = Some((t0, before));
            return;
        }
        let now = VmstatPages::of(last);
        let dt_s = (last.ts_ns - t0) as f64 / 1e9;
        let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt_s;
        self.vmstat_rates = VmstatPages {
            demoted: rate(now.demoted, before.demoted),
            promoted: rate(now.promoted, before.promoted),
        };
        self.snap_at_roll = Some((last.ts_ns, now));
    }
}
