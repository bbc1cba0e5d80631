use numa_core::decode::{Event, Snapshot};

use super::*;

const MS: u64 = 1_000_000;
const T0: u64 = 5_000 * MS;
const BATCH: Duration = Duration::from_millis(10);

#[test]
fn pacer_first_record_is_due_at_once() {
    let mut p = Pacer::new(1.0, None);
    assert!(p.due(T0));
    assert!(p.due(T0), "same time again");
    assert!(!p.due(T0 + 1), "later records need a clock reading");
}

#[test]
fn pacer_sleeps_until_due_but_at_least_a_batch() {
    let mut p = Pacer::new(1.0, None);
    assert!(p.due(T0));
    assert_eq!(
        p.wake_at(T0 + 50 * MS, Duration::ZERO, BATCH),
        Some(Duration::from_millis(50))
    );
    // Due in 1 ms: sleep a whole batch, the records meanwhile go together.
    assert_eq!(
        p.wake_at(T0 + MS, Duration::ZERO, BATCH),
        Some(Duration::from_millis(10))
    );
    assert_eq!(
        p.wake_at(T0 + 31 * MS, Duration::from_millis(30), BATCH),
        Some(Duration::from_millis(40))
    );
}

#[test]
fn pacer_delivers_a_batch_per_clock_reading() {
    let mut p = Pacer::new(1.0, None);
    assert!(p.due(T0));
    // A reading 20 ms in: the record at 5 ms is due now...
    assert_eq!(
        p.wake_at(T0 + 5 * MS, Duration::from_millis(20), BATCH),
        None
    );
    // ...and so is everything up to 20 ms, without another reading.
    assert!(p.due(T0 + 15 * MS));
    assert!(p.due(T0 + 20 * MS));
    assert!(!p.due(T0 + 21 * MS));
    // Records out of order (earlier than the origin) are due.
    assert!(p.due(T0 - MS));
}

#[test]
fn pacer_scales_by_speed() {
    let mut p = Pacer::new(200.0, None);
    assert!(p.due(T0));
    // 10 ms of wall time is 2 s of trace at x200.
    assert_eq!(
        p.wake_at(T0 + 1_000 * MS, Duration::from_millis(10), BATCH),
        None
    );
    assert!(p.due(T0 + 2_000 * MS));
    assert!(!p.due(T0 + 2_001 * MS));
    // 4 s of trace is due 20 ms after the start.
    assert_eq!(
        p.wake_at(T0 + 4_000 * MS, Duration::from_millis(10), Duration::ZERO),
        Some(Duration::from_millis(20))
    );
    // Slower than real time.
    let mut p = Pacer::new(0.5, None);
    assert!(p.due(T0));
    assert_eq!(
        p.wake_at(T0 + 10 * MS, Duration::ZERO, Duration::ZERO),
        Some(Duration::from_millis(20))
    );
}

#[test]
fn pacer_with_an_origin_continues_an_earlier_clock() {
    // A loop's next pass: T0 was due 30 ms of wall time ago (x1)...
    let mut p = Pacer::new(1.0, Some(T0));
    assert!(p.due(T0), "the origin itself");
    assert!(!p.due(T0 + MS), "no reading yet");
    assert_eq!(
        p.wake_at(T0 + 25 * MS, Duration::from_millis(30), BATCH),
        None
    );
    assert!(p.due(T0 + 30 * MS));
    // ...and its first record is not due at once when it is later.
    let mut p = Pacer::new(1.0, Some(T0));
    assert!(!p.due(T0 + 50 * MS));
    assert_eq!(
        p.wake_at(T0 + 50 * MS, Duration::ZERO, BATCH),
        Some(Duration::from_millis(50))
    );
}

#[test]
fn pacer_extremes_saturate() {
    let mut p = Pacer::new(f64::MAX, None);
    assert!(p.due(0));
    assert_eq!(p.wake_at(u64::MAX, Duration::from_nanos(1), BATCH), None);
    let mut p = Pacer::new(1e-300, None);
    assert!(p.due(0));
    assert_eq!(
        p.wake_at(1, Duration::ZERO, BATCH),
        Some(Duration::from_nanos(u64::MAX))
    );
}

#[test]
fn pacer_shortens_a_long_gap_and_paces_on_after_it() {
    let mut p = Pacer::new(1.0, None);
    assert!(p.due(T0));
    // One record an hour later (a damaged timestamp): due after at most
    // MAX_GAP, not an hour.
    let hour = 3_600_000 * MS;
    assert_eq!(p.wake_at(T0 + hour, Duration::ZERO, BATCH), Some(MAX_GAP));
    // The records after it, back at their own times, are paced from
    // there on as recorded.
    assert_eq!(p.wake_at(T0 + MS, MAX_GAP, Duration::ZERO), None);
    assert_eq!(
        p.wake_at(T0 + 11 * MS, MAX_GAP, Duration::ZERO),
        Some(MAX_GAP + Duration::from_millis(10))
    );
    // A clock that jumps back far: the records go on from where the
    // replay is, 10 ms apart as recorded, not all at once.
    let late = T0 + 2 * hour;
    let mut p = Pacer::new(1.0, None);
    assert!(p.due(late));
    assert_eq!(p.wake_at(late - hour, Duration::ZERO, Duration::ZERO), None);
    assert_eq!(
        p.wake_at(late - hour + 10 * MS, Duration::ZERO, Duration::ZERO),
        Some(Duration::from_millis(10))
    );
    // Gaps up to MAX_GAP are kept.
    let mut p = Pacer::new(1.0, None);
    assert!(p.due(T0));
    let gap = MAX_GAP.as_nanos() as u64;
    assert_eq!(p.wake_at(T0 + gap, Duration::ZERO, BATCH), Some(MAX_GAP));
}

#[test]
fn an_outlier_timestamp_does_not_stall_a_paced_replay() {
    // A year-late timestamp amid 10 ms of trace, at x4.
    let mut v = items(10, MS);
    v.insert(
        3,
        trace::Item::Event(Event::Scan(numa_ebpf_common::ScanEvent {
            ts_ns: T0 + 365 * 86_400_000 * MS,
            ..Default::default()
        })),
    );
    let mut c = Count(0, 0, Vec::new());
    let t = std::time::Instant::now();
    let r = rt()
        .block_on(async {
            let d = tokio::time::Instant::now() + Duration::from_secs(10);
            replay_items(v.iter().map(Ok), 4.0, None, Some(d), &mut [&mut c]).await
        })
        .expect("replay");
    let took = t.elapsed();
    assert_eq!(r.reason, StopReason::EndOfTrace, "after {took:?}");
    assert_eq!(c.0, 11);
    assert_eq!(r.gaps_shortened, 1);
    // The gap counts as MAX_GAP of trace: half a second at x4.
    assert!(took >= MAX_GAP / 4 - BATCH, "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

struct Count(u64, u64, Vec<u64>);
impl Sink for Count {
    fn event(&mut self, ev: &Event) -> Result<()> {
        self.0 += 1;
        self.2.push(ev.ts_ns());
        Ok(())
    }
    fn snapshot(&mut self, _s: &Snapshot) -> Result<()> {
        self.1 += 1;
        Ok(())
    }
}

fn items(n: u64, step_ns: u64) -> Vec<trace::Item> {
    let mut v = vec![trace::Item::Snapshot(Snapshot {
        ts_ns: T0,
        ..Snapshot::default()
    })];
    v.extend((0..n).map(|i| {
        trace::Item::Event(Event::Scan(numa_ebpf_common::ScanEvent {
            ts_ns: T0 + i * step_ns,
            ..Default::default()
        }))
    }));
    v.push(trace::Item::Footer(trace::Footer::default()));
    v
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn replay_delivers_everything_in_order_as_fast_as_possible() {
    let v = items(40_000, 1_000);
    let mut c = Count(0, 0, Vec::new());
    let r = rt()
        .block_on(replay_items(
            v.iter().map(Ok),
            0.0,
            None,
            None,
            &mut [&mut c],
        ))
        .expect("replay");
    assert_eq!(r.reason, StopReason::EndOfTrace);
    assert_eq!((c.0, c.1), (40_000, 1));
    assert!(c.2.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn replay_paces_by_trace_time() {
    // 60 ms of trace at x2: about 30 ms of wall time, in a few batches.
    let v = items(601, 100_000);
    let mut c = Count(0, 0, Vec::new());
    let t = std::time::Instant::now();
    let r = rt()
        .block_on(replay_items(
            v.iter().map(Ok),
            2.0,
            None,
            None,
            &mut [&mut c],
        ))
        .expect("replay");
    let took = t.elapsed();
    assert_eq!(r.reason, StopReason::EndOfTrace);
    assert_eq!(c.0, 601);
    assert!(took >= Duration::from_millis(29), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn replay_stops_at_the_deadline() {
    // 100 s of trace at x1 with a 30 ms deadline.
    let v = items(1_000, 100 * MS);
    let mut c = Count(0, 0, Vec::new());
    let rt = rt();
    let r = rt
        .block_on(async {
            let d = tokio::time::Instant::now() + Duration::from_millis(30);
            replay_items(v.iter().map(Ok), 1.0, None, Some(d), &mut [&mut c]).await
        })
        .expect("replay");
    assert_eq!(r.reason, StopReason::Duration);
    assert!(c.0 >= 1 && c.0 < 10, "{}", c.0);
}

fn scan_at(ts_ns: u64) -> trace::Item {
    trace::Item::Event(Event::Scan(numa_ebpf_common::ScanEvent {
        ts_ns,
        ..Default::default()
    }))
}

#[test]
fn damaged_records_are_skipped_and_counted() {
    let v: Vec<Result<trace::Item, trace::RecordError>> = vec![
        Ok(scan_at(T0)),
        Err(trace::RecordError::UnknownTag(9)),
        Ok(scan_at(T0 + MS)),
        Err(numa_core::decode::DecodeError::Short(3).into()),
        Ok(scan_at(T0 + 2 * MS)),
    ];
    let mut c = Count(0, 0, Vec::new());
    let r = rt()
        .block_on(replay_items(v.into_iter(), 1.0, None, None, &mut [&mut c]))
        .expect("a damaged record does not end the replay");
    assert_eq!((r.reason, r.bad_records), (StopReason::EndOfTrace, 2));
    assert_eq!(c.2, [T0, T0 + MS, T0 + 2 * MS]);
}

#[test]
fn a_failing_read_ends_the_replay() {
    let v: Vec<Result<trace::Item, trace::RecordError>> = vec![
        Ok(scan_at(T0)),
        Err(std::io::Error::other("disk gone").into()),
        Ok(scan_at(T0 + MS)),
    ];
    let mut c = Count(0, 0, Vec::new());
    let r = rt().block_on(replay_items(v.into_iter(), 0.0, None, None, &mut [&mut c]));
    assert!(r.is_err_and(|e| e.to_string().contains("disk gone")));
}

#[test]
fn a_damaged_record_in_a_file_is_skipped_with_a_warning() {
    use numa_core::decode::{fixtures::fault, raw_bytes};
    let events: Vec<Event> = (1..=3)
        .map(|i| Event::Fault(fault(i, i, 5, numa_ebpf_common::Outcome::PromoteHot)))
        .collect();
    let mut w = trace::Writer::new(Vec::new(), &trace::fixtures::header()).expect("writer");
    for ev in &events {
        w.event(ev).expect("event");
    }
    let mut bytes = w.finish(T0, "duration").expect("finish");
    // The middle record's tag (before its u32 length) becomes unknown.
    let payload = raw_bytes(&events[1]);
    let at = bytes
        .windows(payload.len())
        .position(|x| x == payload)
        .expect("the record's payload");
    bytes[at - 5] = 9;
    let path = std::env::temp_dir().join(format!("numatrace-damaged-{}.trace", std::process::id()));
    std::fs::write(&path, &bytes).expect("write the trace");
    let mut c = Count(0, 0, Vec::new());
    let mut read = Vec::new();
    let warning = file(&path, &mut [&mut c], &mut |at| read.push(at));
    let _ = std::fs::remove_file(&path);
    // Three records are fewer than a progress step: told once, at the end.
    assert_eq!(read, [bytes.len() as u64], "the whole file read");
    let warning = warning.expect("the damaged record does not end the read");
    assert_eq!(c.0, 2, "the records around the damaged one");
    assert!(
        warning
            .as_deref()
            .is_some_and(|w| w.contains("skipped 1 damaged record")),
        "{warning:?}"
    );
}
