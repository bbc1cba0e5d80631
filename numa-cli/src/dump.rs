//! `numatrace dump TRACE`: every record as one JSON line (like `perf script`),
//! for ad-hoc analysis with jq or pandas; or, `--format parquet`, the hint
//! faults as a Parquet file for SQL engines. Both are written by
//! `numa_render::dump`; this module opens the files and names the host.
use std::{
    io::{BufWriter, Write},
    path::Path,
    process::ExitCode,
};

use anyhow::{bail, Result};
use numa_core::trace::Reader;
use numa_host::fs::{check_not_input, Output};
use numa_render::dump::{parquet, write};

use crate::cli::{DumpArgs, DumpFormat};

/// A JSON dump holds kernel addresses, as traces do.
const JSON_MODE: u32 = 0o600;

pub(crate) fn run(args: &DumpArgs) -> Result<ExitCode> {
    check_not_input(args.output.as_deref(), &[&args.trace])?;
    match args.format {
        DumpFormat::Json if args.demotions => bail!(
            "--demotions chooses the rows of --format parquet; the JSON dump already has every \
             demotion record (\"type\":\"demote\"): drop --demotions, or add --format parquet"
        ),
        DumpFormat::Json => json_dump(&args.trace, args.output.as_deref()),
        DumpFormat::Parquet => parquet_dump(args),
    }
}

fn json_dump(path: &Path, output: Option<&Path>) -> Result<ExitCode> {
    let reader = Reader::open(path)?;
    // Records stream to stdout; to a file, the output is only there at the end.
    let shown = match output {
        None => crate::progress::Output::Streamed,
        Some(_) => crate::progress::Output::AtEnd,
    };
    // The bar goes (dropped) before the warning is printed.
    let warning = {
        let bar = crate::progress::Bar::trace(path, shown);
        let mut progress = |at| bar.at(at);
        match output {
            None => {
                let mut out = BufWriter::new(std::io::stdout().lock());
                let w = write(reader, &mut out, &mut progress)?;
                out.flush()?;
                w
            }
            Some(file) => {
                let mut out = BufWriter::new(Output::create(file, JSON_MODE)?);
                let w = write(reader, &mut out, &mut progress)?;
                out.into_inner().map_err(|e| e.into_error())?.commit()?;
                w
            }
        }
    };
    if let Some(w) = warning {
        log::warn!("{w}");
    }
    Ok(ExitCode::SUCCESS)
}

fn parquet_dump(args: &DumpArgs) -> Result<ExitCode> {
    let Some(output) = args.output.as_deref().filter(|o| *o != Path::new("-")) else {
        bail!(
            "--format parquet writes a binary file, not text for a terminal or pipe: \
             give it one with -o FILE (e.g. -o $(hostname).parquet)"
        );
    };
    let header = Reader::open(&args.trace)?.header;
    let host = match &args.host {
        Some(h) => h.clone(),
        None => default_host(&header.hostname, &args.trace)?,
    };
    let (rows_of, what) = if args.demotions {
        (parquet::Rows::Demotions, "demotion records")
    } else {
        (parquet::Rows::Faults, "hint faults")
    };
    let mut sink = parquet::ParquetSink::create(output, &header, host, rows_of)?;
    crate::read_trace(
        &args.trace,
        crate::progress::Output::AtEnd,
        &mut [&mut sink],
    )?;
    let rows = sink.finish()?;
    log::info!("wrote {rows} {what} to {}", output.display());
    Ok(ExitCode::SUCCESS)
}

/// The host the trace recorded, else (a trace from before numatrace
/// recorded it) the trace's file name without its extension
/// (`web-3.trace`: `web-3`), as checked for `--host`.
fn default_host(recorded: &str, trace: &Path) -> Result<String> {
    if let Ok(host) = crate::cli::ranges::host_name(recorded) {
        return Ok(host);
    }
    let stem = trace
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::cli::ranges::host_name(&stem).map_err(|e| {
        anyhow::anyhow!(
            "no host name from the trace's file name {:?} ({e}): give one with --host NAME",
            trace.display().to_string()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_host_is_the_recorded_one_else_the_file_stem() {
        let trace = Path::new("/x/web-3.trace");
        assert_eq!(default_host("db-1", trace).expect("recorded"), "db-1");
        assert_eq!(default_host("", trace).expect("stem"), "web-3");
        let err = default_host("", Path::new("/x/a b.trace")).expect_err("a space");
        assert!(err.to_string().contains("--host NAME"), "{err}");
    }
}
