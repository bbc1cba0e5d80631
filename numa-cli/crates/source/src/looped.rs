//! A looped replay: the trace over and over, each pass shifted in time to
//! start 1 ms after the previous one's last record, so time moves on for
//! every sink as if the trace were one long recording.
use std::{path::Path, time::Duration};

use anyhow::Result;
use numa_core::{
    decode::{Event, Snapshot},
    sink::Sink,
    trace,
};

use crate::{
    dispatch, dispatch_snapshot,
    replay::{self, item_ts, replay_items},
    StopReason,
};

/// Records of a looped replay kept in memory for the passes after the
/// first (about 160 bytes each: 64 MiB at most); a longer trace is re-read
/// from the file on every pass.
pub const LOOP_CACHE_ITEMS: usize = 400_000;

/// Forwards to the sinks with time shifted by `offset`.
struct Shifted<'a, 'b> {
    sinks: &'a mut [&'b mut dyn Sink],
    offset: u64,
    last_ts: u64,
}

impl Sink for Shifted<'_, '_> {
    fn header(&mut self, h: &numa_core::trace::Header) -> Result<()> {
        self.sinks.iter_mut().try_for_each(|s| s.header(h))
    }
    fn event(&mut self, ev: &Event) -> Result<()> {
        let mut ev = *ev;
        if self.offset > 0 {
            match &mut ev {
                Event::Fault(f) => {
                    f.ts_ns += self.offset;
                    if f.scan_ns > 0 {
                        f.scan_ns += self.offset;
                    }
                }
                Event::Scan(s) => s.ts_ns += self.offset,
                Event::Skip(s) => s.ts_ns += self.offset,
                Event::Demote(d) => d.ts_ns += self.offset,
                Event::Damon(d) => d.ts_ns += self.offset,
            }
        }
        self.last_ts = self.last_ts.max(ev.ts_ns());
        dispatch(self.sinks, &ev)
    }

    fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
        if self.offset == 0 {
            self.last_ts = self.last_ts.max(s.ts_ns);
            dispatch_snapshot(self.sinks, s)
        } else {
            // Counters restart with every loop: only the first pass's
            // snapshots describe the kernel; later ones only move time.
            self.last_ts = self.last_ts.max(s.ts_ns + self.offset);
            Ok(())
        }
    }
}

/// Replays `path` over and over until `deadline` or a signal. The file is
/// read once: later passes replay the first pass's records from memory
/// when there are at most `cache_max` of them, else re-read it. Returns
/// why it stopped and a warning of the damaged records skipped.
pub(crate) async fn run(
    path: &Path,
    speed: f64,
    deadline: Option<tokio::time::Instant>,
    cache_max: usize,
    sinks: &mut [&mut dyn Sink],
) -> Result<(StopReason, Option<String>)> {
    // One clock for all passes: pass k is due from start + paced_k / speed,
    // where paced_k is the paced trace time of the passes before it (their
    // gaps longer than MAX_GAP shortened, as the pacer waited them out), so
    // the batches' lateness does not add up from pass to pass.
    let t0 = first_ts(path)?;
    let start = tokio::time::Instant::now();
    let origin_at = |offset: u64| pass_origin(start, t0?, offset, speed);
    let mut sink = Shifted {
        sinks,
        offset: 0,
        last_ts: 0,
    };
    let mut reader = trace::Reader::open(path)?;
    let mut cache: Option<Vec<trace::Item>> = Some(Vec::new());
    let items = reader.by_ref().inspect(|item| {
        if cache.as_ref().is_some_and(|c| c.len() >= cache_max) {
            cache = None;
        }
        if let (Ok(it), Some(c)) = (item, cache.as_mut()) {
            c.push(it.clone());
        }
    });
    let first = replay_items(items, speed, origin_at(0), deadline, &mut [&mut sink]).await?;
    // Damaged records and long gaps recur on every pass; the first counts.
    let warning = first.warning(None);
    let mut reason = first.reason;
    let mut paced = first.paced_ns;
    let Some(t0) = t0 else {
        // Nothing to loop over.
        return Ok((reason, warning));
    };
    while reason == StopReason::EndOfTrace {
        sink.offset = (sink.last_ts + 1_000_000).saturating_sub(t0);
        paced = paced.saturating_add(1_000_000);
        let origin = origin_at(paced);
        let pass = match &cache {
            Some(c) => {
                replay_items(c.iter().map(Ok), speed, origin, deadline, &mut [&mut sink]).await?
            }
            None => {
                let mut r = trace::Reader::open(path)?;
                replay_items(r.by_ref(), speed, origin, deadline, &mut [&mut sink]).await?
            }
        };
        reason = pass.reason;
        paced = paced.saturating_add(pass.paced_ns);
    }
    Ok((reason, warning))
}

/// When a looped pass shifted by `offset` ns starts: (wall time, trace time
/// due then), None when unpaced (`speed` 0) or out of range.
fn pass_origin(
    start: tokio::time::Instant,
    t0: u64,
    offset: u64,
    speed: f64,
) -> Option<(tokio::time::Instant, u64)> {
    if speed <= 0.0 {
        return None;
    }
    let d = Duration::try_from_secs_f64(offset as f64 / 1e9 / speed).ok()?;
    Some((start.checked_add(d)?, t0))
}

/// Timestamp of the first record of a trace (the replay's time origin;
/// damaged records are passed over, as the replay skips them).
fn first_ts(path: &Path) -> Result<Option<u64>> {
    let mut r = trace::Reader::open(path)?;
    for item in r.by_ref() {
        match item {
            Ok(item) => {
                if let Some(ts) = item_ts(&item) {
                    return Ok(Some(ts));
                }
            }
            Err(e) if !replay::is_damaged_record(&e) => return Err(e.into()),
            Err(_) => {}
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/testdata/hot-chunks-6.12.trace"
    );

    /// Counts events as `top`'s aggregator does (none before the first
    /// snapshot) and the span from the first snapshot to the latest time.
    #[derive(Default)]
    struct Span {
        first_snapshot_ns: Option<u64>,
        first_ns: Option<u64>,
        now_ns: u64,
        events: u64,
    }

    impl Sink for Span {
        fn event(&mut self, ev: &Event) -> Result<()> {
            let ts = ev.ts_ns();
            if self.first_snapshot_ns.is_some_and(|s| ts < s) {
                return Ok(());
            }
            self.events += 1;
            self.first_ns.get_or_insert(ts);
            self.now_ns = self.now_ns.max(ts);
            Ok(())
        }
        fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
            if self.first_snapshot_ns.is_none() {
                self.first_snapshot_ns = Some(s.ts_ns);
                self.first_ns.get_or_insert(s.ts_ns);
            }
            self.now_ns = self.now_ns.max(s.ts_ns);
            Ok(())
        }
    }

    impl Span {
        fn span_s(&self) -> f64 {
            let from = self.first_snapshot_ns.or(self.first_ns).unwrap_or(0);
            self.now_ns.saturating_sub(from) as f64 / 1e9
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        crate::runtime().expect("runtime")
    }

    /// Events in one pass, and the pass's span.
    fn one_pass() -> (u64, f64) {
        let mut s = Span::default();
        crate::replay::file(Path::new(TRACE), &mut [&mut s], &mut |_| {}).expect("replay");
        (s.events, s.span_s())
    }

    /// Loops for `ms` of wall time at a speed that makes a pass ~25 ms.
    fn looped(cache_max: usize, ms: u64) -> (StopReason, u64, f64) {
        let mut s = Span::default();
        let (reason, _) = rt()
            .block_on(async {
                let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
                run(
                    Path::new(TRACE),
                    1000.0,
                    Some(deadline),
                    cache_max,
                    &mut [&mut s],
                )
                .await
            })
            .expect("replay");
        (reason, s.events, s.span_s())
    }

    #[test]
    fn an_outlier_timestamp_does_not_stall_the_next_pass() {
        // 10 ms of trace with one record a year late, looped at x4: each
        // pass waits out MAX_GAP (0.5 s at x4) once, not a year.
        const MS: u64 = 1_000_000;
        let t0 = 5_000 * MS;
        let scan = |ts_ns| {
            Event::Scan(numa_ebpf_common::ScanEvent {
                kind: numa_ebpf_common::EventKind::Scan as u32,
                ts_ns,
                ..Default::default()
            })
        };
        let mut w = trace::Writer::new(Vec::new(), &trace::fixtures::header()).expect("writer");
        for i in 0..10 {
            w.event(&scan(t0 + i * MS)).expect("event");
            if i == 3 {
                w.event(&scan(t0 + 365 * 86_400_000 * MS)).expect("outlier");
            }
        }
        let bytes = w.finish(t0, "duration").expect("finish");
        let path =
            std::env::temp_dir().join(format!("numatrace-outlier-{}.trace", std::process::id()));
        std::fs::write(&path, bytes).expect("write the trace");
        let mut s = Span::default();
        let result = rt().block_on(async {
            let deadline = tokio::time::Instant::now() + Duration::from_millis(1800);
            run(&path, 4.0, Some(deadline), LOOP_CACHE_ITEMS, &mut [&mut s]).await
        });
        let _ = std::fs::remove_file(&path);
        let (reason, warning) = result.expect("replay");
        assert_eq!(
            warning.as_deref(),
            Some("shortened 1 gap of more than 2 s between records to 2 s")
        );
        assert_eq!(reason, StopReason::Duration);
        assert!(s.events >= 3 * 11, "{} events: the loop stalled", s.events);
    }

    #[test]
    fn looped_passes_share_one_clock() {
        let start = tokio::time::Instant::now();
        // 2 s of trace into the loop at x4: due half a second after the start.
        assert_eq!(
            pass_origin(start, 7, 2_000_000_000, 4.0),
            Some((start + Duration::from_millis(500), 7))
        );
        assert_eq!(pass_origin(start, 7, 0, 4.0), Some((start, 7)));
        assert_eq!(pass_origin(start, 7, 1, 0.0), None, "unpaced");
        assert_eq!(
            pass_origin(start, 7, u64::MAX, 1e-300),
            None,
            "out of range"
        );
    }

    #[test]
    fn looped_replay_repeats_the_trace_with_time_moving_on() {
        let (events, span) = one_pass();
        assert!(events > 20_000 && span > 20.0, "{events} {span}");
        // From memory, and re-reading the file (a trace too long to keep).
        for cache_max in [LOOP_CACHE_ITEMS, 10] {
            let (reason, ev, elapsed) = looped(cache_max, 1500);
            assert_eq!(reason, StopReason::Duration);
            // Later passes count every record (their snapshots only move
            // time): more than two passes' worth, and event time went on.
            assert!(ev > 2 * events, "cache {cache_max}: {ev} events");
            assert!(elapsed > 2.0 * span, "cache {cache_max}: {elapsed} s");
            // Whole passes are the same stream shifted in time.
            let passes = elapsed / span;
            let per_pass = ev as f64 / passes;
            assert!(
                (per_pass / events as f64 - 1.0).abs() < 0.1,
                "cache {cache_max}: {per_pass} events per pass, {events} in one"
            );
        }
    }
}
