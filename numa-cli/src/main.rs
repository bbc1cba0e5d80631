//! `numatrace`: parse -> run -> exit code.
//!
//! Data flows one way: kernel event -> decode -> model -> sinks. This crate
//! holds the userspace half; the BPF programs live in `numa-ebpf` and are
//! embedded at build time (see build.rs).
use std::{io::Write, process::ExitCode};

use anyhow::Result;
use clap::Parser;

// Every module lives in the library (lib.rs): add new ones there.
use numa_cli::{
    cli, dump, evaluate, export, hist, move_pages, promote, report, stats, top, workload,
};
use numa_probe::doctor;

fn run(cli: cli::Cli) -> Result<ExitCode> {
    match cli.command {
        cli::Command::Doctor { json } => {
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
        cli::Command::Dump { trace } => dump::run(&trace),
        cli::Command::Shadow(args) => evaluate::shadow(&args),
        cli::Command::Replay(args) => evaluate::replay(&args),
        cli::Command::Report(args) => report::run(&args),
        cli::Command::Export(args) => export::run(&args),
        cli::Command::Hist(args) => hist::run(&args),
        cli::Command::Top(args) => top::run(&args),
        cli::Command::Workload(cli::Workload::HotChunks(args)) => workload::hot_chunks(&args),
        cli::Command::Promote(args) => promote::run(&args),
        cli::Command::Workload(cli::Workload::MovePages(args)) => move_pages::move_pages(&args),
    }
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("numatrace: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
