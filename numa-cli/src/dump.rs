//! `numatrace dump TRACE`: every record as one JSON line (like `perf script`),
//! for ad-hoc analysis with jq or pandas.
use std::{io::Write, path::Path, process::ExitCode};

use anyhow::Result;
use serde_json::json;

use numa_core::{
    decode::{comm, Event},
    trace::{Item, Reader},
};

pub fn event_json(ev: &Event) -> serde_json::Value {
    match ev {
        Event::Fault(f) => json!({
            "type": "fault", "ts_ns": f.ts_ns, "cpu": f.cpu,
            "pid": f.pid_tgid >> 32, "tid": f.pid_tgid & 0xffff_ffff, "comm": comm(&f.comm),
            "cgroup_id": f.cgroup_id, "addr": format!("{:#x}", f.addr), "folio": format!("{:#x}", f.folio),
            "seq_global": f.seq_global, "seq_mm": f.seq_mm,
            "scan_ns": f.scan_ns, "scan_seq_global": f.scan_seq_global, "scan_seq_mm": f.scan_seq_mm,
            "kernel_latency_ms": f.kernel_latency_ms, "threshold_ms": f.threshold_ms,
            "nr_pages": f.nr_pages, "src_nid": f.src_nid, "dst_nid": f.dst_nid, "tnf_flags": f.tnf_flags,
            "scan_count": f.scan_count,
            "outcome": numa_ebpf_common::Outcome::from_u8(f.outcome).map_or("?", |o| o.name()),
            "decision": f.decision, "migrate_ok": f.migrate_ok, "flags": f.flags,
        }),
        Event::Scan(s) => json!({
            "type": "scan", "ts_ns": s.ts_ns, "cpu": s.cpu, "pid": s.pid_tgid >> 32,
            "start": format!("{:#x}", s.start), "end": format!("{:#x}", s.end),
            "ptes_updated": s.ptes_updated, "stamps": s.stamps, "seq_global": s.seq_global, "seq_mm": s.seq_mm,
        }),
        Event::Skip(s) => json!({
            "type": "vma_skip", "ts_ns": s.ts_ns, "pid": s.pid_tgid >> 32,
            "reason": numa_core::decode::skip_reason(s.reason).unwrap_or("?"),
            "vm_start": format!("{:#x}", s.vm_start), "vm_end": format!("{:#x}", s.vm_end),
        }),
    }
}

pub fn run(path: &Path) -> Result<ExitCode> {
    let mut reader = Reader::open(path)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    writeln!(
        out,
        "{}",
        json!({"type": "header", "header": &reader.header})
    )?;
    for item in reader.by_ref() {
        let line = match item? {
            Item::Event(ev) => event_json(&ev),
            Item::Snapshot(s) => json!({"type": "snapshot", "snapshot": s}),
            Item::Footer(f) => json!({"type": "footer", "footer": f}),
        };
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    if let Some(w) = &reader.warning {
        eprintln!("numatrace: warning: {w}");
    }
    Ok(ExitCode::SUCCESS)
}
