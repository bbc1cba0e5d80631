//! The exported metric set as plain data ([`MetricsState`], built by the
//! pipeline once per kernel snapshot) and its encodings: OpenMetrics text
//! through `prometheus-client`'s encoder, and the classic Prometheus text
//! format (0.0.4) converted from it line by line ([`to_prometheus_text`]),
//! because `prometheus-client` only speaks OpenMetrics.
//!
//! Pure: no IO, no clock.
use std::fmt::Write as _;

use prometheus_client::{
    collector::Collector,
    encoding::{
        DescriptorEncoder, EncodeGaugeValue, EncodeLabelValue, LabelValueEncoder, NoLabelSet,
    },
    metrics::MetricType,
    registry::{Registry, Unit},
};

use numa_host::promoter_state::Reading;

/// Buckets of the in-kernel log2 histograms (`numa_ebpf_common::HIST_BUCKETS`).
pub const HIST_BUCKETS: usize = 64;

/// Content type of the OpenMetrics exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the classic Prometheus text exposition.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Labels of `numatrace_info`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Info {
    pub version: String,
    pub kernel: String,
    /// `fentry`, `kprobe` or `mixed` (how the required hooks are attached);
    /// `replay:<mode>` when serving a recording.
    pub attach_mode: String,
}

/// One in-kernel log2 histogram (one outcome): bucket `b` counts values
/// `v` with `2^(b-1) < v <= 2^b` (b = 0: 0 and 1), `sum` in the recorded
/// unit (ns or faults).
#[derive(Debug, Clone, PartialEq)]
pub struct OutcomeHist {
    pub outcome: &'static str,
    pub buckets: Vec<u64>,
    pub sum: u64,
}

impl OutcomeHist {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// What the BPF counters and histograms say, since the first snapshot
/// (the window `numatrace stats` reports).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelMetrics {
    pub hint_faults: u64,
    pub migrations_success: u64,
    pub migrations_fail: u64,
    pub ring_drops: u64,
    pub map_evictions: u64,
    /// Scan-to-fault latency in ns, one per outcome.
    pub latency_ns: Vec<OutcomeHist>,
    /// Per-process hint faults between scan and fault, one per outcome.
    pub fault_delta: Vec<OutcomeHist>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub promote: bool,
    pub reason: &'static str,
    pub src_node: i32,
    pub dst_node: i32,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelMetrics {
    pub model: String,
    pub promote: u64,
    pub both: u64,
    pub kernel_only: u64,
    pub model_only: u64,
    pub neither: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProcessMetrics {
    pub pid: u32,
    pub comm: String,
    pub hint_faults: u64,
    pub promote: u64,
    pub reject: u64,
}

/// Everything one scrape shows. Built by the pipeline, read by the HTTP
/// side and the textfile writer; never mutated after publication.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsState {
    /// Increases with every published state (cache key of the encodings).
    pub generation: u64,
    pub info: Info,
    /// `None` until the first kernel snapshot.
    pub kernel: Option<KernelMetrics>,
    pub decisions: Vec<Decision>,
    pub models: Vec<ModelMetrics>,
    pub processes: Vec<ProcessMetrics>,
    /// System-wide NUMA vmstat counters (`/proc/vmstat`, since boot).
    pub vmstat: Vec<(String, u64)>,
    /// Per-node vmstat counters (`/sys/devices/system/node/nodeN/vmstat`,
    /// since boot); live runs only.
    pub node_vmstat: Vec<(u32, Vec<(String, u64)>)>,
    pub snapshots: u64,
    pub events: u64,
    /// Wall-clock time of the last snapshot (Unix seconds), 0 before any.
    pub last_snapshot_unix_s: f64,
}

/// `le` of bucket `b` in the exported unit: `2^b / scale` (scale 1e9 turns
/// ns into seconds). f64 division of two exact values is correctly
/// rounded, so this is the f64 nearest to the true boundary.
pub fn bucket_le(b: usize, scale: f64) -> f64 {
    (1u64 << b.min(63)) as f64 / scale
}

/// Bucket list for `encode_histogram` (per-bucket counts, the encoder
/// accumulates): buckets 0..=62 with their exact upper bounds, and the
/// last kernel bucket (63, which also takes every larger value) as `+Inf`.
pub fn prometheus_buckets(buckets: &[u64], scale: f64) -> Vec<(f64, u64)> {
    let count = |b: usize| buckets.get(b).copied().unwrap_or(0);
    (0..HIST_BUCKETS - 1)
        .map(|b| (bucket_le(b, scale), count(b)))
        .chain(std::iter::once((f64::MAX, count(HIST_BUCKETS - 1))))
        .collect()
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

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    enc.encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&v, None)
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
        .encode_info(&info)?;
        if let Some(k) = &s.kernel {
            counter(
                &mut enc,
                "numatrace_hint_faults",
                "NUMA hint faults (in-kernel counter, exact even when events are sampled).",
                k.hint_faults,
            )?;
            let mut m = enc.encode_descriptor(
                "numatrace_migrations",
                "migrate_misplaced_folio/page results (in-kernel counter).",
                None,
                MetricType::Counter,
            )?;
            for (result, v) in [
                ("success", k.migrations_success),
                ("fail", k.migrations_fail),
            ] {
                m.encode_family(&[("result", Esc(result))])?
                    .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
            }
            counter(
                &mut enc,
                "numatrace_ring_drops",
                "Fault records lost because the ring buffer was full (counters and histograms stay exact).",
                k.ring_drops,
            )?;
            counter(
                &mut enc,
                "numatrace_map_evictions",
                "Per-folio scan stamps evicted from the LRU map before their fault (lower bound: inserts - capacity).",
                k.map_evictions,
            )?;
            histograms(
                &mut enc,
                "numatrace_scan_to_fault_latency",
                "Time from the scanner protecting a slow-memory folio to its hint fault, by the kernel's decision; in-kernel log2 buckets.",
                Some(&Unit::Seconds),
                1e9,
                &k.latency_ns,
            )?;
            histograms(
                &mut enc,
                "numatrace_fault_count_delta",
                "Hint faults of the process between the scan and the fault (the fault-count RFC's measure), by the kernel's decision; in-kernel log2 buckets.",
                None,
                1.0,
                &k.fault_delta,
            )?;
        }
        if !s.decisions.is_empty() {
            let mut m = enc.encode_descriptor(
                "numatrace_promotion_decisions",
                "should_numa_migrate_memory decisions by result, reason and node pair (from fault events; exact unless sampled or dropped).",
                None,
                MetricType::Counter,
            )?;
            for d in &s.decisions {
                let (src, dst) = (d.src_node.to_string(), d.dst_node.to_string());
                let labels = [
                    ("result", Esc(if d.promote { "promote" } else { "reject" })),
                    ("reason", Esc(d.reason)),
                    ("src_node", Esc(&src)),
                    ("dst_node", Esc(&dst)),
                ];
                m.encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&d.count, None)?;
            }
        }
        if !s.models.is_empty() {
            let mut m = enc.encode_descriptor(
                "numatrace_model_promote",
                "Decisions a shadow policy would have promoted.",
                None,
                MetricType::Counter,
            )?;
            for r in &s.models {
                m.encode_family(&[("model", Esc(&r.model))])?
                    .encode_counter::<NoLabelSet, _, u64>(&r.promote, None)?;
            }
            let mut m = enc.encode_descriptor(
                "numatrace_model_agreement",
                "Decisions by (kernel, model) verdict: both promote, kernel_only, model_only, neither.",
                None,
                MetricType::Counter,
            )?;
            for r in &s.models {
                for (cell, v) in [
                    ("both", r.both),
                    ("kernel_only", r.kernel_only),
                    ("model_only", r.model_only),
                    ("neither", r.neither),
                ] {
                    m.encode_family(&[("model", Esc(&r.model)), ("cell", Esc(cell))])?
                        .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
                }
            }
        }
        if !s.processes.is_empty() {
            let pids: Vec<String> = s.processes.iter().map(|p| p.pid.to_string()).collect();
            let mut m = enc.encode_descriptor(
                "numatrace_process_hint_faults",
                "Hint faults of the top processes (--per-process), from fault events.",
                None,
                MetricType::Counter,
            )?;
            for (p, pid) in s.processes.iter().zip(&pids) {
                m.encode_family(&[("pid", Esc(pid)), ("comm", Esc(&p.comm))])?
                    .encode_counter::<NoLabelSet, _, u64>(&p.hint_faults, None)?;
            }
            let mut m = enc.encode_descriptor(
                "numatrace_process_promotion_decisions",
                "Promotion decisions of the top processes (--per-process) by result, from fault events.",
                None,
                MetricType::Counter,
            )?;
            for (p, pid) in s.processes.iter().zip(&pids) {
                for (result, v) in [("promote", p.promote), ("reject", p.reject)] {
                    m.encode_family(&[
                        ("pid", Esc(pid)),
                        ("comm", Esc(&p.comm)),
                        ("result", Esc(result)),
                    ])?
                    .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
                }
            }
        }
        if !s.vmstat.is_empty() {
            let mut m = enc.encode_descriptor(
                "numatrace_vmstat",
                "NUMA balancing and tiering counters of /proc/vmstat (since boot).",
                None,
                MetricType::Counter,
            )?;
            for (name, v) in &s.vmstat {
                m.encode_family(&[("counter", Esc(name))])?
                    .encode_counter::<NoLabelSet, _, u64>(v, None)?;
            }
        }
        if !s.node_vmstat.is_empty() {
            let mut m = enc.encode_descriptor(
                "numatrace_node_vmstat",
                "Per-node promotion, demotion and migration counters of /sys/devices/system/node/nodeN/vmstat (since boot; node_exporter has no per-node vmstat).",
                None,
                MetricType::Counter,
            )?;
            for (node, counters) in &s.node_vmstat {
                let node = node.to_string();
                for (name, v) in counters {
                    m.encode_family(&[("node", Esc(&node)), ("counter", Esc(name))])?
                        .encode_counter::<NoLabelSet, _, u64>(v, None)?;
                }
            }
        }
        if let Some(r) = &self.1 {
            promoter(&mut enc, r)?;
        }
        counter(
            &mut enc,
            "numatrace_exporter_snapshots",
            "Kernel snapshots the exporter's pipeline has published.",
            s.snapshots,
        )?;
        counter(
            &mut enc,
            "numatrace_exporter_events",
            "Kernel events the exporter's pipeline has processed.",
            s.events,
        )?;
        enc.encode_descriptor(
            "numatrace_exporter_last_snapshot_timestamp",
            "Wall-clock time of the last published snapshot (alert when it stops moving).",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?
        .encode_gauge(&s.last_snapshot_unix_s)?;
        Ok(())
    }
}

/// `numatrace_promoter_*`: what a running `numatrace promote` published in
/// its state file (numa_host::promoter_state); only `numatrace_promoter_up 0`
/// when none runs.
fn promoter(enc: &mut DescriptorEncoder, r: &Reading) -> std::fmt::Result {
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
    )?;
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
    let mut m = enc.encode_descriptor(
        "numatrace_promoter_failures",
        "Page moves that failed, by move_pages status.",
        None,
        MetricType::Counter,
    )?;
    for (status, v) in &s.failures_by_status {
        m.encode_family(&[("status", Esc(status))])?
            .encode_counter::<NoLabelSet, _, u64>(v, None)?;
    }
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

/// Converts `prometheus-client`'s OpenMetrics output to the classic text
/// format (0.0.4), which differs only in metadata: `# TYPE`/`# HELP` name
/// the sample (`x_total` for counters, `x_info` for info, which becomes a
/// gauge; `unknown` becomes `untyped`), and there is no `# UNIT` or `# EOF`.
/// Sample lines are identical in both formats.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut pending_help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            pending_help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (sample_name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_owned(), "untyped"),
                k => (name.to_owned(), k),
            };
            if let Some((help_name, help)) = pending_help.take() {
                if help_name == name {
                    let _ = writeln!(out, "# HELP {sample_name} {help}");
                }
            }
            let _ = writeln!(out, "# TYPE {sample_name} {kind}");
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Which exposition a client asked for, from its `Accept` header: OpenMetrics
/// when it accepts `application/openmetrics-text` at least as much as
/// `text/plain` (what Prometheus sends), the classic text format otherwise
/// (no header, `*/*`, `text/plain`: curl, browsers, older scrapers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Prometheus,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Prometheus => PROMETHEUS_CONTENT_TYPE,
        }
    }

    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Prometheus;
        };
        let (mut om, mut text) = (0.0f64, 0.0f64);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let mut q = 1.0;
            let mut version_ok = true;
            for p in parts {
                let Some((k, v)) = p.split_once('=') else {
                    continue;
                };
                match k.trim().to_ascii_lowercase().as_str() {
                    "q" => q = v.trim().parse().unwrap_or(0.0),
                    "version" if media == "application/openmetrics-text" => {
                        version_ok = matches!(v.trim(), "1.0.0" | "0.0.1");
                    }
                    _ => {}
                }
            }
            match media.as_str() {
                "application/openmetrics-text" if version_ok => om = om.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if om > 0.0 && om >= text {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, sync::Arc};

    use super::*;

    /// Values the BPF side would have bucketed, as `log2_bucket` does.
    fn log2_bucket(v: u64) -> usize {
        if v <= 1 {
            0
        } else {
            (64 - (v - 1).leading_zeros() as usize).min(HIST_BUCKETS - 1)
        }
    }

    fn hist(outcome: &'static str, values: &[u64]) -> OutcomeHist {
        let mut buckets = vec![0; HIST_BUCKETS];
        for v in values {
            buckets[log2_bucket(*v)] += 1;
        }
        OutcomeHist {
            outcome,
            buckets,
            sum: values.iter().sum(),
        }
    }

    /// One fixture: every family present.
    pub(crate) fn full_state() -> MetricsState {
        let latency: Vec<u64> = (0..53)
            .flat_map(|b| [1u64 << b, (1u64 << b) + 1])
            .chain([0, 3_000_000_000, 600_000_000_000])
            .collect();
        MetricsState {
            generation: 3,
            info: Info {
                version: "0.1.0".into(),
                kernel: "6.12.117+deb12-amd64".into(),
                attach_mode: "fentry".into(),
            },
            kernel: Some(KernelMetrics {
                hint_faults: 27820,
                migrations_success: 2506,
                migrations_fail: 1,
                ring_drops: 2,
                map_evictions: 3,
                latency_ns: vec![
                    hist("promote_hot", &latency),
                    hist("reject_latency", &[5_000_000_000; 7]),
                ],
                fault_delta: vec![hist("promote_hot", &[0, 1, 2, 3, 1 << 20])],
            }),
            decisions: vec![
                Decision {
                    promote: true,
                    reason: "promote_hot",
                    src_node: 1,
                    dst_node: 0,
                    count: 2506,
                },
                Decision {
                    promote: false,
                    reason: "reject_latency",
                    src_node: 1,
                    dst_node: 0,
                    count: 25314,
                },
            ],
            models: vec![ModelMetrics {
                model: "fault-count".into(),
                promote: 9,
                both: 5,
                kernel_only: 4,
                model_only: 4,
                neither: 7,
            }],
            processes: vec![ProcessMetrics {
                pid: 42,
                comm: "evil\"\\\nname".into(),
                hint_faults: 10,
                promote: 1,
                reject: 9,
            }],
            vmstat: vec![("pgpromote_success".into(), 2506)],
            node_vmstat: vec![(1, vec![("pgdemote_kswapd".into(), 4)])],
            snapshots: 27,
            events: 28000,
            last_snapshot_unix_s: 1.7e9,
        }
    }

    fn encode_both(s: MetricsState) -> (String, String) {
        let om = encode_openmetrics(Arc::new(s)).expect("encode");
        let prom = to_prometheus_text(&om);
        (om, prom)
    }

    fn parse(text: &str) -> prometheus_parse::Scrape {
        prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("parse")
    }

    #[test]
    fn names_follow_the_issue_and_prometheus_conventions() {
        let (om, prom) = encode_both(full_state());
        for name in [
            "numatrace_hint_faults_total",
            "numatrace_promotion_decisions_total",
            "numatrace_migrations_total",
            "numatrace_model_promote_total",
            "numatrace_model_agreement_total",
            "numatrace_ring_drops_total",
            "numatrace_map_evictions_total",
            "numatrace_info",
            "numatrace_scan_to_fault_latency_seconds_bucket",
            "numatrace_scan_to_fault_latency_seconds_sum",
            "numatrace_scan_to_fault_latency_seconds_count",
            "numatrace_fault_count_delta_bucket",
            "numatrace_fault_count_delta_sum",
            "numatrace_fault_count_delta_count",
            "numatrace_vmstat_total",
            "numatrace_node_vmstat_total",
            "numatrace_process_hint_faults_total",
        ] {
            assert!(
                om.lines()
                    .any(|l| l.starts_with(&format!("{name}{{"))
                        || l.starts_with(&format!("{name} "))),
                "{name} missing from OpenMetrics:\n{om}"
            );
            assert!(prom.lines().any(|l| l.starts_with(name)), "{name} missing");
        }
        assert!(om.contains("# TYPE numatrace_scan_to_fault_latency_seconds histogram"));
        assert!(om.contains("# UNIT numatrace_scan_to_fault_latency_seconds seconds"));
        assert!(om.contains("# TYPE numatrace info"));
        assert!(om.ends_with("# EOF\n"));
        assert!(prom.contains("# TYPE numatrace_hint_faults_total counter"));
        assert!(prom.contains("# HELP numatrace_hint_faults_total NUMA hint faults"));
        assert!(prom.contains("# TYPE numatrace_info gauge"));
        assert!(!prom.contains("# EOF") && !prom.contains("# UNIT"));
        // Every sample name starts with the prefix; every counter ends in _total.
        let scrape = parse(&prom);
        for s in &scrape.samples {
            assert!(s.metric.starts_with("numatrace_"), "{}", s.metric);
            if let prometheus_parse::Value::Counter(_) = s.value {
                assert!(s.metric.ends_with("_total"), "{}", s.metric);
            }
        }
        assert!(om.contains(
            r#"numatrace_promotion_decisions_total{result="reject",reason="reject_latency",src_node="1",dst_node="0"} 25314"#
        ));
        assert!(om.contains(
            r#"numatrace_model_agreement_total{model="fault-count",cell="model_only"} 4"#
        ));
        assert!(om.contains(
            r#"numatrace_info{version="0.1.0",kernel="6.12.117+deb12-amd64",attach_mode="fentry"} 1"#
        ));
    }

    #[test]
    fn le_values_are_the_bpf_bucket_bounds_exactly() {
        let (om, prom) = encode_both(full_state());
        for (text, unit_scale, name) in [
            (&om, 1e9, "numatrace_scan_to_fault_latency_seconds_bucket"),
            (&prom, 1e9, "numatrace_scan_to_fault_latency_seconds_bucket"),
            (&om, 1.0, "numatrace_fault_count_delta_bucket"),
        ] {
            let les: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with(name) && l.contains("outcome=\"promote_hot\""))
                .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next())
                .collect();
            assert_eq!(les.len(), HIST_BUCKETS, "63 finite bounds and +Inf");
            assert_eq!(les.last(), Some(&"+Inf"));
            for (b, le) in les[..HIST_BUCKETS - 1].iter().enumerate() {
                let parsed: f64 = le.parse().expect("le is a float");
                // Exactly 2^b ns (or faults), as the nearest f64.
                assert_eq!(parsed, (1u64 << b) as f64 / unit_scale, "bucket {b}: {le}");
                if unit_scale == 1.0 {
                    assert_eq!(parsed as u64, 1u64 << b);
                }
            }
        }
    }

    #[test]
    fn cumulative_counts_match_prometheus_semantics() {
        // For every bound, the cumulative count is the number of values v
        // with v <= le: what the kernel's log2 buckets imply.
        let state = full_state();
        let values: Vec<u64> = (0..53)
            .flat_map(|b| [1u64 << b, (1u64 << b) + 1])
            .chain([0, 3_000_000_000, 600_000_000_000])
            .collect();
        let (_, prom) = encode_both(state);
        let scrape = parse(&prom);
        let h = scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == "numatrace_scan_to_fault_latency_seconds"
                    && s.labels.get("outcome") == Some("promote_hot")
            })
            .expect("latency histogram parsed");
        let prometheus_parse::Value::Histogram(buckets) = &h.value else {
            panic!("not a histogram: {:?}", h.value);
        };
        assert_eq!(buckets.len(), HIST_BUCKETS);
        for bc in buckets {
            let expect = values
                .iter()
                .filter(|v| bc.less_than.is_infinite() || **v as f64 / 1e9 <= bc.less_than)
                .count();
            assert_eq!(bc.count, expect as f64, "le={}", bc.less_than);
        }
        let sample = |name: &str| {
            scrape
                .samples
                .iter()
                .find(|s| s.metric == name && s.labels.get("outcome") == Some("promote_hot"))
                .map(|s| s.value.clone())
        };
        assert_eq!(
            sample("numatrace_scan_to_fault_latency_seconds_count"),
            Some(prometheus_parse::Value::Untyped(values.len() as f64))
        );
        let Some(prometheus_parse::Value::Untyped(sum)) =
            sample("numatrace_scan_to_fault_latency_seconds_sum")
        else {
            panic!("no _sum");
        };
        let exact = values.iter().sum::<u64>() as f64 / 1e9;
        assert!((sum - exact).abs() < 1e-6 * exact, "{sum} vs {exact}");
    }

    #[test]
    fn classic_text_parses_back_with_types() {
        let (_, prom) = encode_both(full_state());
        let scrape = parse(&prom);
        let by_name: BTreeMap<&str, &prometheus_parse::Sample> = scrape
            .samples
            .iter()
            .map(|s| (s.metric.as_str(), s))
            .collect();
        assert_eq!(
            by_name.get("numatrace_hint_faults_total").map(|s| &s.value),
            Some(&prometheus_parse::Value::Counter(27820.0))
        );
        assert_eq!(
            by_name.get("numatrace_info").map(|s| &s.value),
            Some(&prometheus_parse::Value::Gauge(1.0))
        );
        assert!(matches!(
            by_name
                .get("numatrace_exporter_last_snapshot_timestamp_seconds")
                .map(|s| &s.value),
            Some(prometheus_parse::Value::Gauge(_))
        ));
        let decisions: f64 = scrape
            .samples
            .iter()
            .filter(|s| s.metric == "numatrace_promotion_decisions_total")
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) => v,
                _ => panic!("decisions are counters"),
            })
            .sum();
        assert_eq!(decisions, 27820.0);
        assert!(scrape
            .docs
            .contains_key("numatrace_scan_to_fault_latency_seconds"));
    }

    #[test]
    fn label_values_are_escaped() {
        let (om, _) = encode_both(full_state());
        assert!(
            om.contains(r#"comm="evil\"\\\nname""#),
            "{}",
            om.lines().find(|l| l.contains("evil")).unwrap_or_default()
        );
        // No sample line is broken by the newline in the comm.
        for line in om.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.starts_with("numatrace_"), "broken line {line:?}");
        }
    }

    #[test]
    fn before_the_first_snapshot_only_info_and_exporter_metrics() {
        let (om, _) = encode_both(MetricsState::default());
        assert!(om.contains("numatrace_info{"));
        assert!(!om.contains("numatrace_hint_faults"));
        assert!(om.ends_with("# EOF\n"));
    }

    #[test]
    fn promoter_metrics_appear_only_while_one_runs() {
        use numa_host::promoter_state::{NotRunning, PromoterState, Reading};
        let running = Reading::Running(Box::new(PromoterState {
            version: 1,
            pid: 4242,
            scope: "pid 7".into(),
            model: "fault-count".into(),
            started_unix_s: 1.7e9,
            moved_pages: 1000,
            moved_bytes: 1000 * 4096,
            failures: 5,
            failures_by_status: [("ebusy".to_owned(), 3), ("enomem".to_owned(), 2)]
                .into_iter()
                .collect(),
            queue_depth: 77,
            rate_limit_bytes_per_s: 256 << 20,
            batch_ms: 20.0,
            batch_pages: 512,
            move_calls: 9,
            move_pages_seconds: 0.25,
            ..PromoterState::default()
        }));
        let om = encode_openmetrics_with(Arc::new(full_state()), Some(running)).expect("encode");
        let prom = to_prometheus_text(&om);
        let scrape = parse(&prom);
        let value = |name: &str, label: Option<(&str, &str)>| {
            scrape
                .samples
                .iter()
                .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
                .map(|s| match s.value {
                    prometheus_parse::Value::Counter(v)
                    | prometheus_parse::Value::Gauge(v)
                    | prometheus_parse::Value::Untyped(v) => v,
                    _ => f64::NAN,
                })
        };
        assert_eq!(value("numatrace_promoter_up", None), Some(1.0));
        assert_eq!(
            value("numatrace_promoter_moved_pages_total", None),
            Some(1000.0)
        );
        assert_eq!(
            value("numatrace_promoter_moved_bytes_total", None),
            Some(4_096_000.0)
        );
        assert_eq!(
            value(
                "numatrace_promoter_failures_total",
                Some(("status", "ebusy"))
            ),
            Some(3.0)
        );
        assert_eq!(
            value(
                "numatrace_promoter_failures_total",
                Some(("status", "enomem"))
            ),
            Some(2.0)
        );
        assert_eq!(value("numatrace_promoter_queue_depth", None), Some(77.0));
        assert_eq!(
            value("numatrace_promoter_rate_limit_bytes_per_second", None),
            Some(268_435_456.0)
        );
        assert_eq!(
            value("numatrace_promoter_move_pages_seconds_total", None),
            Some(0.25)
        );
        assert_eq!(
            value("numatrace_promoter_batch_target_seconds", None),
            Some(0.02)
        );
        assert!(om.contains(r#"numatrace_promoter_info{pid="4242",scope="pid 7",model="fault-count",dry_run="false"} 1"#), "{om}");
        assert!(prom.contains("# TYPE numatrace_promoter_moved_pages_total counter"));
        // Not running: up 0 and nothing else of the promoter.
        for r in [
            None,
            Some(Reading::NotRunning(NotRunning::Exited { pid: 4242 })),
        ] {
            let looked = r.is_some();
            let om = encode_openmetrics_with(Arc::new(full_state()), r).expect("encode");
            let lines: Vec<&str> = om
                .lines()
                .filter(|l| l.starts_with("numatrace_promoter"))
                .collect();
            if looked {
                assert_eq!(lines, vec!["numatrace_promoter_up 0"], "{om}");
            } else {
                assert!(lines.is_empty(), "{lines:?}");
            }
        }
    }

    #[test]
    fn negotiation() {
        use Format::*;
        let prometheus_2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        for (accept, want) in [
            (None, Prometheus),
            (Some(""), Prometheus),
            (Some("*/*"), Prometheus),
            (Some("text/plain"), Prometheus),
            (Some(prometheus_2), OpenMetrics),
            (Some("application/openmetrics-text"), OpenMetrics),
            (
                Some("text/plain;q=0.9, application/openmetrics-text;q=0.5"),
                Prometheus,
            ),
            (
                Some("application/openmetrics-text;version=2.0.0"),
                Prometheus,
            ),
            (Some("application/openmetrics-text;q=0"), Prometheus),
            (Some("text/html,application/xhtml+xml"), Prometheus),
        ] {
            assert_eq!(Format::negotiate(accept), want, "{accept:?}");
        }
    }

    #[test]
    fn the_dashboard_queries_only_exported_metrics() {
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../../../contrib/grafana-dashboard.json"))
                .expect("dashboard is JSON");
        let exprs = dashboard_exprs(&dashboard);
        assert!(exprs.len() >= 8, "{exprs:?}");
        let (om, _) = encode_both(full_state());
        let exported: std::collections::BTreeSet<&str> = om
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .collect();
        for expr in &exprs {
            let names = metric_names(expr);
            assert!(!names.is_empty(), "no numatrace metric in {expr}");
            for n in names {
                assert!(
                    exported.contains(n.as_str()),
                    "{n} (in {expr}) is not exported"
                );
            }
        }
    }

    /// Every `expr` of every panel target.
    pub(crate) fn dashboard_exprs(v: &serde_json::Value) -> Vec<String> {
        let mut out = Vec::new();
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                        _ => out.extend(dashboard_exprs(v)),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| out.extend(dashboard_exprs(v))),
            _ => {}
        }
        out
    }

    pub(crate) fn metric_names(expr: &str) -> Vec<String> {
        let mut names = Vec::new();
        let mut rest = expr;
        while let Some(i) = rest.find("numatrace_") {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            names.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
        names
    }
}
