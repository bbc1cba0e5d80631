//! numatrace's userspace: probes (load, attach), decode, models and sinks.
//!
//! Data flows one way: kernel event -> decode -> model -> sinks. The binary
//! (`main.rs`) only parses the command line and dispatches; every module
//! lives here so benchmarks and integration tests can use them.
pub mod cli;
pub mod dump;
pub mod evaluate;
pub mod export;
pub mod hist;
pub mod move_pages;
pub mod promote;
pub mod report;
pub mod stats;
pub mod top;
pub mod workload;
pub use numa_core::{decode, histtext, model, rng, sink, trace};
pub use numa_host::{promoter_state, system};

/// Feeds a trace file to `sinks` at full speed, warning on stderr about a
/// truncated or damaged trace.
pub fn read_trace(
    path: &std::path::Path,
    sinks: &mut [&mut dyn numa_core::sink::Sink],
) -> anyhow::Result<()> {
    let finished = numa_source::Source::File(path.to_owned()).run_blocking(None, sinks)?;
    if let Some(w) = finished.warning {
        eprintln!("numatrace: warning: {w}");
    }
    Ok(())
}
