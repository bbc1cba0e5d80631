//! `numatrace promote`: the flags turned into a scope, a policy and the
//! mover's configuration; the live pipeline into a [`PromoteSink`] until
//! `--duration` or a stop signal; then the report.
use std::{
    io::Write,
    process::ExitCode,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc::sync_channel,
        Arc,
    },
    time::Duration,
};

use anyhow::{bail, Context, Result};
use numa_core::{
    model::policy::{self, KernelDefaults, Policy},
    topology::Node,
};
use numa_host::{promoter_state, system};
use numa_promote::{
    bucket, floor,
    mover::{self, Mover, MoverConfig, Shared, SysEnv},
    scope::{self, Scope},
    write_human, PromoteReport, PromoteSink, RunFacts, Targets,
};

use crate::cli::{ProbeArgs, PromoteArgs};

fn config(a: &PromoteArgs, targets: &Targets, nodes: &[Node]) -> Result<MoverConfig> {
    let rate = bucket::parse_rate(&a.rate_limit).with_context(|| {
        format!(
            "--rate-limit {:?}: use bytes per second like 256MiB/s, 1GB/s, or 0 for unlimited",
            a.rate_limit
        )
    })?;
    let min_free = floor::MinFree::parse(&a.min_free).with_context(|| {
        format!(
            "--min-free {:?}: use a share of the node (5%) or an amount (200MiB)",
            a.min_free
        )
    })?;
    if !(a.batch_ms > 0.0 && a.batch_ms.is_finite()) {
        bail!("--batch-ms must be a positive number of milliseconds");
    }
    Ok(MoverConfig {
        rate_bytes_per_s: rate,
        min_free,
        batch_ms: a.batch_ms,
        max_retries: a.max_retries,
        retry_backoff_ms: 200,
        dry_run: a.dry_run,
        tier_of: targets.tier_of.clone(),
        cpus_of: nodes.iter().map(|n| (n.id, n.cpus.len() as u64)).collect(),
    })
}

fn require_cap_sys_nice() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !scope::has_cap_sys_nice(&status) {
        bail!(
            "moving other processes' pages needs CAP_SYS_NICE: run as root \
             (`sudo numatrace promote ...`); --dry-run needs none. CAP_SYS_NICE lets a \
             process move any process's memory and the probes' CAP_BPF + CAP_PERFMON let it \
             read all kernel memory: never set them as file capabilities on a binary other \
             users can run"
        );
    }
    Ok(())
}

fn scope_of(a: &PromoteArgs) -> Result<Scope> {
    Ok(if !a.pids.is_empty() {
        Scope::pids(&a.pids)?
    } else if let Some(dir) = &a.cgroup {
        Scope::cgroup(dir)?
    } else {
        Scope::All
    })
}

/// The nodes and where a page of each may be promoted to; an error when
/// the system has no tiers to promote between.
fn promotion_targets() -> Result<(Vec<Node>, Targets)> {
    let nodes = system::nodes();
    let tiers = system::memory_tiers();
    let targets = Targets::new(
        &nodes,
        &tiers,
        numa_core::params::toptier_mask(&tiers, &nodes),
    );
    if targets.is_empty() || tiers.len() < 2 {
        bail!(
            "no memory tiers to promote between (found {} tier(s)); `numatrace doctor` shows the topology",
            tiers.len()
        );
    }
    Ok((nodes, targets))
}

fn probe_args(a: &PromoteArgs) -> ProbeArgs {
    // One pid or a cgroup: let BPF filter; several pids: filter here.
    ProbeArgs {
        pid: (a.pids.len() == 1).then(|| a.pids[0]),
        cgroup: a.cgroup.clone(),
        sample: 1,
        max_folios: a.max_folios,
        ring_mb: a.ring_mb,
        duration: a.duration,
        bpf_stats: false,
        empty_programs: false,
        command: Vec::new(),
    }
}

/// The model the flags ask for, with the running kernel's tunables as its
/// defaults.
fn policy_of(a: &PromoteArgs, probes: &numa_probe::load::Probes) -> Result<Box<dyn Policy>> {
    let header = numa_probe::session::header(probes);
    let k = KernelDefaults::from_host(&header.tunables, header.params.as_ref());
    policy::build(&a.model, &a.options.defaults(None), &k)
}

/// `top` and `export` show the promoter through its state file; without
/// one the run goes on unseen by them.
fn state_publisher(a: &PromoteArgs, scope: &Scope, model: &str) -> Option<mover::StatePublisher> {
    let state = match promoter_state::Writer::open() {
        Ok(writer) => {
            let pid = std::process::id();
            Some(mover::StatePublisher::new(
                writer,
                promoter_state::PromoterState {
                    pid,
                    pid_start_ticks: promoter_state::pid_start_ticks(pid),
                    started_unix_s: promoter_state::unix_now(),
                    dry_run: a.dry_run,
                    scope: scope.describe(),
                    model: model.to_owned(),
                    ..promoter_state::PromoterState::default()
                },
            ))
        }
        Err(e) => {
            eprintln!("numatrace: warning: top and export will not show this promoter: {e}");
            None
        }
    };
    if let Some(p) = &state {
        eprintln!(
            "numatrace: publishing the promoter's state to {}",
            p.writer.path.display()
        );
    }
    state
}

fn write_report(a: &PromoteArgs, report: &PromoteReport) -> Result<()> {
    let mut buf = Vec::new();
    if a.json {
        serde_json::to_writer_pretty(&mut buf, report)?;
        writeln!(buf)?;
    } else {
        write_human(report, &mut buf)?;
    }
    match &a.output {
        Some(p) => std::fs::write(p, &buf).with_context(|| format!("writing {}", p.display()))?,
        None => std::io::stdout().lock().write_all(&buf)?,
    }
    Ok(())
}

pub fn run(a: &PromoteArgs) -> Result<ExitCode> {
    let scope = scope_of(a)?;
    if !a.dry_run {
        require_cap_sys_nice()?;
    }
    let (nodes, targets) = promotion_targets()?;
    let cfg = config(a, &targets, &nodes)?;
    let probe_args = probe_args(a);
    let probes = numa_probe::session::attach(&probe_args.options())?;
    let policy = policy_of(a, &probes)?;
    let (model, model_params) = (policy.name(), policy.params());

    let shared = Arc::new(Shared::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = sync_channel(a.queue.max(1));
    let mover = Mover::new(cfg.clone(), scope.clone(), SysEnv, shared.clone());
    let state = state_publisher(a, &scope, &model);
    let handle =
        mover::spawn(mover, rx, stop.clone(), state).context("starting the mover thread")?;
    let mut sink = PromoteSink::new(policy, scope.clone(), targets, tx, shared.clone());
    eprintln!(
        "numatrace: promote{} {} with {model}; Ctrl-C stops",
        if a.dry_run { " (dry run)" } else { "" },
        scope.describe()
    );
    let result = probe_args
        .live(probes, Duration::from_secs(1))
        .run_blocking(probe_args.until(), &mut [&mut sink])
        .map(|f| f.reason);
    // Stop the mover after its call in flight, whatever ended the pipeline.
    stop.store(true, Ordering::Release);
    sink.close();
    let mover_report = handle
        .join()
        .map_err(|_| anyhow::anyhow!("the mover thread panicked"))?;
    let reason = result?;

    let report = sink.report(
        RunFacts {
            stopped: reason.describe(),
            dry_run: a.dry_run,
            scope: scope.describe(),
            model,
            model_params,
            rate_limit_bytes_per_s: cfg.rate_bytes_per_s,
            min_free: a.min_free.clone(),
            batch_ms: a.batch_ms,
            max_retries: a.max_retries,
        },
        mover_report,
    );
    write_report(a, &report)?;
    Ok(ExitCode::SUCCESS)
}
