//! The shadow report of the `recording` test's live run, and its replay
//! from that test's trace.
use std::path::Path;

use anyhow::{ensure, Context, Result};

use crate::kernels::Series;
use crate::results::{f, read_json, u};

pub const SCRIPT: &str = r#"cp ../recording/shadow.json shadow.json
numatrace replay ../recording/t.trace --json -o replay.json
"#;

/// The live shadow report shows latency rejections, the
/// kernel-time model agrees with the kernel on >= 95% of decisions, and a
/// replay of the recording reproduces the live report exactly.
pub fn check(dir: &Path, console: &str, _series: Series) -> Result<()> {
    let live = read_json(dir, "shadow.json")?;
    let replay = read_json(dir, "replay.json")?;
    ensure!(
        u(&live, &["kernel", "reject_latency"])? > 0,
        "shadow reports no reject_latency"
    );
    let models = live["models"]
        .as_array()
        .context("models is not an array")?;
    let kt = models
        .iter()
        .find(|m| m["name"] == "kernel-time")
        .context("no kernel-time model in the report")?;
    let pct = f(kt, &["agreement_pct"])?;
    println!("    kernel-time agrees with the kernel on {pct:.2}% of decisions");
    ensure!(
        pct >= 95.0,
        "kernel-time agrees on {pct:.2}% < 95% of decisions"
    );
    if live != replay {
        let diff: Vec<String> = live
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| replay.get(k.as_str()) != Some(v))
            .map(|(k, _)| k.clone())
            .collect();
        anyhow::bail!(
            "replay differs from the live report in: {}",
            diff.join(", ")
        );
    }
    let _ = console;
    Ok(())
}
