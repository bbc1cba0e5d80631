//! The consumer side of the one direction of data flow: a [`Sink`] takes
//! decoded events and counter snapshots, whatever the source.
use anyhow::Result;

use crate::{
    decode::{Event, Snapshot},
    trace,
};

/// A consumer of the event stream.
pub trait Sink {
    /// What the source describes itself with (a trace's header, the live
    /// probes' own) before its first event: sinks whose models need the
    /// machine (the top tier's PFN spans) take it from here. A source may
    /// give it again; a sink keeps what it took the first time.
    fn header(&mut self, _h: &trace::Header) -> Result<()> {
        Ok(())
    }
    fn event(&mut self, ev: &Event) -> Result<()>;
    fn snapshot(&mut self, _s: &Snapshot) -> Result<()> {
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
