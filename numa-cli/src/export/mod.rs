//! `numatrace export`: the counters and in-kernel histograms for Prometheus.
//!
//! ```text
//! source (live probes | --replay TRACE) -> decode -> Publisher (sink)
//!     -- watch<Arc<MetricsState>> -->  exporter thread: HTTP /metrics, /
//!                                                        textfile writer
//! ```
//! The pipeline runs on the main thread; the HTTP server and the textfile
//! writer on a thread of their own with their own runtime. They share one
//! `watch` channel: the pipeline replaces the state once per snapshot, the
//! readers clone the `Arc`. Neither side ever waits for the other.
pub mod metrics;
pub mod publish;
pub mod server;
pub mod textfile;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use numa_source::{signals::wait_for_stop, Replay, Source, StopReason};
use tokio::sync::watch;

use self::{
    metrics::{Info, MetricsState},
    publish::{Options, Publisher},
};
use numa_core::plan::{AttachPlan, HookStatus, Mechanism};

use crate::{
    cli::{ExportArgs, ModelSel},
    evaluate,
    model::{policy::KernelDefaults, shadow::Shadow},
    promoter_state, trace,
};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";
/// `--per-process` cap: each process adds three series.
pub const MAX_PER_PROCESS: usize = 100;

/// How the required hooks are attached: `fentry` (fentry/fexit), `kprobe`
/// (kprobe/kretprobe), `mixed`, or `none`.
pub fn attach_mode(plan: &AttachPlan) -> &'static str {
    let mechs: Vec<Mechanism> = plan
        .hooks
        .iter()
        .filter(|h| h.required && h.status == HookStatus::Attached)
        .filter_map(|h| h.mechanism)
        .collect();
    let tracing = |m: &Mechanism| matches!(m, Mechanism::Fentry | Mechanism::Fexit);
    let kprobe = |m: &Mechanism| matches!(m, Mechanism::Kprobe | Mechanism::Kretprobe);
    if mechs.is_empty() {
        "none"
    } else if mechs.iter().all(tracing) {
        "fentry"
    } else if mechs.iter().all(kprobe) {
        "kprobe"
    } else {
        "mixed"
    }
}

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
    if models.iter().any(|m| m == "none") {
        if models.len() > 1 {
            bail!("--model none excludes other --model options");
        }
        return Ok(None);
    }
    let model_args = ModelSel {
        models: models.to_vec(),
        ..ModelSel::default()
    };
    let policies = evaluate::policies(&model_args, k)?;
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

/// Per-node counters node_exporter lacks (it has no per-node vmstat): the
/// tiering ones (`pgpromote_*`, `pgdemote_*`) and any NUMA balancing
/// counter the kernel keeps per node.
fn node_vmstat() -> Vec<(u32, Vec<(String, u64)>)> {
    let base = Path::new("/sys/devices/system/node");
    let online = std::fs::read_to_string(base.join("online")).unwrap_or_default();
    numa_core::topology::parse_list(&online)
        .into_iter()
        .filter_map(|n| {
            let text = std::fs::read_to_string(base.join(format!("node{n}/vmstat"))).ok()?;
            let counters: Vec<(String, u64)> = numa_core::topology::parse_vmstat(&text)
                .into_iter()
                .filter(|(k, _)| {
                    numa_core::topology::NUMA_VMSTAT.contains(&k.as_str())
                        || k.starts_with("pgpromote_")
                        || k.starts_with("pgdemote_")
                })
                .collect();
            (!counters.is_empty()).then_some((n, counters))
        })
        .collect()
}

fn index_html(source: &str, kernel: &str, plan: Option<&AttachPlan>) -> String {
    use server::html_escape as e;
    let mut rows = String::new();
    for h in plan.map(|p| p.hooks.as_slice()).unwrap_or_default() {
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            e(h.hook.name()),
            if h.required { "yes" } else { "no" },
            e(h.mechanism.map_or("-", |m| m.name())),
            e(h.target.as_deref().unwrap_or("-")),
            e(&format!("{:?}", h.status).to_lowercase()),
            e(&h.detail),
        ));
    }
    let mode = plan.map_or("none", attach_mode);
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>numatrace exporter</title></head>\n<body>\n\
         <h1>numatrace exporter</h1>\n\
         <p>Metrics: <a href=\"/metrics\">/metrics</a> (OpenMetrics for <code>Accept: application/openmetrics-text</code>, \
         else the Prometheus text format 0.0.4).</p>\n\
         <p>Source: {}<br>Kernel: {}<br>Attach mode: {}</p>\n\
         <h2>Attach plan</h2>\n<table border=\"1\" cellpadding=\"3\">\n\
         <tr><th>hook</th><th>required</th><th>mechanism</th><th>target</th><th>status</th><th>detail</th></tr>\n{}</table>\n\
         </body></html>\n",
        e(source),
        e(kernel),
        e(mode),
        if rows.is_empty() {
            "<tr><td colspan=\"6\">no attach plan recorded</td></tr>\n".to_owned()
        } else {
            rows
        }
    )
}

/// The exporter thread: HTTP server and/or textfile writer.
struct Exporter {
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<Result<()>>,
}

impl Exporter {
    fn start(
        listener: Option<std::net::TcpListener>,
        rx: watch::Receiver<Arc<MetricsState>>,
        index_html: String,
        textfile: Option<(PathBuf, Duration)>,
    ) -> Result<Exporter> {
        let (stop, stop_rx) = watch::channel(false);
        let thread = std::thread::Builder::new()
            .name("numatrace-export".into())
            .spawn(move || -> Result<()> {
                let rt = numa_source::runtime().context("starting the exporter's runtime")?;
                rt.block_on(async move {
                    let http = async {
                        if let Some(l) = listener {
                            let l = tokio::net::TcpListener::from_std(l)
                                .context("registering the listening socket")?;
                            server::serve(
                                l,
                                server::Shared::with_promoter(
                                    rx.clone(),
                                    index_html,
                                    Some(promoter_state::Source::from_env()),
                                ),
                                stop_rx.clone(),
                            )
                            .await;
                        }
                        Ok::<_, anyhow::Error>(())
                    };
                    let file = async {
                        match textfile {
                            Some((path, every)) => {
                                write_textfiles(&path, every, rx.clone(), stop_rx.clone()).await
                            }
                            None => Ok(()),
                        }
                    };
                    let (a, b) = tokio::join!(http, file);
                    a.and(b)
                })
            })
            .context("starting the exporter thread")?;
        Ok(Exporter { stop, thread })
    }

    /// Stops serving, writes the final textfile, and waits for the thread.
    fn finish(self) -> Result<()> {
        self.stop.send_replace(true);
        match self.thread.join() {
            Ok(r) => r,
            Err(_) => bail!("the exporter thread panicked"),
        }
    }
}

/// The classic text, with the promoter's metrics (its state file is read
/// now).
fn prometheus_text(state: Arc<MetricsState>) -> Result<Vec<u8>> {
    let promoter = promoter_state::Source::from_env().read();
    let om =
        metrics::encode_openmetrics_with(state, Some(promoter)).context("encoding the metrics")?;
    Ok(metrics::to_prometheus_text(&om).into_bytes())
}

/// Writes the textfile every `every` and once more when stopped. A failed
/// periodic write is reported and retried at the next tick.
async fn write_textfiles(
    path: &Path,
    every: Duration,
    rx: watch::Receiver<Arc<MetricsState>>,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_error: Option<String> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        let state = rx.borrow().clone();
        match prometheus_text(state).and_then(|t| textfile::write_atomic(path, &t)) {
            Ok(()) => last_error = None,
            Err(e) => {
                let msg = format!("{e:#}");
                if last_error.as_ref() != Some(&msg) {
                    eprintln!("numatrace: warning: {msg}");
                }
                last_error = Some(msg);
            }
        }
    }
    let state = rx.borrow().clone();
    textfile::write_atomic(path, &prometheus_text(state)?)
}

pub fn run(args: &ExportArgs) -> Result<ExitCode> {
    if args.per_process > MAX_PER_PROCESS {
        bail!(
            "--per-process {}: at most {MAX_PER_PROCESS} processes get their own series \
             (each adds three; cardinality): use a smaller TOPN",
            args.per_process
        );
    }
    if !(args.interval.is_finite() && args.interval > 0.0) {
        bail!(
            "--interval {}: give a positive number of seconds",
            args.interval
        );
    }
    if !(args.speed.is_finite() && args.speed >= 0.0) {
        bail!(
            "--speed {}: give 1 for the recorded pace, 0 for as fast as possible",
            args.speed
        );
    }
    // HTTP unless only a textfile was asked for.
    let listen = match (&args.listen, &args.textfile) {
        (Some(l), _) => Some(parse_listen(l)?),
        (None, None) => Some(parse_listen(DEFAULT_LISTEN)?),
        (None, Some(_)) => None,
    };
    let listener = listen.map(bind).transpose()?;
    let textfile = args
        .textfile
        .clone()
        .map(|p| (p, Duration::from_secs_f64(args.interval)));
    if let Some((p, _)) = &textfile {
        if p.extension().is_none_or(|e| e != "prom") {
            eprintln!(
                "numatrace: warning: node_exporter's textfile collector only reads *.prom files; {} will be ignored by it",
                p.display()
            );
        }
    }
    let rt = numa_source::runtime()?;
    let version = env!("CARGO_PKG_VERSION").to_owned();
    let duration = args.probe.until();

    let (mut publisher, rx, page, live) = match &args.replay {
        Some(path) => {
            let header = trace::Reader::open(path)?.header;
            let mode = header.attach_plan.as_ref().map_or("none", attach_mode);
            let (publisher, rx) = Publisher::new(Options {
                info: Info {
                    version,
                    kernel: header.kernel_release.clone(),
                    attach_mode: format!("replay:{mode}"),
                },
                shadow: shadow(&args.models, &evaluate::kernel_defaults(&header))?,
                per_process: args.per_process,
                sample_every: header.sample_every,
                stamp_capacity: u64::from(header.stamp_entries),
                node_vmstat: None,
            });
            let page = index_html(
                &format!("replay of {} at speed {}", path.display(), args.speed),
                &header.kernel_release,
                header.attach_plan.as_ref(),
            );
            (publisher, rx, page, None)
        }
        None => {
            let probes = numa_probe::session::attach(&args.probe.options())?;
            let header = numa_probe::session::header(&probes);
            let (publisher, rx) = Publisher::new(Options {
                info: Info {
                    version,
                    kernel: header.kernel_release.clone(),
                    attach_mode: attach_mode(&probes.plan).to_owned(),
                },
                shadow: shadow(&args.models, &evaluate::kernel_defaults(&header))?,
                per_process: args.per_process,
                sample_every: probes.options.sample_every,
                stamp_capacity: u64::from(probes.options.stamp_entries),
                node_vmstat: Some(node_vmstat),
            });
            let page = index_html("live probes", &header.kernel_release, Some(&probes.plan));
            (publisher, rx, page, Some(probes))
        }
    };
    if let Some((p, _)) = &textfile {
        // Fail now, not at the first tick, when the file cannot be written.
        textfile::write_atomic(p, &prometheus_text(rx.borrow().clone())?)?;
    }
    let exporter = Exporter::start(listener, rx, page, textfile)?;
    if let Some(a) = listen {
        if !a.ip().is_loopback() {
            eprintln!("numatrace: note: serving {a} beyond this host, as asked by --listen");
        }
        eprintln!("numatrace: serving http://{a}/metrics");
    }
    if let Some(p) = &args.textfile {
        eprintln!(
            "numatrace: writing {} every {} s",
            p.display(),
            args.interval
        );
    }

    let result = rt.block_on(async {
        match (live, &args.replay) {
            (Some(probes), _) => {
                let mut source = args.probe.live(probes, Duration::from_secs(1));
                let finished = source.run(duration, &mut [&mut publisher]).await?;
                eprintln!("numatrace: export stopped: {}", finished.reason.describe());
                Ok(())
            }
            (None, Some(path)) => {
                let start = tokio::time::Instant::now();
                let wall = Instant::now();
                let mut source = Source::Replay(Replay {
                    path: path.clone(),
                    speed: args.speed,
                    repeat: false,
                });
                let finished = source.run(duration, &mut [&mut publisher]).await?;
                if let Some(w) = &finished.warning {
                    eprintln!("numatrace: warning: {w}");
                }
                eprintln!(
                    "numatrace: replay finished: {:.3} s of trace in {:.3} s at speed {} ({})",
                    publisher.window_s(),
                    wall.elapsed().as_secs_f64(),
                    args.speed,
                    finished.reason.describe()
                );
                if finished.reason == StopReason::EndOfTrace && listen.is_some() {
                    eprintln!("numatrace: serving the final state until Ctrl-C");
                    let reason = wait_for_stop(duration.map(|d| start + d)).await?;
                    eprintln!("numatrace: export stopped: {}", reason.describe());
                }
                Ok(())
            }
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
    use numa_core::plan::{Hook, PlannedHook};

    fn plan(mechs: &[Mechanism]) -> AttachPlan {
        AttachPlan {
            complete: true,
            hooks: mechs
                .iter()
                .map(|m| PlannedHook {
                    hook: Hook::HintFault,
                    target: Some("numa_migrate_check".into()),
                    mechanism: Some(*m),
                    layout: None,
                    required: true,
                    status: HookStatus::Attached,
                    detail: "<script>".into(),
                })
                .collect(),
        }
    }

    #[test]
    fn attach_modes() {
        assert_eq!(
            attach_mode(&plan(&[Mechanism::Fentry, Mechanism::Fexit])),
            "fentry"
        );
        assert_eq!(
            attach_mode(&plan(&[Mechanism::Kprobe, Mechanism::Kretprobe])),
            "kprobe"
        );
        assert_eq!(
            attach_mode(&plan(&[Mechanism::Fentry, Mechanism::Kretprobe])),
            "mixed"
        );
        assert_eq!(attach_mode(&plan(&[])), "none");
    }

    #[test]
    fn index_page_links_metrics_and_states_the_plan() {
        let html = index_html("live probes", "6.12", Some(&plan(&[Mechanism::Fentry])));
        assert!(html.contains("<a href=\"/metrics\">"));
        assert!(html.contains("numa_migrate_check"));
        assert!(html.contains("Attach mode: fentry"));
        assert!(html.contains("&lt;script&gt;") && !html.contains("<script>"));
    }

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
