//! Bytes from the ring buffer (or a trace file) -> typed events. The only
//! place that reinterprets raw bytes.
use numa_ebpf_common::{
    DamonEvent, DemoteEvent, EventKind, FaultEvent, HistEntry, ScanEvent, SkipEvent,
};
use serde::{Deserialize, Serialize};

/// A decoded kernel event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Fault(FaultEvent),
    Scan(ScanEvent),
    Skip(SkipEvent),
    Demote(DemoteEvent),
    /// One region of numatrace's own kdamond at an aggregation's end:
    /// DAMON's account of accesses, not a NUMA-balancing event.
    Damon(DamonEvent),
}

impl Event {
    /// When it happened (CLOCK_MONOTONIC ns, the clock of snapshots too).
    pub fn ts_ns(&self) -> u64 {
        match self {
            Event::Fault(f) => f.ts_ns,
            Event::Scan(s) => s.ts_ns,
            Event::Skip(s) => s.ts_ns,
            Event::Demote(d) => d.ts_ns,
            Event::Damon(d) => d.ts_ns,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is too short for its kind")]
    Short(usize),
    #[error("unknown record kind {0} (BPF object and numatrace versions differ?)")]
    UnknownKind(u32),
    #[error(
        "record names node {nid} as its {which} node: node ids are -1 (none) \
         to {max} (MAX_NUMNODES), so the record is corrupt or crafted",
        max = crate::topology::MAX_NUMNODES - 1
    )]
    NodeOutOfRange { which: &'static str, nid: i32 },
    #[error(
        "VMA skip record has reason {0}: the kernel has a handful (below {MAX_SKIP_REASON}), \
         so the record is corrupt or crafted"
    )]
    SkipReasonOutOfRange(u32),
    #[error(
        "demotion record has reclaimer {0}: the kernel has three (kswapd, direct, \
         khugepaged), so the record is corrupt or crafted"
    )]
    ReclaimerOutOfRange(u32),
}

/// Skip reasons are below this: the kernel's `numa_vmaskip_reason` has 7,
/// and a newer kernel's extra ones show as `reason_N`; more would be one
/// count per value kept for a corrupt or crafted record.
pub const MAX_SKIP_REASON: u32 = 64;

#[inline(always)]
fn read<T: Copy + Default>(bytes: &[u8]) -> Result<T, DecodeError> {
    if bytes.len() < std::mem::size_of::<T>() {
        return Err(DecodeError::Short(bytes.len()));
    }
    // SAFETY: the length is checked above; T is a #[repr(C)] struct of
    // integers for which any bit pattern is valid; read_unaligned copes
    // with the byte buffer's alignment.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// Decodes one ring-buffer record (kind in its first u32).
#[inline]
pub fn decode(bytes: &[u8]) -> Result<Event, DecodeError> {
    let kind: u32 = read::<u32>(bytes)?;
    match kind {
        k if k == EventKind::Fault as u32 => {
            // Built in place and checked by reference: a fault record is
            // large, and every copy of it costs on the replay path.
            let ev = Event::Fault(read(bytes)?);
            if let Event::Fault(f) = &ev {
                check_nodes(f)?;
            }
            Ok(ev)
        }
        k if k == EventKind::Scan as u32 => Ok(Event::Scan(read(bytes)?)),
        k if k == EventKind::VmaSkip as u32 => {
            let s: SkipEvent = read(bytes)?;
            check_skip(&s)?;
            Ok(Event::Skip(s))
        }
        k if k == EventKind::Demote as u32 => {
            let d: DemoteEvent = read(bytes)?;
            check_demote(&d)?;
            Ok(Event::Demote(d))
        }
        k if k == EventKind::Damon as u32 => Ok(Event::Damon(read(bytes)?)),
        k => Err(DecodeError::UnknownKind(k)),
    }
}

/// A demotion whose reclaimer and nodes are ones the kernel has.
fn check_demote(d: &DemoteEvent) -> Result<(), DecodeError> {
    if d.reclaimer as usize >= numa_ebpf_common::reclaimer::NAMES.len() {
        return Err(DecodeError::ReclaimerOutOfRange(d.reclaimer));
    }
    check_nid("demotion source", d.src_nid)?;
    check_nid("demotion destination", d.dst_nid)
}

/// A skip whose reason is one the kernels name.
fn check_skip(s: &SkipEvent) -> Result<(), DecodeError> {
    if s.reason >= MAX_SKIP_REASON {
        return Err(DecodeError::SkipReasonOutOfRange(s.reason));
    }
    Ok(())
}

/// A fault whose node ids are node ids: everything downstream that keeps
/// counts per node (pair) is then bounded by [`crate::topology::MAX_NUMNODES`].
#[inline]
fn check_nodes(f: &FaultEvent) -> Result<(), DecodeError> {
    check_nid("source", f.src_nid)?;
    check_nid("destination", f.dst_nid)
}

/// `nid` is a node id, or -1 (none).
#[inline]
fn check_nid(which: &'static str, nid: i32) -> Result<(), DecodeError> {
    let valid = nid == -1 || u32::try_from(nid).is_ok_and(|n| n < crate::topology::MAX_NUMNODES);
    if valid {
        Ok(())
    } else {
        Err(DecodeError::NodeOutOfRange { which, nid })
    }
}

/// A trace layout older than today's, whose fault and scan records are
/// prefixes of today's: the fields appended since read as zero, their
/// flags clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OldLayout {
    /// Before the folio's access values: stamps as the probes made them.
    V2,
    /// Before the scanning task's cgroup in scan and skip records.
    V3,
    /// Before demotion records.
    V4,
    /// Before the demoted folio's memory cgroup in demotion records.
    V5,
    /// Before the promotion's destination PFN in fault records.
    V6,
}

impl OldLayout {
    /// The older layout a trace header names, if it is one this reader
    /// knows (version and record sizes agree).
    pub fn of(abi_version: u32, record_sizes: [usize; 3]) -> Option<OldLayout> {
        use numa_ebpf_common as c;
        match (abi_version, record_sizes) {
            (c::ABI_VERSION_V2, s) if s == c::RECORD_SIZES_V2 => Some(OldLayout::V2),
            (c::ABI_VERSION_V3, s) if s == c::RECORD_SIZES_V3 => Some(OldLayout::V3),
            (c::ABI_VERSION_V4, s) if s == c::RECORD_SIZES_V4 => Some(OldLayout::V4),
            (c::ABI_VERSION_V5, s) if s == c::RECORD_SIZES_V6 => Some(OldLayout::V5),
            (c::ABI_VERSION_V6, s) if s == c::RECORD_SIZES_V6 => Some(OldLayout::V6),
            _ => None,
        }
    }

    fn sizes(self) -> [usize; 3] {
        match self {
            OldLayout::V2 => numa_ebpf_common::RECORD_SIZES_V2,
            OldLayout::V3 => numa_ebpf_common::RECORD_SIZES_V3,
            OldLayout::V4 => numa_ebpf_common::RECORD_SIZES_V4,
            OldLayout::V5 | OldLayout::V6 => numa_ebpf_common::RECORD_SIZES_V6,
        }
    }
}

/// A record of a trace of an older layout (`None`: today's).
pub fn decode_old(bytes: &[u8], layout: Option<OldLayout>) -> Result<Event, DecodeError> {
    let Some(layout) = layout else {
        return decode(bytes);
    };
    let kind: u32 = read::<u32>(bytes)?;
    let sizes = layout.sizes();
    match kind {
        k if k == EventKind::Fault as u32 => {
            let f = read_prefix(bytes, sizes[0])?;
            check_nodes(&f)?;
            Ok(Event::Fault(f))
        }
        k if k == EventKind::Scan as u32 => read_prefix(bytes, sizes[1]).map(Event::Scan),
        k if k == EventKind::VmaSkip as u32 => {
            let s = read_prefix(bytes, sizes[2])?;
            check_skip(&s)?;
            Ok(Event::Skip(s))
        }
        k if k == EventKind::Demote as u32 && layout == OldLayout::V5 => {
            let d = read_prefix(bytes, numa_ebpf_common::DEMOTE_RECORD_SIZE_V5)?;
            check_demote(&d)?;
            Ok(Event::Demote(d))
        }
        _ => decode(bytes),
    }
}

/// The first `len` bytes of a `T`, the rest zero.
fn read_prefix<T: Copy + Default>(bytes: &[u8], len: usize) -> Result<T, DecodeError> {
    if bytes.len() < len || len > std::mem::size_of::<T>() {
        return Err(DecodeError::Short(bytes.len()));
    }
    let mut v = T::default();
    // SAFETY: `len` bytes are copied into a T of at least `len` bytes; T is
    // a #[repr(C)] struct of integers for which any bit pattern is valid.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut v as *mut T).cast::<u8>(), len);
    }
    Ok(v)
}

/// The raw bytes of an event, as written to trace files (no copy).
pub fn raw_bytes(ev: &Event) -> &[u8] {
    fn bytes<T: Copy>(v: &T) -> &[u8] {
        // SAFETY: T is a #[repr(C)] struct of integers, fully initialised
        // (every event is built from `Default` or from the kernel's bytes);
        // the slice borrows `v` for its lifetime.
        unsafe {
            std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>())
        }
    }
    match ev {
        Event::Fault(f) => bytes(f),
        Event::Scan(s) => bytes(s),
        Event::Skip(s) => bytes(s),
        Event::Demote(d) => bytes(d),
        Event::Damon(d) => bytes(d),
    }
}

/// The raw bytes of an event, owned.
pub fn encode(ev: &Event) -> Vec<u8> {
    raw_bytes(ev).to_vec()
}

/// The comm of a fault, as a string.
pub fn comm(raw: &[u8; 16]) -> String {
    let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

/// The kernel's name of a VMA-skip reason, if this numatrace knows it.
pub fn skip_reason(reason: u32) -> Option<&'static str> {
    numa_ebpf_common::VMA_SKIP_REASONS
        .get(reason as usize)
        .copied()
}

/// The name of a VMA-skip reason, `reason_N` for one this numatrace does
/// not know (a newer kernel's).
pub fn skip_reason_name(reason: u32) -> String {
    skip_reason(reason).map_or_else(|| format!("reason_{reason}"), str::to_owned)
}

/// Kernel-side counters and histograms at one moment (all cumulative since
/// attach), and the vmstat NUMA counters. Recorded periodically in traces.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Snapshot {
    /// CLOCK_MONOTONIC ns, the clock of the events' `ts_ns`.
    pub ts_ns: u64,
    #[serde(deserialize_with = "snapshot_bounds::series")]
    pub counters: Vec<u64>,
    #[serde(deserialize_with = "snapshot_bounds::series")]
    pub hist_latency: Vec<u64>,
    #[serde(deserialize_with = "snapshot_bounds::series")]
    pub hist_delta: Vec<u64>,
    #[serde(deserialize_with = "snapshot_bounds::series")]
    pub hist_sum: Vec<u64>,
    #[serde(deserialize_with = "snapshot_bounds::series")]
    pub migrate_reason_pages: Vec<u64>,
    #[serde(deserialize_with = "snapshot_bounds::vmstat")]
    pub vmstat: std::collections::BTreeMap<String, u64>,
    /// numatrace's kdamond's CPU time so far (`--truth damon`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damon_cpu_ns: Option<u64>,
}

/// What a snapshot read from a trace may hold. Every consumer keeps a
/// snapshot or two for the whole run (the window's first and latest), so a
/// record's size must not decide their memory: a series or a vmstat table
/// past these bounds is refused while it is read, before it is held.
pub mod snapshot_bounds {
    use std::{collections::BTreeMap, fmt};

    use serde::de::{Deserializer, Error, MapAccess, SeqAccess, Visitor};

    /// Values of one series: many times the largest the probes write
    /// (the histograms, `OUTCOMES * HIST_BUCKETS`), room for newer layouts.
    pub const MAX_SERIES: usize = 4096;
    /// vmstat counters (a kernel has a few hundred), and a name's bytes.
    pub const MAX_VMSTAT: usize = 4096;
    pub const MAX_VMSTAT_NAME: usize = 128;

    struct Series;

    impl<'de> Visitor<'de> for Series {
        type Value = Vec<u64>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "a list of at most {MAX_SERIES} counts")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u64>, A::Error> {
            let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(MAX_SERIES));
            while let Some(x) = seq.next_element()? {
                if v.len() == MAX_SERIES {
                    return Err(A::Error::custom(format_args!(
                        "snapshot series of more than {MAX_SERIES} values (MAX_SERIES): \
                         the record is corrupt or crafted"
                    )));
                }
                v.push(x);
            }
            Ok(v)
        }
    }

    pub fn series<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        d.deserialize_seq(Series)
    }

    struct Vmstat;

    impl<'de> Visitor<'de> for Vmstat {
        type Value = BTreeMap<String, u64>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "a map of at most {MAX_VMSTAT} vmstat counters")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut m = BTreeMap::new();
            while let Some((k, x)) = map.next_entry::<String, u64>()? {
                if k.len() > MAX_VMSTAT_NAME {
                    return Err(A::Error::custom(format_args!(
                        "snapshot vmstat name of {} bytes, more than {MAX_VMSTAT_NAME} \
                         (MAX_VMSTAT_NAME): the record is corrupt or crafted",
                        k.len()
                    )));
                }
                m.insert(k, x);
                if m.len() > MAX_VMSTAT {
                    return Err(A::Error::custom(format_args!(
                        "snapshot of more than {MAX_VMSTAT} vmstat counters (MAX_VMSTAT): \
                         the record is corrupt or crafted"
                    )));
                }
            }
            Ok(m)
        }
    }

    pub fn vmstat<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, u64>, D::Error> {
        d.deserialize_map(Vmstat)
    }
}

/// The histograms of the fault records read from the ring. The probes
/// count a fault in their in-kernel histograms only when its record does
/// not reach the ring (sampled out or dropped), so a live snapshot's
/// histograms are the kernel's plus these, every fault counted once.
#[derive(Debug, Clone)]
pub struct RecordHistograms {
    latency: Vec<u64>,
    delta: Vec<u64>,
    sum: Vec<u64>,
}

impl Default for RecordHistograms {
    fn default() -> Self {
        RecordHistograms {
            latency: vec![0; numa_ebpf_common::HIST_SLOTS],
            delta: vec![0; numa_ebpf_common::HIST_SLOTS],
            sum: vec![0; numa_ebpf_common::OUTCOMES * 2],
        }
    }
}

impl RecordHistograms {
    pub fn add(&mut self, f: &FaultEvent) {
        let Some(h) = HistEntry::of(f) else {
            return;
        };
        let bump = |v: &mut Vec<u64>, slot: usize, by: u64| {
            if let Some(x) = v.get_mut(slot) {
                *x = x.wrapping_add(by);
            }
        };
        bump(&mut self.latency, h.slot(h.latency_ns), 1);
        bump(&mut self.sum, h.sum_slot(), h.latency_ns);
        if h.own_mm {
            bump(&mut self.delta, h.slot(h.delta), 1);
            bump(&mut self.sum, h.sum_slot() + 1, h.delta);
        }
    }

    /// `s` with these added to its histograms.
    pub fn added_to(&self, mut s: Snapshot) -> Snapshot {
        let plus = |to: &mut Vec<u64>, from: &[u64]| {
            if to.len() < from.len() {
                to.resize(from.len(), 0);
            }
            for (t, f) in to.iter_mut().zip(from) {
                *t = t.wrapping_add(*f);
            }
        };
        plus(&mut s.hist_latency, &self.latency);
        plus(&mut s.hist_delta, &self.delta);
        plus(&mut s.hist_sum, &self.sum);
        s
    }
}

/// Event builders for tests (here and in the crates downstream).
pub mod fixtures {
    use numa_ebpf_common::{
        decision, ext_flags, fault_flags, DamonEvent, DemoteEvent, EventKind, FaultEvent, Outcome,
    };

    /// [`fault`] `f` as a promotion that migrated folio (`mapping`,
    /// `index`) to the top tier (node 0 from node 1 by default).
    pub fn migrated(mut f: FaultEvent, mapping: u64, index: u64) -> FaultEvent {
        f.flags |= fault_flags::MIGRATE_TRIED;
        f.migrate_ok = 1;
        f.mapping = mapping;
        f.index = index;
        // Where [`demotion`] puts it, and where it takes it from.
        f.src_pfn = 100 + index;
        f.dst_pfn = 9000 + index;
        f
    }

    /// Kswapd demoting the base-page folio (`mapping`, `index`) from node
    /// 0 to node 1 at `ts_ns`: the one fixture builder for demotions.
    pub fn demotion(ts_ns: u64, mapping: u64, index: u64) -> DemoteEvent {
        DemoteEvent {
            kind: EventKind::Demote as u32,
            ts_ns,
            pid_tgid: 60 << 32 | 60,
            src_pfn: 9000 + index,
            dst_pfn: 100 + index,
            src_nid: 0,
            dst_nid: 1,
            mapping,
            index,
            nr_pages: 1,
            ..DemoteEvent::default()
        }
    }

    /// Region `[start, start + 2 MiB)` of DAMON target 0 with
    /// `nr_accesses` at `ts_ns`, from kdamond 77: the one fixture builder
    /// for DAMON records.
    pub fn damon_region(ts_ns: u64, start: u64, nr_accesses: u32) -> DamonEvent {
        DamonEvent {
            kind: EventKind::Damon as u32,
            nr_regions: 10,
            ts_ns,
            target_id: 0,
            start,
            end: start + (2 << 20),
            nr_accesses,
            age: 3,
            kdamond_tid: 77,
            _pad: 0,
        }
    }

    /// A promoted or refused base-page hint fault of process 42 on folio
    /// `folio`, `latency_ms` after its scan and 3 faults after it (on
    /// numatrace's counters and the patch's alike): the one fixture
    /// builder for fault events in every crate's tests.
    pub fn fault(seq: u64, folio: u64, latency_ms: u64, outcome: Outcome) -> FaultEvent {
        let ts_ns = 1_000_000_000_000 + seq * 1_000_000;
        let mut ext_flags = ext_flags::MM_FAULT_COUNT | ext_flags::STORED_FAULT_COUNT;
        if outcome != Outcome::PromoteFreeSpace {
            ext_flags |= ext_flags::THRESHOLD_PATH;
        }
        FaultEvent {
            kind: EventKind::Fault as u32,
            ts_ns,
            pid_tgid: (42u64 << 32) | 42,
            addr: 0x7f00_0000_0000 + folio * 4096,
            folio: 0xffff_ea00_0000_0000 + folio * 64,
            seq_global: seq,
            seq_mm: seq,
            scan_ns: ts_ns - latency_ms * 1_000_000,
            scan_seq_global: seq.saturating_sub(3),
            scan_seq_mm: seq.saturating_sub(3),
            kernel_latency_ms: latency_ms as u32,
            threshold_ms: 1000,
            nr_pages: 1,
            src_nid: 1,
            dst_nid: 0,
            outcome: outcome as u8,
            decision: decision::of(outcome.promoted()),
            flags: fault_flags::HAS_STAMP
                | fault_flags::DECIDED
                | fault_flags::KERNEL_LATENCY
                | fault_flags::HAS_FAULT_HOOK,
            comm: *b"hot-chunks\0\0\0\0\0\0",
            mm_fault_count: seq as u32,
            stored_fault_count: seq.saturating_sub(3) as u32,
            stored_fault_count_ns: ts_ns - latency_ms * 1_000_000,
            ext_flags,
            ..FaultEvent::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use numa_ebpf_common::Outcome;

    use super::{fixtures::fault, *};

    #[test]
    fn record_histograms_count_each_stamped_fault_once_in_its_outcomes_row() {
        use numa_ebpf_common::{fault_flags as ff, hist_slot, log2_bucket};
        let mut h = RecordHistograms::default();
        let own = fault(7, 3, 1500, Outcome::RejectLatency);
        let mut other = fault(8, 4, 2, Outcome::PromoteHot);
        other.flags |= ff::STAMP_OTHER_MM;
        let mut unstamped = fault(9, 5, 2, Outcome::PromoteHot);
        unstamped.flags &= !ff::HAS_STAMP;
        for f in [&own, &other, &unstamped] {
            h.add(f);
        }
        let s = h.added_to(Snapshot {
            hist_latency: vec![0; 10],
            ..Snapshot::default()
        });
        let (reject, hot) = (
            Outcome::RejectLatency as usize,
            Outcome::PromoteHot as usize,
        );
        let delta = own.seq_mm - own.scan_seq_mm;
        assert!(delta > 0);
        assert_eq!(s.hist_latency.len(), numa_ebpf_common::HIST_SLOTS);
        assert_eq!(s.hist_latency.iter().sum::<u64>(), 2);
        assert_eq!(
            s.hist_latency[hist_slot(reject, log2_bucket(1_500_000_000))],
            1
        );
        assert_eq!(s.hist_latency[hist_slot(hot, log2_bucket(2_000_000))], 1);
        assert_eq!(s.hist_delta.iter().sum::<u64>(), 1);
        assert_eq!(s.hist_delta[hist_slot(reject, log2_bucket(delta))], 1);
        assert_eq!(s.hist_sum[reject * 2], 1_500_000_000);
        assert_eq!(s.hist_sum[reject * 2 + 1], delta);
        assert_eq!(s.hist_sum[hot * 2], 2_000_000);
        assert_eq!(s.hist_sum[hot * 2 + 1], 0);
    }

    #[test]
    fn roundtrip_every_kind() {
        let evs = [
            Event::Fault(fault(7, 3, 1500, Outcome::RejectLatency)),
            Event::Scan(ScanEvent {
                kind: EventKind::Scan as u32,
                start: 1,
                end: 2,
                ..Default::default()
            }),
            Event::Skip(SkipEvent {
                kind: EventKind::VmaSkip as u32,
                reason: 3,
                ..Default::default()
            }),
            Event::Demote(fixtures::demotion(5, 0xa1, 3)),
            Event::Damon(fixtures::damon_region(6, 1 << 32, 2)),
        ];
        for ev in evs {
            assert_eq!(decode(&encode(&ev)), Ok(ev));
        }
    }

    #[test]
    fn damon_records_decode_in_every_layout_and_short_ones_are_errors() {
        let d = fixtures::damon_region(9, 0x1_0000_0000, 4);
        let bytes = encode(&Event::Damon(d));
        assert_eq!(bytes.len(), 56);
        assert_eq!(Event::Damon(d).ts_ns(), 9);
        // Older layouts hold no DAMON records, but a record of today's
        // kind reads the same through either path.
        for layout in [None, Some(OldLayout::V6)] {
            assert_eq!(decode_old(&bytes, layout), Ok(Event::Damon(d)));
        }
        assert_eq!(decode(&bytes[..55]), Err(DecodeError::Short(55)));
    }

    #[test]
    fn short_and_unknown_records_are_errors() {
        let bytes = encode(&Event::Fault(fault(1, 1, 1, Outcome::PromoteHot)));
        assert_eq!(decode(&bytes[..20]), Err(DecodeError::Short(20)));
        assert_eq!(
            decode(&[9, 0, 0, 0, 0, 0, 0, 0]),
            Err(DecodeError::UnknownKind(9))
        );
        assert_eq!(decode(&[1, 0]), Err(DecodeError::Short(2)));
    }

    #[test]
    fn v2_records_read_with_the_access_values_zero_and_their_flags_clear() {
        use numa_ebpf_common::{ext_flags as xf, RECORD_SIZES_V2};
        let mut f = fault(70_000, 3, 1500, Outcome::RejectLatency);
        f.access_at_fault = 7;
        f.access_after = 8;
        f.ext_flags = xf::MM_FAULT_COUNT;
        let bytes = encode(&Event::Fault(f));
        let Ok(Event::Fault(g)) = decode_old(&bytes[..RECORD_SIZES_V2[0]], Some(OldLayout::V2))
        else {
            panic!("v2 fault did not decode");
        };
        assert_eq!((g.access_at_fault, g.access_after), (0, 0));
        assert_eq!((g.mm_fault_count, g.scan_ns), (f.mm_fault_count, f.scan_ns));
        assert_eq!(g.ext_flags, xf::MM_FAULT_COUNT);
        assert_eq!(
            decode_old(&bytes[..RECORD_SIZES_V2[0] - 1], Some(OldLayout::V2)),
            Err(DecodeError::Short(RECORD_SIZES_V2[0] - 1))
        );
        assert_eq!(
            OldLayout::of(2, RECORD_SIZES_V2),
            Some(OldLayout::V2),
            "a v2 header"
        );
        assert_eq!(OldLayout::of(2, [1, 2, 3]), None);
    }

    #[test]
    fn v3_scans_and_skips_read_without_their_cgroup() {
        use numa_ebpf_common::{ScanEvent, SkipEvent, RECORD_SIZES_V3};
        let v3 = Some(OldLayout::V3);
        let scan = ScanEvent {
            kind: EventKind::Scan as u32,
            access_last: 9,
            cgroup_id: 77,
            ..Default::default()
        };
        let bytes = encode(&Event::Scan(scan));
        let Ok(Event::Scan(s)) = decode_old(&bytes[..RECORD_SIZES_V3[1]], v3) else {
            panic!("v3 scan did not decode");
        };
        assert_eq!((s.access_last, s.cgroup_id), (9, 0));
        let skip = SkipEvent {
            kind: EventKind::VmaSkip as u32,
            reason: 4,
            cgroup_id: 77,
            ..Default::default()
        };
        let bytes = encode(&Event::Skip(skip));
        let Ok(Event::Skip(s)) = decode_old(&bytes[..RECORD_SIZES_V3[2]], v3) else {
            panic!("v3 skip did not decode");
        };
        assert_eq!((s.reason, s.cgroup_id), (4, 0));
        let bad = SkipEvent { reason: 99, ..skip };
        let bytes = encode(&Event::Skip(bad));
        assert_eq!(
            decode_old(&bytes[..RECORD_SIZES_V3[2]], v3),
            Err(DecodeError::SkipReasonOutOfRange(99))
        );
        assert_eq!(OldLayout::of(3, RECORD_SIZES_V3), v3);
    }

    #[test]
    fn v5_demotions_read_without_their_memcg() {
        use numa_ebpf_common::{ABI_VERSION_V5, DEMOTE_RECORD_SIZE_V5};
        let v5 = Some(OldLayout::V5);
        let d = DemoteEvent {
            memcg_id: 77,
            ..fixtures::demotion(5, 0xa1, 3)
        };
        let bytes = encode(&Event::Demote(d));
        let Ok(Event::Demote(got)) = decode_old(&bytes[..DEMOTE_RECORD_SIZE_V5], v5) else {
            panic!("v5 demotion did not decode");
        };
        assert_eq!((got.index, got.memcg_id), (3, 0));
        assert!(decode_old(&bytes[..DEMOTE_RECORD_SIZE_V5 - 1], v5).is_err());
        assert_eq!(
            OldLayout::of(ABI_VERSION_V5, numa_ebpf_common::RECORD_SIZES_V6),
            v5
        );
    }

    #[test]
    fn v6_faults_read_without_their_destination_pfn() {
        use numa_ebpf_common::{ABI_VERSION_V6, RECORD_SIZES_V6};
        let v6 = Some(OldLayout::V6);
        let f = FaultEvent {
            dst_pfn: 0x1_2345,
            mapping: 0xa1,
            ..fault(70_000, 3, 1500, Outcome::PromoteHot)
        };
        let bytes = encode(&Event::Fault(f));
        let Ok(Event::Fault(g)) = decode_old(&bytes[..RECORD_SIZES_V6[0]], v6) else {
            panic!("v6 fault did not decode");
        };
        assert_eq!((g.mapping, g.dst_pfn), (0xa1, 0));
        assert!(decode_old(&bytes[..RECORD_SIZES_V6[0] - 1], v6).is_err());
        assert_eq!(OldLayout::of(ABI_VERSION_V6, RECORD_SIZES_V6), v6);
        assert_eq!(
            OldLayout::of(ABI_VERSION_V6, crate::trace::record_sizes()),
            None
        );
    }

    #[test]
    fn comm_stops_at_nul() {
        assert_eq!(comm(b"hot-chunks\0\0\0\0\0\0"), "hot-chunks");
        assert_eq!(comm(&[b'a'; 16]), "a".repeat(16));
    }

    #[test]
    fn node_ids_and_skip_reasons_beyond_the_kernels_are_refused() {
        let ok = |src, dst| {
            let mut f = fault(1, 1, 1, Outcome::PromoteHot);
            (f.src_nid, f.dst_nid) = (src, dst);
            decode(&encode(&Event::Fault(f)))
        };
        for (src, dst) in [(-1, -1), (0, 1023), (1023, 0)] {
            assert!(ok(src, dst).is_ok(), "{src} -> {dst}");
        }
        let skip = |reason| {
            decode(&encode(&Event::Skip(SkipEvent {
                kind: EventKind::VmaSkip as u32,
                reason,
                ..Default::default()
            })))
        };
        assert!(skip(MAX_SKIP_REASON - 1).is_ok());
        assert_eq!(
            skip(MAX_SKIP_REASON),
            Err(DecodeError::SkipReasonOutOfRange(MAX_SKIP_REASON))
        );
        for (src, dst, which, nid) in [
            (1024, 0, "source", 1024),
            (-2, 0, "source", -2),
            (0, i32::MAX, "destination", i32::MAX),
            (0, i32::MIN, "destination", i32::MIN),
        ] {
            let err = ok(src, dst).expect_err("out of range");
            assert_eq!(err, DecodeError::NodeOutOfRange { which, nid });
            let text = err.to_string();
            assert!(
                text.contains(&format!("node {nid} as its {which}")),
                "{text}"
            );
            assert!(text.contains("-1 (none) to 1023 (MAX_NUMNODES)"), "{text}");
        }
    }
}
