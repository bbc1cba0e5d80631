//! Process detail: the address-space heat strip (hint faults per region per
//! interval) and the VMAs (live) or scanned ranges (replay) with scan
//! coverage and the kernel's skip reasons.
use numa_core::printable::printable;
use ratatui::{
    buffer::Buffer,
    layout::Rect,
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Paragraph, Widget},
};

use super::{dim, fmt, title_style, titled, DIM};
use crate::{
    app::App,
    frame::{Detail, VmaRow},
};

const SHADES: [&str; 4] = ["░", "▒", "▓", "█"];
const LABEL_W: u16 = 19;

fn heat_rows(d: &Detail, area: Rect, buf: &mut Buffer) {
    let heat = &d.heat;
    let title = titled(
        "address-space heat",
        "  hint faults per region per interval, oldest → newest; · scanned without faults",
    );
    Paragraph::new(title).render(Rect::new(area.x, area.y, area.width, 1), buf);
    if heat.rows.is_empty() {
        Paragraph::new(dim("  no faults or scans recorded for this process yet"))
            .render(Rect::new(area.x, area.y + 1, area.width, 1), buf);
        return;
    }
    let cells_w = area.width.saturating_sub(LABEL_W) as usize;
    let skip = heat.slots.saturating_sub(cells_w);
    for (i, row) in heat.rows.iter().enumerate() {
        let y = area.y + 1 + i as u16;
        if y >= area.y + area.height {
            break;
        }
        let label = format!(
            "{:012x} {:>5}",
            row.start,
            fmt::bytes(row.end.saturating_sub(row.start))
        );
        buf.set_string(area.x, y, &label, Style::default().fg(DIM));
        for (j, (n, scanned)) in row.faults.iter().zip(&row.scanned).skip(skip).enumerate() {
            let x = area.x + LABEL_W + j as u16;
            let (sym, style) = if *n > 0 && heat.max > 0 {
                let level = ((f64::from(*n) / f64::from(heat.max)) * 4.0).ceil() as usize;
                (
                    SHADES[level.clamp(1, 4) - 1],
                    Style::default().fg(Color::LightRed),
                )
            } else if *scanned {
                ("·", Style::default().fg(Color::Blue))
            } else {
                continue;
            };
            if let Some(c) = buf.cell_mut((x, y)) {
                c.set_symbol(sym).set_style(style);
            }
        }
    }
}

fn table(d: &Detail, area: Rect, buf: &mut Buffer) {
    if area.height < 2 {
        return;
    }
    // The verdicts take at most a quarter of the table's rows.
    let mut lines = funnel_lines(d, FUNNEL_VMAS.min(area.height as usize / 4));
    lines.extend(match &d.vmas {
        Some(vmas) => vma_lines(d, vmas),
        None => range_lines(d),
    });
    Paragraph::new(lines).render(area, buf);
}

/// At most this many VMAs' verdicts before the mappings.
const FUNNEL_VMAS: usize = 3;

/// Each VMA's verdict, busiest first (the funnel's regions: a range a skip
/// named, or the span of the scanner's passes).
fn funnel_lines(d: &Detail, max: usize) -> Vec<Line<'static>> {
    if d.vma_verdicts.is_empty() || max == 0 {
        return Vec::new();
    }
    let mut lines = vec![titled(
        "funnel per VMA",
        "  where slow-tier pages stop (VMA: named by a skip; pass: the scanner's span)",
    )];
    for v in d.vma_verdicts.iter().take(max) {
        lines.push(Line::from(format!(
            "{:>12x} {:>6} {:<4} {}",
            v.start,
            fmt::bytes(v.end.saturating_sub(v.start)),
            if v.named { "VMA" } else { "pass" },
            v.verdict
        )));
    }
    lines
}

fn head_style() -> Style {
    Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
}

/// The process's mappings (live): busy ones first.
fn vma_lines(d: &Detail, vmas: &[VmaRow]) -> Vec<Line<'static>> {
    let mut lines: Vec<Line> = Vec::new();
    let scanned = vmas.iter().filter(|v| v.scan_passes > 0).count();
    lines.push(titled(
        "VMAs",
        format!(
            "  {} mappings, {} scanned since start (/proc/{}/maps; faults per 2 MiB chunk)",
            vmas.len(),
            scanned,
            d.pid
        ),
    ));
    lines.push(Line::styled(
        format!(
            "{:<12} {:>6} {:<4} {:>7} {:>6} {:>7} {:<16} {}",
            "START", "SIZE", "PERM", "FAULTS", "SCANS", "PTES", "PATH", "SKIP"
        ),
        head_style(),
    ));
    let mut v: Vec<_> = vmas.iter().collect();
    // Busy mappings first, then scanned ones, then the rest by address.
    v.sort_by(|a, b| {
        b.faults
            .cmp(&a.faults)
            .then(b.scan_passes.cmp(&a.scan_passes))
            .then(a.start.cmp(&b.start))
    });
    for m in v {
        let style = if m.scan_passes == 0 && m.faults == 0 {
            Style::default().fg(DIM)
        } else {
            Style::default()
        };
        lines.push(Line::styled(
            format!(
                "{:>12x} {:>6} {:<4} {:>7} {:>6} {:>7} {:<16} {}",
                m.start,
                fmt::bytes(m.end.saturating_sub(m.start)),
                fmt::fit(&m.perms, 4),
                fmt::count(m.faults),
                fmt::count(m.scan_passes),
                fmt::count(m.ptes_updated),
                fmt::fit(
                    &printable(if m.path.is_empty() { "[anon]" } else { &m.path }),
                    16
                ),
                m.skip.as_deref().unwrap_or("-")
            ),
            style,
        ));
    }
    lines
}

/// The scanner's passes over the process (replay has no /proc).
fn range_lines(d: &Detail) -> Vec<Line<'static>> {
    let mut lines: Vec<Line> = Vec::new();
    lines.push(titled(
        "scanned ranges",
        "  (VMAs need /proc: live only; these are the scanner's passes)",
    ));
    lines.push(Line::styled(
        format!(
            "{:<12} {:>6} {:>6} {:>7} {:>7} {:>7} {}",
            "START", "SIZE", "SCANS", "PTES", "FAULTS", "AGE", "SKIP"
        ),
        head_style(),
    ));
    if d.ranges.is_empty() {
        lines.push(Line::styled(
            "  no scan passes seen for this process",
            Style::default().fg(DIM),
        ));
    }
    for r in &d.ranges {
        lines.push(Line::from(format!(
            "{:>12x} {:>6} {:>6} {:>7} {:>7} {:>7} {}",
            r.start,
            fmt::bytes(r.end.saturating_sub(r.start)),
            fmt::count(r.passes),
            fmt::count(r.ptes_updated),
            fmt::count(r.faults),
            fmt::ms(r.age_s * 1e3),
            r.skip.as_deref().unwrap_or("-")
        )));
    }
    lines
}

/// What became of its promotions: demoted again, by reclaimer, and the
/// ping-pong share (demoted within the lifecycle's window).
fn trips_span(d: &Detail) -> Option<Span<'static>> {
    let t = d.trips.as_ref()?;
    let by = fmt::nonzero_counts(&t.demoted_by);
    Some(dim(format!(
        "  │ promoted {}, demoted again: {} │ ping-pong {}",
        fmt::count(t.promotions),
        if by.is_empty() {
            "none".to_owned()
        } else {
            by.join(", ")
        },
        fmt::count(t.pingpong)
    )))
}

pub fn render(app: &App, pid: u32, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let Some(d) = app.frame.detail.as_ref().filter(|d| d.pid == pid) else {
        let comm = app
            .frame
            .processes
            .iter()
            .find(|r| r.pid == pid)
            .map_or(Default::default(), |r| printable(&r.comm));
        Paragraph::new(vec![
            Line::styled(format!("{pid} {comm}: detail (Esc back)"), title_style()),
            Line::styled(
                "  collecting (the next refresh brings the detail)...",
                Style::default().fg(DIM),
            ),
        ])
        .render(area, buf);
        return;
    };
    let skips: Vec<String> = d.skips.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let head = Line::from(vec![
        Span::styled(format!("{} {}", d.pid, printable(&d.comm)), title_style()),
        Span::raw(format!(
            "  faults {} │ scan passes {} │ PTEs updated {} │ skips: {}",
            fmt::count(d.faults_total),
            fmt::count(d.scan_passes),
            fmt::count(d.ptes_updated),
            if skips.is_empty() {
                "none".to_owned()
            } else {
                skips.join(", ")
            }
        )),
        dim("  (Esc back)"),
    ]);
    Paragraph::new(head).render(Rect::new(area.x, area.y, area.width, 1), buf);
    if area.height < 2 {
        return;
    }
    let mut why = match &d.verdict {
        Some(v) => Line::from(vec![
            Span::styled("why: ", title_style()),
            Span::styled(v.clone(), Style::default().add_modifier(Modifier::BOLD)),
        ]),
        None => Line::from(dim("why: no slow-tier page protected or faulted yet")),
    };
    if let Some(trips) = trips_span(d) {
        why.push_span(trips);
    }
    Paragraph::new(why).render(Rect::new(area.x, area.y + 1, area.width, 1), buf);
    let rest = area.height - 2;
    let heat_h = (d.heat.rows.len().max(1) as u16 + 1)
        .min(rest / 2)
        .max(2.min(rest));
    heat_rows(d, Rect::new(area.x, area.y + 2, area.width, heat_h), buf);
    table(
        d,
        Rect::new(area.x, area.y + 2 + heat_h, area.width, rest - heat_h),
        buf,
    );
}
