//! The one direction of data flow: source (live probes or a trace file) ->
//! decode -> sinks. Sinks never call back into the source.
use std::{path::Path, time::Duration};

use anyhow::{Context, Result};
use numa_ebpf_common::maps;
use tokio::{io::unix::AsyncFd, signal::unix::SignalKind};

use crate::{
    decode::{self, Event, Snapshot},
    probe::load::Probes,
    system, trace,
};

/// A consumer of the event stream.
pub trait Sink {
    fn event(&mut self, ev: &Event) -> Result<()>;
    fn snapshot(&mut self, _s: &Snapshot) -> Result<()> {
        Ok(())
    }
}

impl Sink for crate::model::totals::Totals {
    fn event(&mut self, ev: &Event) -> Result<()> {
        crate::model::totals::Totals::event(self, ev);
        Ok(())
    }
    fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
        crate::model::totals::Totals::snapshot(self, s);
        Ok(())
    }
}

/// Writes the stream into a trace file.
pub struct Recorder<W: std::io::Write>(pub Option<trace::Writer<W>>);

impl<W: std::io::Write> Sink for Recorder<W> {
    fn event(&mut self, ev: &Event) -> Result<()> {
        match &mut self.0 {
            Some(w) => w.event(ev),
            None => Ok(()),
        }
    }
    fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
        match &mut self.0 {
            Some(w) => w.snapshot(s),
            None => Ok(()),
        }
    }
}

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn snapshot(probes: &Probes) -> Result<Snapshot> {
    Ok(Snapshot {
        ts_ns: monotonic_ns(),
        counters: probes.counters()?,
        hist_latency: probes.summed(maps::HIST_LATENCY)?,
        hist_delta: probes.summed(maps::HIST_DELTA)?,
        hist_sum: probes.summed(maps::HIST_SUM)?,
        migrate_reason_pages: probes.summed(maps::MIGRATE_REASON_PAGES)?,
        vmstat: system::vmstat()
            .into_iter()
            .filter(|(k, _)| system::NUMA_VMSTAT.contains(&k.as_str()))
            .collect(),
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    Duration,
    Signal(&'static str),
    CommandExited(Option<i32>),
}

impl StopReason {
    pub fn describe(&self) -> String {
        match self {
            StopReason::Duration => "duration elapsed".into(),
            StopReason::Signal(s) => format!("{s} received"),
            StopReason::CommandExited(c) => format!("command exited ({c:?})"),
        }
    }
}

pub struct LiveOptions {
    pub duration: Option<Duration>,
    pub command: Vec<String>,
    pub snapshot_every: Duration,
}

fn dispatch(sinks: &mut [&mut dyn Sink], ev: &Event) -> Result<()> {
    sinks.iter_mut().try_for_each(|s| s.event(ev))
}

fn dispatch_snapshot(sinks: &mut [&mut dyn Sink], snap: &Snapshot) -> Result<()> {
    sinks.iter_mut().try_for_each(|s| s.snapshot(snap))
}

/// Runs the live pipeline until the duration ends, a signal arrives or the
/// command exits. Always ends with a drained ring and a final snapshot.
pub async fn run_live(
    probes: &mut Probes,
    opts: &LiveOptions,
    sinks: &mut [&mut dyn Sink],
) -> Result<StopReason> {
    let ring = probes.take_events()?;
    // SAFETY: the RingBuf owns its map fd and keeps it open, unchanged, for
    // as long as it lives, and the AsyncFd owns the RingBuf.
    let mut fd = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .map_err(std::io::Error::from)
        .context("polling the ring buffer")?;
    let mut decode_errors = 0u64;
    let mut drain = |ring: &mut aya::maps::RingBuf<aya::maps::MapData>,
                     sinks: &mut [&mut dyn Sink]|
     -> Result<()> {
        while let Some(item) = ring.next() {
            match decode::decode(&item) {
                Ok(ev) => dispatch(sinks, &ev)?,
                Err(_) => decode_errors += 1,
            }
        }
        Ok(())
    };
    dispatch_snapshot(sinks, &snapshot(probes)?)?;
    let mut child = match opts.command.split_first() {
        Some((prog, args)) => Some(
            tokio::process::Command::new(prog)
                .args(args)
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {prog}"))?,
        ),
        None => None,
    };
    let mut sigint = tokio::signal::unix::signal(SignalKind::interrupt())?;
    let mut sigterm = tokio::signal::unix::signal(SignalKind::terminate())?;
    let mut sighup = tokio::signal::unix::signal(SignalKind::hangup())?;
    let deadline = opts.duration.or(if child.is_none() {
        Some(Duration::from_secs(10))
    } else {
        None
    });
    let sleep = tokio::time::sleep(deadline.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(sleep);
    let mut tick = tokio::time::interval(opts.snapshot_every);
    tick.tick().await;
    let reason = loop {
        tokio::select! {
            guard = fd.readable_mut() => {
                let mut guard = guard?;
                drain(guard.get_inner_mut(), sinks)?;
                guard.clear_ready();
            }
            _ = tick.tick() => dispatch_snapshot(sinks, &snapshot(probes)?)?,
            _ = &mut sleep, if deadline.is_some() => break StopReason::Duration,
            _ = sigint.recv() => break StopReason::Signal("SIGINT"),
            _ = sigterm.recv() => break StopReason::Signal("SIGTERM"),
            _ = sighup.recv() => break StopReason::Signal("SIGHUP"),
            status = async { match child.as_mut() { Some(c) => c.wait().await, None => std::future::pending().await } } => {
                break StopReason::CommandExited(status.ok().and_then(|s| s.code()));
            }
        }
    };
    if let Some(c) = child.as_mut() {
        if !matches!(reason, StopReason::CommandExited(_)) {
            let _ = c.start_kill();
        }
    }
    drain(fd.get_mut(), sinks)?;
    dispatch_snapshot(sinks, &snapshot(probes)?)?;
    if decode_errors > 0 {
        eprintln!("numatrace: warning: {decode_errors} ring records could not be decoded");
    }
    Ok(reason)
}

/// Feeds a recorded trace to the sinks. Returns the header and any
/// truncation warning.
pub fn run_file(
    path: &Path,
    sinks: &mut [&mut dyn Sink],
) -> Result<(trace::Header, Option<String>)> {
    let mut reader = trace::Reader::open(path)?;
    for item in reader.by_ref() {
        match item? {
            trace::Item::Event(ev) => dispatch(sinks, &ev)?,
            trace::Item::Snapshot(s) => dispatch_snapshot(sinks, &s)?,
            trace::Item::Footer(_) => {}
        }
    }
    Ok((reader.header.clone(), reader.warning.clone()))
}

/// Feeds a recorded trace to the sinks in (scaled) real time: an event
/// `dt` after the previous one is delivered `dt / speed` later (`speed`
/// <= 0: as fast as possible). Stops at the end of the trace, on
/// SIGINT/SIGTERM/SIGHUP, or after `duration` of wall time. Drives `top
/// --replay` and `export --replay` exactly like the live probes would.
pub async fn run_replay(
    path: &Path,
    speed: f64,
    duration: Option<Duration>,
    sinks: &mut [&mut dyn Sink],
) -> Result<(StopReason, Option<String>)> {
    let mut reader = trace::Reader::open(path)?;
    let mut sigint = tokio::signal::unix::signal(SignalKind::interrupt())?;
    let mut sigterm = tokio::signal::unix::signal(SignalKind::terminate())?;
    let mut sighup = tokio::signal::unix::signal(SignalKind::hangup())?;
    let start = tokio::time::Instant::now();
    let mut first_ts: Option<u64> = None;
    let deadline = duration.map(|d| start + d);
    loop {
        let Some(item) = reader.next() else {
            return Ok((StopReason::CommandExited(Some(0)), reader.warning.clone()));
        };
        let (ts, item) = match item? {
            trace::Item::Event(ev) => {
                let ts = ev.ts_ns();
                (ts, Some(Ok(ev)))
            }
            trace::Item::Snapshot(s) => (s.ts_ns, Some(Err(s))),
            trace::Item::Footer(_) => (0, None),
        };
        let Some(item) = item else { continue };
        if speed > 0.0 {
            let t0 = *first_ts.get_or_insert(ts);
            let due = start + Duration::from_secs_f64(ts.saturating_sub(t0) as f64 / 1e9 / speed);
            if due > tokio::time::Instant::now() {
                let sleep = tokio::time::sleep_until(due);
                tokio::pin!(sleep);
                tokio::select! {
                    _ = &mut sleep => {}
                    _ = sigint.recv() => return Ok((StopReason::Signal("SIGINT"), None)),
                    _ = sigterm.recv() => return Ok((StopReason::Signal("SIGTERM"), None)),
                    _ = sighup.recv() => return Ok((StopReason::Signal("SIGHUP"), None)),
                }
            }
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            return Ok((StopReason::Duration, None));
        }
        match item {
            Ok(ev) => dispatch(sinks, &ev)?,
            Err(snap) => dispatch_snapshot(sinks, &snap)?,
        }
    }
}
