//! Loads the embedded BPF object and attaches one program per planned hook,
//! falling back from fentry/fexit to kprobe/kretprobe when the kernel
//! refuses tracing programs. Also the trivial per-mechanism trials of
//! `numatrace doctor`.
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use aya::{
    maps::PerCpuArray,
    programs::{FEntry, FExit, KProbe, TracePoint},
    Btf, Ebpf, EbpfLoader,
};
use numa_ebpf_common::{maps, programs as p, Counter, MigrateRet};

use super::plan::{AttachPlan, Hook, HookStatus, Mechanism};

/// The BPF object built from `numa-ebpf` by build.rs.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/numa-ebpf"));

/// The program implementing `hook` with `mechanism`.
fn program_name(hook: Hook, mechanism: Mechanism) -> Option<&'static str> {
    use Hook as H;
    use Mechanism as M;
    Some(match (hook, mechanism) {
        (H::HintFault, M::Fentry) => p::FENTRY_HINT_FAULT,
        (H::HintFault, M::Kprobe) => p::KPROBE_HINT_FAULT,
        (H::Decision, M::Fexit) => p::FEXIT_DECISION,
        (H::Decision, M::Kretprobe) => p::KRETPROBE_DECISION,
        (H::ScanStamp, M::Fentry) => p::FENTRY_SCAN_STAMP,
        (H::ScanStamp, M::Kprobe) => p::KPROBE_SCAN_STAMP,
        (H::ScanRange, M::Fexit) => p::FEXIT_SCAN_RANGE,
        (H::ScanRange, M::Kretprobe) => p::KRETPROBE_SCAN_RANGE,
        (H::Migrate, M::Fexit) => p::FEXIT_MIGRATE,
        (H::Migrate, M::Kretprobe) => p::KRETPROBE_MIGRATE,
        (H::FaultAccount, M::Fentry) => p::FENTRY_FAULT_ACCOUNT,
        (H::FaultAccount, M::Kprobe) => p::KPROBE_FAULT_ACCOUNT,
        (H::ThpFault, M::Fentry) => p::FENTRY_THP_FAULT,
        (H::ThpFault, M::Kprobe) => p::KPROBE_THP_FAULT,
        (H::ThpScan, M::Fentry) => p::FENTRY_THP_SCAN,
        (H::ThpScan, M::Kprobe) => p::KPROBE_THP_SCAN,
        (H::VmaSkip, M::Tracepoint) => p::TP_SKIP_VMA,
        (H::MigrateTracepoint, M::Tracepoint) => p::TP_MIGRATE_PAGES,
        _ => return None,
    })
}

/// Loads and attaches one program; the error carries the kernel's answer.
fn attach_one(
    ebpf: &mut Ebpf,
    btf: Option<&Btf>,
    name: &str,
    mechanism: Mechanism,
    target: &str,
) -> Result<()> {
    let prog = ebpf
        .program_mut(name)
        .ok_or_else(|| anyhow!("program {name} missing from the BPF object"))?;
    let need_btf = || {
        btf.ok_or_else(|| {
            anyhow!(
                "{} needs kernel BTF ({})",
                mechanism.name(),
                super::discover::BTF_VMLINUX
            )
        })
    };
    match mechanism {
        Mechanism::Fentry => {
            let prog: &mut FEntry = prog.try_into()?;
            prog.load(target, need_btf()?)?;
            prog.attach()?;
        }
        Mechanism::Fexit => {
            let prog: &mut FExit = prog.try_into()?;
            prog.load(target, need_btf()?)?;
            prog.attach()?;
        }
        Mechanism::Kprobe | Mechanism::Kretprobe => {
            let prog: &mut KProbe = prog.try_into()?;
            prog.load()?;
            prog.attach(target, 0)?;
        }
        Mechanism::Tracepoint => {
            let (cat, tp) = target
                .split_once(':')
                .ok_or_else(|| anyhow!("tracepoint {target} is not category:name"))?;
            let prog: &mut TracePoint = prog.try_into()?;
            prog.load()?;
            prog.attach(cat, tp)?;
        }
    }
    Ok(())
}

/// Puts the kernel's answer in plain words, keeping the raw error.
pub fn explain(mechanism: Mechanism, e: &anyhow::Error) -> String {
    let raw = format!("{e:#}");
    let plain = if raw.contains("kprobe/type") || raw.contains("kprobe_events") {
        "the kernel has no kprobes (CONFIG_KPROBES off)"
    } else if raw.contains("Operation not permitted")
        && matches!(mechanism, Mechanism::Fentry | Mechanism::Fexit)
    {
        "the kernel refuses tracing programs (fentry/fexit: EPERM)"
    } else if raw.contains("Operation not permitted") {
        "permission denied (EPERM): run as root"
    } else if raw.contains("tracefs not found") {
        "tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)"
    } else {
        return raw;
    };
    format!("{plain} [{raw}]")
}

/// Loaded, attached probes. Dropping this detaches everything.
pub struct Probes {
    ebpf: Ebpf,
    pub plan: AttachPlan,
}

/// Settings that depend on the kernel, from the plan.
fn migrate_convention(plan: &AttachPlan) -> MigrateRet {
    match plan.hook(Hook::Migrate).and_then(|h| h.target.as_deref()) {
        Some("migrate_misplaced_page") => MigrateRet::OneOnSuccess,
        _ => MigrateRet::ZeroOnSuccess,
    }
}

fn load_object(plan: &AttachPlan) -> Result<Ebpf> {
    let convention = migrate_convention(plan) as u32;
    EbpfLoader::new()
        .override_global("MIGRATE_RET_CONVENTION", &convention, true)
        .load(EBPF_OBJECT)
        .context("loading the BPF object (creating maps)")
}

/// Attaches every resolved hook of `plan`. Hooks that cannot be attached
/// are marked `Refused` with the kernel's error; the caller decides whether
/// an incomplete plan is fatal (`plan.complete`).
pub fn attach(mut plan: AttachPlan) -> Result<Probes> {
    let mut ebpf = load_object(&plan)?;
    let btf = Btf::from_sys_fs().ok();
    for h in plan.hooks.iter_mut() {
        let (Some(target), Some(first)) = (h.target.clone(), h.mechanism) else {
            continue;
        };
        let mut errors = Vec::new();
        let mut mechanism = Some(first);
        while let Some(m) = mechanism {
            let Some(name) = program_name(h.hook, m) else {
                break;
            };
            match attach_one(&mut ebpf, btf.as_ref(), name, m, &target) {
                Ok(()) => {
                    h.mechanism = Some(m);
                    h.status = HookStatus::Attached;
                    if !errors.is_empty() {
                        h.detail = format!("{}; degraded to {}", errors.join("; "), m.name());
                    }
                    break;
                }
                Err(e) => errors.push(format!("{} refused: {}", m.name(), explain(m, &e))),
            }
            mechanism = m.probe_fallback();
        }
        if h.status != HookStatus::Attached {
            h.status = HookStatus::Refused;
            h.detail = errors.join("; ");
        }
    }
    plan.refresh_complete();
    Ok(Probes { ebpf, plan })
}

impl Probes {
    /// Every counter summed over CPUs, indexed by [`Counter`].
    pub fn counters(&self) -> Result<Vec<u64>> {
        read_counters(&self.ebpf)
    }
}

fn read_counters(ebpf: &Ebpf) -> Result<Vec<u64>> {
    let map = ebpf
        .map(maps::COUNTERS)
        .ok_or_else(|| anyhow!("map {} missing from the BPF object", maps::COUNTERS))?;
    let array = PerCpuArray::<_, u64>::try_from(map)?;
    (0..numa_ebpf_common::COUNTER_SLOTS)
        .map(|i| Ok(array.get(&i, 0)?.iter().sum()))
        .collect()
}

pub fn counter(values: &[u64], c: Counter) -> u64 {
    values.get(c as usize).copied().unwrap_or(0)
}

/// Result of one mechanism trial.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Trial {
    pub mechanism: &'static str,
    pub target: String,
    pub ok: bool,
    /// Times the trial program ran while we triggered it.
    pub hits: u64,
    pub detail: String,
}

/// Loads and attaches a trivial program with `mechanism` to `target`,
/// triggers it by reading a procfs file, and counts its hits.
pub fn trial(mechanism: Mechanism, target: &str) -> Trial {
    let name = match mechanism {
        Mechanism::Fentry | Mechanism::Fexit => p::TRIAL_FENTRY,
        Mechanism::Kprobe | Mechanism::Kretprobe => p::TRIAL_KPROBE,
        Mechanism::Tracepoint => p::TRIAL_TRACEPOINT,
    };
    let run = || -> Result<u64> {
        let mut ebpf = Ebpf::load(EBPF_OBJECT).context("loading the BPF object")?;
        let btf = Btf::from_sys_fs().ok();
        attach_one(&mut ebpf, btf.as_ref(), name, mechanism, target)?;
        for _ in 0..8 {
            let _ = std::fs::read_to_string("/proc/self/stat");
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(counter(&read_counters(&ebpf)?, Counter::TrialHits))
    };
    match run() {
        Ok(hits) => Trial {
            mechanism: mechanism.name(),
            target: target.to_owned(),
            ok: hits > 0,
            hits,
            detail: if hits > 0 {
                format!("attached to {target}, fired {hits} times")
            } else {
                format!("attached to {target} but never fired")
            },
        },
        Err(e) => Trial {
            mechanism: mechanism.name(),
            target: target.to_owned(),
            ok: false,
            hits: 0,
            detail: explain(mechanism, &e),
        },
    }
}
