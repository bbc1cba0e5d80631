//! The live source: the probes' ring buffer, drained into the sinks, with a
//! counter snapshot at the start, every `snapshot_every` and at the end.
use std::{sync::Arc, time::Duration};

use anyhow::{Context, Result};
use aya::maps::{MapData, RingBuf};
use numa_core::{decode, sink::Sink};
use numa_probe::{load::Probes, session};
use tokio::{io::unix::AsyncFd, process::Child};

use crate::{dispatch, dispatch_snapshot, signals::Signals, StopReason};

/// How often the live pipeline drains the ring without a wakeup.
const RING_FLUSH_EVERY: Duration = Duration::from_millis(100);

/// What a live run does besides reading the probes.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// Run this command while attached and stop when it exits.
    pub command: Vec<String>,
    /// How often counters and histograms are read.
    pub snapshot_every: Duration,
    /// Stop when this says why (looked at every 100 ms, as the ring is
    /// drained).
    pub stop_when: Option<StopWhen>,
}

/// A reason to end a live run that another part of the command sees (the
/// promoter's mover: every process it serves has exited): None while the
/// run should go on, else the reason, which the run ends with.
#[derive(Clone)]
pub struct StopWhen(pub Arc<dyn Fn() -> Option<String> + Send + Sync>);

impl std::fmt::Debug for StopWhen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopWhen(..)")
    }
}

/// The ring buffer, polled by the runtime, and what it could not decode.
struct Ring {
    fd: AsyncFd<RingBuf<MapData>>,
    decode_errors: u64,
}

impl Ring {
    fn new(probes: &mut Probes) -> Result<Ring> {
        let ring = probes.take_events()?;
        // SAFETY: the RingBuf owns its map fd and keeps it open, unchanged,
        // for as long as it lives, and the AsyncFd owns the RingBuf.
        let fd = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .map_err(std::io::Error::from)
            .context("polling the ring buffer")?;
        Ok(Ring {
            fd,
            decode_errors: 0,
        })
    }

    fn drain_ring(
        ring: &mut RingBuf<MapData>,
        errors: &mut u64,
        sinks: &mut [&mut dyn Sink],
    ) -> Result<()> {
        while let Some(item) = ring.next() {
            match decode::decode(&item) {
                Ok(ev) => dispatch(sinks, &ev)?,
                Err(_) => *errors += 1,
            }
        }
        Ok(())
    }

    fn drain(&mut self, sinks: &mut [&mut dyn Sink]) -> Result<()> {
        Self::drain_ring(self.fd.get_mut(), &mut self.decode_errors, sinks)
    }

    /// Waits until the probes wake the reader, then drains.
    async fn readable(&mut self, sinks: &mut [&mut dyn Sink]) -> Result<()> {
        let mut guard = self.fd.readable_mut().await?;
        Self::drain_ring(guard.get_inner_mut(), &mut self.decode_errors, sinks)?;
        guard.clear_ready();
        Ok(())
    }
}

fn spawn(command: &[String]) -> Result<Option<Child>> {
    let Some((prog, args)) = command.split_first() else {
        return Ok(None);
    };
    let child = tokio::process::Command::new(prog)
        .args(args)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {prog}"))?;
    Ok(Some(child))
}

async fn exited(child: &mut Option<Child>) -> StopReason {
    match child.as_mut() {
        Some(c) => StopReason::CommandExited(c.wait().await.ok().and_then(|s| s.code())),
        None => std::future::pending().await,
    }
}

/// Runs the live pipeline until `until` has passed (None: no deadline), a
/// stop signal arrives or the command exits. Always ends with a drained
/// ring and a final snapshot.
pub(crate) async fn run(
    probes: &mut Probes,
    opts: &LiveOptions,
    until: Option<Duration>,
    sinks: &mut [&mut dyn Sink],
) -> Result<StopReason> {
    let mut ring = Ring::new(probes)?;
    dispatch_snapshot(sinks, &session::snapshot(probes)?)?;
    let mut child = spawn(&opts.command)?;
    let mut signals = Signals::new()?;
    let deadline = crate::deadline(until);
    let mut tick = tokio::time::interval(opts.snapshot_every);
    tick.tick().await;
    // The probes wake this reader at most every 20 ms (and when a quarter of
    // the ring is pending), so records submitted after the last wakeup wait
    // for the next one: drain on a timer too, so a quiet ring holds nothing
    // back for long, and before every snapshot, so counters and events agree.
    let mut flush = tokio::time::interval(RING_FLUSH_EVERY);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    flush.tick().await;
    let reason = loop {
        tokio::select! {
            r = ring.readable(sinks) => r?,
            _ = flush.tick() => {
                ring.drain(sinks)?;
                if let Some(why) = opts.stop_when.as_ref().and_then(|s| (s.0)()) {
                    break StopReason::Condition(why);
                }
            }
            _ = tick.tick() => {
                ring.drain(sinks)?;
                dispatch_snapshot(sinks, &session::snapshot(probes)?)?;
            }
            _ = crate::sleep_until(deadline) => break StopReason::Duration,
            s = signals.recv() => break StopReason::Signal(s),
            r = exited(&mut child) => break r,
        }
    };
    if let Some(c) = child.as_mut() {
        if !matches!(reason, StopReason::CommandExited(_)) {
            let _ = c.start_kill();
        }
    }
    ring.drain(sinks)?;
    dispatch_snapshot(sinks, &session::snapshot(probes)?)?;
    if ring.decode_errors > 0 {
        eprintln!(
            "numatrace: warning: {} ring records could not be decoded",
            ring.decode_errors
        );
    }
    Ok(reason)
}
