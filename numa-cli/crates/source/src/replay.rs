//! Trace sources: a file read at full speed, or replayed in (scaled) real
//! time by its timestamps, once or looped.
use std::{path::Path, time::Duration};

use anyhow::Result;
use numa_core::{sink::Sink, trace};

use crate::{deliver, signals::Signals, StopReason};

/// Feeds a recorded trace to the sinks as fast as it reads; no signal
/// handling (Ctrl-C ends the process as usual). Returns the reader's
/// truncation warning and the damaged records skipped.
pub(crate) fn file(path: &Path, sinks: &mut [&mut dyn Sink]) -> Result<Option<String>> {
    let mut reader = trace::Reader::open(path)?;
    let mut bad = 0;
    for item in reader.by_ref() {
        match item {
            Ok(item) => deliver(sinks, &item)?,
            Err(e) => skip_damaged(e, &mut bad)?,
        }
    }
    Ok(warning(reader.warning.clone(), bad))
}

/// Replays a trace once (see [`replay_items`]); the damaged records
/// skipped and, at the end of the trace, the reader's truncation warning.
pub(crate) async fn once(
    path: &Path,
    speed: f64,
    deadline: Option<tokio::time::Instant>,
    sinks: &mut [&mut dyn Sink],
) -> Result<(StopReason, Option<String>)> {
    let mut reader = trace::Reader::open(path)?;
    let r = replay_items(reader.by_ref(), speed, None, deadline, sinks).await?;
    let truncated = match r.reason {
        StopReason::EndOfTrace => reader.warning.clone(),
        _ => None,
    };
    Ok((r.reason, warning(truncated, r.bad_records)))
}

/// Whether a trace reader's error is a damaged record (unknown tag, wrong
/// size, bad JSON), which the reader has already passed by the length in
/// its header, rather than a failing read.
pub fn is_damaged_record(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>().is_none()
}

/// Counts a damaged record in `bad`; a failing read ends the run.
fn skip_damaged(e: anyhow::Error, bad: &mut u64) -> Result<()> {
    if !is_damaged_record(&e) {
        return Err(e);
    }
    *bad += 1;
    Ok(())
}

/// The reader's warning and the damaged records skipped, as one warning.
pub fn warning(reader: Option<String>, bad_records: u64) -> Option<String> {
    let skipped = (bad_records > 0).then(|| {
        format!(
            "skipped {bad_records} damaged record{} (each could not be decoded)",
            if bad_records == 1 { "" } else { "s" }
        )
    });
    match (reader, skipped) {
        (Some(r), Some(s)) => Some(format!("{r}; {s}")),
        (r, s) => r.or(s),
    }
}

/// How a replay of trace items ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Replayed {
    pub reason: StopReason,
    /// Damaged records skipped.
    pub bad_records: u64,
}

/// How long a replay sleeps at least once it is ahead of the trace: the
/// records that fall due meanwhile are delivered as one batch. A display
/// refreshed every second (or a scrape) cannot see 20 ms of lateness; 50
/// wake-ups a second instead of one per record (or per millisecond) is
/// most of the replay source's cost saved.
pub const REPLAY_BATCH: Duration = Duration::from_millis(20);
/// Records delivered without giving the runtime a turn when the replay
/// never sleeps (`speed` 0, or a replay that cannot keep up).
const REPLAY_YIELD_EVERY: u32 = 16_384;

/// Batch pacing of a replay. Pure: the caller reads the clock (wall time
/// since the replay started) only when [`Pacer::due`] says a record is
/// beyond what the last reading allowed, so the clock is read about twice
/// per batch instead of once or twice per record.
#[derive(Debug, Clone)]
pub struct Pacer {
    /// Trace ns per wall ns (> 0).
    speed: f64,
    /// Trace time of the first record (the replay's origin).
    t0: Option<u64>,
    /// Records up to this many trace ns after `t0` are due as of the last
    /// clock reading.
    horizon: u64,
}

impl Pacer {
    /// `speed` > 0 (`speed` <= 0 replays as fast as possible and needs no
    /// pacer). `t0`: the trace time due at the start (None: the first
    /// record's).
    pub fn new(speed: f64, t0: Option<u64>) -> Self {
        Pacer {
            speed,
            t0,
            horizon: 0,
        }
    }

    fn offset(&mut self, ts: u64) -> u64 {
        ts.saturating_sub(*self.t0.get_or_insert(ts))
    }

    /// Whether a record at trace time `ts` is due as of the last clock
    /// reading (no clock read).
    pub fn due(&mut self, ts: u64) -> bool {
        self.offset(ts) <= self.horizon
    }

    /// Takes a clock reading (`elapsed` wall time since the replay
    /// started). Returns None when the record at `ts` is due now, else the
    /// wall time since the start to sleep until: the record's due time, but
    /// at least `batch` after `elapsed`.
    pub fn wake_at(&mut self, ts: u64, elapsed: Duration, batch: Duration) -> Option<Duration> {
        let off = self.offset(ts);
        // Float-to-int casts saturate: a huge speed or offset stays in range.
        self.horizon = (elapsed.as_nanos() as f64 * self.speed) as u64;
        if off <= self.horizon {
            return None;
        }
        let due = Duration::from_nanos((off as f64 / self.speed).ceil() as u64);
        Some(due.max(elapsed.saturating_add(batch)))
    }
}

/// Trace time of an item (None: the footer, which is not paced).
pub fn item_ts(item: &trace::Item) -> Option<u64> {
    match item {
        trace::Item::Event(ev) => Some(ev.ts_ns()),
        trace::Item::Snapshot(s) => Some(s.ts_ns),
        trace::Item::Footer(_) => None,
    }
}

/// Feeds trace items (read from a file, or kept in memory by a looping
/// replay) to the sinks in (scaled) real time: a record `dt` after the first
/// one is delivered about `dt / speed` after the start, in batches (see
/// [`REPLAY_BATCH`]); `speed` <= 0: as fast as possible. Stops at the end
/// of the items (`EndOfTrace`), on SIGINT/SIGTERM/SIGHUP while
/// waiting, or at `deadline`. `origin` = (wall time, trace time due then)
/// continues an earlier replay's clock (a looping replay's next pass);
/// None starts now with the first record.
pub(crate) async fn replay_items<T: std::borrow::Borrow<trace::Item>>(
    items: impl Iterator<Item = Result<T>>,
    speed: f64,
    origin: Option<(tokio::time::Instant, u64)>,
    deadline: Option<tokio::time::Instant>,
    sinks: &mut [&mut dyn Sink],
) -> Result<Replayed> {
    let mut signals = Signals::new()?;
    let start = origin.map_or_else(tokio::time::Instant::now, |o| o.0);
    let mut pacer = (speed > 0.0).then(|| Pacer::new(speed, origin.map(|o| o.1)));
    let mut since_yield = 0u32;
    let mut bad_records = 0;
    let done = |reason, bad_records| {
        Ok(Replayed {
            reason,
            bad_records,
        })
    };
    for item in items {
        let item = match item {
            Ok(item) => item,
            Err(e) => {
                skip_damaged(e, &mut bad_records)?;
                continue;
            }
        };
        let item = item.borrow();
        let Some(ts) = item_ts(item) else { continue };
        if let Some(p) = pacer.as_mut() {
            if !p.due(ts) {
                let now = tokio::time::Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    return done(StopReason::Duration, bad_records);
                }
                if let Some(at) = p.wake_at(ts, now.saturating_duration_since(start), REPLAY_BATCH)
                {
                    let wake = start + at;
                    let wake = deadline.map_or(wake, |d| wake.min(d));
                    tokio::select! {
                        _ = tokio::time::sleep_until(wake) => {}
                        s = signals.recv() => return done(StopReason::Signal(s), bad_records),
                    }
                    since_yield = 0;
                    let now = tokio::time::Instant::now();
                    if deadline.is_some_and(|d| now >= d) {
                        return done(StopReason::Duration, bad_records);
                    }
                    // Everything due by now goes out without reading the
                    // clock again.
                    let _ = p.wake_at(ts, now.saturating_duration_since(start), REPLAY_BATCH);
                }
            }
        }
        since_yield += 1;
        if since_yield >= REPLAY_YIELD_EVERY {
            // Never sleeping (as fast as possible, or behind): let the
            // runtime's other tasks run and check the deadline.
            since_yield = 0;
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return done(StopReason::Duration, bad_records);
            }
            tokio::task::yield_now().await;
        }
        deliver(sinks, item)?;
    }
    done(StopReason::EndOfTrace, bad_records)
}

#[cfg(test)]
mod tests {
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
        let v: Vec<Result<trace::Item>> = vec![
            Ok(scan_at(T0)),
            Err(anyhow::anyhow!("unknown record tag 9")),
            Ok(scan_at(T0 + MS)),
            Err(anyhow::anyhow!("record too short")),
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
        let v: Vec<Result<trace::Item>> = vec![
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
        let path =
            std::env::temp_dir().join(format!("numatrace-damaged-{}.trace", std::process::id()));
        std::fs::write(&path, &bytes).expect("write the trace");
        let mut c = Count(0, 0, Vec::new());
        let warning = file(&path, &mut [&mut c]);
        let _ = std::fs::remove_file(&path);
        let warning = warning.expect("the damaged record does not end the read");
        assert_eq!(c.0, 2, "the records around the damaged one");
        assert!(
            warning
                .as_deref()
                .is_some_and(|w| w.contains("skipped 1 damaged record")),
            "{warning:?}"
        );
    }
}
