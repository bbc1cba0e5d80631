//! A pid names a process only until it exits: pages are moved in the
//! process they were queued for, never in a later one with its pid, and a
//! later one is served on its own account.
use super::*;

/// `pid` exits and a new process gets its number, mapping the same
/// addresses on the slow node (the worst case: every move would succeed).
fn reuse(w: &World, pid: u32, pages: std::ops::Range<u64>) {
    {
        let mut k = w.kernel.borrow_mut();
        *k.generation.entry(pid).or_default() += 1;
    }
    slow_pages(w, pid, pages);
}

fn calls_in_generation(w: &World, pid: u32, gen: u64) -> usize {
    let k = w.kernel.borrow();
    k.calls.iter().filter(|c| **c == (pid, gen)).count()
}

#[test]
fn pages_of_a_pid_scope_are_never_moved_in_a_process_that_reused_the_pid() {
    let w = world(1 << 20);
    slow_pages(&w, 7, 0..10);
    let mut m = mover(&w, cfg(), &[7]);
    (0..10).for_each(|p| m.push(req(7, p)));
    reuse(&w, 7, 0..10);
    // And new faults of the new process, which is not the one in scope.
    w.now.set(w.now.get() + 1000);
    m.push(Request {
        ts_ns: w.now.get(),
        ..req(7, 20)
    });
    run(&mut m, &w.now, 100);
    assert_eq!(
        calls_in_generation(&w, 7, 1),
        0,
        "no call reached the new process"
    );
    assert!(m.scope_exited(), "the one process in scope has exited");
    let r = m.finish();
    fake::clear();
    assert_eq!(r.statuses.moved, 0);
    assert_eq!(r.processes_exited, 1);
    assert!(r.dropped_exited >= 10, "{}", r.dropped_exited);
    let k = w.kernel.borrow();
    assert!(k.pages.values().all(|n| *n == 1), "nothing moved");
}

#[test]
fn moved_pages_are_not_checked_in_a_process_that_reused_the_pid() {
    let w = world(1 << 20);
    slow_pages(&w, 7, 0..10);
    let mut m = mover(&w, cfg(), &[7]);
    (0..10).for_each(|p| m.push(req(7, p)));
    run(&mut m, &w.now, 100);
    reuse(&w, 7, 0..10);
    let r = m.finish();
    fake::clear();
    assert_eq!(r.statuses.moved, 10);
    assert_eq!(
        calls_in_generation(&w, 7, 1),
        0,
        "no query of the new process"
    );
    assert_eq!((r.verify.checked, r.verify.gone), (10, 10));
}

#[test]
fn all_serves_a_new_process_behind_a_pid_whose_process_exited() {
    let w = world(1 << 20);
    slow_pages(&w, 8, 0..10);
    let mut m = mover_in(&w, cfg(), Scope::All);
    (0..10).for_each(|p| m.push(req(8, p)));
    // 8 exits before its pages move; its number goes to a new process.
    w.kernel.borrow_mut().alive.retain(|p| *p != 8);
    run(&mut m, &w.now, 100);
    let exited_at = w.now.get();
    reuse(&w, 8, 100..110);
    // A request queued before the exit was seen is the old process's.
    m.push(req(8, 100));
    w.now.set(exited_at + 1000);
    (100..110).for_each(|p| {
        m.push(Request {
            ts_ns: w.now.get(),
            ..req(8, p)
        })
    });
    run(&mut m, &w.now, 100);
    let r = m.finish();
    fake::clear();
    assert_eq!(r.processes_exited, 1);
    assert_eq!(
        r.dropped_exited, 11,
        "the old process's 10 and its late one"
    );
    assert_eq!(r.per_process[&8].moved, 10, "the new process is served");
    assert!(!r.per_process[&8].exited);
    assert_eq!(
        calls_in_generation(&w, 8, 1),
        3,
        "query, move and the final check"
    );
}

#[test]
fn a_pid_scope_is_over_when_every_process_in_it_has_exited() {
    let w = world(1 << 20);
    slow_pages(&w, 7, 0..10);
    slow_pages(&w, 8, 0..10);
    let mut m = mover(&w, cfg(), &[7, 8]);
    assert!(!m.scope_exited());
    w.kernel.borrow_mut().alive.retain(|p| *p != 7);
    assert!(!m.scope_exited(), "8 is still running");
    // 8's pages are still moved.
    (0..10).for_each(|p| m.push(req(8, p)));
    run(&mut m, &w.now, 100);
    reuse(&w, 8, 0..10);
    assert!(m.scope_exited(), "8's pid now names another process");
    let r = m.finish();
    fake::clear();
    assert_eq!(r.per_process[&8].moved, 10);
    assert_eq!(r.processes_exited, 2);
    // --all and --cgroup take processes started later: never over.
    let w = world(1 << 20);
    let mut m = mover_in(&w, cfg(), Scope::All);
    assert!(!m.scope_exited());
}

/// Time, and one process whose liveness a test switches: for the
/// mover's own thread (no pages, so no move_pages call is ever made).
struct OneProcess {
    t0: std::time::Instant,
    alive: Arc<std::sync::atomic::AtomicBool>,
}

impl Env for OneProcess {
    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }
    fn node_meminfo(&self, _node: u32) -> Option<(u64, u64)> {
        None
    }
    fn process_has_no_memory(&self, _pid: u32) -> bool {
        false
    }
    fn pin(&self, pid: u32, _pidfd: bool) -> Option<crate::process::Pinned> {
        Some(crate::process::Pinned::with_start(pid, 1))
    }
    fn alive(&self, _p: &crate::process::Pinned) -> bool {
        self.alive.load(Ordering::Relaxed)
    }
}

#[test]
fn the_mover_thread_says_when_its_pid_scope_has_exited() {
    let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let shared = Arc::new(Shared::default());
    let env = OneProcess {
        t0: std::time::Instant::now(),
        alive: alive.clone(),
    };
    let m = Mover::new(cfg(), Scope::Pids([(7, 1)].into()), env, shared.clone());
    let (_tx, rx) = std::sync::mpsc::sync_channel(4);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let h = spawn(m, rx, stop.clone(), None).expect("thread");
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert!(!shared.scope_exited.load(Ordering::Acquire));
    alive.store(false, Ordering::Relaxed);
    let t0 = std::time::Instant::now();
    while !shared.scope_exited.load(Ordering::Acquire) {
        assert!(t0.elapsed().as_secs() < 5, "the exit was never reported");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    stop.store(true, Ordering::Release);
    let r = h.join().expect("the mover thread");
    assert_eq!(r.processes_exited, 1);
}

#[test]
fn processes_forgotten_under_all_keep_their_moved_pages_checked() {
    let w = world(1 << 30);
    slow_pages(&w, 1, 0..10);
    let mut m = mover_in(&w, cfg(), Scope::All);
    (0..10).for_each(|p| m.push(req(1, p)));
    run(&mut m, &w.now, 100);
    // Many more processes, whose pages are gone by the time they would
    // move: idle, they are forgotten to bound the table.
    for pid in 2..5002 {
        w.kernel.borrow_mut().alive.push(pid);
        m.push(req(pid, 0));
        if pid % 100 == 0 {
            run(&mut m, &w.now, 1000);
        }
    }
    assert!(m.procs.len() < 5001, "{} remembered", m.procs.len());
    let r = m.finish();
    fake::clear();
    assert_eq!(r.per_process[&1].moved, 10);
    assert_eq!(r.verify.on_target, 10, "{:?}", r.verify);
}

/// Processes that come, fault once and exit, three times as many as the
/// bound, under `--all`: the table never holds more than the bound, and a
/// process that comes after them all is still served.
#[test]
fn pid_churn_keeps_the_processes_remembered_bounded() {
    use super::super::procs::MAX_TRACKED;
    let w = world(1 << 30);
    let mut m = mover_in(&w, cfg(), Scope::All);
    let n = 3 * MAX_TRACKED as u32;
    let mut peak = 0;
    for pid in 2..2 + n {
        // Its page is gone by the time it would move: idle.
        w.kernel.borrow_mut().alive.push(pid);
        m.push(req(pid, 0));
        peak = peak.max(m.procs.len());
        if pid % 64 == 0 {
            run(&mut m, &w.now, 1000);
            w.kernel.borrow_mut().alive.clear();
        }
    }
    assert!(peak <= MAX_TRACKED, "{peak} remembered");
    let last = 2 + n;
    slow_pages(&w, last, 0..10);
    (0..10).for_each(|p| m.push(req(last, p)));
    run(&mut m, &w.now, 100);
    assert!(m.procs.len() <= MAX_TRACKED, "{} remembered", m.procs.len());
    let r = m.finish();
    fake::clear();
    assert_eq!(r.per_process[&last].moved, 10, "the newest is served");
}
