//! `numatrace doctor`: every prerequisite as a checklist with a remedy, the
//! attach plan as actually attached, and a trial of each mechanism.
use std::io::Write;

use numa_core::params::KernelHotness;
use numa_core::plan::{self, AttachPlan, HookStatus, Mechanism};
use numa_host::system;

use crate::{
    check::{check, Check, Status},
    discover,
    load::{self, Trial},
    params, preflight,
};

pub use numa_core::doctor::{FolioMap, Mechanisms, Report};

fn folio_map_check(m: &FolioMap) -> Check {
    let s = &m.sampling;
    if m.page_struct_size == 0 {
        return check(
            "folio_map",
            Status::Warn,
            "no sizeof(struct page) in BTF: folios cannot be placed, so no stamp, latency or delta",
            "use a kernel with BTF (CONFIG_DEBUG_INFO_BTF)",
        );
    }
    if s.slow_pfns == 0 {
        return check(
            "folio_map",
            Status::Warn,
            "no slow-tier node with memory: no folio to follow",
            "online the slow memory (daxctl reconfigure-device --mode=system-ram) before attaching",
        );
    }
    check(
        "folio_map",
        Status::Ok,
        s.describe(),
        "raise --map-budget to follow every folio (estimates then carry no sampling error)",
    )
}

/// A snapshot reads about a thousand per-CPU slots; one batch lookup per
/// map keeps that to a handful of syscalls a second.
fn snapshot_reads_check(batch: Result<(), anyhow::Error>) -> Check {
    match batch {
        Ok(()) => check(
            "snapshot_reads",
            Status::Ok,
            "per-CPU maps are read with one batch lookup each",
            "",
        ),
        Err(e) => check(
            "snapshot_reads",
            Status::Warn,
            format!("{e:#}: per-CPU maps are read one slot per syscall, about a thousand syscalls a snapshot"),
            "kernels from 5.6 read them in one syscall per map; the figures are the same either way",
        ),
    }
}

fn numa_nodes_check(nodes: &[numa_core::topology::Node]) -> Check {
    if nodes.len() >= 2 {
        let cpuless: Vec<String> = nodes
            .iter()
            .filter(|n| n.cpus.is_empty())
            .map(|n| n.id.to_string())
            .collect();
        check(
            "numa_nodes",
            Status::Ok,
            format!("{} nodes, CPU-less: [{}]", nodes.len(), cpuless.join(",")),
            "",
        )
    } else {
        check(
            "numa_nodes",
            Status::Fail,
            format!("{} NUMA node(s): nothing can be promoted between nodes", nodes.len()),
            "run on a host with slow memory (CXL/PMEM) or try the emulated one: `cargo xtask vm --shell`",
        )
    }
}

/// A check that is Ok when its knob could be read and otherwise a warning
/// carrying `remedy`.
fn readable_check(
    name: &'static str,
    readable: bool,
    detail: String,
    remedy: &'static str,
) -> Check {
    if readable {
        check(name, Status::Ok, detail, "")
    } else {
        check(name, Status::Warn, detail, remedy)
    }
}

/// What the kernel promotes on: mainline's scan-to-fault time, or the
/// fault-count RFC's hint-fault count (a patched kernel).
fn hotness_check(hotness: KernelHotness, evidence: &str) -> Check {
    let what = match hotness {
        KernelHotness::Latency => "latency: scan-to-fault time (ms) against hot_threshold_ms",
        KernelHotness::FaultCount => {
            "fault count: the fault-count RFC's patched kernel, hint faults since the scan \
             against fault_count_threshold; its rejections read \"fault count over threshold\""
        }
    };
    check(
        "kernel_hotness",
        Status::Ok,
        format!("{what} ({evidence})"),
        "",
    )
}

fn threshold_check(t: &numa_core::topology::Tunables, hotness: KernelHotness) -> Check {
    let (name, value, unit) = match hotness {
        KernelHotness::Latency => ("hot_threshold_ms", t.hot_threshold_ms, "ms"),
        KernelHotness::FaultCount => ("fault_count_threshold", t.fault_count_threshold, "faults"),
    };
    match value {
        Some(v) => check(name, Status::Ok, format!("{v} {unit}"), ""),
        None => check(
            name,
            Status::Warn,
            "unreadable (debugfs not mounted?)",
            "mount -t debugfs none /sys/kernel/debug",
        ),
    }
}

fn tunables_checks(t: &numa_core::topology::Tunables, hotness: KernelHotness) -> [Check; 4] {
    let fmt = |v: Option<u64>| v.map_or("?".to_owned(), |v| v.to_string());
    [
        match t.demotion_enabled {
            Some(true) => check("demotion_enabled", Status::Ok, "true", ""),
            Some(false) => check(
                "demotion_enabled",
                Status::Warn,
                "false: DRAM is not freed by demotion, so promotion stops once DRAM is full",
                "echo true > /sys/kernel/mm/numa/demotion_enabled",
            ),
            None => check(
                "demotion_enabled",
                Status::Warn,
                "unreadable",
                "kernel without memory tiering sysfs",
            ),
        },
        threshold_check(t, hotness),
        readable_check(
            "promote_rate_limit",
            t.promote_rate_limit_mbps.is_some(),
            format!("{} MB/s", fmt(t.promote_rate_limit_mbps)),
            "kernel without numa_balancing_promote_rate_limit_MBps",
        ),
        readable_check(
            "scan_settings",
            t.scan_period_min_ms.is_some(),
            format!(
                "delay {} ms, period {}..{} ms, size {} MB",
                fmt(t.scan_delay_ms),
                fmt(t.scan_period_min_ms),
                fmt(t.scan_period_max_ms),
                fmt(t.scan_size_mb)
            ),
            "mount -t debugfs none /sys/kernel/debug",
        ),
    ]
}

/// Tries each attach mechanism on its own with a trivial program, so a
/// refusal is reported against the mechanism rather than a particular hook.
fn mechanism_trials() -> (Vec<Trial>, Mechanisms) {
    let has_sys_enter = discover::tracefs().is_some_and(|t| {
        std::path::Path::new(t)
            .join("events/raw_syscalls/sys_enter")
            .is_dir()
    });
    let tp_target = if has_sys_enter {
        "raw_syscalls:sys_enter"
    } else {
        "sched:sched_switch"
    };
    let mut trials = Vec::new();
    let mut mechanisms = Mechanisms::new();
    for (m, target) in [
        (Mechanism::Fentry, "vfs_read"),
        (Mechanism::Kprobe, "vfs_read"),
        (Mechanism::Tracepoint, tp_target),
    ] {
        let t = load::trial(m, target);
        mechanisms.insert(
            m.name().into(),
            if t.ok {
                "ok".to_owned()
            } else {
                format!("refused: {}", t.detail)
            },
        );
        trials.push(t);
    }
    (trials, mechanisms)
}

/// Verdict on hooking kernel functions, from the fentry and kprobe trials.
fn function_probes_check(trials: &[Trial]) -> Check {
    let fentry_ok = trials.first().is_some_and(|t| t.ok);
    let kprobe_ok = trials.get(1).is_some_and(|t| t.ok);
    if fentry_ok {
        check("function_probes", Status::Ok, "fentry/fexit work", "")
    } else if kprobe_ok {
        check(
            "function_probes",
            Status::Warn,
            "fentry/fexit refused; kprobe/kretprobe fallback works",
            "fentry needs CONFIG_DEBUG_INFO_BTF and BPF trampolines; kprobes are fine, slightly slower",
        )
    } else {
        check(
            "function_probes",
            Status::Fail,
            "tracing programs (fentry/fexit) are refused and kprobes are unavailable: no kernel function can be hooked",
            "use a kernel with BPF trampolines (CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS) or CONFIG_KPROBES; in a restricted VM/sandbox try the emulated test bed `cargo xtask vm`",
        )
    }
}

fn attach_plan_check(attach_plan: &AttachPlan, privileged: bool) -> Check {
    let bad: Vec<String> = attach_plan
        .hooks
        .iter()
        .filter(|h| h.required && !matches!(h.status, HookStatus::Attached | HookStatus::Resolved))
        .map(|h| format!("{} ({:?})", h.hook.name(), h.status).to_lowercase())
        .collect();
    if bad.is_empty() {
        check(
            "attach_plan",
            if privileged { Status::Ok } else { Status::Warn },
            if privileged {
                "every required hook attached"
            } else {
                "resolved, not attached (needs root)"
            },
            "",
        )
    } else {
        check(
            "attach_plan",
            Status::Fail,
            format!("required hooks not usable: {}", bad.join(", ")),
            "see each hook's detail below; a kernel that inlines these functions needs a newer numatrace",
        )
    }
}

/// Runs every check: the attaching commands' preflight first. Attaches
/// the plan for real when privileged.
pub fn run() -> Report {
    let host = preflight::HostFacts::host();
    let mut checks = preflight::checks(&host);
    let privileged = preflight::privileged(&host);
    let facts = discover::discover();
    let mut attach_plan = plan::build(&facts);
    let mut folio_map = None;
    let (trials, mechanisms) = if privileged {
        let (trials, mechanisms) = mechanism_trials();
        checks.push(function_probes_check(&trials));
        match load::attach(attach_plan.clone(), &load::LoadOptions::default()) {
            Ok(probes) => {
                attach_plan = probes.plan.clone();
                let map = FolioMap {
                    sampling: probes.sampling(),
                    plan: probes.map_plan.clone(),
                    maps: probes.map_bytes.clone(),
                    sym_vmemmap_base: probes.params.sym_vmemmap_base,
                    page_struct_size: probes.params.page_struct_size,
                };
                checks.push(folio_map_check(&map));
                checks.push(snapshot_reads_check(probes.batch_reads()));
                folio_map = Some(map);
            }
            Err(e) => checks.push(check(
                "bpf_object",
                Status::Fail,
                format!("{e:#}"),
                "check `dmesg` and that BPF is enabled (CONFIG_BPF_SYSCALL)",
            )),
        }
        (trials, mechanisms)
    } else {
        let mechanisms = ["fentry", "kprobe", "tracepoint"]
            .into_iter()
            .map(|m| (m.into(), "not tried: needs root".to_owned()))
            .collect();
        (Vec::new(), mechanisms)
    };
    checks.push(attach_plan_check(&attach_plan, privileged));
    let nodes = system::nodes();
    let tunables = system::tunables();
    let (kernel_hotness, evidence) = params::kernel_hotness();
    checks.push(numa_nodes_check(&nodes));
    checks.push(hotness_check(kernel_hotness, &evidence));
    checks.extend(tunables_checks(&tunables, kernel_hotness));
    Report {
        ok: checks.iter().all(|c| c.status != Status::Fail),
        kernel_release: host.kernel_release,
        checks,
        attach_plan,
        mechanisms,
        trials,
        memory_tiers: host.memory_tiers,
        nodes,
        numa_balancing: host.numa_balancing,
        tunables,
        kernel_hotness,
        folio_map,
    }
}

pub fn print_human(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "numatrace doctor: kernel {}", r.kernel_release)?;
    writeln!(out)?;
    for c in &r.checks {
        let tag = match c.status {
            Status::Ok => "[ok]  ",
            Status::Warn => "[warn]",
            Status::Fail => "[FAIL]",
        };
        writeln!(out, "  {tag} {:<20} {}", c.name, c.detail)?;
        if !c.remedy.is_empty() && c.status != Status::Ok {
            writeln!(out, "         {:<20} remedy: {}", "", c.remedy)?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "attach plan ({}):",
        if r.attach_plan.complete {
            "complete"
        } else {
            "INCOMPLETE"
        }
    )?;
    for h in &r.attach_plan.hooks {
        writeln!(
            out,
            "  {:<19} {:<28} {:<10} {:<14} {:<9}{} {}",
            h.hook.name(),
            h.target.as_deref().unwrap_or("-"),
            h.mechanism.map_or("-", |m| m.name()),
            h.layout.as_deref().unwrap_or("-"),
            format!("{:?}", h.status).to_lowercase(),
            if h.required { "" } else { " (optional)" },
            h.detail
        )?;
    }
    print_design(&r.attach_plan, out)?;
    if !r.trials.is_empty() {
        writeln!(out)?;
        writeln!(out, "mechanism trials:")?;
        for t in &r.trials {
            writeln!(
                out,
                "  {:<10} {:<4} {}",
                t.mechanism,
                if t.ok { "ok" } else { "no" },
                t.detail
            )?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "{}",
        if r.ok {
            "ready."
        } else {
            "NOT ready: fix the [FAIL] lines above."
        }
    )?;
    Ok(())
}

/// Per hook, the function the design names and whether the plan uses it.
fn print_design(plan: &AttachPlan, out: &mut impl Write) -> std::io::Result<()> {
    let rows: Vec<_> = plan
        .hooks
        .iter()
        .filter_map(|h| h.design.as_ref().map(|d| (h, d)))
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(
        out,
        "design functions (the hook the design names, and why not):"
    )?;
    for (h, d) in rows {
        let verdict = if d.used {
            "used".to_owned()
        } else {
            format!(
                "{} instead: {}",
                h.target.as_deref().unwrap_or("nothing"),
                d.why_not
            )
        };
        writeln!(out, "  {:<19} {:<28} {verdict}", h.hook.name(), d.function)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use numa_core::plan::{DesignFunction, Hook, PlannedHook};
    use numa_core::topology::Tunables;

    fn hook(hook: Hook, target: &str, design: Option<(&str, &str)>) -> PlannedHook {
        PlannedHook {
            hook,
            target: Some(target.to_owned()),
            mechanism: Some(Mechanism::Fentry),
            layout: None,
            required: true,
            status: HookStatus::Attached,
            detail: String::new(),
            design: design.map(|(function, why_not)| DesignFunction {
                function: function.to_owned(),
                used: why_not.is_empty(),
                why_not: why_not.to_owned(),
            }),
        }
    }

    #[test]
    fn design_functions_name_the_choice_and_the_reason() {
        let plan = AttachPlan {
            complete: true,
            hooks: vec![
                hook(
                    Hook::HintFault,
                    "numa_migrate_check",
                    Some(("do_numa_page", "do_numa_page inlined/absent")),
                ),
                hook(
                    Hook::ScanRange,
                    "change_pte_range",
                    Some(("change_pte_range", "")),
                ),
                hook(Hook::DecisionExchange, "folio_xchg_last_cpupid", None),
            ],
        };
        let mut out = Vec::new();
        print_design(&plan, &mut out).expect("writes to a Vec");
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[2].contains("do_numa_page")
                && lines[2].ends_with("numa_migrate_check instead: do_numa_page inlined/absent")
        );
        assert!(lines[3].contains("change_pte_range") && lines[3].ends_with("used"));
    }

    #[test]
    fn the_threshold_check_follows_the_kernels_hotness() {
        let t = Tunables {
            hot_threshold_ms: Some(1000),
            fault_count_threshold: Some(6000),
            ..Tunables::default()
        };
        let latency = threshold_check(&t, KernelHotness::Latency);
        assert_eq!(
            (latency.name.as_ref(), latency.detail.as_str()),
            ("hot_threshold_ms", "1000 ms")
        );
        let rfc = threshold_check(&t, KernelHotness::FaultCount);
        assert_eq!(
            (rfc.name.as_ref(), rfc.status, rfc.detail.as_str()),
            ("fault_count_threshold", Status::Ok, "6000 faults")
        );
        let unreadable = Tunables::default();
        assert_eq!(
            threshold_check(&unreadable, KernelHotness::FaultCount).status,
            Status::Warn
        );
    }

    #[test]
    fn the_hotness_check_names_the_patched_kernel() {
        let c = hotness_check(KernelHotness::FaultCount, "evidence");
        assert!(c.detail.contains("fault count over threshold") && c.detail.contains("evidence"));
        assert!(!hotness_check(KernelHotness::Latency, "")
            .detail
            .contains("fault count"));
    }
}
