//! The prerequisites every attaching command checks before it loads
//! anything, and that `doctor` lists first: what stops the command (with
//! what is wrong and how to fix it) and what only leaves its numbers empty
//! (one warning line each). The facts are read from files under a root
//! directory, so the decision is tested on fake /proc and /sys trees.
use std::path::Path;

use numa_core::topology::MemoryTier;
use numa_host::system;

use crate::{
    check::{check, Check, Status},
    discover,
};

/// What the preflight reads of a host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostFacts {
    /// Effective uid (None: /proc/self/status unreadable).
    pub euid: Option<u32>,
    /// Effective capabilities (CapEff).
    pub cap_eff: u64,
    pub kernel_release: String,
    /// /sys/kernel/btf/vmlinux exists.
    pub has_btf: bool,
    /// Kernel lockdown mode (None: unknown, no securityfs).
    pub lockdown: Option<String>,
    /// Where tracefs is mounted.
    pub tracefs: Option<&'static str>,
    pub numa_balancing: Option<u32>,
    pub memory_tiers: Vec<MemoryTier>,
}

impl HostFacts {
    /// The facts of the system whose /proc and /sys are under `root`.
    pub fn read(root: &Path) -> HostFacts {
        let status = std::fs::read_to_string(root.join("proc/self/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::split_whitespace)
        };
        HostFacts {
            // Uid: real, effective, saved, filesystem.
            euid: field("Uid:").and_then(|mut f| f.nth(1)?.parse().ok()),
            cap_eff: field("CapEff:")
                .and_then(|mut f| u64::from_str_radix(f.next()?, 16).ok())
                .unwrap_or(0),
            kernel_release: system::kernel_release_at(root),
            has_btf: root
                .join(discover::BTF_VMLINUX.trim_start_matches('/'))
                .exists(),
            lockdown: system::lockdown_at(root),
            tracefs: discover::tracefs_at(root),
            numa_balancing: system::numa_balancing_at(root),
            memory_tiers: system::memory_tiers_at(root),
        }
    }

    /// The running system's facts.
    pub fn host() -> HostFacts {
        HostFacts::read(Path::new(system::ROOT))
    }
}

/// Checks whose failure stops an attaching command: without them nothing
/// loads, what loads reads the kernel wrongly, or (balancing off) the
/// kernel takes no hint faults, so every figure would be a silent 0. The
/// others (tiering off in balancing mode 1, memory tiers, tracefs) leave
/// the numbers partial, which the command says in one line and goes on.
const FATAL: [&str; 5] = ["privileges", "kernel", "lockdown", "btf", "numa_balancing"];

/// Every prerequisite as a check, in doctor's words (doctor fails on each
/// `Fail`; an attaching command only on those in [`FATAL`]).
pub fn checks(f: &HostFacts) -> Vec<Check> {
    vec![
        privileges_check(f),
        kernel_check(&f.kernel_release),
        lockdown_check(f.lockdown.as_deref()),
        btf_check(f.has_btf),
        match f.tracefs {
            Some(p) => check("tracefs", Status::Ok, p, ""),
            None => check(
                "tracefs",
                Status::Warn,
                "tracefs not mounted, or not readable by this user: cannot tell traceable \
                 functions or find tracepoints",
                "as root: mount -t tracefs nodev /sys/kernel/tracing",
            ),
        },
        numa_balancing_check(f.numa_balancing),
        memory_tiers_check(&f.memory_tiers),
    ]
}

/// What root or the capabilities allow, for every message that asks for
/// them: CAP_BPF with CAP_PERFMON lets a process read any kernel memory, so
/// they are no capabilities to leave on a binary everyone may run.
pub const PRIVILEGES_REMEDY: &str = "run as root (`sudo numatrace ...`); without root the \
    process needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) in its effective set, which \
    let it read all kernel memory: grant them to one administrator's session (e.g. \
    `sudo capsh --caps=... --`), not as file capabilities on a binary other users can run";

/// CAP_SYS_ADMIN (21), or CAP_PERFMON (38) and CAP_BPF (39).
pub fn privileged(f: &HostFacts) -> bool {
    let has = |bit: u32| f.cap_eff & (1u64 << bit) != 0;
    has(21) || (has(38) && has(39))
}

fn privileges_check(f: &HostFacts) -> Check {
    let who = format!(
        "euid {}, CapEff {:#x}",
        f.euid.map_or("?".to_owned(), |u| u.to_string()),
        f.cap_eff
    );
    if privileged(f) {
        check("privileges", Status::Ok, who, "")
    } else {
        check(
            "privileges",
            Status::Fail,
            format!("{who}: loading BPF programs needs CAP_BPF+CAP_PERFMON or CAP_SYS_ADMIN"),
            PRIVILEGES_REMEDY,
        )
    }
}

fn lockdown_check(mode: Option<&str>) -> Check {
    match mode {
        Some("confidentiality") => check(
            "lockdown",
            Status::Fail,
            "kernel lockdown is in confidentiality mode: it refuses BPF programs that read \
             kernel memory (bpf_probe_read_kernel), kprobes and tracefs",
            "lockdown cannot be lowered while the kernel runs: boot with `lockdown=integrity` \
             (or `lockdown=none`) on the kernel command line",
        ),
        Some(m) => check("lockdown", Status::Ok, m, ""),
        None => check(
            "lockdown",
            Status::Ok,
            "unknown (no /sys/kernel/security/lockdown)",
            "",
        ),
    }
}

fn btf_check(has_btf: bool) -> Check {
    if has_btf {
        check("btf", Status::Ok, discover::BTF_VMLINUX, "")
    } else {
        check(
            "btf",
            Status::Fail,
            format!(
                "{} missing: the kernel's layouts cannot be read (the offset of \
                 pglist_data.nbp_threshold, the per-node hot threshold every decision's reason \
                 is told by; the hooked functions' arguments for fentry/fexit, which \
                 --empty-programs needs too)",
                discover::BTF_VMLINUX
            ),
            "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y (Debian, Ubuntu, Fedora and RHEL \
             kernels are)",
        )
    }
}

fn numa_balancing_check(mode: Option<u32>) -> Check {
    const REMEDY: &str = "sysctl -w kernel.numa_balancing=2";
    match mode {
        Some(m @ (2 | 3)) => check(
            "numa_balancing",
            Status::Ok,
            format!("mode {m} (tiering)"),
            "",
        ),
        Some(1) => check(
            "numa_balancing",
            Status::Warn,
            "mode 1 (normal balancing, tiering off): the kernel does not promote slow-memory \
             pages by hotness, so nothing will be promoted",
            REMEDY,
        ),
        Some(m) => check(
            "numa_balancing",
            Status::Fail,
            format!(
                "mode {m} (off): the kernel takes no hint faults, so every count stays 0 and \
                 nothing will be promoted"
            ),
            REMEDY,
        ),
        None => check(
            "numa_balancing",
            Status::Fail,
            "/proc/sys/kernel/numa_balancing missing: a kernel without CONFIG_NUMA_BALANCING \
             takes no hint faults, so nothing will be promoted",
            "use a kernel built with CONFIG_NUMA_BALANCING=y",
        ),
    }
}

fn memory_tiers_check(tiers: &[MemoryTier]) -> Check {
    let tier_list = tiers
        .iter()
        .map(|t| format!("{}={:?}", t.tier, t.nodes))
        .collect::<Vec<_>>()
        .join(" ");
    if tiers.len() >= 2 {
        check("memory_tiers", Status::Ok, tier_list, "")
    } else {
        check(
            "memory_tiers",
            Status::Fail,
            format!(
                "{} memory tier(s) [{tier_list}]: without a lower tier nothing will be promoted",
                tiers.len()
            ),
            "slow memory must be onlined as its own tier (HMAT on 6.12+, dax kmem on 6.1: see \
             `cargo xtask vm`)",
        )
    }
}

fn kernel_check(release: &str) -> Check {
    match numa_core::topology::parse_release(release) {
        Some((maj, min)) if (maj, min) >= (6, 1) => check("kernel", Status::Ok, release, ""),
        Some((maj, min)) if (maj, min) >= (5, 18) => check(
            "kernel",
            Status::Warn,
            format!("{release}: tiering mode exists but numatrace is tested on 6.1+"),
            "use a 6.1 or newer kernel for supported results",
        ),
        _ => check(
            "kernel",
            Status::Fail,
            format!("{release}: memory tiering promotion (numa_balancing=2) needs Linux 5.18+"),
            "boot a 6.1 or newer kernel",
        ),
    }
}

/// What the preflight found: problems that stop an attaching command,
/// and problems it only warns about.
#[derive(Debug, Default)]
pub struct Findings {
    pub fatal: Vec<Check>,
    pub warnings: Vec<Check>,
}

/// Sorts the checks for an attaching command.
pub fn decide(f: &HostFacts) -> Findings {
    let mut v = Findings::default();
    for c in checks(f) {
        match c.status {
            Status::Ok => {}
            Status::Fail if FATAL.contains(&c.name.as_ref()) => v.fatal.push(c),
            Status::Fail | Status::Warn => v.warnings.push(c),
        }
    }
    v
}

/// A check as one line: what is wrong, and the remedy.
pub fn one_line(c: &Check) -> String {
    if c.remedy.is_empty() {
        format!("{}: {}", c.name, c.detail)
    } else {
        format!("{}: {} (remedy: {})", c.name, c.detail, c.remedy)
    }
}

#[cfg(test)]
mod tests;
