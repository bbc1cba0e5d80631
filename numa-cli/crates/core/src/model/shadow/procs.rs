//! The shadow report's per-process rows, bounded under pid churn: a process
//! gone (no hint fault for [`GONE_AFTER_NS`]) leaves the live table; its
//! row is kept only while it ranks among the report's top processes.
//!
//! The report lists the `top_n` rows by hint faults (then pid). A gone
//! process's counts no longer grow while every other row's can only grow,
//! so once `top_n` rows rank above it they always will: dropping it then
//! cannot change the list. A pid that faults again after that silence is a
//! new process (a reused pid looks the same) and gets a row of its own.
use super::{ProcessRow, Rows};
use crate::model::GONE_AFTER_NS;

/// Live processes with rows of their own; past it a new process's faults
/// go to one shared row ([`OTHER_PROCESSES`]) until some are gone. Far
/// more than a host runs at once: only a crafted trace reaches it.
pub(super) const MAX_LIVE: usize = 1 << 16;
/// The pid of the shared row (no pid is this large: pid_max <= 4 Mi).
pub const OTHER_PROCESSES: u32 = u32::MAX;

pub(super) struct Processes {
    live: Rows<u32, ProcessRow>,
    /// Trace time of each live row's latest fault (same index).
    last_ns: Vec<u64>,
    /// Rows of gone processes that may still rank in the report.
    retired: Vec<ProcessRow>,
    top_n: usize,
    /// The latest fault time seen.
    now_ns: u64,
    /// When the next look for gone processes is due.
    next_sweep_ns: u64,
    /// Pids retired by sweeps and not yet taken ([`Self::take_gone`]).
    gone: Vec<u32>,
}

impl Processes {
    pub(super) fn new(top_n: usize) -> Self {
        Processes {
            live: Rows::default(),
            last_ns: Vec::new(),
            retired: Vec::new(),
            top_n,
            now_ns: 0,
            next_sweep_ns: 0,
            gone: Vec::new(),
        }
    }

    /// The pids a sweep found gone since the last call, for the state kept
    /// per page elsewhere (a pid that comes back is a new process).
    pub(super) fn take_gone(&mut self) -> Option<Vec<u32>> {
        (!self.gone.is_empty()).then(|| std::mem::take(&mut self.gone))
    }

    /// The row of `tgid` for a fault at `ts_ns`, made by `new` when the pid
    /// is first seen or its previous process is gone.
    #[inline]
    pub(super) fn get(&mut self, tgid: u32, ts_ns: u64, new: impl Fn() -> ProcessRow) -> usize {
        self.now_ns = self.now_ns.max(ts_ns);
        if self.now_ns >= self.next_sweep_ns {
            self.sweep();
        }
        let n = self.live.len();
        let key = if n >= MAX_LIVE && !self.live.index.contains_key(&tgid) {
            OTHER_PROCESSES
        } else {
            tgid
        };
        let make = || {
            let mut row = new();
            if key == OTHER_PROCESSES {
                row.pid = OTHER_PROCESSES;
                row.comm = "(other processes)".to_owned();
            }
            row
        };
        let i = self.live.get(key, key as usize, make);
        if i == n {
            self.last_ns.push(self.now_ns);
        } else if self.now_ns.saturating_sub(self.last_ns[i]) >= GONE_AFTER_NS {
            // Gone and back: the same as if a sweep had retired it first.
            let old = std::mem::replace(&mut self.live.rows[i], make());
            self.retired.push(old);
        }
        self.last_ns[i] = self.now_ns;
        i
    }

    #[inline]
    pub(super) fn row(&mut self, i: usize) -> &mut ProcessRow {
        &mut self.live.rows[i]
    }

    /// Live rows, and retired rows of gone processes.
    pub(super) fn len(&self) -> (usize, usize) {
        (self.live.len(), self.retired.len())
    }

    /// Every row that may be in the report.
    pub(super) fn rows(&self) -> Vec<ProcessRow> {
        self.live
            .rows
            .iter()
            .chain(&self.retired)
            .cloned()
            .collect()
    }

    /// Retires the gone processes' rows and drops the retired rows that
    /// no longer rank in the report.
    #[cold]
    fn sweep(&mut self) {
        let now = self.now_ns;
        self.next_sweep_ns = now.saturating_add(GONE_AFTER_NS / 4);
        let gone = |t: &u64| now.saturating_sub(*t) >= GONE_AFTER_NS;
        if self.last_ns.iter().any(gone) {
            let old = std::mem::take(&mut self.live);
            let last = std::mem::take(&mut self.last_ns);
            for (row, t) in old.rows.into_iter().zip(last) {
                if gone(&t) {
                    self.gone.push(row.pid);
                    self.retired.push(row);
                } else {
                    self.live.get(row.pid, row.pid as usize, || row);
                    self.last_ns.push(t);
                }
            }
        }
        self.trim_retired();
    }

    /// Keeps the retired rows that rank among the top `top_n` of all rows.
    fn trim_retired(&mut self) {
        let rank = |r: &ProcessRow| (std::cmp::Reverse(r.hint_faults), r.pid);
        if self.top_n == 0 {
            self.retired.clear();
            return;
        }
        let mut ranks: Vec<_> = self
            .live
            .rows
            .iter()
            .chain(&self.retired)
            .map(rank)
            .collect();
        if ranks.len() <= self.top_n {
            return;
        }
        let (_, nth, _) = ranks.select_nth_unstable(self.top_n - 1);
        let nth = *nth;
        self.retired.retain(|r| rank(r) <= nth);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use numa_ebpf_common::{EventKind, Outcome, ScanEvent};

    use super::GONE_AFTER_NS;

    use super::super::Shadow;
    use crate::{
        decode::{fixtures::fault, Event},
        model::policy::{build, KernelDefaults, ModelDefaults},
    };

    const S: u64 = 1_000_000_000;

    fn fault_of(pid: u64, ts: u64, page: u64) -> Event {
        let mut f = fault(ts / 1_000, page, 5000, Outcome::RejectLatency);
        f.pid_tgid = pid << 32 | pid;
        f.ts_ns = ts;
        f.scan_ns = ts.saturating_sub(5 * S);
        Event::Fault(f)
    }

    fn scan_of(pid: u64, ts: u64) -> Event {
        Event::Scan(ScanEvent {
            kind: EventKind::Scan as u32,
            pid_tgid: pid << 32,
            start: 0x7f00_0000_0000,
            end: 0x7f00_0080_0000,
            ts_ns: ts,
            ..Default::default()
        })
    }

    /// Heavy processes that exit early, thousands of short-lived ones (a
    /// scan and three faults each, one a second), and one process that
    /// runs throughout.
    fn churn(short_lived: u64) -> Vec<Event> {
        let mut evs = Vec::new();
        for pid in 1..=5u64 {
            for k in 0..(3000 + pid * 100) {
                evs.push(fault_of(pid, S + pid * 1000 + k, k));
            }
        }
        for i in 0..short_lived {
            let (pid, ts) = (100_000 + i, 100 * S + i * S);
            evs.push(scan_of(pid, ts));
            for k in 0..3 {
                evs.push(fault_of(pid, ts + 1 + k, k));
            }
            evs.push(fault_of(7, ts + 10, i % 512));
        }
        evs
    }

    #[test]
    fn pid_churn_keeps_the_rows_bounded_and_the_report_exact() {
        let d = ModelDefaults::default();
        let k = KernelDefaults::default();
        let models = ["kernel-time", "fault-count"]
            .iter()
            .map(|m| build(m, &d, &k).expect("model"))
            .collect();
        let mut s = Shadow::new(models, 10);
        let evs = churn(5_000);
        let mut peak: HashMap<&str, usize> = HashMap::new();
        for ev in &evs {
            s.event(ev);
            if let Event::Fault(f) = ev {
                if f.ts_ns % (10 * S) < 20 {
                    for (k, v) in s.state_sizes() {
                        let p = peak.entry(k).or_default();
                        *p = (*p).max(v);
                    }
                }
            }
        }
        let r = s.report();
        eprintln!("peak state sizes over the churn: {peak:?}");
        // Totals: every fault.
        let faults = evs.iter().filter(|e| matches!(e, Event::Fault(_))).count() as u64;
        assert_eq!((r.hint_faults, r.decisions), (faults, faults));
        assert_eq!(r.kernel.reject_latency, faults);
        assert_eq!(r.models[0].promote + r.models[0].reject, faults);
        // The top ten, as counted from the events: the heavy processes
        // that exited long ago are still there.
        let mut counts: HashMap<u32, u64> = HashMap::new();
        for ev in &evs {
            if let Event::Fault(f) = ev {
                *counts.entry(f.tgid()).or_default() += 1;
            }
        }
        let mut want: Vec<(u32, u64)> = counts.into_iter().collect();
        want.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        want.truncate(10);
        let got: Vec<(u32, u64)> = r.processes.iter().map(|p| (p.pid, p.hint_faults)).collect();
        assert_eq!(got, want);
        assert!(got.iter().any(|(pid, _)| *pid == 5));
        // Bounded by the processes active in the last GONE_AFTER_NS (one a
        // second, plus one sweep period), not by the 5006 seen.
        let live_bound = ((GONE_AFTER_NS + GONE_AFTER_NS / 4) / S + 10) as usize;
        assert!(peak["processes"] <= live_bound, "{peak:?}");
        assert!(peak["processes_gone_kept"] <= 10 + 160, "{peak:?}");
        assert!(
            s.state_sizes()["processes"] < live_bound,
            "{:?}",
            s.state_sizes()
        );
        // The refusals of gone processes are dropped with them: what is
        // pending is the live processes' three pages each and the 512 of
        // the one that runs throughout, not the 30k refused in all.
        assert!(
            s.state_sizes()["refused_pages_pending"] <= live_bound * 3 + 512,
            "{:?}",
            s.state_sizes()
        );
    }

    /// More processes at once than the live bound, all within the gone
    /// time (only a crafted trace does that): the rows stay bounded, the
    /// overflow shares one row, and no fault is lost.
    #[test]
    fn processes_at_once_past_the_bound_share_one_row() {
        let d = ModelDefaults::default();
        let k = KernelDefaults::default();
        let mut s = Shadow::new(vec![build("kernel-time", &d, &k).expect("model")], 10);
        let n = super::MAX_LIVE as u64 + 5000;
        for pid in 1..=n {
            s.event(&fault_of(pid, S + pid, pid % 64));
        }
        let sizes = s.state_sizes();
        assert!(sizes["processes"] <= super::MAX_LIVE + 1, "{sizes:?}");
        let r = s.report();
        assert_eq!(r.hint_faults, n);
        let other = r.processes.iter().find(|p| p.pid == super::OTHER_PROCESSES);
        assert_eq!(
            other.map(|p| p.hint_faults),
            Some(n - super::MAX_LIVE as u64)
        );
    }
}
