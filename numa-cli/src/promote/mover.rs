//! The mover: takes (process, page, target) requests off a bounded channel,
//! coalesces them per process ([`Queue`]) and promotes them with
//! move_pages(2) in batches sized to `--batch-ms`, under the byte rate
//! limit and above the target node's free floor. Runs on its own thread so
//! the event pipeline never waits for a migration.
//!
//! Every batch is first *queried* (move_pages without nodes): pages already
//! on the target or in a tier no lower than it are not moved (this is how
//! "never to a lower tier" is enforced at the moment of the move, not only
//! at the fault), and pages that are gone are dropped without a migration.
use std::{
    collections::{BTreeMap, HashMap},
    io,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc::{Receiver, RecvTimeoutError, TryRecvError},
        Arc,
    },
    time::Duration,
};

use serde::Serialize;

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
}

pub struct SysEnv;

impl Env for SysEnv {
    fn now_ns(&self) -> u64 {
        crate::pipeline::monotonic_ns()
    }
    fn node_meminfo(&self, node: u32) -> Option<(u64, u64)> {
        floor::read_node_meminfo(node)
    }
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

/// A snapshot of promoter activity for live displays.
///
/// `numatrace top` and the exporter are meant to show it while a promoter
/// runs (issue 7: "moved/s, failures, queue depth"); wiring it into them is
/// left to their owners: call [`PromoterStats::read`] on the `Arc<Shared>`
/// of a running promoter, and [`PromoterStats::moved_per_s`] between two.
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
    /// Pages per call at the end, and the learnt cost per page.
    pub batch_pages: usize,
    pub ns_per_page: Option<f64>,
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
}

impl<E: Env> Mover<E> {
    pub fn new(cfg: MoverConfig, scope: Scope, env: E, shared: Arc<Shared>) -> Self {
        Mover {
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
        let Some((free_kb, total_kb)) = self.env.node_meminfo(target) else {
            // Without the node's free memory the floor cannot be kept.
            self.report.meminfo_errors += 1;
            return Step::Wait(1_000_000_000);
        };
        let floor_kb = self.cfg.min_free.floor_kb(total_kb);
        self.report.floor_kb.insert(target, floor_kb);
        let cpus = self.cfg.cpus_of.get(&target).copied().unwrap_or(1);
        let headroom = floor::headroom_bytes(free_kb, floor_kb, cpus);
        let m = self
            .report
            .min_headroom_kb
            .entry(target)
            .or_insert(u64::MAX);
        *m = (*m).min(headroom / 1024);
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
        let mut batch = self
            .queue
            .take_batch(pid, now, (self.sizer.pages() as u64).min(hard));
        if batch.is_empty() {
            // A huge folio larger than the batch size: the hard limits decide.
            batch = self.queue.take_batch(pid, now, hard);
        }
        if batch.is_empty() {
            // It does not fit under the rate's burst or the floor yet.
            self.report.floor_waits += u64::from(hard == headroom_pages);
            self.report.rate_waits += u64::from(hard != headroom_pages);
            return Step::Wait(100_000_000);
        }
        self.execute(pid, target, batch);
        self.sync_pending();
        Step::Worked
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

    fn retry_or_give_up(&mut self, pid: u32, addr: u64, mut p: Pending, now: u64) {
        p.tries += 1;
        if p.tries > self.cfg.max_retries {
            self.report.gave_up += 1;
        } else {
            p.due_ns = now + self.cfg.retry_backoff_ms * 1_000_000 * u64::from(p.tries);
            self.queue.retry(pid, addr, p);
        }
    }

    fn whole_call_failed(&mut self, pid: u32, batch: Vec<(u64, Pending)>, e: &io::Error) {
        match e.raw_os_error() {
            Some(libc::ESRCH) | Some(libc::EPERM) => self.drop_process(pid, e, batch.len()),
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

    fn execute(&mut self, pid: u32, target: u32, batch: Vec<(u64, Pending)>) {
        // 1. Where are they now?
        let addrs: Vec<u64> = batch.iter().map(|(a, _)| *a).collect();
        let mut status = vec![i32::MIN; addrs.len()];
        let t0 = self.env.now_ns();
        let r = sys::query_pages(pid, &addrs, &mut status);
        let t1 = self.env.now_ns();
        self.report.query_calls += 1;
        self.report.query_ns += t1.saturating_sub(t0);
        if let Err(e) = r {
            self.whole_call_failed(pid, batch, &e);
            return;
        }
        let target_tier = self.tier(target as i32);
        let mut to_move = Vec::with_capacity(batch.len());
        for ((addr, p), s) in batch.into_iter().zip(status) {
            let proc_row = self.report.per_process.entry(pid).or_default();
            if s == target as i32 {
                self.report.statuses.already_on_target += 1;
                proc_row.already_on_target += 1;
            } else if s >= 0 {
                // Only ever from a lower tier to a higher one.
                match (self.cfg.tier_of.get(&s), target_tier) {
                    (Some(cur), Some(t)) if t < *cur => to_move.push((addr, p)),
                    _ => {
                        self.report.statuses.already_on_target += 1;
                        proc_row.already_on_target += 1;
                    }
                }
            } else {
                proc_row.failed += 1;
                self.shared.failures.fetch_add(1, Ordering::Relaxed);
                if self.report.statuses.fail(-s) {
                    self.retry_or_give_up(pid, addr, p, t1);
                }
            }
        }
        if to_move.is_empty() {
            return;
        }
        // 2. Move what is still below the target's tier.
        let addrs: Vec<u64> = to_move.iter().map(|(a, _)| *a).collect();
        let bytes: u64 = to_move
            .iter()
            .map(|(_, p)| u64::from(p.nr_pages) * PAGE)
            .sum();
        self.bucket.take(t1, bytes);
        let nodes = vec![target as i32; addrs.len()];
        let mut status = vec![i32::MIN; addrs.len()];
        let r = sys::move_pages(pid, &addrs, &nodes, &mut status);
        let t2 = self.env.now_ns();
        self.report.move_calls += 1;
        let dt = t2.saturating_sub(t1);
        self.report.move_ns += dt;
        self.sizer.observe(addrs.len(), dt + t1.saturating_sub(t0));
        if let Err(e) = r {
            self.whole_call_failed(pid, to_move, &e);
            return;
        }
        for ((addr, p), s) in to_move.into_iter().zip(status) {
            if s == target as i32 {
                self.report.statuses.moved += 1;
                let b = u64::from(p.nr_pages) * PAGE;
                self.report.moved_bytes += b;
                self.shared.moved_pages.fetch_add(1, Ordering::Relaxed);
                self.shared.moved_bytes.fetch_add(b, Ordering::Relaxed);
                self.report.per_process.entry(pid).or_default().moved += 1;
                if self.moved_len < MAX_VERIFY {
                    self.moved_len += 1;
                    self.moved.entry(pid).or_default().push((addr, target));
                } else {
                    self.report.verify.unchecked += 1;
                }
                continue;
            }
            self.report.per_process.entry(pid).or_default().failed += 1;
            self.shared.failures.fetch_add(1, Ordering::Relaxed);
            let retry = if s >= 0 || s == i32::MIN {
                self.report.statuses.not_migrated += 1;
                true
            } else {
                self.report.statuses.fail(-s)
            };
            if retry {
                self.retry_or_give_up(pid, addr, p, t2);
            }
        }
    }

    /// Stops: where are the moved pages now? Returns the report.
    pub fn finish(mut self) -> MoverReport {
        self.report.left_in_queue = self.queue.len() as u64;
        self.report.queue = self.queue.counts.clone();
        self.report.batch_pages = self.sizer.pages();
        self.report.ns_per_page = self.sizer.ns_per_page();
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

/// Runs `mover` on its own thread until `stop` (after the call in flight)
/// or until the channel closes and the queue is empty.
pub fn spawn<E: Env + Send + 'static>(
    mut mover: Mover<E>,
    rx: Receiver<Request>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<MoverReport>> {
    std::thread::Builder::new()
        .name("promote-mover".into())
        .spawn(move || {
            let started = mover.env.now_ns();
            mover.shared.started_ns.store(started, Ordering::Relaxed);
            let mut open = true;
            while !stop.load(Ordering::Acquire) {
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
    use crate::promote::sys::{fake, Syscall};

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
    }

    struct World {
        kernel: Rc<RefCell<Kernel>>,
        now: Rc<Cell<u64>>,
        free_kb: Rc<Cell<u64>>,
    }

    struct FakeEnv {
        now: Rc<Cell<u64>>,
        free_kb: Rc<Cell<u64>>,
    }

    impl Env for FakeEnv {
        fn now_ns(&self) -> u64 {
            self.now.get()
        }
        fn node_meminfo(&self, node: u32) -> Option<(u64, u64)> {
            let _ = node;
            Some((self.free_kb.get(), 1 << 20))
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
        assert_eq!(sizes[0], crate::promote::batch::INITIAL_PAGES);
        // 10 us per page in the fake: 20 ms = 2000 pages.
        assert!(sizes.iter().all(|&n| n <= 2000), "{sizes:?}");
        assert!(sizes.contains(&2000), "{sizes:?}");
        assert_eq!(r.statuses.moved, 20_000);
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
