//! The exporter shows a running `numatrace promote` through its state file
//! (`NUMATRACE_PROMOTER_STATE`): a real Prometheus (Debian's package, as in
//! `export_prometheus.rs`) scrapes `numatrace export --replay` while this
//! test publishes a promoter state as the promoter would (this process
//! stands in for the promoter: its pid is alive). The `numatrace_promoter_*`
//! series carry the published values and follow the file; once the file
//! is gone, `numatrace_promoter_up` is 0 and the rest disappear.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
mod export_common;

use std::{
    net::SocketAddr,
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use export_common::*;
use numa_host::promoter_state::{pid_start_ticks, PromoterState, Writer, ENV};

/// The single value of an instant query (`NaN` when empty).
fn scalar(prom: SocketAddr, q: &str) -> f64 {
    let r = get(prom, &format!("/api/v1/query?query={}", urlencode(q)), None)
        .unwrap_or_else(|e| panic!("querying Prometheus {q}: {e}"));
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("Prometheus answers JSON");
    assert_eq!(v["status"], "success", "{q}: {v}");
    let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
    assert!(result.len() <= 1, "{q}: {result:?}");
    result
        .first()
        .and_then(|s| s["value"][1].as_str())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

#[test]
fn prometheus_sees_the_promoter_while_its_state_file_is_live() {
    let prometheus = tool("prometheus");
    let dir = TempDir::new("promoter");
    let state_path = dir.0.join("run").join("promoter.json");

    // The promoter's side: republish every 200 ms, moving 100 pages each time.
    let me = std::process::id();
    let mut writer = Writer::at(&state_path, false).expect("state file");
    let stop = Arc::new(AtomicBool::new(false));
    let moved = Arc::new(AtomicU64::new(0));
    let publisher = {
        let (stop, moved) = (stop.clone(), moved.clone());
        std::thread::spawn(move || {
            let mut s = PromoterState {
                pid: me,
                pid_start_ticks: pid_start_ticks(me),
                scope: "pid 4242".into(),
                model: "fault-count".into(),
                failures_by_status: [("ebusy".to_owned(), 7), ("enomem".to_owned(), 0)]
                    .into_iter()
                    .collect(),
                failures: 7,
                queue_depth: 33,
                pingpong: 12,
                rate_limit_bytes_per_s: 256 << 20,
                batch_ms: 20.0,
                ..PromoterState::default()
            };
            while !stop.load(Ordering::Relaxed) {
                s.moved_pages += 100;
                s.moved_bytes = s.moved_pages * 4096;
                writer.publish(&mut s).expect("publish");
                moved.store(s.moved_pages, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(200));
            }
            writer.remove();
        })
    };

    let exporter_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let (_prom, prom_addr) = start_prometheus(&prometheus, &dir.0, exporter_addr);

    let log = dir.0.join("export.log");
    let mut exporter = Proc::spawn(
        "numatrace export",
        Command::new(NUMATRACE)
            .args([
                "export",
                "--replay",
                TRACE,
                "--speed",
                "0",
                "--duration",
                "90",
            ])
            .args(["--listen", &exporter_addr.to_string()])
            .env(ENV, &state_path)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log")),
    );

    // Two scrapes that saw the promoter, with increasing moved pages.
    wait_until(
        Duration::from_secs(45),
        "Prometheus to scrape a running promoter twice",
        || {
            exporter.assert_running();
            scalar(
                prom_addr,
                "count_over_time(numatrace_promoter_moved_pages_total[5m])",
            ) >= 2.0
        },
    );
    assert_eq!(scalar(prom_addr, "numatrace_promoter_up"), 1.0);
    let scraped = scalar(prom_addr, "numatrace_promoter_moved_pages_total");
    let now = moved.load(Ordering::Relaxed) as f64;
    assert!(
        scraped >= 100.0 && scraped <= now && scraped % 100.0 == 0.0,
        "scraped {scraped} moved pages, the promoter has published {now}"
    );
    assert!(
        scalar(
            prom_addr,
            "increase(numatrace_promoter_moved_pages_total[1m])"
        ) > 0.0,
        "moved pages did not grow between scrapes"
    );
    assert_eq!(
        scalar(
            prom_addr,
            "numatrace_promoter_failures_total{status=\"ebusy\"}"
        ),
        7.0
    );
    assert_eq!(
        scalar(
            prom_addr,
            "numatrace_promoter_failures_total{status=\"enomem\"}"
        ),
        0.0
    );
    assert_eq!(scalar(prom_addr, "numatrace_promoter_queue_depth"), 33.0);
    assert_eq!(scalar(prom_addr, "numatrace_promoter_pingpong_total"), 12.0);
    assert_eq!(
        scalar(prom_addr, "numatrace_promoter_rate_limit_bytes_per_second"),
        268_435_456.0
    );
    assert_eq!(
        scalar(
            prom_addr,
            &format!(
                "numatrace_promoter_info{{pid=\"{me}\",scope=\"pid 4242\",dry_run=\"false\"}}"
            )
        ),
        1.0
    );

    // The promoter stops: its file goes, the exporter says so at once.
    stop.store(true, Ordering::Relaxed);
    publisher.join().expect("publisher");
    let plain = get(exporter_addr, "/metrics", None).expect("scrape");
    let text = plain.text();
    assert!(text.contains("numatrace_promoter_up 0\n"), "{text}");
    assert!(
        !text.contains("numatrace_promoter_moved_pages_total"),
        "{text}"
    );
    wait_until(
        Duration::from_secs(20),
        "Prometheus to scrape numatrace_promoter_up 0",
        || scalar(prom_addr, "numatrace_promoter_up") == 0.0,
    );

    let status = exporter.terminate(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "exporter exit: {status:?}"
    );
}
