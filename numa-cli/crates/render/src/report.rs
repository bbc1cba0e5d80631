//! The page of `numatrace report`: one self-contained HTML page
//! (inline SVG from plotters, no scripts, no network) with the latency and
//! fault-delta distributions by outcome, the kernel threshold over time,
//! each model's agreement with the kernel and a fault-count threshold sweep.
//! Several traces (hosts, runs) make a fleet page: every chart row holds
//! one column per trace, on axes shared across the row.
mod axes;
mod charts;
mod fleet;
mod funnel;
mod html;
mod page;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::explain::Timeline;
use crate::ReadTrace;
use axes::Axes;
use charts::{ThresholdTimeline, SWEEP};
use numa_core::model::scorecard::Scorecard;
use numa_core::{
    model::{
        policy::{self, KernelDefaults, ModelDefaults},
        shadow::{Shadow, ShadowReport},
        totals::{Report, Totals},
    },
    trace::{self, Header},
};

/// What a page shows after the charts of one trace: the scorecard, and
/// one page's timeline.
#[derive(Default, Clone, Copy)]
pub struct Extras<'a> {
    pub scorecard: Option<&'a Scorecard>,
    pub timeline: Option<&'a Timeline>,
}

/// Renders the report page of one trace, or the fleet page of several.
pub fn render(
    paths: &[PathBuf],
    model_specs: &[String],
    extras: Extras,
    read: &mut ReadTrace,
) -> Result<String> {
    let traces = paths
        .iter()
        .map(|p| Trace::read(p, model_specs, read))
        .collect::<Result<Vec<_>>>()?;
    let ax = traces
        .iter()
        .map(|t| Axes::of(&t.g, t.hot_ms))
        .reduce(Axes::merge)
        .context("no trace to report on")?;
    // Narrower charts side by side; the page scales them to its columns.
    let width = if traces.len() == 1 { 900 } else { 640 };
    let charts = traces
        .iter()
        .map(|t| charts::all(&t.g, t.hot_ms, &ax, width))
        .collect::<Result<Vec<_>>>()?;
    Ok(page::page(&traces, &charts, extras))
}

/// One trace of the page and what a pass over it gathered.
struct Trace {
    path: PathBuf,
    header: Header,
    hot_ms: u64,
    g: Gathered,
}

impl Trace {
    fn read(path: &Path, model_specs: &[String], read: &mut ReadTrace) -> Result<Trace> {
        let header = trace::Reader::open(path)?.header;
        let k = KernelDefaults::from_host(&header.tunables, header.params.as_ref());
        let g = gather(path, &header, &k, model_specs, read)
            .with_context(|| format!("reading trace {}", path.display()))?;
        Ok(Trace {
            path: path.to_owned(),
            header,
            hot_ms: k.hot_threshold_ms,
            g,
        })
    }
}

/// What one pass over the trace gathers for the page.
struct Gathered {
    totals: Totals,
    stats: Report,
    warning: Option<String>,
    /// The chosen models against the kernel.
    models: ShadowReport,
    /// The fault-count model at each threshold of `SWEEP`.
    sweep: ShadowReport,
    timeline: ThresholdTimeline,
}

/// Replays the trace once into the totals, the chosen models (the three
/// defaults without `--model`), the threshold sweep and the timeline.
fn gather(
    path: &Path,
    header: &Header,
    k: &KernelDefaults,
    model_specs: &[String],
    read: &mut ReadTrace,
) -> Result<Gathered> {
    let d = ModelDefaults::default();
    let specs: Vec<String> = if model_specs.is_empty() {
        vec![
            "kernel-time".into(),
            "fault-count".into(),
            "two-touch".into(),
        ]
    } else {
        model_specs.to_vec()
    };
    let models = specs
        .iter()
        .map(|s| policy::build(s, &d, k))
        .collect::<Result<Vec<_>>>()?;
    let sweep = SWEEP
        .iter()
        .map(|t| policy::build(&format!("fault-count:threshold={t}"), &d, k))
        .collect::<Result<Vec<_>>>()?;
    let mut totals = Totals::new(header.params.as_ref().map_or(1, |p| p.toptier_mask));
    let mut shadow = Shadow::new(models, 10);
    let mut sweeper = Shadow::new(sweep, 10);
    let mut timeline = ThresholdTimeline::default();
    let warning = read(
        path,
        &mut [&mut totals, &mut shadow, &mut sweeper, &mut timeline],
    )?;
    let stats = totals.report(
        u64::from(header.stamp_entries),
        header.attach_started_mono_ns,
    );
    Ok(Gathered {
        stats,
        warning,
        models: shadow.report(),
        sweep: sweeper.report(),
        totals,
        timeline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_recorded_trace_with_non_empty_charts() {
        let trace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/testdata/hot-chunks-6.12.trace");
        let mut read = |p: &Path, sinks: &mut [&mut dyn numa_core::sink::Sink]| {
            Ok(numa_source::Source::read_file(p, sinks, &mut |_| {})?.warning)
        };
        let html = render(&[trace], &[], Extras::default(), &mut read).expect("report");
        assert_eq!(
            html.matches("<svg").count(),
            charts::TITLES.len(),
            "seven charts"
        );
        assert_eq!(charts::TITLES.len(), 7);
        // This trace is from before demotions were traced: the lifecycle
        // chart, last, says so instead of drawing bars.
        let (drawn, lifecycle) = html.rsplit_once("<div class=\"chart\">").expect("charts");
        assert!(
            lifecycle.contains("no demotion in this trace"),
            "the lifecycle chart: {}",
            &lifecycle[..400.min(lifecycle.len())]
        );
        // Every other chart has drawn marks (bars or lines), not just axes.
        for chart in drawn.split("<div class=\"chart\">").skip(1) {
            let marks = chart.matches("<rect").count()
                + chart.matches("<polyline").count()
                + chart.matches("<path").count();
            assert!(
                marks > 5,
                "a chart without marks: {}",
                &chart[..200.min(chart.len())]
            );
        }
        assert!(html.contains("reject_latency"));
        // Self-contained: the only addresses are the SVG/XML namespaces, no
        // external script, style or image.
        assert_eq!(
            html.matches("http://").count(),
            html.matches("http://www.w3.org/").count(),
            "the report refers to something outside itself"
        );
        assert!(
            !html.contains("https://"),
            "the report loads something from the web"
        );
    }
}
