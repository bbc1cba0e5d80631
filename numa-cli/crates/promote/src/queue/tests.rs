use super::*;

fn req(pid: u32, page: u64, target: u32) -> Request {
    Request {
        pid,
        addr: page * 4096,
        src_node: 1,
        target,
        nr_pages: 1,
        ts_ns: 0,
    }
}

fn pages(b: &[(u64, Pending)]) -> Vec<u64> {
    b.iter().map(|(a, _)| a / 4096).collect()
}

#[test]
fn duplicates_coalesce_per_process() {
    let mut q = Queue::new(16);
    assert_eq!(q.push(&req(1, 5, 0)), Pushed::New);
    assert_eq!(q.push(&req(1, 5, 2)), Pushed::Coalesced);
    assert_eq!(q.push(&req(2, 5, 0)), Pushed::New);
    assert_eq!(q.len(), 2);
    assert_eq!(
        q.counts,
        QueueCounts {
            queued: 2,
            coalesced: 1,
            dropped_full: 0,
        }
    );
}

#[test]
fn batches_are_per_target_per_process_in_address_order() {
    let mut q = Queue::new(16);
    for p in [9, 3, 7] {
        q.push(&req(1, p, 0));
    }
    q.push(&req(1, 5, 2));
    q.push(&req(2, 1, 0));
    let mut t = Vec::new();
    q.ready_targets(&mut t);
    assert_eq!(t, vec![0, 2]);
    assert_eq!(q.front(0), Some((1, 1)));
    let (pid, b) = q.take_batch(0, 2);
    assert_eq!((pid, pages(&b)), (1, vec![3, 7]));
    // Process 2's turn at node 0 now, then 1's again.
    let (pid, b) = q.take_batch(0, 10);
    assert_eq!((pid, pages(&b)), (2, vec![1]));
    let (pid, b) = q.take_batch(0, 10);
    assert_eq!((pid, pages(&b)), (1, vec![9]));
    // Page 5 wants node 2: never in a node-0 batch.
    let (pid, b) = q.take_batch(2, 10);
    assert_eq!((pid, pages(&b), b[0].1.target), (1, vec![5], 2));
    assert!(q.is_empty());
    assert_eq!(q.front(0), None);
}

#[test]
fn budget_counts_base_pages_of_huge_folios() {
    let mut q = Queue::new(16);
    let mut thp = req(1, 512, 0);
    thp.nr_pages = 512;
    q.push(&req(1, 1, 0));
    q.push(&thp);
    assert_eq!(q.take_batch(0, 100).1.len(), 1);
    assert_eq!(q.front(0), Some((1, 512)));
    assert_eq!(q.take_batch(0, 100).1.len(), 0, "a THP over budget waits");
    assert_eq!(q.front(0), Some((1, 512)), "and keeps its turn");
    assert_eq!(q.take_batch(0, 512).1.len(), 1);
}

#[test]
fn retries_wait_until_due_and_exits_drop_all() {
    let mut q = Queue::new(16);
    q.push(&req(1, 1, 0));
    let (_, b) = q.take_batch(0, 10);
    let mut p = b[0].1;
    p.tries += 1;
    p.due_ns = 100;
    q.retry(1, b[0].0, p);
    assert_eq!(q.len(), 1);
    assert_eq!(q.next_due(), Some(100));
    // A request for a page backing off is coalesced into it.
    assert_eq!(q.push(&req(1, 1, 0)), Pushed::Coalesced);
    q.release_due(50);
    assert_eq!(q.front(0), None);
    q.release_due(100);
    assert_eq!(q.front(0), Some((1, 1)));
    assert_eq!(q.next_due(), None);
    q.push(&req(1, 2, 0));
    let (_, b) = q.take_batch(0, 1);
    q.retry(
        1,
        b[0].0,
        Pending {
            due_ns: 200,
            ..b[0].1
        },
    );
    assert!(q.has_process(1));
    assert_eq!(q.drop_process(1), 2);
    assert!(q.is_empty() && !q.has_process(1));
    // The dropped page's backoff entry is stale: nothing comes back.
    q.release_due(1000);
    assert!(q.is_empty());
    assert_eq!(q.front(0), None);
}

#[test]
fn a_full_queue_takes_from_the_fullest_target_for_another() {
    let mut q = Queue::new(3);
    for p in 0..3 {
        assert_eq!(q.push(&req(1, p, 0)), Pushed::New);
    }
    // Full: node 0's own requests are dropped...
    assert_eq!(q.push(&req(2, 9, 0)), Pushed::Dropped);
    // ...one for node 2 takes the place of node 0's last page.
    assert_eq!(q.push(&req(2, 9, 2)), Pushed::New);
    assert_eq!(q.len(), 3);
    assert_eq!(q.counts.dropped_full, 2);
    assert_eq!(pages(&q.take_batch(0, 10).1), vec![0, 1]);
    // Pages backing off are not taken for room.
    let mut q = Queue::new(1);
    q.push(&req(1, 0, 0));
    let (_, b) = q.take_batch(0, 1);
    q.retry(
        1,
        b[0].0,
        Pending {
            due_ns: 9,
            ..b[0].1
        },
    );
    assert_eq!(q.push(&req(1, 1, 2)), Pushed::Dropped);
}
