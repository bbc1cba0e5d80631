//! The histograms of `numatrace hist`: the scan-to-fault latency and
//! fault-count delta, once for the whole run or per interval, in bcc's text form
//! (`low -> high : count |****|`), as JSON lines (one object per interval,
//! bpftrace-like `min`/`max`/`count` buckets) or as CSV. Live or `--from` a
//! recording: the same sink either way.
//!
//! All faults together and `--by outcome` come from the in-kernel
//! histograms (exact even when events are sampled or dropped); `--by
//! process` and `--by node` need the fault events.
use std::{collections::HashMap, io::Write, time::Duration};

use anyhow::{bail, Result};
use numa_ebpf_common::{Counter, FaultEvent, Outcome};

use numa_core::sink::Sink;

use crate::histtext;

use numa_core::{
    decode::{comm, Event, Snapshot},
    model::{
        cgroups::{PathCache, PathLookup},
        log2::{upper_bound, Log2Hist},
        proctable::{ProcTable, Retired},
    },
    printable::printable,
};

/// How the histograms are split (`--by`); `None` is all faults together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// One pair per kernel decision reason (in-kernel, exact).
    Outcome,
    /// One pair per process (from fault events).
    Process,
    /// One pair per source -> destination node pair (from fault events).
    Node,
    /// One pair per cgroup v2 of the faulting task (from fault events).
    Cgroup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
    Csv,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum GroupKey {
    Process(u32),
    Node(i32, i32),
    Cgroup(u64),
}

/// Groups kept per interval at most: processes active at once (past it,
/// the least recently active one's group is retired, kept while it ranks
/// in `--top`), and node pairs and cgroups (past it, the faults of new
/// ones are counted in one "other" group).
const MAX_GROUPS: usize = 4096;

#[derive(Debug, Default)]
struct Group {
    label: String,
    latency_ns: Log2Hist,
    delta: Log2Hist,
}

/// One histogram pair to print.
struct Row {
    key: String,
    latency_ns: Log2Hist,
    delta: Log2Hist,
}

/// One interval's rows with what is printed around them.
struct Batch {
    rows: Vec<Row>,
    /// Groups left out by --top.
    omitted: usize,
    start_s: f64,
    end_s: f64,
    note: Option<String>,
}

use numa_core::histjson::{JsonBucket, JsonData, JsonHist, JsonInterval};

/// Smallest and largest integer value of bucket `b`.
fn bucket_range(b: usize) -> (u64, u64) {
    if b == 0 {
        (0, 1)
    } else {
        (upper_bound(b - 1) + 1, upper_bound(b))
    }
}

fn by_name(by: Option<By>) -> &'static str {
    match by {
        None => "all",
        Some(By::Outcome) => "outcome",
        Some(By::Process) => "process",
        Some(By::Node) => "node",
        Some(By::Cgroup) => "cgroup",
    }
}

/// The non-empty bucket span of `h`, with each bucket's integer range.
fn json_hist(h: &Log2Hist) -> JsonHist {
    JsonHist {
        count: h.count,
        sum: h.sum,
        buckets: match (
            h.buckets.iter().position(|c| *c > 0),
            h.buckets.iter().rposition(|c| *c > 0),
        ) {
            (Some(a), Some(b)) => (a..=b)
                .map(|i| {
                    let (min, max) = bucket_range(i);
                    JsonBucket {
                        min,
                        max,
                        count: h.buckets[i],
                    }
                })
                .collect(),
            _ => Vec::new(),
        },
    }
}

/// The histogram sink: collects per-interval histograms and writes them.
pub struct HistSink<W: Write> {
    out: W,
    output: Output,
    by: Option<By>,
    top: usize,
    interval_ns: Option<u64>,
    sample_every: u64,
    first: Option<Snapshot>,
    prev: Option<Snapshot>,
    last: Option<Snapshot>,
    /// This interval's groups by process (gone ones retired), by node pair
    /// or by cgroup.
    procs: ProcTable<Group>,
    retired: Retired<Group>,
    nodes: HashMap<GroupKey, Group>,
    /// Cgroups' paths, looked up once per id.
    cgroup_paths: Option<PathCache>,
    intervals: u64,
    csv_header: bool,
}

impl<W: Write> HistSink<W> {
    pub fn new(
        out: W,
        output: Output,
        by: Option<By>,
        top: usize,
        interval: Option<Duration>,
        sample_every: u64,
    ) -> Self {
        HistSink {
            out,
            output,
            by,
            top,
            interval_ns: interval.map(|d| d.as_nanos().max(1) as u64),
            sample_every,
            first: None,
            prev: None,
            last: None,
            procs: process_groups(),
            retired: Retired::new(top),
            nodes: HashMap::new(),
            cgroup_paths: None,
            intervals: 0,
            csv_header: false,
        }
    }

    /// Labels `--by cgroup` groups with the paths `paths` finds (else by
    /// id).
    pub fn with_cgroup_paths(mut self, lookup: PathLookup) -> Self {
        self.cgroup_paths = Some(PathCache::new(lookup));
        self
    }

    fn fault(&mut self, f: &FaultEvent) {
        let key = match self.by {
            Some(By::Process) => GroupKey::Process(f.tgid()),
            Some(By::Node) => GroupKey::Node(f.src_nid, f.dst_nid),
            Some(By::Cgroup) => GroupKey::Cgroup(f.cgroup_id),
            _ => return,
        };
        if !f.has_stamp() {
            return;
        }
        let g = match key {
            GroupKey::Process(pid) => self.procs.touch(pid, f.ts_ns, Group::default),
            _ if self.nodes.len() >= MAX_GROUPS && !self.nodes.contains_key(&key) => {
                let (other, what) = match key {
                    GroupKey::Cgroup(_) => (GroupKey::Cgroup(u64::MAX), "cgroups"),
                    _ => (GroupKey::Node(i32::MAX, i32::MAX), "node pairs"),
                };
                let g = self.nodes.entry(other).or_default();
                if g.label.is_empty() {
                    g.label = format!("other {what} (past {MAX_GROUPS})");
                }
                g
            }
            _ => self.nodes.entry(key).or_default(),
        };
        if g.label.is_empty() {
            g.label = match key {
                GroupKey::Process(pid) => format!("{pid} {}", comm(&f.comm)),
                GroupKey::Node(s, d) => format!("node {s} -> {d}"),
                GroupKey::Cgroup(id) => format!("cgroup id {id}"),
            };
        }
        g.latency_ns.add(f.ts_ns.saturating_sub(f.scan_ns));
        if !f.stamp_other_mm() {
            g.delta.add(f.seq_mm.saturating_sub(f.scan_seq_mm));
        }
        for (_, g) in self.procs.take_dropped() {
            self.retired.push(g, rank);
        }
    }

    /// This interval's groups, and how many were dropped as unable to rank.
    fn take_groups(&mut self) -> (Vec<Group>, usize) {
        let procs = std::mem::replace(&mut self.procs, process_groups());
        let mut groups = self.retired.take();
        let dropped = self.retired.dropped() as usize;
        self.retired = Retired::new(self.top);
        groups.extend(procs.into_values());
        self.label_cgroups();
        groups.extend(self.nodes.drain().map(|(_, g)| g));
        (groups, dropped)
    }

    /// Puts the cgroups' paths on their groups (one walk of the cgroup
    /// tree per interval at most, for the ids not seen before).
    fn label_cgroups(&mut self) {
        let Some(paths) = &mut self.cgroup_paths else {
            return;
        };
        let id = |k: &GroupKey| match k {
            GroupKey::Cgroup(id) if *id != u64::MAX => Some(*id),
            _ => None,
        };
        paths.learn(self.nodes.keys().filter_map(id));
        for (k, g) in &mut self.nodes {
            if let Some(path) = id(k).and_then(|id| paths.path(id)) {
                g.label = path.to_owned();
            }
        }
    }

    /// The in-kernel histogram of `outcome` between two snapshots (`None`:
    /// every outcome), `slot` 0 for latency, 1 for the delta.
    fn kernel(from: &Snapshot, to: &Snapshot, outcome: Option<Outcome>, slot: usize) -> Log2Hist {
        let mut h = Log2Hist::default();
        let which: fn(&Snapshot) -> &Vec<u64> = if slot == 0 {
            |s| &s.hist_latency
        } else {
            |s| &s.hist_delta
        };
        for o in Outcome::ALL {
            if outcome.is_some_and(|want| want != o) {
                continue;
            }
            let row = to.hist_row_since(from, which, o as usize);
            for (bucket, d) in h.buckets.iter_mut().zip(row) {
                *bucket += d;
                h.count += d;
            }
            h.sum += to.hist_sum_since(from, o as usize * 2 + slot);
        }
        h
    }

    fn rows(&mut self, from: &Snapshot, to: &Snapshot) -> (Vec<Row>, usize) {
        match self.by {
            None => (
                vec![Row {
                    key: "all".into(),
                    latency_ns: Self::kernel(from, to, None, 0),
                    delta: Self::kernel(from, to, None, 1),
                }],
                0,
            ),
            Some(By::Outcome) => (
                Outcome::ALL
                    .iter()
                    .map(|o| Row {
                        key: o.name().into(),
                        latency_ns: Self::kernel(from, to, Some(*o), 0),
                        delta: Self::kernel(from, to, Some(*o), 1),
                    })
                    .filter(|r| r.latency_ns.count + r.delta.count > 0)
                    .collect(),
                0,
            ),
            Some(_) => {
                let (mut groups, dropped) = self.take_groups();
                groups.sort_by(rank);
                let omitted = groups.len().saturating_sub(self.top) + dropped;
                groups.truncate(self.top);
                (
                    groups
                        .into_iter()
                        .map(|g| Row {
                            key: g.label,
                            latency_ns: g.latency_ns,
                            delta: g.delta,
                        })
                        .collect(),
                    omitted,
                )
            }
        }
    }

    fn emit(&mut self, from: &Snapshot, to: &Snapshot) -> Result<()> {
        self.intervals += 1;
        let (rows, omitted) = self.rows(from, to);
        let t0 = self.first.as_ref().map_or(from.ts_ns, |f| f.ts_ns);
        let batch = Batch {
            rows,
            omitted,
            start_s: from.ts_ns.saturating_sub(t0) as f64 / 1e9,
            end_s: to.ts_ns.saturating_sub(t0) as f64 / 1e9,
            note: self.note(from, to),
        };
        match self.output {
            Output::Text => self.write_text(&batch)?,
            Output::Json => self.write_json(&batch)?,
            Output::Csv => self.write_csv(&batch)?,
        }
        self.out.flush()?;
        Ok(())
    }

    /// Whether the groups come from fault events rather than the in-kernel
    /// histograms.
    fn groups_from_events(&self) -> bool {
        matches!(self.by, Some(By::Process | By::Node | By::Cgroup))
    }

    /// Says when event-based groups undercount: sampling or ring drops.
    fn note(&self, from: &Snapshot, to: &Snapshot) -> Option<String> {
        let drops = to.counter_since(from, Counter::RingDrops as usize);
        if self.groups_from_events() && (self.sample_every > 1 || drops > 0) {
            Some(format!(
                "from fault events: sampled 1 in {}, {drops} ring drops (the in-kernel histograms, without --by, are exact)",
                self.sample_every
            ))
        } else {
            None
        }
    }

    fn write_text(&mut self, b: &Batch) -> Result<()> {
        let out = &mut self.out;
        if self.interval_ns.is_some() {
            writeln!(
                out,
                "interval {}: {:.1} s -> {:.1} s",
                self.intervals, b.start_s, b.end_s
            )?;
        } else {
            writeln!(out, "numatrace hist over {:.1} s", b.end_s - b.start_s)?;
        }
        if b.rows.is_empty() {
            writeln!(out, "     (no samples)")?;
        }
        for r in &b.rows {
            let key = if self.by.is_none() {
                String::new()
            } else {
                format!(", {}", printable(&r.key))
            };
            writeln!(out, "\n  scan-to-fault latency (ms){key}")?;
            histtext::write(out, &r.latency_ns.rows(1e6), "ms")?;
            writeln!(
                out,
                "\n  fault-count delta (hint faults between scan and fault){key}"
            )?;
            histtext::write(out, &r.delta.rows(1.0), "")?;
        }
        if b.omitted > 0 {
            writeln!(out, "\n  ... {} more (--top)", b.omitted)?;
        }
        if let Some(n) = &b.note {
            writeln!(out, "\n  note: {n}")?;
        }
        writeln!(out)?;
        Ok(())
    }

    fn write_json(&mut self, b: &Batch) -> Result<()> {
        let line = JsonInterval {
            kind: "hist".into(),
            interval: self.intervals,
            start_s: b.start_s,
            end_s: b.end_s,
            by: by_name(self.by).into(),
            source: if self.groups_from_events() {
                "events"
            } else {
                "kernel"
            }
            .into(),
            data: JsonData {
                latency_ns: b
                    .rows
                    .iter()
                    .map(|r| (r.key.clone(), json_hist(&r.latency_ns)))
                    .collect(),
                fault_delta: b
                    .rows
                    .iter()
                    .map(|r| (r.key.clone(), json_hist(&r.delta)))
                    .collect(),
            },
            omitted: b.omitted,
            note: b.note.as_deref().map(Into::into),
        };
        serde_json::to_writer(&mut self.out, &line)?;
        writeln!(self.out)?;
        Ok(())
    }

    fn write_csv(&mut self, b: &Batch) -> Result<()> {
        if !self.csv_header {
            writeln!(
                self.out,
                "interval,start_s,end_s,histogram,key,min,max,count"
            )?;
            self.csv_header = true;
        }
        for r in &b.rows {
            let key = csv_field(&r.key);
            for (name, h) in [("latency_ns", &r.latency_ns), ("fault_delta", &r.delta)] {
                for (bucket, c) in h.buckets.iter().enumerate().filter(|(_, c)| **c > 0) {
                    let (min, max) = bucket_range(bucket);
                    writeln!(
                        self.out,
                        "{},{:.3},{:.3},{name},{key},{min},{max},{c}",
                        self.intervals, b.start_s, b.end_s
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Prints what is left: the whole run without `--interval`, the last
    /// partial interval with it.
    pub fn finish(&mut self) -> Result<()> {
        let (Some(prev), Some(last)) = (self.prev.clone(), self.last.clone()) else {
            bail!("no kernel snapshot was seen: nothing to show (is the trace empty?)");
        };
        if self.intervals == 0 || last.ts_ns > prev.ts_ns {
            self.emit(&prev, &last)?;
        }
        Ok(())
    }

    #[cfg(test)]
    fn into_inner(self) -> W {
        self.out
    }
}

fn process_groups() -> ProcTable<Group> {
    ProcTable::new(MAX_GROUPS, usize::MAX).keep_dropped()
}

/// The order groups are shown in: the most faults first, then by label.
fn rank(a: &Group, b: &Group) -> std::cmp::Ordering {
    b.latency_ns
        .count
        .cmp(&a.latency_ns.count)
        .then_with(|| a.label.cmp(&b.label))
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

impl<W: Write> Sink for HistSink<W> {
    fn event(&mut self, ev: &Event) -> Result<()> {
        // The window of `numatrace stats`: from the first snapshot on.
        if let (Event::Fault(f), Some(first)) = (ev, &self.first) {
            if f.ts_ns >= first.ts_ns {
                self.fault(f);
            }
        }
        Ok(())
    }

    fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
        if self.first.is_none() {
            self.first = Some(s.clone());
            self.prev = Some(s.clone());
        }
        self.last = Some(s.clone());
        if let (Some(every), Some(prev)) = (self.interval_ns, self.prev.clone()) {
            if s.ts_ns.saturating_sub(prev.ts_ns) >= every {
                self.emit(&prev, s)?;
                self.prev = Some(s.clone());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use numa_ebpf_common::{hist_slot, HIST_SLOTS};

    use super::*;
    use numa_core::decode::fixtures::fault;

    fn snap(ts_s: u64, latency: &[(Outcome, usize, u64)]) -> Snapshot {
        let mut hist_latency = vec![0; HIST_SLOTS];
        let mut hist_sum = vec![0; 14];
        for (o, b, n) in latency {
            hist_latency[hist_slot(*o as usize, *b)] += n;
            hist_sum[*o as usize * 2] += n * upper_bound(*b);
        }
        Snapshot {
            ts_ns: ts_s * 1_000_000_000,
            counters: vec![0; 32],
            hist_latency,
            hist_delta: vec![0; HIST_SLOTS],
            hist_sum,
            ..Snapshot::default()
        }
    }

    fn run_sink(
        by: Option<By>,
        output: Output,
        interval: Option<u64>,
        items: &[Result<Event, Snapshot>],
    ) -> String {
        let mut sink = HistSink::new(
            Vec::new(),
            output,
            by,
            10,
            interval.map(Duration::from_secs),
            1,
        );
        for i in items {
            match i {
                Ok(ev) => sink.event(ev).expect("event"),
                Err(s) => sink.snapshot(s).expect("snapshot"),
            }
        }
        sink.finish().expect("finish");
        String::from_utf8(sink.into_inner()).expect("utf8")
    }

    fn stream() -> Vec<Result<Event, Snapshot>> {
        use Outcome::*;
        vec![
            Err(snap(1000, &[])),
            Err(snap(1001, &[(RejectLatency, 31, 3)])),
            Err(snap(1002, &[(RejectLatency, 31, 3), (PromoteHot, 29, 2)])),
            Err(snap(1003, &[(RejectLatency, 31, 4), (PromoteHot, 29, 2)])),
        ]
    }

    #[test]
    fn whole_run_in_bcc_form() {
        let text = run_sink(None, Output::Text, None, &stream());
        assert!(text.contains("numatrace hist over 3.0 s"), "{text}");
        // 4 in (2^30, 2^31] ns and 2 in (2^28, 2^29] ns, printed in ms.
        let row = |range: &str| {
            text.lines()
                .find(|l| {
                    l.split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                        .contains(range)
                })
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default()
        };
        assert!(row("1073.742ms -> 2147.484ms").contains(": 4 |"), "{text}");
        assert!(row("268.435ms -> 536.871ms").contains(": 2 |"), "{text}");
        assert!(text.contains(&format!("|{}|", "*".repeat(40))), "{text}");
    }

    #[test]
    fn json_lines_per_interval_by_outcome() {
        let json = run_sink(Some(By::Outcome), Output::Json, Some(1), &stream());
        let lines: Vec<serde_json::Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect();
        assert_eq!(lines.len(), 3, "{json}");
        assert_eq!(lines[0]["interval"], 1);
        assert_eq!(lines[0]["type"], "hist");
        assert_eq!(lines[0]["source"], "kernel");
        let rl = &lines[0]["data"]["latency_ns"]["reject_latency"];
        assert_eq!(rl["count"], 3);
        assert_eq!(rl["buckets"][0]["min"], (1u64 << 30) + 1);
        assert_eq!(rl["buckets"][0]["max"], 1u64 << 31);
        assert_eq!(lines[1]["data"]["latency_ns"]["promote_hot"]["count"], 2);
        assert!(lines[1]["data"]["latency_ns"]
            .get("reject_latency")
            .is_none());
        assert_eq!(lines[2]["data"]["latency_ns"]["reject_latency"]["count"], 1);
        assert_eq!(lines[2]["end_s"], 3.0);
    }

    #[test]
    fn csv_by_process_from_events() {
        let mut items = stream();
        let mut f = fault(5, 1, 1500, Outcome::RejectLatency);
        f.ts_ns = 1_000_500_000_000;
        f.scan_ns = f.ts_ns - 1_500_000_000;
        items.insert(1, Ok(Event::Fault(f)));
        let csv = run_sink(Some(By::Process), Output::Csv, None, &items);
        let mut lines = csv.lines();
        assert_eq!(
            lines.next(),
            Some("interval,start_s,end_s,histogram,key,min,max,count")
        );
        let rows: Vec<&str> = lines.collect();
        // 1.5 s is in (2^30, 2^31] ns; the delta of 3 in (2, 4].
        assert!(
            rows.contains(&"1,0.000,3.000,latency_ns,42 hot-chunks,1073741825,2147483648,1"),
            "{csv}"
        );
        assert!(
            rows.contains(&"1,0.000,3.000,fault_delta,42 hot-chunks,3,4,1"),
            "{csv}"
        );
    }

    /// Processes come and go all run long, and node pairs past the bound:
    /// the groups kept stay bounded, the busiest (long gone) still leads,
    /// and every group left out is counted.
    #[test]
    fn groups_stay_bounded_under_churn_and_the_top_is_kept() {
        const S: u64 = 1_000_000_000;
        let mut sink = HistSink::new(Vec::new(), Output::Text, Some(By::Process), 3, None, 1);
        sink.snapshot(&snap(1, &[])).expect("snapshot");
        let at = |pid: u32, ts: u64| {
            let mut f = fault(u64::from(pid), 1, 5, Outcome::RejectLatency);
            f.pid_tgid = u64::from(pid) << 32;
            f.ts_ns = ts;
            f.scan_ns = ts - 1000;
            Event::Fault(f)
        };
        // The busiest first, then 20 000 processes one a second.
        for k in 0..5 {
            sink.event(&at(7, 2 * S + k)).expect("event");
        }
        let gone = (numa_core::model::GONE_AFTER_NS / S) as usize + 1;
        for i in 0..20_000u32 {
            sink.event(&at(100_000 + i, 3 * S + u64::from(i) * S))
                .expect("event");
            let held = sink.procs.len() + sink.retired.len();
            assert!(held <= gone + 7, "{held} groups held");
        }
        // Twice the bound at once.
        for i in 0..2 * MAX_GROUPS as u32 {
            sink.event(&at(200_000 + i, 30_000 * S + u64::from(i)))
                .expect("event");
            assert!(sink.procs.len() <= MAX_GROUPS);
        }
        sink.snapshot(&snap(40_000, &[])).expect("snapshot");
        sink.finish().expect("finish");
        let text = String::from_utf8(sink.into_inner()).expect("utf8");
        assert!(text.contains("7 hot-chunks"), "{text}");
        let total = 1 + 20_000 + 2 * MAX_GROUPS;
        assert!(
            text.contains(&format!("... {} more (--top)", total - 3)),
            "{text}"
        );
        // Node pairs past the bound share one group.
        let mut sink = HistSink::new(Vec::new(), Output::Text, Some(By::Node), 3, None, 1);
        sink.snapshot(&snap(1, &[])).expect("snapshot");
        for i in 0..2 * MAX_GROUPS as i32 {
            let Event::Fault(mut f) = at(7, 2 * S) else {
                unreachable!()
            };
            (f.src_nid, f.dst_nid) = (i / 1024, i % 1024);
            sink.event(&Event::Fault(f)).expect("event");
        }
        assert_eq!(sink.nodes.len(), MAX_GROUPS + 1);
    }

    /// Cgroups are named by the paths found for their ids (one lookup per
    /// id), by id when none is; past the bound they share one group.
    #[test]
    fn cgroups_are_named_by_path() {
        let looked_up = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = looked_up.clone();
        let paths: PathLookup = Box::new(move |ids| {
            counted.fetch_add(ids.len(), std::sync::atomic::Ordering::Relaxed);
            ids.iter()
                .filter(|id| **id == 5)
                .map(|id| (*id, "/ntc/hot".to_owned()))
                .collect()
        });
        let mut sink = HistSink::new(Vec::new(), Output::Text, Some(By::Cgroup), 3, None, 1)
            .with_cgroup_paths(paths);
        sink.snapshot(&snap(1, &[])).expect("snapshot");
        for (i, id) in [5, 5, 6].into_iter().enumerate() {
            let mut f = fault(i as u64, 1, 5, Outcome::RejectLatency);
            f.cgroup_id = id;
            sink.event(&Event::Fault(f)).expect("event");
        }
        sink.snapshot(&snap(3, &[])).expect("snapshot");
        sink.finish().expect("finish");
        assert_eq!(looked_up.load(std::sync::atomic::Ordering::Relaxed), 2);
        let text = String::from_utf8(sink.into_inner()).expect("utf8");
        assert!(text.contains("(ms), /ntc/hot"), "{text}");
        assert!(text.contains("(ms), cgroup id 6"), "{text}");
        let mut sink = HistSink::new(Vec::new(), Output::Text, Some(By::Cgroup), 3, None, 1);
        sink.snapshot(&snap(1, &[])).expect("snapshot");
        for id in 0..2 * MAX_GROUPS as u64 {
            let mut f = fault(id, 1, 5, Outcome::RejectLatency);
            f.cgroup_id = id;
            sink.event(&Event::Fault(f)).expect("event");
        }
        assert_eq!(sink.nodes.len(), MAX_GROUPS + 1);
    }

    #[test]
    fn an_empty_stream_is_an_error_not_silence() {
        let mut sink = HistSink::new(Vec::new(), Output::Text, None, 10, None, 1);
        assert!(sink.finish().is_err());
    }

    #[test]
    fn bucket_ranges() {
        assert_eq!(bucket_range(0), (0, 1));
        assert_eq!(bucket_range(1), (2, 2));
        assert_eq!(bucket_range(2), (3, 4));
        assert_eq!(bucket_range(10), (513, 1024));
    }
}
