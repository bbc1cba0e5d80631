//! A probe attached through the plan counts should_numa_migrate_memory
//! calls equal to vmstat's numa_hint_faults delta (a small workload);
//! --empty-programs attaches programs that run once per hint fault and
//! record nothing; --cgroup takes in the cgroups below the one named;
//! the report states numatrace's own CPU over every record it counts, and
//! with --bpf-stats what its programs add inside the scanner.
use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use crate::kernels::Series;
use crate::results::{faults_match_vmstat, read_json, u};

pub const SCRIPT: &str = include_str!("probe_count.sh");

/// A probe attached through the plan counts
/// should_numa_migrate_memory calls equal to vmstat's numa_hint_faults delta.
pub fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    let stats = read_json(dir, "stats.json")?;
    faults_match_vmstat(&stats)?;
    check_own_cpu(&stats)?;
    check_scanner_cost(&stats)?;
    check_empty_programs(&read_json(dir, "empty.json")?)?;
    check_cgroup_filter(
        &read_json(dir, "cgroup-parent.json")?,
        &read_json(dir, "cgroup-other.json")?,
    )
}

/// With --bpf-stats and protected PTEs, the programs' time in the scanner
/// per protected PTE, over the report's own PTE and stamp counts.
fn check_scanner_cost(s: &Value) -> Result<()> {
    let ptes = u(s, &["scan_ptes_updated"])?;
    ensure!(ptes > 0, "the workload was never scanned: no PTE protected");
    let c = &s["scanner_cost"];
    ensure!(
        c["ptes"].as_u64() == Some(ptes),
        "scanner_cost.ptes {} != scan_ptes_updated {ptes}",
        c["ptes"]
    );
    let (stamps, runs) = (u(c, &["scanner_exchanges"])?, u(c, &["exchange_runs"])?);
    ensure!(
        stamps == u(s, &["scan_stamps"])?.min(runs) && stamps > 0,
        "scanner_cost.scanner_exchanges {stamps} is not the report's scan stamps ({} runs): {c}",
        runs
    );
    for key in [
        "pass_ns_per_pte",
        "exchange_ns_per_run",
        "ns_per_pte_at_most",
    ] {
        ensure!(
            c[key].as_f64().is_some_and(|v| v > 0.0),
            "scanner_cost.{key} is {} in {c}",
            c[key]
        );
    }
    Ok(())
}

/// numatrace's own CPU: time spent attaching and running, over the records
/// the report counts (faults, passes, VMA skips).
fn check_own_cpu(s: &Value) -> Result<()> {
    let c = &s["numatrace_cpu"];
    let skips: u64 = s["vma_skips"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(_, v)| v.as_u64())
        .sum();
    let records = u(s, &["hint_faults"])? + u(s, &["scan_ranges"])? + skips;
    ensure!(
        c["records"].as_u64() == Some(records) && records > 0,
        "numatrace_cpu.records {} != the report's {records} records",
        c["records"]
    );
    for key in ["attach_s", "run_s", "run_ns_per_record"] {
        ensure!(
            c[key].as_f64().is_some_and(|v| v > 0.0),
            "numatrace_cpu.{key} is {} in {c}",
            c[key]
        );
    }
    Ok(())
}

/// `--cgroup` of the workload's parent cgroup sees its hint faults; of a
/// sibling cgroup, none.
fn check_cgroup_filter(parent: &Value, other: &Value) -> Result<()> {
    let vm_faults = u(parent, &["vmstat_delta", "numa_hint_faults"])?;
    let seen = u(parent, &["hint_faults"])?;
    ensure!(
        vm_faults > 0,
        "--cgroup PARENT: the workload caused no hint faults"
    );
    // Everything else in the guest is idle; allow its few faults.
    ensure!(
        seen <= vm_faults && seen * 10 >= vm_faults * 9,
        "--cgroup PARENT saw {seen} of {vm_faults} hint faults of a workload in a child cgroup"
    );
    let other_vm = u(other, &["vmstat_delta", "numa_hint_faults"])?;
    let other_seen = u(other, &["hint_faults"])?;
    ensure!(
        other_vm > 0,
        "--cgroup SIBLING: the workload caused no hint faults"
    );
    ensure!(
        other_seen == 0,
        "--cgroup SIBLING saw {other_seen} hint faults of a workload outside it"
    );
    Ok(())
}

/// `--empty-programs --bpf-stats`: only the programs that do nothing ran,
/// the hint-fault one once per hint fault, and nothing was recorded.
fn check_empty_programs(s: &Value) -> Result<()> {
    let vm_faults = u(s, &["vmstat_delta", "numa_hint_faults"])?;
    ensure!(
        vm_faults > 0,
        "--empty-programs: the workload caused no hint faults"
    );
    ensure!(
        u(s, &["hint_faults"])? == 0,
        "--empty-programs recorded hint faults: the real programs ran"
    );
    let programs = s["bpf_programs"]
        .as_array()
        .context("--empty-programs --bpf-stats: no bpf_programs")?;
    let mut hint_runs = None;
    for p in programs {
        let name = p["name"].as_str().unwrap_or("");
        ensure!(
            name.starts_with("empty_"),
            "--empty-programs ran {name}, not an empty program"
        );
        if name == "empty_fentry_hint_fault" {
            hint_runs = p["run_count"].as_u64();
        }
    }
    ensure!(
        hint_runs == Some(vm_faults),
        "empty_fentry_hint_fault ran {hint_runs:?} times for {vm_faults} hint faults"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn empty_run(programs: Value, recorded: u64) -> Value {
        json!({"hint_faults": recorded, "vmstat_delta": {"numa_hint_faults": 700},
            "bpf_programs": programs})
    }

    #[test]
    fn own_cpu_counts_every_record_of_the_report() {
        let s = |records: u64, run_s: f64| {
            json!({"hint_faults": 100, "scan_ranges": 20, "vma_skips": {"pid_inactive": 3},
                "numatrace_cpu": {"records": records, "attach_s": 1.5, "run_s": run_s,
                    "run_ns_per_record": run_s * 1e9 / records as f64}})
        };
        check_own_cpu(&s(123, 0.2)).unwrap();
        assert!(check_own_cpu(&s(120, 0.2)).is_err());
        assert!(check_own_cpu(&s(123, 0.0)).is_err());
        assert!(check_own_cpu(&json!({"hint_faults": 1, "scan_ranges": 0})).is_err());
    }

    #[test]
    fn empty_programs_check_passes_only_when_just_empty_programs_ran_per_fault() {
        let good = json!([{"name": "empty_fentry_hint_fault", "run_count": 700},
            {"name": "empty_fexit_decision", "run_count": 700}]);
        check_empty_programs(&empty_run(good.clone(), 0)).unwrap();
        assert!(check_empty_programs(&empty_run(good, 5)).is_err());
        let real = json!([{"name": "empty_fentry_hint_fault", "run_count": 700},
            {"name": "fentry_fault_account", "run_count": 700}]);
        assert!(check_empty_programs(&empty_run(real, 0)).is_err());
        let short = json!([{"name": "empty_fentry_hint_fault", "run_count": 699}]);
        assert!(check_empty_programs(&empty_run(short, 0)).is_err());
    }
}
