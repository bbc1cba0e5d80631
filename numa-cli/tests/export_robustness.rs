//! 200 concurrent keep-alive scrapers, clients that stop reading and
//! clients that never finish their headers, all on loopback, against
//! `numatrace export --replay`: the replay (the event pipeline) keeps its
//! pace, every scraper is served, the stuck clients are cut off, and the
//! exporter's memory stays flat once its state stops changing.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
mod export_common;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use export_common::*;

const SCRAPERS: usize = 200;
const SPEED: f64 = 2.5;
/// The server's write-stall and header timeouts (export/server.rs) are 10 s.
const CUT_OFF_WITHIN: Duration = Duration::from_secs(16);

/// How many scrapes a stuck reader pipelines: their responses (over 1 KiB
/// each even while the exporter's state is still empty) are far more than
/// the socket buffers of a loopback connection hold.
const PIPELINED: usize = 4096;

/// Sends many pipelined scrapes and never reads: the server's writes stall.
/// The requests are written from a thread of their own, since the server
/// stops reading them once its writes stall; that write ends in an error
/// when the server cuts the connection.
fn stop_reading(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    let mut writer = s.try_clone().expect("clone the stream");
    std::thread::spawn(move || {
        let reqs = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(PIPELINED);
        let _ = writer.write_all(reqs.as_bytes());
    });
    s
}

fn count_status_lines(bytes: &[u8]) -> usize {
    const STATUS: &[u8] = b"HTTP/1.1 200 ";
    bytes.windows(STATUS.len()).filter(|w| *w == STATUS).count()
}

/// Starts a request and never finishes its headers.
fn never_finish_headers(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHo").expect("send");
    s
}

/// Reads until the server closes (true) or `timeout` passes without
/// anything to read (false); returns the bytes read too.
fn drain_until_closed(s: &mut TcpStream, timeout: Duration) -> (bool, Vec<u8>) {
    s.set_read_timeout(Some(timeout)).expect("timeout");
    let mut buf = vec![0; 1 << 16];
    let mut total = Vec::new();
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (true, total),
            Ok(n) => total.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (true, total),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (false, total)
            }
            Err(_) => return (true, total),
        }
    }
}

#[test]
fn scrapers_and_stuck_clients_do_not_stall_the_pipeline() {
    let dir = TempDir::new("robustness");
    let log = dir.0.join("export.log");
    let (mut exporter, addr) =
        spawn_exporter(SPEED, &["--per-process", "10", "--duration", "120"], &log);
    assert_eq!(
        get(addr, "/metrics", None).expect("first scrape").status,
        200
    );
    let load_start = Instant::now();

    let stuck_readers: Vec<TcpStream> = (0..4).map(|_| stop_reading(addr)).collect();
    let stuck_headers: Vec<TcpStream> = (0..4).map(|_| never_finish_headers(addr)).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let served: Arc<Vec<AtomicU64>> = Arc::new((0..SCRAPERS).map(|_| AtomicU64::new(0)).collect());
    let scrapers: Vec<_> = (0..SCRAPERS)
        .map(|i| {
            let (stop, ok, errors, served) =
                (stop.clone(), ok.clone(), errors.clone(), served.clone());
            std::thread::Builder::new()
                .stack_size(128 << 10)
                .spawn(move || {
                    let accept =
                        (i % 2 == 0).then_some("application/openmetrics-text; version=1.0.0");
                    let mut conn = None;
                    let mut fresh = false;
                    while !stop.load(Ordering::Relaxed) {
                        let c = match conn.as_mut() {
                            Some(c) => c,
                            None => match connect(addr) {
                                Ok(c) => {
                                    fresh = true;
                                    conn.insert(c)
                                }
                                Err(e) => {
                                    errors
                                        .lock()
                                        .map(|mut v| v.push(format!("connect: {e}")))
                                        .ok();
                                    std::thread::sleep(Duration::from_millis(100));
                                    continue;
                                }
                            },
                        };
                        match request(c, "/metrics", accept) {
                            Ok(r) if r.status == 200 && r.text().contains("numatrace_info{") => {
                                fresh = false;
                                ok.fetch_add(1, Ordering::Relaxed);
                                served[i].fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(r) => {
                                errors
                                    .lock()
                                    .map(|mut v| v.push(format!("status {}", r.status)))
                                    .ok();
                            }
                            // A kept-alive connection may have been closed
                            // by the server (idle past the header timeout):
                            // reconnect. A new one must work.
                            Err(e) => {
                                if fresh {
                                    errors
                                        .lock()
                                        .map(|mut v| v.push(format!("request: {e}")))
                                        .ok();
                                }
                                conn = None;
                            }
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                })
                .expect("spawning a scraper")
        })
        .collect();

    // Phase 1: the replay runs under load; it must keep the recorded pace.
    wait_until(Duration::from_secs(60), "the replay to finish", || {
        exporter.assert_running();
        replay_times(&log).is_some()
    });
    let (trace_s, wall_s) = replay_times(&log).expect("replay line");
    let expected = trace_s / SPEED;
    println!(
        "replay under {SCRAPERS} scrapers: {trace_s:.2} s of trace in {wall_s:.2} s (unloaded pace {expected:.2} s)"
    );
    assert!(
        wall_s <= expected * 1.2 + 1.0,
        "the pipeline fell behind: {wall_s:.2} s for {expected:.2} s of paced replay"
    );

    // Phase 2: the state no longer changes; under the same load, memory
    // must stay flat (nothing grows per request or per connection).
    let pid = exporter.pid();
    let rss_start = rss_kib(pid);
    let mut rss_max = rss_start;
    let phase2 = Instant::now();
    while phase2.elapsed() < Duration::from_secs(5) {
        rss_max = rss_max.max(rss_kib(pid));
        std::thread::sleep(Duration::from_millis(200));
    }
    let rss_end = rss_kib(pid);
    println!("exporter RSS under load: {rss_start} KiB -> {rss_end} KiB (max {rss_max} KiB)");
    assert!(
        rss_end <= rss_start + 8 * 1024,
        "memory grew under a steady load: {rss_start} -> {rss_end} KiB"
    );
    assert!(rss_max < 256 * 1024, "exporter RSS {rss_max} KiB");

    // Every scraper was served, repeatedly, without errors.
    stop.store(true, Ordering::Relaxed);
    for s in scrapers {
        s.join().expect("scraper thread");
    }
    let errors = errors.lock().map(|v| v.clone()).unwrap_or_default();
    assert!(
        errors.is_empty(),
        "{} scrape errors, e.g. {:?}",
        errors.len(),
        errors.first()
    );
    let least = served
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .min()
        .unwrap_or(0);
    let total = ok.load(Ordering::Relaxed);
    println!(
        "{total} scrapes served in {:.1} s, at least {least} per scraper",
        load_start.elapsed().as_secs_f64()
    );
    assert!(least >= 10, "a scraper was starved: only {least} scrapes");

    // The stuck clients were cut off: the readers got less than what they
    // asked for, the half-sent headers got closed.
    let deadline = load_start + CUT_OFF_WITHIN;
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
    for mut s in stuck_readers {
        let (closed, got) = drain_until_closed(&mut s, Duration::from_secs(2));
        assert!(closed, "a client that stopped reading was not disconnected");
        // Response sizes change as the replay fills the state, so count
        // status lines rather than compare byte totals.
        let responses = count_status_lines(&got);
        println!("a stuck reader got {responses} of {PIPELINED} responses before the cut-off");
        assert!(
            responses < PIPELINED,
            "it got all {responses} responses ({} bytes): no stall was detected",
            got.len()
        );
    }
    for mut s in stuck_headers {
        let (closed, _) = drain_until_closed(&mut s, Duration::from_secs(2));
        assert!(
            closed,
            "a client that never finished its headers was not disconnected"
        );
    }

    // Still serving, and it exits cleanly.
    assert_eq!(get(addr, "/metrics", None).expect("scrape").status, 200);
    let status = exporter.terminate(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "exporter exit: {status:?}"
    );
}
