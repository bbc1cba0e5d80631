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
            runs_missed: 4,
            map_evictions: 3,
            unfollowed_faults: 7,
            map_budget_bytes: 256 << 20,
            map_bytes: 30 << 20,
            folio_sample_rate: 8,
            folio_coverage: 0.125,
            latency_ns: vec![
                hist("promote_hot", &latency),
                hist("reject_latency", &[5_000_000_000; 7]),
            ],
            fault_delta: vec![hist("promote_hot", &[0, 1, 2, 3, 1 << 20])],
        }),
        // One THP among the base pages: no page figure equals its folios.
        migrated_pages: MigratedPages {
            success: 2505 + 512,
            fail: 512,
            promoted: 2505 + 512,
        },
        decisions: vec![
            Decision {
                promote: true,
                reason: "promote_hot",
                src_node: 1,
                dst_node: 0,
                count: 2506,
                pages: 2505 + 512,
            },
            Decision {
                promote: false,
                reason: "reject_latency",
                src_node: 1,
                dst_node: 0,
                count: 25314,
                pages: 25313 + 512,
            },
        ],
        models: vec![ModelMetrics {
            model: "fault-count".into(),
            promote: 9,
            both: 5,
            kernel_only: 4,
            model_only: 4,
            neither: 7,
            promote_pages: 8 + 512,
            both_pages: 4 + 512,
            kernel_only_pages: 4,
            model_only_pages: 4,
            neither_pages: 6 + 512,
        }],
        processes: vec![ProcessMetrics {
            pid: 42,
            comm: "evil\"\\\nname".into(),
            hint_faults: 10,
            promote: 1,
            reject: 9,
            promote_pages: 512,
            reject_pages: 9,
            verdict: "not_scanned",
            demoted_by: [("kswapd".to_owned(), 2), ("direct".to_owned(), 1)].into(),
            pingpong: 2,
        }],
        cgroups: vec![
            CgroupMetrics {
                cgroup: "/ntc/ev\"il".into(),
                hint_faults: 10,
                promote: 1,
                reject: 9,
                promoted: 1,
                verdict: "refused_latency",
            },
            CgroupMetrics {
                cgroup: "other".into(),
                hint_faults: 3,
                promote: 0,
                reject: 3,
                promoted: 0,
                verdict: "",
            },
        ],
        demotions: vec![("kswapd".into(), 4096), ("direct".into(), 12)],
        pingpong: Pingpong {
            folios: 3,
            pages: 3,
            repromotions: 1,
            residency_ns: (0..HIST_BUCKETS).map(|b| u64::from(b == 34) * 3).collect(),
            residency_sum_ns: 36_000_000_000,
            sampled_one_in: 1,
        },
        funnel: FunnelMetrics {
            scan_passes: 32,
            ptes_protected: 32768,
            vma_skips: vec![("pid_inactive".into(), 80), ("unsuitable".into(), 3)],
            processes_by_verdict: vec![("not_scanned", 1), ("promoted", 2)],
        },
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
        "numatrace_probe_runs_missed_total",
        "numatrace_map_evictions_total",
        "numatrace_unfollowed_faults_total",
        "numatrace_map_budget_bytes",
        "numatrace_map_memory_bytes",
        "numatrace_folio_sample_rate",
        "numatrace_folio_coverage_ratio",
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
        "numatrace_scan_passes_total",
        "numatrace_scan_ptes_protected_total",
        "numatrace_vma_skips_total",
        "numatrace_funnel_processes",
        "numatrace_process_verdict",
        "numatrace_promotion_decision_pages_total",
        "numatrace_migrated_pages_total",
        "numatrace_promoted_pages_total",
        "numatrace_model_promote_pages_total",
        "numatrace_model_agreement_pages_total",
        "numatrace_process_promotion_decision_pages_total",
        "numatrace_cgroup_hint_faults_pages_total",
        "numatrace_cgroup_promotion_decision_pages_total",
        "numatrace_cgroup_promoted_pages_total",
        "numatrace_cgroup_verdict",
        "numatrace_demotions_total",
        "numatrace_pingpong_total",
        "numatrace_repromotions_total",
        "numatrace_pingpong_sampled_one_in",
        "numatrace_process_demotions_total",
        "numatrace_process_pingpong_total",
        "numatrace_pingpong_residency_seconds_bucket",
    ] {
        assert!(
            om.lines()
                .any(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} "))),
            "{name} missing from OpenMetrics:\n{om}"
        );
        assert!(prom.lines().any(|l| l.starts_with(name)), "{name} missing");
    }
    // A process's demotions by kind and its ping-pongs carry its counts.
    let sample = |name: &str, kind: &str| {
        om.lines()
            .find(|l| l.starts_with(name) && l.contains(kind))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    };
    assert_eq!(
        sample("numatrace_process_demotions_total{", "kind=\"kswapd\"").as_deref(),
        Some("2")
    );
    assert_eq!(
        sample("numatrace_process_pingpong_total{", "").as_deref(),
        Some("2")
    );
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
    assert!(
        om.contains(r#"numatrace_model_agreement_total{model="fault-count",cell="model_only"} 4"#)
    );
    assert!(om.contains(r#"numatrace_vma_skips_total{reason="pid_inactive"} 80"#));
    assert!(om.contains(r#"numatrace_demotions_total{kind="kswapd"} 4096"#));
    assert!(om.contains("numatrace_pingpong_total 3"));
    assert!(om.contains("numatrace_pingpong_residency_seconds_count 3"));
    assert!(om.contains(r#"numatrace_pingpong_residency_seconds_bucket{le="8.589934592"} 0"#));
    assert!(om.contains(r#"numatrace_pingpong_residency_seconds_bucket{le="17.179869184"} 3"#));
    assert!(om.contains(r#"numatrace_cgroup_hint_faults_pages_total{cgroup="/ntc/ev\"il"} 10"#));
    assert!(om.contains(
        r#"numatrace_cgroup_promotion_decision_pages_total{cgroup="other",result="reject"} 3"#
    ));
    assert!(om.contains(r#"numatrace_funnel_processes{verdict="promoted"} 2"#));
    assert!(om
        .contains(r#"numatrace_cgroup_verdict{cgroup="/ntc/ev\"il",verdict="refused_latency"} 1"#));
    assert!(!om.contains(r#"numatrace_cgroup_verdict{cgroup="other""#));
    assert!(om.contains(r#"verdict="not_scanned"} 1"#), "{om}");
    assert!(om.contains(
        r#"numatrace_info{version="0.1.0",kernel="6.12.117+deb12-amd64",attach_mode="fentry"} 1"#
    ));
}

/// The value of the sample `name` whose labels include `labels`.
fn sample(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let s = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))?;
    match s.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => Some(v),
        _ => None,
    }
}

/// Every page series stands beside its folio series with the same labels
/// and its own value: the fixture's THP makes the two differ everywhere.
#[test]
fn page_series_stand_beside_the_folio_series() {
    let (om, prom) = encode_both(full_state());
    let scrape = parse(&prom);
    let promote = [("result", "promote"), ("reason", "promote_hot")];
    let proc_promote = [("pid", "42"), ("result", "promote")];
    let both = [("model", "fault-count"), ("cell", "both")];
    let success = [("result", "success")];
    let fail = [("result", "fail")];
    for (folios, pages, labels, want) in [
        (
            "numatrace_promotion_decisions_total",
            "numatrace_promotion_decision_pages_total",
            &promote[..],
            (2506.0, 3017.0),
        ),
        (
            "numatrace_migrations_total",
            "numatrace_migrated_pages_total",
            &success[..],
            (2506.0, 3017.0),
        ),
        (
            "numatrace_migrations_total",
            "numatrace_migrated_pages_total",
            &fail[..],
            (1.0, 512.0),
        ),
        (
            "numatrace_model_promote_total",
            "numatrace_model_promote_pages_total",
            &both[..1],
            (9.0, 520.0),
        ),
        (
            "numatrace_model_agreement_total",
            "numatrace_model_agreement_pages_total",
            &both[..],
            (5.0, 516.0),
        ),
        (
            "numatrace_process_promotion_decisions_total",
            "numatrace_process_promotion_decision_pages_total",
            &proc_promote[..],
            (1.0, 512.0),
        ),
    ] {
        let got = (
            sample(&scrape, folios, labels),
            sample(&scrape, pages, labels),
        );
        assert_eq!(
            got,
            (Some(want.0), Some(want.1)),
            "{folios} / {pages} {labels:?}"
        );
        let label_sets = |name: &str| -> Vec<Vec<String>> {
            scrape
                .samples
                .iter()
                .filter(|s| s.metric == name)
                .map(|s| s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .collect()
        };
        let mut sets = (label_sets(folios), label_sets(pages));
        sets.0
            .iter_mut()
            .chain(sets.1.iter_mut())
            .for_each(|s| s.sort());
        assert_eq!(sets.0, sets.1, "{pages} has {folios}'s labels");
    }
    assert_eq!(
        sample(&scrape, "numatrace_promoted_pages_total", &[]),
        Some(3017.0)
    );
    // OpenMetrics: the unit is the name's suffix and has its own line.
    for name in [
        "numatrace_promotion_decision_pages",
        "numatrace_migrated_pages",
        "numatrace_promoted_pages",
        "numatrace_model_promote_pages",
        "numatrace_model_agreement_pages",
        "numatrace_process_promotion_decision_pages",
    ] {
        assert!(
            om.contains(&format!("# TYPE {name} counter\n# UNIT {name} pages\n")),
            "{name}"
        );
        assert!(
            prom.contains(&format!("# TYPE {name}_total counter")),
            "{name}"
        );
    }
}

/// A series counting promotions, decisions or migrations says whether it
/// counts folios or pages: vmstat's page counters are 512 times a THP's
/// folio count.
#[test]
fn every_promotion_decision_and_migration_series_says_its_unit() {
    let (om, _) = encode_both(full_state());
    let helps: Vec<(&str, &str)> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP ")?.split_once(' '))
        .collect();
    let about = [
        "promot",
        "decision",
        "migrat",
        "model_agreement",
        "hint_faults",
    ];
    let named: Vec<&(&str, &str)> = helps
        .iter()
        .filter(|(name, _)| about.iter().any(|a| name.contains(a)))
        .collect();
    assert!(named.len() >= 12, "{named:?}");
    for (name, help) in named {
        let unit = if name.ends_with("_pages") {
            "pages"
        } else {
            "folio"
        };
        assert!(help.to_lowercase().contains(unit), "{name}: {help}");
    }
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
    let dashboard: serde_json::Value = serde_json::from_str(include_str!(
        "../../../../../contrib/grafana-dashboard.json"
    ))
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
