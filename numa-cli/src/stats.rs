//! `numatrace stats` and `numatrace record`: run the pipeline (live or from
//! a trace) into the totals model and, when asked, a trace recorder.
use std::{io::Write, path::Path, process::ExitCode, time::Duration};

use anyhow::{bail, Context, Result};

use numa_core::sink::Sink;
use numa_host::clock::process_cpu_ns;
use numa_probe::session;
use numa_source::{Recording, Source, StopReason};

use crate::cli::{LiveTruthArgs, ProbeArgs, RecordArgs, StatsArgs, StatsBy};
use numa_core::{
    damon,
    model::totals::{Report, SelfCpu, Totals},
    sampling::Sampling,
    trace,
};

/// A live run's source with its probes, why it stopped, and numatrace's
/// process CPU time (ns) before attaching, once attached and at the end.
struct LiveRun {
    source: Source,
    reason: StopReason,
    cpu_ns: [u64; 3],
}

/// Attaches and runs the live pipeline into `sinks` plus an optional trace
/// (its path, and whether to replace an existing file).
fn run_live(
    a: &ProbeArgs,
    truth: &LiveTruthArgs,
    output: Option<(&Path, bool)>,
    sinks: &mut [&mut dyn Sink],
) -> Result<LiveRun> {
    if let Some((path, overwrite)) = output {
        numa_source::check_new_trace(path, overwrite)?;
    }
    let start = process_cpu_ns();
    let probes = session::attach(&truth.options(a)?)?;
    let header = output.map(|_| session::header(&probes));
    let recording = output
        .zip(header.as_ref())
        .map(|((path, overwrite), header)| Recording {
            path,
            header,
            overwrite,
        });
    let mut source = a.live(probes, Duration::from_secs(1));
    let attached = process_cpu_ns();
    let finished = source.run_recorded(a.report_until(), recording, sinks)?;
    Ok(LiveRun {
        source,
        reason: finished.reason,
        cpu_ns: [start, attached, process_cpu_ns()],
    })
}

/// The totals of a live run, with its probes' figures and numatrace's own
/// CPU time.
fn live_report(totals: &Totals, run: &LiveRun) -> Result<Report> {
    let probes = run.source.probes().context("a live run without probes")?;
    let mut r = totals
        .report(probes.map_plan.slots, probes.attach_started_ns)
        .with_hotness(probes.params.hotness)
        .with_plan(Some(&probes.plan))
        .with_sampling(Some(probes.sampling()));
    r.bpf_programs = probes.program_stats();
    r.scanner_cost = numa_core::plan::ScannerCost::of(&r.bpf_programs, r.scan_ptes_updated);
    r.fault_cost = numa_core::plan::FaultPathCost::of(&r.bpf_programs, r.hint_faults);
    let [start, attached, end] = run.cpu_ns;
    r.numatrace_cpu = Some(SelfCpu::new(start, attached, end, r.records()));
    Ok(r)
}

fn print(report: &Report, json: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, report)?;
        writeln!(out)?;
    } else {
        numa_render::stats::print_human(report, &mut out)?;
    }
    Ok(())
}

pub(crate) fn stats(args: &StatsArgs) -> Result<ExitCode> {
    if args.live_truth.truth.is_some() && !args.live {
        bail!(
            "--truth damon samples a live run: add --live (a trace's DAMON records are in its \
             stats already, and `replay --truth from-trace` scores against them)"
        );
    }
    // A live run's kdamond, or a trace's: its summary joins the report.
    let mut damon = damon::Collector::counting();
    let (report, totals, boot) = if args.live {
        let mut totals = Totals::new(numa_probe::params::resolve_toptier());
        let output = args.record.as_deref().map(|p| (p, args.overwrite));
        let run = run_live(
            &args.probe,
            &args.live_truth,
            output,
            &mut [&mut totals, &mut damon],
        )?;
        (
            live_report(&totals, &run)?,
            totals,
            numa_host::system::boot_id(),
        )
    } else {
        let path = args
            .file
            .as_deref()
            .context("give a trace file or --live")?;
        let header = trace::Reader::open(path)?.header;
        let mut totals = Totals::new(header.params.as_ref().map_or(1, |p| p.toptier_mask));
        crate::read_trace(
            path,
            crate::progress::Output::AtEnd,
            &mut [&mut totals, &mut damon],
        )?;
        let report = totals
            .report(
                u64::from(header.stamp_entries),
                header.attach_started_mono_ns,
            )
            .with_hotness(
                header
                    .params
                    .as_ref()
                    .map_or_else(Default::default, |p| p.hotness),
            )
            .with_plan(header.attach_plan.as_ref())
            .with_sampling(
                header
                    .map_plan
                    .as_ref()
                    .map(|p| Sampling::new(p, header.map_bytes, totals.stamped_folios())),
            );
        (report, totals, header.boot_id)
    };
    let mut report = with_breakdown(report, &totals, args.by, boot);
    report.damon = damon.summary();
    print(&report, args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// `report` with the rows `--by` asks for; cgroups named when the run is
/// of `boot` (this boot's id for a live run, the trace's).
fn with_breakdown(
    mut report: Report,
    totals: &Totals,
    by: Option<StatsBy>,
    boot: Option<String>,
) -> Report {
    if by == Some(StatsBy::Cgroup) {
        let lookup = numa_host::cgroup::lookup(boot.as_deref());
        let paths = lookup(&totals.cgroups.ids().collect());
        report.by_cgroup = totals.cgroup_rows(|id| paths.get(&id).cloned(), report.kernel_hotness);
    }
    report
}

pub(crate) fn record(args: &RecordArgs) -> Result<ExitCode> {
    let mut totals = Totals::new(numa_probe::params::resolve_toptier());
    let output = Some((args.output.as_path(), args.overwrite));
    let run = run_live(&args.probe, &args.live_truth, output, &mut [&mut totals])?;
    let r = live_report(&totals, &run)?;
    log::info!(
        "recorded {} hint faults, {} scans to {} ({}); drops {}",
        r.hint_faults,
        r.scan_ranges,
        args.output.display(),
        run.reason.describe(),
        r.drops
    );
    Ok(ExitCode::SUCCESS)
}
