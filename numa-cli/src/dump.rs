//! `numatrace dump TRACE`: every record as one JSON line (like `perf script`),
//! for ad-hoc analysis with jq or pandas; or, `--format parquet`, the hint
//! faults as a Parquet file for SQL engines (see `parquet`).
mod parquet;

use std::{
    io::{BufWriter, Read, Write},
    path::Path,
    process::ExitCode,
};

use anyhow::{bail, Result};
use serde_json::json;

use numa_core::{
    decode::{comm, Event},
    trace::{Item, Reader},
};
use numa_host::fs::{check_not_input, Output};

use crate::cli::{DumpArgs, DumpFormat};

/// A JSON dump holds kernel addresses, as traces do.
const JSON_MODE: u32 = 0o600;

pub fn event_json(ev: &Event) -> serde_json::Value {
    match ev {
        Event::Fault(f) => json!({
            "type": "fault", "ts_ns": f.ts_ns, "cpu": f.cpu,
            "pid": f.tgid(), "tid": f.tid(), "comm": comm(&f.comm),
            "cgroup_id": f.cgroup_id, "addr": format!("{:#x}", f.addr), "folio": format!("{:#x}", f.folio),
            "seq_global": f.seq_global, "seq_mm": f.seq_mm,
            "scan_ns": f.scan_ns, "scan_seq_global": f.scan_seq_global, "scan_seq_mm": f.scan_seq_mm,
            "kernel_latency_ms": f.kernel_latency_ms, "threshold_ms": f.threshold_ms,
            "nr_pages": f.nr_pages, "src_nid": f.src_nid, "dst_nid": f.dst_nid, "tnf_flags": f.tnf_flags,
            "scan_count": f.scan_count,
            "outcome": numa_ebpf_common::Outcome::from_u8(f.outcome).map_or("?", |o| o.name()),
            "decision": f.decision, "migrate_ok": f.migrate_ok, "flags": f.flags,
            "pc_count": f.pc_count, "pc_stored": f.pc_stored, "pc_stored_ns": f.pc_stored_ns,
            "node_candidates": f.node_candidates, "ext_flags": f.ext_flags,
            "access_at_fault": f.access_at_fault, "access_after": f.access_after,
        }),
        Event::Scan(s) => json!({
            "type": "scan", "ts_ns": s.ts_ns, "cpu": s.cpu, "pid": s.tgid(),
            "start": format!("{:#x}", s.start), "end": format!("{:#x}", s.end),
            "ptes_updated": s.ptes_updated, "stamps": s.stamps, "seq_global": s.seq_global, "seq_mm": s.seq_mm,
            "pc_count": s.pc_count, "ext_flags": s.ext_flags,
            "access_first": s.access_first, "access_last": s.access_last,
        }),
        Event::Skip(s) => json!({
            "type": "vma_skip", "ts_ns": s.ts_ns, "pid": s.tgid(),
            "reason": numa_core::decode::skip_reason(s.reason).unwrap_or("?"),
            "vm_start": format!("{:#x}", s.vm_start), "vm_end": format!("{:#x}", s.vm_end),
        }),
    }
}

pub fn run(args: &DumpArgs) -> Result<ExitCode> {
    check_not_input(args.output.as_deref(), &[&args.trace])?;
    match args.format {
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
    let mut sink = parquet::ParquetSink::create(output, &header, host)?;
    crate::read_trace(
        &args.trace,
        crate::progress::Output::AtEnd,
        &mut [&mut sink],
    )?;
    let rows = sink.finish()?;
    log::info!("wrote {rows} hint faults to {}", output.display());
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

/// Writes the header and every record as JSON lines; damaged records are
/// skipped. `progress` is told the bytes read every few thousand records.
/// Returns the warning about what was skipped or cut short.
fn write<R: Read>(
    mut reader: Reader<R>,
    out: &mut impl Write,
    progress: &mut dyn FnMut(u64),
) -> Result<Option<String>> {
    writeln!(
        out,
        "{}",
        json!({"type": "header", "header": &reader.header})
    )?;
    let mut damaged = 0;
    let mut n = 0u32;
    while let Some(item) = reader.next() {
        n += 1;
        if n == numa_source::PROGRESS_EVERY {
            n = 0;
            progress(reader.offset());
        }
        let line = match item {
            Ok(Item::Event(ev)) => event_json(&ev),
            Ok(Item::Snapshot(s)) => json!({"type": "snapshot", "snapshot": s}),
            Ok(Item::Footer(f)) => json!({"type": "footer", "footer": f}),
            Err(e) if numa_source::is_damaged_record(&e) => {
                damaged += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        writeln!(out, "{line}")?;
    }
    progress(reader.offset());
    Ok(numa_source::trace_warning(reader.warning.clone(), damaged))
}

#[cfg(test)]
mod tests {
    use numa_core::{
        decode::{fixtures::fault, raw_bytes},
        trace::{fixtures::header, Writer},
    };
    use numa_ebpf_common::Outcome;

    use super::*;

    /// A trace of three hint faults (latency 5 ms) whose middle record is
    /// damaged.
    pub(super) fn damaged_trace() -> Vec<u8> {
        let events: Vec<Event> = (1..=3)
            .map(|i| Event::Fault(fault(i, i, 5, Outcome::PromoteHot)))
            .collect();
        let mut w = Writer::new(Vec::new(), &header()).expect("writer");
        for ev in &events {
            w.event(ev).expect("event");
        }
        let mut bytes = w.finish(9, "duration").expect("finish");
        // The middle record's tag (before its u32 length) becomes unknown.
        let payload = raw_bytes(&events[1]);
        let at = bytes
            .windows(payload.len())
            .position(|x| x == payload)
            .expect("the record's payload");
        bytes[at - 5] = 9;
        bytes
    }

    #[test]
    fn the_default_host_is_the_recorded_one_else_the_file_stem() {
        let trace = Path::new("/x/web-3.trace");
        assert_eq!(default_host("db-1", trace).expect("recorded"), "db-1");
        assert_eq!(default_host("", trace).expect("stem"), "web-3");
        let err = default_host("", Path::new("/x/a b.trace")).expect_err("a space");
        assert!(err.to_string().contains("--host NAME"), "{err}");
    }

    #[test]
    fn a_damaged_record_is_skipped_and_counted() {
        let bytes = damaged_trace();
        let mut out = Vec::new();
        let warning = write(
            Reader::new(&bytes[..]).expect("reader"),
            &mut out,
            &mut |_| {},
        )
        .expect("a damaged record does not end the dump");
        let types: Vec<String> = String::from_utf8(out)
            .expect("utf8")
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).expect("json")["type"].to_string()
            })
            .collect();
        assert_eq!(
            types,
            ["\"header\"", "\"fault\"", "\"fault\"", "\"footer\""]
        );
        assert!(
            warning.is_some_and(|w| w.contains("skipped 1 damaged record")),
            "the count is reported"
        );
    }
}
