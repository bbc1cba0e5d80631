//! The end of an interval: rates per second, the rate histories, heat
//! slots, and pruning of idle processes.
use numa_core::decode::Snapshot;

use super::{procs::rates_of, Aggregator, HISTORY, IDLE_PRUNE_NS, MIN_ROLL_NS};

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
        if let Some(s) = self.window.last() {
            let d = demoted(s);
            if let Some((t0, d0)) = self.snap_at_roll {
                if s.ts_ns > t0 {
                    self.demoted_rate = d.saturating_sub(d0) as f64 / ((s.ts_ns - t0) as f64 / 1e9);
                    self.snap_at_roll = Some((s.ts_ns, d));
                }
            } else {
                self.snap_at_roll = Some((s.ts_ns, d));
            }
        }
        for p in self.procs.iter_mut() {
            p.rates.counts = rates_of(&p.counts, &p.prev, dt_s);
            p.prev = p.counts;
            for (i, r) in p.rates.models.iter_mut().enumerate() {
                *r = p.model_promote[i].saturating_sub(p.prev_model_promote[i]) as f64 / dt_s;
                p.prev_model_promote[i] = p.model_promote[i];
            }
            p.roll_heat();
        }
        self.procs
            .retain(|p| now.saturating_sub(p.last_ts) < IDLE_PRUNE_NS);
        let r = &self.sys_rates.counts;
        let local_pct = if r[0] > 0.0 { 100.0 * r[1] / r[0] } else { 0.0 };
        let mut points = vec![
            r[0],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            self.demoted_rate,
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

fn demoted(s: &Snapshot) -> u64 {
    ["pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged"]
        .iter()
        .filter_map(|k| s.vmstat.get(*k))
        .sum()
}
