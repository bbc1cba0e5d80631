//! Where events come from, run one way: [`Source::run`] feeds the live
//! probes, a trace file at full speed, or a trace replayed by its
//! timestamps (once or looped) into the same [`Sink`]s, and returns why it
//! stopped. Durations, stop signals and the end of a trace are handled
//! here once; sinks cannot tell the sources apart.
// Dev-dependencies are for the integration tests and benches.
#![cfg_attr(test, allow(unused_crate_dependencies))]
mod live;
mod looped;
mod record;
mod replay;
pub mod signals;

use std::{path::PathBuf, time::Duration};

use anyhow::Result;
pub use live::{LiveOptions, StopWhen};
pub use looped::LOOP_CACHE_ITEMS;
use numa_core::{
    decode::{Event, Snapshot},
    sink::{Recorder, Sink},
    trace,
};
use numa_host::clock::monotonic_ns;
use numa_probe::load::Probes;
pub use record::{check_new as check_new_trace, Recording};
pub use replay::{
    is_damaged_record, item_ts, warning as trace_warning, Pacer, PROGRESS_EVERY, REPLAY_BATCH,
};

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The run's duration elapsed.
    Duration,
    /// A stop signal arrived.
    Signal(&'static str),
    /// The command run under the probes exited (its exit code).
    CommandExited(Option<i32>),
    /// A live run's [`StopWhen`] said so, and why.
    Condition(String),
    /// A trace source delivered its last record.
    EndOfTrace,
}

impl StopReason {
    pub fn describe(&self) -> String {
        match self {
            StopReason::Duration => "duration elapsed".into(),
            StopReason::Signal(s) => format!("{s} received"),
            StopReason::CommandExited(c) => format!("command exited ({c:?})"),
            StopReason::Condition(why) => why.clone(),
            StopReason::EndOfTrace => "end of trace".into(),
        }
    }
}

/// A trace replayed by its timestamps.
#[derive(Debug, Clone)]
pub struct Replay {
    pub path: PathBuf,
    /// Trace time per wall time; <= 0: as fast as possible.
    pub speed: f64,
    /// Start over at the end, time moving on.
    pub repeat: bool,
}

/// Where events come from.
pub enum Source {
    /// The attached probes.
    Live(Box<Probes>, LiveOptions),
    /// A trace read as fast as it reads, without stop-signal handling.
    File(PathBuf),
    /// A trace delivered in (scaled) real time.
    Replay(Replay),
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub reason: StopReason,
    /// The trace reader's complaint about a truncated or damaged trace
    /// (damaged records are skipped and counted here).
    pub warning: Option<String>,
}

impl Source {
    pub fn is_live(&self) -> bool {
        matches!(self, Source::Live(..))
    }

    /// The probes of a live source.
    pub fn probes(&self) -> Option<&Probes> {
        match self {
            Source::Live(p, _) => Some(p),
            _ => None,
        }
    }

    /// The source's header: the live probes' (as a recording of them
    /// starts with), or the trace's.
    pub fn header(&self) -> Result<trace::Header> {
        match self {
            Source::Live(probes, _) => Ok(numa_probe::session::header(probes)),
            Source::File(path) => Ok(trace::Reader::open(path)?.header),
            Source::Replay(r) => Ok(trace::Reader::open(&r.path)?.header),
        }
    }

    /// Feeds the sinks until the source ends, `until` has passed (None: no
    /// limit; a file source ignores it) or a stop signal arrives.
    pub async fn run(
        &mut self,
        until: Option<Duration>,
        sinks: &mut [&mut dyn Sink],
    ) -> Result<Finished> {
        dispatch_header(sinks, &self.header()?)?;
        let (reason, warning) = match self {
            Source::Live(probes, opts) => (live::run(probes, opts, until, sinks).await?, None),
            Source::File(path) => (
                StopReason::EndOfTrace,
                replay::file(path, sinks, &mut |_| {})?,
            ),
            Source::Replay(r) if r.repeat => {
                let d = deadline(until);
                looped::run(&r.path, r.speed, d, LOOP_CACHE_ITEMS, sinks).await?
            }
            Source::Replay(r) => replay::once(&r.path, r.speed, deadline(until), sinks).await?,
        };
        Ok(Finished { reason, warning })
    }

    /// [`Source::run_blocking`] into `sinks` and, when `output` is given,
    /// into a new trace file (see [`Recording`]; a live source's header: a
    /// replay is not recorded again), finished with the stop reason and
    /// flushed to disk.
    pub fn run_recorded(
        &mut self,
        until: Option<Duration>,
        output: Option<Recording>,
        sinks: &mut [&mut dyn Sink],
    ) -> Result<Finished> {
        let mut recorder = Recorder(match output {
            Some(r) => Some(r.create()?),
            None => None,
        });
        let finished = {
            let mut all: Vec<&mut dyn Sink> = sinks
                .iter_mut()
                .map(|s| &mut **s as &mut dyn Sink)
                .collect();
            all.push(&mut recorder);
            self.run_blocking(until, &mut all)?
        };
        if let Some(w) = recorder.0.take() {
            record::finish(w, monotonic_ns(), &finished.reason.describe())?;
        }
        Ok(finished)
    }

    /// Feeds a trace file to `sinks` as fast as it reads, as
    /// [`Source::File`] does, and tells `progress` the bytes of the file
    /// read so far as it goes (a progress bar over the file's size).
    pub fn read_file(
        path: &std::path::Path,
        sinks: &mut [&mut dyn Sink],
        progress: &mut dyn FnMut(u64),
    ) -> Result<Finished> {
        dispatch_header(sinks, &trace::Reader::open(path)?.header)?;
        let warning = replay::file(path, sinks, progress)?;
        Ok(Finished {
            reason: StopReason::EndOfTrace,
            warning,
        })
    }

    /// [`Source::run`] on a runtime of its own.
    pub fn run_blocking(
        &mut self,
        until: Option<Duration>,
        sinks: &mut [&mut dyn Sink],
    ) -> Result<Finished> {
        runtime()?.block_on(self.run(until, sinks))
    }
}

/// The single-threaded runtime every numatrace thread that waits runs on.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn deadline(until: Option<Duration>) -> Option<tokio::time::Instant> {
    until.and_then(|d| tokio::time::Instant::now().checked_add(d))
}

/// Sleeps until `deadline`; never returns without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn dispatch_header(sinks: &mut [&mut dyn Sink], header: &trace::Header) -> Result<()> {
    sinks.iter_mut().try_for_each(|s| s.header(header))
}

fn dispatch(sinks: &mut [&mut dyn Sink], ev: &Event) -> Result<()> {
    sinks.iter_mut().try_for_each(|s| s.event(ev))
}

fn dispatch_snapshot(sinks: &mut [&mut dyn Sink], snap: &Snapshot) -> Result<()> {
    sinks.iter_mut().try_for_each(|s| s.snapshot(snap))
}

/// Delivers one trace item (the footer goes nowhere).
fn deliver(sinks: &mut [&mut dyn Sink], item: &trace::Item) -> Result<()> {
    match item {
        trace::Item::Event(ev) => dispatch(sinks, ev),
        trace::Item::Snapshot(s) => dispatch_snapshot(sinks, s),
        trace::Item::Footer(_) => Ok(()),
    }
}
