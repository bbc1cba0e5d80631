//! The counts of one funnel (a process, or one VMA of it): each stage a
//! slow-tier page passes on its way to DRAM. Faults, decisions and
//! migrations are counted in folios (one per hint fault, as vmstat's
//! numa_hint_faults) and, in the `_pages` fields, in pages (a THP's 512, as
//! vmstat's pgpromote_* count). Sums saturate: a damaged trace can hold any
//! value.
use std::collections::BTreeMap;

use numa_ebpf_common::{FaultEvent, Outcome};
use serde::Serialize;

/// One skip reason's records.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SkipStat {
    pub count: u64,
    /// Those after the latest scan pass (all of them without one).
    pub since_scan: u64,
    pub last_ns: u64,
}

/// Stage counts, in trace time (ns of the events' clock).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stages {
    /// The first event counted here.
    pub first_ns: Option<u64>,
    /// The VMA's size in pages, when a skip record named its bounds.
    pub vma_pages: Option<u64>,
    pub scan_passes: u64,
    pub ptes_protected: u64,
    pub last_scan_ns: Option<u64>,
    /// By the kernel's `numa_vmaskip_reason` (bounded by decode: < 64).
    pub skips: BTreeMap<u32, SkipStat>,
    /// Hint faults on slow-tier folios, and their pages (a THP's 512).
    pub slow_faults: u64,
    pub slow_fault_pages: u64,
    /// Decisions by outcome: folios, and their pages.
    pub promoted: u64,
    pub promoted_pages: u64,
    pub rejected_latency: u64,
    pub rejected_latency_pages: u64,
    pub rejected_rate_limit: u64,
    pub rejected_rate_limit_pages: u64,
    pub rejected_other: u64,
    pub rejected_other_pages: u64,
    /// Of the latency rejections, those with the kernel's latency: its sum
    /// (ms) and count, for their mean.
    pub refused_latency_sum_ms: u64,
    pub refused_latency_n: u64,
    /// The threshold of the latest decision that ran the threshold path:
    /// the one in force at the end (the kernel adjusts it over time).
    pub threshold_ms: Option<u32>,
    /// Migrations tried: folios, and their pages.
    pub migrate_ok: u64,
    pub migrate_ok_pages: u64,
    pub migrate_fail: u64,
    pub migrate_fail_pages: u64,
}

/// Adds one folio of `pages` pages to a (folios, pages) pair of counts.
fn add_folio((folios, in_pages): (&mut u64, &mut u64), pages: u64) {
    *folios = folios.saturating_add(1);
    *in_pages = in_pages.saturating_add(pages);
}

impl Stages {
    fn seen(&mut self, ts_ns: u64) {
        let first = self.first_ns.get_or_insert(ts_ns);
        *first = (*first).min(ts_ns);
    }

    pub fn scan(&mut self, ts_ns: u64, ptes: u64) {
        self.seen(ts_ns);
        self.scan_passes = self.scan_passes.saturating_add(1);
        self.ptes_protected = self.ptes_protected.saturating_add(ptes);
        if self.last_scan_ns.is_none_or(|t| t <= ts_ns) {
            self.last_scan_ns = Some(ts_ns);
            for s in self.skips.values_mut() {
                s.since_scan = 0;
            }
        }
    }

    pub fn skip(&mut self, ts_ns: u64, reason: u32) {
        self.seen(ts_ns);
        let s = self.skips.entry(reason).or_default();
        s.count = s.count.saturating_add(1);
        s.last_ns = s.last_ns.max(ts_ns);
        if self.last_scan_ns.is_none_or(|t| t <= ts_ns) {
            s.since_scan = s.since_scan.saturating_add(1);
        }
    }

    /// A hint fault on a slow-tier folio.
    pub fn fault(&mut self, f: &FaultEvent) {
        self.seen(f.ts_ns);
        let pages = f.pages();
        add_folio((&mut self.slow_faults, &mut self.slow_fault_pages), pages);
        let outcome = f.typed_outcome();
        if let Some(counts) = self.decided(outcome) {
            add_folio(counts, pages);
        }
        if f.has_kernel_latency() {
            self.threshold_ms = Some(f.threshold_ms);
            if outcome == Outcome::RejectLatency {
                self.refused_latency_n = self.refused_latency_n.saturating_add(1);
                self.refused_latency_sum_ms = self
                    .refused_latency_sum_ms
                    .saturating_add(u64::from(f.kernel_latency_ms));
            }
        }
        if f.migrate_tried() {
            let counts = if f.migrated() {
                (&mut self.migrate_ok, &mut self.migrate_ok_pages)
            } else {
                (&mut self.migrate_fail, &mut self.migrate_fail_pages)
            };
            add_folio(counts, pages);
        }
    }

    /// The (folios, pages) counts of a decision's outcome; none for a
    /// fault without a tiering decision.
    fn decided(&mut self, outcome: Outcome) -> Option<(&mut u64, &mut u64)> {
        match outcome {
            Outcome::PromoteHot | Outcome::PromoteFreeSpace => {
                Some((&mut self.promoted, &mut self.promoted_pages))
            }
            Outcome::RejectLatency => {
                Some((&mut self.rejected_latency, &mut self.rejected_latency_pages))
            }
            Outcome::RejectRateLimit => Some((
                &mut self.rejected_rate_limit,
                &mut self.rejected_rate_limit_pages,
            )),
            Outcome::RejectOther => {
                Some((&mut self.rejected_other, &mut self.rejected_other_pages))
            }
            Outcome::NotTiering | Outcome::NoDecision => None,
        }
    }

    /// Adds `o`'s counts (a provisional region taken into the VMA a skip
    /// record names). Skips since the latest scan are summed as they are:
    /// each side counted them against its own latest scan.
    pub fn absorb(&mut self, o: &Stages) {
        if let Some(t) = o.first_ns {
            self.seen(t);
        }
        let sum = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        sum(&mut self.scan_passes, o.scan_passes);
        sum(&mut self.ptes_protected, o.ptes_protected);
        self.last_scan_ns = self.last_scan_ns.max(o.last_scan_ns);
        for (r, s) in &o.skips {
            let m = self.skips.entry(*r).or_default();
            sum(&mut m.count, s.count);
            sum(&mut m.since_scan, s.since_scan);
            m.last_ns = m.last_ns.max(s.last_ns);
        }
        sum(&mut self.slow_faults, o.slow_faults);
        sum(&mut self.slow_fault_pages, o.slow_fault_pages);
        sum(&mut self.promoted, o.promoted);
        sum(&mut self.promoted_pages, o.promoted_pages);
        sum(&mut self.rejected_latency, o.rejected_latency);
        sum(&mut self.rejected_latency_pages, o.rejected_latency_pages);
        sum(&mut self.rejected_rate_limit, o.rejected_rate_limit);
        sum(
            &mut self.rejected_rate_limit_pages,
            o.rejected_rate_limit_pages,
        );
        sum(&mut self.rejected_other, o.rejected_other);
        sum(&mut self.rejected_other_pages, o.rejected_other_pages);
        sum(&mut self.refused_latency_sum_ms, o.refused_latency_sum_ms);
        sum(&mut self.refused_latency_n, o.refused_latency_n);
        self.threshold_ms = self.threshold_ms.or(o.threshold_ms);
        sum(&mut self.migrate_ok, o.migrate_ok);
        sum(&mut self.migrate_ok_pages, o.migrate_ok_pages);
        sum(&mut self.migrate_fail, o.migrate_fail);
        sum(&mut self.migrate_fail_pages, o.migrate_fail_pages);
    }

    /// Tiering decisions (folios): promoted or refused.
    pub fn decisions(&self) -> u64 {
        self.promoted.saturating_add(self.refused())
    }

    /// The pages of [`decisions`](Self::decisions).
    pub fn decision_pages(&self) -> u64 {
        self.promoted_pages.saturating_add(self.refused_pages())
    }

    /// Refused decisions (folios).
    pub fn refused(&self) -> u64 {
        self.rejected_latency
            .saturating_add(self.rejected_rate_limit)
            .saturating_add(self.rejected_other)
    }

    /// The pages of [`refused`](Self::refused).
    pub fn refused_pages(&self) -> u64 {
        self.rejected_latency_pages
            .saturating_add(self.rejected_rate_limit_pages)
            .saturating_add(self.rejected_other_pages)
    }

    /// What the funnel ranks by: slow-tier pages protected or faulted.
    pub fn activity(&self) -> u64 {
        self.ptes_protected.saturating_add(self.slow_fault_pages)
    }

    /// Time without a scan pass at `end_ns`: since the latest pass, or
    /// since the first event when none was seen.
    pub fn unscanned_ns(&self, end_ns: u64) -> u64 {
        let since = self.last_scan_ns.or(self.first_ns).unwrap_or(end_ns);
        end_ns.saturating_sub(since)
    }

    /// The mean kernel latency of the latency rejections, ms.
    pub fn refused_latency_mean_ms(&self) -> Option<u64> {
        (self.refused_latency_n > 0).then(|| self.refused_latency_sum_ms / self.refused_latency_n)
    }

    /// The report's view at `end_ns`: times as seconds before the end.
    pub fn row(&self, end_ns: u64) -> StageRow {
        let ago = |t: u64| end_ns.saturating_sub(t) as f64 / 1e9;
        StageRow {
            scan_passes: self.scan_passes,
            ptes_protected: self.ptes_protected,
            last_scan_s_ago: self.last_scan_ns.map(ago),
            unscanned_s: self.unscanned_ns(end_ns) as f64 / 1e9,
            skips: self
                .skips
                .iter()
                .map(|(r, s)| {
                    let row = SkipRow {
                        count: s.count,
                        since_last_scan: s.since_scan,
                        last_s_ago: ago(s.last_ns),
                    };
                    (crate::decode::skip_reason_name(*r), row)
                })
                .collect(),
            slow_faults: self.slow_faults,
            slow_fault_pages: self.slow_fault_pages,
            decisions: self.decisions(),
            decision_pages: self.decision_pages(),
            promoted: self.promoted,
            promoted_pages: self.promoted_pages,
            rejected_latency: self.rejected_latency,
            rejected_latency_pages: self.rejected_latency_pages,
            rejected_rate_limit: self.rejected_rate_limit,
            rejected_rate_limit_pages: self.rejected_rate_limit_pages,
            rejected_other: self.rejected_other,
            rejected_other_pages: self.rejected_other_pages,
            refused_latency_mean_ms: self.refused_latency_mean_ms(),
            threshold_ms: self.threshold_ms,
            migrate_ok: self.migrate_ok,
            migrate_ok_pages: self.migrate_ok_pages,
            migrate_fail: self.migrate_fail,
            migrate_fail_pages: self.migrate_fail_pages,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct SkipRow {
    pub count: u64,
    pub since_last_scan: u64,
    pub last_s_ago: f64,
}

/// [`Stages`] as `stats --json` shows them ("ago": before the report's end).
/// Faults, decisions and migrations count folios (one per hint fault);
/// each `_pages` field beside one counts the same folios' pages, what
/// vmstat's page counters (pgpromote_success) compare with.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct StageRow {
    /// Passes, and the PTEs they protected (base pages).
    pub scan_passes: u64,
    pub ptes_protected: u64,
    pub last_scan_s_ago: Option<f64>,
    pub unscanned_s: f64,
    pub skips: BTreeMap<String, SkipRow>,
    pub slow_faults: u64,
    pub slow_fault_pages: u64,
    pub decisions: u64,
    pub decision_pages: u64,
    pub promoted: u64,
    pub promoted_pages: u64,
    pub rejected_latency: u64,
    pub rejected_latency_pages: u64,
    pub rejected_rate_limit: u64,
    pub rejected_rate_limit_pages: u64,
    pub rejected_other: u64,
    pub rejected_other_pages: u64,
    pub refused_latency_mean_ms: Option<u64>,
    pub threshold_ms: Option<u32>,
    pub migrate_ok: u64,
    pub migrate_ok_pages: u64,
    pub migrate_fail: u64,
    pub migrate_fail_pages: u64,
}
