//! What one target or process cannot do must not hold back the others, the
//! queue stays bounded, and a step's cost follows its batch, not the queue.
use std::time::Duration;

use super::*;

fn req_to(pid: u32, page: u64, target: u32) -> Request {
    Request {
        target,
        ..req(pid, page)
    }
}

/// Node 0 at its floor exactly (100 MiB + the 500 KiB drift margin).
const AT_FLOOR_KB: u64 = (100 << 10) + 500;

#[test]
fn a_target_at_its_floor_does_not_block_another() {
    let w = world(AT_FLOOR_KB);
    slow_pages(&w, 7, 0..100);
    slow_pages(&w, 7, 200..300);
    slow_pages(&w, 8, 0..100);
    let mut m = mover(&w, cfg(), &[7, 8]);
    // Process 7's first pages (in address order) go to the full node 0,
    // its later ones and all of 8's to node 2, which has room.
    (0..100).for_each(|p| m.push(req_to(7, p, 0)));
    (200..300).for_each(|p| m.push(req_to(7, p, 2)));
    (0..100).for_each(|p| m.push(req_to(8, p, 2)));
    run(&mut m, &w.now, 200);
    let r = m.finish();
    fake::clear();
    assert_eq!(r.statuses.moved, 200, "every page for node 2 moved");
    assert_eq!(r.per_process[&8].moved, 100);
    assert_eq!(r.per_process[&7].moved, 100);
    assert!(r.floor_waits > 0);
    assert_eq!(r.left_in_queue, 100, "node 0's pages wait");
    let k = w.kernel.borrow();
    assert!(k.pages.iter().all(|((pid, a), n)| {
        let to_node0 = *pid == 7 && *a < 100 * PAGE;
        *n == if to_node0 { 1 } else { 2 }
    }));
}

#[test]
fn a_process_whose_calls_fail_does_not_block_another() {
    let w = world(1 << 20);
    slow_pages(&w, 7, 0..1000);
    slow_pages(&w, 8, 0..10);
    w.kernel.borrow_mut().einval_pids.push(7);
    let mut c = cfg();
    c.max_retries = 1000;
    let mut m = mover(&w, c, &[7, 8]);
    (0..1000).for_each(|p| m.push(req(7, p)));
    (0..10).for_each(|p| m.push(req(8, p)));
    // A few steps, not until 7 gives up: 8 is served meanwhile.
    run(&mut m, &w.now, 20);
    let r = m.finish();
    fake::clear();
    assert_eq!(r.per_process[&8].moved, 10);
    assert_eq!(r.per_process[&7].moved, 0);
}

#[test]
fn the_queue_is_bounded_and_what_it_drops_is_counted() {
    let w = world(AT_FLOOR_KB);
    slow_pages(&w, 7, 0..5000);
    slow_pages(&w, 8, 0..10);
    let mut c = cfg();
    c.max_queued_pages = 1000;
    let mut m = mover(&w, c.clone(), &[7, 8]);
    (0..5000).for_each(|p| m.push(req(7, p)));
    run(&mut m, &w.now, 20);
    assert_eq!(m.shared.pending.load(Ordering::Relaxed), 1000);
    // A full queue still takes a page for a target that can move: a page
    // waiting for the blocked one makes room.
    (0..10).for_each(|p| m.push(req_to(8, p, 2)));
    run(&mut m, &w.now, 20);
    let live = PromoterStats::read(&m.shared, 0);
    let r = m.finish();
    assert_eq!(
        r.per_process[&8].moved, 10,
        "node 2's pages got in and moved"
    );
    assert_eq!(r.left_in_queue, 990);
    assert_eq!(r.queue.dropped_full, 4010, "4000 refused, 10 made room");
    assert_eq!(live.queue_overflows, 4010, "live displays count them too");
    // A dry run remembers at most as many pages, and says so.
    c.dry_run = true;
    let mut m = mover(&w, c, &[7]);
    (0..5000).for_each(|p| m.push(req(7, p)));
    (0..5000).for_each(|p| m.push(req(7, p)));
    let r = m.finish();
    fake::clear();
    assert_eq!(r.would_move_pages, 1000);
    assert_eq!(r.queue.dropped_full, 8000);
}

/// CPU time of this thread: unlike wall time, not stretched by other work
/// on a busy machine.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time for `steps` single-page moves of process 8 while process 7 has
/// `waiting` pages backing off for a retry.
fn stream_beside_backlog(waiting: u64, steps: u64) -> Duration {
    let w = world(1 << 30);
    slow_pages(&w, 7, 0..waiting);
    slow_pages(&w, 8, 0..steps);
    {
        let mut k = w.kernel.borrow_mut();
        (0..waiting).for_each(|p| {
            k.errors.insert((7, p * PAGE), libc::EBUSY);
        });
    }
    let mut c = cfg();
    c.max_retries = 100;
    c.retry_backoff_ms = 1_000_000;
    let mut m = mover(&w, c, &[7, 8]);
    (0..waiting).for_each(|p| m.push(req(7, p)));
    // Every page of 7 tried once: all wait for a retry long after this test.
    for _ in 0..10_000 {
        match m.step() {
            Step::Worked => {}
            Step::Wait(_) => break,
            Step::Idle => panic!("process 7's pages are not waiting for a retry"),
        }
    }
    let t0 = thread_cpu_time();
    for p in 0..steps {
        m.push(req(8, p));
        assert_eq!(m.step(), Step::Worked);
    }
    let spent = thread_cpu_time().saturating_sub(t0);
    let r = m.finish();
    fake::clear();
    assert_eq!(r.per_process[&8].moved, steps);
    spent
}

#[test]
fn a_step_costs_its_batch_not_the_queue() {
    // Best of three, interleaved, against what other work on the machine
    // does to caches.
    let (mut small, mut large) = (Duration::MAX, Duration::MAX);
    for _ in 0..3 {
        small = small.min(stream_beside_backlog(500, 300));
        large = large.min(stream_beside_backlog(16_000, 300));
    }
    // 32x the queue: a step that scanned it would take ~32x as long.
    assert!(
        large < small * 4,
        "{large:?} with 16000 pages waiting vs {small:?} with 500 (CPU time)"
    );
}

#[test]
fn a_huge_folio_larger_than_the_rate_burst_still_moves() {
    let w = world(1 << 30);
    slow_pages(&w, 7, 0..1);
    slow_pages(&w, 8, 0..512);
    let mut c = cfg();
    // 4 MiB/s: a burst of 409 KiB, a fifth of one 2 MiB folio.
    c.rate_bytes_per_s = 4 << 20;
    let mut m = mover(&w, c, &[7, 8]);
    m.push(Request {
        nr_pages: 512,
        ..req(7, 0)
    });
    (0..512).for_each(|p| m.push(req(8, p)));
    let t0 = w.now.get();
    run(&mut m, &w.now, 10_000);
    let secs = (w.now.get() - t0) as f64 / 1e9;
    let r = m.finish();
    fake::clear();
    assert_eq!(r.per_process[&7].moved, 1, "the 2 MiB folio moved");
    assert_eq!(r.per_process[&8].moved, 512);
    // 4 MiB at 4 MiB/s, less the first burst.
    assert!((0.85..1.2).contains(&secs), "{secs} s");
}
