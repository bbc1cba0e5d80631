//! `numatrace stats TRACE`: the funnel section and `--json`'s `funnel`
//! agree with the report's own totals on the recorded test trace.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::process::Command;

const NUMATRACE: &str = env!("CARGO_BIN_EXE_numatrace");
const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/testdata/hot-chunks-6.12.trace"
);

fn stats(json: bool) -> Vec<u8> {
    let mut cmd = Command::new(NUMATRACE);
    cmd.args(["stats", TRACE]);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("running numatrace stats");
    assert!(
        out.status.success(),
        "numatrace stats failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn the_funnel_adds_up_to_the_totals_and_judges_the_workload() {
    let r: serde_json::Value = serde_json::from_slice(&stats(true)).expect("stats --json");
    let funnel = r["funnel"].as_array().expect("a funnel array");
    let sum = |key: &str| {
        funnel
            .iter()
            .map(|p| p[key].as_u64().expect(key))
            .sum::<u64>()
    };
    let slow = r["checks"]["slow_node_faults"]
        .as_u64()
        .expect("slow faults");
    assert!(slow > 0);
    assert_eq!(sum("slow_faults"), slow);
    assert_eq!(
        sum("ptes_protected"),
        r["scan_ptes_updated"].as_u64().expect("ptes")
    );
    assert_eq!(
        sum("rejected_latency"),
        r["kernel_reject"]["latency"].as_u64().expect("rejects")
    );
    let hot = funnel
        .iter()
        .find(|p| p["comm"] == "hot-chunks")
        .expect("the workload's process");
    let kind = hot["verdict_kind"].as_str().expect("verdict_kind");
    let verdict = hot["verdict"].as_str().expect("verdict");
    assert_eq!(kind, "refused_latency", "{verdict}");
    let text = String::from_utf8(stats(false)).expect("UTF-8");
    let line = format!("pid {} hot-chunks: {verdict}", hot["pid"]);
    assert!(text.contains("\n  funnel ("), "{text}");
    assert!(text.contains(&line), "no `{line}` in\n{text}");
}
