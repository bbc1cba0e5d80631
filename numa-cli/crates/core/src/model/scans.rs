//! Where and when the scanner last passed: an index of range scans per
//! process at 2 MiB granularity, so a fault can find the *latest* scan of
//! the range covering its page (the RFC's patch 2/2 stamp), next to the
//! kernel's per-folio *first* scan.
use rustc_hash::FxHashMap;

use numa_ebpf_common::ScanEvent;

const CHUNK_SHIFT: u32 = 21;
/// Cap on chunks updated per scan event (a 64 GiB range); bigger ranges
/// are indexed at their ends only.
const MAX_CHUNKS_PER_SCAN: u64 = 32768;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeScan {
    pub start: u64,
    pub end: u64,
    pub ts_ns: u64,
    pub seq_global: u64,
    pub seq_mm: u64,
}

#[derive(Debug, Default)]
pub struct ScanIndex {
    chunks: FxHashMap<(u32, u64), RangeScan>,
}

impl ScanIndex {
    pub fn record(&mut self, ev: &ScanEvent) {
        let tgid = (ev.pid_tgid >> 32) as u32;
        let scan = RangeScan {
            start: ev.start,
            end: ev.end,
            ts_ns: ev.ts_ns,
            seq_global: ev.seq_global,
            seq_mm: ev.seq_mm,
        };
        if ev.end <= ev.start {
            return;
        }
        let (first, last) = (ev.start >> CHUNK_SHIFT, (ev.end - 1) >> CHUNK_SHIFT);
        if last - first < MAX_CHUNKS_PER_SCAN {
            for c in first..=last {
                self.chunks.insert((tgid, c), scan);
            }
        } else {
            self.chunks.insert((tgid, first), scan);
            self.chunks.insert((tgid, last), scan);
        }
    }

    /// The latest scan of `tgid` covering `addr` that ended before `ts_ns`.
    #[inline]
    pub fn latest(&self, tgid: u32, addr: u64, ts_ns: u64) -> Option<RangeScan> {
        if self.chunks.is_empty() {
            return None;
        }
        let s = self.chunks.get(&(tgid, addr >> CHUNK_SHIFT))?;
        (s.start <= addr && addr < s.end && s.ts_ns <= ts_ns).then_some(*s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(start: u64, end: u64, ts: u64) -> ScanEvent {
        ScanEvent {
            kind: 2,
            pid_tgid: 7 << 32,
            start,
            end,
            ts_ns: ts,
            seq_global: ts,
            ..Default::default()
        }
    }

    #[test]
    fn latest_covering_scan_wins() {
        let mut idx = ScanIndex::default();
        idx.record(&scan(0x4000_0000, 0x5000_0000, 100));
        idx.record(&scan(0x4800_0000, 0x4900_0000, 200));
        assert_eq!(idx.latest(7, 0x4810_0000, 300).map(|s| s.ts_ns), Some(200));
        assert_eq!(idx.latest(7, 0x4010_0000, 300).map(|s| s.ts_ns), Some(100));
        // Other process, outside any range, or a scan after the fault.
        assert_eq!(idx.latest(8, 0x4810_0000, 300), None);
        assert_eq!(idx.latest(7, 0x6000_0000, 300), None);
        assert_eq!(idx.latest(7, 0x4810_0000, 150), None);
    }
}
