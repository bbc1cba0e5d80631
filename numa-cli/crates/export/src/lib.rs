//! The Prometheus side of numatrace: the counters and in-kernel histograms
//! as metrics, served over HTTP and/or written to a node_exporter textfile.
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
// Dev-dependencies are for the integration tests and benches.
#![cfg_attr(test, allow(unused_crate_dependencies))]
pub mod metrics;
pub mod publish;
pub mod server;
pub mod textfile;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::{bail, Context, Result};
use numa_host::promoter_state;
use tokio::sync::watch;

use self::metrics::MetricsState;
use numa_core::plan::{AttachPlan, HookStatus, Mechanism};

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

pub fn index_html(source: &str, kernel: &str, plan: Option<&AttachPlan>) -> String {
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
pub struct Exporter {
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<Result<()>>,
}

impl Exporter {
    pub fn start(
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
    pub fn finish(self) -> Result<()> {
        self.stop.send_replace(true);
        match self.thread.join() {
            Ok(r) => r,
            Err(_) => bail!("the exporter thread panicked"),
        }
    }
}

/// The classic text, with the promoter's metrics (its state file is read
/// now).
pub fn prometheus_text(state: Arc<MetricsState>) -> Result<Vec<u8>> {
    let promoter = promoter_state::Source::from_env().read();
    let om =
        metrics::encode_openmetrics_with(state, Some(promoter)).context("encoding the metrics")?;
    Ok(metrics::to_prometheus_text(&om).into_bytes())
}

/// Writes the textfile every `every` and once more when stopped. A failed
/// periodic write is retried at the next tick; a failure is reported once
/// per distinct message (a lasting cause repeats the same one), and the
/// first success after it says so.
async fn write_textfiles(
    path: &Path,
    every: Duration,
    rx: watch::Receiver<Arc<MetricsState>>,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    // A zero period panics inside the runtime (`--interval` is at least
    // 0.1 s; this keeps any other caller from killing the thread).
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_error: Option<String> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        let state = rx.borrow().clone();
        match prometheus_text(state).and_then(|t| textfile::write(path, &t)) {
            Ok(()) => {
                if last_error.take().is_some() {
                    log::info!("the textfile {} is written again", path.display());
                }
            }
            Err(e) => {
                let msg = format!("{e:#}");
                if last_error.as_ref() != Some(&msg) {
                    log::warn!("{msg}");
                }
                last_error = Some(msg);
            }
        }
    }
    let state = rx.borrow().clone();
    textfile::write(path, &prometheus_text(state)?)
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
                    design: None,
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
}
