//! `replay --truth` and `report --truth` on a crafted trace and truth file:
//! the kernel's one promotion is judged by the accesses at the frames the
//! page held, in the JSON and on the page; a trace without the slow tier's
//! frames and a fleet of traces are refused with the reason.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::process::Command;

use numa_core::{
    decode::{fixtures::fault, Event, Snapshot},
    mapplan::{MapPlan, PfnSpan},
    trace,
    truth::{PageCount, Window},
};
use numa_ebpf_common::{fault_flags, Outcome};
use serde_json::Value;

#[allow(dead_code)] // shared by the output tests: `names` is theirs
mod output_common;
use output_common::TempDir;

const NUMATRACE: &str = env!("CARGO_BIN_EXE_numatrace");
const S: u64 = 1_000_000_000;
/// The fixtures' clock: fault `seq` is at `T0 + seq` ms.
const T0: u64 = 1_000 * S;
/// The recorded test trace, from before traces named the slow tier's
/// frames.
const OLD_TRACE: &str = output_common::TRACE;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(NUMATRACE)
        .args(args)
        .output()
        .expect("run numatrace")
}

/// A 20-s trace of a slow tier at frames 1000..2000 in which the kernel
/// promotes the page at frame 1001 to frame 5001 at 5.5 s.
fn write_trace(path: &std::path::Path) {
    let mut header = trace::fixtures::header();
    header.started_mono_ns = T0;
    let span = PfnSpan {
        node: 1,
        start: 1000,
        end: 2000,
    };
    header.map_plan = Some(MapPlan::choose(1 << 20, 0, 8, vec![span]).expect("a plan"));
    let mut f = fault(5500, 1001, 50, Outcome::PromoteHot);
    f.flags |= fault_flags::MIGRATE_TRIED;
    f.migrate_ok = 1;
    f.src_pfn = 1001;
    f.dst_pfn = 5001;
    let mut w = trace::Writer::new(Vec::new(), &header).expect("writer");
    w.event(&Event::Fault(f)).expect("event");
    w.snapshot(&Snapshot {
        ts_ns: T0 + 20 * S,
        ..Default::default()
    })
    .expect("snapshot");
    let bytes = w.finish(T0 + 20 * S, "duration").expect("finish");
    std::fs::write(path, bytes).expect("write the trace");
}

/// Twenty one-second windows from T0: the page at its slow frame in
/// windows 3 to 5, at its DRAM frame in 6 to 10, 4 accesses each.
fn write_truth(path: &std::path::Path) {
    let windows: Vec<Window> = (0..20)
        .map(|i| Window {
            start_ns: T0 + i * S,
            end_ns: T0 + (i + 1) * S,
            clock_err_ns: 1000,
        })
        .collect();
    let counts: Vec<PageCount> = (3..=5)
        .map(|w| (w, 1001))
        .chain((6..=10).map(|w| (w, 5001)))
        .map(|(window, pfn)| PageCount {
            window,
            pfn,
            loads: 2,
            stores: 2,
        })
        .collect();
    let file = numa_core::truth::encode(&windows, &counts).expect("a truth file");
    std::fs::write(path, file).expect("write the truth");
}

#[test]
fn the_kernels_promotion_is_scored_in_the_json_and_on_the_page() {
    let d = TempDir::new("scorecard");
    let d = &d.0;
    let (t, truth, html) = (d.join("t.trace"), d.join("t.truth"), d.join("page.html"));
    write_trace(&t);
    write_truth(&truth);
    let (t, truth) = (t.to_str().expect("utf-8"), truth.to_str().expect("utf-8"));
    let args = [
        "--truth",
        truth,
        "--hot-accesses",
        "1,5",
        "--horizon-s",
        "3",
    ];
    let out = run(&[&["replay", t, "--json"][..], &args].concat());
    assert!(out.status.success(), "replay: {out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let card = &v["scorecard"];
    assert_eq!(card["accesses"], 32, "{card}");
    assert_eq!(card["slow_accesses"], 12, "{card}");
    assert_eq!(card["shares"][0]["policy"], "kernel");
    assert_eq!(card["shares"][0]["promoted_pages"], 1);
    let kernel = &card["rules"][0]["policies"][0];
    assert_eq!(
        (&kernel["judged"], &kernel["precise"], &kernel["recalled"]),
        (&Value::from(1), &Value::from(1), &Value::from(1)),
        "{card}"
    );
    // Four accesses a window are not five: nothing is hot.
    assert_eq!(card["rules"][1]["hot_pages"], 0, "{card}");

    let out = run(&[
        &["report", t, "-o", html.to_str().expect("utf-8")][..],
        &args,
    ]
    .concat());
    assert!(out.status.success(), "report: {out:?}");
    let page = std::fs::read_to_string(&html).expect("the page");
    let text = run(&[&["replay", t][..], &args].concat());
    let text = String::from_utf8_lossy(&text.stdout);
    let kernel_row = text
        .lines()
        .skip_while(|l| !l.contains("scorecard against the truth"))
        .find(|l| l.trim_start().starts_with("kernel "))
        .expect("the kernel's row");
    assert!(page.contains("Scorecard against the truth"), "{page}");
    assert!(page.contains(kernel_row), "{kernel_row} not in the page");

    let out = run(&["report", t, OLD_TRACE, "--truth", truth, "-o", "-"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("one trace"), "{err}");
}

#[test]
fn a_trace_without_the_slow_tiers_frames_is_refused_with_the_reason() {
    let d = TempDir::new("scorecard-old");
    let truth = d.0.join("t.truth");
    write_truth(&truth);
    let out = run(&[
        "replay",
        OLD_TRACE,
        "--truth",
        truth.to_str().expect("utf-8"),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("names no slow-tier frames"),
        "{err}"
    );
}
