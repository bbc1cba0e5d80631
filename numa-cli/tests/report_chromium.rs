//! `numatrace report` renders in a real browser: headless Chromium loads the
//! page from disk (no network), and the DOM it builds holds five charts with
//! drawn marks, and its screenshot is not blank; a page of two traces holds
//! every chart twice, in labelled columns.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::{
    path::{Path, PathBuf},
    process::Command,
};

fn chromium() -> &'static str {
    for c in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if Path::new(c).exists() {
            return c;
        }
    }
    panic!("chromium is not installed: `cargo xtask setup` installs it (Debian package chromium)");
}

const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// A scratch directory of this test process.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("numatrace-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn testdata_trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/hot-chunks-6.12.trace")
}

/// `numatrace report TRACES -o html`; its stderr.
fn report(traces: &[&Path], html: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_numatrace"))
        .arg("report")
        .args(traces)
        .arg("-o")
        .arg(html)
        .output()
        .expect("run numatrace report");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "numatrace report failed: {stderr}");
    stderr
}

/// The DOM headless Chromium builds from the page at `html`.
fn dump_dom(html: &Path, profile: &Path) -> String {
    let dom = Command::new(chromium())
        .args(FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("run chromium --dump-dom");
    String::from_utf8_lossy(&dom.stdout).into_owned()
}

/// Every chart of `dom` (a `class="chart"` element) has drawn marks.
fn assert_every_chart_has_marks(dom: &str) {
    for chart in dom.split("class=\"chart\"").skip(1) {
        let marks = chart.matches("<rect").count()
            + chart.matches("<polyline").count()
            + chart.matches("<path").count();
        assert!(marks > 5, "a chart rendered without marks");
    }
}

#[test]
fn report_renders_in_headless_chromium() {
    let dir = scratch("report");
    let html = dir.join("report.html");
    report(&[&testdata_trace()], &html);
    let profile = dir.join("profile");
    let url = format!("file://{}", html.display());
    let dom = dump_dom(&html, &profile);
    assert_eq!(
        dom.matches("<svg").count(),
        7,
        "chromium's DOM should hold 7 charts:\n{}",
        &dom[..dom.len().min(500)]
    );
    assert_every_chart_has_marks(&dom);
    // The funnel chart names the workload's verdict.
    assert!(
        dom.contains("173 hot-chunks: touched, refused: latency"),
        "the funnel chart's legend lacks the verdict"
    );
    let png = dir.join("shot.png");
    let shot = Command::new(chromium())
        .args(FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1000,3000")
        .arg(&url)
        .output()
        .expect("run chromium --screenshot");
    assert!(
        shot.status.success(),
        "chromium --screenshot failed: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    // A blank 1000x3000 PNG compresses to a few KB; seven charts do not.
    assert!(size > 40_000, "screenshot is {size} bytes: nothing drawn?");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two traces (the same recording under two file names: distinct paths
/// are distinct traces) make one page with every chart row in two
/// labelled columns, each drawn.
#[test]
fn fleet_report_of_two_traces_renders_two_columns() {
    let dir = scratch("fleet");
    let (a, b) = (dir.join("host-a.trace"), dir.join("host-b.trace"));
    for copy in [&a, &b] {
        std::fs::copy(testdata_trace(), copy).expect("copy the trace");
    }
    let html = dir.join("fleet.html");
    let stderr = report(&[&a, &b], &html);
    // Under the test harness stderr is no terminal: no bar, no escapes.
    assert!(
        !stderr.contains('\r') && !stderr.contains('\x1b'),
        "progress drawn off a terminal: {stderr:?}"
    );
    let dom = dump_dom(&html, &dir.join("profile"));
    assert_eq!(dom.matches("<svg").count(), 14, "7 chart rows x 2 columns");
    assert_eq!(dom.matches("class=\"row\"").count(), 7, "7 chart rows");
    assert_every_chart_has_marks(&dom);
    for name in ["host-a.trace", "host-b.trace"] {
        let label = format!("{name} \u{b7} kernel 6.12");
        // A label above each of the 7 charts and one over its summary column.
        assert_eq!(dom.matches(&label).count(), 8, "labels of {name}");
    }
    assert!(dom.contains("two-touch agreement %"), "summary per model");
    let refused = Command::new(env!("CARGO_BIN_EXE_numatrace"))
        .arg("report")
        .args([&a, &a])
        .arg("-o")
        .arg(&html)
        .output()
        .expect("run numatrace report");
    assert!(!refused.status.success(), "a trace given twice is refused");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("given twice"));
    let _ = std::fs::remove_dir_all(&dir);
}
