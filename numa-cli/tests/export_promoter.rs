//! The exporter shows a running `numatrace promote` through its state file
//! (`NUMATRACE_PROMOTER_STATE`): a real Prometheus (Debian's package, as in
//! `export_prometheus.rs`) scrapes `numatrace export --replay` while this
//! test publishes a promoter state as the promoter would (this process
//! stands in for the promoter: its pid is alive). The `numatrace_promoter_*`
//! series carry the published values and follow the file; once the file
//! is gone, `numatrace_promoter_up` is 0 and the rest disappear.
mod export_common;

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use export_common::*;
use numa_cli::promoter_state::{pid_start_ticks, PromoterState, Writer, ENV};

fn tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` is not installed: this test needs Debian's prometheus package \
                 (`cargo xtask setup` installs it, or `apt-get install prometheus`)"
            )
        })
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

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
    let prom_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let config = dir.0.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: numatrace\n    static_configs:\n      - targets: ['{exporter_addr}']\n"
        ),
    )
    .expect("writing prometheus.yml");
    let prom_log = dir.0.join("prometheus.log");
    let mut prom = Proc::spawn(
        "prometheus",
        Command::new(&prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.0.join("data").display()
            ))
            .arg(format!("--web.listen-address={prom_addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&prom_log).expect("log")),
    );
    wait_until(Duration::from_secs(30), "Prometheus to be ready", || {
        if let Ok(Some(s)) = prom.child.try_wait() {
            panic!(
                "prometheus exited ({s}): {}",
                std::fs::read_to_string(&prom_log).unwrap_or_default()
            );
        }
        get(prom_addr, "/-/ready", None).is_ok_and(|r| r.status == 200)
    });

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
