//! A real Prometheus (Debian's `prometheus` package, which `cargo xtask
//! setup` installs) scrapes `numatrace export --replay` of the recorded
//! 6.12 trace: the median latency it computes with `histogram_quantile`
//! lies in the bucket `numatrace stats` reports, the counters equal the
//! stats totals and never decrease, and every query of the Grafana
//! dashboard runs. Fails, never skips, without prometheus/promtool.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
mod export_common;

use std::{
    io::Write,
    net::SocketAddr,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use export_common::*;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0";

/// Prometheus' HTTP API: `data` of a successful answer.
fn api(prom: SocketAddr, path_and_query: &str) -> serde_json::Value {
    let r = get(prom, path_and_query, None)
        .unwrap_or_else(|e| panic!("querying Prometheus {path_and_query}: {e}"));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_else(|e| {
        panic!(
            "Prometheus answered {} non-JSON: {e}: {}",
            r.status,
            r.text()
        )
    });
    assert_eq!(v["status"], "success", "{path_and_query}: {v}");
    v["data"].clone()
}

fn query(prom: SocketAddr, q: &str) -> Vec<serde_json::Value> {
    let data = api(prom, &format!("/api/v1/query?query={}", urlencode(q)));
    data["result"].as_array().cloned().unwrap_or_default()
}

/// The single value of an instant query (`NaN` when empty).
fn scalar(prom: SocketAddr, q: &str) -> f64 {
    let r = query(prom, q);
    assert!(r.len() <= 1, "{q}: {r:?}");
    r.first()
        .and_then(|s| s["value"][1].as_str())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

fn range_values(prom: SocketAddr, q: &str, start: f64, end: f64) -> Vec<Vec<f64>> {
    let data = api(
        prom,
        &format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step=0.5",
            urlencode(q)
        ),
    );
    data["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|series| {
            series["values"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .filter_map(|p| p[1].as_str()?.parse().ok())
                .collect()
        })
        .collect()
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The upper bound (seconds) of the log2 bucket holding the median, from
/// `numatrace stats --json`'s latency rows (ms).
fn stats_median_bucket_s(stats: &serde_json::Value) -> (f64, u64) {
    let rows = stats["latency_ms"].as_array().expect("latency_ms rows");
    let total: u64 = rows.iter().filter_map(|r| r["count"].as_u64()).sum();
    let rank = total.div_ceil(2);
    let mut seen = 0;
    for r in rows {
        seen += r["count"].as_u64().unwrap_or(0);
        if seen >= rank {
            return (r["le"].as_f64().expect("le") / 1e3, total);
        }
    }
    panic!("no median in {rows:?}");
}

#[test]
fn prometheus_scrapes_the_replay_and_agrees_with_stats() {
    let prometheus = tool("prometheus");
    let promtool = tool("promtool");
    let started = Instant::now();
    let stats = stats_json();
    let dir = TempDir::new("prometheus");

    // Prometheus first, so its scrapes cover the replay from the start.
    let exporter_port = free_port();
    let exporter_addr: SocketAddr = format!("127.0.0.1:{exporter_port}").parse().expect("addr");
    let (_prom, prom_addr) = start_prometheus(&prometheus, &dir.0, exporter_addr);

    let log = dir.0.join("export.log");
    let replay_start = unix_now();
    let mut cmd = Command::new(NUMATRACE);
    cmd.args([
        "export",
        "--replay",
        TRACE,
        "--speed",
        "4",
        "--duration",
        "90",
    ])
    .args(["--listen", &exporter_addr.to_string()])
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("log"));
    let mut exporter = Proc::spawn("numatrace export", &mut cmd);

    // The final state scraped at least twice.
    let hint_faults = stats["hint_faults"].as_f64().expect("hint_faults");
    wait_until(
        Duration::from_secs(45),
        "Prometheus to scrape the replay's final state twice",
        || {
            exporter.assert_running();
            replay_times(&log).is_some()
                && scalar(prom_addr, "numatrace_hint_faults_total") == hint_faults
        },
    );
    // Two more scrape intervals: the final state is scraped again.
    std::thread::sleep(Duration::from_secs(2));
    let scrapes = scalar(
        prom_addr,
        "count_over_time(numatrace_hint_faults_total[5m])",
    );
    assert!(scrapes >= 2.0, "only {scrapes} scrapes");
    assert_eq!(
        scalar(prom_addr, "up{job=\"numatrace\"}"),
        1.0,
        "the last scrape failed"
    );

    // Counters equal the stats totals.
    assert_eq!(
        scalar(prom_addr, "numatrace_hint_faults_total"),
        hint_faults
    );
    let promote = stats["kernel_promote"].as_f64().expect("kernel_promote");
    assert_eq!(
        scalar(
            prom_addr,
            "sum(numatrace_promotion_decisions_total{result=\"promote\"})"
        ),
        promote
    );
    assert_eq!(
        scalar(
            prom_addr,
            "sum(numatrace_promotion_decisions_total{reason=\"reject_latency\"})"
        ),
        stats["kernel_reject"]["latency"]
            .as_f64()
            .expect("reject latency")
    );
    assert_eq!(
        scalar(prom_addr, "numatrace_migrations_total{result=\"success\"}"),
        stats["migrate"]["success"].as_f64().expect("migrations")
    );
    assert_eq!(
        scalar(
            prom_addr,
            "numatrace_model_promote_total{model=\"kernel-time\"}"
        ),
        promote,
        "kernel-time re-implements the kernel on this trace"
    );

    // The median from the histogram is in the bucket stats reports.
    let (upper_s, total) = stats_median_bucket_s(&stats);
    assert_eq!(
        scalar(
            prom_addr,
            "sum(numatrace_scan_to_fault_latency_seconds_count)"
        ),
        total as f64
    );
    let p50 = scalar(
        prom_addr,
        "histogram_quantile(0.5, sum by (le) (numatrace_scan_to_fault_latency_seconds_bucket))",
    );
    println!(
        "Prometheus histogram_quantile(0.5) = {p50:.3} s; numatrace stats: median in ({:.3}, {upper_s:.3}] s",
        upper_s / 2.0
    );
    assert!(
        p50 > upper_s / 2.0 && p50 <= upper_s * (1.0 + 1e-12),
        "p50 {p50} s outside the stats median bucket ({}, {upper_s}] s",
        upper_s / 2.0
    );

    // Monotonic counters: non-decreasing over the whole run, and they grew
    // while the replay ran (more than one distinct value scraped).
    let end = unix_now();
    for q in [
        "numatrace_hint_faults_total",
        "sum(numatrace_promotion_decisions_total)",
        "sum(numatrace_scan_to_fault_latency_seconds_count)",
        "sum(numatrace_model_agreement_total)",
        "numatrace_exporter_events_total",
    ] {
        let series = range_values(prom_addr, q, replay_start - 1.0, end);
        assert_eq!(series.len(), 1, "{q}: {series:?}");
        let v = &series[0];
        assert!(v.windows(2).all(|w| w[0] <= w[1]), "{q} decreased: {v:?}");
        let mut distinct = v.clone();
        distinct.dedup();
        assert!(
            distinct.len() >= 2,
            "{q} never changed during the replay: {v:?}"
        );
        assert_eq!(
            scalar(prom_addr, &format!("resets(({q})[5m:500ms])")),
            0.0,
            "{q} reset"
        );
    }

    // Every dashboard query runs and, except the per-node vmstat a replay
    // does not have, returns data.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../contrib/grafana-dashboard.json"
        ))
        .expect("reading contrib/grafana-dashboard.json"),
    )
    .expect("dashboard JSON");
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() >= 8);
    for e in &exprs {
        let q = e
            .replace("$__rate_interval", "30s")
            .replace("$instance", ".*");
        let r = query(prom_addr, &q);
        let live_only = e.contains("numatrace_node_vmstat_total");
        assert!(
            live_only || !r.is_empty(),
            "dashboard query returned nothing: {q}"
        );
    }

    // Both expositions straight from the exporter: the negotiated types,
    // and the classic one passes promtool's checks.
    let om = get(exporter_addr, "/metrics", Some(OPENMETRICS)).expect("scrape");
    assert!(om
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/openmetrics-text")));
    assert!(om.text().ends_with("# EOF\n"));
    let plain = get(exporter_addr, "/metrics", None).expect("scrape");
    assert!(plain
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/plain; version=0.0.4")));
    let mut check = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running promtool");
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(&plain.body)
        .expect("feeding promtool");
    let out = check.wait_with_output().expect("promtool");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let status = exporter.terminate(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "exporter exit: {status:?}"
    );
    println!(
        "real-Prometheus test took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

fn collect_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}
