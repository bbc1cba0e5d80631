//! The mover: takes (process, page, target) requests off a bounded channel,
//! coalesces them in a bounded [`Queue`] and promotes them with
//! move_pages(2) in batches sized to `--batch-ms`, under the byte rate
//! limit and above the target node's free floor. Target nodes, and the
//! processes of each, take turns: a node at its floor is skipped until it
//! may have room, so it holds back no other node or process
//! ([`step`](Mover::step)). Runs on its own thread so the event pipeline
//! never waits for a migration.
//!
//! "Never to a lower tier" is enforced at the moment of the move, not only
//! at the fault. When the target is the only node of the top tier, a move
//! there can only be upwards or a no-op, so the batch is moved directly and
//! the move's own status array says where each page ended up. Otherwise
//! (several top-tier nodes, or a target below the top tier) every batch is
//! first *queried* (move_pages without nodes): pages already on the target
//! or in a tier no lower than it are not moved, and pages that are gone are
//! dropped without a migration.
//!
//! Fixed costs per batch are kept low, since the baseline (one big call)
//! pays them once: no query when it cannot matter, node meminfo reused for
//! a short while (conservatively, see [`Mover::headroom`]), reused buffers,
//! a step whose cost follows its batch, never the queue's length, and
//! batches sized so the call fills `--batch-ms` ([`BatchSizer`] learns the
//! fixed and per-page cost of a call).
mod dry;
mod env;
mod execute;
mod exit;
mod procs;
mod publish;
mod report;
mod retry;
mod step;
mod thread;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::{atomic::Ordering, Arc},
};

use serde::Serialize;

use super::{
    batch::BatchSizer,
    bucket::TokenBucket,
    floor::{self, MinFree},
    queue::{Queue, Request},
    scope::Scope,
};

pub use env::{Env, SysEnv};
pub use publish::StatePublisher;
pub use report::{MoverReport, ProcMoves, PromoterStats, Shared, StatusCounts, Verify};
pub use thread::spawn;

pub const PAGE: u64 = 4096;
/// Moved folios remembered per run for the final where-are-they check.
const MAX_VERIFY: usize = 1 << 20;
/// A node's meminfo reading is reused for at most this long.
pub const MEMINFO_MAX_AGE_NS: u64 = 200_000_000;

/// A target node's last meminfo reading and what was sent there since.
#[derive(Debug, Clone, Copy)]
struct FreeEstimate {
    free_kb: u64,
    total_kb: u64,
    read_ns: u64,
    sent_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct MoverConfig {
    /// Bytes per second; 0 = unlimited.
    pub rate_bytes_per_s: u64,
    #[serde(skip)]
    pub min_free: MinFree,
    pub batch_ms: f64,
    pub max_retries: u32,
    pub retry_backoff_ms: u64,
    /// Folios waiting in the queue at most (a dry run: distinct folios
    /// remembered); beyond it requests are dropped and counted.
    pub max_queued_pages: usize,
    pub dry_run: bool,
    /// Tier id per node (lower is faster), from memory_tiers.
    pub tier_of: BTreeMap<i32, u32>,
    /// CPUs per node, for the floor's drift margin.
    pub cpus_of: BTreeMap<u32, u64>,
}

/// What one [`Mover::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Made a call (or dropped work): step again.
    Worked,
    /// Nothing queued.
    Idle,
    /// Something is queued but must wait this many ns (rate, floor, retry).
    Wait(u64),
}

pub struct Mover<E: Env> {
    cfg: MoverConfig,
    scope: Scope,
    env: E,
    queue: Queue,
    bucket: TokenBucket,
    sizer: BatchSizer,
    report: MoverReport,
    /// Per process: each folio moved (by its address) -> its target and
    /// when, for the final check and so a folio is counted as moved once
    /// per trip up.
    moved: HashMap<u32, HashMap<u64, (u32, u64)>>,
    moved_len: usize,
    would_by_second: BTreeMap<u64, u64>,
    shared: Arc<Shared>,
    free: BTreeMap<u32, FreeEstimate>,
    /// Nodes alone in the top tier: nothing can be above or beside them,
    /// so a move there needs no query first.
    sole_top: BTreeSet<u32>,
    /// Target node -> until when it cannot take pages (at its floor, or
    /// its free memory unreadable), ns.
    blocked: BTreeMap<u32, u64>,
    /// The target served last: the next step starts after it.
    last_target: Option<u32>,
    /// A dry run's folios (by address), each counted once.
    seen: HashSet<(u32, u64)>,
    /// The processes served, pinned.
    procs: procs::Procs,
    /// Buffers of the calls, reused.
    addrs: Vec<u64>,
    nodes: Vec<i32>,
    status: Vec<i32>,
    targets: Vec<u32>,
}

/// The nodes that are alone in the highest tier (the lowest tier id).
fn sole_top_nodes(tier_of: &BTreeMap<i32, u32>) -> BTreeSet<u32> {
    let Some(top) = tier_of.values().min() else {
        return BTreeSet::new();
    };
    let nodes: Vec<i32> = tier_of
        .iter()
        .filter(|(_, t)| *t == top)
        .map(|(n, _)| *n)
        .collect();
    match nodes[..] {
        [n] if n >= 0 => [n as u32].into(),
        _ => BTreeSet::new(),
    }
}

impl<E: Env> Mover<E> {
    /// A mover for `scope`; the processes of a `--pid` scope are pinned now.
    pub fn new(cfg: MoverConfig, scope: Scope, env: E, shared: Arc<Shared>) -> Self {
        let mut m = Mover {
            free: BTreeMap::new(),
            sole_top: sole_top_nodes(&cfg.tier_of),
            blocked: BTreeMap::new(),
            last_target: None,
            seen: HashSet::new(),
            procs: procs::Procs::default(),
            addrs: Vec::new(),
            nodes: Vec::new(),
            status: Vec::new(),
            targets: Vec::new(),
            bucket: TokenBucket::for_rate(cfg.rate_bytes_per_s),
            sizer: BatchSizer::new(cfg.batch_ms),
            queue: Queue::new(cfg.max_queued_pages),
            report: MoverReport {
                dry_run: cfg.dry_run,
                ..MoverReport::default()
            },
            cfg,
            scope,
            env,
            moved: HashMap::new(),
            moved_len: 0,
            would_by_second: BTreeMap::new(),
            shared,
        };
        m.pin_scope();
        m
    }

    pub fn push(&mut self, r: Request) {
        self.shared.received.fetch_add(1, Ordering::Relaxed);
        if !self.admit(&r) {
            return;
        }
        if self.cfg.dry_run {
            self.push_dry(&r);
            return;
        }
        self.queue.push(&r);
        self.settle(r.pid);
        self.sync_pending();
    }

    fn tier(&self, node: i32) -> Option<u32> {
        self.cfg.tier_of.get(&node).copied()
    }

    /// Bytes that may still go to `target` without crossing its floor,
    /// at least `want_pages` when a fresh reading allows.
    ///
    /// Reading the node's meminfo before every batch costs about as much as
    /// a small move under emulation, so a reading is reused for up to
    /// [`MEMINFO_MAX_AGE_NS`], conservatively: a reused reading grants only
    /// half its headroom, minus every byte sent to the node since (whether
    /// it moved or not), so other allocations on the node have the other
    /// half. A batch that does not fit the estimate reads the node again;
    /// right after a read the whole headroom may be used.
    fn headroom(&mut self, target: u32, now: u64, want_pages: u64) -> Option<u64> {
        let cpus = self.cfg.cpus_of.get(&target).copied().unwrap_or(1);
        if let Some(e) = self.free.get(&target) {
            if now.saturating_sub(e.read_ns) < MEMINFO_MAX_AGE_NS {
                let floor_kb = self.cfg.min_free.floor_kb(e.total_kb);
                let h = (floor::headroom_bytes(e.free_kb, floor_kb, cpus) / 2)
                    .saturating_sub(e.sent_bytes);
                if h >= want_pages * PAGE {
                    return Some(h);
                }
            }
        }
        self.report.meminfo_reads += 1;
        let Some((free_kb, total_kb)) = self.env.node_meminfo(target) else {
            self.free.remove(&target);
            return None;
        };
        self.free.insert(
            target,
            FreeEstimate {
                free_kb,
                total_kb,
                read_ns: now,
                sent_bytes: 0,
            },
        );
        let floor_kb = self.cfg.min_free.floor_kb(total_kb);
        self.report.floor_kb.insert(target, floor_kb);
        let headroom = floor::headroom_bytes(free_kb, floor_kb, cpus);
        let m = self
            .report
            .min_headroom_kb
            .entry(target)
            .or_insert(u64::MAX);
        *m = (*m).min(headroom / 1024);
        Some(headroom)
    }

    fn sync_pending(&self) {
        self.shared
            .pending
            .store(self.queue.len() as u64, Ordering::Relaxed);
        self.shared
            .dropped
            .store(self.queue.counts.dropped_full, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
