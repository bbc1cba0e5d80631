//! `numatrace stats` and `numatrace record`: run the pipeline (live or from
//! a trace) into the totals model and, when asked, a trace recorder.
use std::{io::Write, process::ExitCode, time::Duration};

use anyhow::{Context, Result};

use numa_probe::{load::Probes, session};

use crate::{
    cli::{ProbeArgs, RecordArgs, StatsArgs},
    model::totals::{Report, Totals},
    pipeline::{self, LiveOptions, Recorder, Sink},
    trace,
};

pub fn live_options(a: &ProbeArgs) -> LiveOptions {
    LiveOptions {
        duration: a.duration.map(Duration::from_secs_f64),
        command: a.command.clone(),
        snapshot_every: Duration::from_secs(1),
    }
}

/// Attaches and runs the live pipeline into `sinks` plus an optional trace.
fn run_live(
    a: &ProbeArgs,
    output: Option<&std::path::Path>,
    sinks: &mut [&mut dyn Sink],
) -> Result<(Probes, pipeline::StopReason)> {
    let mut probes = session::attach(&a.options())?;
    let mut recorder = Recorder(match output {
        Some(p) => Some(trace::create(p, &session::header(&probes))?),
        None => None,
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let reason = {
        let mut all: Vec<&mut dyn Sink> = sinks
            .iter_mut()
            .map(|s| &mut **s as &mut dyn Sink)
            .collect();
        all.push(&mut recorder);
        rt.block_on(pipeline::run_live(&mut probes, &live_options(a), &mut all))?
    };
    if let Some(w) = recorder.0.take() {
        w.finish(numa_host::clock::monotonic_ns(), &reason.describe())?;
    }
    Ok((probes, reason))
}

fn print(report: &Report, json: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, report)?;
        writeln!(out)?;
    } else {
        print_human(report, &mut out)?;
    }
    Ok(())
}

pub fn stats(args: &StatsArgs) -> Result<ExitCode> {
    let report = if args.live {
        let mut totals = Totals::new(numa_probe::params::resolve_toptier());
        let (probes, _) = run_live(&args.probe, args.record.as_deref(), &mut [&mut totals])?;
        let mut r = totals.report(
            u64::from(probes.options.stamp_entries),
            probes.attach_started_ns,
        );
        r.bpf_programs = probes.program_stats();
        r
    } else {
        let path = args
            .file
            .as_deref()
            .context("give a trace file or --live")?;
        let header = trace::Reader::open(path)?.header;
        let mut totals = Totals::new(header.params.as_ref().map_or(1, |p| p.toptier_mask));
        let (_header, warning) = pipeline::run_file(path, &mut [&mut totals])?;
        if let Some(w) = warning {
            eprintln!("numatrace: warning: {w}");
        }
        totals.report(
            u64::from(header.stamp_entries),
            header.attach_started_mono_ns,
        )
    };
    print(&report, args.json)?;
    Ok(ExitCode::SUCCESS)
}

pub fn record(args: &RecordArgs) -> Result<ExitCode> {
    let mut totals = Totals::new(numa_probe::params::resolve_toptier());
    let (probes, reason) = run_live(&args.probe, Some(&args.output), &mut [&mut totals])?;
    let r = totals.report(
        u64::from(probes.options.stamp_entries),
        probes.attach_started_ns,
    );
    eprintln!(
        "numatrace: recorded {} hint faults, {} scans to {} ({}); drops {}",
        r.hint_faults,
        r.scan_ranges,
        args.output.display(),
        reason.describe(),
        r.drops
    );
    Ok(ExitCode::SUCCESS)
}

fn print_human(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let vm = |k: &str| r.vmstat_delta.get(k).map_or("-".to_owned(), u64::to_string);
    writeln!(out, "numatrace stats over {:.1} s", r.duration_s)?;
    writeln!(
        out,
        "  hint faults          {:>12}   (vmstat numa_hint_faults {})",
        r.hint_faults,
        vm("numa_hint_faults")
    )?;
    writeln!(out, "  promotion decisions  {:>12}", r.decisions)?;
    writeln!(
        out,
        "    promote            {:>12}   (free space: {})",
        r.kernel_promote, r.free_space_promote
    )?;
    writeln!(
        out,
        "    reject latency     {:>12}",
        r.kernel_reject.latency
    )?;
    writeln!(
        out,
        "    reject rate limit  {:>12}",
        r.kernel_reject.rate_limit
    )?;
    writeln!(
        out,
        "    reject other       {:>12}   not tiering: {}",
        r.kernel_reject.other, r.not_tiering
    )?;
    writeln!(
        out,
        "  migrations ok/fail   {:>12} / {}   (vmstat pgpromote_success {})",
        r.migrate.success,
        r.migrate.fail,
        vm("pgpromote_success")
    )?;
    writeln!(
        out,
        "  scan ranges          {:>12}   PTEs updated {} (vmstat numa_pte_updates {})",
        r.scan_ranges,
        r.scan_ptes_updated,
        vm("numa_pte_updates")
    )?;
    writeln!(
        out,
        "  scan stamps          {:>12}   stamp misses {}",
        r.scan_stamps, r.stamp_misses
    )?;
    writeln!(
        out,
        "  ring drops           {:>12}   map evictions {}",
        r.drops, r.evictions
    )?;
    writeln!(out, "\n  scan-to-fault latency (ms)")?;
    crate::histtext::write(out, &r.latency_ms, "ms")?;
    writeln!(
        out,
        "\n  fault-count delta (per-process hint faults between scan and fault)"
    )?;
    crate::histtext::write(out, &r.fault_delta, "")?;
    Ok(())
}
