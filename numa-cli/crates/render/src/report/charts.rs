//! The report's charts: inline SVG drawn with plotters.
use std::collections::BTreeMap;

use anyhow::Result;
use numa_ebpf_common::{Outcome, OUTCOMES};
use plotters::{coord::Shift, prelude::*};

use super::{
    axes::{Axes, HistAxes},
    funnel::{funnel_rows, FUNNEL_STAGES},
    Gathered,
};
use numa_core::{
    decode::{Event, Snapshot},
    model::{
        funnel::ProcessFunnel,
        log2::{upper_bound, Log2Hist},
        shadow::ShadowReport,
    },
    sink::Sink,
};

/// The kernel's threshold over time: the largest threshold seen per second.
#[derive(Default)]
pub(super) struct ThresholdTimeline {
    t0: Option<u64>,
    per_second: BTreeMap<u64, u32>,
}

impl Sink for ThresholdTimeline {
    fn event(&mut self, ev: &Event) -> Result<()> {
        if let Event::Fault(f) = ev {
            if f.has_kernel_latency() {
                let t0 = *self.t0.get_or_insert(f.ts_ns);
                let sec = f.ts_ns.saturating_sub(t0) / 1_000_000_000;
                let e = self.per_second.entry(sec).or_default();
                *e = (*e).max(f.threshold_ms);
            }
        }
        Ok(())
    }
    fn snapshot(&mut self, _s: &Snapshot) -> Result<()> {
        Ok(())
    }
}

impl ThresholdTimeline {
    /// The last second and the highest threshold (at least `hot_ms`) the
    /// chart must show.
    pub(super) fn extent(&self, hot_ms: u64) -> (u64, u32) {
        let last_s = self.per_second.keys().last().copied().unwrap_or(1).max(1);
        let max = self.per_second.values().copied().max().unwrap_or(0);
        (last_s, max.max(hot_ms as u32).max(1))
    }
}

/// The fault-count thresholds of the sweep chart.
pub(super) const SWEEP: [f64; 6] = [1e2, 1e3, 1e4, 1e5, 1e6, 1e7];

pub(super) type Svg = String;

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a chart: {e:?}")
}

/// Draws one chart into a white SVG of `size`; `draw` builds and fills it.
fn svg_chart(
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<()>,
) -> Result<Svg> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        draw(&root)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// A chart on `root` with the caption style and margin every chart shares
/// and room for the axis labels.
fn chart_builder<'a, 'b, 'c>(
    root: &'a DrawingArea<SVGBackend<'c>, Shift>,
    title: &str,
    x_label_area: u32,
    y_label_area: u32,
) -> ChartBuilder<'a, 'b, SVGBackend<'c>> {
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(x_label_area)
        .y_label_area_size(y_label_area);
    builder
}

/// The legend box every chart shares.
fn draw_legend<'a, 'b: 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, CT>,
) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)
}

/// Legend mark of a bar series: a filled square.
fn box_legend(color: RGBColor) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
}

/// Legend mark of a line series: a short line.
fn line_legend(color: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color)
}

const COLORS: [RGBColor; OUTCOMES] = [
    RGBColor(44, 160, 44),
    RGBColor(152, 223, 138),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(127, 127, 127),
    RGBColor(199, 199, 199),
];

/// Stacked bars of one log2 histogram per outcome over the buckets and
/// height of `ax`; `unit` divides the bucket bounds for the axis labels.
fn stacked_hist(
    title: &str,
    x_desc: &str,
    hists: &[Log2Hist; OUTCOMES],
    unit: f64,
    ax: HistAxes,
    width: u32,
) -> Result<Svg> {
    let (first, last, max) = (ax.first, ax.last, ax.max);
    let buckets = hists.first().map_or(0, |h| h.buckets.len());
    svg_chart((width, 380), |root| {
        let mut chart = chart_builder(root, title, 48, 70)
            .build_cartesian_2d(first as u32..(last as u32 + 1), 0u64..max + max / 10 + 1)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc("hint faults")
            .x_labels((last - first + 1).min(24))
            .x_label_formatter(&|b| format_bound(upper_bound(*b as usize) as f64 / unit))
            .draw()
            .map_err(plot_err)?;
        let mut base = vec![0u64; buckets];
        for o in Outcome::ALL {
            let h = &hists[o as usize];
            if h.count == 0 {
                continue;
            }
            let color = COLORS[o as usize];
            let bars: Vec<Rectangle<(u32, u64)>> = (first..=last)
                .filter(|b| h.buckets[*b] > 0)
                .map(|b| {
                    let (lo, hi) = (base[b], base[b] + h.buckets[b]);
                    Rectangle::new([(b as u32, lo), (b as u32 + 1, hi)], color.filled())
                })
                .collect();
            for (acc, n) in base
                .iter_mut()
                .zip(h.buckets.iter())
                .skip(first)
                .take(last - first + 1)
            {
                *acc += n;
            }
            chart
                .draw_series(bars)
                .map_err(plot_err)?
                .label(o.name())
                .legend(box_legend(color));
        }
        draw_legend(&mut chart)
    })
}

fn format_bound(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.0}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// The threshold per second over `last_s` seconds, up to `max` ms.
fn threshold_chart(
    t: &ThresholdTimeline,
    hot_ms: u64,
    (last_s, max): (u64, u32),
    width: u32,
) -> Result<Svg> {
    svg_chart((width, 320), |root| {
        let mut chart = chart_builder(root, "kernel promotion threshold over time", 40, 60)
            .build_cartesian_2d(0u64..last_s + 1, 0u32..max + max / 5)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("ms")
            .draw()
            .map_err(plot_err)?;
        chart
            .draw_series(LineSeries::new(
                t.per_second.iter().map(|(s, th)| (*s, *th)),
                RED.stroke_width(2),
            ))
            .map_err(plot_err)?
            .label("threshold used (nbp_threshold or hot_threshold_ms)")
            .legend(line_legend(RED));
        chart
            .draw_series(LineSeries::new(
                [(0, hot_ms as u32), (last_s + 1, hot_ms as u32)],
                BLUE.mix(0.6),
            ))
            .map_err(plot_err)?
            .label("hot_threshold_ms")
            .legend(line_legend(BLUE));
        draw_legend(&mut chart)
    })
}

/// Each model's agreement cells, bars up to `max` decisions.
fn agreement_chart(r: &ShadowReport, max: u64, width: u32) -> Result<Svg> {
    let cells = ["both", "kernel_only", "model_only", "neither"];
    let colors = [
        RGBColor(44, 160, 44),
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(160, 160, 160),
    ];
    let n = r.models.len().max(1) as u32;
    svg_chart((width, 360), |root| {
        let names: Vec<String> = r.models.iter().map(|m| m.name.clone()).collect();
        let mut chart = chart_builder(root, "agreement with the kernel per model", 40, 70)
            .build_cartesian_2d(0u32..n * 5, 0u64..max + max / 10 + 1)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_labels(n as usize * 5)
            .x_label_formatter(&|x| {
                if x % 5 == 2 {
                    names.get((x / 5) as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("decisions (folios)")
            .draw()
            .map_err(plot_err)?;
        for (c, (cell, color)) in cells.iter().zip(colors).enumerate() {
            let bars: Vec<Rectangle<(u32, u64)>> = r
                .models
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let a = &m.agreement;
                    let v = [a.both, a.kernel_only, a.model_only, a.neither][c];
                    let x = i as u32 * 5 + c as u32;
                    Rectangle::new([(x, 0), (x + 1, v)], color.filled())
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(plot_err)?
                .label(*cell)
                .legend(box_legend(color));
        }
        draw_legend(&mut chart)
    })
}

/// The sweep's promotions (up to `max`) and agreement per threshold.
fn sweep_chart(r: &ShadowReport, max: u64, width: u32) -> Result<Svg> {
    let points: Vec<(f64, u64, f64)> = r
        .models
        .iter()
        .filter_map(|m| {
            let th: f64 = m.params.get("threshold")?.parse().ok()?;
            Some((th.log10(), m.promote, m.agreement_pct))
        })
        .collect();
    let (lo, hi) = (SWEEP[0].log10() - 0.5, SWEEP[SWEEP.len() - 1].log10() + 0.5);
    svg_chart((width, 360), |root| {
        let mut chart = chart_builder(root, "fault-count threshold sweep", 40, 70)
            .right_y_label_area_size(50)
            .build_cartesian_2d(lo..hi, 0u64..max + max / 10 + 1)
            .map_err(plot_err)?
            .set_secondary_coord(lo..hi, 0.0..100.0);
        chart
            .configure_mesh()
            .x_desc("threshold (hint faults between scan and fault)")
            .x_label_formatter(&|x| format!("1e{x:.0}"))
            .y_desc("would promote (folios)")
            .draw()
            .map_err(plot_err)?;
        chart
            .configure_secondary_axes()
            .y_desc("agreement %")
            .draw()
            .map_err(plot_err)?;
        chart
            .draw_series(
                LineSeries::new(points.iter().map(|p| (p.0, p.1)), GREEN.stroke_width(2))
                    .point_size(4),
            )
            .map_err(plot_err)?
            .label("fault-count would promote")
            .legend(line_legend(GREEN));
        chart
            .draw_series(LineSeries::new(
                [(lo, r.kernel.promote), (hi, r.kernel.promote)],
                RED,
            ))
            .map_err(plot_err)?
            .label("kernel promoted")
            .legend(line_legend(RED));
        chart
            .draw_secondary_series(
                LineSeries::new(points.iter().map(|p| (p.0, p.2)), BLUE.stroke_width(2))
                    .point_size(4),
            )
            .map_err(plot_err)?
            .label("agreement % (right axis)")
            .legend(line_legend(BLUE));
        draw_legend(&mut *chart)
    })
}

/// Where slow-tier pages stop: each stage's count for the busiest
/// processes, bars up to `max`, each process labelled with its verdict.
fn funnel_chart(rows: &[ProcessFunnel], max: u64, width: u32) -> Result<Svg> {
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
    ];
    let rows = funnel_rows(rows);
    let group = rows.len().max(1) as u32 + 1;
    let n = FUNNEL_STAGES.len() as u32;
    svg_chart((width, 380), |root| {
        // Headroom above the bars for the legend's lines.
        let top = max + max * 2 / 5 + 1;
        let mut chart = chart_builder(root, "slow-tier pages, stage by stage", 40, 90)
            .build_cartesian_2d(0u32..n * group, 0u64..top)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_labels((n * group) as usize)
            .x_label_formatter(
                &|x| match (x % group == 0, FUNNEL_STAGES.get((x / group) as usize)) {
                    (true, Some((name, _))) => (*name).to_owned(),
                    _ => String::new(),
                },
            )
            .y_desc("pages (VMA skips: records)")
            .draw()
            .map_err(plot_err)?;
        for (i, (p, color)) in rows.into_iter().zip(colors).enumerate() {
            let bars = FUNNEL_STAGES.iter().enumerate().map(|(k, (_, value))| {
                let x = k as u32 * group + i as u32;
                Rectangle::new([(x, 0), (x + 1, value(&p.stages))], color.filled())
            });
            chart
                .draw_series(bars)
                .map_err(plot_err)?
                .label(format!("{} {}: {}", p.pid, p.comm, p.verdict))
                .legend(box_legend(color));
        }
        // Upper right, in the headroom left above the bars.
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)
    })
}

/// The titles of the page's charts, in page order.
pub(super) const TITLES: [&str; 7] = [
    "Scan-to-fault latency by kernel outcome",
    "Fault-count delta by kernel outcome",
    "Kernel threshold over time",
    "Agreement matrices",
    "Threshold sweep",
    "Promotion funnel",
    "Ping-pong: promotions demoted again",
];

/// Every chart of one trace, in the order of [`TITLES`], `width` pixels
/// wide, on the axes `ax` (shared by the traces of one page).
pub(super) fn all(g: &Gathered, hot_ms: u64, ax: &Axes, width: u32) -> Result<[Svg; 7]> {
    Ok([
        stacked_hist(
            "scan-to-fault latency (first-scan stamp)",
            "latency upper bound (ms)",
            &g.totals.latency_ns,
            1e6,
            ax.latency,
            width,
        )?,
        stacked_hist(
            "hint faults of the process between scan and fault",
            "delta upper bound",
            &g.totals.delta_mm,
            1.0,
            ax.delta,
            width,
        )?,
        threshold_chart(&g.timeline, hot_ms, ax.timeline, width)?,
        agreement_chart(&g.models, ax.agreement_max, width)?,
        sweep_chart(&g.sweep, ax.sweep_max, width)?,
        funnel_chart(&g.stats.funnel, ax.funnel_max, width)?,
        lifecycle_chart(g, ax.residency, width)?,
    ])
}

/// The kernel's promotions that reclaim demoted again, by their time on
/// the top tier (log2 buckets), with the run's demotion figures above.
fn lifecycle_chart(g: &Gathered, ax: HistAxes, width: u32) -> Result<Svg> {
    let (l, d) = (&g.stats.lifecycle, &g.stats.demotions);
    let title = if d.pages == 0 && l.pingpong == 0 {
        "no demotion in this trace (or not seen per folio)".to_owned()
    } else {
        format!(
            "{} of {} promotions demoted again within {:.0} s; {} pages demoted",
            l.pingpong, l.promotions, l.window_s, d.pages
        )
    };
    let h = g.totals.lifecycle.residency();
    let (first, last, max) = (ax.first, ax.last, ax.max);
    svg_chart((width, 380), |root| {
        let mut chart = chart_builder(root, &title, 48, 70)
            .build_cartesian_2d(first as u32..(last as u32 + 1), 0u64..max + max / 10 + 1)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("time on the top tier, upper bound (ms)")
            .y_desc("ping-pongs (folios)")
            .x_labels((last - first + 1).min(24))
            .x_label_formatter(&|b| format_bound(upper_bound(*b as usize) as f64 / 1e6))
            .draw()
            .map_err(plot_err)?;
        let color = RGBColor(214, 39, 40);
        let bars = (first..=last).filter(|b| h.buckets[*b] > 0).map(|b| {
            Rectangle::new(
                [(b as u32, 0), (b as u32 + 1, h.buckets[b])],
                color.filled(),
            )
        });
        chart
            .draw_series(bars)
            .map_err(plot_err)?
            .label("ping-pong")
            .legend(box_legend(color));
        draw_legend(&mut chart)
    })
}

#[cfg(test)]
mod tests {
    use numa_core::{
        decode::{
            fixtures::{demotion, fault, migrated},
            Event,
        },
        model::{
            policy::{build, KernelDefaults, ModelDefaults},
            shadow::Shadow,
            totals::Totals,
        },
    };
    use numa_ebpf_common::Outcome;

    use super::*;

    /// Two promotions, one demoted again 12 s later: the chart's title
    /// gives the share and the bucket of 12 s has its bar.
    #[test]
    fn the_lifecycle_chart_draws_each_ping_pong_by_its_residency() {
        let model = || {
            let (d, k) = (ModelDefaults::default(), KernelDefaults::default());
            vec![build("kernel-time", &d, &k).expect("model")]
        };
        let mut totals = Totals::new(1);
        for (seq, index) in [(100, 7), (101, 8)] {
            let f = migrated(fault(seq, seq, 100, Outcome::PromoteHot), 0xa1, index);
            totals.event(&Event::Fault(f));
        }
        let d = demotion(1_000_000_000_000 + 12_100_000_000, 0xa1, 7);
        totals.event(&Event::Demote(d));
        let g = Gathered {
            stats: totals.report(1 << 20, 0),
            totals,
            warning: None,
            models: Shadow::new(model(), 10).report(),
            sweep: Shadow::new(model(), 10).report(),
            timeline: Default::default(),
        };
        let ax = Axes::of(&g, 1000);
        let svg = lifecycle_chart(&g, ax.residency, 640).expect("chart");
        assert!(
            svg.contains("1 of 2 promotions demoted again within 600 s"),
            "{svg}"
        );
        // One bar, in the bucket up to 2^34 ns (17,180 ms: "17k").
        assert_eq!((ax.residency.first, ax.residency.last), (34, 34));
        assert!(svg.contains("\n17k\n"), "{svg}");
        assert!(svg.matches("<rect").count() >= 3, "{svg}");
    }
}
