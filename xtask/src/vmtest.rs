//! Tests that need a real kernel: each is a guest shell script plus a host
//! check of what it left in its results directory. All tests for one kernel
//! run in a single boot (a TCG boot costs seconds); each writes to
//! `/results/<name>/` and is reported on its own.
//!
//! Tests run in table order in the same guest, so a test must set any global
//! state it relies on (e.g. `numa_balancing`) itself.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use crate::checks;
use crate::kernels::{Kernel, Series};
use crate::vm::{self, Guest, Mode, Topology};

/// One VM test.
pub struct VmTest {
    pub name: &'static str,
    /// Run with `sh` in `$RESULTS` (= /results/<name>), numatrace on PATH.
    /// Its exit status must be 0.
    pub script: &'static str,
    pub kernels: &'static [Series],
    /// The guest kills the script after this long.
    pub timeout_s: u64,
    /// Host-side check: (results dir, this test's console lines, kernel).
    pub check: fn(&Path, &str, Series) -> Result<()>,
}

pub const TESTS: &[VmTest] = &[
    VmTest {
        name: "doctor",
        script: r#"echo 2 > /proc/sys/kernel/numa_balancing
numatrace doctor --json > "$RESULTS/doctor.json"
echo $? > "$RESULTS/doctor.rc"
"#,
        kernels: &Series::ALL,
        timeout_s: 180,
        check: check_doctor,
    },
    // A probe attached through the plan counts should_numa_migrate_memory
    // calls equal to vmstat's numa_hint_faults delta (a small workload);
    // --empty-programs attaches programs that run once per hint fault and
    // record nothing.
    VmTest {
        name: "probe_count",
        script: r#"echo 2 > /proc/sys/kernel/numa_balancing
numatrace stats --live --json -- numatrace workload hot-chunks --slow-mb 64 --chunk-mb 8 --accesses 4000 --duration 6 --summary "$RESULTS/workload.json" > "$RESULTS/stats.json"
numatrace stats --live --empty-programs --bpf-stats --json -- numatrace workload hot-chunks --slow-mb 64 --chunk-mb 8 --accesses 4000 --duration 6 --summary "$RESULTS/empty-workload.json" > "$RESULTS/empty.json"
"#,
        kernels: &Series::ALL,
        timeout_s: 180,
        check: checks::check_probe_count,
    },
    // The seeds' scenario: DRAM filled by another process (so promotion
    // must pass the latency threshold), hot chunks with idle gaps on the
    // slow node. One live shadow run records the trace the other checks
    // read; replay must reproduce the live report. --min-faults 20000: the
    // run must go on well past the hot threshold after the scanner's first
    // pass, or a pass that comes late (TCG access costs swing 3x between
    // boots, and the scanner runs on the task's CPU time) leaves only
    // faults within 1 s of it, all promoted, none rejected on latency.
    VmTest {
        name: "recording",
        script: r#"echo 2 > /proc/sys/kernel/numa_balancing
numatrace workload hot-chunks --dram-mb 1400 --slow-mb 0 --duration 300 > filler.json &
filler=$!
sleep 8
numatrace shadow --json -o shadow.json --record t.trace -- numatrace workload hot-chunks --slow-mb 128 --chunk-mb 8 --accesses 20000 --idle-ms 100 --duration 25 --min-faults 20000 --max-duration 150 --summary workload.json || exit 1
kill $filler
numatrace stats t.trace --json > stats.json
"#,
        kernels: &Series::ALL,
        timeout_s: 400,
        check: checks::check_recording,
    },
    // The shadow report of that live run, and its replay from the trace.
    VmTest {
        name: "shadow",
        script: r#"cp ../recording/shadow.json shadow.json
numatrace replay ../recording/t.trace --json -o replay.json
"#,
        kernels: &Series::ALL,
        timeout_s: 120,
        check: checks::check_shadow,
    },
    // `numatrace top` live in a tmux pane in the guest (tmux copied in by
    // `check_top::guest_files`): the workload's row with hint faults, then q.
    VmTest {
        name: "top",
        script: crate::check_top::SCRIPT,
        kernels: &Series::ALL,
        timeout_s: 240,
        check: crate::check_top::check,
    },
    // `numatrace export` live: scraped with wget while the workload runs,
    // plus its textfile (xtask/src/check_export.rs).
    VmTest {
        name: "export",
        script: crate::check_export::SCRIPT,
        kernels: &Series::ALL,
        timeout_s: 120,
        check: crate::check_export::check,
    },
    // `numatrace promote` (issue 7): moves only in scope, above the free
    // floor, survives a killed target; --dry-run moves nothing.
    VmTest {
        name: "promote",
        script: crate::check_promote::SCRIPT,
        kernels: &[Series::V6_1, Series::V6_12],
        timeout_s: 300,
        check: crate::check_promote::check,
    },
];

/// Judges the results a hand-run `name` test left in `dir` (no console).
pub fn check_results(name: &str, dir: &Path, series: Series) -> Result<()> {
    let Some(test) = TESTS.iter().find(|t| t.name == name) else {
        let names: Vec<&str> = TESTS.iter().map(|t| t.name).collect();
        bail!(
            "no VM test named {name:?}; the tests are: {}",
            names.join(", ")
        );
    };
    (test.check)(dir, "", series)
}

/// Result of one VM test.
pub struct TestResult {
    pub name: String,
    pub outcome: Result<()>,
    /// Guest-side wall time of the test (from its end marker), if it ran.
    pub seconds: Option<u64>,
}

const TEST_BEGIN: &str = "===NUMATRACE-TEST-BEGIN ";
const TEST_END: &str = "===NUMATRACE-TEST-END ";

/// Boots `kernel` once and runs every test of [`TESTS`] that applies to it.
pub fn run_kernel(kernel: &Kernel, numatrace: &Path) -> Vec<TestResult> {
    let tests: Vec<&VmTest> = TESTS
        .iter()
        .filter(|t| t.kernels.contains(&kernel.series))
        .collect();
    let out = vm::state_dir(kernel.series).join("test/results");
    let boot_budget_s = 120;
    // tmux for the `top` test; without it that test fails and says why.
    let files = crate::check_top::guest_files().unwrap_or_default();
    let guest = Guest {
        kernel,
        topology: Topology::default(),
        numatrace,
        files: &files,
        mode: Mode::Command(guest_script(&tests)),
        timeout: Duration::from_secs(
            boot_budget_s + tests.iter().map(|t| t.timeout_s).sum::<u64>(),
        ),
        out: &out,
    };
    let outcome = match vm::boot(&guest) {
        Ok(outcome) => outcome,
        Err(err) => {
            let msg = format!("{err:#}");
            return tests
                .iter()
                .map(|t| TestResult {
                    name: t.name.to_string(),
                    outcome: Err(anyhow::anyhow!("cannot boot: {msg}")),
                    seconds: None,
                })
                .collect();
        }
    };
    // Kernel problems outside every test's section (e.g. at boot) and all
    // other test bed failures fail every test of this boot.
    let sections: Vec<(&VmTest, String)> = tests
        .iter()
        .map(|t| (*t, section(&outcome.console, t.name)))
        .collect();
    let stray_problems: Vec<&String> = outcome
        .kernel_problems
        .iter()
        .filter(|p| {
            !sections
                .iter()
                .any(|(_, s)| s.lines().any(|l| l == p.as_str()))
        })
        .collect();
    let mut boot_failure = Vec::new();
    if outcome.timed_out || outcome.exit_status.is_none() || outcome.setup_failed.is_some() {
        boot_failure.extend(outcome.failure());
    } else if let Some(err) = &outcome.results_error {
        boot_failure.push(format!("results: {err}"));
    }
    if !stray_problems.is_empty() {
        boot_failure.push(format!(
            "kernel problems on the console: {}",
            stray_problems
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    sections
        .into_iter()
        .map(|(t, console)| {
            let outcome = if boot_failure.is_empty() {
                judge(t, &out.join(t.name), &console, kernel.series)
            } else {
                Err(anyhow::anyhow!(
                    "{} (console: {})",
                    boot_failure.join("; "),
                    outcome_log(&out)
                ))
            };
            TestResult {
                name: t.name.to_string(),
                outcome,
                seconds: test_seconds(&out.join(t.name)),
            }
        })
        .collect()
}

fn outcome_log(out: &Path) -> String {
    out.parent()
        .unwrap_or(Path::new("."))
        .join("console.log")
        .display()
        .to_string()
}

fn judge(test: &VmTest, dir: &Path, console: &str, series: Series) -> Result<()> {
    let problems: Vec<&str> = console
        .lines()
        .filter(|l| vm::is_kernel_problem(l))
        .collect();
    ensure!(
        problems.is_empty(),
        "kernel problems during the test: {}",
        problems.join(" | ")
    );
    let status_file = dir.join("exit_status");
    let status = std::fs::read_to_string(&status_file)
        .with_context(|| format!("no {} (the test did not run?)", status_file.display()))?;
    match status.trim() {
        "0" => {}
        "137" => bail!("killed after {} s (timeout)", test.timeout_s),
        other => bail!("guest script exited with status {other}"),
    }
    (test.check)(dir, console, series)
}

/// The guest script running `tests` one after another.
fn guest_script(tests: &[&VmTest]) -> String {
    let mut s = String::from("failed=0\n");
    for t in tests {
        let dir = format!("/results/{}", t.name);
        let _ = write!(
            s,
            "echo '{TEST_BEGIN}{name}==='\n\
             mkdir -p {dir} && cd {dir}\n\
             t0=$(date +%s)\n\
             RESULTS={dir} timeout -s KILL {timeout} sh -c {script}\n\
             rc=$?\n\
             echo $rc > {dir}/exit_status\n\
             echo $(( $(date +%s) - t0 )) > {dir}/seconds\n\
             echo \"{TEST_END}{name} exit=$rc===\"\n\
             [ $rc -eq 0 ] || failed=1\n\
             cd /\n",
            name = t.name,
            timeout = t.timeout_s,
            script = vm::shell_quote(t.script),
        );
    }
    s.push_str("exit $failed\n");
    s
}

/// The console lines between a test's begin and end markers.
fn section(console: &str, name: &str) -> String {
    let begin = format!("{TEST_BEGIN}{name}===");
    let end = format!("{TEST_END}{name} ");
    console
        .lines()
        .skip_while(|l| *l != begin)
        .skip(1)
        .take_while(|l| !l.starts_with(&end))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The guest-side seconds a test took, from its results directory (not
/// from the console: the last test's end marker can be lost to the results
/// block that follows it on the serial line).
fn test_seconds(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("seconds"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `numatrace doctor --json` sees the test bed as it is: everything attaches,
/// two memory tiers with node 1 below node 0, and the kernel's own NUMA
/// functions as hook targets.
fn check_doctor(dir: &Path, _console: &str, series: Series) -> Result<()> {
    let rc = std::fs::read_to_string(dir.join("doctor.rc")).context("no doctor.rc")?;
    let json_text = std::fs::read_to_string(dir.join("doctor.json")).context("no doctor.json")?;
    ensure!(
        rc.trim() == "0",
        "numatrace doctor --json exited with {}",
        rc.trim()
    );
    let doc: Value = serde_json::from_str(&json_text)
        .with_context(|| format!("doctor.json is not JSON: {}", snippet(&json_text)))?;
    check_doctor_json(&doc, series)
}

fn check_doctor_json(doc: &Value, series: Series) -> Result<()> {
    let failing: Vec<String> = doc["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "fail")
        .map(|c| format!("{}: {}", c["name"], c["detail"]))
        .collect();
    ensure!(
        doc["ok"] == Value::Bool(true),
        "\"ok\" is {} (failing checks: {})",
        doc["ok"],
        failing.join("; ")
    );
    ensure!(
        doc["attach_plan"]["complete"] == Value::Bool(true),
        "attach_plan.complete is {}",
        doc["attach_plan"]["complete"]
    );

    let tiers = doc["memory_tiers"]
        .as_array()
        .context("memory_tiers is not an array")?;
    ensure!(
        tiers.len() >= 2,
        "memory_tiers has {} entries, want >= 2: {}",
        tiers.len(),
        doc["memory_tiers"]
    );
    let tier_of = |node: u64| {
        tiers.iter().find_map(|t| {
            let nodes = t["nodes"].as_array()?;
            nodes
                .iter()
                .any(|n| n.as_u64() == Some(node))
                .then(|| t["id"].as_u64())?
        })
    };
    match (tier_of(0), tier_of(1)) {
        (Some(t0), Some(t1)) if t1 > t0 => {}
        (t0, t1) => bail!(
            "node 1 (tier {t1:?}) is not in a lower tier than node 0 (tier {t0:?}): {}",
            doc["memory_tiers"]
        ),
    }

    let hooks = doc["attach_plan"]["hooks"]
        .as_array()
        .context("attach_plan.hooks is not an array")?;
    let targets: Vec<&str> = hooks.iter().filter_map(|h| h["target"].as_str()).collect();
    let expected: &[&str] = match series {
        Series::V6_1 => &["numa_migrate_prep", "migrate_misplaced_page"],
        Series::V6_12 | Series::V7_2 => &["numa_migrate_check", "migrate_misplaced_folio"],
    };
    for want in expected {
        ensure!(
            targets.contains(want),
            "no hook targets {want} on {series} (targets: {})",
            targets.join(", ")
        );
    }
    Ok(())
}

fn snippet(text: &str) -> String {
    let s: String = text.chars().take(300).collect();
    if s.len() < text.len() {
        format!("{s}...")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doctor(ok: bool, tiers: Value, targets: &[&str]) -> Value {
        let hooks: Vec<Value> = targets
            .iter()
            .map(|t| {
                serde_json::json!({"hook": "h", "target": t, "mechanism": "fentry",
                "layout": null, "required": true, "status": "attached", "detail": ""})
            })
            .collect();
        serde_json::json!({
            "ok": ok,
            "kernel_release": "6.12.117+deb12-amd64",
            "checks": [],
            "attach_plan": {"complete": true, "hooks": hooks},
            "memory_tiers": tiers,
            "numa_balancing": 2,
        })
    }

    fn two_tiers() -> Value {
        serde_json::json!([
            {"tier": "memory_tier4", "id": 4, "nodes": [0]},
            {"tier": "memory_tier22", "id": 22, "nodes": [1]},
        ])
    }

    #[test]
    fn doctor_json_checks() {
        let folio = ["numa_migrate_check", "migrate_misplaced_folio"];
        let page = ["numa_migrate_prep", "migrate_misplaced_page"];
        assert!(check_doctor_json(&doctor(true, two_tiers(), &folio), Series::V6_12).is_ok());
        assert!(check_doctor_json(&doctor(true, two_tiers(), &page), Series::V6_1).is_ok());
        assert!(check_doctor_json(&doctor(true, two_tiers(), &folio), Series::V6_1).is_err());
        assert!(check_doctor_json(&doctor(false, two_tiers(), &folio), Series::V6_12).is_err());
        let one_tier = serde_json::json!([{"tier": "memory_tier4", "id": 4, "nodes": [0, 1]}]);
        assert!(check_doctor_json(&doctor(true, one_tier, &folio), Series::V6_12).is_err());
        let inverted = serde_json::json!([
            {"tier": "memory_tier4", "id": 4, "nodes": [1]},
            {"tier": "memory_tier22", "id": 22, "nodes": [0]},
        ]);
        assert!(check_doctor_json(&doctor(true, inverted, &folio), Series::V6_12).is_err());
    }

    #[test]
    fn check_results_names_the_tests_and_judges_the_dir() {
        let err = check_results("nope", Path::new("/"), Series::V6_12)
            .expect_err("unknown test")
            .to_string();
        assert!(err.contains("promote") && err.contains("doctor"), "{err}");
        let empty = std::env::temp_dir().join(format!("xtask-empty-{}", std::process::id()));
        std::fs::create_dir_all(&empty).expect("temp dir");
        assert!(check_results("promote", &empty, Series::V6_12).is_err());
        let _ = std::fs::remove_dir_all(&empty);
    }

    #[test]
    fn sections_and_script() {
        let console = "boot\n===NUMATRACE-TEST-BEGIN doctor===\na\nb\n===NUMATRACE-TEST-END doctor exit=0===\nafter\n";
        assert_eq!(section(console, "doctor"), "a\nb\n");
        assert_eq!(section(console, "other"), "");
        let dir = std::env::temp_dir().join(format!("xtask-secs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        assert_eq!(test_seconds(&dir), None);
        std::fs::write(dir.join("seconds"), "42\n").expect("write");
        assert_eq!(test_seconds(&dir), Some(42));
        let _ = std::fs::remove_dir_all(&dir);
        let script = guest_script(&[&TESTS[0]]);
        assert!(script.contains("RESULTS=/results/doctor timeout -s KILL 180 sh -c 'echo 2"));
        assert!(script.ends_with("exit $failed\n"));
    }
}
