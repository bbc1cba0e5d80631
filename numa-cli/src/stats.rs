//! `numatrace stats --live`: attach, count, print totals next to the
//! kernel's own vmstat deltas over the same window.
use std::{
    collections::BTreeMap,
    io::Write,
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use numa_ebpf_common::Counter;
use serde::Serialize;

use crate::{
    cli::StatsArgs,
    doctor,
    probe::{
        discover,
        load::{self, counter},
        plan::{self, HookStatus},
    },
    system,
};

#[derive(Debug, Serialize)]
pub struct Totals {
    pub duration_s: f64,
    pub hint_faults: u64,
    pub decisions: u64,
    pub kernel_promote: u64,
    pub kernel_reject: BTreeMap<&'static str, u64>,
    pub migrate: BTreeMap<&'static str, u64>,
    pub scan_stamps: u64,
    pub scan_ranges: u64,
    pub scan_ptes_updated: u64,
    pub fault_account: u64,
    pub thp_faults: u64,
    pub vma_skips: u64,
    pub drops: u64,
    pub evictions: u64,
    pub stamp_misses: u64,
    pub vmstat_delta: BTreeMap<String, u64>,
    pub attach_plan: String,
    /// Exit status of the command run while attached, if any.
    pub command_status: Option<i32>,
}

/// Refuses to go on when a prerequisite fails, with doctor's words.
pub fn require_preflight() -> Result<()> {
    let failed: Vec<String> = doctor::preflight()
        .into_iter()
        .filter(|c| c.status == doctor::Status::Fail)
        .map(|c| format!("{}: {} (remedy: {})", c.name, c.detail, c.remedy))
        .collect();
    if !failed.is_empty() {
        bail!(
            "cannot attach probes:\n  {}\n(`numatrace doctor` checks everything)",
            failed.join("\n  ")
        );
    }
    Ok(())
}

pub fn run(args: &StatsArgs) -> Result<ExitCode> {
    if !args.live {
        bail!("reading recorded traces is not supported yet: use `numatrace stats --live`");
    }
    require_preflight()?;
    let plan = plan::build(&discover::discover());
    let probes = load::attach(plan)?;
    if !probes.plan.complete {
        let bad: Vec<String> = probes
            .plan
            .hooks
            .iter()
            .filter(|h| h.required && h.status != HookStatus::Attached)
            .map(|h| format!("{}: {}", h.hook.name(), h.detail))
            .collect();
        bail!(
            "required hooks could not be attached:\n  {}\n(`numatrace doctor` explains each)",
            bad.join("\n  ")
        );
    }
    let vm_before = system::vmstat();
    let c_before = probes.counters()?;
    let start = Instant::now();
    let command_status = if let Some((prog, rest)) = args.command.split_first() {
        let mut child = std::process::Command::new(prog)
            .args(rest)
            .spawn()
            .with_context(|| format!("starting {prog}"))?;
        match args.duration {
            None => Some(child.wait()?.code().unwrap_or(-1)),
            Some(d) => {
                let deadline = start + Duration::from_secs_f64(d);
                loop {
                    if let Some(st) = child.try_wait()? {
                        break Some(st.code().unwrap_or(-1));
                    }
                    if Instant::now() >= deadline {
                        let _ = child.kill();
                        break child.wait()?.code();
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    } else {
        std::thread::sleep(Duration::from_secs_f64(args.duration.unwrap_or(10.0)));
        None
    };
    let elapsed = start.elapsed().as_secs_f64();
    let c_after = probes.counters()?;
    let vm_after = system::vmstat();
    let d = |c: Counter| counter(&c_after, c).saturating_sub(counter(&c_before, c));
    let totals = Totals {
        duration_s: elapsed,
        hint_faults: d(Counter::HintFaults),
        decisions: d(Counter::Decisions),
        kernel_promote: d(Counter::DecisionPromote),
        kernel_reject: BTreeMap::from([("total", d(Counter::DecisionReject))]),
        migrate: BTreeMap::from([
            ("success", d(Counter::MigrateSuccess)),
            ("fail", d(Counter::MigrateFail)),
        ]),
        scan_stamps: d(Counter::CpupidXchg),
        scan_ranges: d(Counter::ScanRanges),
        scan_ptes_updated: d(Counter::ScanPtesUpdated),
        fault_account: d(Counter::FaultAccount),
        thp_faults: d(Counter::ThpFaults),
        vma_skips: d(Counter::VmaSkips),
        drops: d(Counter::RingDrops),
        evictions: d(Counter::MapEvictions),
        stamp_misses: d(Counter::StampMisses),
        vmstat_delta: system::vmstat_delta(&vm_before, &vm_after),
        attach_plan: probes.plan.summary(),
        command_status,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &totals)?;
        writeln!(out)?;
    } else {
        print_human(&totals, &mut out)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_human(t: &Totals, out: &mut impl Write) -> std::io::Result<()> {
    let vm = |k: &str| t.vmstat_delta.get(k).map_or("-".to_owned(), u64::to_string);
    writeln!(out, "numatrace stats over {:.1} s", t.duration_s)?;
    writeln!(
        out,
        "  hint faults          {:>12}   (vmstat numa_hint_faults {})",
        t.hint_faults,
        vm("numa_hint_faults")
    )?;
    writeln!(out, "  promotion decisions  {:>12}", t.decisions)?;
    writeln!(
        out,
        "    promote            {:>12}   (vmstat pgpromote_candidate {})",
        t.kernel_promote,
        vm("pgpromote_candidate")
    )?;
    writeln!(
        out,
        "    reject             {:>12}",
        t.kernel_reject.get("total").copied().unwrap_or(0)
    )?;
    writeln!(
        out,
        "  migrations ok/fail   {:>12} / {}   (vmstat pgpromote_success {})",
        t.migrate.get("success").copied().unwrap_or(0),
        t.migrate.get("fail").copied().unwrap_or(0),
        vm("pgpromote_success")
    )?;
    writeln!(
        out,
        "  scan ranges          {:>12}   PTEs updated {} (vmstat numa_pte_updates {})",
        t.scan_ranges,
        t.scan_ptes_updated,
        vm("numa_pte_updates")
    )?;
    writeln!(out, "  cpupid stamps        {:>12}", t.scan_stamps)?;
    writeln!(out, "  ring drops           {:>12}", t.drops)?;
    writeln!(out, "  attach plan: {}", t.attach_plan)?;
    Ok(())
}
