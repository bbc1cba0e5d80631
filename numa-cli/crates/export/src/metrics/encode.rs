//! The OpenMetrics encoding of a [`MetricsState`] (and the promoter's
//! state file) through `prometheus-client`'s encoder: one function per
//! group of families, in the order they are exposed.
use std::fmt::Write as _;

use prometheus_client::{
    collector::Collector,
    encoding::{
        DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeLabelValue, LabelValueEncoder,
        NoLabelSet,
    },
    metrics::MetricType,
    registry::{Registry, Unit},
};

use numa_host::promoter_state::{PromoterState, Reading};

use super::{
    prometheus_buckets, Decision, FunnelMetrics, KernelMetrics, MetricsState, MigratedPages,
    ModelMetrics, OutcomeHist, Pingpong,
};

/// The unit of every figure in pages: OpenMetrics puts it last in the
/// family's name (`x_pages`, samples `x_pages_total`) and on a `# UNIT`
/// line, which says apart the folio figure of the same name without it.
fn pages_unit() -> Unit {
    Unit::Other("pages".to_owned())
}

/// A label value escaped as both text formats require (`\`, `"`, newline):
/// comms come from processes and can contain anything. `prometheus-client`
/// writes label values verbatim.
struct Esc<'a>(&'a str);

impl EncodeLabelValue for Esc<'_> {
    fn encode(&self, enc: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let mut rest = self.0;
        while let Some(i) = rest.find(['\\', '"', '\n']) {
            enc.write_str(&rest[..i])?;
            enc.write_str(match rest.as_bytes()[i] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[i + 1..];
        }
        enc.write_str(rest)
    }
}

#[derive(Debug)]
struct StateCollector(std::sync::Arc<MetricsState>, Option<Reading>);

/// The state in the OpenMetrics text format, `# EOF` included.
pub fn encode_openmetrics(state: std::sync::Arc<MetricsState>) -> Result<String, std::fmt::Error> {
    encode_openmetrics_with(state, None)
}

/// [`encode_openmetrics`] plus the promoter's metrics when `promoter` is
/// given (the exporter reads the state file per scrape and textfile tick).
pub fn encode_openmetrics_with(
    state: std::sync::Arc<MetricsState>,
    promoter: Option<Reading>,
) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(StateCollector(state, promoter)));
    let mut out = String::with_capacity(128 << 10);
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    enc.encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&v, None)
}

/// One counter family, a sample per `(labels, value)` row.
fn counters<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, u64)>,
) -> std::fmt::Result {
    counters_in(enc, name, None, help, rows)
}

/// [`counters`] in `unit` (the family's name gets its suffix).
fn counters_in<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    unit: Option<&Unit>,
    help: &str,
    rows: impl IntoIterator<Item = (L, u64)>,
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for (labels, v) in rows {
        m.encode_family(&labels)?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    Ok(())
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: impl EncodeGaugeValue,
) -> std::fmt::Result {
    enc.encode_descriptor(name, help, unit, MetricType::Gauge)?
        .encode_gauge(&v)
}

fn histograms(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    scale: f64,
    hists: &[OutcomeHist],
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, unit, MetricType::Histogram)?;
    for h in hists {
        let labels = [("outcome", Esc(h.outcome))];
        m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
            h.sum as f64 / scale,
            h.count(),
            &prometheus_buckets(&h.buckets, scale),
            None,
        )?;
    }
    Ok(())
}

impl Collector for StateCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &*self.0;
        info(&mut enc, s)?;
        if let Some(k) = &s.kernel {
            kernel(&mut enc, k)?;
            migrations(&mut enc, k, &s.migrated_pages)?;
        }
        decisions(&mut enc, s)?;
        models(&mut enc, s)?;
        processes(&mut enc, s)?;
        cgroups(&mut enc, s)?;
        if s.kernel.is_some() {
            funnel(&mut enc, &s.funnel)?;
            demotions(&mut enc, &s.demotions, &s.pingpong)?;
        }
        vmstat(&mut enc, s)?;
        if let Some(r) = &self.1 {
            promoter(&mut enc, r)?;
        }
        exporter(&mut enc, s)
    }
}

/// `numatrace_info`.
fn info(enc: &mut DescriptorEncoder, s: &MetricsState) -> std::fmt::Result {
    let info = [
        ("version", Esc(&s.info.version)),
        ("kernel", Esc(&s.info.kernel)),
        ("attach_mode", Esc(&s.info.attach_mode)),
    ];
    enc.encode_descriptor(
        "numatrace",
        "numatrace build, the kernel it watches and how its probes are attached.",
        None,
        MetricType::Info,
    )?
    .encode_info(&info)
}

/// The BPF counters and histograms.
fn kernel(enc: &mut DescriptorEncoder, k: &KernelMetrics) -> std::fmt::Result {
    counter(
        enc,
        "numatrace_hint_faults",
        "NUMA hint faults, one per fault (a folio's PTE or a PMD) as vmstat's numa_hint_faults counts them (in-kernel counter, exact even when events are sampled).",
        k.hint_faults,
    )?;
    counter(
        enc,
        "numatrace_ring_drops",
        "Fault records lost because the ring buffer was full (counters and histograms stay exact).",
        k.ring_drops,
    )?;
    counter(
        enc,
        "numatrace_probe_runs_missed",
        "Probe runs the kernel skipped because the same probe was running, preempted, on that CPU: events lost or incomplete, counters and histograms included.",
        k.runs_missed,
    )?;
    counter(
        enc,
        "numatrace_map_evictions",
        "Per-folio scan stamps lost before their fault (lower bound: inserts - capacity; 0 with the PFN-indexed array).",
        k.map_evictions,
    )?;
    counter(
        enc,
        "numatrace_unfollowed_faults",
        "Hint faults (one per folio) on slow-node folios that per-folio sampling does not follow: counted, without latency or delta.",
        k.unfollowed_faults,
    )?;
    gauge(
        enc,
        "numatrace_map_budget",
        "--map-budget: kernel memory all of numatrace's maps may take.",
        Some(&Unit::Bytes),
        k.map_budget_bytes as i64,
    )?;
    gauge(
        enc,
        "numatrace_map_memory",
        "Kernel memory of numatrace's maps at attach (fdinfo memlock).",
        Some(&Unit::Bytes),
        k.map_bytes as i64,
    )?;
    gauge(
        enc,
        "numatrace_folio_sample_rate",
        "One slow-node folio in this many is followed (latency, delta and model figures scale by it).",
        None,
        k.folio_sample_rate as i64,
    )?;
    gauge(
        enc,
        "numatrace_folio_coverage_ratio",
        "Followed PFNs over the slow nodes' PFNs.",
        None,
        k.folio_coverage,
    )?;
    histograms(
        enc,
        "numatrace_scan_to_fault_latency",
        "Time from the scanner protecting a slow-memory folio to its hint fault, by the kernel's decision; in-kernel log2 buckets, counting folios (one per hint fault).",
        Some(&Unit::Seconds),
        1e9,
        &k.latency_ns,
    )?;
    histograms(
        enc,
        "numatrace_fault_count_delta",
        "Hint faults of the process between the scan and the fault (the fault-count RFC's measure), by the kernel's decision; in-kernel log2 buckets, counting folios (one per hint fault).",
        None,
        1.0,
        &k.fault_delta,
    )
}

/// The kernel's migrations in folios (in-kernel counters) and in pages
/// (fault records), and the pages promoted to the top tier.
fn migrations(
    enc: &mut DescriptorEncoder,
    k: &KernelMetrics,
    pages: &MigratedPages,
) -> std::fmt::Result {
    let by_result = |success, fail| {
        [("success", success), ("fail", fail)].map(|(result, v)| ([("result", Esc(result))], v))
    };
    counters(
        enc,
        "numatrace_migrations",
        "migrate_misplaced_folio/page results in folios, one per call whatever the folio's size (in-kernel counter); numatrace_migrated_pages has their pages.",
        by_result(k.migrations_success, k.migrations_fail),
    )?;
    counters_in(
        enc,
        "numatrace_migrated",
        Some(&pages_unit()),
        "migrate_misplaced_folio/page results in pages, as vmstat counts them (a THP is 512): the migrated folios' pages from fault events, not an in-kernel counter (scaled by --sample, short by ring drops).",
        by_result(pages.success, pages.fail),
    )?;
    enc.encode_descriptor(
        "numatrace_promoted",
        "Pages migrated on hint faults from a lower tier to the top tier, what vmstat's pgpromote_success counts: the folios' pages from fault events (scaled by --sample, short by ring drops).",
        Some(&pages_unit()),
        MetricType::Counter,
    )?
    .encode_counter::<NoLabelSet, _, u64>(&pages.promoted, None)
}

/// `numatrace_promotion_decisions` and their pages, when there are any.
fn decisions(enc: &mut DescriptorEncoder, s: &MetricsState) -> std::fmt::Result {
    if s.decisions.is_empty() {
        return Ok(());
    }
    let nodes: Vec<(String, String)> = s
        .decisions
        .iter()
        .map(|d| (d.src_node.to_string(), d.dst_node.to_string()))
        .collect();
    let rows = |value: fn(&Decision) -> u64| {
        s.decisions.iter().zip(&nodes).map(move |(d, (src, dst))| {
            let labels = [
                ("result", Esc(if d.promote { "promote" } else { "reject" })),
                ("reason", Esc(d.reason)),
                ("src_node", Esc(src)),
                ("dst_node", Esc(dst)),
            ];
            (labels, value(d))
        })
    };
    counters(
        enc,
        "numatrace_promotion_decisions",
        "should_numa_migrate_memory decisions by result, reason and node pair, in folios: one per hint fault (from fault events; exact unless sampled or dropped).",
        rows(|d| d.count),
    )?;
    counters_in(
        enc,
        "numatrace_promotion_decision",
        Some(&pages_unit()),
        "The same decisions in pages, as vmstat's pgpromote_* count them (a THP's decision is 512): the decided folios' pages (from fault events; exact unless sampled or dropped).",
        rows(|d| d.pages),
    )
}

/// The shadow models' verdicts, when models run.
fn models(enc: &mut DescriptorEncoder, s: &MetricsState) -> std::fmt::Result {
    if s.models.is_empty() {
        return Ok(());
    }
    counters(
        enc,
        "numatrace_model_promote",
        "Decisions a shadow policy would have promoted, in folios: one per hint fault.",
        s.models
            .iter()
            .map(|r| ([("model", Esc(&r.model))], r.promote)),
    )?;
    counters_in(
        enc,
        "numatrace_model_promote",
        Some(&pages_unit()),
        "Pages of the decisions a shadow policy would have promoted, as vmstat's pgpromote_success would count them had every migration succeeded.",
        s.models
            .iter()
            .map(|r| ([("model", Esc(&r.model))], r.promote_pages)),
    )?;
    let rows = |pages: bool| {
        s.models.iter().flat_map(move |r| {
            agreement_cells(r).map(|(cell, folios, in_pages)| {
                let labels = [("model", Esc(&r.model)), ("cell", Esc(cell))];
                (labels, if pages { in_pages } else { folios })
            })
        })
    };
    counters(
        enc,
        "numatrace_model_agreement",
        "Decisions by (kernel, model) verdict, in folios (one per hint fault): both promote, kernel_only, model_only, neither.",
        rows(false),
    )?;
    counters_in(
        enc,
        "numatrace_model_agreement",
        Some(&pages_unit()),
        "The same verdicts in pages, as vmstat counts them (a THP's decision is 512).",
        rows(true),
    )
}

/// A model's agreement cells: the cell, its folios and their pages.
fn agreement_cells(r: &ModelMetrics) -> [(&'static str, u64, u64); 4] {
    [
        ("both", r.both, r.both_pages),
        ("kernel_only", r.kernel_only, r.kernel_only_pages),
        ("model_only", r.model_only, r.model_only_pages),
        ("neither", r.neither, r.neither_pages),
    ]
}

/// The top processes (`--per-process`), when asked for.
fn processes(enc: &mut DescriptorEncoder, s: &MetricsState) -> std::fmt::Result {
    if s.processes.is_empty() {
        return Ok(());
    }
    let pids: Vec<String> = s.processes.iter().map(|p| p.pid.to_string()).collect();
    counters(
        enc,
        "numatrace_process_hint_faults",
        "Hint faults of the top processes (--per-process), one per fault (folio), from fault events.",
        s.processes
            .iter()
            .zip(&pids)
            .map(|(p, pid)| ([("pid", Esc(pid)), ("comm", Esc(&p.comm))], p.hint_faults)),
    )?;
    let rows = |pages: bool| {
        s.processes.iter().zip(&pids).flat_map(move |(p, pid)| {
            let (promote, reject) = if pages {
                (p.promote_pages, p.reject_pages)
            } else {
                (p.promote, p.reject)
            };
            [("promote", promote), ("reject", reject)].map(|(result, v)| {
                let labels = [
                    ("pid", Esc(pid)),
                    ("comm", Esc(&p.comm)),
                    ("result", Esc(result)),
                ];
                (labels, v)
            })
        })
    };
    counters(
        enc,
        "numatrace_process_promotion_decisions",
        "Promotion decisions of the top processes (--per-process) by result, in folios: one per hint fault (from fault events).",
        rows(false),
    )?;
    counters_in(
        enc,
        "numatrace_process_promotion_decision",
        Some(&pages_unit()),
        "The same decisions in pages, as vmstat counts them (a THP's decision is 512).",
        rows(true),
    )?;
    process_trips(enc, s, &pids)?;
    process_verdicts(enc, s, &pids)
}

/// The top cgroups (`--per-cgroup`) and the rest (`cgroup="other"`), in
/// pages as their memory.stat counts them, when asked for.
fn cgroups(enc: &mut DescriptorEncoder, s: &MetricsState) -> std::fmt::Result {
    if s.cgroups.is_empty() {
        return Ok(());
    }
    let unit = pages_unit();
    counters_in(
        enc,
        "numatrace_cgroup_hint_faults",
        Some(&unit),
        "Hint faults of the top cgroups (--per-cgroup; the rest as cgroup=\"other\") by the faulting task's cgroup, in pages (memory.stat's numa_hint_faults), from fault events.",
        s.cgroups
            .iter()
            .map(|c| ([("cgroup", Esc(&c.cgroup))], c.hint_faults)),
    )?;
    counters_in(
        enc,
        "numatrace_cgroup_promotion_decision",
        Some(&unit),
        "Promotion decisions of the top cgroups (--per-cgroup) by result, in pages.",
        s.cgroups.iter().flat_map(|c| {
            [("promote", c.promote), ("reject", c.reject)]
                .map(|(result, v)| ([("cgroup", Esc(&c.cgroup)), ("result", Esc(result))], v))
        }),
    )?;
    counters_in(
        enc,
        "numatrace_cgroup_promoted",
        Some(&unit),
        "Pages of the top cgroups (--per-cgroup) migrated from a lower tier to the top tier (memory.stat's pgpromote_success).",
        s.cgroups
            .iter()
            .map(|c| ([("cgroup", Esc(&c.cgroup))], c.promoted)),
    )?;
    let mut m = enc.encode_descriptor(
        "numatrace_cgroup_verdict",
        "Where the slow-tier pages of the top cgroups (--per-cgroup) stop: 1 for the funnel's verdict over all their processes.",
        None,
        MetricType::Gauge,
    )?;
    for c in s.cgroups.iter().filter(|c| !c.verdict.is_empty()) {
        let labels = [("cgroup", Esc(&c.cgroup)), ("verdict", Esc(c.verdict))];
        m.encode_family(&labels)?.encode_gauge(&1i64)?;
    }
    Ok(())
}

/// Demotions of the folios each top process promoted, by reclaimer, and
/// its ping-pongs.
fn process_trips(
    enc: &mut DescriptorEncoder,
    s: &MetricsState,
    pids: &[String],
) -> std::fmt::Result {
    counters(
        enc,
        "numatrace_process_demotions",
        "Demotions of the folios the top processes (--per-process) promoted, by reclaimer (kswapd, direct, khugepaged), in folios.",
        s.processes.iter().zip(pids).flat_map(|(p, pid)| {
            p.demoted_by.iter().map(move |(kind, v)| {
                let labels = [("pid", Esc(pid)), ("comm", Esc(&p.comm)), ("kind", Esc(kind))];
                (labels, *v)
            })
        }),
    )?;
    counters(
        enc,
        "numatrace_process_pingpong",
        "Folios the top processes (--per-process) promoted that were demoted again within 600 s (ping-pong).",
        s.processes
            .iter()
            .zip(pids)
            .map(|(p, pid)| ([("pid", Esc(pid)), ("comm", Esc(&p.comm))], p.pingpong)),
    )
}

/// `numatrace_process_verdict`: 1 for each top process's verdict.
fn process_verdicts(
    enc: &mut DescriptorEncoder,
    s: &MetricsState,
    pids: &[String],
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(
        "numatrace_process_verdict",
        "Where the slow-tier pages of the top processes (--per-process) stop: 1 for the funnel's verdict.",
        None,
        MetricType::Gauge,
    )?;
    for (p, pid) in s
        .processes
        .iter()
        .zip(pids)
        .filter(|(p, _)| !p.verdict.is_empty())
    {
        let labels = [
            ("pid", Esc(pid)),
            ("comm", Esc(&p.comm)),
            ("verdict", Esc(p.verdict)),
        ];
        m.encode_family(&labels)?.encode_gauge(&1i64)?;
    }
    Ok(())
}

/// Reclaim's demotions, per folio, by who reclaimed, and the promotions
/// they undid.
fn demotions(
    enc: &mut DescriptorEncoder,
    by_kind: &[(String, u64)],
    p: &Pingpong,
) -> std::fmt::Result {
    counters(
        enc,
        "numatrace_demotions",
        "Pages reclaim moved down a tier, by reclaimer (kswapd, direct, khugepaged: the kernel's pgdemote_*).",
        by_kind.iter().map(|(kind, v)| ([("kind", Esc(kind))], *v)),
    )?;
    counter(
        enc,
        "numatrace_pingpong",
        "Promoted folios demoted again within 600 s (ping-pong).",
        p.folios,
    )?;
    counter(
        enc,
        "numatrace_pingpong_pages",
        "Pages of the ping-pong folios: each moved twice for nothing.",
        p.pages,
    )?;
    counter(
        enc,
        "numatrace_repromotions",
        "Folios promoted, demoted and promoted again.",
        p.repromotions,
    )?;
    gauge(
        enc,
        "numatrace_pingpong_sampled_one_in",
        "Promoted and demoted folios are followed 1 in this many (1: every one; above 1, past the bound of folios followed, the ping-pong counts are estimates).",
        None,
        p.sampled_one_in as i64,
    )?;
    enc.encode_descriptor(
        "numatrace_pingpong_residency",
        "Time a ping-pong folio spent on the top tier between its promotion and its demotion; log2 buckets.",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?
    .encode_histogram::<NoLabelSet>(
        p.residency_sum_ns as f64 / 1e9,
        p.residency_ns.iter().sum(),
        &prometheus_buckets(&p.residency_ns, 1e9),
        None,
    )
}

/// Where slow-tier pages stop: the scanner's passes, its skips by reason,
/// and the most active processes by verdict.
fn funnel(enc: &mut DescriptorEncoder, f: &FunnelMetrics) -> std::fmt::Result {
    counter(
        enc,
        "numatrace_scan_passes",
        "Ranges the NUMA scanner protected (change_prot_numa passes).",
        f.scan_passes,
    )?;
    counter(
        enc,
        "numatrace_scan_ptes_protected",
        "PTEs the NUMA scanner made PROT_NONE.",
        f.ptes_protected,
    )?;
    counters(
        enc,
        "numatrace_vma_skips",
        "VMAs the NUMA scanner skipped, by the kernel's reason (sched_skip_vma_numa).",
        f.vma_skips
            .iter()
            .map(|(reason, v)| ([("reason", Esc(reason))], *v)),
    )?;
    let mut m = enc.encode_descriptor(
        "numatrace_funnel_processes",
        "The most active processes (up to 10) by where their slow-tier pages stop (the funnel's verdict).",
        None,
        MetricType::Gauge,
    )?;
    for (verdict, n) in &f.processes_by_verdict {
        m.encode_family(&[("verdict", Esc(verdict))])?
            .encode_gauge(&(*n as i64))?;
    }
    Ok(())
}

/// The system-wide and per-node vmstat counters, when read.
fn vmstat(enc: &mut DescriptorEncoder, s: &MetricsState) -> std::fmt::Result {
    if !s.vmstat.is_empty() {
        counters(
            enc,
            "numatrace_vmstat",
            "NUMA balancing and tiering counters of /proc/vmstat (since boot): pgpromote_*, pgdemote_*, pgmigrate_*, numa_pages_migrated and numa_pte_updates count pages (a THP is 512), numa_hint_faults* one per fault (folio), numa_huge_pte_updates one per PMD.",
            s.vmstat
                .iter()
                .map(|(name, v)| ([("counter", Esc(name))], *v)),
        )?;
    }
    if s.node_vmstat.is_empty() {
        return Ok(());
    }
    let nodes: Vec<String> = s.node_vmstat.iter().map(|(n, _)| n.to_string()).collect();
    counters(
        enc,
        "numatrace_node_vmstat",
        "Per-node promotion, demotion and migration counters of /sys/devices/system/node/nodeN/vmstat, in pages as the kernel counts them (since boot; node_exporter has no per-node vmstat).",
        s.node_vmstat
            .iter()
            .zip(&nodes)
            .flat_map(|((_, counters), node)| {
                counters
                    .iter()
                    .map(move |(name, v)| ([("node", Esc(node)), ("counter", Esc(name))], *v))
            }),
    )
}

/// The exporter's own health.
fn exporter(enc: &mut DescriptorEncoder, s: &MetricsState) -> std::fmt::Result {
    counter(
        enc,
        "numatrace_exporter_snapshots",
        "Kernel snapshots the exporter's pipeline has published.",
        s.snapshots,
    )?;
    counter(
        enc,
        "numatrace_exporter_events",
        "Kernel events the exporter's pipeline has processed.",
        s.events,
    )?;
    gauge(
        enc,
        "numatrace_exporter_last_snapshot_timestamp",
        "Wall-clock time of the last published snapshot (alert when it stops moving).",
        Some(&Unit::Seconds),
        s.last_snapshot_unix_s,
    )
}

/// `numatrace_promoter_*`: what a running `numatrace promote` published in
/// its state file (numa_host::promoter_state); only `numatrace_promoter_up 0`
/// when none runs.
fn promoter(enc: &mut DescriptorEncoder, r: &Reading) -> std::fmt::Result {
    let s = r.running();
    gauge(
        enc,
        "numatrace_promoter_up",
        "1 while a `numatrace promote` publishes its state (pid alive, file fresh), else 0.",
        None,
        i64::from(s.is_some()),
    )?;
    let Some(s) = s else {
        return Ok(());
    };
    promoter_identity(enc, s)?;
    promoter_moves(enc, s)?;
    promoter_mover(enc, s)
}

/// Who the running promoter is and since when.
fn promoter_identity(enc: &mut DescriptorEncoder, s: &PromoterState) -> std::fmt::Result {
    let (pid, dry_run) = (s.pid.to_string(), s.dry_run.to_string());
    enc.encode_descriptor(
        "numatrace_promoter",
        "The running promoter: pid, scope, model, dry run.",
        None,
        MetricType::Info,
    )?
    .encode_info(&[
        ("pid", Esc(&pid)),
        ("scope", Esc(&s.scope)),
        ("model", Esc(&s.model)),
        ("dry_run", Esc(&dry_run)),
    ])?;
    gauge(
        enc,
        "numatrace_promoter_start_time",
        "When the running promoter started (Unix time).",
        Some(&Unit::Seconds),
        s.started_unix_s,
    )
}

/// What the promoter moved, failed to move, and queued.
fn promoter_moves(enc: &mut DescriptorEncoder, s: &PromoterState) -> std::fmt::Result {
    counter(
        enc,
        "numatrace_promoter_moved_pages",
        "Pages the promoter moved to a higher tier with move_pages(2).",
        s.moved_pages,
    )?;
    counter(
        enc,
        "numatrace_promoter_moved_bytes",
        "Bytes the promoter moved to a higher tier.",
        s.moved_bytes,
    )?;
    counter(
        enc,
        "numatrace_promoter_already_on_target",
        "Queued pages found already on their target (or a tier no lower) when moved.",
        s.already_on_target,
    )?;
    counters(
        enc,
        "numatrace_promoter_failures",
        "Page moves that failed, by move_pages status.",
        s.failures_by_status
            .iter()
            .map(|(status, v)| ([("status", Esc(status))], *v)),
    )?;
    gauge(
        enc,
        "numatrace_promoter_queue_depth",
        "Pages waiting for the mover (channel plus coalesced queue).",
        None,
        s.queue_depth,
    )?;
    counter(
        enc,
        "numatrace_promoter_queue_overflows",
        "Requests dropped because the mover's channel was full.",
        s.queue_overflows,
    )?;
    counter(
        enc,
        "numatrace_promoter_would_move_pages",
        "Dry run: pages the promoter would have moved.",
        s.would_move_pages,
    )?;
    counter(
        enc,
        "numatrace_promoter_pingpong",
        "Folios the promoter moved that reclaim demoted again within 600 s.",
        s.pingpong,
    )
}

/// How the mover paces itself: rate limit, batch size, time in move_pages.
fn promoter_mover(enc: &mut DescriptorEncoder, s: &PromoterState) -> std::fmt::Result {
    gauge(
        enc,
        "numatrace_promoter_rate_limit_bytes_per_second",
        "The promoter's --rate-limit (0: unlimited).",
        None,
        s.rate_limit_bytes_per_s,
    )?;
    gauge(
        enc,
        "numatrace_promoter_batch_target",
        "The time each move_pages call aims for (--batch-ms).",
        Some(&Unit::Seconds),
        s.batch_ms / 1e3,
    )?;
    gauge(
        enc,
        "numatrace_promoter_batch_pages",
        "Pages the mover's next move_pages call takes (adaptive).",
        None,
        s.batch_pages,
    )?;
    counter(
        enc,
        "numatrace_promoter_move_pages_calls",
        "move_pages(2) calls that moved pages.",
        s.move_calls,
    )?;
    enc.encode_descriptor(
        "numatrace_promoter_move_pages",
        "Time the promoter spent inside move_pages(2).",
        Some(&Unit::Seconds),
        MetricType::Counter,
    )?
    .encode_counter::<NoLabelSet, _, f64>(&s.move_pages_seconds, None)
}
