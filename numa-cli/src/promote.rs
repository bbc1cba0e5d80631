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
    decode::{Event, Snapshot},
    model::policy::{self, KernelDefaults, Policy},
    sink::Sink,
    topology::Node,
};
use numa_host::{promoter_state, system};
use numa_promote::{
    mover::{self, Mover, MoverConfig, Shared, SysEnv},
    scope::{self, Scope},
    write_human, PromoteReport, PromoteSink, RunFacts, Targets,
};
use numa_source::{Source, StopReason, StopWhen};

use crate::cli::{ProbeArgs, PromoteArgs};

fn config(a: &PromoteArgs, targets: &Targets, nodes: &[Node]) -> MoverConfig {
    MoverConfig {
        rate_bytes_per_s: a.rate_limit,
        min_free: a.min_free,
        batch_ms: a.batch_ms,
        max_retries: a.max_retries,
        retry_backoff_ms: 200,
        max_queued_pages: a.queue,
        dry_run: a.dry_run,
        tier_of: targets.tier_of.clone(),
        cpus_of: nodes.iter().map(|n| (n.id, n.cpus.len() as u64)).collect(),
    }
}

fn require_cap_sys_nice() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !scope::has_cap_sys_nice(&status) {
        bail!(
            "moving other processes' pages needs CAP_SYS_NICE: run as root \
             (`sudo numatrace promote ...`); --dry-run needs no CAP_SYS_NICE, but like every \
             attaching command it loads BPF, which needs root too. CAP_SYS_NICE lets a \
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
        map_budget: a.map_budget,
        ring_mb: a.ring_mb,
        duration: a.duration,
        bpf_stats: false,
        empty_programs: false,
        empty_program: Vec::new(),
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
            log::warn!("top and export will not show this promoter: {e}");
            None
        }
    };
    if let Some(p) = &state {
        log::info!(
            "publishing the promoter's state to {}",
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
    crate::write_output(a.output.as_deref(), &buf)
}

/// Says the promoter runs once its window has begun (the first snapshot):
/// hint faults before it are not counted, so a workload started on this
/// line has every fault seen.
struct Started<W: Write> {
    notice: Option<String>,
    out: W,
}

impl<W: Write> Sink for Started<W> {
    fn event(&mut self, _ev: &Event) -> Result<()> {
        Ok(())
    }

    fn snapshot(&mut self, _s: &Snapshot) -> Result<()> {
        if let Some(notice) = self.notice.take() {
            writeln!(self.out, "{notice}")?;
        }
        Ok(())
    }
}

pub(crate) fn run(a: &PromoteArgs) -> Result<ExitCode> {
    let scope = scope_of(a)?;
    if !a.dry_run {
        require_cap_sys_nice()?;
    }
    let (nodes, targets) = promotion_targets()?;
    let cfg = config(a, &targets, &nodes);
    // The model's options are checked before anything is loaded; it is
    // built again on the running kernel's tunables once attached.
    policy::build(
        &a.model,
        &a.options.defaults(None),
        &KernelDefaults::default(),
    )?;
    let probe_args = probe_args(a);
    let probes = numa_probe::session::attach(&probe_args.options())?;
    let policy = policy_of(a, &probes)?;
    let (model, model_params) = (policy.name(), policy.params());

    let shared = Arc::new(Shared::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = sync_channel(a.queue.max(1));
    let mover = Mover::new(cfg.clone(), scope.clone(), SysEnv, shared.clone());
    let state = state_publisher(a, &scope, &model);
    let _state_cleanup = state.as_ref().map(|s| s.writer.panic_guard());
    let handle =
        mover::spawn(mover, rx, stop.clone(), state).context("starting the mover thread")?;
    let mut sink = PromoteSink::new(policy, scope.clone(), targets, tx, shared.clone());
    let mut started = Started {
        notice: Some(format!(
            "numatrace: promote{} {} with {model}; Ctrl-C stops",
            if a.dry_run { " (dry run)" } else { "" },
            scope.describe()
        )),
        out: std::io::stderr(),
    };
    let mut source = probe_args.live(probes, Duration::from_secs(1));
    if let Source::Live(_, opts) = &mut source {
        let shared = shared.clone();
        opts.stop_when = Some(StopWhen(Arc::new(move || {
            shared
                .scope_exited
                .load(Ordering::Acquire)
                .then(|| "every --pid process exited".to_owned())
        })));
    }
    let result = source
        .run_blocking(probe_args.until(), &mut [&mut started, &mut sink])
        .map(|f| f.reason);
    // Stop the mover after its call in flight, whatever ended the pipeline.
    stop.store(true, Ordering::Release);
    sink.close();
    let mover_report = handle
        .join()
        .map_err(|_| anyhow::anyhow!("the mover thread panicked"))?;
    let reason = result?;
    if let StopReason::Condition(why) = &reason {
        log::info!("{why}: nothing left to promote");
    }

    let report = sink.report(
        RunFacts {
            stopped: reason.describe(),
            dry_run: a.dry_run,
            scope: scope.describe(),
            model,
            model_params,
            rate_limit_bytes_per_s: cfg.rate_bytes_per_s,
            min_free: a.min_free.to_string(),
            batch_ms: a.batch_ms,
            max_retries: a.max_retries,
        },
        mover_report,
    );
    write_report(a, &report)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::cli::{ranges::try_parse_from, Cli, Command};

    /// The promote command line with `flags` (out-of-range values are
    /// refused by the cases in `cli::tests`).
    fn parse(flags: &[&str]) -> Result<PromoteArgs, String> {
        let argv = ["numatrace", "promote", "--all"].iter().chain(flags);
        match try_parse_from(argv) {
            Ok(Cli {
                command: Command::Promote(a),
                ..
            }) => Ok(a),
            Ok(_) => Err("not promote".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn numeric_flags_in_range_parse() {
        let a = parse(&[
            "--rate-limit",
            "1MiB/s",
            "--min-free",
            "200MiB",
            "--batch-ms",
            "0.5",
            "--queue",
            "1000000",
            "--duration",
            "2.5",
            "--map-budget",
            "64M",
            "--ring-mb",
            "1024",
        ])
        .expect("valid flags");
        assert_eq!(a.rate_limit, 1 << 20);
        assert_eq!(a.min_free.to_string(), "200 MiB");
        assert_eq!(a.duration, Some(2.5));
        assert_eq!(
            (a.queue, a.map_budget, a.ring_mb),
            (1_000_000, 64 << 20, 1024)
        );
        assert_eq!(a.batch_ms, 0.5);
        let a = parse(&["--rate-limit", "unlimited", "--min-free", "0%"]).expect("valid");
        assert_eq!(a.rate_limit, 0);
    }

    #[test]
    fn dry_run_help_says_what_it_needs() {
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("promote")
            .expect("promote")
            .render_long_help()
            .to_string();
        let dry = help
            .split("--dry-run")
            .nth(1)
            .expect("--dry-run in the help");
        let dry = &dry[..dry.find("\n  -").unwrap_or(dry.len())];
        assert!(
            dry.contains("CAP_BPF") && dry.contains("CAP_SYS_NICE"),
            "{dry}"
        );
    }

    #[test]
    fn the_report_file_is_replaced_not_written_through() {
        let dir = std::env::temp_dir().join(format!("numatrace-promote-o-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("temp dir");
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep").expect("victim");
        let out = dir.join("report.json");
        std::os::unix::fs::symlink(&victim, &out).expect("symlink");
        let out_arg = out.to_string_lossy().into_owned();
        let a = parse(&["--json", "-o", &out_arg]).expect("flags");
        let policy = policy::build(
            "fault-count",
            &a.options.defaults(None),
            &KernelDefaults::default(),
        )
        .expect("model");
        let (tx, _rx) = sync_channel(1);
        let shared = Arc::new(Shared::default());
        let sink = PromoteSink::new(policy, Scope::All, Targets::default(), tx, shared);
        let facts = RunFacts {
            stopped: "duration elapsed".into(),
            dry_run: false,
            scope: "--all".into(),
            model: "fault-count".into(),
            model_params: Default::default(),
            rate_limit_bytes_per_s: a.rate_limit,
            min_free: a.min_free.to_string(),
            batch_ms: a.batch_ms,
            max_retries: a.max_retries,
        };
        write_report(&a, &sink.report(facts, Default::default())).expect("written");
        let kept = std::fs::read_to_string(&victim).expect("victim");
        let written = std::fs::read_to_string(&out).expect("report");
        let is_link = std::fs::symlink_metadata(&out)
            .expect("report")
            .file_type()
            .is_symlink();
        std::fs::remove_dir_all(&dir).expect("cleanup");
        assert_eq!(
            kept, "keep",
            "the file behind a planted symlink is untouched"
        );
        assert!(written.contains("\"moved_pages\": 0"), "{written}");
        assert!(!is_link);
    }

    #[test]
    fn the_start_notice_waits_for_the_first_snapshot() {
        let mut started = Started {
            notice: Some("numatrace: promote ...; Ctrl-C stops".to_owned()),
            out: Vec::new(),
        };
        let fault = Event::Fault(Default::default());
        started.event(&fault).expect("event");
        assert!(started.out.is_empty(), "printed before the window began");
        started.snapshot(&Snapshot::default()).expect("snapshot");
        started.snapshot(&Snapshot::default()).expect("snapshot");
        let text = String::from_utf8(started.out).expect("utf-8");
        assert_eq!(text, "numatrace: promote ...; Ctrl-C stops\n");
    }
}
