//! `numatrace report` renders in a real browser: headless Chromium loads the
//! page from disk (no network), and the DOM it builds holds five charts with
//! drawn marks, and its screenshot is not blank.
use std::{path::Path, process::Command};

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

#[test]
fn report_renders_in_headless_chromium() {
    let dir = std::env::temp_dir().join(format!("numatrace-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let html = dir.join("report.html");
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/hot-chunks-6.12.trace");
    let status = Command::new(env!("CARGO_BIN_EXE_numatrace"))
        .arg("report")
        .arg(&trace)
        .arg("-o")
        .arg(&html)
        .status()
        .expect("run numatrace report");
    assert!(status.success(), "numatrace report failed");
    let profile = dir.join("profile");
    let url = format!("file://{}", html.display());
    let dom = Command::new(chromium())
        .args(FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium --dump-dom");
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert_eq!(
        dom.matches("<svg").count(),
        5,
        "chromium's DOM should hold 5 charts:\n{}",
        &dom[..dom.len().min(500)]
    );
    for chart in dom.split("class=\"chart\"").skip(1) {
        let marks = chart.matches("<rect").count()
            + chart.matches("<polyline").count()
            + chart.matches("<path").count();
        assert!(marks > 5, "a chart rendered without marks");
    }
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
    // A blank 1000x3000 PNG compresses to a few KB; five charts do not.
    assert!(size > 40_000, "screenshot is {size} bytes: nothing drawn?");
    let _ = std::fs::remove_dir_all(&dir);
}
