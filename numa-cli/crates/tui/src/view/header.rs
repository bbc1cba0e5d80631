//! Kernel, balancing mode, attach plan, tiers, thresholds, drops.
use numa_core::printable::printable;
use ratatui::{
    buffer::Buffer,
    layout::Rect,
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Paragraph, Widget},
};

use super::{dim, fmt, title_style, titled, RED};
use numa_host::promoter_state::PromoterState;

use crate::{
    app::App,
    frame::{Frame, HeaderView},
};

pub fn height(app: &App, _width: u16) -> u16 {
    4 + u16::from(promoter_line(app).is_some())
}

fn sep() -> Span<'static> {
    dim(" │ ")
}

/// Bold red when `on`: a figure that signals trouble.
fn warn(on: bool) -> Style {
    if on {
        Style::default().fg(RED).add_modifier(Modifier::BOLD)
    } else {
        Style::default()
    }
}

/// One line about `numatrace promote` (its state file): moved/s,
/// failures, queue depth; none when no state file exists.
fn promoter_line(app: &App) -> Option<Line<'static>> {
    use numa_host::promoter_state::{NotRunning, Reading};
    let s = match app.promoter.as_ref()? {
        Reading::NotRunning(NotRunning::NoFile) => return None,
        Reading::NotRunning(why) => {
            return Some(titled("promoter ", format!("not running ({why})")))
        }
        Reading::Running(s) => s,
    };
    // Most important first: a narrow terminal cuts the end.
    let mut l = promoter_progress(s);
    l.extend(promoter_trouble(s));
    l.extend(promoter_settings(s));
    Some(Line::from(l))
}

/// The title and what was moved (or would be, in a dry run).
fn promoter_progress(s: &PromoterState) -> Vec<Span<'static>> {
    let mut l = vec![Span::styled(
        if s.dry_run {
            "promoter (dry run) "
        } else {
            "promoter "
        },
        title_style(),
    )];
    if s.dry_run {
        l.push(Span::raw(format!(
            "would move {} pages",
            fmt::count(s.would_move_pages)
        )));
    } else {
        l.push(Span::styled(
            format!(
                "moved {}/s ({}, {})",
                fmt::rate(s.moved_pages_per_s),
                fmt::count(s.moved_pages),
                fmt::bytes(s.moved_bytes)
            ),
            Style::default().fg(super::GREEN),
        ));
    }
    l
}

/// Failures, the queue and its overflows, failures by status.
fn promoter_trouble(s: &PromoterState) -> Vec<Span<'static>> {
    let fails = fmt::nonzero_counts(&s.failures_by_status);
    let mut l = vec![
        sep(),
        Span::styled(
            format!("failures {}", fmt::count(s.failures)),
            if s.failures > 0 {
                Style::default().fg(Color::Yellow)
            } else {
                Style::default()
            },
        ),
        sep(),
        Span::raw(format!("queue {}", fmt::count(s.queue_depth))),
    ];
    if s.queue_overflows > 0 {
        l.push(Span::styled(
            format!(" ({} overflowed)", fmt::count(s.queue_overflows)),
            Style::default().fg(RED),
        ));
    }
    if !fails.is_empty() {
        l.push(sep());
        l.push(Span::raw(fails.join(", ")));
    }
    l
}

/// Pid and scope, rate limit, batch size.
fn promoter_settings(s: &PromoterState) -> [Span<'static>; 6] {
    [
        sep(),
        Span::raw(format!("pid {} ({})", s.pid, s.scope)),
        sep(),
        Span::raw(format!(
            "rate limit {}",
            if s.rate_limit_bytes_per_s == 0 {
                "none".to_owned()
            } else {
                format!("{}/s", fmt::bytes(s.rate_limit_bytes_per_s))
            }
        )),
        sep(),
        Span::raw(format!(
            "batch {} pages/{}",
            fmt::count(s.batch_pages),
            fmt::ms(s.batch_ms)
        )),
    ]
}

fn mode_name(m: Option<u32>) -> String {
    match m {
        Some(0) => "0 (off)".into(),
        Some(1) => "1 (normal)".into(),
        Some(2) => "2 (tiering)".into(),
        Some(3) => "3 (normal+tiering)".into(),
        Some(n) => n.to_string(),
        None => "?".into(),
    }
}

pub fn lines(app: &App) -> Vec<Line<'static>> {
    let f = &app.frame;
    let mut lines = vec![
        source_line(f),
        tiers_line(&f.header),
        thresholds_line(&f.header),
        warnings_line(f),
    ];
    lines.extend(promoter_line(app));
    lines
}

/// Kernel, balancing mode, attach plan, source, sampling.
fn source_line(f: &Frame) -> Line<'static> {
    let h = &f.header;
    let mut l = vec![
        Span::styled("numatrace top", title_style()),
        sep(),
        Span::raw(if h.kernel.is_empty() {
            "kernel ?".to_owned()
        } else {
            printable(&h.kernel).into_owned()
        }),
        sep(),
        Span::styled(
            format!("numa_balancing={}", mode_name(h.numa_balancing)),
            warn(!matches!(h.numa_balancing, Some(2) | Some(3))),
        ),
        sep(),
        Span::raw(h.plan.clone()),
        sep(),
        Span::raw(printable(&f.source).into_owned()),
    ];
    if h.sample_every > 1 {
        l.push(sep());
        l.push(Span::raw(format!("sampling 1/{}", h.sample_every)));
    }
    if h.folio_rate > 1 {
        l.push(sep());
        l.push(Span::raw(format!(
            "folios 1/{} ({:.1}% of slow memory followed)",
            h.folio_rate,
            100.0 * h.folio_coverage
        )));
    }
    Line::from(l)
}

/// Each tier's nodes with memory used and total.
fn tiers_line(h: &HeaderView) -> Line<'static> {
    let mut l = vec![Span::styled("tiers ", title_style())];
    for (i, t) in h.tiers.iter().enumerate() {
        if i > 0 {
            l.push(sep());
        }
        let nodes: Vec<String> = t
            .nodes
            .iter()
            .map(|n| {
                format!(
                    "N{}{} {} used/{}",
                    n.id,
                    if n.cpus == 0 { " (no cpu)" } else { "" },
                    fmt::kb(n.total_kb.saturating_sub(n.free_kb)),
                    fmt::kb(n.total_kb)
                )
            })
            .collect();
        l.push(Span::raw(format!("tier{}: {}", t.id, nodes.join(", "))));
    }
    Line::from(l)
}

/// The hot threshold (set and in force), rate limit and scan tunables.
fn thresholds_line(h: &HeaderView) -> Line<'static> {
    let now: Vec<String> = h
        .kernel_threshold_ms
        .iter()
        .map(|(n, t)| format!("N{n} {t}ms"))
        .collect();
    Line::from(vec![
        Span::styled("hot_threshold ", title_style()),
        Span::raw(fmt::opt(h.hot_threshold_ms, |v| format!("{v}ms"))),
        Span::raw(if now.is_empty() {
            String::new()
        } else {
            format!(" (in force: {})", now.join(", "))
        }),
        sep(),
        Span::raw(format!(
            "rate limit {}",
            fmt::opt(h.rate_limit_mbps, |v| format!("{v} MB/s"))
        )),
        sep(),
        Span::raw(format!("scan {}", h.scan)),
    ])
}

/// Drops, evictions, stamp misses, event count, degraded hooks.
fn warnings_line(f: &Frame) -> Line<'static> {
    let (h, w) = (&f.header, &f.warnings);
    let mut l = vec![
        Span::styled(
            format!("ring drops {}", w.ring_drops),
            warn(w.ring_drops > 0),
        ),
        sep(),
        Span::styled(
            format!("map evictions {}", w.evictions),
            warn(w.evictions > 0),
        ),
        sep(),
    ];
    if w.runs_missed > 0 {
        l.push(Span::styled(
            format!("runs missed {}", w.runs_missed),
            warn(true),
        ));
        l.push(sep());
    }
    l.extend([
        Span::raw(format!("stamp misses {}", fmt::count(w.stamp_misses))),
        sep(),
        Span::raw(format!(
            "{} events, {:.0}s",
            fmt::count(f.events),
            f.elapsed_s
        )),
    ]);
    if !h.degraded.is_empty() {
        l.push(sep());
        l.push(Span::styled(
            format!("degraded: {}", h.degraded.join(", ")),
            Style::default().fg(Color::Yellow),
        ));
    }
    Line::from(l)
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    Paragraph::new(lines(app)).render(area, buf);
}
