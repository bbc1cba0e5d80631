//! Round trips, damaged files, and refused records and headers.
use numa_ebpf_common::Outcome;

use super::{fixtures::header, *};
use crate::decode::fixtures::fault;

fn sample_trace() -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), &header()).expect("writer");
    for i in 1..=3 {
        w.event(&Event::Fault(fault(i, i, 100 * i, Outcome::PromoteHot)))
            .expect("event");
    }
    w.snapshot(&Snapshot {
        ts_ns: 5,
        counters: vec![3],
        ..Default::default()
    })
    .expect("snap");
    w.finish(9, "duration").expect("finish")
}

fn read_all(bytes: &[u8]) -> (Vec<Item>, Option<String>) {
    let mut r = Reader::new(bytes).expect("reader");
    let items: Vec<Item> = r.by_ref().collect::<Result<_, _>>().expect("items");
    (items, r.warning)
}

#[test]
fn roundtrip() {
    let (items, warning) = read_all(&sample_trace());
    assert_eq!(items.len(), 5);
    assert!(warning.is_none());
    assert!(matches!(&items[0], Item::Event(Event::Fault(f)) if f.seq_global == 1));
    assert!(matches!(&items[4], Item::Footer(f) if f.events == 3 && f.reason == "duration"));
}

#[test]
fn truncated_file_reads_complete_records_and_warns() {
    let bytes = sample_trace();
    // Cut inside the second fault record.
    let cut = bytes.len() - 200;
    let (items, warning) = read_all(&bytes[..cut]);
    assert!(
        !items.is_empty() && items.len() < 5,
        "{} items",
        items.len()
    );
    assert!(warning.is_some_and(|w| w.contains("truncated")));
}

#[test]
fn missing_footer_warns() {
    let mut w = Writer::new(Vec::new(), &header()).expect("writer");
    w.event(&Event::Fault(fault(1, 1, 1, Outcome::PromoteHot)))
        .expect("event");
    let bytes = w.out;
    let (items, warning) = read_all(&bytes);
    assert_eq!(items.len(), 1);
    assert!(warning.is_some_and(|w| w.contains("no footer")));
}

/// Hands out at most 7 bytes per read: records straddle every refill.
struct Trickle<'a>(&'a [u8]);
impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.0.len()).min(7);
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

fn describe(items: &[Item]) -> Vec<String> {
    items.iter().map(|i| format!("{i:?}")).collect()
}

#[test]
fn short_reads_and_records_bigger_than_the_buffer() {
    let mut w = Writer::new(Vec::new(), &header()).expect("writer");
    let big = Snapshot {
        ts_ns: 1,
        vmstat: (0..1000).map(|i| (format!("counter_{i}"), i)).collect(),
        ..Default::default()
    };
    // A record of several MiB (JSON allows the blanks): bigger than one
    // refill.
    let mut payload = serde_json::to_vec(&big).expect("json");
    payload.extend(std::iter::repeat_n(b' ', 3 * READ_CHUNK));
    for i in 1..=2000 {
        w.event(&Event::Fault(fault(i, i % 7, i, Outcome::RejectLatency)))
            .expect("event");
        if i % 1000 == 0 {
            w.record(TAG_SNAPSHOT, &payload).expect("snap");
        }
    }
    let bytes = w.finish(9, "duration").expect("finish");
    assert!(bytes.len() > 3 * READ_CHUNK);
    let (items, warning) = read_all(&bytes);
    assert!(warning.is_none());
    assert_eq!(items.len(), 2003);
    assert!(matches!(&items[1000], Item::Snapshot(s) if s.vmstat.len() == 1000));
    assert!(matches!(&items[1001], Item::Event(Event::Fault(f)) if f.seq_global == 1001));
    let mut r = Reader::new(Trickle(&bytes)).expect("reader");
    let trickled: Vec<Item> = r.by_ref().collect::<Result<_, _>>().expect("items");
    assert!(r.warning.is_none());
    assert_eq!(describe(&trickled), describe(&items));
}

#[test]
fn cut_inside_a_record_header_and_corrupt_lengths() {
    let bytes = sample_trace();
    let footer = serde_json::to_vec(&Footer {
        ended_mono_ns: 9,
        events: 3,
        reason: "duration".into(),
    })
    .expect("json");
    let footer_at = bytes.len() - RECORD_HEAD - footer.len();
    assert_eq!(bytes[footer_at], TAG_FOOTER);
    for cut in footer_at + 1..footer_at + RECORD_HEAD {
        let (items, warning) = read_all(&bytes[..cut]);
        assert_eq!(items.len(), 4);
        assert!(
            warning
                .as_deref()
                .is_some_and(|w| w.contains("record header")),
            "{warning:?}"
        );
    }
    let (items, warning) = read_all(&bytes[..footer_at]);
    assert_eq!(items.len(), 4);
    assert!(warning.is_some_and(|w| w.contains("no footer")));
    let mut corrupt = bytes.clone();
    corrupt[footer_at + 1..footer_at + RECORD_HEAD].copy_from_slice(&u32::MAX.to_le_bytes());
    let (items, warning) = read_all(&corrupt);
    assert_eq!(items.len(), 4);
    assert!(warning.is_some_and(|w| w.contains("corrupt record length")));
}

#[test]
fn bad_records_are_errors_and_reading_goes_on() {
    let mut w = Writer::new(Vec::new(), &header()).expect("writer");
    w.record(TAG_FAULT, &[1, 0, 0, 0]).expect("short fault");
    w.record(9, b"?").expect("unknown tag");
    w.event(&Event::Fault(fault(1, 1, 1, Outcome::PromoteHot)))
        .expect("event");
    let bytes = w.finish(9, "duration").expect("finish");
    let mut r = Reader::new(&bytes[..]).expect("reader");
    let got: Vec<String> = r
        .by_ref()
        .map(|i| match i {
            Ok(i) => format!("{i:?}").chars().take(12).collect(),
            Err(e) => e.to_string(),
        })
        .collect();
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(got[0].contains("too short"), "{got:?}");
    assert!(got[1].contains("unknown record tag 9"), "{got:?}");
    assert!(got[2].starts_with("Event(Fault("), "{got:?}");
    assert!(got[3].starts_with("Footer("), "{got:?}");
    let w = r.warning.expect("the first damaged record named");
    assert!(
        w.contains("the first damaged record") && w.contains("too short"),
        "{w}"
    );
}

#[test]
fn wrong_version_and_magic_are_clear_errors() {
    let mut bytes = sample_trace();
    bytes[8] = 99;
    let err = Reader::new(&bytes[..])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("format version 99"), "{err}");
    let err = Reader::new(&b"garbage!garbage"[..])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("not a numatrace trace"), "{err}");
}

#[test]
fn another_record_layout_is_refused_with_the_remedy() {
    let h = Header {
        abi_version: numa_ebpf_common::ABI_VERSION + 1,
        ..header()
    };
    let bytes = Writer::new(Vec::new(), &h)
        .and_then(|w| w.finish(1, "duration"))
        .expect("trace");
    let err = Reader::new(&bytes[..])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("layout version"), "{err}");
    assert!(
        err.contains("read it with the numatrace that recorded it (test)"),
        "{err}"
    );
}

#[test]
fn truncated_header_is_an_error() {
    let bytes = sample_trace();
    let err = Reader::new(&bytes[..20])
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(err.contains("truncated"), "{err}");
}

#[test]
fn crafted_node_ids_are_refused_before_anything_is_kept_per_node() {
    let mut w = Writer::new(Vec::new(), &header()).expect("writer");
    for nid in 0..4096 {
        let mut f = fault(nid as u64 + 1, 1, 1, Outcome::PromoteHot);
        (f.src_nid, f.dst_nid) = (nid, 0);
        w.event(&Event::Fault(f)).expect("event");
    }
    let bytes = w.finish(9, "duration").expect("finish");
    let mut r = Reader::new(&bytes[..]).expect("reader");
    let (mut events, mut refused) = (0, 0);
    for item in r.by_ref() {
        match item {
            Ok(Item::Event(_)) => events += 1,
            Ok(_) => {}
            Err(e) => {
                assert!(e.to_string().contains("MAX_NUMNODES"), "{e}");
                refused += 1;
            }
        }
    }
    assert_eq!((events, refused), (1024, 3072));

    let mut h = header();
    h.memory_tiers = vec![topology::MemoryTier {
        tier: "memory_tier4".into(),
        id: 4,
        nodes: vec![0, 70_000],
    }];
    let bytes = Writer::new(Vec::new(), &h)
        .and_then(|w| w.finish(1, "duration"))
        .expect("trace");
    let err = Reader::new(&bytes[..])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("trace header names node 70000"), "{err}");
}

#[test]
fn offset_counts_the_bytes_of_the_records_returned() {
    let bytes = sample_trace();
    let mut r = Reader::new(Trickle(&bytes)).expect("reader");
    let mut last = r.offset();
    assert!(last > 16, "the header is read");
    while let Some(item) = r.next() {
        item.expect("item");
        assert!(r.offset() > last, "every record moves the offset on");
        last = r.offset();
    }
    assert_eq!(last, bytes.len() as u64, "the whole file, at the end");
}

/// Every consumer keeps snapshots for the whole run: a record's size must
/// not decide how big one is. Series and vmstat tables past the bounds are
/// refused as damaged records, with the bound named, and the rest read.
#[test]
fn oversized_snapshots_are_refused_while_read() {
    use crate::decode::snapshot_bounds::{MAX_SERIES, MAX_VMSTAT, MAX_VMSTAT_NAME};
    let mut w = Writer::new(Vec::new(), &header()).expect("writer");
    let long = Snapshot {
        ts_ns: 1,
        counters: vec![7; MAX_SERIES + 1],
        ..Default::default()
    };
    let wide = Snapshot {
        ts_ns: 2,
        vmstat: (0..=MAX_VMSTAT as u64)
            .map(|i| (format!("c{i}"), i))
            .collect(),
        ..Default::default()
    };
    let named = Snapshot {
        ts_ns: 3,
        vmstat: [("x".repeat(MAX_VMSTAT_NAME + 1), 1)].into(),
        ..Default::default()
    };
    let fits = Snapshot {
        ts_ns: 4,
        counters: vec![7; MAX_SERIES],
        vmstat: (0..MAX_VMSTAT as u64)
            .map(|i| (format!("c{i}"), i))
            .collect(),
        ..Default::default()
    };
    for s in [&long, &wide, &named, &fits] {
        w.snapshot(s).expect("snap");
    }
    let bytes = w.finish(9, "duration").expect("finish");
    let mut r = Reader::new(&bytes[..]).expect("reader");
    let got: Vec<_> = r.by_ref().collect();
    assert_eq!(got.len(), 5, "four snapshots and the footer");
    // The reason reaches the run's warning, once.
    let w = r.warning.expect("a warning");
    assert!(
        w.contains("the first damaged record") && w.contains("(MAX_SERIES)"),
        "{w}"
    );
    for (r, bound) in got[..3]
        .iter()
        .zip(["MAX_SERIES", "MAX_VMSTAT", "MAX_VMSTAT_NAME"])
    {
        let Err(e) = r else {
            panic!("an oversized snapshot was accepted");
        };
        assert!(e.is_damaged_record(), "{e}");
        assert!(e.to_string().contains(&format!("({bound})")), "{e}");
    }
    assert!(matches!(&got[3], Ok(Item::Snapshot(s)) if *s == fits));
}

/// The committed fixture was recorded before the probes read the
/// fault-count patch's inputs: numatrace's own per-process counter
/// (`seq_mm`) stands in for the patch's, so the `fault-count` policy still
/// answers on it, with the threshold path inferred from the outcome and no
/// node-wide candidate count.
#[test]
fn the_fixture_carries_numatraces_counter_for_the_patch_inputs() {
    use numa_ebpf_common::{ext_flags as xf, scan_ext_flags};
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/testdata/hot-chunks-6.12.trace");
    let mut r = Reader::open(&path).expect("fixture");
    let (mut faults, mut scans, mut all_three) = (0, 0, 0);
    for item in &mut r {
        match item.expect("every record decodes") {
            Item::Event(Event::Fault(f)) => {
                faults += 1;
                assert_eq!(f.mm_fault_count, f.seq_mm as u32);
                assert_eq!(f.node_candidates, 0);
                assert_eq!(f.ext_flags & xf::NODE_CANDIDATES, 0);
                assert_ne!(f.ext_flags & xf::MM_FAULT_COUNT, 0);
                let stored = f.has_stamp() && !f.stamp_other_mm();
                assert_eq!(f.ext_flags & xf::STORED_FAULT_COUNT != 0, stored);
                if stored {
                    assert_eq!(f.stored_fault_count, f.scan_seq_mm as u32);
                    assert_eq!(f.stored_fault_count_ns, f.scan_ns);
                }
                let past = matches!(
                    Outcome::from_u8(f.outcome),
                    Some(Outcome::PromoteHot | Outcome::RejectLatency | Outcome::RejectRateLimit)
                );
                assert_eq!(
                    f.ext_flags & xf::THRESHOLD_PATH != 0,
                    past || f.has_kernel_latency()
                );
                if f.ext_flags == xf::MM_FAULT_COUNT | xf::STORED_FAULT_COUNT | xf::THRESHOLD_PATH {
                    all_three += 1;
                }
            }
            Item::Event(Event::Scan(s)) => {
                scans += 1;
                assert_eq!(s.mm_fault_count, s.seq_mm as u32);
                assert_eq!(s.ext_flags, scan_ext_flags::MM_FAULT_COUNT);
            }
            _ => {}
        }
    }
    assert_eq!(r.warning, None);
    assert!(
        faults > 0 && scans > 0 && all_three > 0,
        "{faults} {scans} {all_three}"
    );
}

#[test]
fn damon_records_round_trip_and_count_as_records() {
    use crate::decode::fixtures::{damon_region, demotion};
    let region = damon_region(7, 0x1_0000_0000, 5);
    let mut w = Writer::new(Vec::new(), &header()).expect("writer");
    w.event(&Event::Fault(fault(1, 1, 1, Outcome::PromoteHot)))
        .expect("fault");
    w.event(&Event::Damon(region)).expect("damon");
    w.event(&Event::Demote(demotion(8, 0xa1, 3)))
        .expect("demotion");
    let bytes = w.finish(9, "duration").expect("finish");
    let mut r = Reader::new(&bytes[..]).expect("reader");
    assert_eq!(r.header.damon_record_size, damon_record_size());
    let items: Vec<Item> = r.by_ref().collect::<Result<_, _>>().expect("items");
    assert!(r.warning.is_none(), "{:?}", r.warning);
    assert!(matches!(&items[1], Item::Event(Event::Damon(d)) if *d == region));
    assert!(matches!(&items[2], Item::Event(Event::Demote(d)) if d.index == 3));
    assert!(matches!(&items[3], Item::Footer(f) if f.events == 3));
}

/// `trace` with its header rewritten by `edit` (as JSON).
fn with_header(trace: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let at = MAGIC.len() + 4;
    let len = u32::from_le_bytes([trace[at], trace[at + 1], trace[at + 2], trace[at + 3]]);
    let body = at + 4 + len as usize;
    let mut json: serde_json::Value =
        serde_json::from_slice(&trace[at + 4..body]).expect("header JSON");
    edit(&mut json);
    let json = serde_json::to_vec(&json).expect("header JSON");
    let mut out = trace[..at].to_vec();
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&trace[body..]);
    out
}

#[test]
fn a_trace_written_before_damon_records_still_reads() {
    let older = with_header(&sample_trace(), |h| {
        h.as_object_mut()
            .expect("header object")
            .remove("damon_record_size")
            .expect("today's header names the size");
    });
    let mut r = Reader::new(&older[..]).expect("reader");
    assert_eq!(r.header.damon_record_size, 0);
    let items: Vec<Item> = r.by_ref().collect::<Result<_, _>>().expect("items");
    assert_eq!(items.len(), 5);
    assert!(r.warning.is_none(), "{:?}", r.warning);
}

#[test]
fn another_damon_record_size_is_refused() {
    let other = with_header(&sample_trace(), |h| {
        h["damon_record_size"] = serde_json::json!(damon_record_size() + 8);
    });
    let err = Reader::new(&other[..])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("incompatible build"), "{err}");
    assert!(
        err.contains(&format!("DAMON {}", damon_record_size() + 8)),
        "{err}"
    );
}
