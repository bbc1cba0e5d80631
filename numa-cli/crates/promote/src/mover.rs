//! The mover: takes (process, page, target) requests off a bounded channel,
//! coalesces them per process ([`Queue`]) and promotes them with
//! move_pages(2) in batches sized to `--batch-ms`, under the byte rate
//! limit and above the target node's free floor. Runs on its own thread so
//! the event pipeline never waits for a migration.
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
//! O(1) process selection, and batches sized so the call fills `--batch-ms`
//! ([`BatchSizer`] learns the fixed and per-page cost of a call).
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    io,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc::{Receiver, RecvTimeoutError, TryRecvError},
        Arc,
    },
    time::Duration,
};

use serde::Serialize;

use numa_host::promoter_state::{PromoterState, Writer, PUBLISH_EVERY_S};

use super::{
    batch::BatchSizer,
    bucket::TokenBucket,
    floor::{self, MinFree},
    queue::{Pending, Queue, QueueCounts, Request},
    scope::Scope,
    sys,
};

pub const PAGE: u64 = 4096;
/// Moved pages remembered per run for the final where-are-they check.
const MAX_VERIFY: usize = 1 << 20;
/// How long the mover sleeps at most before looking at the channel again.
const POLL_NS: u64 = 50_000_000;
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

/// What a page's move ended as (move_pages' per-page status).
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct StatusCounts {
    pub moved: u64,
    /// On the target, or already in a tier no lower than it, when queried.
    pub already_on_target: u64,
    pub ebusy: u64,
    pub enomem: u64,
    pub eacces: u64,
    pub efault: u64,
    pub enoent: u64,
    /// The call stopped early (a migration failure aborts the rest of the
    /// batch) or left the page where it was.
    pub not_migrated: u64,
    pub other: u64,
}

impl StatusCounts {
    pub fn failures(&self) -> u64 {
        self.ebusy
            + self.enomem
            + self.eacces
            + self.efault
            + self.enoent
            + self.not_migrated
            + self.other
    }

    /// Counts one failed page; true when it is worth retrying.
    fn fail(&mut self, errno: i32) -> bool {
        match errno {
            libc::EBUSY => {
                self.ebusy += 1;
                true
            }
            libc::ENOMEM => {
                self.enomem += 1;
                true
            }
            libc::EACCES => {
                // Mapped by several processes: MPOL_MF_MOVE leaves it.
                self.eacces += 1;
                false
            }
            libc::EFAULT => {
                self.efault += 1;
                false
            }
            libc::ENOENT => {
                self.enoent += 1;
                false
            }
            _ => {
                self.other += 1;
                true
            }
        }
    }
}

/// Per-process results of the mover.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct ProcMoves {
    pub moved: u64,
    pub already_on_target: u64,
    pub failed: u64,
    pub would_move: u64,
    /// move_pages said the process no longer exists (ESRCH).
    pub exited: bool,
    /// move_pages refused (EPERM): not ours to move.
    pub refused: bool,
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
    pub dry_run: bool,
    /// Tier id per node (lower is faster), from memory_tiers.
    pub tier_of: BTreeMap<i32, u32>,
    /// CPUs per node, for the floor's drift margin.
    pub cpus_of: BTreeMap<u32, u64>,
}

/// Time and node memory, replaceable in tests.
pub trait Env {
    fn now_ns(&self) -> u64;
    /// `(MemFree, MemTotal)` in KiB.
    fn node_meminfo(&self, node: u32) -> Option<(u64, u64)>;
    /// The process is gone, exiting (its address space being torn down),
    /// or has no address space any more.
    fn process_has_no_memory(&self, pid: u32) -> bool;
}

pub struct SysEnv;

impl Env for SysEnv {
    fn now_ns(&self) -> u64 {
        numa_host::clock::monotonic_ns()
    }
    fn node_meminfo(&self, node: u32) -> Option<(u64, u64)> {
        floor::read_node_meminfo(node)
    }
    fn process_has_no_memory(&self, pid: u32) -> bool {
        // /proc/PID/statm is all zeros without an mm.
        let no_mm = std::fs::read_to_string(format!("/proc/{pid}/statm")).map_or(true, |s| {
            s.split_whitespace().next().is_none_or(|v| v == "0")
        });
        no_mm
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| stat_says_exiting(&s))
    }
}

/// PF_EXITING in the flags of a /proc/PID/stat line: the process is in
/// do_exit, unmapping its memory (move_pages then fails page by page).
fn stat_says_exiting(stat: &str) -> bool {
    const PF_EXITING: u64 = 0x4;
    // After the comm's closing parenthesis: state ppid pgrp session tty_nr
    // tpgid flags ...
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0)
}

/// Every page of a call failed as gone (EFAULT: no mapping; ENOENT).
fn all_gone(status: &[i32]) -> bool {
    !status.is_empty()
        && status
            .iter()
            .all(|&s| s == -libc::EFAULT || s == -libc::ENOENT)
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

/// Counters shared with the pipeline thread and with live displays.
#[derive(Debug, Default)]
pub struct Shared {
    /// Requests the pipeline put on the channel.
    pub sent: AtomicU64,
    /// Requests dropped because the channel was full.
    pub overflows: AtomicU64,
    pub received: AtomicU64,
    /// Pages waiting in the mover's queue.
    pub pending: AtomicU64,
    pub moved_pages: AtomicU64,
    pub moved_bytes: AtomicU64,
    pub failures: AtomicU64,
    pub started_ns: AtomicU64,
}

/// A snapshot of promoter activity in this process. Other processes
/// (`numatrace top`, the exporter) see it through the state file the mover
/// thread publishes ([`numa_host::promoter_state`], [`Mover::fill_state`]).
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq)]
pub struct PromoterStats {
    pub ts_ns: u64,
    pub moved_pages: u64,
    pub moved_bytes: u64,
    pub failures: u64,
    /// Requests on the channel plus pages in the mover's queue.
    pub queue_depth: u64,
    pub queue_overflows: u64,
}

impl PromoterStats {
    pub fn read(s: &Shared, now_ns: u64) -> Self {
        let in_channel = s
            .sent
            .load(Ordering::Relaxed)
            .saturating_sub(s.received.load(Ordering::Relaxed));
        PromoterStats {
            ts_ns: now_ns,
            moved_pages: s.moved_pages.load(Ordering::Relaxed),
            moved_bytes: s.moved_bytes.load(Ordering::Relaxed),
            failures: s.failures.load(Ordering::Relaxed),
            queue_depth: in_channel + s.pending.load(Ordering::Relaxed),
            queue_overflows: s.overflows.load(Ordering::Relaxed),
        }
    }

    /// Pages moved per second since `prev`.
    pub fn moved_per_s(&self, prev: &PromoterStats) -> f64 {
        let dt = self.ts_ns.saturating_sub(prev.ts_ns) as f64 / 1e9;
        if dt <= 0.0 {
            0.0
        } else {
            self.moved_pages.saturating_sub(prev.moved_pages) as f64 / dt
        }
    }
}

/// Where the moved pages were at the end (a move_pages query).
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Verify {
    pub checked: u64,
    pub on_target: u64,
    /// On another node (demoted again, or moved by someone else).
    pub elsewhere: u64,
    /// Unmapped, or the process exited.
    pub gone: u64,
    /// Moved pages not remembered (more than the check keeps).
    pub unchecked: u64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct MoverReport {
    pub dry_run: bool,
    pub statuses: StatusCounts,
    pub moved_bytes: u64,
    pub queue: QueueCounts,
    pub move_calls: u64,
    pub move_ns: u64,
    pub query_calls: u64,
    pub query_ns: u64,
    /// Pages per call at the end, and the learnt cost per page and per call.
    pub batch_pages: usize,
    pub ns_per_page: Option<f64>,
    pub fixed_ns_per_call: Option<f64>,
    /// Reads of the target nodes' meminfo (the free floor).
    pub meminfo_reads: u64,
    pub rate_waits: u64,
    pub floor_waits: u64,
    /// Node -> floor in KiB (as last computed).
    pub floor_kb: BTreeMap<u32, u64>,
    /// Node -> the least headroom seen before a batch, KiB.
    pub min_headroom_kb: BTreeMap<u32, u64>,
    pub meminfo_errors: u64,
    /// Pages that failed more than `max_retries` times.
    pub gave_up: u64,
    /// Pages dropped because their process exited (ESRCH) or refused (EPERM).
    pub dropped_exited: u64,
    pub processes_exited: u64,
    pub processes_refused: u64,
    /// Pages dropped at move time because their process left the scope.
    pub dropped_out_of_scope: u64,
    /// Pages left in the queue when the mover stopped.
    pub left_in_queue: u64,
    pub per_process: BTreeMap<u32, ProcMoves>,
    pub verify: Verify,
    /// Dry run: bytes that would have moved, per second of fault time.
    pub would_move_pages: u64,
    pub would_move_bytes: u64,
    pub would_move_peak_bytes_per_s: u64,
    /// Dry run: pages per target node.
    pub would_move_by_target: BTreeMap<u32, u64>,
}

pub struct Mover<E: Env> {
    cfg: MoverConfig,
    scope: Scope,
    env: E,
    queue: Queue,
    bucket: TokenBucket,
    sizer: BatchSizer,
    report: MoverReport,
    moved: HashMap<u32, Vec<(u64, u32)>>,
    moved_len: usize,
    would_by_second: BTreeMap<u64, u64>,
    shared: Arc<Shared>,
    free: BTreeMap<u32, FreeEstimate>,
    /// Nodes alone in the top tier: nothing can be above or beside them,
    /// so a move there needs no query first.
    sole_top: BTreeSet<u32>,
    /// Buffers of the calls, reused.
    addrs: Vec<u64>,
    nodes: Vec<i32>,
    status: Vec<i32>,
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
    pub fn new(cfg: MoverConfig, scope: Scope, env: E, shared: Arc<Shared>) -> Self {
        Mover {
            free: BTreeMap::new(),
            sole_top: sole_top_nodes(&cfg.tier_of),
            addrs: Vec::new(),
            nodes: Vec::new(),
            status: Vec::new(),
            bucket: TokenBucket::for_rate(cfg.rate_bytes_per_s),
            sizer: BatchSizer::new(cfg.batch_ms),
            report: MoverReport {
                dry_run: cfg.dry_run,
                ..MoverReport::default()
            },
            cfg,
            scope,
            env,
            queue: Queue::default(),
            moved: HashMap::new(),
            moved_len: 0,
            would_by_second: BTreeMap::new(),
            shared,
        }
    }

    pub fn push(&mut self, r: Request) {
        self.shared.received.fetch_add(1, Ordering::Relaxed);
        if self
            .report
            .per_process
            .get(&r.pid)
            .is_some_and(|p| p.exited || p.refused)
        {
            return;
        }
        if self.cfg.dry_run {
            // Counted once per page, like the real queue would.
            if self.queue.push(&r) {
                let bytes = u64::from(r.nr_pages.max(1)) * PAGE;
                *self
                    .would_by_second
                    .entry(r.ts_ns / 1_000_000_000)
                    .or_default() += bytes;
                self.report.would_move_pages += u64::from(r.nr_pages.max(1));
                self.report.would_move_bytes += bytes;
                *self
                    .report
                    .would_move_by_target
                    .entry(r.target)
                    .or_default() += 1;
                self.report.per_process.entry(r.pid).or_default().would_move += 1;
            }
            return;
        }
        self.queue.push(&r);
        self.shared
            .pending
            .store(self.queue.len() as u64, Ordering::Relaxed);
    }

    fn tier(&self, node: i32) -> Option<u32> {
        self.cfg.tier_of.get(&node).copied()
    }

    /// One batch at most.
    pub fn step(&mut self) -> Step {
        if self.cfg.dry_run {
            // Nothing is ever moved; the queue only coalesces.
            return Step::Idle;
        }
        let now = self.env.now_ns();
        let pid = match self.queue.next_process(now) {
            Ok(pid) => pid,
            Err(Some(due)) => return Step::Wait(due.saturating_sub(now).max(1)),
            Err(None) => return Step::Idle,
        };
        if !self.scope.allows_now(pid) {
            self.report.dropped_out_of_scope += self.queue.drop_process(pid) as u64;
            self.sync_pending();
            return Step::Worked;
        }
        let Some(target) = self.queue.peek_target(pid, now) else {
            return Step::Worked;
        };
        let want = self.sizer.pages() as u64;
        let Some((headroom, fresh)) = self.headroom(target, now, want) else {
            // Without the node's free memory the floor cannot be kept.
            self.report.meminfo_errors += 1;
            return Step::Wait(1_000_000_000);
        };
        let headroom_pages = headroom / PAGE;
        if headroom_pages == 0 {
            self.report.floor_waits += 1;
            return Step::Wait(100_000_000);
        }
        let rate_pages = self.bucket.available(now) / PAGE;
        if rate_pages == 0 {
            self.report.rate_waits += 1;
            return Step::Wait(self.bucket.wait_ns(now, PAGE).max(1_000_000));
        }
        let hard = headroom_pages.min(rate_pages);
        let mut batch = self.queue.take_batch(pid, now, want.min(hard));
        if batch.is_empty() {
            // A huge folio larger than the batch size: the hard limits decide.
            batch = self.queue.take_batch(pid, now, hard);
        }
        if batch.is_empty() {
            if !fresh && hard == headroom_pages {
                // The estimate is short: look at the node again first.
                self.free.remove(&target);
                return Step::Worked;
            }
            // It does not fit under the rate's burst or the floor yet.
            self.report.floor_waits += u64::from(hard == headroom_pages);
            self.report.rate_waits += u64::from(hard != headroom_pages);
            return Step::Wait(100_000_000);
        }
        self.execute(pid, target, batch);
        self.sync_pending();
        Step::Worked
    }

    /// Bytes that may still go to `target` without crossing its floor, and
    /// whether that comes from a meminfo read just now.
    ///
    /// Reading the node's meminfo before every batch costs about as much as
    /// a small move under emulation, so a reading is reused for up to
    /// [`MEMINFO_MAX_AGE_NS`], conservatively: a reused reading grants only
    /// half its headroom, minus every byte sent to the node since (whether
    /// it moved or not), so other allocations on the node have the other
    /// half. A batch that does not fit the estimate reads the node again;
    /// right after a read the whole headroom may be used, as before.
    fn headroom(&mut self, target: u32, now: u64, want_pages: u64) -> Option<(u64, bool)> {
        let cpus = self.cfg.cpus_of.get(&target).copied().unwrap_or(1);
        if let Some(e) = self.free.get(&target) {
            if now.saturating_sub(e.read_ns) < MEMINFO_MAX_AGE_NS {
                let floor_kb = self.cfg.min_free.floor_kb(e.total_kb);
                let h = (floor::headroom_bytes(e.free_kb, floor_kb, cpus) / 2)
                    .saturating_sub(e.sent_bytes);
                if h >= want_pages * PAGE {
                    return Some((h, false));
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
        Some((headroom, true))
    }

    fn sync_pending(&self) {
        self.shared
            .pending
            .store(self.queue.len() as u64, Ordering::Relaxed);
    }

    fn drop_process(&mut self, pid: u32, err: &io::Error, batch: usize) {
        let n = self.queue.drop_process(pid) + batch;
        self.report.dropped_exited += n as u64;
        let p = self.report.per_process.entry(pid).or_default();
        if err.raw_os_error() == Some(libc::ESRCH) {
            if !p.exited {
                self.report.processes_exited += 1;
            }
            p.exited = true;
        } else {
            if !p.refused {
                self.report.processes_refused += 1;
            }
            p.refused = true;
        }
    }

    fn retry_or_give_up(&mut self, pid: u32, addr: u64, p: Pending, now: u64) {
        p_retry(
            &mut self.queue,
            &mut self.report,
            &self.cfg,
            pid,
            addr,
            p,
            now,
        );
    }

    fn whole_call_failed(&mut self, pid: u32, batch: Vec<(u64, Pending)>, e: &io::Error) {
        match e.raw_os_error() {
            Some(libc::ESRCH) | Some(libc::EPERM) => self.drop_process(pid, e, batch.len()),
            // A process being killed has released its memory before its pid
            // goes: move_pages finds no mm and says EINVAL. It has exited.
            Some(libc::EINVAL) if self.env.process_has_no_memory(pid) => {
                self.drop_process(pid, &io::Error::from_raw_os_error(libc::ESRCH), batch.len())
            }
            errno => {
                let now = self.env.now_ns();
                for (addr, p) in batch {
                    let retry = self.report.statuses.fail(errno.unwrap_or(0));
                    self.shared.failures.fetch_add(1, Ordering::Relaxed);
                    self.report.per_process.entry(pid).or_default().failed += 1;
                    if retry {
                        self.retry_or_give_up(pid, addr, p, now);
                    }
                }
            }
        }
    }

    /// Where are they now? Pages already on the target, or in a tier no
    /// lower than it, are accounted and left; gone ones fail. Returns what
    /// is still to move (`None`: the call failed as a whole).
    fn query(
        &mut self,
        pid: u32,
        target: u32,
        batch: Vec<(u64, Pending)>,
    ) -> Option<Vec<(u64, Pending)>> {
        self.addrs.clear();
        self.addrs.extend(batch.iter().map(|(a, _)| *a));
        let mut status = std::mem::take(&mut self.status);
        status.clear();
        status.resize(self.addrs.len(), i32::MIN);
        let t0 = self.env.now_ns();
        let r = sys::query_pages(pid, &self.addrs, &mut status);
        let t1 = self.env.now_ns();
        self.report.query_calls += 1;
        self.report.query_ns += t1.saturating_sub(t0);
        if let Err(e) = r {
            self.status = status;
            self.whole_call_failed(pid, batch, &e);
            return None;
        }
        if all_gone(&status) && self.env.process_has_no_memory(pid) {
            // An exiting process unmapping its memory: it has exited.
            self.status = status;
            let esrch = io::Error::from_raw_os_error(libc::ESRCH);
            self.drop_process(pid, &esrch, batch.len());
            return None;
        }
        let target_tier = self.tier(target as i32);
        let mut to_move = Vec::with_capacity(batch.len());
        let (mut already, mut failed) = (0u64, 0u64);
        for ((addr, p), &s) in batch.into_iter().zip(&status) {
            if s == target as i32 {
                already += 1;
            } else if s >= 0 {
                // Only ever from a lower tier to a higher one.
                match (self.cfg.tier_of.get(&s), target_tier) {
                    (Some(cur), Some(t)) if t < *cur => to_move.push((addr, p)),
                    _ => already += 1,
                }
            } else {
                failed += 1;
                if self.report.statuses.fail(-s) {
                    self.retry_or_give_up(pid, addr, p, t1);
                }
            }
        }
        self.status = status;
        self.report.statuses.already_on_target += already;
        self.shared.failures.fetch_add(failed, Ordering::Relaxed);
        let row = self.report.per_process.entry(pid).or_default();
        row.already_on_target += already;
        row.failed += failed;
        Some(to_move)
    }

    fn execute(&mut self, pid: u32, target: u32, batch: Vec<(u64, Pending)>) {
        let t0 = self.env.now_ns();
        // 1. The location query, unless a move to `target` can only ever be
        // upwards or a no-op (see `sole_top`).
        let to_move = if self.sole_top.contains(&target) {
            batch
        } else {
            match self.query(pid, target, batch) {
                Some(v) => v,
                None => return,
            }
        };
        if to_move.is_empty() {
            return;
        }
        // 2. Move.
        let bytes: u64 = to_move
            .iter()
            .map(|(_, p)| u64::from(p.nr_pages) * PAGE)
            .sum();
        let t1 = self.env.now_ns();
        self.bucket.take(t1, bytes);
        if let Some(e) = self.free.get_mut(&target) {
            e.sent_bytes += bytes;
        }
        self.addrs.clear();
        self.addrs.extend(to_move.iter().map(|(a, _)| *a));
        self.nodes.clear();
        self.nodes.resize(self.addrs.len(), target as i32);
        let mut status = std::mem::take(&mut self.status);
        status.clear();
        status.resize(self.addrs.len(), i32::MIN);
        let r = sys::move_pages(pid, &self.addrs, &self.nodes, &mut status);
        let t2 = self.env.now_ns();
        self.report.move_calls += 1;
        self.report.move_ns += t2.saturating_sub(t1);
        // The budget covers the query too.
        self.sizer.observe(self.addrs.len(), t2.saturating_sub(t0));
        if let Err(e) = r {
            self.status = status;
            self.whole_call_failed(pid, to_move, &e);
            return;
        }
        if all_gone(&status) && self.env.process_has_no_memory(pid) {
            // An exiting process unmapping its memory: it has exited.
            self.status = status;
            let esrch = io::Error::from_raw_os_error(libc::ESRCH);
            self.drop_process(pid, &esrch, to_move.len());
            return;
        }
        let (mut moved, mut moved_bytes, mut failed) = (0u64, 0u64, 0u64);
        let verify = self.moved.entry(pid).or_default();
        for ((addr, p), &s) in to_move.into_iter().zip(&status) {
            if s == target as i32 {
                // Also a page the kernel promoted itself since the fault
                // when the query was skipped: it is on the target either way.
                moved += 1;
                moved_bytes += u64::from(p.nr_pages) * PAGE;
                if self.moved_len < MAX_VERIFY {
                    self.moved_len += 1;
                    verify.push((addr, target));
                } else {
                    self.report.verify.unchecked += 1;
                }
                continue;
            }
            failed += 1;
            let retry = if s >= 0 || s == i32::MIN {
                self.report.statuses.not_migrated += 1;
                true
            } else {
                self.report.statuses.fail(-s)
            };
            if retry {
                p_retry(
                    &mut self.queue,
                    &mut self.report,
                    &self.cfg,
                    pid,
                    addr,
                    p,
                    t2,
                );
            }
        }
        self.status = status;
        self.report.statuses.moved += moved;
        self.report.moved_bytes += moved_bytes;
        self.shared.moved_pages.fetch_add(moved, Ordering::Relaxed);
        self.shared
            .moved_bytes
            .fetch_add(moved_bytes, Ordering::Relaxed);
        self.shared.failures.fetch_add(failed, Ordering::Relaxed);
        let row = self.report.per_process.entry(pid).or_default();
        row.moved += moved;
        row.failed += failed;
    }

    /// The live counters for the state file (the caller sets identity,
    /// scope and model once).
    pub fn fill_state(&self, s: &mut PromoterState) {
        let r = &self.report;
        let st = &r.statuses;
        let live = PromoterStats::read(&self.shared, 0);
        s.moved_pages = st.moved;
        s.moved_bytes = r.moved_bytes;
        s.already_on_target = st.already_on_target;
        s.failures = st.failures();
        s.failures_by_status = [
            ("ebusy", st.ebusy),
            ("enomem", st.enomem),
            ("eacces", st.eacces),
            ("efault", st.efault),
            ("enoent", st.enoent),
            ("not_migrated", st.not_migrated),
            ("other", st.other),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        s.queue_depth = live.queue_depth;
        s.queue_overflows = live.queue_overflows;
        s.would_move_pages = r.would_move_pages;
        s.rate_limit_bytes_per_s = self.cfg.rate_bytes_per_s;
        s.batch_ms = self.cfg.batch_ms;
        s.batch_pages = self.sizer.pages() as u64;
        s.move_calls = r.move_calls;
        s.move_pages_seconds = (r.move_ns + r.query_ns) as f64 / 1e9;
        s.mean_call_ms = (r.move_calls > 0).then(|| r.move_ns as f64 / 1e6 / r.move_calls as f64);
        s.rate_waits = r.rate_waits;
        s.floor_waits = r.floor_waits;
    }

    /// Stops: where are the moved pages now? Returns the report.
    pub fn finish(mut self) -> MoverReport {
        self.report.left_in_queue = self.queue.len() as u64;
        self.report.queue = self.queue.counts.clone();
        self.report.batch_pages = self.sizer.pages();
        self.report.ns_per_page = self.sizer.ns_per_page();
        self.report.fixed_ns_per_call = self.sizer.fixed_ns();
        self.report.would_move_peak_bytes_per_s =
            self.would_by_second.values().copied().max().unwrap_or(0);
        for (pid, pages) in std::mem::take(&mut self.moved) {
            for chunk in pages.chunks(super::batch::MAX_PAGES) {
                let addrs: Vec<u64> = chunk.iter().map(|(a, _)| *a).collect();
                let mut status = vec![i32::MIN; addrs.len()];
                let v = &mut self.report.verify;
                v.checked += addrs.len() as u64;
                match sys::query_pages(pid, &addrs, &mut status) {
                    Ok(_) => {
                        for ((_, target), s) in chunk.iter().zip(status) {
                            if s == *target as i32 {
                                v.on_target += 1;
                            } else if s >= 0 {
                                v.elsewhere += 1;
                            } else {
                                v.gone += 1;
                            }
                        }
                    }
                    Err(_) => v.gone += addrs.len() as u64,
                }
            }
        }
        self.report
    }
}

/// The state file of a running promoter: where, and the fields set once.
pub struct StatePublisher {
    pub writer: Writer,
    pub base: PromoterState,
    last_ns: Option<u64>,
    warned: bool,
}

impl StatePublisher {
    pub fn new(writer: Writer, base: PromoterState) -> Self {
        StatePublisher {
            writer,
            base,
            last_ns: None,
            warned: false,
        }
    }

    /// Publishes when [`PUBLISH_EVERY_S`] has passed (or `force`).
    fn tick<E: Env>(&mut self, mover: &Mover<E>, force: bool) {
        let now = mover.env.now_ns();
        if !force
            && self
                .last_ns
                .is_some_and(|t| (now.saturating_sub(t) as f64) < PUBLISH_EVERY_S * 1e9)
        {
            return;
        }
        self.last_ns = Some(now);
        mover.fill_state(&mut self.base);
        if let Err(e) = self.writer.publish(&mut self.base) {
            if !self.warned {
                eprintln!(
                    "numatrace: warning: cannot publish the promoter state to {}: {e} (top and export will not show it)",
                    self.writer.path.display()
                );
                self.warned = true;
            }
        }
    }
}

/// Puts a failed page back with a backoff, or gives up on it after
/// `max_retries` (a free function: callers hold other borrows of the mover).
fn p_retry(
    queue: &mut Queue,
    report: &mut MoverReport,
    cfg: &MoverConfig,
    pid: u32,
    addr: u64,
    mut p: Pending,
    now: u64,
) {
    p.tries += 1;
    if p.tries > cfg.max_retries {
        report.gave_up += 1;
    } else {
        p.due_ns = now + cfg.retry_backoff_ms * 1_000_000 * u64::from(p.tries);
        queue.retry(pid, addr, p);
    }
}

/// Runs `mover` on its own thread until `stop` (after the call in flight)
/// or until the channel closes and the queue is empty. With `state`, the
/// live counters are published about once a second, and the file is
/// removed at the end.
pub fn spawn<E: Env + Send + 'static>(
    mut mover: Mover<E>,
    rx: Receiver<Request>,
    stop: Arc<AtomicBool>,
    mut state: Option<StatePublisher>,
) -> std::io::Result<std::thread::JoinHandle<MoverReport>> {
    std::thread::Builder::new()
        .name("promote-mover".into())
        .spawn(move || {
            let started = mover.env.now_ns();
            mover.shared.started_ns.store(started, Ordering::Relaxed);
            let mut open = true;
            while !stop.load(Ordering::Acquire) {
                if let Some(p) = &mut state {
                    p.tick(&mover, false);
                }
                while open {
                    match rx.try_recv() {
                        Ok(r) => mover.push(r),
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => open = false,
                    }
                }
                let wait_ns = match mover.step() {
                    Step::Worked => continue,
                    Step::Idle if !open => break,
                    Step::Idle => POLL_NS,
                    Step::Wait(ns) => ns.min(POLL_NS),
                };
                if open {
                    match rx.recv_timeout(Duration::from_nanos(wait_ns)) {
                        Ok(r) => mover.push(r),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => open = false,
                    }
                } else {
                    std::thread::sleep(Duration::from_nanos(wait_ns));
                }
            }
            if let Some(p) = &mut state {
                p.tick(&mover, true);
                p.writer.remove();
            }
            mover.finish()
        })
}

#[cfg(test)]
mod tests {
    use std::{
        cell::{Cell, RefCell},
        collections::HashMap,
        rc::Rc,
    };

    use super::*;
    use crate::sys::{fake, Syscall};

    /// A kernel with one DRAM node 0 (tier 4) and slow node 1 (tier 22).
    #[derive(Default)]
    struct Kernel {
        /// (pid, addr) -> node
        pages: HashMap<(u32, u64), i32>,
        /// (pid, addr) -> errno the move reports for the page
        errors: HashMap<(u32, u64), i32>,
        alive: Vec<u32>,
        moves: Vec<(u32, usize)>,
        /// Abort a move after this many pages (positive return).
        abort_after: Option<usize>,
        /// Killed, its memory released, its pid not yet gone.
        exiting: Vec<u32>,
        /// In do_exit, unmapping: every page of a call is EFAULT.
        unmapping: Vec<u32>,
        /// Every call fails with EINVAL.
        einval: bool,
    }

    struct World {
        kernel: Rc<RefCell<Kernel>>,
        now: Rc<Cell<u64>>,
        free_kb: Rc<Cell<u64>>,
    }

    struct FakeEnv {
        now: Rc<Cell<u64>>,
        free_kb: Rc<Cell<u64>>,
        kernel: Rc<RefCell<Kernel>>,
    }

    impl Env for FakeEnv {
        fn now_ns(&self) -> u64 {
            self.now.get()
        }
        fn node_meminfo(&self, node: u32) -> Option<(u64, u64)> {
            let _ = node;
            Some((self.free_kb.get(), 1 << 20))
        }
        fn process_has_no_memory(&self, pid: u32) -> bool {
            let k = self.kernel.borrow();
            k.exiting.contains(&pid) || k.unmapping.contains(&pid)
        }
    }

    fn cfg() -> MoverConfig {
        MoverConfig {
            rate_bytes_per_s: 0,
            min_free: MinFree::Bytes(100 << 20),
            batch_ms: 20.0,
            max_retries: 2,
            retry_backoff_ms: 10,
            dry_run: false,
            tier_of: [(0, 4), (1, 22), (2, 4)].into_iter().collect(),
            cpus_of: [(0, 1)].into_iter().collect(),
        }
    }

    /// Installs the fake kernel on this thread; 10 us per page moved.
    fn world(free_kb: u64) -> World {
        let kernel = Rc::new(RefCell::new(Kernel::default()));
        let now = Rc::new(Cell::new(1_000_000_000));
        let free = Rc::new(Cell::new(free_kb));
        let (k, n, f) = (kernel.clone(), now.clone(), free.clone());
        fake::set(move |call| {
            let Syscall::MovePages {
                pid,
                pages,
                nodes,
                status,
                ..
            } = call;
            let mut k = k.borrow_mut();
            if !k.alive.contains(pid) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if k.exiting.contains(pid) || k.einval {
                // No mm (being killed), or a bad call.
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            if k.unmapping.contains(pid) {
                status.iter_mut().for_each(|s| *s = -libc::EFAULT);
                return Ok(0);
            }
            let Some(nodes) = nodes else {
                for (a, s) in pages.iter().zip(status.iter_mut()) {
                    *s = k.pages.get(&(*pid, *a)).copied().unwrap_or(-libc::EFAULT);
                }
                return Ok(0);
            };
            k.moves.push((*pid, pages.len()));
            n.set(n.get() + pages.len() as u64 * 10_000);
            for (i, (a, s)) in pages.iter().zip(status.iter_mut()).enumerate() {
                if k.abort_after.is_some_and(|m| i >= m) {
                    return Ok((pages.len() - i) as i64);
                }
                if let Some(e) = k.errors.get(&(*pid, *a)) {
                    *s = -e;
                    continue;
                }
                if !k.pages.contains_key(&(*pid, *a)) {
                    *s = -libc::EFAULT;
                    continue;
                }
                k.pages.insert((*pid, *a), nodes[i]);
                f.set(f.get() - 4);
                *s = nodes[i];
            }
            Ok(0)
        });
        World {
            kernel,
            now,
            free_kb: free,
        }
    }

    fn mover(w: &World, cfg: MoverConfig, scope: &[u32]) -> Mover<FakeEnv> {
        Mover::new(
            cfg,
            Scope::Pids(scope.iter().copied().collect()),
            FakeEnv {
                now: w.now.clone(),
                free_kb: w.free_kb.clone(),
                kernel: w.kernel.clone(),
            },
            Arc::new(Shared::default()),
        )
    }

    fn req(pid: u32, page: u64) -> Request {
        Request {
            pid,
            addr: page * PAGE,
            src_node: 1,
            target: 0,
            nr_pages: 1,
            ts_ns: 0,
        }
    }

    /// Steps until idle (time jumps over waits); at most `max` steps.
    fn run(m: &mut Mover<FakeEnv>, now: &Rc<Cell<u64>>, max: usize) -> Vec<Step> {
        let mut steps = Vec::new();
        for _ in 0..max {
            let s = m.step();
            steps.push(s);
            match s {
                Step::Idle => break,
                Step::Wait(ns) => now.set(now.get() + ns),
                Step::Worked => {}
            }
        }
        steps
    }

    fn slow_pages(w: &World, pid: u32, pages: std::ops::Range<u64>) {
        let mut k = w.kernel.borrow_mut();
        if !k.alive.contains(&pid) {
            k.alive.push(pid);
        }
        for p in pages {
            k.pages.insert((pid, p * PAGE), 1);
        }
    }

    #[test]
    fn statuses_are_accounted_per_page() {
        let w = world(1 << 20);
        slow_pages(&w, 7, 0..10);
        {
            let mut k = w.kernel.borrow_mut();
            k.pages.insert((7, 2 * PAGE), 0); // already on DRAM
            k.pages.insert((7, 3 * PAGE), 2); // another top-tier node
            k.pages.remove(&(7, 4 * PAGE)); // unmapped: EFAULT at query
            k.errors.insert((7, 5 * PAGE), libc::EBUSY);
            k.errors.insert((7, 6 * PAGE), libc::ENOMEM);
            k.errors.insert((7, 7 * PAGE), libc::EACCES);
            k.errors.insert((7, 8 * PAGE), libc::ENOENT);
            k.errors.insert((7, 9 * PAGE), libc::EIO);
        }
        let mut m = mover(&w, cfg(), &[7]);
        for p in 0..10 {
            m.push(req(7, p));
        }
        m.push(req(7, 0)); // duplicate
        run(&mut m, &w.now, 100);
        let r = m.finish();
        fake::clear();
        let s = &r.statuses;
        assert_eq!(s.moved, 2, "pages 0 and 1");
        assert_eq!(s.already_on_target, 2);
        assert_eq!(s.efault, 1);
        // EBUSY, ENOMEM and EIO are retried twice after the first try.
        assert_eq!((s.ebusy, s.enomem, s.other), (3, 3, 3));
        assert_eq!((s.eacces, s.enoent), (1, 1));
        assert_eq!(r.gave_up, 3);
        assert_eq!(r.queue.coalesced, 1);
        assert_eq!(r.per_process[&7].moved, 2);
        assert_eq!(r.moved_bytes, 2 * PAGE);
        assert_eq!(r.verify.on_target, 2);
        assert_eq!(r.left_in_queue, 0);
    }

    #[test]
    fn aborted_calls_leave_pages_for_retry() {
        let w = world(1 << 20);
        slow_pages(&w, 7, 0..4);
        w.kernel.borrow_mut().abort_after = Some(2);
        let mut m = mover(&w, cfg(), &[7]);
        (0..4).for_each(|p| m.push(req(7, p)));
        assert_eq!(m.step(), Step::Worked);
        w.kernel.borrow_mut().abort_after = None;
        run(&mut m, &w.now, 100);
        let r = m.finish();
        fake::clear();
        assert_eq!(r.statuses.not_migrated, 2);
        assert_eq!(r.statuses.moved, 4);
        assert_eq!(r.gave_up, 0);
    }

    #[test]
    fn free_floor_is_never_crossed() {
        // 100 MiB floor + 500 KiB drift margin; 2 MiB of headroom = 512 pages.
        let floor_kb = 100 << 10;
        let w = world(floor_kb + 500 + 2048);
        slow_pages(&w, 7, 0..5000);
        let mut m = mover(&w, cfg(), &[7]);
        (0..5000).for_each(|p| m.push(req(7, p)));
        let steps = run(&mut m, &w.now, 200);
        assert!(
            steps.contains(&Step::Wait(100_000_000)),
            "waits at the floor"
        );
        assert!(w.free_kb.get() >= floor_kb + 500, "{}", w.free_kb.get());
        let r = m.finish();
        fake::clear();
        assert_eq!(r.statuses.moved, 512);
        assert!(r.floor_waits > 0);
        assert_eq!(r.min_headroom_kb[&0], 0);
        assert_eq!(r.left_in_queue, 5000 - 512);
    }

    #[test]
    fn rate_limit_spaces_the_batches() {
        let w = world(1 << 30);
        slow_pages(&w, 7, 0..2560);
        let mut c = cfg();
        c.rate_bytes_per_s = 1 << 20; // 256 pages/s, burst 25 pages
        let mut m = mover(&w, c, &[7]);
        (0..2560).for_each(|p| m.push(req(7, p)));
        let t0 = w.now.get();
        run(&mut m, &w.now, 10_000);
        let secs = (w.now.get() - t0) as f64 / 1e9;
        let r = m.finish();
        fake::clear();
        assert_eq!(r.statuses.moved, 2560);
        // 10 MiB at 1 MiB/s, minus the initial burst.
        assert!((9.0..10.5).contains(&secs), "{secs} s");
        assert!(r.rate_waits > 0);
    }

    #[test]
    fn batches_adapt_to_the_target_time() {
        let w = world(1 << 30);
        slow_pages(&w, 7, 0..20_000);
        let mut m = mover(&w, cfg(), &[7]);
        (0..20_000).for_each(|p| m.push(req(7, p)));
        run(&mut m, &w.now, 1000);
        let sizes: Vec<usize> = w.kernel.borrow().moves.iter().map(|(_, n)| *n).collect();
        let r = m.finish();
        fake::clear();
        assert_eq!(sizes[0], crate::batch::INITIAL_PAGES);
        // 10 us per page in the fake: 20 ms = 2000 pages.
        assert!(sizes.iter().all(|&n| n <= 2000), "{sizes:?}");
        assert!(sizes.contains(&2000), "{sizes:?}");
        assert_eq!(r.statuses.moved, 20_000);
        // Far above the floor, one meminfo reading serves its 200 ms.
        assert!(r.move_calls >= 10, "{}", r.move_calls);
        assert!(r.meminfo_reads <= 2, "{} reads", r.meminfo_reads);
    }

    #[test]
    fn sole_top_tier_target_moves_without_a_query() {
        let w = world(1 << 20);
        slow_pages(&w, 7, 0..10);
        {
            let mut k = w.kernel.borrow_mut();
            k.pages.insert((7, 2 * PAGE), 0); // the kernel promoted it since
            k.pages.remove(&(7, 4 * PAGE)); // unmapped since
            k.errors.insert((7, 5 * PAGE), libc::EBUSY);
        }
        let mut c = cfg();
        c.tier_of = [(0, 4), (1, 22)].into_iter().collect();
        let mut m = mover(&w, c, &[7]);
        (0..10).for_each(|p| m.push(req(7, p)));
        run(&mut m, &w.now, 100);
        let r = m.finish();
        fake::clear();
        assert_eq!(r.query_calls, 0, "no location query before the moves");
        // The move's statuses: on node 0 (moved, or there already), gone, busy.
        assert_eq!(r.statuses.moved, 8);
        assert_eq!(r.statuses.efault, 1);
        assert_eq!(r.statuses.ebusy, 3, "tried 1 + 2 retries");
        assert_eq!(r.gave_up, 1);
        assert_eq!(r.verify.on_target, 8);
        let k = w.kernel.borrow();
        assert!(k.pages.iter().all(|((_, a), n)| *n == 0 || *a == 5 * PAGE));
        assert_eq!(k.moves.iter().map(|(_, n)| n).sum::<usize>(), 10 + 2);
        // With two top-tier nodes every batch is queried first.
        assert!(sole_top_nodes(&cfg().tier_of).is_empty());
        assert_eq!(
            sole_top_nodes(&[(0, 4), (1, 22), (2, 22)].into_iter().collect()),
            [0].into()
        );
    }

    #[test]
    fn exited_process_is_dropped_quietly() {
        let w = world(1 << 20);
        slow_pages(&w, 7, 0..10);
        slow_pages(&w, 8, 0..10);
        let mut m = mover(&w, cfg(), &[7, 8]);
        (0..10).for_each(|p| m.push(req(8, p)));
        (0..5).for_each(|p| m.push(req(7, p)));
        w.kernel.borrow_mut().alive.retain(|p| *p != 8);
        run(&mut m, &w.now, 100);
        m.push(req(8, 11)); // late request of the dead process
        run(&mut m, &w.now, 100);
        let r = m.finish();
        fake::clear();
        assert_eq!(r.processes_exited, 1);
        assert_eq!(r.dropped_exited, 10);
        assert!(r.per_process[&8].exited);
        assert_eq!(r.statuses.moved, 5);
        assert_eq!(r.statuses.failures(), 0, "ESRCH is not a page failure");
    }

    #[test]
    fn a_killed_process_without_memory_is_dropped_not_failed() {
        let w = world(1 << 20);
        slow_pages(&w, 7, 0..10);
        slow_pages(&w, 8, 0..10);
        let mut c = cfg();
        c.tier_of = [(0, 4), (1, 22)].into_iter().collect();
        let mut m = mover(&w, c, &[7, 8]);
        (0..10).for_each(|p| m.push(req(8, p)));
        (0..5).for_each(|p| m.push(req(7, p)));
        // 8 was SIGKILLed: its mm is gone, its pid not yet.
        w.kernel.borrow_mut().exiting.push(8);
        run(&mut m, &w.now, 100);
        let r = m.finish();
        assert_eq!(r.processes_exited, 1);
        assert_eq!(r.dropped_exited, 10);
        assert!(r.per_process[&8].exited);
        assert_eq!(r.statuses.failures(), 0, "not page failures");
        assert_eq!(r.statuses.moved, 5);
        // 8 in do_exit, unmapping: every page EFAULT, also dropped as exited.
        let mut m = mover(&w, cfg(), &[7, 8]);
        w.kernel.borrow_mut().exiting.clear();
        w.kernel.borrow_mut().unmapping.push(8);
        (0..10).for_each(|p| m.push(req(8, p)));
        run(&mut m, &w.now, 100);
        let r = m.finish();
        assert_eq!(r.processes_exited, 1);
        assert_eq!(r.dropped_exited, 10);
        assert_eq!(r.statuses.failures(), 0, "unmapping pages are not failures");
        w.kernel.borrow_mut().unmapping.clear();
        // EINVAL from a process that still has its memory is a failure.
        w.kernel.borrow_mut().einval = true;
        let mut m = mover(&w, cfg(), &[7]);
        m.push(req(7, 6));
        run(&mut m, &w.now, 100);
        let r = m.finish();
        fake::clear();
        assert_eq!(r.processes_exited, 0);
        assert_eq!(r.statuses.other, 3, "tried 1 + 2 retries");
        assert_eq!(r.gave_up, 1);
    }

    #[test]
    fn exiting_flag_from_proc_stat() {
        let line = |flags: u64| format!("42 (a (b) c) R 1 42 42 0 -1 {flags} 0 0 0 0");
        assert!(super::stat_says_exiting(&line(0x404044)));
        assert!(!super::stat_says_exiting(&line(0x400040)));
        assert!(!super::stat_says_exiting("garbage"));
        assert!(super::all_gone(&[-libc::EFAULT, -libc::ENOENT]));
        assert!(!super::all_gone(&[-libc::EFAULT, 0]));
        assert!(!super::all_gone(&[]));
    }

    #[test]
    fn out_of_scope_and_dry_run_move_nothing() {
        let w = world(1 << 20);
        slow_pages(&w, 9, 0..10);
        let mut m = mover(&w, cfg(), &[7]);
        (0..10).for_each(|p| m.push(req(9, p)));
        run(&mut m, &w.now, 10);
        let r = m.finish();
        assert_eq!(r.dropped_out_of_scope, 10);
        let mut c = cfg();
        c.dry_run = true;
        let mut m = mover(&w, c, &[9]);
        (0..10).for_each(|p| m.push(req(9, p)));
        m.push(req(9, 3));
        run(&mut m, &w.now, 10);
        let r = m.finish();
        assert_eq!(r.would_move_pages, 10);
        assert_eq!(r.would_move_bytes, 10 * PAGE);
        assert_eq!(r.per_process[&9].would_move, 10);
        assert!(w.kernel.borrow().moves.is_empty(), "no move_pages call");
        fake::clear();
    }

    #[test]
    fn never_to_a_lower_or_equal_tier() {
        let w = world(1 << 20);
        slow_pages(&w, 7, 0..2);
        let mut m = mover(&w, cfg(), &[7]);
        // Target node 1 (slow) for a page that is on node 0 and one on node 1.
        w.kernel.borrow_mut().pages.insert((7, 0), 0);
        let mut r0 = req(7, 0);
        r0.target = 1;
        let mut r1 = req(7, 1);
        r1.target = 1;
        m.push(r0);
        m.push(r1);
        run(&mut m, &w.now, 10);
        let r = m.finish();
        fake::clear();
        assert_eq!(r.statuses.moved, 0);
        assert_eq!(r.statuses.already_on_target, 2);
        assert!(w.kernel.borrow().moves.is_empty());
    }
}
