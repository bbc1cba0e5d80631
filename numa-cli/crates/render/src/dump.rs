//! The trace as records for other tools: every record as one JSON line
//! (like `perf script`), for ad-hoc analysis with jq or pandas; or the hint
//! faults as a Parquet file for SQL engines (see `parquet`).
pub mod parquet;

use std::io::{Read, Write};

use anyhow::Result;
use serde_json::json;

use numa_core::{
    decode::{comm, Event},
    trace::{Item, Reader},
};

/// One record as its JSON line's object.
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
            "src_pfn": f.src_pfn, "dst_pfn": f.dst_pfn,
            "scan_count": f.scan_count,
            "outcome": numa_ebpf_common::Outcome::from_u8(f.outcome).map_or("?", |o| o.name()),
            "decision": f.decision, "migrate_ok": f.migrate_ok, "flags": f.flags,
            "mm_fault_count": f.mm_fault_count, "stored_fault_count": f.stored_fault_count, "stored_fault_count_ns": f.stored_fault_count_ns,
            "node_candidates": f.node_candidates, "ext_flags": f.ext_flags,
            "access_at_fault": f.access_at_fault, "access_after": f.access_after,
        }),
        Event::Scan(s) => json!({
            "type": "scan", "ts_ns": s.ts_ns, "cpu": s.cpu, "pid": s.tgid(),
            "start": format!("{:#x}", s.start), "end": format!("{:#x}", s.end),
            "ptes_updated": s.ptes_updated, "seq_global": s.seq_global, "seq_mm": s.seq_mm,
            "mm_fault_count": s.mm_fault_count, "ext_flags": s.ext_flags,
            "access_first": s.access_first, "access_last": s.access_last,
            "cgroup_id": s.cgroup_id,
        }),
        Event::Skip(s) => json!({
            "type": "vma_skip", "ts_ns": s.ts_ns, "pid": s.tgid(),
            "reason": numa_core::decode::skip_reason(s.reason).unwrap_or("?"),
            "vm_start": format!("{:#x}", s.vm_start), "vm_end": format!("{:#x}", s.vm_end),
            "cgroup_id": s.cgroup_id,
        }),
        Event::Demote(d) => json!({
            "type": "demote", "ts_ns": d.ts_ns, "pid": numa_ebpf_common::tgid_of(d.pid_tgid),
            "reclaimer": d.reclaimer_name(),
            "src_pfn": d.src_pfn, "dst_pfn": d.dst_pfn, "src_nid": d.src_nid, "dst_nid": d.dst_nid,
            "mapping": format!("{:#x}", d.mapping), "index": d.index, "nr_pages": d.nr_pages,
        }),
        Event::Damon(d) => json!({
            "type": "damon", "ts_ns": d.ts_ns, "kdamond_tid": d.kdamond_tid,
            "target_id": d.target_id, "nr_regions": d.nr_regions,
            "start": format!("{:#x}", d.start), "end": format!("{:#x}", d.end),
            "nr_accesses": d.nr_accesses, "age": d.age,
        }),
    }
}

/// Writes the header and every record as JSON lines; damaged records are
/// skipped. `progress` is told the bytes read every few thousand records.
/// Returns the warning about what was skipped or cut short.
pub fn write<R: Read>(
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
    pub(crate) fn damaged_trace() -> Vec<u8> {
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
