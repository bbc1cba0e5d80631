//! Textfile mode (never a half-written file, the final state on exit) and
//! `numatrace hist --from` on the recorded 6.12 trace, against `numatrace
//! stats` on the same trace.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
mod export_common;

use std::{
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
};

use export_common::*;

fn parse(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("parse")
}

fn counter(scrape: &prometheus_parse::Scrape, name: &str) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name)
        .and_then(|s| match s.value {
            prometheus_parse::Value::Counter(v) => Some(v),
            _ => None,
        })
}

#[test]
fn textfile_is_replaced_atomically_and_ends_with_the_final_state() {
    let stats = stats_json();
    let dir = TempDir::new("textfile");
    let path = dir.0.join("numatrace.prom");
    let mut cmd = Command::new(NUMATRACE);
    // Speed 4: a 6.6 s replay, long enough for a reader on a loaded 2-core
    // host (debug build, parsing every read) to see many versions.
    cmd.args(["export", "--replay", TRACE, "--speed", "4"])
        .args(["--textfile", &path.to_string_lossy(), "--interval", "0.05"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("starting numatrace export");

    // Read the file as node_exporter would, as often as possible, while
    // the exporter keeps replacing it: every read is a whole exposition.
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (stop, reads, path) = (stop.clone(), reads.clone(), path.clone());
        std::thread::spawn(move || {
            let mut values = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                reads.fetch_add(1, Ordering::Relaxed);
                assert!(
                    text.ends_with('\n')
                        && text.contains("numatrace_exporter_last_snapshot_timestamp_seconds "),
                    "a partial textfile was visible:\n{text}"
                );
                if let Some(v) = counter(&parse(&text), "numatrace_hint_faults_total") {
                    values.push(v);
                }
            }
            values
        })
    };
    let out = child.wait_with_output().expect("numatrace export");
    stop.store(true, Ordering::Relaxed);
    let values = reader.join().expect("reader");
    assert!(
        out.status.success(),
        "export failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        reads.load(Ordering::Relaxed) > 10,
        "too few reads to mean anything"
    );
    assert!(
        values.windows(2).all(|w| w[0] <= w[1]),
        "hint faults decreased: {values:?}"
    );
    let mut distinct = values.clone();
    distinct.dedup();
    assert!(
        distinct.len() >= 3,
        "the file was not updated during the replay: {distinct:?}"
    );

    // The final file: the whole replay, in the classic text format.
    let text = std::fs::read_to_string(&path).expect("final textfile");
    assert!(!text.contains("# EOF") && !text.contains("# UNIT"));
    let scrape = parse(&text);
    assert_eq!(
        counter(&scrape, "numatrace_hint_faults_total"),
        stats["hint_faults"].as_f64()
    );
    let names: Vec<String> = std::fs::read_dir(&dir.0)
        .expect("ls")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["numatrace.prom"], "temporary files left behind");
}

#[test]
fn textfile_in_an_unwritable_place_fails_at_once_with_the_remedy() {
    let out = Command::new(NUMATRACE)
        .args([
            "export",
            "--replay",
            TRACE,
            "--textfile",
            "/nonexistent/dir/numatrace.prom",
        ])
        .output()
        .expect("numatrace export");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/dir/numatrace.prom") && err.contains("writable"),
        "{err}"
    );
}

#[test]
fn a_taken_port_is_reported_with_the_remedy() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let out = Command::new(NUMATRACE)
        .args(["export", "--replay", TRACE, "--listen", &addr.to_string()])
        .output()
        .expect("numatrace export");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("already in use") && err.contains("--listen"),
        "{err}"
    );
}

fn hist(args: &[&str]) -> String {
    let out = Command::new(NUMATRACE)
        .args(["hist", "--from", TRACE])
        .args(args)
        .output()
        .expect("numatrace hist");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

#[test]
fn hist_from_a_trace_matches_stats() {
    let stats = stats_json();
    let rows = |key: &str| -> Vec<(f64, u64)> {
        stats[key]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| {
                (
                    r["le"].as_f64().expect("le"),
                    r["count"].as_u64().expect("count"),
                )
            })
            .collect()
    };

    // JSON: one object for the whole run, buckets equal to stats'.
    let json = hist(&["--json"]);
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), 1);
    let lat = &lines[0]["data"]["latency_ns"]["all"];
    let got: Vec<(f64, u64)> = lat["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| {
            (
                b["max"].as_f64().expect("max") / 1e6,
                b["count"].as_u64().expect("count"),
            )
        })
        .collect();
    assert_eq!(got, rows("latency_ms"));
    let delta = &lines[0]["data"]["fault_delta"]["all"];
    assert_eq!(
        delta["count"].as_u64(),
        Some(rows("fault_delta").iter().map(|r| r.1).sum())
    );

    // Text: bcc's form, the same counts.
    let text = hist(&[]);
    for (le_ms, count) in rows("latency_ms") {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("-> {le_ms:.3}ms")))
            .unwrap_or_else(|| panic!("no row up to {le_ms} ms in\n{text}"));
        assert!(line.contains(&format!(": {count} ")), "{line}");
        assert!(line.trim_end().ends_with('|'), "{line}");
    }

    // CSV per interval and outcome: the intervals add up to the run.
    let csv = hist(&["--by", "outcome", "--interval", "5", "--csv"]);
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("interval,start_s,end_s,histogram,key,min,max,count")
    );
    let mut by_outcome = std::collections::BTreeMap::<String, u64>::new();
    let mut intervals = std::collections::BTreeSet::new();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), 8, "{l}");
        intervals.insert(f[0].to_owned());
        if f[3] == "latency_ns" {
            *by_outcome.entry(f[4].to_owned()).or_default() += f[7].parse::<u64>().expect("count");
        }
    }
    // The faults fall in the trace's last 15 s: several 5 s intervals.
    let last = intervals.iter().filter_map(|i| i.parse::<u32>().ok()).max();
    assert!(intervals.len() >= 2 && last >= Some(5), "{intervals:?}");
    assert_eq!(
        by_outcome.get("promote_hot").copied(),
        stats["kernel_promote"].as_u64()
    );
    assert_eq!(
        by_outcome.get("reject_latency").copied(),
        stats["kernel_reject"]["latency"].as_u64()
    );
}
