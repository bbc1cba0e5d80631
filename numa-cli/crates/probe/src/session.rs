//! The one way a command attaches the probes: preflight with doctor's
//! words, the attach plan, load and attach, refuse an incomplete plan; and
//! the trace header that describes the session.
use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use numa_core::{decode::Snapshot, plan::HookStatus, topology::NUMA_VMSTAT, trace};
use numa_ebpf_common::{maps, HIST_SLOTS, OUTCOMES};
use numa_host::{
    clock::monotonic_ns,
    damon::{Kdamond, Spec},
    system,
};

use crate::{
    discover,
    load::{self, LoadOptions, Probes},
    preflight,
};

/// The ranges [`ProbeOptions`] must lie in; the flags that set them state
/// the same ranges.
pub mod limits {
    /// Ring buffer MiB: a BPF ring buffer is a power of two below 4 GiB.
    pub const RING_MB: (u32, u32) = (1, 2048);
    /// Kernel memory for all maps, bytes: 1 MiB to 1 TiB.
    pub const MAP_BUDGET: (u64, u64) = (1 << 20, 1 << 40);
    /// One fault record in N.
    pub const SAMPLE_EVERY: (u64, u64) = (1, 1_000_000);
}

/// What an attaching command asks of the probes.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Only record events of this process (tgid).
    pub pid: Option<u32>,
    /// Only record events of processes in this cgroup (v2 directory).
    pub cgroup: Option<PathBuf>,
    /// Emit one fault record in N.
    pub sample: u64,
    /// Kernel memory all maps may take, bytes (sets per-folio sampling).
    pub map_budget: u64,
    /// Ring buffer size in MiB.
    pub ring_mb: u32,
    /// Turn on the kernel's per-program run statistics.
    pub bpf_stats: bool,
    /// Attach programs that do nothing at the same hooks.
    pub empty_programs: bool,
    /// Attach only these programs' empty twins.
    pub empty_only: Vec<&'static str>,
    /// Start a kdamond of numatrace's own with these intervals and region
    /// counts over every memory node (its regions are found here) and
    /// record its regions (`--truth damon`).
    pub damon: Option<numa_core::damon::Spec>,
}

/// Refuses to go on when a prerequisite fails (what is wrong and the
/// remedy, in doctor's words); warns in one line each about what would
/// leave the numbers empty, such as NUMA balancing being off.
pub fn require_preflight() -> Result<()> {
    let findings = preflight::decide(&preflight::HostFacts::host());
    for w in &findings.warnings {
        log::warn!("{}", preflight::one_line(w));
    }
    if !findings.fatal.is_empty() {
        let failed: Vec<String> = findings.fatal.iter().map(preflight::one_line).collect();
        bail!(
            "cannot attach probes:\n  {}\n(`numatrace doctor` checks everything)",
            failed.join("\n  ")
        );
    }
    Ok(())
}

fn load_options(a: &ProbeOptions) -> Result<LoadOptions> {
    let (filter_cgroup, filter_cgroup_level) = match &a.cgroup {
        Some(p) => cgroup_filter(p)?,
        None => (0, 0),
    };
    let within = |v: u64, (lo, hi): (u64, u64), flag: &str| {
        if !(lo..=hi).contains(&v) {
            bail!("{flag} {v}: give {lo} to {hi}");
        }
        Ok(())
    };
    let widen = |(lo, hi): (u32, u32)| (u64::from(lo), u64::from(hi));
    within(u64::from(a.ring_mb), widen(limits::RING_MB), "--ring-mb")?;
    within(a.map_budget, limits::MAP_BUDGET, "--map-budget")?;
    within(a.sample, limits::SAMPLE_EVERY, "--sample")?;
    if let Some(pid) = a.pid {
        if pid == 0 {
            bail!("--pid 0: give a process id of 1 or more");
        }
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            bail!("--pid {pid}: no such process (it may have exited); check with `ps -p {pid}`");
        }
    }
    Ok(LoadOptions {
        map_budget: a.map_budget,
        ring_bytes: a.ring_mb << 20,
        sample_every: a.sample,
        filter_tgid: a.pid.unwrap_or(0),
        filter_cgroup,
        filter_cgroup_level,
        empty_programs: a.empty_programs,
        empty_only: a.empty_only.clone(),
        damon_pid: None,
    })
}

/// The cgroup v2 directory `dir` as the BPF filter needs it: its id (the
/// directory's inode) and its depth below the hierarchy's root.
fn cgroup_filter(dir: &Path) -> Result<(u64, u32)> {
    let not_cgroup = || {
        format!(
            "--cgroup {}: not a cgroup v2 directory (try /sys/fs/cgroup/...)",
            dir.display()
        )
    };
    let canonical = dir.canonicalize().with_context(not_cgroup)?;
    let id = std::fs::metadata(&canonical)
        .with_context(not_cgroup)?
        .ino();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .context("reading /proc/self/mountinfo to place --cgroup in its hierarchy")?;
    let Some(level) = numa_core::procfs::cgroup_level(&mountinfo, &canonical) else {
        bail!("{}: it is not below a cgroup2 mount", not_cgroup());
    };
    Ok((id, level))
}

/// Preflight, plan, attach; refuses an incomplete plan with the reasons.
pub fn attach(a: &ProbeOptions) -> Result<Probes> {
    require_preflight()?;
    let mut options = load_options(a)?;
    if options.empty_programs {
        log::info!("--empty-programs: the attached programs do nothing, so every count is 0");
    }
    // Started first so that its thread id is in the programs at load; a
    // failure below drops it, which stops it.
    let kdamond = a.damon.as_ref().map(start_kdamond).transpose()?;
    options.damon_pid = kdamond.as_ref().map(Kdamond::pid);
    let mut probes = load::attach(numa_core::plan::build(&discover::discover()), &options)?;
    probes.kdamond = kdamond;
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
    if a.bpf_stats {
        probes.enable_run_stats()?;
    }
    Ok(probes)
}

/// numatrace's kdamond, over every memory node's span: the slow tier's
/// pages before promotion, DRAM's after.
fn start_kdamond(attrs: &Spec) -> Result<Kdamond> {
    let zoneinfo = std::fs::read_to_string("/proc/zoneinfo")
        .context("reading /proc/zoneinfo for the memory nodes' spans")?;
    let spans = numa_core::mapplan::parse_zoneinfo(&zoneinfo);
    let spec = Spec {
        regions: Spec::of_pfn_spans(spans.iter().map(|s| (s.start, s.end))),
        ..attrs.clone()
    };
    let k = Kdamond::start(&spec).context("--truth damon")?;
    log::info!(
        "--truth damon: kdamond {} monitors {} node span(s)",
        k.pid(),
        k.spec().regions.len()
    );
    Ok(k)
}

/// The trace header of a session on this host, as of now.
pub fn header(probes: &Probes) -> trace::Header {
    let unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    trace::Header {
        format_version: trace::FORMAT_VERSION,
        numatrace_version: env!("CARGO_PKG_VERSION").to_owned(),
        abi_version: numa_ebpf_common::ABI_VERSION,
        kernel_release: system::kernel_release(),
        hostname: system::hostname(),
        boot_id: system::boot_id(),
        attach_plan: Some(probes.plan.clone()),
        nodes: system::nodes(),
        memory_tiers: system::memory_tiers(),
        tunables: system::tunables(),
        numa_balancing: system::numa_balancing(),
        params: Some(probes.params.clone()),
        started_unix_ns: unix_ns,
        started_mono_ns: monotonic_ns(),
        attach_started_mono_ns: probes.attach_started_ns,
        sample_every: probes.options.sample_every,
        stamp_entries: u32::try_from(probes.map_plan.slots).unwrap_or(u32::MAX),
        map_plan: Some(probes.map_plan.clone()),
        map_bytes: probes.map_bytes_total(),
        record_sizes: trace::record_sizes(),
        demote_record_size: trace::demote_record_size(),
        damon_record_size: trace::damon_record_size(),
        damon: probes.kdamond.as_ref().map(|k| numa_core::damon::Info {
            spec: k.spec().clone(),
            pid: k.pid(),
        }),
    }
}

/// The probes' counters and histograms, summed over CPUs, with the NUMA
/// vmstat counters read at the same moment.
pub fn snapshot(probes: &Probes) -> Result<Snapshot> {
    let ts_ns = monotonic_ns();
    let counters = probes.counters()?;
    // Nearly 1,000 per-CPU slots a second otherwise, every one 0.
    let empty = probes.histograms_empty(&counters);
    let hist = |name: &str, slots: usize| {
        if empty {
            Ok(vec![0; slots])
        } else {
            probes.summed(name)
        }
    };
    Ok(Snapshot {
        ts_ns,
        hist_latency: hist(maps::HIST_LATENCY, HIST_SLOTS)?,
        hist_delta: hist(maps::HIST_DELTA, HIST_SLOTS)?,
        hist_sum: hist(maps::HIST_SUM, OUTCOMES * 2)?,
        counters,
        migrate_reason_pages: probes.summed(maps::MIGRATE_REASON_PAGES)?,
        vmstat: system::vmstat()
            .into_iter()
            .filter(|(k, _)| NUMA_VMSTAT.contains(&k.as_str()))
            .collect(),
        damon_cpu_ns: probes.kdamond.as_ref().and_then(|k| k.cpu_ns().ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> ProbeOptions {
        ProbeOptions {
            pid: None,
            cgroup: None,
            sample: 1,
            map_budget: load::DEFAULT_MAP_BUDGET,
            ring_mb: 16,
            bpf_stats: false,
            empty_programs: false,
            empty_only: Vec::new(),
            damon: None,
        }
    }

    #[test]
    fn sizes_outside_the_limits_are_refused_with_the_flag() {
        let largest = load_options(&ProbeOptions {
            ring_mb: limits::RING_MB.1,
            ..options()
        })
        .expect("2 GiB ring");
        assert_eq!(largest.ring_bytes, 1 << 31);
        for (bad, flag) in [
            (
                ProbeOptions {
                    ring_mb: 2049,
                    ..options()
                },
                "--ring-mb 2049: give 1 to 2048",
            ),
            (
                ProbeOptions {
                    ring_mb: 0,
                    ..options()
                },
                "--ring-mb 0",
            ),
            (
                ProbeOptions {
                    map_budget: 1023,
                    ..options()
                },
                "--map-budget 1023",
            ),
            (
                ProbeOptions {
                    sample: 0,
                    ..options()
                },
                "--sample 0",
            ),
            (
                ProbeOptions {
                    pid: Some(0),
                    ..options()
                },
                "--pid 0",
            ),
        ] {
            let err = load_options(&bad).expect_err(flag).to_string();
            assert!(err.contains(flag), "{err}");
        }
    }
}
