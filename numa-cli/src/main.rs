//! `numatrace`: parse -> run -> exit code. One module per command turns
//! its flags (`cli`) into calls of the library crates under `crates/`,
//! where the sources, models and sinks live.
// Dev-dependencies are for the integration tests and benches.
#![cfg_attr(test, allow(unused_crate_dependencies))]
mod cli;
mod docs;
mod dump;
mod evaluate;
mod export;
mod hist;
mod logging;
mod move_pages;
mod progress;
mod promote;
mod report;
mod stats;
mod ticker;
mod top;
mod workload;

use std::{io::Write, path::Path, process::ExitCode};

use anyhow::{Context, Result};
use numa_core::sink::Sink;
use numa_probe::doctor;
use numa_source::Source;

/// Mode of the files numatrace writes for people to read (reports,
/// summaries): they hold no kernel addresses, unlike traces.
const OUTPUT_MODE: u32 = 0o644;

/// Writes a finished output to `path`, replacing the file there atomically
/// and never writing through a symlink (`numa_host::fs::write_atomic`), or
/// to stdout without a path.
fn write_output(path: Option<&Path>, bytes: &[u8]) -> Result<()> {
    match path {
        Some(p) => numa_host::fs::write_atomic(p, bytes, OUTPUT_MODE)?,
        None => std::io::stdout().lock().write_all(bytes)?,
    }
    Ok(())
}

/// Feeds a trace file to `sinks` at full speed, with a progress bar on a
/// terminal (see `progress`), then warns on stderr about a truncated or
/// damaged trace.
fn read_trace(path: &Path, output: progress::Output, sinks: &mut [&mut dyn Sink]) -> Result<()> {
    let finished = {
        let bar = progress::Bar::trace(path, output);
        Source::read_file(path, sinks, &mut |at| bar.at(at))?
    };
    if let Some(w) = finished.warning {
        log::warn!("{w}");
    }
    Ok(())
}

/// One page's timeline (see `numa_render::explain`): two passes over the
/// trace, then a truth file's accesses when one is given.
pub(crate) fn page_timeline(
    trace: &std::path::Path,
    pid: u32,
    addr: u64,
    truth: Option<&std::path::Path>,
) -> Result<numa_render::explain::Timeline> {
    use numa_render::explain::{Identities, Target, Timeline};
    let header = numa_core::trace::Reader::open(trace)?.header;
    let target = Target::new(pid, addr);
    let mut ids = Identities::new(target);
    read_trace(trace, progress::Output::AtEnd, &mut [&mut ids])?;
    let mut timeline = Timeline::new(target, ids, &header)?;
    read_trace(trace, progress::Output::AtEnd, &mut [&mut timeline])?;
    if let Some(path) = truth {
        timeline
            .add_truth(open_truth(path)?)
            .with_context(|| format!("--truth {}", path.display()))?;
    }
    Ok(timeline)
}

/// The truth file `--truth` names, its header read.
pub(crate) fn open_truth(
    path: &std::path::Path,
) -> Result<numa_core::truth::TruthReader<std::fs::File>> {
    let named = || format!("--truth {}", path.display());
    let file = std::fs::File::open(path).with_context(named)?;
    numa_core::truth::TruthReader::new(file).with_context(named)
}

/// `explain`: one page's timeline as text or JSON.
fn explain(args: &cli::ExplainArgs) -> Result<ExitCode> {
    let timeline = page_timeline(&args.trace, args.pid, args.addr, args.truth.as_deref())?;
    let out = if args.json {
        let mut v = serde_json::to_vec_pretty(&timeline)?;
        v.push(b'\n');
        v
    } else {
        timeline.text().into_bytes()
    };
    write_output(None, &out)?;
    Ok(ExitCode::SUCCESS)
}

/// `doctor --loaded`: the BPF objects in the kernel now.
fn doctor_loaded(json: bool) -> Result<ExitCode> {
    let loaded = numa_probe::loaded::scan()?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &loaded)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    write!(out, "{loaded}")?;
    Ok(ExitCode::SUCCESS)
}

fn run(cli: cli::Cli) -> Result<ExitCode> {
    match cli.command {
        cli::Command::Doctor { json, loaded: true } => doctor_loaded(json),
        cli::Command::Doctor { json, .. } => {
            let report = doctor::run();
            let mut out = std::io::stdout().lock();
            if json {
                serde_json::to_writer_pretty(&mut out, &report)?;
                writeln!(out)?;
            } else {
                doctor::print_human(&report, &mut out)?;
            }
            Ok(if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        cli::Command::Stats(args) => stats::stats(&args),
        cli::Command::Record(args) => stats::record(&args),
        cli::Command::Dump(args) => dump::run(&args),
        cli::Command::Shadow(args) => evaluate::shadow(&args),
        cli::Command::Replay(args) => evaluate::replay(&args),
        cli::Command::Report(args) => report::run(&args),
        cli::Command::Export(args) => export::run(&args),
        cli::Command::Hist(args) => hist::run(&args),
        cli::Command::Explain(args) => explain(&args),
        cli::Command::Top(args) => top::run(&args),
        cli::Command::Workload(cli::Workload::HotChunks(args)) => workload::hot_chunks(&args),
        cli::Command::Promote(args) => promote::run(&args),
        cli::Command::Workload(cli::Workload::MovePages(args)) => move_pages::move_pages(&args),
        cli::Command::Workload(cli::Workload::Ticker(args)) => ticker::run(&args),
        cli::Command::Workload(cli::Workload::Known(args)) => workload::known::run(&args),
        cli::Command::Completions { shell } => docs::completions(shell),
        cli::Command::Manpages { dir } => docs::manpages(&dir),
    }
}

fn main() -> ExitCode {
    let cli = cli::try_parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit());
    if let Err(e) = logging::init(cli.verbose, cli.quiet) {
        eprintln!("numatrace: error: {e:#}");
        return ExitCode::from(2);
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            logging::fatal(&e);
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn outputs_replace_a_planted_symlink_with_a_readable_file() {
        let dir =
            std::env::temp_dir().join(format!("numatrace-write-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").expect("victim");
        let out = dir.join("summary.json");
        std::os::unix::fs::symlink(&victim, &out).expect("symlink");
        super::write_output(Some(&out), b"{}").expect("write");
        let meta = std::fs::symlink_metadata(&out).expect("meta");
        let (is_file, mode) = (meta.is_file(), meta.mode() & 0o777);
        let (got, kept) = (std::fs::read(&out), std::fs::read(&victim));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(is_file);
        // 0644 less the umask: never writable by others.
        assert_eq!(mode & !0o644, 0, "{mode:o}");
        assert_eq!(got.expect("read"), b"{}");
        assert_eq!(kept.expect("victim"), b"precious");
    }
}
