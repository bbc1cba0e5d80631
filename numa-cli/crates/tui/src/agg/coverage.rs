//! Scan coverage: the ranges NUMA balancing scanned in each process, the
//! VMAs it skipped and why, and the per-process detail built from them.
use numa_core::decode::skip_reason_name;
use numa_ebpf_common::{ScanEvent, SkipEvent};

use crate::frame::{Detail, RangeRow, VmaRow};

use super::{
    heat::heat,
    procs::{cgroup_tally, Proc},
    Aggregator, CHUNK_SHIFT, MAX_CHUNKS_PER_SCAN, MAX_RANGES_PER_PROC,
};

impl Aggregator {
    pub(super) fn scan(&mut self, s: &ScanEvent) {
        self.bank.scan(s);
        let tgid = s.tgid();
        let p = self.proc_mut(tgid, s.ts_ns);
        p.scan_passes += 1;
        p.ptes = p.ptes.saturating_add(s.ptes_updated);
        p.last_ts = p.last_ts.max(s.ts_ns);
        if s.cgroup_id != 0 {
            p.cgroup_id = s.cgroup_id;
        }
        if p.ranges.len() < MAX_RANGES_PER_PROC || p.ranges.contains_key(&s.start) {
            let r = p.ranges.entry(s.start).or_default();
            r.end = r.end.max(s.end);
            r.passes += 1;
            r.ptes = r.ptes.saturating_add(s.ptes_updated);
            r.last_ts = r.last_ts.max(s.ts_ns);
        }
        if s.end > s.start {
            let (a, b) = (s.start >> CHUNK_SHIFT, (s.end - 1) >> CHUNK_SHIFT);
            for c in a..=b.min(a + MAX_CHUNKS_PER_SCAN - 1) {
                if let Some(ch) = p.chunk(c) {
                    ch.scanned_cur = true;
                }
            }
        }
        // A cgroup whose pages are scanned but never faulted on has a row:
        // its verdict (cold) is the answer.
        if s.cgroup_id != 0 {
            cgroup_tally(&mut self.cgroups, s.cgroup_id, self.models.len());
        }
    }

    pub(super) fn skip(&mut self, s: &SkipEvent) {
        let tgid = s.tgid();
        let p = self.proc_mut(tgid, s.ts_ns);
        *p.skips.entry(skip_reason_name(s.reason)).or_default() += 1;
        if p.skip_by_start.len() < MAX_RANGES_PER_PROC || p.skip_by_start.contains_key(&s.vm_start)
        {
            p.skip_by_start.insert(s.vm_start, s.reason);
        }
    }

    pub(super) fn detail(&self, pid: u32) -> Option<Detail> {
        let p = self.procs.get(pid)?;
        let now = self.now_ts;
        let mut ranges: Vec<RangeRow> = p
            .ranges
            .iter()
            .map(|(start, r)| RangeRow {
                start: *start,
                end: r.end,
                passes: r.passes,
                ptes_updated: r.ptes,
                faults: p.chunk_faults(*start, r.end),
                age_s: now.saturating_sub(r.last_ts) as f64 / 1e9,
                skip: p.skip_by_start.get(start).map(|r| skip_reason_name(*r)),
            })
            .collect();
        ranges.sort_by(|a, b| a.age_s.total_cmp(&b.age_s).then(a.start.cmp(&b.start)));
        ranges.truncate(64);
        let vmas = p.vmas.as_ref().map(|vmas| {
            vmas.iter()
                .map(|v| {
                    let (passes, ptes) = p
                        .ranges
                        .iter()
                        .filter(|(s, _)| (v.start..v.end).contains(*s))
                        .fold((0, 0), |(a, b), (_, r)| (a + r.passes, b + r.ptes));
                    VmaRow {
                        start: v.start,
                        end: v.end,
                        perms: v.perms.clone(),
                        path: v.path.clone(),
                        faults: p.chunk_faults(v.start, v.end),
                        scan_passes: passes,
                        ptes_updated: ptes,
                        skip: p.skip_by_start.get(&v.start).map(|r| skip_reason_name(*r)),
                    }
                })
                .collect()
        });
        Some(Detail {
            pid,
            comm: p.comm.clone(),
            faults_total: p.tally.counts.faults,
            vmas,
            scan_passes: p.scan_passes,
            ptes_updated: p.ptes,
            ranges,
            skips: p.skips.clone(),
            heat: heat(p),
            ..Detail::default()
        })
    }
}

impl Proc {
    pub(super) fn chunk_faults(&self, start: u64, end: u64) -> u64 {
        if end <= start {
            return 0;
        }
        let (a, b) = (start >> CHUNK_SHIFT, (end - 1) >> CHUNK_SHIFT);
        if b - a < self.chunks.len() as u64 {
            (a..=b)
                .filter_map(|c| self.chunks.get(&c))
                .map(|c| c.faults)
                .sum()
        } else {
            self.chunks
                .iter()
                .filter(|(c, _)| (a..=b).contains(*c))
                .map(|(_, ch)| ch.faults)
                .sum()
        }
    }
}
