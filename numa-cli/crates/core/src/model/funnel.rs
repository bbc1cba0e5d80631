//! The promotion funnel: per process, and per VMA where the events tell
//! it, each stage a slow-tier page passes on its way to DRAM (scanned or
//! skipped, protected, faulted, decided, migrated) and a verdict naming
//! the first stage where most of it stops ([`verdict::judge`]).
//!
//! **VMA** here is a region of one process's address space: the exact
//! `vm_start..vm_end` a `sched_skip_vma_numa` record names, or, until one
//! names it, the span of overlapping or adjacent scan passes (a pass never
//! crosses a VMA, but adjacent VMAs' passes join). A skip record takes the
//! regions it overlaps into its VMA. Faults count in the region
//! holding their address, scans in the one holding their start; what no
//! region holds counts for the process only. At most [`MAX_REGIONS`] per
//! process: when they are all taken, a new one replaces a region without
//! slow-tier activity (a VMA only ever skipped, such as each thread's
//! stack guard in a process of many threads), else it counts for the
//! process only; a region with activity is never replaced.
//!
//! Each cgroup (v2) has one funnel too, over all its processes' events
//! (the scanning or faulting task's cgroup; bounded as
//! [`super::cgroups::Cgroups`] bounds them), without regions: the verdict
//! of a container, whose processes come and go.
//!
//! Fed by [`super::totals::Totals`] with the events of its window, so its
//! sums match the totals'. Bounded: the live processes are a
//! [`ProcTable`] of at most [`MAX_PROCS`] (a process gone, no event for
//! [`GONE_AFTER_NS`](super::GONE_AFTER_NS), leaves it, and past the bound
//! the least recently active), and one that leaves is kept only while it
//! may rank among the [`TOP`] the report lists ([`Retired`]).
use std::borrow::Cow;

use serde::Serialize;

use numa_ebpf_common::{FaultEvent, ScanEvent, SkipEvent};

use super::{
    cgroups::{CgroupFunnel, Cgroups},
    proctable::{ProcTable, Retired},
};

mod stages;
pub mod verdict;

pub use stages::{SkipRow, StageRow, Stages};
pub use verdict::{judge, Verdict};

/// Processes the report lists, by slow-tier activity.
pub const TOP: usize = 10;
/// Processes held at once: past it the least recently active goes (kept
/// while it may rank, as a gone one is).
pub const MAX_PROCS: usize = 1 << 14;
/// Regions (VMAs) kept per process.
pub const MAX_REGIONS: usize = 32;
/// x86-64's base page: the PTEs a pass protects are counted in these.
const PAGE_SHIFT: u32 = 12;

#[derive(Debug, Clone)]
struct Region {
    start: u64,
    end: u64,
    /// Named by a skip record (else the span of scan passes).
    named: bool,
    stages: Stages,
}

#[derive(Debug, Clone, Default)]
struct Proc {
    pid: u32,
    comm: String,
    all: Stages,
    regions: Vec<Region>,
}

impl Proc {
    /// Ranks in the report: most activity first, then skips, then pid.
    fn rank(&self) -> (std::cmp::Reverse<(u64, u64)>, u32) {
        let skips = self.all.skips.values().map(|s| s.count).sum();
        (std::cmp::Reverse((self.all.activity(), skips)), self.pid)
    }

    fn region_at(&mut self, addr: u64) -> Option<&mut Stages> {
        self.regions
            .iter_mut()
            .find(|r| r.start <= addr && addr < r.end)
            .map(|r| &mut r.stages)
    }

    /// The region of a scan pass over `start..end`: the one holding its
    /// start, else a provisional one joined to a neighbour or new.
    fn scan_region(&mut self, start: u64, end: u64) -> Option<&mut Stages> {
        let i = match self
            .regions
            .iter()
            .position(|r| r.start <= start && start < r.end)
        {
            Some(i) => i,
            None => {
                let joins = |r: &Region| !r.named && r.start <= end && start <= r.end;
                match self.regions.iter().position(joins) {
                    Some(i) => {
                        let r = &mut self.regions[i];
                        (r.start, r.end) = (r.start.min(start), r.end.max(end));
                        i
                    }
                    None => self.new_region(start, end, false)?,
                }
            }
        };
        Some(&mut self.regions[i].stages)
    }

    /// The VMA a skip record names, taking in the regions mostly inside
    /// it: the scan passes' spans, and a VMA named before with other
    /// bounds (grown, shrunk or replaced at the same place).
    fn vma(&mut self, start: u64, end: u64) -> Option<&mut Stages> {
        if end <= start {
            return None;
        }
        if let Some(i) = self
            .regions
            .iter()
            .position(|r| r.named && r.start == start && r.end == end)
        {
            return Some(&mut self.regions[i].stages);
        }
        // A region goes to the VMA holding most of it: a provisional one
        // can span adjacent VMAs (their passes joined), and a VMA named
        // before can have been split since (a thread's stack mapped next
        // to it merges with it, then its guard page splits it off).
        let takes = |r: &Region| {
            let inside = r.end.min(end).saturating_sub(r.start.max(start));
            inside.saturating_mul(2) > r.end - r.start
        };
        let mut taken = Stages::default();
        self.regions.retain(|r| {
            let take = takes(r);
            if take {
                taken.absorb(&r.stages);
            }
            !take
        });
        let i = self.new_region(start, end, true)?;
        taken.vma_pages = Some((end - start) >> PAGE_SHIFT);
        self.regions[i].stages = taken;
        Some(&mut self.regions[i].stages)
    }

    fn new_region(&mut self, start: u64, end: u64, named: bool) -> Option<usize> {
        if end <= start {
            return None;
        }
        let region = Region {
            start,
            end,
            named,
            stages: Stages::default(),
        };
        if self.regions.len() < MAX_REGIONS {
            self.regions.push(region);
            return Some(self.regions.len() - 1);
        }
        // The oldest-seen region without activity makes room.
        let idle = self
            .regions
            .iter()
            .enumerate()
            .filter(|(_, r)| r.stages.activity() == 0)
            .min_by_key(|(_, r)| r.stages.first_ns)
            .map(|(i, _)| i)?;
        self.regions[idle] = region;
        Some(idle)
    }
}

/// Per-process funnels over the events of a window.
#[derive(Debug)]
pub struct Funnel {
    live: ProcTable<Proc>,
    /// Gone or evicted processes that may still rank in the report.
    retired: Retired<Proc>,
    cgroups: Cgroups<Stages>,
}

impl Default for Funnel {
    fn default() -> Self {
        Funnel {
            live: ProcTable::new(MAX_PROCS, usize::MAX).keep_dropped(),
            retired: Retired::new(TOP),
            cgroups: Cgroups::default(),
        }
    }
}

impl Funnel {
    /// The funnel of cgroup `id`; None for a record without one (a trace
    /// of an older numatrace has none on its scans and skips).
    fn cgroup(&mut self, id: u64) -> Option<&mut Stages> {
        (id != 0).then(|| self.cgroups.row_mut(id))
    }

    pub fn scan(&mut self, s: &ScanEvent) {
        if let Some(c) = self.cgroup(s.cgroup_id) {
            c.scan(s.ts_ns, s.ptes_updated);
        }
        let p = self.proc(s.tgid(), s.ts_ns);
        p.all.scan(s.ts_ns, s.ptes_updated);
        if let Some(r) = p.scan_region(s.start, s.end) {
            r.scan(s.ts_ns, s.ptes_updated);
        }
        self.retire_dropped();
    }

    pub fn skip(&mut self, s: &SkipEvent) {
        if let Some(c) = self.cgroup(s.cgroup_id) {
            c.skip(s.ts_ns, s.reason);
        }
        let p = self.proc(s.tgid(), s.ts_ns);
        p.all.skip(s.ts_ns, s.reason);
        if let Some(r) = p.vma(s.vm_start, s.vm_end) {
            r.skip(s.ts_ns, s.reason);
        }
        self.retire_dropped();
    }

    /// A hint fault; `slow` when its folio is on a slow-tier node (the
    /// caller knows the tiers): only those count, the others only tell
    /// that the process is there.
    pub fn fault(&mut self, f: &FaultEvent, slow: bool) {
        if slow {
            if let Some(c) = self.cgroup(f.cgroup_id) {
                c.fault(f);
            }
        }
        let p = self.proc(f.tgid(), f.ts_ns);
        if p.comm.is_empty() {
            p.comm = crate::decode::comm(&f.comm);
        }
        if slow {
            p.all.fault(f);
            if let Some(r) = p.region_at(f.addr) {
                r.fault(f);
            }
        }
        self.retire_dropped();
    }

    /// The live entry of `pid` at `ts_ns`; a new one when the pid is new or
    /// its previous process is gone.
    fn proc(&mut self, pid: u32, ts_ns: u64) -> &mut Proc {
        self.live.touch(pid, ts_ns, || Proc {
            pid,
            ..Proc::default()
        })
    }

    /// Keeps the processes the table dropped while they may rank among
    /// the report's [`TOP`] (after every event, so a report sees them).
    fn retire_dropped(&mut self) {
        for (_, gone) in self.live.take_dropped() {
            self.retired.push(gone, |a, b| a.rank().cmp(&b.rank()));
        }
    }

    /// Live processes and retired ones kept.
    pub fn len(&self) -> (usize, usize) {
        (self.live.len(), self.retired.len())
    }

    /// One live process judged at `end_ns` (for a view that lists its own
    /// processes, such as `top`'s table).
    pub fn process(&self, pid: u32, end_ns: u64) -> Option<ProcessFunnel> {
        self.live.get(pid).map(|p| row(p, end_ns))
    }

    /// The funnel of cgroup `id` judged at `end_ns`, on a kernel whose
    /// threshold measures `hotness`.
    pub fn cgroup_funnel(
        &self,
        id: u64,
        end_ns: u64,
        hotness: crate::params::KernelHotness,
    ) -> Option<CgroupFunnel> {
        let (stages, verdict) = self.cgroup_judged(id, end_ns, hotness)?;
        Some(CgroupFunnel {
            verdict: verdict.to_string(),
            verdict_kind: verdict.kind().into(),
            stages: stages.row(end_ns),
        })
    }

    /// The verdict on cgroup `id` at `end_ns`, on a kernel whose threshold
    /// measures `hotness`.
    pub fn cgroup_verdict(
        &self,
        id: u64,
        end_ns: u64,
        hotness: crate::params::KernelHotness,
    ) -> Option<Verdict> {
        self.cgroup_judged(id, end_ns, hotness).map(|(_, v)| v)
    }

    /// Cgroup `id`'s stages and the verdict on them.
    fn cgroup_judged(
        &self,
        id: u64,
        end_ns: u64,
        hotness: crate::params::KernelHotness,
    ) -> Option<(&Stages, Verdict)> {
        let stages = self.cgroups.get(id)?;
        Some((stages, judge(stages, end_ns).with_hotness(hotness)))
    }

    /// The [`TOP`] processes by slow-tier activity, judged at `end_ns`.
    pub fn report(&self, end_ns: u64) -> Vec<ProcessFunnel> {
        let mut procs: Vec<&Proc> = self.live.values().chain(self.retired.rows()).collect();
        procs.sort_by_key(|p| p.rank());
        procs.truncate(TOP);
        procs.into_iter().map(|p| row(p, end_ns)).collect()
    }
}

/// The funnel on its own, as a sink beside others (the shadow models):
/// the totals' window rule (nothing before the first snapshot) and its
/// slow-tier test (a source node outside the top tier).
#[derive(Debug, Default)]
pub struct Watch {
    funnel: Funnel,
    toptier_mask: u64,
    first_snapshot_ns: Option<u64>,
    end_ns: u64,
}

impl Watch {
    pub fn new(toptier_mask: u64) -> Self {
        Watch {
            toptier_mask,
            ..Watch::default()
        }
    }

    /// The [`TOP`] processes, judged at the end of what was seen, on a
    /// kernel whose threshold measures `hotness`.
    pub fn report(&self, hotness: crate::params::KernelHotness) -> Vec<ProcessFunnel> {
        let mut rows = self.funnel.report(self.end_ns);
        with_hotness(&mut rows, hotness);
        rows
    }
}

impl crate::sink::Sink for Watch {
    fn event(&mut self, ev: &crate::decode::Event) -> anyhow::Result<()> {
        use crate::decode::Event;
        let ts = ev.ts_ns();
        if self.first_snapshot_ns.is_some_and(|first| ts < first) {
            return Ok(());
        }
        self.end_ns = self.end_ns.max(ts);
        match ev {
            Event::Fault(f) => {
                self.funnel
                    .fault(f, slow_tier(f.src_nid, self.toptier_mask));
            }
            Event::Scan(s) => self.funnel.scan(s),
            Event::Skip(s) => self.funnel.skip(s),
            // The funnel follows NUMA balancing's stages; DAMON is not one.
            Event::Demote(_) | Event::Damon(_) => {}
        }
        Ok(())
    }

    fn snapshot(&mut self, s: &crate::decode::Snapshot) -> anyhow::Result<()> {
        self.first_snapshot_ns.get_or_insert(s.ts_ns);
        self.end_ns = self.end_ns.max(s.ts_ns);
        Ok(())
    }
}

/// Whether node `nid` is outside the top tier (`toptier_mask`'s bits).
pub fn slow_tier(nid: i32, toptier_mask: u64) -> bool {
    (0..64).contains(&nid) && toptier_mask >> nid & 1 == 0
}

/// Whether the hint fault `f` moved its folio from a lower tier to the
/// top tier: what vmstat's pgpromote_success counts.
pub fn promoted_folio(f: &FaultEvent, toptier_mask: u64) -> bool {
    f.migrated() && slow_tier(f.src_nid, toptier_mask) && top_tier(f.dst_nid, toptier_mask)
}

/// Whether node `nid` is in the top tier (`toptier_mask`'s bits).
pub fn top_tier(nid: i32, toptier_mask: u64) -> bool {
    (0..64).contains(&nid) && toptier_mask >> nid & 1 == 1
}

/// A report read back from its JSON has the verdict as text only
/// (`verdict`, `verdict_kind`).
fn unread_verdict() -> Verdict {
    Verdict::Quiet
}

/// One process in the report: its stages, its VMAs' and the verdict.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ProcessFunnel {
    pub pid: u32,
    pub comm: String,
    /// The verdict's line, and its stable id.
    pub verdict: String,
    pub verdict_kind: Cow<'static, str>,
    #[serde(skip, default = "unread_verdict")]
    pub judged: Verdict,
    /// The VMA the verdict is about, when one holds most of the activity.
    pub verdict_vma: Option<[u64; 2]>,
    #[serde(flatten)]
    pub stages: StageRow,
    pub vmas: Vec<VmaFunnel>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct VmaFunnel {
    pub start: u64,
    pub end: u64,
    /// Named by a skip record (else the span of the scan passes seen).
    pub named: bool,
    pub verdict: String,
    pub verdict_kind: Cow<'static, str>,
    #[serde(skip, default = "unread_verdict")]
    pub judged: Verdict,
    #[serde(flatten)]
    pub stages: StageRow,
}

/// A process's verdict is its main VMA's when one holds more than half of
/// its activity, else the process's over all its VMAs (a process without
/// activity too: a VMA's skips alone do not speak for it).
fn row(p: &Proc, end_ns: u64) -> ProcessFunnel {
    let total = p.all.activity();
    let main = p
        .regions
        .iter()
        .find(|r| r.stages.activity().saturating_mul(2) > total && total > 0);
    let (verdict, verdict_vma) = match main {
        Some(r) => (judge(&r.stages, end_ns), Some([r.start, r.end])),
        None => (judge(&p.all, end_ns), None),
    };
    let mut vmas: Vec<&Region> = p.regions.iter().collect();
    vmas.sort_by_key(|r| (std::cmp::Reverse(r.stages.activity()), r.start));
    ProcessFunnel {
        pid: p.pid,
        comm: p.comm.clone(),
        verdict: verdict.to_string(),
        verdict_kind: verdict.kind().into(),
        judged: verdict,
        verdict_vma,
        stages: p.all.row(end_ns),
        vmas: vmas
            .into_iter()
            .map(|r| {
                let v = judge(&r.stages, end_ns);
                VmaFunnel {
                    start: r.start,
                    end: r.end,
                    named: r.named,
                    verdict: v.to_string(),
                    verdict_kind: v.kind().into(),
                    judged: v,
                    stages: r.stages.row(end_ns),
                }
            })
            .collect(),
    }
}

/// The processes' verdicts once their folios' trips across tiers are
/// known: promoted, and most of it demoted again, is a ping-pong. VMAs
/// keep theirs (demotions are not traced per VMA).
pub fn with_pingpong<'a>(
    rows: &mut [ProcessFunnel],
    trips: impl Fn(u32) -> Option<&'a super::lifecycle::Trips>,
) {
    for p in rows {
        p.judged = p.judged.clone().with_pingpong(trips(p.pid));
        p.verdict = p.judged.to_string();
        p.verdict_kind = p.judged.kind().into();
    }
}

/// The rows' verdicts for a kernel whose threshold measures `hotness`.
pub fn with_hotness(rows: &mut [ProcessFunnel], hotness: crate::params::KernelHotness) {
    let rejudge = |judged: &mut Verdict, line: &mut String| {
        *judged = judged.clone().with_hotness(hotness);
        *line = judged.to_string();
    };
    for p in rows {
        rejudge(&mut p.judged, &mut p.verdict);
        for v in &mut p.vmas {
            rejudge(&mut v.judged, &mut v.verdict);
        }
    }
}

#[cfg(test)]
mod tests;
