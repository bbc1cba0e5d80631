//! `numatrace hist`: the scan-to-fault latency and fault-count delta
//! histograms (`numa_render::hist` draws them), live or `--from` a
//! recording: the same sink either way.
use std::{process::ExitCode, time::Duration};

use anyhow::Result;
use numa_core::trace;
use numa_render::hist::{HistSink, Output};

use crate::cli::HistArgs;

pub(crate) fn run(args: &HistArgs) -> Result<ExitCode> {
    // Finite and at least 0.1 s: checked when the flags were parsed.
    let interval = args.interval.map(Duration::from_secs_f64);
    let output = if args.json {
        Output::Json
    } else if args.csv {
        Output::Csv
    } else {
        Output::Text
    };
    let stdout = std::io::stdout().lock();
    // The sample rate is the recording's or the live probes' own, and
    // cgroups are named when the run is this boot's.
    let new_sink = |sample_every, boot: Option<String>| {
        HistSink::new(stdout, output, args.by(), args.top, interval, sample_every)
            .with_cgroup_paths(numa_host::cgroup::lookup(boot.as_deref()))
    };
    match &args.from {
        Some(path) => {
            let header = trace::Reader::open(path)?.header;
            let mut sink = new_sink(header.sample_every, header.boot_id);
            // With --interval the histograms print while the trace is read.
            let when = match interval {
                Some(_) => crate::progress::Output::Streamed,
                None => crate::progress::Output::AtEnd,
            };
            crate::read_trace(path, when, &mut [&mut sink])?;
            sink.finish()?;
        }
        None => {
            let probes = numa_probe::session::attach(&args.probe.options())?;
            let snapshot_every = interval.map_or(Duration::from_secs(1), |i| {
                i.clamp(Duration::from_millis(100), Duration::from_secs(1))
            });
            let mut sink = new_sink(probes.options.sample_every, numa_host::system::boot_id());
            let reason = args
                .probe
                .live(probes, snapshot_every)
                .run_blocking(args.probe.report_until(), &mut [&mut sink])?
                .reason;
            log::info!("hist stopped: {}", reason.describe());
            sink.finish()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
