//! The promoter, the only code that changes the system. A pipeline feeds a
//! [`PromoteSink`], which asks a shadow policy about
//! every tiering decision on a slow-node page of a process in scope; when
//! the model says promote and the kernel did not (it refused, or its
//! migration failed), the page goes on a bounded channel to the
//! [`mover`](mover) thread, which moves it with move_pages(2) to the
//! nearest top-tier node of the faulting CPU, under a byte rate limit and
//! above a free-memory floor. A full channel is counted, never waited on.
//!
//! Stops on `--duration`, SIGINT, SIGTERM or SIGHUP after the move_pages
//! call in flight, or once every process of a `--pid` scope has exited,
//! and prints a report (moves, failures by status, time in move_pages, the
//! kernel's own promotions in the same window, agreement).
//!
//! Two units: a decision, a request and a move are one per folio (the
//! faulting address; a THP moves whole), counted without a suffix; what
//! that is in pages (a THP's 512) is counted in the `_pages` fields. Only
//! pages compare with vmstat's pgpromote_success.
// Dev-dependencies are for the integration tests and benches.
#![cfg_attr(test, allow(unused_crate_dependencies))]
pub mod batch;
pub mod bucket;
pub mod floor;
pub mod mover;
pub mod process;
pub mod queue;
pub mod scope;
pub mod sys;
mod text;

use std::{
    collections::BTreeMap,
    sync::{
        atomic::Ordering,
        mpsc::{SyncSender, TrySendError},
        Arc,
    },
};

use anyhow::Result;
use numa_core::{
    decode::{comm, Event, Snapshot},
    model::{
        lifecycle::Lifecycle,
        policy::{Kernel, Policy, PolicyBank},
        proctable::{ProcTable, Retired},
        shadow::Agreement,
        window::Window,
    },
    sink::Sink,
    topology::{MemoryTier, Node},
};
use numa_ebpf_common::{Counter, DemoteEvent, FaultEvent};
use serde::{Deserialize, Serialize};

use mover::{MoverReport, Shared};
use queue::Request;
use scope::Scope;

pub use mover::PromoterStats;
pub use text::write_human;

/// The top-tier node to promote to, per node of the faulting CPU: the
/// nearest by node distance among top-tier nodes with memory (ties: the
/// lowest id), as the kernel's own promotion targets the faulting CPU's node.
#[derive(Debug, Clone, Default)]
pub struct Targets {
    by_node: BTreeMap<i32, u32>,
    cpu_node: BTreeMap<u32, i32>,
    /// Tier id per node (lower is faster).
    pub tier_of: BTreeMap<i32, u32>,
    /// Nodes of the top tier (bit per node).
    pub toptier_mask: u64,
}

impl Targets {
    pub fn new(nodes: &[Node], tiers: &[MemoryTier], toptier_mask: u64) -> Targets {
        let top = |id: u32| id < 64 && toptier_mask & (1 << id) != 0;
        let tops: Vec<(usize, &Node)> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| top(n.id) && n.mem_total_kb > 0)
            .collect();
        let mut by_node = BTreeMap::new();
        for n in nodes {
            let best = tops
                .iter()
                .min_by_key(|(i, t)| (n.distances.get(*i).copied().unwrap_or(u32::MAX), t.id))
                .map(|(_, t)| t.id);
            if let Some(b) = best {
                by_node.insert(n.id as i32, b);
            }
        }
        Targets {
            by_node,
            cpu_node: nodes
                .iter()
                .flat_map(|n| n.cpus.iter().map(move |c| (*c, n.id as i32)))
                .collect(),
            tier_of: tiers
                .iter()
                .flat_map(|t| t.nodes.iter().map(move |n| (*n as i32, t.id)))
                .collect(),
            toptier_mask,
        }
    }

    /// Target for a fault decided for `dst_nid` (or, without one, the
    /// node of `cpu`), if it is in a higher tier than `src`.
    pub fn target(&self, dst_nid: i32, cpu: u32, src: i32) -> Option<u32> {
        let node = if dst_nid >= 0 {
            dst_nid
        } else {
            *self.cpu_node.get(&cpu)?
        };
        let t = *self.by_node.get(&node)?;
        let (tt, ts) = (self.tier_of.get(&(t as i32))?, self.tier_of.get(&src)?);
        (tt < ts).then_some(t)
    }

    pub fn is_empty(&self) -> bool {
        self.by_node.is_empty()
    }
}

/// Per-process view of the run: folios, and pages where named.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct ProcRow {
    pub pid: u32,
    pub comm: String,
    pub in_scope: bool,
    pub hint_faults: u64,
    /// Tiering decisions on slow-node pages.
    pub decisions: u64,
    /// The kernel's successful promotions (its migration succeeded), and
    /// their pages.
    pub kernel_promoted: u64,
    pub kernel_promoted_pages: u64,
    pub model_promote: u64,
    /// Requests sent to the mover.
    pub requested: u64,
    /// Of its folios this run moved, those reclaim demoted again within
    /// the lifecycle's window (ping-pong).
    #[serde(default)]
    pub pingpong: u64,
    #[serde(flatten)]
    pub moves: mover::ProcMoves,
}

/// The event side: decides and queues. Never blocks on the mover.
pub struct PromoteSink {
    /// The one policy, its answers compared with what the kernel moved.
    bank: PolicyBank,
    scope: Scope,
    targets: Targets,
    tx: Option<SyncSender<Request>>,
    shared: Arc<Shared>,
    window: Window,
    pub counts: SinkCounts,
    /// Live rows, and rows of processes gone (or evicted) that may rank
    /// in the report.
    procs: ProcTable<ProcRow>,
    retired: Retired<ProcRow>,
    /// Promotions followed to the demotions that undo them: the kernel's
    /// (tag 0) and this run's requests ([`MOVED`]).
    lifecycle: Lifecycle,
}

/// The lifecycle tag of a folio this run asked the mover to move.
const MOVED: u64 = 1;

/// What the pipeline saw and asked for: folios, and pages where named.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct SinkCounts {
    pub hint_faults: u64,
    /// Tiering decisions on slow-node pages of processes in scope.
    pub decisions: u64,
    pub decision_pages: u64,
    /// Of those, the kernel's successful promotions: in pages, its part
    /// of vmstat's pgpromote_success.
    pub kernel_promote: u64,
    pub kernel_promote_pages: u64,
    pub model_promote: u64,
    pub model_promote_pages: u64,
    /// Model and kernel on in-scope decisions (kernel = its migration succeeded).
    pub agreement: Agreement,
    /// Requests sent to the mover, and their pages.
    pub requested: u64,
    pub requested_pages: u64,
    pub queue_overflows: u64,
    /// Decisions of processes outside the scope (never queued).
    pub out_of_scope: u64,
    /// Model said promote but no higher-tier target exists for the page.
    pub no_target: u64,
    /// Folios this run sent to the mover that reclaim demoted again
    /// within the lifecycle's window, and their pages; the same of the
    /// kernel's own promotions.
    #[serde(default)]
    pub pingpong: u64,
    #[serde(default)]
    pub pingpong_pages: u64,
    #[serde(default)]
    pub kernel_pingpong: u64,
}

impl SinkCounts {
    /// An in-scope decision on a folio of `pages` pages: whether the
    /// kernel promoted it (its migration succeeded) and the model would.
    fn decided(&mut self, kernel: bool, model: bool, pages: u64) {
        self.decisions += 1;
        self.decision_pages += pages;
        self.kernel_promote += u64::from(kernel);
        self.kernel_promote_pages += u64::from(kernel) * pages;
        self.model_promote += u64::from(model);
        self.model_promote_pages += u64::from(model) * pages;
        self.agreement.count(kernel, model, 1, pages);
    }
}

/// Processes tracked in the per-process table, and rows in the report
/// (memory bound).
const MAX_PROCS: usize = 4096;

/// A row's place in the report: processes in scope first, the most hint
/// faults first.
fn rank(p: &ProcRow) -> (bool, std::cmp::Reverse<u64>, u32) {
    (!p.in_scope, std::cmp::Reverse(p.hint_faults), p.pid)
}

impl PromoteSink {
    pub fn new(
        policy: Box<dyn Policy>,
        scope: Scope,
        targets: Targets,
        tx: SyncSender<Request>,
        shared: Arc<Shared>,
    ) -> Self {
        PromoteSink {
            bank: PolicyBank::new(vec![policy]).compared_with(Kernel::Moved),
            scope,
            targets,
            tx: Some(tx),
            shared,
            window: Window::default(),
            counts: SinkCounts::default(),
            procs: ProcTable::new(MAX_PROCS, usize::MAX).keep_dropped(),
            retired: Retired::new(MAX_PROCS),
            lifecycle: Lifecycle::default(),
        }
    }

    /// A demotion: a folio this run moved, or the kernel promoted,
    /// demoted again within the window is a ping-pong of one or the other.
    fn demote(&mut self, d: &DemoteEvent) {
        let Some(pp) = self.lifecycle.demote(d) else {
            return;
        };
        let w = pp.weight;
        if pp.tag != MOVED {
            self.counts.kernel_pingpong += w;
            return;
        }
        self.counts.pingpong += w;
        self.counts.pingpong_pages += w * u64::from(pp.pages);
        self.shared.pingpong.fetch_add(w, Ordering::Relaxed);
        if let Some(row) = self.procs.get_mut(pp.tgid) {
            row.pingpong += w;
        }
    }

    /// Closes the channel: the mover ends once its queue is empty.
    pub fn close(&mut self) {
        self.tx = None;
    }

    fn fault(&mut self, f: &FaultEvent) {
        self.lifecycle.fault(f, self.targets.toptier_mask);
        self.decide(f);
        for (_, row) in self.procs.take_dropped() {
            self.retired.push(row, |a, b| rank(a).cmp(&rank(b)));
        }
    }

    fn decide(&mut self, f: &FaultEvent) {
        self.counts.hint_faults += 1;
        let tgid = f.tgid();
        let in_scope = self.scope.admits(tgid, f.cgroup_id);
        let row = self.procs.touch(tgid, f.ts_ns, || ProcRow {
            pid: tgid,
            comm: comm(&f.comm),
            in_scope,
            ..ProcRow::default()
        });
        row.hint_faults += 1;
        // Every decision reaches the policy (its state, e.g. an adaptive
        // threshold, follows the whole system, as in `shadow`).
        let Some(answer) = self.bank.fault(f).and_then(|mut answers| answers.next()) else {
            return;
        };
        let (kernel_moved, promote) = (answer.kernel, answer.promote());
        let pages = f.pages();
        row.decisions += 1;
        row.kernel_promoted += u64::from(kernel_moved);
        row.kernel_promoted_pages += u64::from(kernel_moved) * pages;
        row.model_promote += u64::from(promote);
        if !in_scope {
            self.counts.out_of_scope += 1;
            return;
        }
        self.counts.decided(kernel_moved, promote, pages);
        if !answer.adds() {
            return;
        }
        let Some(target) = self.targets.target(f.dst_nid, f.cpu, f.src_nid) else {
            self.counts.no_target += 1;
            return;
        };
        let Some(tx) = &self.tx else { return };
        let req = Request {
            pid: tgid,
            addr: f.addr & !(mover::PAGE - 1),
            src_node: f.src_nid,
            target,
            nr_pages: pages,
            ts_ns: f.ts_ns,
        };
        match tx.try_send(req) {
            Ok(()) => {
                // A move that fails leaves the folio below, where reclaim
                // cannot demote it: only a moved one can come back.
                self.lifecycle.promoted(f, MOVED);
                self.counts.requested += 1;
                self.counts.requested_pages += pages;
                self.shared.sent.fetch_add(1, Ordering::Relaxed);
                row.requested += 1;
            }
            Err(TrySendError::Full(_)) => {
                self.counts.queue_overflows += 1;
                self.shared.overflows.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => self.tx = None,
        }
    }
}

impl Sink for PromoteSink {
    fn header(&mut self, h: &numa_core::trace::Header) -> Result<()> {
        self.lifecycle.set_top_tier(h);
        Ok(())
    }

    fn event(&mut self, ev: &Event) -> Result<()> {
        let ts = ev.ts_ns();
        // The same window as the vmstat delta: nothing before the first snapshot.
        if self.window.first().is_some_and(|s| ts < s.ts_ns) {
            return Ok(());
        }
        match ev {
            Event::Fault(f) => self.fault(f),
            Event::Scan(s) => {
                self.bank.scan(s);
                let (entries, procs) = self.bank.scan_index_len();
                let sh = &self.shared;
                sh.scan_index_entries
                    .store(entries as u64, Ordering::Relaxed);
                sh.scan_index_processes
                    .store(procs as u64, Ordering::Relaxed);
            }
            Event::Demote(d) => self.demote(d),
            // The promoter acts on NUMA balancing's faults, not DAMON's regions.
            Event::Skip(_) | Event::Damon(_) => {}
        }
        Ok(())
    }

    fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
        self.window.push(s);
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PromoteReport {
    pub duration_s: f64,
    #[serde(flatten)]
    pub facts: RunFacts,
    pub events: SinkCounts,
    /// Agreement over the decisions (folios), and over their pages.
    pub agreement_pct: f64,
    pub agreement_pages_pct: f64,
    /// What move_pages moved: pages (a THP's 512; what vmstat's
    /// pgpromote_success counts), their folios (one address each in the
    /// call) and bytes.
    pub moved_pages: u64,
    pub moved_folios: u64,
    pub moved_bytes: u64,
    /// Moved bytes over the whole window, MB/s (10^6).
    pub mb_per_s: f64,
    /// Moved bytes over the time spent inside move_pages, MB/s.
    pub mb_per_s_in_calls: f64,
    pub move_pages_s: f64,
    pub query_s: f64,
    /// Folios whose move failed.
    pub failures: u64,
    /// Dry run: the mean rate the moves would need over the window, MiB/s.
    pub rate_needed_mib_per_s: f64,
    pub peak_rate_needed_mib_per_s: f64,
    /// The kernel's own promotions and demotions in the same window
    /// (vmstat, all processes), in pages.
    pub kernel_pgpromote_success: u64,
    pub kernel_pgdemote: u64,
    /// Fault records the pipeline never saw: the ring was full, or a probe
    /// run was skipped (preempted on its CPU). Either can hide a kernel
    /// promotion from the per-process counts.
    pub ring_drops: u64,
    pub runs_missed: u64,
    pub mover: MoverReport,
    pub processes: Vec<ProcRow>,
}

/// What a promote run's report states besides what the sink and the mover
/// counted.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunFacts {
    pub stopped: String,
    pub dry_run: bool,
    pub scope: String,
    pub model: String,
    pub model_params: BTreeMap<String, String>,
    pub rate_limit_bytes_per_s: u64,
    pub min_free: String,
    pub batch_ms: f64,
    pub max_retries: u32,
}

impl PromoteSink {
    /// The run's report: the sink's counts over its snapshot window, the
    /// mover's per-process moves and the kernel's own promotions meanwhile.
    pub fn report(&self, facts: RunFacts, mover_report: MoverReport) -> PromoteReport {
        let duration_s = self.window.span_ns() as f64 / 1e9;
        let mut processes: Vec<ProcRow> = self
            .procs
            .iter()
            .map(|(_, p)| p)
            .chain(self.retired.rows())
            .cloned()
            .collect();
        for p in &mut processes {
            if let Some(m) = mover_report.per_process.get(&p.pid) {
                p.moves = m.clone();
            }
        }
        processes.sort_by_key(rank);
        processes.truncate(MAX_PROCS);
        let mb = |bytes: u64, s: f64| if s > 0.0 { bytes as f64 / 1e6 / s } else { 0.0 };
        let mib = |bytes: u64, s: f64| {
            if s > 0.0 {
                bytes as f64 / (1u64 << 20) as f64 / s
            } else {
                0.0
            }
        };
        PromoteReport {
            duration_s,
            facts,
            agreement_pct: self.counts.agreement.agree_pct(),
            agreement_pages_pct: self.counts.agreement.agree_pages_pct(),
            events: self.counts.clone(),
            moved_pages: mover_report.moved_pages,
            moved_folios: mover_report.statuses.moved,
            moved_bytes: mover_report.moved_bytes,
            mb_per_s: mb(mover_report.moved_bytes, duration_s),
            mb_per_s_in_calls: mb(mover_report.moved_bytes, mover_report.move_ns as f64 / 1e9),
            move_pages_s: mover_report.move_ns as f64 / 1e9,
            query_s: mover_report.query_ns as f64 / 1e9,
            failures: mover_report.statuses.failures(),
            rate_needed_mib_per_s: mib(mover_report.would_move_bytes, duration_s),
            peak_rate_needed_mib_per_s: mover_report.would_move_peak_bytes_per_s as f64
                / (1u64 << 20) as f64,
            kernel_pgpromote_success: self.window.vmstat(&["pgpromote_success"]),
            kernel_pgdemote: self.window.vmstat(&[
                "pgdemote_kswapd",
                "pgdemote_direct",
                "pgdemote_khugepaged",
            ]),
            ring_drops: self.window.count(Counter::RingDrops),
            runs_missed: self.window.count(Counter::RunsMissed),
            mover: mover_report,
            processes,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{sync_channel, Receiver};

    use numa_core::model::policy::{self, KernelDefaults, ModelDefaults};
    use numa_ebpf_common::{decision, fault_flags as ff, Outcome};

    use super::*;

    fn node(id: u32, cpus: Vec<u32>, distances: Vec<u32>) -> Node {
        Node {
            id,
            cpus,
            mem_total_kb: 1 << 20,
            mem_free_kb: 1 << 19,
            distances,
        }
    }

    fn tier(id: u32, nodes: Vec<u32>) -> MemoryTier {
        MemoryTier {
            tier: format!("memory_tier{id}"),
            id,
            nodes,
        }
    }

    /// Two DRAM nodes (0, 1) with CPUs, a slow node 2 nearer to node 1.
    fn targets() -> Targets {
        let nodes = vec![
            node(0, vec![0], vec![10, 20, 40]),
            node(1, vec![1], vec![20, 10, 30]),
            node(2, vec![], vec![40, 30, 10]),
        ];
        let tiers = vec![tier(4, vec![0, 1]), tier(22, vec![2])];
        Targets::new(&nodes, &tiers, 0b011)
    }

    #[test]
    fn target_is_the_nearest_top_tier_node_of_the_faulting_cpu() {
        let t = targets();
        assert_eq!(t.target(0, 0, 2), Some(0));
        assert_eq!(t.target(1, 0, 2), Some(1));
        // No decision node: the CPU's node.
        assert_eq!(t.target(-1, 1, 2), Some(1));
        // From the slow node's own view, node 1 is nearer.
        assert_eq!(t.target(2, 0, 2), Some(1));
        // Never to the same or a lower tier.
        assert_eq!(t.target(0, 0, 1), None);
        assert_eq!(t.target(0, 0, 0), None);
    }

    fn fault(pid: u32, page: u64, outcome: Outcome, delta: u64, migrated: bool) -> Event {
        Event::Fault(FaultEvent {
            kind: 1,
            ts_ns: 10,
            pid_tgid: u64::from(pid) << 32,
            addr: page * 4096 + 123,
            src_nid: 2,
            dst_nid: 0,
            nr_pages: 1,
            seq_mm: 1000 + delta,
            scan_seq_mm: 1000,
            outcome: outcome as u8,
            decision: decision::of(outcome.promoted()),
            migrate_ok: u8::from(migrated),
            flags: ff::DECIDED
                | ff::HAS_STAMP
                | if outcome.promoted() {
                    ff::MIGRATE_TRIED
                } else {
                    0
                },
            ..FaultEvent::default()
        })
    }

    fn sink(scope: &[u32], cap: usize) -> (PromoteSink, Receiver<Request>) {
        // The idealised count: these faults carry numatrace's deltas only.
        let policy = policy::build(
            "fault-count:exact,threshold=100",
            &ModelDefaults::default(),
            &KernelDefaults::default(),
        )
        .expect("valid spec");
        let (tx, rx) = sync_channel(cap);
        let s = PromoteSink::new(
            policy,
            Scope::Pids(scope.iter().map(|p| (*p, 0)).collect()),
            targets(),
            tx,
            Arc::new(Shared::default()),
        );
        (s, rx)
    }

    #[test]
    fn queues_what_the_model_wants_and_the_kernel_did_not_do() {
        let (mut s, rx) = sink(&[7], 16);
        let evs = [
            fault(7, 1, Outcome::RejectLatency, 5, false), // queued
            fault(7, 2, Outcome::RejectLatency, 500, false), // model: cold
            fault(7, 3, Outcome::PromoteHot, 5, true),     // kernel did it
            fault(7, 4, Outcome::PromoteHot, 5, false),    // migration failed: queued
            fault(8, 5, Outcome::RejectLatency, 5, false), // out of scope
            fault(7, 6, Outcome::NotTiering, 5, false),    // not a tiering decision
        ];
        for e in &evs {
            s.event(e).expect("sink");
        }
        let got: Vec<(u32, u64, u32)> = rx.try_iter().map(|r| (r.pid, r.addr, r.target)).collect();
        assert_eq!(got, vec![(7, 4096, 0), (7, 4 * 4096, 0)]);
        let c = &s.counts;
        assert_eq!((c.decisions, c.out_of_scope, c.requested), (4, 1, 2));
        assert_eq!(c.agreement.both, 1);
        assert_eq!(c.agreement.model_only, 2);
        assert_eq!(c.agreement.neither, 1);
        assert_eq!(s.procs.get(8).expect("row").kernel_promoted, 0);
        assert!(!s.procs.get(8).expect("row").in_scope);
    }

    /// A folio this run queued and one the kernel promoted, both demoted
    /// again 12 s later, and a queued folio never demoted: one ping-pong
    /// of each, the run's in its counts, its process row and the state.
    #[test]
    fn moved_folios_demoted_again_are_the_runs_ping_pong() {
        let (mut s, _rx) = sink(&[7], 16);
        let with_identity = |ev: Event, index: u64| match ev {
            Event::Fault(mut f) => {
                f.mapping = 0xa1;
                f.index = index;
                Event::Fault(f)
            }
            other => other,
        };
        for ev in [
            with_identity(fault(7, 1, Outcome::RejectLatency, 5, false), 1), // queued
            with_identity(fault(7, 2, Outcome::RejectLatency, 5, false), 2), // queued
            with_identity(fault(7, 3, Outcome::PromoteHot, 5, true), 3),     // kernel
        ] {
            s.event(&ev).expect("sink");
        }
        assert_eq!(s.counts.requested, 2);
        for index in [1, 3] {
            let d = DemoteEvent {
                dst_nid: 2,
                ..numa_core::decode::fixtures::demotion(12_000_000_010, 0xa1, index)
            };
            s.event(&Event::Demote(d)).expect("sink");
        }
        let c = &s.counts;
        assert_eq!((c.pingpong, c.pingpong_pages, c.kernel_pingpong), (1, 1, 1));
        assert_eq!(s.procs.get(7).expect("row").pingpong, 1);
        assert_eq!(s.shared.pingpong.load(Ordering::Relaxed), 1);
    }

    /// Many processes come and go: the table holds the ones active within
    /// the gone bound, the report the busiest, and a process first seen
    /// after thousands of others still gets its row.
    #[test]
    fn process_churn_keeps_the_rows_bounded_and_new_processes_counted() {
        let (mut s, _rx) = sink(&[7], 16);
        let busy = |pid: u32, ts: u64| match fault(pid, 1, Outcome::NotTiering, 5, false) {
            Event::Fault(mut f) => {
                f.ts_ns = ts;
                Event::Fault(f)
            }
            other => other,
        };
        const S: u64 = 1_000_000_000;
        // 10 000 processes, one a second, the first ten faulting 100 times.
        for i in 0..10_000u32 {
            let n = if i < 10 { 100 } else { 1 };
            for _ in 0..n {
                s.event(&busy(1_000 + i, u64::from(i) * S)).expect("sink");
            }
            let gone = (numa_core::model::GONE_AFTER_NS / S) as usize + 1;
            assert!(s.procs.len() <= gone, "{} live rows", s.procs.len());
            assert!(s.retired.len() <= 2 * MAX_PROCS, "{}", s.retired.len());
        }
        assert!(s.procs.get(1_000 + 9_999).is_some(), "the latest process");
        let r = s.report(facts(false), MoverReport::default());
        assert_eq!(r.processes.len(), MAX_PROCS);
        // The busiest ones, long gone, rank first.
        let first: Vec<u32> = r.processes.iter().take(10).map(|p| p.pid).collect();
        assert_eq!(first, (1_000..1_010).collect::<Vec<_>>());
    }

    /// Decisions are one per folio, their pages beside; the report puts
    /// what move_pages moved and the kernel promoted in pages, as vmstat's
    /// pgpromote_success counts.
    #[test]
    fn the_sink_and_report_count_folios_and_their_pages() {
        let (mut s, rx) = sink(&[7], 16);
        let thp = |e: Event| match e {
            Event::Fault(mut f) => {
                f.nr_pages = 512;
                Event::Fault(f)
            }
            other => other,
        };
        let evs = [
            thp(fault(7, 512, Outcome::RejectLatency, 5, false)), // queued
            fault(7, 2, Outcome::RejectLatency, 5, false),        // queued
            thp(fault(7, 1024, Outcome::PromoteHot, 5, true)),    // both
            fault(7, 3, Outcome::PromoteHot, 500, true),          // kernel only
        ];
        for e in &evs {
            s.event(e).expect("sink");
        }
        let sizes: Vec<u64> = rx.try_iter().map(|r| r.nr_pages).collect();
        assert_eq!(sizes, [512, 1]);
        let c = &s.counts;
        assert_eq!((c.decisions, c.decision_pages), (4, 1026));
        assert_eq!((c.kernel_promote, c.kernel_promote_pages), (2, 513));
        assert_eq!((c.model_promote, c.model_promote_pages), (3, 1025));
        assert_eq!((c.requested, c.requested_pages), (2, 513));
        let a = &c.agreement;
        assert_eq!((a.model_only, a.model_only_pages), (2, 513));
        assert_eq!((a.both, a.both_pages), (1, 512));
        assert_eq!((a.kernel_only, a.kernel_only_pages), (1, 1));
        assert_eq!(s.procs.get(7).expect("row").kernel_promoted_pages, 513);
        let mut m = MoverReport::default();
        m.statuses.moved = 2;
        (m.moved_pages, m.moved_bytes) = (513, 513 * mover::PAGE);
        let r = s.report(facts(false), m);
        assert_eq!((r.moved_pages, r.moved_folios), (513, 2));
        assert!((r.agreement_pct - 25.0).abs() < 1e-9);
        assert!((r.agreement_pages_pct - 100.0 * 512.0 / 1026.0).abs() < 1e-9);
        let mut out = Vec::new();
        write_human(&r, &mut out).expect("text");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains("moved       513 pages in 2 folios"), "{text}");
        assert!(
            text.contains("the kernel promoted 513 pages (2 folios), numatrace moved 513 pages"),
            "{text}"
        );
    }

    fn facts(dry_run: bool) -> RunFacts {
        RunFacts {
            stopped: "every --pid process exited".into(),
            dry_run,
            scope: "--pid 7".into(),
            model: "fault-count".into(),
            model_params: BTreeMap::new(),
            rate_limit_bytes_per_s: 0,
            min_free: "5%".into(),
            batch_ms: 20.0,
            max_retries: 3,
        }
    }

    #[test]
    fn the_report_counts_what_the_queue_dropped() {
        let (s, _rx) = sink(&[7], 2);
        let mut m = MoverReport::default();
        m.queue.queued = 1000;
        m.queue.dropped_full = 7;
        m.pids_reused = 2;
        let mut out = Vec::new();
        write_human(&s.report(facts(false), m.clone()), &mut out).expect("text");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains("(every --pid process exited)"), "{text}");
        assert!(text.contains("0 channel full, 7 queue full"), "{text}");
        assert!(text.contains("2 pids served again"), "{text}");
        let mut out = Vec::new();
        write_human(&s.report(facts(true), m), &mut out).expect("text");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(
            text.contains("7 requests for folios beyond the first 1000 were not counted"),
            "{text}"
        );
    }

    #[test]
    fn a_full_channel_is_counted_not_waited_on() {
        let (mut s, rx) = sink(&[7], 2);
        for p in 0..5 {
            s.event(&fault(7, p, Outcome::RejectLatency, 5, false))
                .expect("sink");
        }
        assert_eq!(rx.try_iter().count(), 2);
        assert_eq!(s.counts.queue_overflows, 3);
        assert_eq!(s.shared.overflows.load(Ordering::Relaxed), 3);
    }
}
