//! The shadow report's per-process rows, bounded under pid churn: the live
//! rows are a [`ProcTable`] (a process with no hint fault for
//! [`GONE_AFTER_NS`] is gone), and a gone process's row is kept
//! ([`Retired`]) only while it may rank among the report's `top_n` rows by
//! hint faults (then pid). A pid that faults again after that silence is a
//! new process (a reused pid looks the same) and gets a row of its own.
//!
//! Past [`MAX_LIVE`] live processes a new process's faults go to one
//! shared row ([`OTHER_PROCESSES`]) instead of evicting the least recently
//! active process: the report ranks rows by faults over the whole trace,
//! and an evicted process that faults again would have its counts split
//! over two rows that may each rank below where the process belongs,
//! while the shared row keeps every process seen before the overflow exact
//! and names the rest as what they are.
//!
//! The rows sit in a slab; the table maps a pid to its row's slot, so the
//! per-fault path finds the row once and indexes it after.
use super::ProcessRow;
use crate::model::{
    proctable::{ProcTable, Retired},
    GONE_AFTER_NS,
};

/// Live processes with rows of their own; past it a new process's faults
/// go to one shared row ([`OTHER_PROCESSES`]) until some are gone. Far
/// more than a host runs at once: only a crafted trace reaches it.
pub(super) const MAX_LIVE: usize = 1 << 16;
/// The pid of the shared row (no pid is this large: pid_max <= 4 Mi).
pub(super) const OTHER_PROCESSES: u32 = u32::MAX;
/// Gone pids are handed over ([`Processes::take_gone`]) at most this often
/// in trace time: what drops their state walks a table, and a walk per
/// pid would make pid churn cost the table's size per process.
const GONE_BATCH_NS: u64 = GONE_AFTER_NS / 4;

pub(super) struct Processes {
    /// Live processes: each one's slot in `rows`. Its process bound (one
    /// more than [`MAX_LIVE`], for the shared row) is never reached, as
    /// the overflow goes to the shared row first.
    live: ProcTable<usize>,
    /// The live processes' rows, by slot; `free` are the unused slots.
    rows: Vec<ProcessRow>,
    free: Vec<usize>,
    /// Rows of gone processes that may still rank in the report.
    retired: Retired<ProcessRow>,
    /// Pids found gone and not yet taken ([`Self::take_gone`]): at most
    /// the processes live at one time, as those gone within
    /// [`GONE_BATCH_NS`] were all live [`GONE_AFTER_NS`] before.
    gone: Vec<u32>,
    /// When gone pids may next be handed over.
    next_gone_ns: u64,
}

/// The report's order: most hint faults first, then by pid.
fn rank(a: &ProcessRow, b: &ProcessRow) -> std::cmp::Ordering {
    b.hint_faults.cmp(&a.hint_faults).then(a.pid.cmp(&b.pid))
}

impl Processes {
    pub(super) fn new(top_n: usize) -> Self {
        Processes {
            live: ProcTable::new(MAX_LIVE + 1, usize::MAX).keep_dropped(),
            rows: Vec::new(),
            free: Vec::new(),
            retired: Retired::new(top_n),
            gone: Vec::new(),
            next_gone_ns: 0,
        }
    }

    /// The pids found gone since the last call, for the state kept per
    /// page elsewhere (a pid that comes back is a new process); in
    /// batches, at most once per [`GONE_BATCH_NS`]. A pid live again by
    /// then is left out, so the new process's state is not dropped with
    /// the old one's.
    #[inline]
    pub(super) fn take_gone(&mut self) -> Option<Vec<u32>> {
        let now = self.live.now_ns();
        if self.gone.is_empty() || now < self.next_gone_ns {
            return None;
        }
        self.next_gone_ns = now.saturating_add(GONE_BATCH_NS);
        let live = &self.live;
        self.gone.retain(|&pid| !live.contains(pid));
        (!self.gone.is_empty()).then(|| std::mem::take(&mut self.gone))
    }

    /// The row of `tgid` for a fault at `ts_ns`, made by `new` when the pid
    /// is first seen or its previous process is gone.
    #[inline]
    pub(super) fn get(&mut self, tgid: u32, ts_ns: u64, new: impl Fn() -> ProcessRow) -> usize {
        let key = if self.full(ts_ns) && !self.live.contains(tgid) {
            OTHER_PROCESSES
        } else {
            tgid
        };
        let (rows, free) = (&mut self.rows, &mut self.free);
        let slot = *self.live.touch(key, ts_ns, || {
            let mut row = new();
            if key == OTHER_PROCESSES {
                row.pid = OTHER_PROCESSES;
                row.comm = "(other processes)".to_owned();
            }
            match free.pop() {
                Some(slot) => {
                    rows[slot] = row;
                    slot
                }
                None => {
                    rows.push(row);
                    rows.len() - 1
                }
            }
        });
        self.retire_dropped();
        slot
    }

    /// Whether the live processes at `ts_ns` have reached [`MAX_LIVE`].
    #[inline]
    fn full(&mut self, ts_ns: u64) -> bool {
        if self.live.len() < MAX_LIVE {
            return false;
        }
        self.live.advance(ts_ns);
        self.retire_dropped();
        self.live.len() >= MAX_LIVE
    }

    #[inline]
    pub(super) fn row(&mut self, i: usize) -> &mut ProcessRow {
        &mut self.rows[i]
    }

    /// Live rows, and retired rows of gone processes.
    pub(super) fn len(&self) -> (usize, usize) {
        (self.live.len(), self.retired.len())
    }

    /// Every row that may be in the report.
    pub(super) fn rows(&self) -> Vec<ProcessRow> {
        self.live
            .values()
            .map(|&slot| &self.rows[slot])
            .chain(self.retired.rows())
            .cloned()
            .collect()
    }

    /// Moves the rows of the processes the table dropped to the retired
    /// ones, freeing their slots.
    #[inline]
    fn retire_dropped(&mut self) {
        for (tgid, slot) in self.live.take_dropped() {
            let row = std::mem::take(&mut self.rows[slot]);
            self.free.push(slot);
            self.gone.push(tgid);
            self.retired.push(row, rank);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use numa_ebpf_common::{EventKind, Outcome, ScanEvent};

    use super::GONE_AFTER_NS;

    use super::super::{ProcessRow, Shadow};
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
        // second, with a quarter of that to spare), not by the 5006 seen.
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

    /// Waves of more processes at once than the live bound, each wave
    /// gone before the next: the live rows never pass the bound, each
    /// wave's overflow shares one row, and the gone make room for the
    /// next wave's processes to have rows of their own.
    #[test]
    fn waves_of_processes_past_the_bound_stay_bounded_and_new_ones_get_rows() {
        let mut p = super::Processes::new(10);
        let per_wave = super::MAX_LIVE as u64 + 1000;
        let mut gone = 0;
        for wave in 0..3u64 {
            let t0 = S + wave * (GONE_AFTER_NS + S);
            for i in 0..per_wave {
                let pid = (1 + wave * per_wave + i) as u32;
                let r = p.get(pid, t0 + i, || ProcessRow {
                    pid,
                    ..ProcessRow::default()
                });
                p.row(r).hint_faults += 1;
                assert!(p.len().0 <= super::MAX_LIVE + 1, "{:?}", p.len());
                gone += p.take_gone().map_or(0, |g| g.len());
            }
            let first = (1 + wave * per_wave) as u32;
            let rows = p.rows();
            let own = |pid| rows.iter().any(|r| r.pid == pid && r.hint_faults == 1);
            assert!(own(first), "wave {wave}: its first process has a row");
            let other = rows.iter().find(|r| r.pid == super::OTHER_PROCESSES);
            assert_eq!(other.map(|r| r.hint_faults), Some(1000), "wave {wave}");
            assert!(p.len().1 <= 20, "{:?}", p.len());
        }
        // The first two waves' processes and shared rows were handed over.
        assert_eq!(gone, 2 * (super::MAX_LIVE + 1));
    }
}
