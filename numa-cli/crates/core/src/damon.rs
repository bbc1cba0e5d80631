//! DAMON's sampled truth: which physical regions a kdamond of numatrace's
//! own found accessed, aggregation by aggregation (`damon:damon_aggregated`
//! records, [`Event::Damon`]).
//!
//! DAMON checks one page per region every sample interval (its access bit)
//! and reports, every aggregation interval, each region's count of samples
//! that found it accessed (`nr_accesses`, 0 to samples-per-aggregation).
//! Read as a truth, an aggregation is a window and each page of a region
//! takes the region's count as its accesses there. Two errors follow, both
//! stated wherever a scorecard rests on DAMON ([`Summary`]): the count is a
//! sample of one page standing for the whole region (the region's size is
//! the resolution), and of the time (one check per sample interval: a page
//! touched between checks of another page of its region is not seen).
use serde::{Deserialize, Serialize};

use crate::{
    decode::{Event, Snapshot},
    sink::Sink,
    truth::Window,
};

/// Region records a replay keeps from one trace: a day of 100 ms
/// aggregations of 50 regions. The rest are counted, not judged.
pub const MAX_RECORDS: usize = 1 << 22;

/// Hint faults kept to measure DAMON's misses on the run itself.
pub const MAX_FAULTS: usize = 1 << 20;

/// What numatrace's kdamond monitors and how often.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// Physical byte ranges `[start, end)`, sorted, not overlapping.
    pub regions: Vec<(u64, u64)>,
    /// How often a region's sampled page is checked for access.
    pub sample_us: u64,
    /// How often the counts are reported (one record per region) and reset.
    pub aggr_us: u64,
    /// How often the regions are rebuilt from the monitored ranges.
    pub update_us: u64,
    pub min_regions: u32,
    pub max_regions: u32,
}

impl Spec {
    /// DAMON's own defaults (5 ms samples, 100 ms aggregations, 10 to
    /// 1,000 regions) over `regions`.
    pub fn over(regions: Vec<(u64, u64)>) -> Spec {
        Spec {
            regions,
            sample_us: 5_000,
            aggr_us: 100_000,
            update_us: 1_000_000,
            min_regions: 10,
            max_regions: 1_000,
        }
    }

    /// The most `nr_accesses` an aggregation can report: the access rate's
    /// resolution is one in this many.
    pub fn samples_per_aggregation(&self) -> u64 {
        (self.aggr_us / self.sample_us.max(1)).max(1)
    }

    /// The byte ranges of PFN spans, adjacent ones kept apart: a region
    /// then never straddles two nodes when DAMON splits the first ones.
    pub fn of_pfn_spans(spans: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = spans
            .into_iter()
            .filter(|(s, e)| e > s)
            .map(|(s, e)| (s.saturating_mul(4096), e.saturating_mul(4096)))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// The kdamond of a recording, in its trace's header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Info {
    pub spec: Spec,
    /// The kdamond thread: only its records are taken.
    pub pid: u32,
}

/// One region of one aggregation, in 4 KiB frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub window: u32,
    pub start_pfn: u64,
    pub end_pfn: u64,
    pub nr_accesses: u32,
}

/// DAMON's sampled truth and the figures that qualify it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Summary {
    pub sample_us: u64,
    pub aggr_us: u64,
    /// The access rate's resolution: one sample in this many.
    pub samples_per_window: u64,
    pub aggregations: usize,
    /// Regions per aggregation (mean), and their mean size: the spatial
    /// resolution (a region's count stands for each of its pages).
    pub regions_mean: f64,
    pub region_mib_mean: f64,
    /// Memory in regions found accessed, per aggregation (mean).
    pub accessed_mib_mean: f64,
    /// Records past [`MAX_RECORDS`], not judged.
    pub dropped: u64,
    /// DAMON's misses measured on the run itself: of the pages that took a
    /// hint fault during an aggregation (accessed for certain), those in a
    /// region DAMON found accessed in it (with the regions kept; at most
    /// [`MAX_FAULTS`] faults).
    pub faulted_pages: u64,
    pub faulted_found: u64,
    /// The kdamond's CPU time over the recording's wall time, when the
    /// recording measured it.
    pub cpu_share: Option<f64>,
}

/// Collects a trace's (or a live run's) DAMON records into windows.
#[derive(Debug, Default)]
pub struct Collector {
    spec: Option<Spec>,
    /// Whether the regions are kept (a scorecard's truth) or only counted.
    keep: bool,
    windows: Vec<Window>,
    regions: Vec<Region>,
    /// The timestamp of the first record of the open aggregation.
    open_ns: Option<u64>,
    records: u64,
    bytes: u64,
    accessed_bytes: u64,
    dropped: u64,
    /// Hint faults' (timestamp, PFN), one per page, for [`Summary::faulted_found`].
    faults: Vec<(u64, u64)>,
    /// The kdamond's CPU time at the first and the latest counter
    /// snapshot that measured it: (timestamp, CPU ns).
    cpu: Option<((u64, u64), (u64, u64))>,
}

impl Collector {
    /// For records of a kdamond run with `spec` (its intervals cut the
    /// windows).
    pub fn new(spec: Spec) -> Collector {
        Collector {
            spec: Some(spec),
            keep: true,
            ..Collector::default()
        }
    }

    /// Keeps no region, only the figures of [`summary`](Self::summary), of
    /// the kdamond the source's header names, if any.
    pub fn counting() -> Collector {
        Collector::default()
    }

    /// Records of one aggregation come in one burst from the kdamond: a
    /// record later than half an aggregation after the burst's first opens
    /// the next window.
    fn push(&mut self, ts_ns: u64, start: u64, end: u64, nr_accesses: u32) {
        let Some(spec) = &self.spec else { return };
        let aggr_ns = spec.aggr_us.saturating_mul(1000);
        if self.keep && self.regions.len() >= MAX_RECORDS {
            self.dropped += 1;
            return;
        }
        let opens = self
            .open_ns
            .is_none_or(|open| ts_ns.saturating_sub(open) > aggr_ns / 2);
        if opens {
            self.open_ns = Some(ts_ns);
            self.windows.push(Window {
                start_ns: ts_ns.saturating_sub(aggr_ns),
                end_ns: ts_ns,
                clock_err_ns: spec.sample_us.saturating_mul(1000),
            });
        }
        self.bytes = self.bytes.saturating_add(end.saturating_sub(start));
        if nr_accesses > 0 {
            self.accessed_bytes = self
                .accessed_bytes
                .saturating_add(end.saturating_sub(start));
        }
        self.records += 1;
        if self.keep {
            self.regions.push(Region {
                window: (self.windows.len() - 1) as u32,
                start_pfn: start / 4096,
                end_pfn: end.div_ceil(4096),
                nr_accesses,
            });
        }
    }

    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// The figures of the kdamond's records; None without a kdamond.
    pub fn summary(&self) -> Option<Summary> {
        let spec = self.spec.as_ref()?;
        let (faulted_pages, faulted_found) = self.faults_found();
        let n = self.windows.len().max(1) as f64;
        let regions = self.records.max(1) as f64;
        Some(Summary {
            sample_us: spec.sample_us,
            aggr_us: spec.aggr_us,
            samples_per_window: spec.samples_per_aggregation(),
            aggregations: self.windows.len(),
            regions_mean: self.records as f64 / n,
            region_mib_mean: self.bytes as f64 / regions / f64::from(1u32 << 20),
            accessed_mib_mean: self.accessed_bytes as f64 / n / f64::from(1u32 << 20),
            dropped: self.dropped,
            faulted_pages,
            faulted_found,
            cpu_share: self.cpu.and_then(|((t0, c0), (t1, c1))| {
                (t1 > t0).then(|| c1.saturating_sub(c0) as f64 / (t1 - t0) as f64)
            }),
        })
    }
}

impl Collector {
    /// A hint fault's pages: accessed at its time, whatever DAMON found.
    fn fault(&mut self, ts_ns: u64, pfn: u64, pages: u64) {
        if !self.keep || pfn == 0 {
            return;
        }
        for p in pfn..pfn.saturating_add(pages) {
            if self.faults.len() >= MAX_FAULTS {
                return;
            }
            self.faults.push((ts_ns, p));
        }
    }

    /// Of the faulted pages, those in a region found accessed in the
    /// aggregation whose window holds the fault. The kdamond reports a
    /// target's regions in address order, one window after another.
    /// Returns (faulted pages in a window, those found).
    fn faults_found(&self) -> (u64, u64) {
        let (mut seen, mut found) = (0, 0);
        for &(ts, pfn) in &self.faults {
            let i = self.windows.partition_point(|w| w.end_ns <= ts);
            if self.windows.get(i).is_none_or(|w| w.start_ns > ts) {
                continue;
            }
            seen += 1;
            let lo = self.regions.partition_point(|r| (r.window as usize) < i);
            let hi = self.regions.partition_point(|r| (r.window as usize) <= i);
            let regions = &self.regions[lo..hi];
            let at = regions.partition_point(|r| r.end_pfn <= pfn);
            found += u64::from(
                regions
                    .get(at)
                    .is_some_and(|r| r.start_pfn <= pfn && r.nr_accesses > 0),
            );
        }
        (seen, found)
    }
}

impl Summary {
    /// Of the pages that took a hint fault in an aggregation, the share
    /// DAMON found accessed there.
    pub fn fault_recall(&self) -> Option<f64> {
        (self.faulted_pages > 0).then(|| self.faulted_found as f64 / self.faulted_pages as f64)
    }

    /// What the sample is worth, and what it cost, in one line.
    pub fn describe(&self) -> String {
        let cpu = self.cpu_share.map_or_else(
            || "not measured".into(),
            |s| format!("{:.2}% of one CPU", s * 100.0),
        );
        let misses = match self.fault_recall() {
            Some(r) => format!(
                "of {} pages that took a hint fault (accessed for certain) during an \
                 aggregation, {:.1}% were in a region it found accessed",
                self.faulted_pages,
                r * 100.0
            ),
            None => "not measured (no hint fault in its windows, or regions not kept)".into(),
        };
        format!(
            "DAMON (numatrace's kdamond): {} aggregations of {} ms, {} samples each ({} ms apart): \
             an access is a sample that found its region accessed, so a page counts 0 to {} per \
             window, and every page of a region takes the region's count (mean {:.1} regions of \
             {:.1} MiB: the resolution; {:.1} MiB found accessed per aggregation); {} records past \
             the bound not kept; its misses on this run: {misses}; kdamond CPU {cpu}",
            self.aggregations,
            self.aggr_us / 1000,
            self.samples_per_window,
            self.sample_us as f64 / 1000.0,
            self.samples_per_window,
            self.regions_mean,
            self.region_mib_mean,
            self.accessed_mib_mean,
            self.dropped,
        )
    }
}

impl Sink for Collector {
    fn header(&mut self, h: &crate::trace::Header) -> anyhow::Result<()> {
        if self.spec.is_none() {
            self.spec = h.damon.as_ref().map(|d| d.spec.clone());
        }
        Ok(())
    }

    fn event(&mut self, ev: &Event) -> anyhow::Result<()> {
        match ev {
            Event::Damon(d) => self.push(d.ts_ns, d.start, d.end, d.nr_accesses),
            Event::Fault(f) => self.fault(f.ts_ns, f.src_pfn, f.pages()),
            _ => {}
        }
        Ok(())
    }

    fn snapshot(&mut self, s: &Snapshot) -> anyhow::Result<()> {
        if let Some(cpu) = s.damon_cpu_ns {
            let now = (s.ts_ns, cpu);
            self.cpu = Some(self.cpu.map_or((now, now), |(first, _)| (first, now)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aggregation_s_burst_is_one_window() {
        let mut c = Collector::new(Spec::over(vec![(0, 1 << 30)]));
        let ms = 1_000_000;
        c.push(1000 * ms, 0, 1 << 20, 3);
        c.push(1000 * ms + 20_000, 1 << 20, 1 << 30, 0);
        c.push(1100 * ms, 0, 1 << 30, 20);
        assert_eq!(c.windows().len(), 2);
        assert_eq!(c.windows()[0].start_ns, 900 * ms);
        assert_eq!(c.windows()[1].end_ns, 1100 * ms);
        assert_eq!(c.regions()[1].window, 0);
        assert_eq!(c.regions()[2].window, 1);
        assert_eq!(c.regions()[0].end_pfn, 256);
        let s = c.summary().expect("a kdamond's");
        assert_eq!(s.samples_per_window, 20);
        assert!((s.regions_mean - 1.5).abs() < 1e-9);
        assert!((s.region_mib_mean - 2048.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn records_past_the_bound_are_counted_not_kept() {
        let mut c = Collector::new(Spec::over(vec![(0, 4096)]));
        c.regions = vec![
            Region {
                window: 0,
                start_pfn: 0,
                end_pfn: 1,
                nr_accesses: 0
            };
            MAX_RECORDS
        ];
        c.windows.push(Window {
            start_ns: 0,
            end_ns: 1,
            clock_err_ns: 0,
        });
        c.push(5, 0, 4096, 1);
        assert_eq!(c.regions().len(), MAX_RECORDS);
        assert_eq!(c.summary().map(|s| s.dropped), Some(1));
    }

    #[test]
    fn a_faulted_page_is_found_in_a_region_accessed_in_its_window() {
        let mut c = Collector::new(Spec::over(vec![(0, 1 << 30)]));
        let ms = 1_000_000;
        // Window [900, 1000) ms: pages 0..256 accessed, 256..512 not.
        c.push(1000 * ms, 0, 1 << 20, 3);
        c.push(1000 * ms, 1 << 20, 2 << 20, 0);
        // Window [1000, 1100) ms: everything cold.
        c.push(1100 * ms, 0, 2 << 20, 0);
        c.fault(950 * ms, 10, 2); // found, found
        c.fault(960 * ms, 300, 1); // in the cold region
        c.fault(1050 * ms, 10, 1); // cold in its window
        c.fault(2000 * ms, 10, 1); // in no window
        c.fault(950 * ms, 0, 1); // no PFN: not counted
        let s = c.summary().expect("a kdamond's");
        assert_eq!((s.faulted_pages, s.faulted_found), (4, 2));
        assert!(s.describe().contains("of 4 pages that took a hint fault"));
        assert!(Collector::counting().summary().is_none());
    }

    #[test]
    fn spans_become_byte_ranges_kept_apart() {
        let r = Spec::of_pfn_spans([(262_144, 524_288), (0, 262_144), (5, 5)]);
        assert_eq!(r, vec![(0, 1 << 30), (1 << 30, 2 << 30)]);
    }
}
