//! Trace sources: a file read at full speed, or replayed in (scaled) real
//! time by its timestamps, once or looped.
use std::{path::Path, time::Duration};

use anyhow::Result;
use numa_core::{
    sink::Sink,
    trace::{self, RecordError},
};

use crate::{deliver, signals::Signals, StopReason};

/// Records read between two calls of a file read's progress callback: a
/// few per MiB of trace, so the callback costs nothing measurable.
pub const PROGRESS_EVERY: u32 = 4096;

/// Feeds a recorded trace to the sinks as fast as it reads; no signal
/// handling (Ctrl-C ends the process as usual). `progress` is told the
/// bytes of the file read so far every [`PROGRESS_EVERY`] records and at
/// the end. Returns the reader's truncation warning and the damaged
/// records skipped.
pub(crate) fn file(
    path: &Path,
    sinks: &mut [&mut dyn Sink],
    progress: &mut dyn FnMut(u64),
) -> Result<Option<String>> {
    let mut reader = trace::Reader::open(path)?;
    let mut bad = 0;
    let mut n = 0u32;
    while let Some(item) = reader.next() {
        match item {
            Ok(item) => deliver(sinks, &item)?,
            Err(e) => skip_damaged(e, &mut bad)?,
        }
        n += 1;
        if n == PROGRESS_EVERY {
            n = 0;
            progress(reader.offset());
        }
    }
    progress(reader.offset());
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
    let warning = r.warning(truncated);
    Ok((r.reason, warning))
}

/// Whether a trace reader's error is a damaged record (unknown tag, wrong
/// size, bad JSON), which the reader has already passed by the length in
/// its header, rather than a failing read.
pub fn is_damaged_record(e: &RecordError) -> bool {
    e.is_damaged_record()
}

/// Counts a damaged record in `bad`; a failing read ends the run.
fn skip_damaged(e: RecordError, bad: &mut u64) -> Result<()> {
    if !is_damaged_record(&e) {
        return Err(e.into());
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
    join(reader, skipped)
}

/// Joins two warnings into one.
fn join(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    }
}

/// How a replay of trace items ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Replayed {
    pub reason: StopReason,
    /// Damaged records skipped.
    pub bad_records: u64,
    /// Gaps longer than [`MAX_GAP`] shortened to it.
    pub gaps_shortened: u64,
    /// Trace time the pacing covered: the latest record's offset from the
    /// origin, shortened gaps taken out (0 unpaced).
    pub paced_ns: u64,
}

impl Replayed {
    /// The reader's warning, with the damaged records skipped and the gaps
    /// shortened.
    pub(crate) fn warning(&self, reader: Option<String>) -> Option<String> {
        let n = self.gaps_shortened;
        let (plural, secs) = (if n == 1 { "" } else { "s" }, MAX_GAP.as_secs());
        let gaps = (n > 0).then(|| {
            format!("shortened {n} gap{plural} of more than {secs} s between records to {secs} s")
        });
        join(warning(reader, self.bad_records), gaps)
    }
}

/// How long a replay sleeps at least once it is ahead of the trace: the
/// records that fall due meanwhile are delivered as one batch. A display
/// refreshed every second (or a scrape) cannot see 20 ms of lateness; 50
/// wake-ups a second instead of one per record (or per millisecond) is
/// most of the replay source's cost saved.
pub const REPLAY_BATCH: Duration = Duration::from_millis(20);
/// The longest gap of trace time between records a paced replay waits
/// out: a recording snapshots every second, so a longer gap is a suspended
/// host or a damaged timestamp, and is shortened to this.
pub(crate) const MAX_GAP: Duration = Duration::from_secs(2);
/// Records delivered without giving the runtime a turn when the replay
/// never sleeps (`speed` 0, or a replay that cannot keep up).
const REPLAY_YIELD_EVERY: u32 = 16_384;

/// Batch pacing of a replay. Pure: the caller reads the clock (wall time
/// since the replay started) only when [`Pacer::due`] says a record is
/// beyond what the last reading allowed, so the clock is read about twice
/// per batch instead of once or twice per record.
///
/// A record more than [`MAX_GAP`] ahead of the latest one so far is due
/// `MAX_GAP` after it; one more than `MAX_GAP` behind it continues from
/// it. One damaged timestamp (or a suspend) then costs at most `MAX_GAP`
/// of waiting, and the records after it are paced as recorded.
#[derive(Debug, Clone)]
pub struct Pacer {
    /// Trace ns per wall ns (> 0).
    speed: f64,
    /// Trace time of the first record (the replay's origin).
    t0: Option<u64>,
    /// Records up to this many trace ns after `t0` are due as of the last
    /// clock reading.
    horizon: u64,
    /// Trace ns taken out of (or, after a backward jump, added to) every
    /// record's offset by shortened gaps.
    shift: i128,
    /// The latest paced offset so far.
    latest: i128,
    /// Gaps shortened so far.
    gaps_shortened: u64,
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
            shift: 0,
            latest: 0,
            gaps_shortened: 0,
        }
    }

    /// Gaps longer than [`MAX_GAP`] shortened so far.
    pub fn gaps_shortened(&self) -> u64 {
        self.gaps_shortened
    }

    /// The latest record's paced offset so far.
    pub fn paced_ns(&self) -> u64 {
        u64::try_from(self.latest.max(0)).unwrap_or(u64::MAX)
    }

    /// The paced offset of a record at `ts`: its trace time since `t0`,
    /// less the shortened gaps. The same `ts` gets the same offset again.
    fn offset(&mut self, ts: u64) -> u64 {
        let t0 = *self.t0.get_or_insert(ts);
        let gap = MAX_GAP.as_nanos() as i128;
        let mut off = i128::from(ts) - i128::from(t0) - self.shift;
        if off > self.latest + gap {
            self.gaps_shortened += 1;
            self.shift += off - (self.latest + gap);
            off = self.latest + gap;
        } else if off < self.latest - gap {
            self.shift -= self.latest - off;
            off = self.latest;
        }
        self.latest = self.latest.max(off);
        u64::try_from(off.max(0)).unwrap_or(u64::MAX)
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
    items: impl Iterator<Item = Result<T, RecordError>>,
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
    let done = |reason, bad_records, pacer: &Option<Pacer>| {
        Ok(Replayed {
            reason,
            bad_records,
            gaps_shortened: pacer.as_ref().map_or(0, Pacer::gaps_shortened),
            paced_ns: pacer.as_ref().map_or(0, Pacer::paced_ns),
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
                    return done(StopReason::Duration, bad_records, &pacer);
                }
                if let Some(at) = p.wake_at(ts, now.saturating_duration_since(start), REPLAY_BATCH)
                {
                    let wake = start + at;
                    let wake = deadline.map_or(wake, |d| wake.min(d));
                    tokio::select! {
                        _ = tokio::time::sleep_until(wake) => {}
                        s = signals.recv() => return done(StopReason::Signal(s), bad_records, &pacer),
                    }
                    since_yield = 0;
                    let now = tokio::time::Instant::now();
                    if deadline.is_some_and(|d| now >= d) {
                        return done(StopReason::Duration, bad_records, &pacer);
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
                return done(StopReason::Duration, bad_records, &pacer);
            }
            tokio::task::yield_now().await;
        }
        deliver(sinks, item)?;
    }
    done(StopReason::EndOfTrace, bad_records, &pacer)
}

#[cfg(test)]
mod tests;
