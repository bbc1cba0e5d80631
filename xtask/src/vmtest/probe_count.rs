//! A probe attached through the plan counts should_numa_migrate_memory
//! calls equal to vmstat's numa_hint_faults delta (a small workload);
//! --empty-programs attaches programs that run once per hint fault and
//! record nothing; --cgroup takes in the cgroups below the one named;
//! the report states numatrace's own CPU over every record it counts, and
//! with --bpf-stats what its programs add inside the scanner and to each
//! hint fault.
use std::path::Path;

use anyhow::{ensure, Context, Result};
use numa_core::model::totals::Report;
use numa_core::params::KernelHotness;

use crate::kernels::Series;
use crate::results::{entry, faults_match_vmstat, read_report};

pub(super) const SCRIPT: &str = include_str!("probe_count.sh");

/// A probe attached through the plan counts
/// should_numa_migrate_memory calls equal to vmstat's numa_hint_faults delta.
pub(super) fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    let stats: Report = read_report(dir, "stats.json")?;
    faults_match_vmstat(&stats)?;
    check_own_cpu(&stats)?;
    check_scanner_cost(&stats)?;
    check_fault_cost(&stats)?;
    check_empty_programs(&read_report(dir, "empty.json")?)?;
    check_cgroup_filter(
        &read_report(dir, "cgroup-parent.json")?,
        &read_report(dir, "cgroup-other.json")?,
    )
}

/// With --bpf-stats and protected PTEs, the programs' time in the scanner
/// per protected PTE, over the report's own PTE count.
fn check_scanner_cost(s: &Report) -> Result<()> {
    let ptes = s.scan_ptes_updated;
    ensure!(ptes > 0, "the workload was never scanned: no PTE protected");
    let c = s
        .scanner_cost
        .as_ref()
        .with_context(|| format!("no scanner_cost (scan_ptes_updated {ptes})"))?;
    ensure!(
        c.ptes == ptes,
        "scanner_cost.ptes {} != scan_ptes_updated {ptes}",
        c.ptes
    );
    ensure!(
        c.pass_ns_per_pte > 0.0,
        "scanner_cost.pass_ns_per_pte is {} in {c:?}",
        c.pass_ns_per_pte
    );
    // Nothing runs per folio in the scanner where the kernel promotes on
    // time: no program on the access-value exchange.
    let on_time = s.kernel_hotness != KernelHotness::FaultCount;
    ensure!(
        !on_time || c.exchange_ns_per_pte == 0.0,
        "a program ran on the access-value exchange ({} ns per protected PTE) on a kernel that promotes on time: {c:?}",
        c.exchange_ns_per_pte
    );
    Ok(())
}

/// With --bpf-stats, the programs' time on the fault path per hint fault,
/// over the report's own hint-fault count: at least the fault's and the
/// decision's programs ran for each.
fn check_fault_cost(s: &Report) -> Result<()> {
    let c = s
        .fault_cost
        .as_ref()
        .with_context(|| format!("no fault_cost (hint_faults {})", s.hint_faults))?;
    ensure!(
        c.hint_faults == s.hint_faults && c.runs_per_hint_fault >= 2.0,
        "fault_cost {c:?} against {} hint faults: fewer than two program runs per hint fault",
        s.hint_faults
    );
    ensure!(
        c.ns_per_hint_fault_at_most > 0.0,
        "fault_cost.ns_per_hint_fault_at_most is 0 in {c:?}"
    );
    Ok(())
}

/// numatrace's own CPU: time spent attaching and running, over the records
/// the report counts (faults, passes, VMA skips).
fn check_own_cpu(s: &Report) -> Result<()> {
    let skips: u64 = s.vma_skips.values().sum();
    let records = s.hint_faults + s.scan_ranges + skips;
    let c = s
        .numatrace_cpu
        .as_ref()
        .with_context(|| format!("no numatrace_cpu (the report's {records} records)"))?;
    ensure!(
        c.records == records && records > 0,
        "numatrace_cpu.records {} != the report's {records} records",
        c.records
    );
    for (key, v) in [
        ("attach_s", c.attach_s),
        ("run_s", c.run_s),
        ("run_ns_per_record", c.run_ns_per_record),
    ] {
        ensure!(v > 0.0, "numatrace_cpu.{key} is {v} in {c:?}");
    }
    Ok(())
}

/// `--cgroup` of the workload's parent cgroup sees its hint faults; of a
/// sibling cgroup, none.
fn check_cgroup_filter(parent: &Report, other: &Report) -> Result<()> {
    let vm_faults = entry(&parent.vmstat_delta, "vmstat_delta", "numa_hint_faults")?;
    let seen = parent.hint_faults;
    ensure!(
        vm_faults > 0,
        "--cgroup PARENT: the workload caused no hint faults"
    );
    // Everything else in the guest is idle; allow its few faults.
    ensure!(
        seen <= vm_faults && seen * 10 >= vm_faults * 9,
        "--cgroup PARENT saw {seen} of {vm_faults} hint faults of a workload in a child cgroup"
    );
    let other_vm = entry(&other.vmstat_delta, "vmstat_delta", "numa_hint_faults")?;
    let other_seen = other.hint_faults;
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
fn check_empty_programs(s: &Report) -> Result<()> {
    let vm_faults = entry(&s.vmstat_delta, "vmstat_delta", "numa_hint_faults")?;
    ensure!(
        vm_faults > 0,
        "--empty-programs: the workload caused no hint faults"
    );
    ensure!(
        s.hint_faults == 0,
        "--empty-programs recorded hint faults: the real programs ran"
    );
    ensure!(
        !s.bpf_programs.is_empty(),
        "--empty-programs --bpf-stats: no bpf_programs"
    );
    let mut hint_runs = None;
    for p in &s.bpf_programs {
        let name = p.name.as_str();
        ensure!(
            name.starts_with("empty_"),
            "--empty-programs ran {name}, not an empty program"
        );
        if name == "empty_fentry_hint_fault" {
            hint_runs = Some(p.run_count);
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
    use crate::results::tests::{empty_report, program};
    use numa_core::model::totals::SelfCpu;

    fn empty_run(programs: &[(&str, u64)], recorded: u64) -> Report {
        let mut r = empty_report();
        r.hint_faults = recorded;
        r.vmstat_delta.insert("numa_hint_faults".into(), 700);
        r.bpf_programs = programs.iter().map(|&(n, runs)| program(n, runs)).collect();
        r
    }

    #[test]
    fn own_cpu_counts_every_record_of_the_report() {
        let s = |records: u64, run_s: f64| {
            let mut r = empty_report();
            r.hint_faults = 100;
            r.scan_ranges = 20;
            r.vma_skips.insert("pid_inactive".into(), 3);
            r.numatrace_cpu = Some(SelfCpu {
                records,
                attach_s: 1.5,
                run_s,
                run_ns_per_record: run_s * 1e9 / records as f64,
            });
            r
        };
        check_own_cpu(&s(123, 0.2)).unwrap();
        assert!(check_own_cpu(&s(120, 0.2)).is_err());
        assert!(check_own_cpu(&s(123, 0.0)).is_err());
        let mut no_cpu = empty_report();
        no_cpu.hint_faults = 1;
        assert!(check_own_cpu(&no_cpu).is_err());
    }

    #[test]
    fn empty_programs_check_passes_only_when_just_empty_programs_ran_per_fault() {
        let good = [
            ("empty_fentry_hint_fault", 700),
            ("empty_fexit_decision", 700),
        ];
        check_empty_programs(&empty_run(&good, 0)).unwrap();
        assert!(check_empty_programs(&empty_run(&good, 5)).is_err());
        let real = [
            ("empty_fentry_hint_fault", 700),
            ("fentry_fault_account", 700),
        ];
        assert!(check_empty_programs(&empty_run(&real, 0)).is_err());
        let short = [("empty_fentry_hint_fault", 699)];
        assert!(check_empty_programs(&empty_run(&short, 0)).is_err());
    }
}
