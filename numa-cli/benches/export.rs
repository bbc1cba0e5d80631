//! Scrape cost of `numatrace export`, and that scrapes do not slow the
//! pipeline's publication.
//!
//! - `encode/*`: a cold scrape of the full metric set (every family, every
//!   outcome, all 64 buckets of both histograms, 3 models, 100 processes,
//!   per-node vmstat): what the first scrape after a new snapshot pays.
//! - `scrape/cached`: every later scrape of the same snapshot.
//! - `publish/*`: the pipeline's cost per snapshot (build the state, swap
//!   the Arc), alone and while 8 threads scrape as fast as they can.
//! - `http/get_metrics`: GET /metrics over loopback from the real binary
//!   (`export --replay` of the test trace).
//!
//! Ends with a summary line per figure (median and p99 of 1000 runs) and
//! fails when the median cold scrape takes 5 ms or more.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use criterion::{criterion_group, Criterion};
use numa_core::{
    decode::Snapshot,
    model::{
        policy::{build, KernelDefaults, ModelDefaults},
        shadow::Shadow,
    },
    sink::Sink,
};
use numa_ebpf_common::{Outcome, OUTCOMES};
use numa_export::{
    metrics::{
        encode_openmetrics, to_prometheus_text, CgroupMetrics, Decision, Format, Info,
        KernelMetrics, MetricsState, MigratedPages, ModelMetrics, OutcomeHist, ProcessMetrics,
        HIST_BUCKETS,
    },
    publish::{Options, Publisher},
    server::Shared,
};

fn hists(seed: u64) -> Vec<OutcomeHist> {
    Outcome::ALL
        .iter()
        .map(|o| OutcomeHist {
            outcome: o.name(),
            buckets: (0..HIST_BUCKETS as u64)
                .map(|b| 1_000_003 * (b + 1) + seed)
                .collect(),
            sum: 123_456_789_012_345 + seed,
        })
        .collect()
}

/// Every family at its largest.
fn full_state(generation: u64) -> MetricsState {
    let mut decisions = Vec::new();
    for o in Outcome::ALL {
        for (src, dst) in [(1, 0), (2, 0), (1, 3), (2, 3)] {
            decisions.push(Decision {
                promote: o.promoted(),
                reason: o.name(),
                src_node: src,
                dst_node: dst,
                count: 987_654_321,
                pages: 987_654_321 * 512,
            });
        }
    }
    MetricsState {
        generation,
        info: Info {
            version: "0.1.0".into(),
            kernel: "6.12.117+deb12-amd64".into(),
            attach_mode: "fentry".into(),
        },
        kernel: Some(KernelMetrics {
            hint_faults: 9_876_543_210,
            migrations_success: 1_234_567,
            migrations_fail: 12_345,
            ring_drops: 17,
            runs_missed: 3,
            map_evictions: 99,
            unfollowed_faults: 0,
            map_budget_bytes: 256 << 20,
            map_bytes: 30 << 20,
            folio_sample_rate: 1,
            folio_coverage: 1.0,
            latency_ns: hists(1),
            fault_delta: hists(2),
        }),
        migrated_pages: MigratedPages {
            success: 1_234_567 * 512,
            fail: 12_345 * 512,
            promoted: 1_234_567 * 512,
        },
        decisions,
        models: ["kernel-time", "fault-count", "two-touch"]
            .iter()
            .map(|m| ModelMetrics {
                model: (*m).into(),
                promote: 1_000_000,
                both: 1,
                kernel_only: 2,
                model_only: 3,
                neither: 4,
                promote_pages: 512_000_000,
                both_pages: 512,
                kernel_only_pages: 1024,
                model_only_pages: 1536,
                neither_pages: 2048,
            })
            .collect(),
        processes: (0..100)
            .map(|i| ProcessMetrics {
                pid: 100_000 + i,
                comm: format!("worker-{i}"),
                hint_faults: 1_000_000 - u64::from(i),
                promote: 1000,
                reject: 999_000,
                promote_pages: 512_000,
                reject_pages: 999_000 * 512,
                verdict: "refused_latency",
                demoted_by: [("kswapd".to_owned(), 300), ("direct".to_owned(), 20)].into(),
                pingpong: 100,
            })
            .collect(),
        cgroups: (0..100u64)
            .map(|i| CgroupMetrics {
                cgroup: format!("/kubepods/pod-{i}"),
                hint_faults: 1_000_000 - i,
                promote: 1000,
                reject: 999_000,
                promoted: 900,
                verdict: "refused_latency",
            })
            .collect(),
        vmstat: numa_core::topology::NUMA_VMSTAT
            .iter()
            .map(|k| ((*k).to_owned(), 123_456_789))
            .collect(),
        node_vmstat: (0..4)
            .map(|n| {
                (
                    n,
                    [
                        "pgpromote_success",
                        "pgpromote_candidate",
                        "pgdemote_kswapd",
                        "pgdemote_direct",
                    ]
                    .iter()
                    .map(|k| ((*k).to_owned(), 42_424_242))
                    .collect(),
                )
            })
            .collect(),
        funnel: Default::default(),
        demotions: vec![("kswapd".into(), 1 << 20), ("direct".into(), 4096)],
        pingpong: Default::default(),
        snapshots: generation,
        events: 123_456_789,
        last_snapshot_unix_s: 1.7e9,
    }
}

fn snapshot(i: u64) -> Snapshot {
    Snapshot {
        ts_ns: 1_000_000_000 * (i + 1),
        counters: (0..32).map(|c| c * 1000 + i).collect(),
        hist_latency: (0..(HIST_BUCKETS * OUTCOMES) as u64)
            .map(|b| b + i)
            .collect(),
        hist_delta: (0..(HIST_BUCKETS * OUTCOMES) as u64)
            .map(|b| b + i)
            .collect(),
        hist_sum: (0..(2 * OUTCOMES) as u64)
            .map(|b| b * 1_000_000 + i)
            .collect(),
        migrate_reason_pages: vec![0; 16],
        vmstat: numa_core::topology::NUMA_VMSTAT
            .iter()
            .map(|k| ((*k).to_owned(), i))
            .collect(),
        damon_cpu_ns: None,
    }
}

fn publisher() -> (Publisher, Arc<Shared>) {
    let k = KernelDefaults::default();
    let policies = ["kernel-time", "fault-count", "two-touch"]
        .iter()
        .map(|s| build(s, &ModelDefaults::default(), &k).expect("model"))
        .collect();
    let (p, rx) = Publisher::new(Options {
        info: Info::default(),
        shadow: Some((
            Shadow::new(policies, 0),
            vec![
                "kernel-time".into(),
                "fault-count".into(),
                "two-touch".into(),
            ],
        )),
        per_process: 100,
        per_cgroup: None,
        sample_every: 1,
        toptier_mask: 1,
        stamp_capacity: 1 << 20,
        sampling: None,
        node_vmstat: None,
    });
    (p, Shared::new(rx, String::new()))
}

fn cold_scrape(state: &Arc<MetricsState>) -> usize {
    let om = encode_openmetrics(state.clone()).expect("encode");
    let text = to_prometheus_text(&om);
    om.len() + text.len()
}

fn benches(c: &mut Criterion) {
    let state = Arc::new(full_state(1));
    c.bench_function("encode/openmetrics", |b| {
        b.iter(|| encode_openmetrics(state.clone()).expect("encode"))
    });
    c.bench_function("encode/openmetrics+prometheus_text", |b| {
        b.iter(|| cold_scrape(&state))
    });

    let (mut p, shared) = publisher();
    p.snapshot(&snapshot(0)).expect("snapshot");
    shared.body(Format::OpenMetrics).expect("warm");
    c.bench_function("scrape/cached", |b| {
        b.iter(|| shared.body(Format::OpenMetrics).expect("body"))
    });

    let mut i = 1;
    c.bench_function("publish/snapshot", |b| {
        b.iter(|| {
            i += 1;
            p.snapshot(&snapshot(i)).expect("snapshot")
        })
    });
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = shared.body(Format::Prometheus);
                }
            })
        })
        .collect();
    c.bench_function("publish/snapshot_while_8_threads_scrape", |b| {
        b.iter(|| {
            i += 1;
            p.snapshot(&snapshot(i)).expect("snapshot")
        })
    });
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let _ = r.join();
    }

    if let Some(server) = Server::start() {
        let mut conn = server.connect();
        c.bench_function("http/get_metrics", |b| b.iter(|| get(&mut conn)));
    }
}

/// `numatrace export --replay` of the test trace, as fast as possible.
struct Server {
    child: std::process::Child,
    port: u16,
}

impl Server {
    fn start() -> Option<Server> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .ok()?
            .port();
        let trace = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/testdata/hot-chunks-6.12.trace"
        );
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_numatrace"))
            .args([
                "export",
                "--replay",
                trace,
                "--speed",
                "0",
                "--per-process",
                "100",
            ])
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--duration",
                "600",
            ])
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let s = Server { child, port };
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)).map(BufReader::new) {
                // The replay has finished once all 27820 faults are in.
                if String::from_utf8_lossy(&get(&mut c))
                    .contains("numatrace_hint_faults_total 27820")
                {
                    return Some(s);
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    fn connect(&self) -> BufReader<TcpStream> {
        BufReader::new(TcpStream::connect(("127.0.0.1", self.port)).expect("connect"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One keep-alive GET /metrics (classic text); the body.
fn get(c: &mut BufReader<TcpStream>) -> Vec<u8> {
    c.get_mut()
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("send");
    let mut len = 0;
    loop {
        let mut line = String::new();
        c.read_line(&mut line).expect("read header");
        let l = line.trim_end().to_ascii_lowercase();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.strip_prefix("content-length:") {
            len = v.trim().parse().expect("length");
        }
    }
    let mut body = vec![0; len];
    c.read_exact(&mut body).expect("body");
    body
}

fn percentiles(mut f: impl FnMut()) -> (Duration, Duration) {
    let mut t: Vec<Duration> = (0..1000)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    (t[t.len() / 2], t[t.len() * 99 / 100])
}

fn summary() {
    let state = Arc::new(full_state(1));
    let bytes = cold_scrape(&state);
    let (cold50, cold99) = percentiles(|| {
        cold_scrape(&state);
    });
    let (p, shared) = publisher();
    drop(p);
    shared.body(Format::OpenMetrics).expect("warm");
    let (hot50, hot99) = percentiles(|| {
        shared.body(Format::OpenMetrics).expect("body");
    });
    println!("\nnumatrace export scrape cost (full metric set, {bytes} bytes in both formats):");
    println!(
        "  cold scrape (encode OpenMetrics + convert to text): median {cold50:?}, p99 {cold99:?}"
    );
    println!(
        "  cached scrape (same snapshot):                      median {hot50:?}, p99 {hot99:?}"
    );
    if let Some(server) = Server::start() {
        let mut c = server.connect();
        let (h50, h99) = percentiles(|| {
            get(&mut c);
        });
        println!(
            "  HTTP GET /metrics over loopback (release binary):   median {h50:?}, p99 {h99:?}"
        );
    } else {
        println!("  HTTP GET /metrics: could not start the exporter binary");
    }
    // The median: on a shared 2-core machine the tail measures the others.
    assert!(
        cold50 < Duration::from_millis(5),
        "a cold scrape of the full metric set took {cold50:?} (median; budget: 5 ms)"
    );
}

criterion_group! {
    name = export;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}

fn main() {
    export();
    summary();
    Criterion::default().configure_from_args().final_summary();
}
