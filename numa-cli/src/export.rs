//! `numatrace export`: the counters and in-kernel histograms for
//! Prometheus, from the live probes or a replayed trace (see the
//! numa-export crate for the exporter itself).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use numa_core::{
    model::{policy::KernelDefaults, shadow::Shadow},
    trace,
};
use numa_export::{
    attach_mode, index_html,
    metrics::{Info, MetricsState},
    prometheus_text,
    publish::{NodeVmstat, Options, Publisher},
    textfile, Exporter,
};
use numa_probe::load::Probes;
use numa_source::{signals::wait_for_stop, Replay, Source, StopReason};
use tokio::sync::watch;

use crate::cli::{ExportArgs, ModelSel};

pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:9464";

fn parse_listen(s: &str) -> Result<SocketAddr> {
    s.parse().map_err(|_| {
        anyhow::anyhow!(
            "--listen {s:?} is not ADDRESS:PORT (e.g. {DEFAULT_LISTEN}, [::1]:9464, or \
             0.0.0.0:9464 to serve the network)"
        )
    })
}

fn bind(addr: SocketAddr) -> Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "port {} is already in use (another exporter?): pick a free one with --listen {}:PORT",
                addr.port(),
                addr.ip()
            ),
            std::io::ErrorKind::PermissionDenied => format!(
                "ports below 1024 need root or CAP_NET_BIND_SERVICE: use --listen {}:9464",
                addr.ip()
            ),
            std::io::ErrorKind::AddrNotAvailable => format!(
                "{} is not an address of this host: use --listen {DEFAULT_LISTEN} or 0.0.0.0:{}",
                addr.ip(),
                addr.port()
            ),
            _ => format!("{e}: choose another address with --listen ADDRESS:PORT"),
        };
        anyhow::anyhow!("cannot listen on {addr}: {why}")
    })?;
    l.set_nonblocking(true)
        .context("setting the listening socket non-blocking")?;
    Ok(l)
}

/// The shadow engine for `--model` (default: the three policies `shadow`
/// runs; `none`: no model metrics) and the `model` label of each policy.
fn shadow(models: &[String], k: &KernelDefaults) -> Result<Option<(Shadow, Vec<String>)>> {
    let model_args = ModelSel {
        models: models.to_vec(),
        ..ModelSel::default()
    };
    let policies = model_args.policies(k)?;
    if policies.is_empty() {
        return Ok(None);
    }
    let labels: Vec<String> = if models.is_empty() {
        policies.iter().map(|p| p.name()).collect()
    } else {
        models.to_vec()
    };
    for (i, l) in labels.iter().enumerate() {
        if labels[..i].contains(l) {
            bail!("--model {l} is given twice: each model needs its own label");
        }
    }
    Ok(Some((Shadow::new(policies, 0), labels)))
}

/// Where to serve HTTP: unless only a textfile was asked for.
fn listen_address(args: &ExportArgs) -> Result<Option<SocketAddr>> {
    match (&args.listen, &args.textfile) {
        (Some(l), _) => Ok(Some(parse_listen(l)?)),
        (None, None) => Ok(Some(parse_listen(DEFAULT_LISTEN)?)),
        (None, Some(_)) => Ok(None),
    }
}

/// The textfile and how often to rewrite it; warns when the collector
/// would not read it.
fn textfile_target(args: &ExportArgs) -> Option<(PathBuf, Duration)> {
    let (p, every) = args
        .textfile
        .clone()
        .map(|p| (p, Duration::from_secs_f64(args.interval)))?;
    if p.extension().is_none_or(|e| e != "prom") {
        log::warn!(
            "node_exporter's textfile collector only reads *.prom files; {} will be ignored by it",
            p.display()
        );
    }
    Some((p, every))
}

/// The publisher's options for a run whose kernel `header` describes
/// (sampling and map sizes as recorded; live runs override them).
fn options(
    args: &ExportArgs,
    header: &trace::Header,
    attach_mode: String,
    node_vmstat: Option<NodeVmstat>,
) -> Result<Options> {
    Ok(Options {
        info: Info {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            kernel: header.kernel_release.clone(),
            attach_mode,
        },
        shadow: shadow(
            &args.models,
            &KernelDefaults::from_host(&header.tunables, header.params.as_ref()),
        )?,
        per_process: args.per_process,
        per_cgroup: (args.per_cgroup > 0).then(|| {
            let lookup: numa_core::model::cgroups::PathLookup = Box::new(numa_host::cgroup::paths);
            (args.per_cgroup, lookup)
        }),
        sample_every: header.sample_every,
        stamp_capacity: u64::from(header.stamp_entries),
        sampling: header
            .map_plan
            .as_ref()
            .map(|p| numa_core::sampling::Sampling::new(p, header.map_bytes, 0)),
        toptier_mask: header.params.as_ref().map_or(1, |p| p.toptier_mask),
        node_vmstat,
    })
}

/// What the exporter serves from: the publisher, the channel its states
/// come out of, the index page, and the probes of a live run.
struct Pipeline {
    publisher: Publisher,
    rx: watch::Receiver<Arc<MetricsState>>,
    page: String,
    live: Option<Probes>,
}

/// A replayed recording: the publisher describes the recorded kernel.
fn replay_pipeline(args: &ExportArgs, path: &Path) -> Result<Pipeline> {
    let header = trace::Reader::open(path)?.header;
    let mode = header.attach_plan.as_ref().map_or("none", attach_mode);
    let (publisher, rx) = Publisher::new(options(args, &header, format!("replay:{mode}"), None)?);
    let page = index_html(
        &format!("replay of {} at speed {}", path.display(), args.speed),
        &header.kernel_release,
        header.attach_plan.as_ref(),
    );
    Ok(Pipeline {
        publisher,
        rx,
        page,
        live: None,
    })
}

/// Live probes, attached now.
fn live_pipeline(args: &ExportArgs) -> Result<Pipeline> {
    let probes = numa_probe::session::attach(&args.probe.options())?;
    let header = numa_probe::session::header(&probes);
    let (publisher, rx) = Publisher::new(Options {
        sample_every: probes.options.sample_every,
        stamp_capacity: probes.map_plan.slots,
        ..options(
            args,
            &header,
            attach_mode(&probes.plan).to_owned(),
            Some(numa_host::system::node_vmstat),
        )?
    });
    let page = index_html("live probes", &header.kernel_release, Some(&probes.plan));
    Ok(Pipeline {
        publisher,
        rx,
        page,
        live: Some(probes),
    })
}

/// Says where the metrics go.
fn announce(listen: Option<SocketAddr>, args: &ExportArgs) {
    if let Some(a) = listen {
        if !a.ip().is_loopback() {
            log::info!("note: serving {a} beyond this host, as asked by --listen");
        }
        log::info!("serving http://{a}/metrics");
    }
    if let Some(p) = &args.textfile {
        log::info!("writing {} every {} s", p.display(), args.interval);
    }
}

/// Replays `path` into the publisher; then, when serving HTTP, keeps the
/// final state up until stopped.
async fn replay(
    args: &ExportArgs,
    path: &Path,
    publisher: &mut Publisher,
    serving: bool,
) -> Result<()> {
    let duration = args.probe.until();
    let start = tokio::time::Instant::now();
    let wall = Instant::now();
    let mut source = Source::Replay(Replay {
        path: path.to_owned(),
        speed: args.speed,
        repeat: false,
    });
    let finished = source.run(duration, &mut [publisher]).await?;
    if let Some(w) = &finished.warning {
        log::warn!("{w}");
    }
    log::info!(
        "replay finished: {:.3} s of trace in {:.3} s at speed {} ({})",
        publisher.window_s(),
        wall.elapsed().as_secs_f64(),
        args.speed,
        finished.reason.describe()
    );
    if finished.reason == StopReason::EndOfTrace && serving {
        log::info!("serving the final state until Ctrl-C");
        let reason = wait_for_stop(duration.map(|d| start + d)).await?;
        log::info!("export stopped: {}", reason.describe());
    }
    Ok(())
}

pub(crate) fn run(args: &ExportArgs) -> Result<ExitCode> {
    if let (Some(t), Some(r)) = (&args.textfile, &args.replay) {
        numa_host::fs::check_not_input(Some(t), &[r])?;
    }
    let listen = listen_address(args)?;
    let listener = listen.map(bind).transpose()?;
    let textfile = textfile_target(args);
    let rt = numa_source::runtime()?;
    let Pipeline {
        mut publisher,
        rx,
        page,
        live,
    } = match &args.replay {
        Some(path) => replay_pipeline(args, path)?,
        None => live_pipeline(args)?,
    };
    if let Some((p, _)) = &textfile {
        // Fail now, not at the first tick, when the file cannot be written.
        textfile::write(p, &prometheus_text(rx.borrow().clone())?)?;
    }
    let exporter = Exporter::start(listener, rx, page, textfile)?;
    announce(listen, args);

    let result = rt.block_on(async {
        match (live, &args.replay) {
            (Some(probes), _) => {
                let mut source = args.probe.live(probes, Duration::from_secs(1));
                let finished = source
                    .run(args.probe.until(), &mut [&mut publisher])
                    .await?;
                log::info!("export stopped: {}", finished.reason.describe());
                Ok(())
            }
            (None, Some(path)) => replay(args, path, &mut publisher, listen.is_some()).await,
            (None, None) => Ok(()),
        }
    });
    let finished = exporter.finish();
    result.and(finished)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_errors_name_the_remedy() {
        let err = parse_listen("9464").expect_err("no address");
        assert!(err.to_string().contains("ADDRESS:PORT"), "{err}");
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = taken.local_addr().expect("addr");
        let err = bind(addr).expect_err("in use");
        assert!(err.to_string().contains("already in use"), "{err}");
        assert!(err.to_string().contains("--listen"), "{err}");
    }

    #[test]
    fn models_are_labelled_and_unique() {
        let k = KernelDefaults::default();
        let (_, labels) = shadow(&[], &k).expect("default").expect("models");
        assert_eq!(labels, ["kernel-time", "fault-count", "two-touch"]);
        assert!(shadow(&["none".into()], &k).expect("none").is_none());
        let twice = ["fault-count".to_owned(), "fault-count".to_owned()];
        assert!(shadow(&twice, &k).is_err());
    }
}
