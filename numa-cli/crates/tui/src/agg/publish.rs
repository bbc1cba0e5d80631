//! Publication: the aggregator's state as a [`Frame`] of rates, rows,
//! histograms and the focused process's detail.
use std::collections::BTreeMap;

use numa_core::model::{
    cgroups::OTHER_CGROUPS,
    lifecycle::{TripCounts, Trips},
    policy::params_text,
};
use numa_ebpf_common::Counter;

use crate::frame::{Axis, Detail, Frame, HistView, ModelView, ProcRow, RateSeries, Warnings};

use super::{
    header::tier_views,
    hists::Hists,
    procs::{Proc, Rates, Tally},
    Aggregator, Focus, MAX_ROWS,
};

/// Units of the rates: hint faults and decisions count folios, one per
/// fault (a THP's is one); vmstat's page counters count a THP as 512.
pub const FOLIOS: &str = "folios";
pub const PAGES: &str = "pages";

/// The system rates and their units; the pages are side by side with
/// vmstat's.
pub(super) const BASE_SERIES: [(&str, &str); 12] = [
    ("hint faults", FOLIOS),
    ("decisions", FOLIOS),
    ("promoted", FOLIOS),
    ("promoted pg", PAGES),
    ("vmstat promo", PAGES),
    ("rej latency", FOLIOS),
    ("rej rate lim", FOLIOS),
    ("rej other", FOLIOS),
    ("demoted pg", PAGES),
    // Promotions demoted again within the lifecycle's window.
    ("ping-pong", FOLIOS),
    ("migrate fail", FOLIOS),
    ("local %", "%"),
];

pub fn short_name(name: &str) -> &'static str {
    match name {
        "kernel-time" => "ktime",
        "fault-count" => "fcount",
        "two-touch" => "2touch",
        _ => "model",
    }
}

fn axis_of(name: &str) -> Axis {
    match name {
        "fault-count" => Axis::FaultDelta,
        "two-touch" => Axis::WindowMs,
        _ => Axis::LatencyMs,
    }
}

fn pct(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| 100.0 * part as f64 / whole as f64)
}

/// Of a row's promotions followed across tiers, the share undone.
fn pingpong_pct(trips: Option<&Trips>) -> Option<f64> {
    trips.and_then(|t| pct(t.pingpong, t.promotions))
}

impl Aggregator {
    pub(super) fn frame(&mut self, now: u64, focus: Focus) -> Frame {
        self.seq += 1;
        self.learn_cgroup_paths();
        let rows: Vec<ProcRow> = {
            // A process whose pages the scanner protected but that never
            // faults on them is listed too: its verdict (cold, or not
            // scanned since) is the answer the table is for.
            let mut v: Vec<&Proc> = self
                .procs
                .values()
                .filter(|p| p.tally.counts.faults > 0 || p.ptes > 0)
                .collect();
            v.sort_by(|a, b| busiest_first(&a.tally, &b.tally).then(a.pid.cmp(&b.pid)));
            v.into_iter()
                .take(MAX_ROWS)
                .map(|p| ProcRow {
                    verdict: self.verdict_short(p.pid, now),
                    cgroup: (p.cgroup_id != 0).then(|| self.cgroup_name(p.cgroup_id)),
                    resident: p.resident.clone(),
                    pingpong_pct: pingpong_pct(self.lifecycle.process(p.pid)),
                    ..tally_row(p.pid, p.comm.clone(), &p.tally)
                })
                .collect()
        };
        let cgroups = self.cgroup_rows(now);
        let mut header = self.st.header.clone();
        header.tiers = tier_views(&self.st.tiers, &self.st.nodes);
        header.kernel_threshold_ms = self.kernel_threshold.clone();
        Frame {
            seq: self.seq,
            source: self.source.clone(),
            ended: self.ended.clone(),
            elapsed_s: match (self.window.first().map(|s| s.ts_ns).or(self.first_ts), now) {
                (Some(a), b) => b.saturating_sub(a) as f64 / 1e9,
                _ => 0.0,
            },
            interval_s: self.last_dt_s,
            events: self.events,
            header,
            warnings: self.warnings(),
            rates: self.rate_series(),
            models: self.model_views(),
            system: self.system_row(),
            processes: rows,
            cgroups,
            hist: self.hist_view(focus.hist_pid),
            detail: focus.detail_pid.and_then(|pid| {
                let (verdict, vma_verdicts) = self.verdict_lines(pid, now);
                self.detail(pid).map(|d| Detail {
                    verdict,
                    vma_verdicts,
                    trips: self.lifecycle.process(pid).map(TripCounts::of),
                    ..d
                })
            }),
        }
    }

    fn warnings(&self) -> Warnings {
        Warnings {
            ring_drops: self.window.count(Counter::RingDrops),
            runs_missed: self.window.count(Counter::RunsMissed),
            evictions: self.window.evictions(self.st.stamp_capacity),
            stamp_misses: self.window.count(Counter::StampMisses),
        }
    }

    fn rate_series(&self) -> Vec<RateSeries> {
        let names = BASE_SERIES
            .iter()
            .map(|(name, unit)| ((*name).to_owned(), *unit))
            .chain(
                self.model_views()
                    .into_iter()
                    .map(|m| (format!("{} would", m.short), FOLIOS)),
            );
        names
            .zip(&self.history)
            .enumerate()
            .map(|(i, ((name, unit), h))| RateSeries {
                name,
                unit: unit.to_owned(),
                current: h.back().copied().unwrap_or(0.0),
                history: h.iter().copied().collect(),
                note: if i == 0 {
                    let r = &self.sys_rates.counts;
                    if r[0] > 0.0 {
                        format!("{:.0}% local", 100.0 * r[1] / r[0])
                    } else {
                        String::new()
                    }
                } else {
                    String::new()
                },
            })
            .collect()
    }

    fn model_views(&self) -> Vec<ModelView> {
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        self.models
            .iter()
            .zip(self.bank.policies())
            .enumerate()
            .map(|(i, (m, policy))| {
                let name = policy.name();
                let base = short_name(&name);
                let k = seen.entry(base).or_default();
                *k += 1;
                let short = if *k == 1 {
                    base.to_owned()
                } else {
                    format!("{}{}", &base[..base.len().min(5)], k)
                };
                ModelView {
                    axis: axis_of(&name),
                    name,
                    short,
                    params: params_text(&policy.params(), ","),
                    threshold: policy.threshold(),
                    promote_s: self.sys_rates.models.get(i).copied().unwrap_or(0.0),
                    agree_pct: pct(m.agree, self.sys_decided),
                }
            })
            .collect()
    }

    /// Every cgroup's row, busiest first, with its verdict judged at `now`.
    fn cgroup_rows(&self, now: u64) -> Vec<ProcRow> {
        let mut v: Vec<(u64, &Tally)> = self.cgroups.iter().collect();
        v.sort_by(|a, b| busiest_first(a.1, b.1).then(a.0.cmp(&b.0)));
        v.into_iter()
            .take(MAX_ROWS)
            .map(|(id, t)| ProcRow {
                verdict: self
                    .funnel
                    .cgroup_verdict(id, now, self.hotness)
                    .map(|v| v.with_pingpong(self.lifecycle.cgroup(id)).short()),
                cgroup: Some(self.cgroup_name(id)),
                pingpong_pct: pingpong_pct(self.lifecycle.cgroup(id)),
                ..tally_row(0, String::new(), t)
            })
            .collect()
    }

    /// Looks up the paths of cgroups seen since the last frame.
    fn learn_cgroup_paths(&mut self) {
        if let Some(paths) = &mut self.cgroup_paths {
            paths.learn(self.cgroups.ids());
        }
    }

    /// Cgroup `id`'s path, else `id N` (or the others' row past the bound).
    fn cgroup_name(&self, id: u64) -> String {
        if id == OTHER_CGROUPS {
            return "(the other cgroups)".into();
        }
        let path = self.cgroup_paths.as_ref().and_then(|p| p.path(id));
        path.map_or_else(|| format!("id {id}"), str::to_owned)
    }

    fn system_row(&self) -> ProcRow {
        let mut resident: BTreeMap<u32, u64> = BTreeMap::new();
        let mut any = false;
        for p in self.procs.values() {
            for (n, pages) in p.resident.iter().flatten() {
                any = true;
                *resident.entry(*n).or_default() += pages;
            }
        }
        ProcRow {
            agree_pct: self
                .models
                .iter()
                .map(|m| pct(m.agree, self.sys_decided))
                .collect(),
            faults_total: self.sys.faults,
            pingpong_pct: pct(self.lifecycle.counts().0, self.lifecycle.promotions()),
            resident: any.then(|| resident.into_iter().collect()),
            ..rates_row(0, "all processes".into(), &self.sys_rates, &self.sys_hists)
        }
    }

    fn hist_view(&self, pid: Option<u32>) -> HistView {
        let (title, h) = match pid.and_then(|pid| self.procs.get(pid)) {
            Some(p) => (format!("{} {}", p.pid, p.comm), &p.tally.hists),
            None => ("all processes".to_owned(), &self.sys_hists),
        };
        HistView {
            title,
            pid: pid.filter(|p| self.procs.contains(*p)),
            latency_promoted: h.latency[0].to_vec(),
            latency_rejected: h.latency[1].to_vec(),
            delta_promoted: h.delta[0].to_vec(),
            delta_rejected: h.delta[1].to_vec(),
            kernel_threshold_ms: self
                .kernel_threshold
                .values()
                .max()
                .map(|v| u64::from(*v))
                .or(self.st.header.hot_threshold_ms),
        }
    }
}

/// Busiest first: the most hint faults per second, then in all.
fn busiest_first(a: &Tally, b: &Tally) -> std::cmp::Ordering {
    b.rates.counts[0]
        .total_cmp(&a.rates.counts[0])
        .then(b.counts.faults.cmp(&a.counts.faults))
}

/// A table row of `t`; the caller fills in the resident pages, the
/// verdict and the cgroup.
fn tally_row(pid: u32, comm: String, t: &Tally) -> ProcRow {
    ProcRow {
        agree_pct: t
            .model_agree
            .iter()
            .map(|a| pct(*a, t.counts.decisions))
            .collect(),
        faults_total: t.counts.faults,
        ..rates_row(pid, comm, &t.rates, &t.hists)
    }
}

/// The rates and percentiles of a table row; the caller fills in the
/// agreement, the total, the resident pages and the verdict.
fn rates_row(pid: u32, comm: String, rates: &Rates, h: &Hists) -> ProcRow {
    let r = &rates.counts;
    ProcRow {
        pid,
        comm,
        faults_s: r[0],
        local_pct: (r[0] > 0.0).then(|| 100.0 * r[1] / r[0]),
        decisions_s: r[2],
        promoted_s: r[3],
        promoted_pages_s: r[8],
        rej_latency_s: r[4],
        rej_rate_limit_s: r[5],
        model_s: rates.models.clone(),
        agree_pct: Vec::new(),
        lat_p50_ms: h.lat_all.quantile(0.5).map(|v| v as f64 / 1e6),
        lat_p99_ms: h.lat_all.quantile(0.99).map(|v| v as f64 / 1e6),
        delta_p50: h.delta_all.quantile(0.5),
        faults_total: 0,
        pingpong_pct: None,
        resident: None,
        verdict: None,
        cgroup: None,
    }
}
