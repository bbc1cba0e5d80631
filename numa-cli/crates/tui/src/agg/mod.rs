//! The aggregation behind `top`: a pipeline sink that keeps cumulative
//! counts per process and system-wide, runs the shadow policies on every
//! decision (through a `PolicyBank`, as `model::shadow` does), and turns
//! them into a [`Frame`] of per-second rates at each publication.
//!
//! Pure like `model`: time comes from the events and snapshots (or the
//! caller's `now`), procfs facts are handed in by the caller. Memory is
//! bounded: fixed-length histories, capped per-process maps, processes in a
//! [`ProcTable`] (the gone ones dropped, the least recently active evicted
//! past [`MAX_PROCS`]).
mod coverage;
mod fault;
mod funnel;
mod header;
mod heat;
mod hists;
mod procs;
mod publish;
mod roll;

use std::collections::{BTreeMap, VecDeque};

use numa_core::{
    decode::{Event, Snapshot},
    model::{
        cgroups::{Cgroups, PathCache, PathLookup},
        funnel::Funnel,
        lifecycle::Lifecycle,
        policy::{Policy, PolicyBank},
        proctable::ProcTable,
        window::Window,
    },
    params::KernelHotness,
    sink::Sink,
    topology::Node,
    trace,
};

use crate::frame::Frame;

use header::{header_view, Static};
use hists::Hists;
use procs::{Proc, Rates, Tally};
use publish::BASE_SERIES;
use roll::VmstatPages;

pub use heat::regions;
pub use hists::{bucket_le, threshold_bucket};
pub use publish::{short_name, FOLIOS, PAGES};

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

pub use numa_core::procfs::Vma;

/// Hint faults and decisions in folios (one per fault, a THP's too), and
/// the pages vmstat would count for the promotions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub faults: u64,
    pub local: u64,
    pub decisions: u64,
    /// Folios the kernel decided to promote.
    pub promoted: u64,
    pub rej_latency: u64,
    pub rej_rate_limit: u64,
    pub rej_other: u64,
    pub migrate_fail: u64,
    /// Pages migrated from a lower tier to the top tier: what vmstat's
    /// pgpromote_success counts.
    pub promoted_pages: u64,
}

/// A model's system-wide counts; its policy is the one at the same place
/// in the aggregator's [`PolicyBank`].
#[derive(Default)]
struct ModelSlot {
    promote: u64,
    prev_promote: u64,
    agree: u64,
}

pub struct Aggregator {
    source: String,
    /// The shadow policies and the scan index they read.
    bank: PolicyBank,
    models: Vec<ModelSlot>,
    procs: ProcTable<Proc>,
    last_pid: Option<u32>,
    sys: Counts,
    sys_prev: Counts,
    sys_rates: Rates,
    sys_decided: u64,
    sys_hists: Hists,
    history: Vec<VecDeque<f64>>,
    /// vmstat's pages per second, between the snapshots of the last two
    /// rolls: demoted, and promoted (pgpromote_success).
    vmstat_rates: VmstatPages<f64>,
    kernel_threshold: BTreeMap<i32, u32>,
    /// The last (node, threshold) put in `kernel_threshold` (most faults
    /// repeat it: no map lookup).
    last_threshold: Option<(i32, u32)>,
    window: Window,
    snap_at_roll: Option<(u64, VmstatPages<u64>)>,
    first_ts: Option<u64>,
    now_ts: u64,
    last_roll_ts: Option<u64>,
    last_dt_s: f64,
    events: u64,
    seq: u64,
    ended: Option<String>,
    st: Static,
    /// Where each process's and cgroup's slow-tier pages stop (the
    /// verdict column).
    funnel: Funnel,
    /// The cgroups' rows (bounded as the totals bound them).
    cgroups: Cgroups<Tally>,
    /// Names the cgroups (none: shown by id).
    cgroup_paths: Option<PathCache>,
    /// Nodes of the top tier (bit per node): a fault elsewhere is slow-tier.
    toptier_mask: u64,
    hotness: KernelHotness,
    /// Folios followed across tiers: which promotions reclaim undid.
    lifecycle: Lifecycle,
    /// Ping-pongs at the last roll, and their rate since the one before.
    pingpong_at_roll: u64,
    pingpong_s: f64,
}

impl Aggregator {
    pub fn new(policies: Vec<Box<dyn Policy>>, header: &trace::Header, source: String) -> Self {
        let n_series = BASE_SERIES.len() + policies.len();
        Aggregator {
            source,
            models: policies.iter().map(|_| ModelSlot::default()).collect(),
            bank: PolicyBank::new(policies),
            procs: ProcTable::new(MAX_PROCS, usize::MAX),
            last_pid: None,
            sys: Counts::default(),
            sys_prev: Counts::default(),
            sys_rates: Rates::default(),
            sys_decided: 0,
            sys_hists: Hists::default(),
            history: vec![VecDeque::with_capacity(HISTORY); n_series],
            vmstat_rates: VmstatPages::default(),
            kernel_threshold: BTreeMap::new(),
            last_threshold: None,
            window: Window::default(),
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
            funnel: Funnel::default(),
            cgroups: Cgroups::default(),
            cgroup_paths: None,
            toptier_mask: header.params.as_ref().map_or(1, |p| p.toptier_mask),
            hotness: header
                .params
                .as_ref()
                .map_or(KernelHotness::default(), |p| p.hotness),
            lifecycle: Lifecycle::for_trace(header.params.as_ref(), header.map_plan.as_ref()),
            pingpong_at_roll: 0,
            pingpong_s: 0.0,
        }
    }

    /// Names the cgroups with the paths `lookup` finds (looked up once
    /// per new cgroup).
    pub fn with_cgroup_paths(mut self, lookup: PathLookup) -> Self {
        self.cgroup_paths = Some(PathCache::new(lookup));
        self
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
            .values()
            .filter(|p| p.tally.counts.faults > 0)
            .map(|p| (p.tally.rates.counts[0], p.tally.counts.faults, p.pid))
            .collect();
        v.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        v.into_iter().take(n).map(|x| x.2).collect()
    }

    pub fn snapshot(&mut self, s: &Snapshot) {
        if self.window.first().is_none() {
            self.first_ts.get_or_insert(s.ts_ns);
        }
        self.now_ts = self.now_ts.max(s.ts_ns);
        self.window.push(s);
    }

    pub fn event(&mut self, ev: &Event) {
        let ts = ev.ts_ns();
        // Same window rule as the totals: nothing before the first snapshot.
        if self.window.first().is_some_and(|s| ts < s.ts_ns) {
            return;
        }
        self.events += 1;
        self.first_ts.get_or_insert(ts);
        self.now_ts = self.now_ts.max(ts);
        self.funnel_event(ev);
        match ev {
            Event::Fault(f) => self.fault(f),
            Event::Scan(s) => self.scan(s),
            Event::Skip(s) => self.skip(s),
            Event::Demote(d) => {
                self.lifecycle.demote(d);
            }
            // top shows NUMA balancing; DAMON's regions are not its events.
            Event::Damon(_) => {}
        }
    }

    /// The process `tgid`, active at `ts_ns`.
    fn proc_mut(&mut self, tgid: u32, ts_ns: u64) -> &mut Proc {
        let n = self.models.len();
        self.procs.touch(tgid, ts_ns, || Proc::new(tgid, n))
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
}

impl Sink for Aggregator {
    fn header(&mut self, h: &numa_core::trace::Header) -> anyhow::Result<()> {
        self.lifecycle.set_top_tier(h);
        Ok(())
    }
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
