use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
    io,
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
    /// Every call for these processes fails with EINVAL.
    einval_pids: Vec<u32>,
    /// The process behind each pid: bumped when the pid is reused.
    generation: HashMap<u32, u64>,
    /// Every call: (pid, the generation of its process then).
    calls: Vec<(u32, u64)>,
}

struct World {
    kernel: Rc<RefCell<Kernel>>,
    now: Rc<Cell<u64>>,
    /// Node 0's MemFree, KiB.
    free_kb: Rc<Cell<u64>>,
    /// Other nodes' MemFree, KiB (default: plenty).
    free_other: Rc<RefCell<HashMap<u32, u64>>>,
}

struct FakeEnv {
    now: Rc<Cell<u64>>,
    free_kb: Rc<Cell<u64>>,
    free_other: Rc<RefCell<HashMap<u32, u64>>>,
    kernel: Rc<RefCell<Kernel>>,
}

/// Free memory of nodes other than 0 unless a test sets it, KiB.
const PLENTY_KB: u64 = 1 << 30;

impl Env for FakeEnv {
    fn now_ns(&self) -> u64 {
        self.now.get()
    }
    fn node_meminfo(&self, node: u32) -> Option<(u64, u64)> {
        if node == 0 {
            return Some((self.free_kb.get(), 1 << 20));
        }
        let free = self
            .free_other
            .borrow()
            .get(&node)
            .copied()
            .unwrap_or(PLENTY_KB);
        Some((free, free.max(1 << 20)))
    }
    fn process_has_no_memory(&self, pid: u32) -> bool {
        let k = self.kernel.borrow();
        k.exiting.contains(&pid) || k.unmapping.contains(&pid)
    }
    fn pin(&self, pid: u32, _pidfd: bool) -> Option<crate::process::Pinned> {
        let k = self.kernel.borrow();
        k.alive
            .contains(&pid)
            .then(|| crate::process::Pinned::with_start(pid, k.gen(pid)))
    }
    fn alive(&self, p: &crate::process::Pinned) -> bool {
        let k = self.kernel.borrow();
        k.alive.contains(&p.pid) && k.gen(p.pid) == p.start_ticks
    }
}

impl Kernel {
    fn gen(&self, pid: u32) -> u64 {
        self.generation.get(&pid).copied().unwrap_or(0)
    }
}

fn cfg() -> MoverConfig {
    MoverConfig {
        rate_bytes_per_s: 0,
        min_free: MinFree::Bytes(100 << 20),
        batch_ms: 20.0,
        max_retries: 2,
        retry_backoff_ms: 10,
        max_queued_pages: 1 << 20,
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
    let free_other = Rc::new(RefCell::new(HashMap::new()));
    let (k, n, f, fo) = (
        kernel.clone(),
        now.clone(),
        free.clone(),
        free_other.clone(),
    );
    fake::set(move |call| {
        let Syscall::MovePages {
            pid,
            pages,
            nodes,
            status,
            ..
        } = call;
        let mut k = k.borrow_mut();
        let g = k.gen(*pid);
        k.calls.push((*pid, g));
        if !k.alive.contains(pid) {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        if k.exiting.contains(pid) || k.einval || k.einval_pids.contains(pid) {
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
            if nodes[i] == 0 {
                f.set(f.get() - 4);
            } else {
                *fo.borrow_mut().entry(nodes[i] as u32).or_insert(PLENTY_KB) -= 4;
            }
            *s = nodes[i];
        }
        Ok(0)
    });
    World {
        kernel,
        now,
        free_kb: free,
        free_other,
    }
}

/// A mover for the processes `scope` names now.
fn mover(w: &World, cfg: MoverConfig, scope: &[u32]) -> Mover<FakeEnv> {
    let pinned = scope
        .iter()
        .map(|p| (*p, w.kernel.borrow().gen(*p)))
        .collect();
    mover_in(w, cfg, Scope::Pids(pinned))
}

fn mover_in(w: &World, cfg: MoverConfig, scope: Scope) -> Mover<FakeEnv> {
    Mover::new(
        cfg,
        scope,
        FakeEnv {
            now: w.now.clone(),
            free_kb: w.free_kb.clone(),
            free_other: w.free_other.clone(),
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

/// Process 7's pages 0..4 moved from the slow node to node 0, the only
/// top-tier node (so no location query).
fn four_pages_moved_unqueried(w: &World) -> Mover<FakeEnv> {
    slow_pages(w, 7, 0..4);
    let mut c = cfg();
    c.tier_of = [(0, 4), (1, 22)].into_iter().collect();
    let mut m = mover(w, c, &[7]);
    (0..4).for_each(|p| m.push(req(7, p)));
    run(&mut m, &w.now, 100);
    m
}

/// A request whose fault came before its page was moved but that reached
/// the queue after the move: without a query the move reports the page on
/// node 0, and it must not be counted as moved twice.
#[test]
fn a_late_duplicate_of_a_moved_page_is_not_moved_twice() {
    let w = world(1 << 20);
    let mut m = four_pages_moved_unqueried(&w);
    (0..2).for_each(|p| m.push(req(7, p)));
    run(&mut m, &w.now, 100);
    let r = m.finish();
    fake::clear();
    assert_eq!(r.query_calls, 0);
    assert_eq!(r.statuses.moved, 4);
    assert_eq!(r.statuses.already_on_target, 2);
    assert_eq!(r.per_process[&7].moved, 4);
    assert_eq!(r.per_process[&7].already_on_target, 2);
    assert_eq!((r.verify.checked, r.verify.on_target), (4, 4));
    assert_eq!(r.moved_bytes, 4 * PAGE);
}

/// A page this run moved that went down again (demoted) and faulted
/// there: the next request is a move of its own, not a late duplicate.
#[test]
fn a_page_moved_again_after_a_demotion_counts_twice() {
    let w = world(1 << 20);
    let mut m = four_pages_moved_unqueried(&w);
    slow_pages(&w, 7, 0..2);
    let after = w.now.get() + 1;
    (0..2).for_each(|p| {
        m.push(Request {
            ts_ns: after,
            ..req(7, p)
        })
    });
    run(&mut m, &w.now, 100);
    let r = m.finish();
    fake::clear();
    assert_eq!(r.statuses.moved, 6);
    assert_eq!(r.statuses.already_on_target, 0);
    assert_eq!(r.per_process[&7].moved, 6);
    assert_eq!((r.verify.checked, r.verify.on_target), (4, 4));
    assert_eq!(r.moved_bytes, 6 * PAGE);
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
    assert_eq!(r.dropped_exited, 11, "its 10 pages and the late request");
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
    assert!(super::exit::stat_says_exiting(&line(0x404044)));
    assert!(!super::exit::stat_says_exiting(&line(0x400040)));
    assert!(!super::exit::stat_says_exiting("garbage"));
    assert!(super::exit::all_gone(&[-libc::EFAULT, -libc::ENOENT]));
    assert!(!super::exit::all_gone(&[-libc::EFAULT, 0]));
    assert!(!super::exit::all_gone(&[]));
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

/// A request for a 2 MiB THP at 2 MiB-aligned `index`.
fn req_thp(pid: u32, index: u64) -> Request {
    Request {
        nr_pages: 512,
        ..req(pid, index * 512)
    }
}

/// Registers THPs `0..n` of `pid` on the slow node (by their address).
fn slow_thps(w: &World, pid: u32, n: u64) {
    for i in 0..n {
        slow_pages(w, pid, i * 512..i * 512 + 1);
    }
}

/// move_pages moves a THP whole under one status: one folio, 512 pages.
/// The report and the live counters keep the two apart.
#[test]
fn moves_count_folios_and_their_pages() {
    let w = world(1 << 30);
    slow_thps(&w, 7, 8);
    slow_pages(&w, 8, 0..8);
    let mut m = mover(&w, cfg(), &[7, 8]);
    (0..8).for_each(|i| m.push(req_thp(7, i)));
    (0..8).for_each(|p| m.push(req(8, p)));
    run(&mut m, &w.now, 100);
    let live = PromoterStats::read(&m.shared, 0);
    let mut state = numa_host::promoter_state::PromoterState::default();
    m.fill_state(&mut state);
    let r = m.finish();
    fake::clear();
    assert_eq!(r.statuses.moved, 16, "folios");
    assert_eq!(r.moved_pages, 8 * 512 + 8);
    assert_eq!(r.moved_bytes, r.moved_pages * PAGE);
    let of = |pid| (r.per_process[&pid].moved, r.per_process[&pid].moved_pages);
    assert_eq!((of(7), of(8)), ((8, 4096), (8, 8)));
    assert_eq!(live.moved_pages, 8 * 512 + 8, "live displays count pages");
    assert_eq!(state.moved_pages, 8 * 512 + 8, "the state file too");
}

/// Batches are sized in base pages, the unit they are taken in: THPs
/// that move fast go several to a call, not one each.
#[test]
fn batches_of_thps_are_sized_by_their_pages() {
    let w = world(1 << 30);
    slow_thps(&w, 7, 64);
    let mut m = mover(&w, cfg(), &[7]);
    (0..64).for_each(|i| m.push(req_thp(7, i)));
    run(&mut m, &w.now, 1000);
    let r = m.finish();
    let sizes: Vec<usize> = w.kernel.borrow().moves.iter().map(|(_, n)| *n).collect();
    fake::clear();
    assert_eq!(r.moved_pages, 64 * 512);
    // 10 us a THP in the fake: the budget soon holds many.
    assert!(sizes.len() <= 8, "{sizes:?}");
    assert!(r.batch_pages >= 4 * 512, "{}", r.batch_pages);
}

#[test]
fn a_dry_run_counts_folios_and_their_pages() {
    let w = world(1 << 30);
    slow_thps(&w, 7, 3);
    let mut c = cfg();
    c.dry_run = true;
    let mut m = mover(&w, c, &[7]);
    (0..3).for_each(|i| m.push(req_thp(7, i)));
    (0..2).for_each(|p| m.push(req(7, 10_000 + p)));
    m.push(req_thp(7, 0));
    let r = m.finish();
    fake::clear();
    assert_eq!((r.would_move_folios, r.would_move_pages), (5, 3 * 512 + 2));
    assert_eq!(r.would_move_bytes, (3 * 512 + 2) * PAGE);
    assert_eq!(r.would_move_by_target[&0], 3 * 512 + 2, "pages per node");
    let p = &r.per_process[&7];
    assert_eq!((p.would_move, p.would_move_pages), (5, 1538));
    assert_eq!(r.queue.coalesced, 1);
}

mod fairness;
mod identity;
