//! The aggregation behind `top`: a pipeline sink that keeps cumulative
//! counts per process and system-wide, runs the shadow policies on every
//! decision (the same `Policy::decide` calls as `model::shadow`), and turns
//! them into a [`Frame`] of per-second rates at each publication.
//!
//! Pure like `model`: time comes from the events and snapshots (or the
//! caller's `now`), procfs facts are handed in by the caller. Memory is
//! bounded: fixed-length histories, capped per-process maps, idle processes
//! pruned.
use std::collections::{BTreeMap, VecDeque};

use numa_ebpf_common::{
    fault_flags as ff, log2_bucket, tnf, Counter, FaultEvent, Outcome, ScanEvent, SkipEvent,
    HIST_BUCKETS, VMA_SKIP_REASONS,
};

use numa_core::{
    decode::{comm, Event, Snapshot},
    model::{
        hist::{upper_bound, Log2Hist},
        policy::{FaultView, Policy},
        scans::ScanIndex,
    },
    plan::{HookStatus, Mechanism},
    sink::Sink,
    topology::{MemoryTier, Node},
    trace,
};
use rustc_hash::FxHashMap;

use crate::frame::{
    Axis, Detail, Frame, HeaderView, Heat, HeatRow, HistView, ModelView, NodeMem, ProcRow,
    RangeRow, RateSeries, TierView, VmaRow, Warnings,
};

/// Points of history per rate (5 minutes at the default 1 s refresh).
pub const HISTORY: usize = 300;
/// Columns of the address-space heat strip (publications).
pub const HEAT_SLOTS: usize = 60;
/// Rows of the heat strip at most.
pub const HEAT_ROWS: usize = 16;
const CHUNK_SHIFT: u32 = 21;
const MAX_CHUNKS_PER_PROC: usize = 65_536;
const MAX_SLOT_ENTRIES: usize = 4096;
const MAX_RANGES_PER_PROC: usize = 4096;
const MAX_CHUNKS_PER_SCAN: u64 = 512;
const MAX_PROCS: usize = 4096;
/// Processes without events for this long (event time) are forgotten.
const IDLE_PRUNE_NS: u64 = 300_000_000_000;
/// Publications closer than this in event time do not start a new point.
const MIN_ROLL_NS: u64 = 1_000_000;
const MAX_ROWS: usize = 1000;

/// What the UI asks the aggregator to detail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Focus {
    /// Histogram of this process (None: all processes).
    pub hist_pid: Option<u32>,
    /// Process detail view open for this process.
    pub detail_pid: Option<u32>,
}

/// A VMA from /proc/PID/maps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub path: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub faults: u64,
    pub local: u64,
    pub decisions: u64,
    pub promoted: u64,
    pub rej_latency: u64,
    pub rej_rate_limit: u64,
    pub rej_other: u64,
    pub migrate_fail: u64,
}

/// Latency (ns) and fault-count histograms split by the kernel's decision.
#[derive(Debug, Clone)]
struct Hists {
    latency: [[u64; HIST_BUCKETS]; 2],
    delta: [[u64; HIST_BUCKETS]; 2],
    lat_all: Log2Hist,
    delta_all: Log2Hist,
}

impl Default for Hists {
    fn default() -> Self {
        Hists {
            latency: [[0; HIST_BUCKETS]; 2],
            delta: [[0; HIST_BUCKETS]; 2],
            lat_all: Log2Hist::default(),
            delta_all: Log2Hist::default(),
        }
    }
}

/// A fault's histogram coordinates, computed once for every histogram it
/// goes into.
#[derive(Clone, Copy)]
struct HistPoint {
    lat: u64,
    lat_b: usize,
    delta: Option<(u64, usize)>,
    /// 0 promoted, 1 rejected, None undecided.
    decision: Option<usize>,
}

impl HistPoint {
    fn of(f: &FaultEvent, decided: Option<bool>) -> Option<HistPoint> {
        if f.flags & ff::HAS_STAMP == 0 {
            return None;
        }
        let lat = f.ts_ns.saturating_sub(f.scan_ns);
        let delta = (f.flags & ff::STAMP_OTHER_MM == 0).then(|| {
            let d = f.seq_mm.wrapping_sub(f.scan_seq_mm);
            (d, log2_bucket(d))
        });
        Some(HistPoint {
            lat,
            lat_b: log2_bucket(lat),
            delta,
            decision: decided.map(|p| usize::from(!p)),
        })
    }
}

fn hist_add(h: &mut Log2Hist, v: u64, b: usize) {
    h.buckets[b] += 1;
    h.sum = h.sum.saturating_add(v);
    h.count += 1;
}

impl Hists {
    fn add(&mut self, p: &HistPoint) {
        hist_add(&mut self.lat_all, p.lat, p.lat_b);
        if let Some((d, b)) = p.delta {
            hist_add(&mut self.delta_all, d, b);
        }
        if let Some(i) = p.decision {
            self.latency[i][p.lat_b] += 1;
            if let Some((_, b)) = p.delta {
                self.delta[i][b] += 1;
            }
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Chunk {
    faults: u64,
    cur: u32,
    scanned_cur: bool,
    in_touched: bool,
}

#[derive(Debug, Default, Clone, Copy)]
struct Range {
    end: u64,
    passes: u64,
    ptes: u64,
    last_ts: u64,
}

/// Rates of the last roll, per second.
#[derive(Debug, Clone, Default)]
struct Rates {
    counts: [f64; 8],
    models: Vec<f64>,
}

fn rates_of(now: &Counts, prev: &Counts, dt_s: f64) -> [f64; 8] {
    let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt_s;
    [
        d(now.faults, prev.faults),
        d(now.local, prev.local),
        d(now.decisions, prev.decisions),
        d(now.promoted, prev.promoted),
        d(now.rej_latency, prev.rej_latency),
        d(now.rej_rate_limit, prev.rej_rate_limit),
        d(now.rej_other, prev.rej_other),
        d(now.migrate_fail, prev.migrate_fail),
    ]
}

#[derive(Debug, Default)]
struct Proc {
    pid: u32,
    comm: String,
    counts: Counts,
    prev: Counts,
    model_promote: Vec<u64>,
    prev_model_promote: Vec<u64>,
    model_agree: Vec<u64>,
    rates: Rates,
    hists: Hists,
    last_ts: u64,
    chunks: FxHashMap<u64, Chunk>,
    touched: Vec<u64>,
    heat: VecDeque<Vec<(u64, u32, bool)>>,
    ranges: FxHashMap<u64, Range>,
    scan_passes: u64,
    ptes: u64,
    stamps: u64,
    skips: BTreeMap<String, u64>,
    skip_by_start: FxHashMap<u64, u32>,
    resident: Option<Vec<(u32, u64)>>,
    vmas: Option<Vec<Vma>>,
}

impl Proc {
    fn new(pid: u32, models: usize) -> Self {
        Proc {
            pid,
            model_promote: vec![0; models],
            prev_model_promote: vec![0; models],
            model_agree: vec![0; models],
            rates: Rates {
                counts: [0.0; 8],
                models: vec![0.0; models],
            },
            ..Proc::default()
        }
    }

    fn chunk(&mut self, c: u64) -> Option<&mut Chunk> {
        let full = self.chunks.len() >= MAX_CHUNKS_PER_PROC;
        let ch = match self.chunks.entry(c) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(_) if full => return None,
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Chunk::default()),
        };
        if !ch.in_touched {
            ch.in_touched = true;
            self.touched.push(c);
        }
        Some(ch)
    }

    /// Closes the current heat slot.
    fn roll_heat(&mut self) {
        let mut slot = Vec::with_capacity(self.touched.len().min(MAX_SLOT_ENTRIES));
        for c in self.touched.drain(..) {
            if let Some(ch) = self.chunks.get_mut(&c) {
                if slot.len() < MAX_SLOT_ENTRIES {
                    slot.push((c, ch.cur, ch.scanned_cur));
                }
                ch.cur = 0;
                ch.scanned_cur = false;
                ch.in_touched = false;
            }
        }
        if self.heat.len() == HEAT_SLOTS {
            self.heat.pop_front();
        }
        self.heat.push_back(slot);
    }

    fn chunk_faults(&self, start: u64, end: u64) -> u64 {
        if end <= start {
            return 0;
        }
        let (a, b) = (start >> CHUNK_SHIFT, (end - 1) >> CHUNK_SHIFT);
        if b - a < self.chunks.len() as u64 {
            (a..=b)
                .filter_map(|c| self.chunks.get(&c))
                .map(|c| c.faults)
                .sum()
        } else {
            self.chunks
                .iter()
                .filter(|(c, _)| (a..=b).contains(*c))
                .map(|(_, ch)| ch.faults)
                .sum()
        }
    }
}

/// The tracked processes: a vector with a pid index, and the last pid
/// looked up remembered (hint faults come in runs of one process, so most
/// events skip the hash probe).
#[derive(Default)]
struct Procs {
    list: Vec<Proc>,
    index: FxHashMap<u32, usize>,
    last: Option<(u32, usize)>,
}

impl Procs {
    fn len(&self) -> usize {
        self.list.len()
    }

    fn slot(&self, pid: u32) -> Option<usize> {
        match self.last {
            Some((p, i)) if p == pid => Some(i),
            _ => self.index.get(&pid).copied(),
        }
    }

    fn get(&self, pid: u32) -> Option<&Proc> {
        self.slot(pid).map(|i| &self.list[i])
    }

    fn get_mut(&mut self, pid: u32) -> Option<&mut Proc> {
        let i = self.slot(pid)?;
        self.last = Some((pid, i));
        Some(&mut self.list[i])
    }

    fn contains(&self, pid: u32) -> bool {
        self.slot(pid).is_some()
    }

    /// The process `pid`, created by `make` unless `max` are tracked.
    fn get_or_insert(
        &mut self,
        pid: u32,
        max: usize,
        make: impl FnOnce() -> Proc,
    ) -> Option<&mut Proc> {
        let i = match self.slot(pid) {
            Some(i) => i,
            None if self.len() >= max => return None,
            None => {
                self.list.push(make());
                let i = self.list.len() - 1;
                self.index.insert(pid, i);
                i
            }
        };
        self.last = Some((pid, i));
        Some(&mut self.list[i])
    }

    fn iter(&self) -> std::slice::Iter<'_, Proc> {
        self.list.iter()
    }

    fn iter_mut(&mut self) -> std::slice::IterMut<'_, Proc> {
        self.list.iter_mut()
    }

    fn retain(&mut self, keep: impl FnMut(&Proc) -> bool) {
        let before = self.list.len();
        self.list.retain(keep);
        if self.list.len() != before {
            self.index.clear();
            self.index
                .extend(self.list.iter().enumerate().map(|(i, p)| (p.pid, i)));
            self.last = None;
        }
    }
}

struct ModelSlot {
    policy: Box<dyn Policy>,
    promote: u64,
    prev_promote: u64,
    agree: u64,
}

/// Static facts of the source (header) plus what changes slowly.
struct Static {
    header: HeaderView,
    nodes: Vec<Node>,
    tiers: Vec<MemoryTier>,
    stamp_capacity: u64,
}

pub struct Aggregator {
    source: String,
    models: Vec<ModelSlot>,
    scans: ScanIndex,
    procs: Procs,
    last_pid: Option<u32>,
    sys: Counts,
    sys_prev: Counts,
    sys_rates: Rates,
    sys_decided: u64,
    sys_hists: Hists,
    history: Vec<VecDeque<f64>>,
    demoted_rate: f64,
    kernel_threshold: BTreeMap<i32, u32>,
    /// The last (node, threshold) put in `kernel_threshold` (most faults
    /// repeat it: no map lookup).
    last_threshold: Option<(i32, u32)>,
    first_snapshot: Option<Snapshot>,
    last_snapshot: Option<Snapshot>,
    snap_at_roll: Option<(u64, u64)>,
    first_ts: Option<u64>,
    now_ts: u64,
    last_roll_ts: Option<u64>,
    last_dt_s: f64,
    events: u64,
    seq: u64,
    ended: Option<String>,
    st: Static,
}

const BASE_SERIES: [&str; 9] = [
    "hint faults",
    "decisions",
    "promoted",
    "rej latency",
    "rej rate lim",
    "rej other",
    "demoted",
    "migrate fail",
    "local %",
];

pub fn short_name(name: &str) -> &'static str {
    match name {
        "kernel-time" => "ktime",
        "fault-count" => "fcount",
        "two-touch" => "2touch",
        _ => "model",
    }
}

fn axis_of(name: &str) -> Axis {
    match name {
        "fault-count" => Axis::FaultDelta,
        "two-touch" => Axis::WindowMs,
        _ => Axis::LatencyMs,
    }
}

fn header_view(h: &trace::Header) -> HeaderView {
    let mut plan = String::from("no attach plan");
    let mut degraded = Vec::new();
    if let Some(p) = &h.attach_plan {
        let attached = p
            .hooks
            .iter()
            .filter(|h| h.status == HookStatus::Attached)
            .count();
        let mut by_mech: BTreeMap<&str, usize> = BTreeMap::new();
        for hk in p.hooks.iter().filter(|h| h.status == HookStatus::Attached) {
            if let Some(m) = hk.mechanism {
                *by_mech.entry(m.name()).or_default() += 1;
            }
            if matches!(hk.mechanism, Some(Mechanism::Kprobe | Mechanism::Kretprobe)) {
                degraded.push(format!("{} via kprobe", hk.hook.name()));
            }
        }
        for hk in p.hooks.iter().filter(|h| h.status != HookStatus::Attached) {
            let what = match hk.status {
                HookStatus::Missing => "missing",
                HookStatus::Refused => "refused",
                _ => "not attached",
            };
            degraded.push(format!("{} {what}", hk.hook.name()));
        }
        let mechs: Vec<String> = by_mech.iter().map(|(m, n)| format!("{m} {n}")).collect();
        plan = format!(
            "{attached}/{} hooks ({})",
            p.hooks.len(),
            if mechs.is_empty() {
                "none".to_owned()
            } else {
                mechs.join(", ")
            }
        );
    }
    let t = &h.tunables;
    let ms = |v: Option<u64>| v.map_or("?".to_owned(), |v| v.to_string());
    HeaderView {
        kernel: h.kernel_release.clone(),
        numa_balancing: h.numa_balancing,
        plan,
        degraded,
        tiers: Vec::new(),
        hot_threshold_ms: t.hot_threshold_ms,
        rate_limit_mbps: t.promote_rate_limit_mbps,
        scan: format!(
            "delay {} ms, period {}-{} ms, size {} MB",
            ms(t.scan_delay_ms),
            ms(t.scan_period_min_ms),
            ms(t.scan_period_max_ms),
            ms(t.scan_size_mb)
        ),
        kernel_threshold_ms: BTreeMap::new(),
        sample_every: h.sample_every,
    }
}

fn tier_views(tiers: &[MemoryTier], nodes: &[Node]) -> Vec<TierView> {
    let mem = |id: u32| {
        let n = nodes.iter().find(|n| n.id == id);
        NodeMem {
            id,
            total_kb: n.map_or(0, |n| n.mem_total_kb),
            free_kb: n.map_or(0, |n| n.mem_free_kb),
            cpus: n.map_or(0, |n| n.cpus.len()),
        }
    };
    if tiers.is_empty() {
        return vec![TierView {
            id: 0,
            nodes: nodes.iter().map(|n| mem(n.id)).collect(),
        }];
    }
    tiers
        .iter()
        .map(|t| TierView {
            id: t.id,
            nodes: t.nodes.iter().map(|n| mem(*n)).collect(),
        })
        .collect()
}

fn demoted(s: &Snapshot) -> u64 {
    ["pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged"]
        .iter()
        .filter_map(|k| s.vmstat.get(*k))
        .sum()
}

fn skip_name(reason: u32) -> String {
    VMA_SKIP_REASONS
        .get(reason as usize)
        .map_or_else(|| format!("reason_{reason}"), |n| (*n).to_owned())
}

fn pct(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| 100.0 * part as f64 / whole as f64)
}

impl Aggregator {
    pub fn new(policies: Vec<Box<dyn Policy>>, header: &trace::Header, source: String) -> Self {
        let n_series = BASE_SERIES.len() + policies.len();
        Aggregator {
            source,
            models: policies
                .into_iter()
                .map(|policy| ModelSlot {
                    policy,
                    promote: 0,
                    prev_promote: 0,
                    agree: 0,
                })
                .collect(),
            scans: ScanIndex::default(),
            procs: Procs::default(),
            last_pid: None,
            sys: Counts::default(),
            sys_prev: Counts::default(),
            sys_rates: Rates::default(),
            sys_decided: 0,
            sys_hists: Hists::default(),
            history: vec![VecDeque::with_capacity(HISTORY); n_series],
            demoted_rate: 0.0,
            kernel_threshold: BTreeMap::new(),
            last_threshold: None,
            first_snapshot: None,
            last_snapshot: None,
            snap_at_roll: None,
            first_ts: None,
            now_ts: 0,
            last_roll_ts: None,
            last_dt_s: 0.0,
            events: 0,
            seq: 0,
            ended: None,
            st: Static {
                header: header_view(header),
                nodes: header.nodes.clone(),
                tiers: header.memory_tiers.clone(),
                stamp_capacity: u64::from(header.stamp_entries),
            },
        }
    }

    /// Fresh node memory figures (live).
    pub fn set_nodes(&mut self, nodes: Vec<Node>) {
        if !nodes.is_empty() {
            self.st.nodes = nodes;
        }
    }

    pub fn set_resident(&mut self, pid: u32, pages: Option<Vec<(u32, u64)>>) {
        if let Some(p) = self.procs.get_mut(pid) {
            p.resident = pages;
        }
    }

    pub fn set_vmas(&mut self, pid: u32, vmas: Option<Vec<Vma>>) {
        if let Some(p) = self.procs.get_mut(pid) {
            p.vmas = vmas;
        }
    }

    pub fn set_ended(&mut self, why: String) {
        self.ended = Some(why);
    }

    pub fn ended(&self) -> Option<&str> {
        self.ended.as_deref()
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    /// The `n` processes with the most hint faults per second.
    pub fn busiest(&self, n: usize) -> Vec<u32> {
        let mut v: Vec<(f64, u64, u32)> = self
            .procs
            .iter()
            .filter(|p| p.counts.faults > 0)
            .map(|p| (p.rates.counts[0], p.counts.faults, p.pid))
            .collect();
        v.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        v.into_iter().take(n).map(|x| x.2).collect()
    }

    pub fn snapshot(&mut self, s: &Snapshot) {
        if self.first_snapshot.is_none() {
            self.first_snapshot = Some(s.clone());
            self.first_ts.get_or_insert(s.ts_ns);
        }
        self.now_ts = self.now_ts.max(s.ts_ns);
        self.last_snapshot = Some(s.clone());
    }

    pub fn event(&mut self, ev: &Event) {
        let ts = ev.ts_ns();
        // Same window rule as the totals: nothing before the first snapshot.
        if self.first_snapshot.as_ref().is_some_and(|s| ts < s.ts_ns) {
            return;
        }
        self.events += 1;
        self.first_ts.get_or_insert(ts);
        self.now_ts = self.now_ts.max(ts);
        match ev {
            Event::Fault(f) => self.fault(f),
            Event::Scan(s) => self.scan(s),
            Event::Skip(s) => self.skip(s),
        }
    }

    fn proc_mut(&mut self, tgid: u32) -> Option<&mut Proc> {
        let n = self.models.len();
        self.procs
            .get_or_insert(tgid, MAX_PROCS, || Proc::new(tgid, n))
    }

    fn fault(&mut self, f: &FaultEvent) {
        let tgid = (f.pid_tgid >> 32) as u32;
        let outcome = Outcome::from_u8(f.outcome).unwrap_or(Outcome::NoDecision);
        let decided = f.flags & ff::DECIDED != 0
            && !matches!(outcome, Outcome::NoDecision | Outcome::NotTiering);
        let promoted = f.decision == 1;
        let local = f.flags & ff::HAS_FAULT_HOOK != 0 && f.tnf_flags & tnf::FAULT_LOCAL != 0;
        let mig_fail = f.flags & ff::MIGRATE_TRIED != 0 && f.migrate_ok == 0;
        if f.flags & ff::KERNEL_LATENCY != 0
            && f.threshold_ms > 0
            && self.last_threshold != Some((f.dst_nid, f.threshold_ms))
        {
            self.last_threshold = Some((f.dst_nid, f.threshold_ms));
            self.kernel_threshold.insert(f.dst_nid, f.threshold_ms);
        }
        // The models decide first (they need &mut self.models and the scans).
        let mut verdicts: [bool; 8] = [false; 8];
        if decided && !self.models.is_empty() {
            let view = FaultView {
                latest_scan: self.scans.latest(tgid, f.addr, f.ts_ns),
            };
            for (i, m) in self.models.iter_mut().enumerate() {
                let v = m.policy.decide(f, &view).promote;
                m.promote += u64::from(v);
                m.agree += u64::from(v == promoted);
                if let Some(slot) = verdicts.get_mut(i) {
                    *slot = v;
                }
            }
        }
        self.sys_decided += u64::from(decided);
        let bump = |c: &mut Counts| {
            c.faults += 1;
            c.local += u64::from(local);
            c.migrate_fail += u64::from(mig_fail);
            if decided {
                c.decisions += 1;
                c.promoted += u64::from(promoted);
                match outcome {
                    Outcome::RejectLatency => c.rej_latency += 1,
                    Outcome::RejectRateLimit => c.rej_rate_limit += 1,
                    Outcome::RejectOther => c.rej_other += 1,
                    _ => {}
                }
            }
        };
        bump(&mut self.sys);
        let point = HistPoint::of(f, decided.then_some(promoted));
        if let Some(pt) = &point {
            self.sys_hists.add(pt);
        }
        let n_models = self.models.len();
        let Some(p) = self.proc_mut(tgid) else {
            return;
        };
        bump(&mut p.counts);
        if let Some(pt) = &point {
            p.hists.add(pt);
        }
        p.last_ts = f.ts_ns;
        if p.comm.is_empty() {
            p.comm = comm(&f.comm);
        }
        if decided {
            for ((v, prom), agree) in verdicts
                .iter()
                .zip(p.model_promote.iter_mut())
                .zip(p.model_agree.iter_mut())
                .take(n_models)
            {
                *prom += u64::from(*v);
                *agree += u64::from(*v == promoted);
            }
        }
        if let Some(ch) = p.chunk(f.addr >> CHUNK_SHIFT) {
            ch.faults += 1;
            ch.cur = ch.cur.saturating_add(1);
        }
        self.last_pid = Some(tgid);
    }

    fn scan(&mut self, s: &ScanEvent) {
        self.scans.record(s);
        let tgid = (s.pid_tgid >> 32) as u32;
        let Some(p) = self.proc_mut(tgid) else {
            return;
        };
        p.scan_passes += 1;
        p.ptes += s.ptes_updated;
        p.stamps += s.stamps;
        p.last_ts = p.last_ts.max(s.ts_ns);
        if p.ranges.len() < MAX_RANGES_PER_PROC || p.ranges.contains_key(&s.start) {
            let r = p.ranges.entry(s.start).or_default();
            r.end = r.end.max(s.end);
            r.passes += 1;
            r.ptes += s.ptes_updated;
            r.last_ts = r.last_ts.max(s.ts_ns);
        }
        if s.end > s.start {
            let (a, b) = (s.start >> CHUNK_SHIFT, (s.end - 1) >> CHUNK_SHIFT);
            for c in a..=b.min(a + MAX_CHUNKS_PER_SCAN - 1) {
                if let Some(ch) = p.chunk(c) {
                    ch.scanned_cur = true;
                }
            }
        }
    }

    fn skip(&mut self, s: &SkipEvent) {
        let tgid = (s.pid_tgid >> 32) as u32;
        let Some(p) = self.proc_mut(tgid) else {
            return;
        };
        *p.skips.entry(skip_name(s.reason)).or_default() += 1;
        if p.skip_by_start.len() < MAX_RANGES_PER_PROC || p.skip_by_start.contains_key(&s.vm_start)
        {
            p.skip_by_start.insert(s.vm_start, s.reason);
        }
    }

    /// Starts a new interval at `now` (event-time ns): rates, histories,
    /// heat slots. Returns false when too little time passed.
    fn roll(&mut self, now: u64) -> bool {
        let last = match self.last_roll_ts {
            Some(t) => t,
            None => self
                .first_snapshot
                .as_ref()
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
        if let Some(s) = &self.last_snapshot {
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

    /// Publishes a frame. `now` is the current time on the events' clock
    /// (live); `None` uses the latest event or snapshot time (replay).
    pub fn publish(&mut self, now: Option<u64>, focus: Focus) -> Frame {
        let now = now.unwrap_or(self.now_ts).max(self.now_ts);
        self.roll(now);
        self.frame(now, focus)
    }

    /// The current state for a new focus, without starting a new interval
    /// (the rates and histories stay those of the last publication).
    pub fn peek(&mut self, focus: Focus) -> Frame {
        let now = self.last_roll_ts.unwrap_or(self.now_ts);
        self.frame(now, focus)
    }

    fn frame(&mut self, now: u64, focus: Focus) -> Frame {
        self.seq += 1;
        let rows: Vec<ProcRow> = {
            let mut v: Vec<&Proc> = self.procs.iter().filter(|p| p.counts.faults > 0).collect();
            v.sort_by(|a, b| {
                b.rates.counts[0]
                    .total_cmp(&a.rates.counts[0])
                    .then(b.counts.faults.cmp(&a.counts.faults))
                    .then(a.pid.cmp(&b.pid))
            });
            v.into_iter().take(MAX_ROWS).map(|p| self.row(p)).collect()
        };
        let mut header = self.st.header.clone();
        header.tiers = tier_views(&self.st.tiers, &self.st.nodes);
        header.kernel_threshold_ms = self.kernel_threshold.clone();
        Frame {
            seq: self.seq,
            source: self.source.clone(),
            ended: self.ended.clone(),
            elapsed_s: match (
                self.first_snapshot
                    .as_ref()
                    .map(|s| s.ts_ns)
                    .or(self.first_ts),
                now,
            ) {
                (Some(a), b) => b.saturating_sub(a) as f64 / 1e9,
                _ => 0.0,
            },
            interval_s: self.last_dt_s,
            events: self.events,
            header,
            warnings: self.warnings(),
            rates: self.rate_series(),
            models: self.model_views(),
            system: self.system_row(),
            processes: rows,
            hist: self.hist_view(focus.hist_pid),
            detail: focus.detail_pid.and_then(|pid| self.detail(pid)),
        }
    }

    fn counter_delta(&self, c: Counter) -> u64 {
        let get = |s: &Option<Snapshot>| {
            s.as_ref()
                .and_then(|s| s.counters.get(c as usize).copied())
                .unwrap_or(0)
        };
        get(&self.last_snapshot).saturating_sub(get(&self.first_snapshot))
    }

    fn warnings(&self) -> Warnings {
        Warnings {
            ring_drops: self.counter_delta(Counter::RingDrops),
            evictions: self
                .counter_delta(Counter::StampInserts)
                .saturating_sub(self.st.stamp_capacity),
            stamp_misses: self.counter_delta(Counter::StampMisses),
        }
    }

    fn rate_series(&self) -> Vec<RateSeries> {
        let names = BASE_SERIES.iter().map(|s| (*s).to_owned()).chain(
            self.model_views()
                .into_iter()
                .map(|m| format!("{} would", m.short)),
        );
        names
            .zip(&self.history)
            .enumerate()
            .map(|(i, (name, h))| RateSeries {
                name,
                current: h.back().copied().unwrap_or(0.0),
                history: h.iter().copied().collect(),
                note: if i == 0 {
                    let r = &self.sys_rates.counts;
                    if r[0] > 0.0 {
                        format!("{:.0}% local", 100.0 * r[1] / r[0])
                    } else {
                        String::new()
                    }
                } else {
                    String::new()
                },
            })
            .collect()
    }

    fn model_views(&self) -> Vec<ModelView> {
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        self.models
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let name = m.policy.name();
                let base = short_name(&name);
                let k = seen.entry(base).or_default();
                *k += 1;
                let short = if *k == 1 {
                    base.to_owned()
                } else {
                    format!("{}{}", &base[..base.len().min(5)], k)
                };
                let params: Vec<String> = m
                    .policy
                    .params()
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                ModelView {
                    axis: axis_of(&name),
                    name,
                    short,
                    params: params.join(","),
                    threshold: m.policy.threshold(),
                    promote_s: self.sys_rates.models.get(i).copied().unwrap_or(0.0),
                    agree_pct: pct(m.agree, self.sys_decided),
                }
            })
            .collect()
    }

    fn quantiles(h: &Hists) -> (Option<f64>, Option<f64>, Option<u64>) {
        (
            h.lat_all.quantile(0.5).map(|v| v as f64 / 1e6),
            h.lat_all.quantile(0.99).map(|v| v as f64 / 1e6),
            h.delta_all.quantile(0.5),
        )
    }

    fn row(&self, p: &Proc) -> ProcRow {
        let r = &p.rates.counts;
        let (p50, p99, d50) = Self::quantiles(&p.hists);
        ProcRow {
            pid: p.pid,
            comm: p.comm.clone(),
            faults_s: r[0],
            local_pct: (r[0] > 0.0).then(|| 100.0 * r[1] / r[0]),
            decisions_s: r[2],
            promoted_s: r[3],
            rej_latency_s: r[4],
            rej_rate_limit_s: r[5],
            model_s: p.rates.models.clone(),
            agree_pct: p
                .model_agree
                .iter()
                .map(|a| pct(*a, p.counts.decisions))
                .collect(),
            lat_p50_ms: p50,
            lat_p99_ms: p99,
            delta_p50: d50,
            faults_total: p.counts.faults,
            resident: p.resident.clone(),
        }
    }

    fn system_row(&self) -> ProcRow {
        let r = &self.sys_rates.counts;
        let (p50, p99, d50) = Self::quantiles(&self.sys_hists);
        let mut resident: BTreeMap<u32, u64> = BTreeMap::new();
        let mut any = false;
        for p in self.procs.iter() {
            for (n, pages) in p.resident.iter().flatten() {
                any = true;
                *resident.entry(*n).or_default() += pages;
            }
        }
        ProcRow {
            pid: 0,
            comm: "all processes".into(),
            faults_s: r[0],
            local_pct: (r[0] > 0.0).then(|| 100.0 * r[1] / r[0]),
            decisions_s: r[2],
            promoted_s: r[3],
            rej_latency_s: r[4],
            rej_rate_limit_s: r[5],
            model_s: self.sys_rates.models.clone(),
            agree_pct: self
                .models
                .iter()
                .map(|m| pct(m.agree, self.sys_decided))
                .collect(),
            lat_p50_ms: p50,
            lat_p99_ms: p99,
            delta_p50: d50,
            faults_total: self.sys.faults,
            resident: any.then(|| resident.into_iter().collect()),
        }
    }

    fn hist_view(&self, pid: Option<u32>) -> HistView {
        let (title, h) = match pid.and_then(|pid| self.procs.get(pid)) {
            Some(p) => (format!("{} {}", p.pid, p.comm), &p.hists),
            None => ("all processes".to_owned(), &self.sys_hists),
        };
        HistView {
            title,
            pid: pid.filter(|p| self.procs.contains(*p)),
            latency_promoted: h.latency[0].to_vec(),
            latency_rejected: h.latency[1].to_vec(),
            delta_promoted: h.delta[0].to_vec(),
            delta_rejected: h.delta[1].to_vec(),
            kernel_threshold_ms: self
                .kernel_threshold
                .values()
                .max()
                .map(|v| u64::from(*v))
                .or(self.st.header.hot_threshold_ms),
        }
    }

    fn detail(&self, pid: u32) -> Option<Detail> {
        let p = self.procs.get(pid)?;
        let now = self.now_ts;
        let mut ranges: Vec<RangeRow> = p
            .ranges
            .iter()
            .map(|(start, r)| RangeRow {
                start: *start,
                end: r.end,
                passes: r.passes,
                ptes_updated: r.ptes,
                faults: p.chunk_faults(*start, r.end),
                age_s: now.saturating_sub(r.last_ts) as f64 / 1e9,
                skip: p.skip_by_start.get(start).map(|r| skip_name(*r)),
            })
            .collect();
        ranges.sort_by(|a, b| a.age_s.total_cmp(&b.age_s).then(a.start.cmp(&b.start)));
        ranges.truncate(64);
        let vmas = p.vmas.as_ref().map(|vmas| {
            vmas.iter()
                .map(|v| {
                    let (passes, ptes) = p
                        .ranges
                        .iter()
                        .filter(|(s, _)| (v.start..v.end).contains(*s))
                        .fold((0, 0), |(a, b), (_, r)| (a + r.passes, b + r.ptes));
                    VmaRow {
                        start: v.start,
                        end: v.end,
                        perms: v.perms.clone(),
                        path: v.path.clone(),
                        faults: p.chunk_faults(v.start, v.end),
                        scan_passes: passes,
                        ptes_updated: ptes,
                        skip: p.skip_by_start.get(&v.start).map(|r| skip_name(*r)),
                    }
                })
                .collect()
        });
        Some(Detail {
            pid,
            comm: p.comm.clone(),
            faults_total: p.counts.faults,
            vmas,
            scan_passes: p.scan_passes,
            ptes_updated: p.ptes,
            stamps: p.stamps,
            ranges,
            skips: p.skips.clone(),
            heat: heat(p),
        })
    }
}

/// Groups sorted chunk numbers into at most `rows` address regions: first
/// at the widest gaps (unrelated mappings), then by halving the largest
/// region. Returns index ranges into `chunks`.
pub fn regions(chunks: &[u64], rows: usize) -> Vec<std::ops::Range<usize>> {
    if chunks.is_empty() || rows == 0 {
        return Vec::new();
    }
    let mut gaps: Vec<(u64, usize)> = chunks
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w[1] - w[0] > 1)
        .map(|(i, w)| (w[1] - w[0], i + 1))
        .collect();
    gaps.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut cuts: Vec<usize> = gaps.iter().take(rows - 1).map(|g| g.1).collect();
    cuts.sort_unstable();
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    let mut start = 0;
    for c in cuts {
        out.push(start..c);
        start = c;
    }
    out.push(start..chunks.len());
    while out.len() < rows {
        let Some((i, r)) = out
            .iter()
            .enumerate()
            .max_by_key(|(_, r)| (r.len(), std::cmp::Reverse(r.start)))
            .map(|(i, r)| (i, r.clone()))
        else {
            break;
        };
        if r.len() < 2 {
            break;
        }
        let mid = r.start + r.len() / 2;
        out[i] = r.start..mid;
        out.insert(i + 1, mid..r.end);
    }
    out
}

fn heat(p: &Proc) -> Heat {
    let mut chunks: Vec<u64> = p.heat.iter().flat_map(|s| s.iter().map(|e| e.0)).collect();
    chunks.sort_unstable();
    chunks.dedup();
    let groups = regions(&chunks, HEAT_ROWS);
    let slots = HEAT_SLOTS;
    let pad = slots.saturating_sub(p.heat.len());
    let mut rows: Vec<HeatRow> = groups
        .iter()
        .map(|g| HeatRow {
            start: chunks[g.start] << CHUNK_SHIFT,
            end: (chunks[g.end - 1] + 1) << CHUNK_SHIFT,
            faults: vec![0; slots],
            scanned: vec![false; slots],
        })
        .collect();
    let mut max = 0;
    for (j, slot) in p.heat.iter().enumerate() {
        for (c, n, scanned) in slot {
            let Ok(idx) = chunks.binary_search(c) else {
                continue;
            };
            let Some(gi) = groups.iter().position(|g| g.contains(&idx)) else {
                continue;
            };
            let cell = &mut rows[gi].faults[pad + j];
            *cell = cell.saturating_add(*n);
            max = max.max(*cell);
            rows[gi].scanned[pad + j] |= *scanned;
        }
    }
    Heat { rows, slots, max }
}

/// Bucket index of a threshold given in `unit`s of the histogram's value.
pub fn threshold_bucket(value: f64) -> usize {
    if !value.is_finite() || value <= 1.0 {
        return 0;
    }
    log2_bucket(value.ceil() as u64)
}

/// Upper bound of bucket `b`, re-exported for the views.
pub fn bucket_le(b: usize) -> u64 {
    upper_bound(b)
}

impl Sink for Aggregator {
    fn event(&mut self, ev: &Event) -> anyhow::Result<()> {
        Aggregator::event(self, ev);
        Ok(())
    }
    fn snapshot(&mut self, s: &Snapshot) -> anyhow::Result<()> {
        Aggregator::snapshot(self, s);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
