//! `numatrace report TRACE... -o report.html`: one self-contained page
//! (inline SVG from plotters, no scripts, no network) with the latency and
//! fault-delta distributions by outcome, the kernel threshold over time,
//! each model's agreement with the kernel and a fault-count threshold sweep.
//! Several traces (hosts, runs) make a fleet page: every chart row holds
//! one column per trace, on axes shared across the row. With `--truth`,
//! the scorecard (`replay --truth`'s) follows, and with `--pid` and
//! `--addr` one page's timeline (`explain`'s). The page is drawn
//! by `numa_render::report`; this module picks the output file.
use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{bail, Context, Result};
use numa_core::{
    model::{policy::KernelDefaults, scorecard::Scorecard},
    sink::Sink,
};
use numa_render::report::Extras;
use numa_source::Source;

use crate::{
    cli::{ReportArgs, TruthSource},
    evaluate::Judging,
    progress,
};

/// The page's name without `-o`, in the current directory.
const DEFAULT_OUTPUT: &str = "report.html";

/// Writes the page to `-o` (replacing a regular file there; `-` is
/// standard output), else to report.html in the current directory if no
/// file has that name: a report the user did not name is never replaced.
pub(crate) fn run(args: &ReportArgs) -> Result<ExitCode> {
    for (flag, on) in [("--json", args.models.json), ("--csv", args.models.csv)] {
        if on {
            bail!(
                "report writes an HTML page, not {flag}: for the models' figures as data run \
                 `numatrace replay TRACE {flag}`"
            );
        }
    }
    check_distinct(&args.traces)?;
    let out = match &args.models.output {
        Some(o) => o.clone(),
        None => {
            let out = PathBuf::from(DEFAULT_OUTPUT);
            if out.symlink_metadata().is_ok() {
                bail!(
                    "{DEFAULT_OUTPUT} exists in this directory and is not replaced unless named: \
                     give -o {DEFAULT_OUTPUT} to replace it, another -o FILE, or -o - for \
                     standard output"
                );
            }
            out
        }
    };
    let mut inputs: Vec<&Path> = args.traces.iter().map(PathBuf::as_path).collect();
    inputs.extend(args.truth.as_ref().and_then(TruthSource::file));
    numa_host::fs::check_not_input(Some(&out), &inputs)?;
    let scorecard = match (&args.truth, &args.traces[..]) {
        (Some(truth), [trace]) => Some(scorecard(trace, truth, args)?),
        (Some(_), _) => bail!(
            "--truth scores one trace against the run it records; {} were given: report on \
             that trace alone",
            args.traces.len()
        ),
        (None, _) => None,
    };
    let page = match (args.pid, args.addr, &args.traces[..]) {
        (Some(pid), Some(addr), [trace]) => Some(crate::page_timeline(
            trace,
            pid,
            addr,
            match &args.truth {
                Some(TruthSource::FromTrace) => bail!(
                    "--truth from-trace with --pid and --addr: DAMON's sample is of regions, \
                     not of one page; give the test bed's truth file for a page's accesses"
                ),
                t => t.as_ref().and_then(TruthSource::file),
            },
        )?),
        (Some(_), _, _) => bail!(
            "--pid and --addr follow a page of one trace; {} were given: report on that \
             trace alone",
            args.traces.len()
        ),
        _ => None,
    };
    let mut read = |path: &Path, sinks: &mut [&mut dyn Sink]| {
        let bar = progress::Bar::trace(path, progress::Output::AtEnd);
        Ok(Source::read_file(path, sinks, &mut |at| bar.at(at))?.warning)
    };
    let html = numa_render::report::render(
        &args.traces,
        &args.models.sel.models,
        Extras {
            scorecard: scorecard.as_ref(),
            timeline: page.as_ref(),
        },
        &mut read,
    )?;
    crate::write_output(Some(&out), html.as_bytes())?;
    log::info!("wrote {}", out.display());
    Ok(ExitCode::SUCCESS)
}

/// The trace's promotions, the models' of `--model`, judged against the
/// truth file.
fn scorecard(trace: &Path, truth: &TruthSource, args: &ReportArgs) -> Result<Scorecard> {
    let header = numa_core::trace::Reader::open(trace)?.header;
    let k = KernelDefaults::from_host(&header.tunables, header.params.as_ref());
    let mut j = Judging::new(truth, trace, &header, args.models.sel.policies(&k)?)?;
    crate::read_trace(trace, progress::Output::AtEnd, &mut j.sinks())?;
    j.judge(truth, &args.score)
}

/// Refuses a trace named twice (the same file by any path): its column
/// would only repeat another.
fn check_distinct(paths: &[PathBuf]) -> Result<()> {
    let mut seen: Vec<(PathBuf, &Path)> = Vec::with_capacity(paths.len());
    for p in paths {
        let real = std::fs::canonicalize(p)
            .with_context(|| format!("cannot read trace {}: check the path", p.display()))?;
        if let Some((_, first)) = seen.iter().find(|(r, _)| *r == real) {
            let also = if first == p {
                String::new()
            } else {
                format!(" (also as {})", first.display())
            };
            bail!(
                "trace {} is given twice{also}: name each trace once",
                p.display()
            );
        }
        seen.push((real, p));
    }
    Ok(())
}
