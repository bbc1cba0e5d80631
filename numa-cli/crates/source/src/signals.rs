//! SIGINT, SIGTERM and SIGHUP: each ends a run cleanly, with the full
//! report and a complete trace footer.
use anyhow::Result;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// The three stop signals, registered once per run.
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    /// Registers the handlers: from now on these signals no longer kill
    /// the process, they arrive here.
    pub fn new() -> Result<Signals> {
        let s = Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        };
        // A temporary file being written is now removed by the clean stop
        // (its destructor), not by the last-resort handler.
        numa_host::fs::stop_signals_handled();
        Ok(s)
    }

    /// The name of the next stop signal.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
            _ = self.hup.recv() => "SIGHUP",
        }
    }
}

/// Waits for a stop signal or `until`.
pub async fn wait_for_stop(until: Option<tokio::time::Instant>) -> Result<crate::StopReason> {
    let mut signals = Signals::new()?;
    let deadline = async {
        match until {
            Some(t) => tokio::time::sleep_until(t).await,
            None => std::future::pending().await,
        }
    };
    Ok(tokio::select! {
        s = signals.recv() => crate::StopReason::Signal(s),
        _ = deadline => crate::StopReason::Duration,
    })
}
