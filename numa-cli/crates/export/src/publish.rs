//! The exporter's sink: keeps the event-derived counts (decisions by node
//! pair, per-process, shadow models; in folios, one per hint fault, and in
//! their pages, as vmstat counts) and, on every kernel snapshot, turns
//! them and the snapshot into an immutable [`MetricsState`] published on a
//! `tokio::sync::watch` channel. The HTTP side and the textfile writer only
//! read the latest value: a scrape never waits for the pipeline, and the
//! pipeline never waits for a scrape (publishing swaps one `Arc`).
use std::{collections::BTreeMap, sync::Arc};

use anyhow::Result;
use numa_ebpf_common::{Counter, FaultEvent, Outcome};
use tokio::sync::watch;

use super::metrics::{
    CgroupMetrics, Decision, FunnelMetrics, Info, KernelMetrics, MetricsState, MigratedPages,
    ModelMetrics, OutcomeHist, Pingpong, ProcessMetrics,
};
use numa_core::{
    decode::{comm, skip_reason_name, Event, Snapshot},
    model::{
        cgroups::{Cgroups, PathCache, PathLookup, OTHER_CGROUPS},
        funnel::{slow_tier, top_tier, Funnel},
        proctable::ProcTable,
        shadow::{ModelReport, Shadow},
        totals::PageCounts,
        window::Window,
    },
    sampling::Sampling,
    sink::Sink,
};

/// Processes tracked for `--per-process` at most: past it, the least
/// recently active is forgotten. Gone processes (no hint fault for
/// [`GONE_AFTER_NS`](numa_core::model::GONE_AFTER_NS)) are forgotten anyway, so this holds only when more
/// processes than this fault within that time.
const MAX_TRACKED_PROCESSES: usize = 1 << 16;

/// Reads the per-node vmstat counters (live runs only; IO stays out of the
/// pure models).
pub type NodeVmstat = fn() -> Vec<(u32, Vec<(String, u64)>)>;

/// Folios (one per hint fault) and the pages they hold.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    folios: u64,
    pages: u64,
}

impl Tally {
    fn add(&mut self, folios: u64, pages: u64) {
        self.folios += folios;
        self.pages += pages;
    }
}

#[derive(Debug, Default, Clone)]
struct ProcessCounts {
    comm: String,
    hint_faults: u64,
    promote: Tally,
    reject: Tally,
}

pub struct Options {
    pub info: Info,
    /// Shadow engine and the `model` label of each of its policies.
    pub shadow: Option<(Shadow, Vec<String>)>,
    /// Top processes exported with pid/comm labels (0: none).
    pub per_process: usize,
    /// Top cgroups exported with a path label, and how paths are found
    /// (None: no cgroup series).
    pub per_cgroup: Option<(usize, PathLookup)>,
    /// `--sample N` of the recording: event-derived counts are scaled by it.
    pub sample_every: u64,
    /// STAMPS map capacity, for the eviction estimate.
    pub stamp_capacity: u64,
    /// The per-folio plan of the run (None: a recording without one).
    pub sampling: Option<Sampling>,
    pub node_vmstat: Option<NodeVmstat>,
    /// Nodes of the top tier (bit per node): faults elsewhere are the
    /// funnel's slow-tier faults.
    pub toptier_mask: u64,
}

pub struct Publisher {
    tx: watch::Sender<Arc<MetricsState>>,
    opts: Options,
    window: Window,
    decisions: BTreeMap<(bool, u8, i32, i32), Tally>,
    migrated_pages: MigratedPages,
    processes: ProcTable<ProcessCounts>,
    cgroups: Cgroups,
    cgroup_paths: Option<(usize, PathCache)>,
    /// The latest event or snapshot time seen.
    now_ns: u64,
    snapshots: u64,
    events: u64,
    funnel: Funnel,
    /// VMA skips by the kernel's reason id.
    skips: BTreeMap<u32, u64>,
    demotions: numa_core::model::demotions::Demotions,
    lifecycle: numa_core::model::lifecycle::Lifecycle,
}

impl Publisher {
    /// The publisher and the receiving end for readers. Until the first
    /// snapshot readers see `numatrace_info` and the exporter's own metrics.
    pub fn new(opts: Options) -> (Publisher, watch::Receiver<Arc<MetricsState>>) {
        let initial = MetricsState {
            info: opts.info.clone(),
            ..MetricsState::default()
        };
        let (tx, rx) = watch::channel(Arc::new(initial));
        let mut opts = opts;
        let cgroup_paths = opts
            .per_cgroup
            .take()
            .map(|(top, lookup)| (top, PathCache::new(lookup)));
        (
            Publisher {
                cgroups: Cgroups::default(),
                cgroup_paths,
                tx,
                opts,
                window: Window::default(),
                decisions: BTreeMap::new(),
                migrated_pages: MigratedPages::default(),
                processes: ProcTable::new(MAX_TRACKED_PROCESSES, usize::MAX),
                now_ns: 0,
                snapshots: 0,
                events: 0,
                funnel: Funnel::default(),
                skips: BTreeMap::new(),
                demotions: Default::default(),
                lifecycle: Default::default(),
            },
            rx,
        )
    }

    /// Seconds from the first to the last snapshot (trace time).
    pub fn window_s(&self) -> f64 {
        self.window.span_ns() as f64 / 1e9
    }

    /// Counts a fault record, which stands for `--sample` faults: that
    /// many folios, and that many times the record's pages.
    fn fault(&mut self, f: &FaultEvent) {
        let scale = self.opts.sample_every.max(1);
        let pages = scale.saturating_mul(f.pages());
        let decided = f.decided();
        let promote = f.kernel_promoted();
        self.migration(f, pages);
        if decided {
            let outcome = f.typed_outcome() as u8;
            self.decisions
                .entry((promote, outcome, f.src_nid, f.dst_nid))
                .or_default()
                .add(scale, pages);
        }
        if self.cgroup_paths.is_some() {
            self.cgroups
                .fault(f, f.typed_outcome(), self.opts.toptier_mask);
        }
        if self.opts.per_process == 0 {
            return;
        }
        let tgid = f.tgid();
        self.now_ns = self.now_ns.max(f.ts_ns);
        // New, or its pid's previous process is gone: a new process.
        let p = self.processes.touch(tgid, f.ts_ns, ProcessCounts::default);
        if p.comm.is_empty() {
            p.comm = comm(&f.comm);
        }
        p.hint_faults += scale;
        if decided {
            let t = if promote {
                &mut p.promote
            } else {
                &mut p.reject
            };
            t.add(scale, pages);
        }
    }

    /// The pages of a migration the fault tried: vmstat counts these where
    /// the in-kernel counters count one per folio.
    fn migration(&mut self, f: &FaultEvent, pages: u64) {
        if !f.migrate_tried() {
            return;
        }
        let m = &mut self.migrated_pages;
        if f.migrate_failed() {
            m.fail += pages;
            return;
        }
        m.success += pages;
        let mask = self.opts.toptier_mask;
        if slow_tier(f.src_nid, mask) && top_tier(f.dst_nid, mask) {
            m.promoted += pages;
        }
    }

    fn kernel(&self) -> KernelMetrics {
        let w = &self.window;
        let hist = |which: fn(&Snapshot) -> &Vec<u64>, sum_slot: usize| {
            Outcome::ALL
                .iter()
                .map(|o| OutcomeHist {
                    outcome: o.name(),
                    buckets: w.hist_row(which, *o as usize),
                    sum: w.hist_sum(*o as usize * 2 + sum_slot),
                })
                .collect()
        };
        KernelMetrics {
            hint_faults: w.count(Counter::HintFaults),
            migrations_success: w.count(Counter::MigrateSuccess),
            migrations_fail: w.count(Counter::MigrateFail),
            ring_drops: w.count(Counter::RingDrops),
            runs_missed: w.count(Counter::RunsMissed),
            map_evictions: w.evictions(self.opts.stamp_capacity),
            unfollowed_faults: w.count(Counter::Unfollowed),
            map_budget_bytes: self
                .opts
                .sampling
                .as_ref()
                .map_or(0, |s| s.map_budget_bytes),
            map_bytes: self.opts.sampling.as_ref().map_or(0, |s| s.map_bytes),
            folio_sample_rate: self.opts.sampling.as_ref().map_or(1, |s| s.rate),
            folio_coverage: self.opts.sampling.as_ref().map_or(1.0, |s| s.coverage),
            latency_ns: hist(|s| &s.hist_latency, 0),
            fault_delta: hist(|s| &s.hist_delta, 1),
        }
    }

    fn pingpong(&self) -> Pingpong {
        let (folios, pages, repromotions) = self.lifecycle.counts();
        let h = self.lifecycle.residency();
        Pingpong {
            folios,
            pages,
            repromotions,
            residency_ns: h.buckets.to_vec(),
            residency_sum_ns: h.sum,
            sampled_one_in: self.lifecycle.pingpong_sampled_one_in(),
        }
    }

    fn funnel_metrics(&self) -> FunnelMetrics {
        let mut by_verdict: BTreeMap<&'static str, u64> = BTreeMap::new();
        for p in self.funnel.report(self.now_ns) {
            *by_verdict.entry(p.judged.kind()).or_default() += 1;
        }
        FunnelMetrics {
            scan_passes: self.window.count(Counter::ScanRanges),
            ptes_protected: self.window.count(Counter::ScanPtesUpdated),
            vma_skips: self
                .skips
                .iter()
                .map(|(r, n)| (skip_reason_name(*r), *n))
                .collect(),
            processes_by_verdict: by_verdict.into_iter().collect(),
        }
    }

    fn decision_metrics(&self) -> Vec<Decision> {
        self.decisions
            .iter()
            .map(|(&(promote, outcome, src, dst), t)| Decision {
                promote,
                reason: Outcome::from_u8(outcome)
                    .unwrap_or(Outcome::NoDecision)
                    .name(),
                src_node: src,
                dst_node: dst,
                count: t.folios,
                pages: t.pages,
            })
            .collect()
    }

    fn model_metrics(&self) -> Vec<ModelMetrics> {
        let Some((shadow, labels)) = &self.opts.shadow else {
            return Vec::new();
        };
        let model = |(m, label): (&ModelReport, &String)| {
            let a = &m.agreement;
            ModelMetrics {
                model: label.clone(),
                promote: m.promote,
                both: a.both,
                kernel_only: a.kernel_only,
                model_only: a.model_only,
                neither: a.neither,
                promote_pages: m.projected.promote_pages,
                both_pages: a.both_pages,
                kernel_only_pages: a.kernel_only_pages,
                model_only_pages: a.model_only_pages,
                neither_pages: a.neither_pages,
            }
        };
        shadow
            .report()
            .models
            .iter()
            .zip(labels)
            .map(model)
            .collect()
    }

    /// The top `--per-process` processes still active, busiest first.
    fn process_metrics(&self) -> Vec<ProcessMetrics> {
        let mut processes: Vec<ProcessMetrics> = self
            .processes
            .iter()
            .map(|(pid, p)| ProcessMetrics {
                pid,
                comm: p.comm.clone(),
                hint_faults: p.hint_faults,
                promote: p.promote.folios,
                reject: p.reject.folios,
                promote_pages: p.promote.pages,
                reject_pages: p.reject.pages,
                verdict: "",
                demoted_by: BTreeMap::new(),
                pingpong: 0,
            })
            .collect();
        processes.sort_by(|a, b| b.hint_faults.cmp(&a.hint_faults).then(a.pid.cmp(&b.pid)));
        processes.truncate(self.opts.per_process);
        for p in &mut processes {
            if let Some(t) = self.lifecycle.process(p.pid) {
                p.demoted_by = numa_core::model::demotions::by_reclaimer_name(&t.demoted);
                p.pingpong = t.pingpong;
            }
            p.verdict = self
                .funnel
                .process(p.pid, self.now_ns)
                .map_or("", |f| f.judged.kind());
        }
        processes
    }

    /// The top `--per-cgroup` cgroups, busiest first, and the rest summed;
    /// event-derived, so scaled by `--sample`.
    fn cgroup_metrics(&mut self) -> Vec<CgroupMetrics> {
        let Some((top, paths)) = &mut self.cgroup_paths else {
            return Vec::new();
        };
        paths.learn(self.cgroups.ids());
        let scale = self.opts.sample_every.max(1);
        let rows = self.cgroups.rows(|id| paths.path(id).map(str::to_owned));
        let mut out: Vec<CgroupMetrics> = Vec::new();
        let mut other = CgroupMetrics {
            cgroup: "other".into(),
            ..CgroupMetrics::default()
        };
        let add = |m: &mut CgroupMetrics, c: &PageCounts| {
            m.hint_faults += scale * c.hint_faults;
            m.promote += scale * c.kernel_promote;
            m.reject += scale * c.decisions.saturating_sub(c.kernel_promote);
            m.promoted += scale * c.promoted;
        };
        for (i, r) in rows.iter().enumerate() {
            if i < *top && r.id != OTHER_CGROUPS {
                let mut m = CgroupMetrics {
                    cgroup: r.path.clone().unwrap_or_else(|| format!("id {}", r.id)),
                    ..CgroupMetrics::default()
                };
                add(&mut m, &r.counts);
                // The verdict's kind is the same whatever the kernel's
                // hotness measure (only its sentence names it).
                m.verdict = self
                    .funnel
                    .cgroup_verdict(r.id, self.now_ns, Default::default())
                    .map_or("", |v| v.kind());
                out.push(m);
            } else {
                add(&mut other, &r.counts);
            }
        }
        if rows.len() > out.len() {
            out.push(other);
        }
        out
    }

    fn state(&mut self, s: &Snapshot) -> MetricsState {
        MetricsState {
            generation: self.snapshots,
            info: self.opts.info.clone(),
            kernel: Some(self.kernel()),
            migrated_pages: self.migrated_pages.clone(),
            decisions: self.decision_metrics(),
            models: self.model_metrics(),
            processes: self.process_metrics(),
            cgroups: self.cgroup_metrics(),
            funnel: self.funnel_metrics(),
            demotions: self.demotions.report().by_reclaimer.into_iter().collect(),
            pingpong: self.pingpong(),
            vmstat: s.vmstat.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            node_vmstat: self.opts.node_vmstat.map(|f| f()).unwrap_or_default(),
            snapshots: self.snapshots,
            events: self.events,
            last_snapshot_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        }
    }
}

impl Sink for Publisher {
    fn header(&mut self, h: &numa_core::trace::Header) -> Result<()> {
        self.lifecycle.set_top_tier(h);
        if let Some((shadow, _)) = &mut self.opts.shadow {
            shadow.header(h);
        }
        Ok(())
    }

    fn event(&mut self, ev: &Event) -> Result<()> {
        self.events += 1;
        if let Some((shadow, _)) = &mut self.opts.shadow {
            shadow.event(ev);
        }
        // The window of `numatrace stats`: nothing before the first snapshot.
        if self.window.first().is_some_and(|s| ev.ts_ns() < s.ts_ns) {
            return Ok(());
        }
        match ev {
            Event::Fault(f) => {
                let slow = slow_tier(f.src_nid, self.opts.toptier_mask);
                self.funnel.fault(f, slow);
                self.lifecycle.fault(f, self.opts.toptier_mask);
                self.fault(f);
            }
            Event::Scan(s) => self.funnel.scan(s),
            Event::Skip(s) => {
                self.funnel.skip(s);
                *self.skips.entry(s.reason).or_default() += 1;
            }
            Event::Demote(d) => {
                self.demotions.record(d);
                self.lifecycle.demote(d);
            }
            // The metrics describe NUMA balancing; DAMON's regions are not its.
            Event::Damon(_) => {}
        }
        Ok(())
    }

    fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
        if let Some((shadow, _)) = &mut self.opts.shadow {
            shadow.snapshot(s);
        }
        self.window.push(s);
        self.now_ns = self.now_ns.max(s.ts_ns);
        self.processes.advance(s.ts_ns);
        self.snapshots += 1;
        let state = self.state(s);
        self.tx.send_replace(Arc::new(state));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use numa_ebpf_common::{hist_slot, HIST_SLOTS};

    use numa_ebpf_common::OUTCOME_BASE;

    use numa_core::model::GONE_AFTER_NS;

    use super::*;
    use numa_core::decode::fixtures::fault;
    use numa_ebpf_common::fault_flags as ff;

    fn outcome_counter(o: Outcome) -> usize {
        (OUTCOME_BASE + o as u32) as usize
    }

    fn snap(ts_ns: u64, hint_faults: u64, latency_bucket: usize, n: u64) -> Snapshot {
        let mut counters = vec![0; 32];
        counters[Counter::HintFaults as usize] = hint_faults;
        counters[outcome_counter(Outcome::RejectLatency)] = hint_faults;
        let mut hist_latency = vec![0; HIST_SLOTS];
        hist_latency[hist_slot(Outcome::RejectLatency as usize, latency_bucket)] = n;
        Snapshot {
            ts_ns,
            counters,
            hist_latency,
            hist_delta: vec![0; HIST_SLOTS],
            hist_sum: vec![0; 14],
            ..Snapshot::default()
        }
    }

    fn options(per_process: usize, sample_every: u64) -> Options {
        Options {
            info: Info::default(),
            shadow: None,
            per_process,
            per_cgroup: None,
            sample_every,
            stamp_capacity: 1 << 20,
            sampling: None,
            node_vmstat: None,
            toptier_mask: 1,
        }
    }

    fn publisher(
        per_process: usize,
        sample_every: u64,
    ) -> (Publisher, watch::Receiver<Arc<MetricsState>>) {
        Publisher::new(options(per_process, sample_every))
    }

    #[test]
    fn counts_are_deltas_since_the_first_snapshot() {
        let (mut p, rx) = publisher(0, 1);
        assert!(rx.borrow().kernel.is_none());
        p.snapshot(&snap(1_000, 5, 30, 5)).expect("snapshot");
        assert_eq!(rx.borrow().kernel.as_ref().map(|k| k.hint_faults), Some(0));
        p.snapshot(&snap(2_000_000_000_000, 12, 30, 12))
            .expect("snapshot");
        let s = rx.borrow().clone();
        let k = s.kernel.as_ref().expect("kernel metrics");
        assert_eq!(k.hint_faults, 7);
        let rl = &k.latency_ns[Outcome::RejectLatency as usize];
        assert_eq!(rl.outcome, "reject_latency");
        assert_eq!(rl.buckets[30], 7);
        assert_eq!(rl.count(), 7);
        assert_eq!(s.generation, 2);
    }

    #[test]
    fn decisions_by_node_pair_scaled_by_sampling_and_top_processes() {
        let (mut p, rx) = publisher(1, 4);
        p.snapshot(&snap(1, 0, 0, 0)).expect("snapshot");
        let mut other = fault(3, 3, 5000, Outcome::RejectLatency);
        other.pid_tgid = 7 << 32;
        for ev in [
            fault(1, 1, 5000, Outcome::RejectLatency),
            fault(2, 2, 10, Outcome::PromoteHot),
            other,
        ] {
            p.event(&Event::Fault(ev)).expect("event");
        }
        // A second after the faults (their processes are not gone).
        p.snapshot(&snap(1_001_000_000_000, 3, 0, 0))
            .expect("snapshot");
        let s = rx.borrow().clone();
        let got: Vec<(bool, &str, i32, i32, u64)> = s
            .decisions
            .iter()
            .map(|d| (d.promote, d.reason, d.src_node, d.dst_node, d.count))
            .collect();
        assert_eq!(
            got,
            vec![
                (false, "reject_latency", 1, 0, 8),
                (true, "promote_hot", 1, 0, 4)
            ]
        );
        assert_eq!(s.processes.len(), 1, "capped to --per-process 1");
        assert_eq!(s.processes[0].pid, 42);
        assert_eq!(s.processes[0].hint_faults, 8);
        assert_eq!(s.processes[0].comm, "hot-chunks");
        assert_eq!(s.events, 3);
    }

    /// Skips by reason and each process's verdict, from the events after
    /// the first snapshot.
    #[test]
    fn the_funnel_counts_skips_and_judges_the_top_processes() {
        let (mut p, rx) = publisher(1, 1);
        let skip = |ts_ns: u64| {
            Event::Skip(numa_ebpf_common::SkipEvent {
                kind: numa_ebpf_common::EventKind::VmaSkip as u32,
                reason: 4,
                ts_ns,
                pid_tgid: 42 << 32,
                vm_start: 0x7f00_0000_0000,
                vm_end: 0x7f00_1000_0000,
                cgroup_id: 0,
            })
        };
        p.snapshot(&snap(1, 0, 0, 0)).expect("snapshot");
        p.event(&skip(0)).expect("before the window: not counted");
        for i in 1..=10 {
            p.event(&Event::Fault(fault(i, i, 5000, Outcome::RejectLatency)))
                .expect("event");
        }
        for t in 0..3 {
            p.event(&skip(20_000 + t)).expect("skip");
        }
        p.snapshot(&snap(2_000_000_000, 10, 0, 0))
            .expect("snapshot");
        let s = rx.borrow().clone();
        assert_eq!(s.funnel.vma_skips, vec![("pid_inactive".to_owned(), 3)]);
        // Skipped with no pass seen: the scanner never got to its pages.
        assert_eq!(s.processes[0].verdict, "not_scanned");
        assert_eq!(s.funnel.processes_by_verdict, vec![("not_scanned", 1)]);
    }

    /// A fault on a THP: one folio, 512 pages (`FaultEvent::pages`).
    fn thp(seq: u64, latency_ms: u64, outcome: Outcome, migrated: Option<bool>) -> FaultEvent {
        let mut f = fault(seq, seq, latency_ms, outcome);
        f.nr_pages = 512;
        if let Some(ok) = migrated {
            f.flags |= ff::MIGRATE_TRIED;
            f.migrate_ok = u8::from(ok);
        }
        f
    }

    /// Decisions, migrations, processes and models count a THP fault as
    /// one folio of 512 pages, each figure scaled by `--sample`.
    #[test]
    fn a_thp_fault_is_one_folio_and_512_pages() {
        let (mut p, rx) = Publisher::new(Options {
            shadow: Some((
                Shadow::new(vec![kernel_time()], 0),
                vec!["kernel-time".into()],
            )),
            ..options(1, 2)
        });
        p.snapshot(&snap(1, 0, 0, 0)).expect("snapshot");
        let mut base_fail = fault(2, 2, 10, Outcome::PromoteHot);
        base_fail.flags |= ff::MIGRATE_TRIED;
        let mut dram = thp(4, 10, Outcome::PromoteHot, Some(true));
        dram.src_nid = 0;
        for f in [
            thp(1, 10, Outcome::PromoteHot, Some(true)),
            base_fail,
            thp(3, 5000, Outcome::RejectLatency, None),
            dram,
        ] {
            p.event(&Event::Fault(f)).expect("event");
        }
        p.snapshot(&snap(1_001_000_000_000, 4, 0, 0))
            .expect("snapshot");
        let s = rx.borrow().clone();
        let got: Vec<(bool, i32, u64, u64)> = s
            .decisions
            .iter()
            .map(|d| (d.promote, d.src_node, d.count, d.pages))
            .collect();
        assert_eq!(
            got,
            [(false, 1, 2, 1024), (true, 0, 2, 1024), (true, 1, 4, 1026)]
        );
        // DRAM to DRAM migrated but did not promote.
        let m = &s.migrated_pages;
        assert_eq!((m.success, m.fail, m.promoted), (2048, 2, 1024));
        let pr = &s.processes[0];
        assert_eq!((pr.promote, pr.promote_pages), (6, 2050));
        assert_eq!((pr.reject, pr.reject_pages), (2, 1024));
        // The shadow models count records (no --sample scale), as before.
        let md = &s.models[0];
        assert_eq!((md.promote, md.promote_pages), (3, 1025));
        assert_eq!((md.both, md.both_pages), (3, 1025));
        assert_eq!((md.neither, md.neither_pages), (1, 512));
        exposed_in_pages(s);
    }

    /// The THP test's state as scraped: page series with the pages.
    fn exposed_in_pages(s: Arc<MetricsState>) {
        let om = crate::metrics::encode_openmetrics(s).expect("encode");
        for line in [
            r#"numatrace_promotion_decisions_total{result="promote",reason="promote_hot",src_node="1",dst_node="0"} 4"#,
            r#"numatrace_promotion_decision_pages_total{result="promote",reason="promote_hot",src_node="1",dst_node="0"} 1026"#,
            r#"numatrace_migrated_pages_total{result="success"} 2048"#,
            r#"numatrace_migrated_pages_total{result="fail"} 2"#,
            "numatrace_promoted_pages_total 1024",
            r#"numatrace_process_promotion_decision_pages_total{pid="42",comm="hot-chunks",result="promote"} 2050"#,
            r#"numatrace_model_promote_pages_total{model="kernel-time"} 1025"#,
            r#"numatrace_model_agreement_pages_total{model="kernel-time",cell="neither"} 512"#,
        ] {
            assert!(om.lines().any(|l| l == line), "{line} not in\n{om}");
        }
    }

    fn kernel_time() -> Box<dyn numa_core::model::policy::Policy> {
        use numa_core::model::policy::{build, KernelDefaults, ModelDefaults};
        build(
            "kernel-time",
            &ModelDefaults::default(),
            &KernelDefaults::default(),
        )
        .expect("kernel-time")
    }

    #[test]
    fn process_table_stays_bounded() {
        let (mut p, _rx) = publisher(5, 1);
        for pid in 0..(MAX_TRACKED_PROCESSES as u64 + 10) {
            let mut f = fault(pid, pid, 10, Outcome::PromoteHot);
            f.pid_tgid = pid << 32;
            p.event(&Event::Fault(f)).expect("event");
        }
        assert!(p.processes.len() <= MAX_TRACKED_PROCESSES);
    }

    #[test]
    fn pid_churn_is_forgotten_and_totals_stay_exact() {
        const S: u64 = 1_000_000_000;
        let (mut p, rx) = publisher(3, 1);
        p.snapshot(&snap(S, 0, 0, 0)).expect("snapshot");
        let fault_of = |pid: u64, ts: u64| {
            let mut f = fault(ts / 1000, pid, 5000, Outcome::RejectLatency);
            f.pid_tgid = pid << 32;
            f.ts_ns = ts;
            Event::Fault(f)
        };
        // A heavy process early, then 5 000 processes of 2 faults, one a
        // second, beside one that faults throughout.
        for k in 0..500 {
            p.event(&fault_of(1, 2 * S + k)).expect("event");
        }
        let mut peak = 0;
        for i in 0..5_000u64 {
            let ts = 10 * S + i * S;
            for k in 0..2 {
                p.event(&fault_of(1000 + i, ts + k)).expect("event");
            }
            p.event(&fault_of(7, ts + 5)).expect("event");
            p.snapshot(&snap(ts + 10, 0, 0, 0)).expect("snapshot");
            peak = peak.max(p.processes.len());
        }
        // Bounded by the processes of the last ten minutes (and the long
        // runner), not by when a sweep last ran.
        let bound = (GONE_AFTER_NS / S + 2) as usize;
        assert!(peak <= bound, "{peak} processes tracked");
        let s = rx.borrow().clone();
        // Every decision counted, whatever was forgotten.
        let decided: u64 = s.decisions.iter().map(|d| d.count).sum();
        assert_eq!(decided, 500 + 5_000 * 3);
        // The heavy process is gone: its series ended; the long runner
        // leads, with all its faults.
        let top: Vec<(u32, u64)> = s.processes.iter().map(|m| (m.pid, m.hint_faults)).collect();
        assert_eq!(top[0], (7, 5_000));
        assert!(top.iter().all(|(pid, _)| *pid != 1), "{top:?}");
        // A pid that faults again after its process went is a new one.
        let ts = 10 * S + 5_000 * S + GONE_AFTER_NS;
        p.event(&fault_of(7, ts)).expect("event");
        p.snapshot(&snap(ts + 1, 0, 0, 0)).expect("snapshot");
        let s = rx.borrow().clone();
        assert_eq!(
            s.processes
                .iter()
                .map(|m| (m.pid, m.hint_faults))
                .collect::<Vec<_>>(),
            [(7, 1)]
        );
    }

    /// The busiest cgroups by path, the rest summed as `other`.
    #[test]
    fn cgroups_past_the_top_are_summed_as_other() {
        let lookup: PathLookup =
            Box::new(|ids| ids.iter().map(|id| (*id, format!("/c{id}"))).collect());
        let (mut p, rx) = Publisher::new(Options {
            per_cgroup: Some((1, lookup)),
            ..options(0, 1)
        });
        p.snapshot(&snap(1, 0, 0, 0)).expect("snapshot");
        for (i, id) in [5u64, 5, 6, 7].into_iter().enumerate() {
            let mut f = fault(i as u64 + 2, i as u64, 10, Outcome::RejectLatency);
            f.cgroup_id = id;
            p.event(&Event::Fault(f)).expect("event");
        }
        p.snapshot(&snap(2_000_000_000_000, 4, 0, 0))
            .expect("snapshot");
        let got: Vec<(String, u64, u64)> = rx
            .borrow()
            .cgroups
            .iter()
            .map(|c| (c.cgroup.clone(), c.hint_faults, c.reject))
            .collect();
        assert_eq!(got, [("/c5".into(), 2, 2), ("other".into(), 2, 2)]);
    }
}
