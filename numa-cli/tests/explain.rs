//! `numatrace explain` on the recorded test trace: a page's timeline holds
//! exactly the faults `dump` shows on that page, in time order, after a
//! scan pass over it, with the kernel's decision and the models' answers.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::process::Command;

use serde_json::Value;

const NUMATRACE: &str = env!("CARGO_BIN_EXE_numatrace");
const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/testdata/hot-chunks-6.12.trace"
);

fn run(args: &[&str]) -> std::process::Output {
    Command::new(NUMATRACE)
        .args(args)
        .output()
        .expect("run numatrace")
}

/// Every fault record of the trace, as `dump` prints it.
fn faults() -> Vec<Value> {
    let out = run(&["dump", TRACE]);
    assert!(out.status.success(), "dump: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|r| r["type"] == "fault")
        .collect()
}

#[test]
fn a_pages_timeline_is_its_faults_after_its_scan() {
    let faults = faults();
    // Pages with a refusal and pages promoted: both kinds of line.
    let promoted = faults.iter().find(|f| f["outcome"] == "promote_hot");
    let refused = faults.iter().find(|f| f["outcome"] != "promote_hot");
    for f in [promoted, refused].into_iter().flatten() {
        let pid = f["pid"].to_string();
        let addr = f["addr"].as_str().expect("addr");
        let base = u64::from_str_radix(addr.trim_start_matches("0x"), 16).expect("hex");
        // Any address inside the page names it.
        let inside = format!("{:#x}", base + 0x123);
        let out = run(&["explain", TRACE, "--pid", &pid, "--addr", &inside, "--json"]);
        assert!(out.status.success(), "explain: {out:?}");
        let t: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let entries = t["entries"].as_array().expect("entries");
        let on_page: Vec<&Value> = faults
            .iter()
            .filter(|g| g["pid"] == f["pid"] && g["addr"] == f["addr"])
            .collect();
        let shown: Vec<&Value> = entries
            .iter()
            .filter(|e| e["kind"] == "hint_fault")
            .collect();
        assert_eq!(shown.len(), on_page.len(), "{entries:?}");
        for (e, g) in shown.iter().zip(&on_page) {
            assert_eq!(e["ts_ns"], g["ts_ns"]);
            assert_eq!(e["kernel"], g["outcome"]);
            // The kernel-time model is the kernel's own rule: it agrees.
            let kernel_time = t["models"]
                .as_array()
                .and_then(|m| m.iter().position(|n| n == "kernel-time"))
                .expect("the kernel-time model");
            assert_eq!(
                e["models"][kernel_time],
                Value::Bool(g["outcome"] == "promote_hot"),
                "{e}"
            );
        }
        let times: Vec<u64> = entries
            .iter()
            .map(|e| e["ts_ns"].as_u64().expect("ts"))
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        assert_eq!(entries[0]["kind"], "scan", "a scan protected it first");
        let (start, end) = (entries[0]["start"].as_u64(), entries[0]["end"].as_u64());
        assert!(start <= Some(base) && Some(base) < end);
        let text = run(&["explain", TRACE, "--pid", &pid, "--addr", addr]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains("scan pass over") && text.contains("hint fault ("),
            "{text}"
        );
    }
}

#[test]
fn a_page_never_touched_says_so_and_a_bad_address_is_refused() {
    let out = run(&["explain", TRACE, "--pid", "1", "--addr", "0x1000"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing in this trace touched"));
    let out = run(&[
        "explain",
        TRACE,
        "--pid",
        "1",
        "--addr",
        "0xffffffffffffffff",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--addr") && err.contains("user-space address"),
        "{err}"
    );
}

#[test]
fn the_report_holds_a_pages_timeline_as_explain_prints_it() {
    let f = faults()
        .into_iter()
        .find(|f| f["outcome"] == "promote_hot")
        .expect("a promotion in the test trace");
    let pid = f["pid"].to_string();
    let addr = f["addr"].as_str().expect("addr").to_owned();
    let dir = std::env::temp_dir().join(format!("numatrace-explain-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let html = dir.join("page.html");
    let html_arg = html.to_str().expect("utf-8 path");
    let out = run(&[
        "report", TRACE, "--pid", &pid, "--addr", &addr, "-o", html_arg,
    ]);
    assert!(out.status.success(), "report: {out:?}");
    let page = std::fs::read_to_string(&html).expect("the page");
    let text = run(&["explain", TRACE, "--pid", &pid, "--addr", &addr]);
    let text = String::from_utf8_lossy(&text.stdout);
    let first_fault = text
        .lines()
        .find(|l| l.contains("hint fault ("))
        .expect("a fault line");
    assert!(
        page.contains(&format!("One page: pid {pid} page {addr}")),
        "{page}"
    );
    // The page escapes what it shows: `->` becomes `-&gt;`.
    assert!(
        page.contains(&first_fault.replace('>', "&gt;")),
        "{first_fault} not in the page"
    );
    let other = dir.join("other.trace");
    std::fs::copy(TRACE, &other).expect("a second trace");
    let other = other.to_str().expect("utf-8 path");
    let out = run(&[
        "report", TRACE, other, "--pid", &pid, "--addr", &addr, "-o", html_arg,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("of one trace"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
