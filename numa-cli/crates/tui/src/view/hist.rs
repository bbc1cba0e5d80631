//! Log2 histograms of the selection: scan-to-fault latency (left) and the
//! per-process fault-count delta (right), promoted (green) stacked on
//! rejected (red), with the kernel's threshold (K) and each model's (1, 2,
//! ...) marked under the bars.
use numa_core::printable::printable;
use ratatui::{
    buffer::Buffer,
    layout::Rect,
    style::{Color, Style},
    text::{Line, Span},
    widgets::{Paragraph, Widget},
};

use super::{dim, fmt, title_style, DIM, GREEN, RED};
use crate::{
    agg::{bucket_le, threshold_bucket},
    app::App,
    frame::{Axis, HistView},
};

const EIGHTHS: [&str; 9] = [" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"];

/// A marker under the bars: bucket, symbol, colour, legend text.
pub struct Mark {
    pub bucket: usize,
    pub symbol: char,
    pub color: Color,
    pub legend: String,
}

pub fn marks(app: &App, axis_latency: bool) -> Vec<Mark> {
    let f = &app.frame;
    let mut v = Vec::new();
    if axis_latency {
        if let Some(k) = f.hist.kernel_threshold_ms {
            v.push(Mark {
                bucket: threshold_bucket(k as f64 * 1e6),
                symbol: 'K',
                color: Color::Yellow,
                legend: format!("K kernel {}", fmt::ms(k as f64)),
            });
        }
    }
    for (i, m) in f.models.iter().enumerate() {
        let Some(th) = m.threshold else { continue };
        let on_latency = matches!(m.axis, Axis::LatencyMs | Axis::WindowMs);
        if on_latency != axis_latency {
            continue;
        }
        let (bucket, what) = match m.axis {
            Axis::FaultDelta => (threshold_bucket(th), fmt::count(th as u64)),
            Axis::LatencyMs => (threshold_bucket(th * 1e6), fmt::ms(th)),
            Axis::WindowMs => (
                threshold_bucket(th * 1e6),
                format!("window {}", fmt::ms(th)),
            ),
        };
        let symbol = char::from_digit((i as u32 + 1) % 10, 10).unwrap_or('*');
        v.push(Mark {
            bucket,
            symbol,
            color: if i == app.model {
                Color::Cyan
            } else {
                Color::Blue
            },
            legend: format!("{symbol} {} {what}", m.short),
        });
    }
    v
}

/// The bucket range to draw: the non-empty buckets and the marks, widened
/// to at least `min_len` buckets.
fn span(promoted: &[u64], rejected: &[u64], marks: &[Mark], min_len: usize) -> (usize, usize) {
    let nz = |i: &usize| {
        promoted.get(*i).copied().unwrap_or(0) + rejected.get(*i).copied().unwrap_or(0) > 0
    };
    let n = promoted.len().max(rejected.len()).max(1);
    let mut lo = (0..n).find(nz).unwrap_or(n / 2);
    let mut hi = (0..n).rev().find(nz).unwrap_or(n / 2);
    for m in marks {
        lo = lo.min(m.bucket);
        hi = hi.max(m.bucket);
    }
    while hi - lo + 1 < min_len {
        lo = lo.saturating_sub(1);
        if hi - lo + 1 < min_len && hi + 1 < n {
            hi += 1;
        }
        if lo == 0 && hi + 1 >= n {
            break;
        }
    }
    (lo, hi)
}

fn draw_one(
    area: Rect,
    buf: &mut Buffer,
    title: &str,
    promoted: &[u64],
    rejected: &[u64],
    marks: &[Mark],
    label: &dyn Fn(u64) -> String,
) {
    if area.height < 4 || area.width < 12 {
        return;
    }
    let total: u64 = promoted.iter().sum::<u64>() + rejected.iter().sum::<u64>();
    let t = Line::from(vec![
        Span::styled(title.to_owned(), title_style()),
        // Decided faults: one per folio, a THP's too.
        Span::raw(format!(" ({} folios)", fmt::count(total))),
    ]);
    Paragraph::new(t).render(Rect::new(area.x, area.y, area.width, 1), buf);
    let bars_h = area.height.saturating_sub(4).max(1);
    let (lo, hi) = span(promoted, rejected, marks, 8);
    let n = hi - lo + 1;
    let col_w = ((area.width as usize) / n).clamp(1, 4);
    let n_shown = n.min(area.width as usize / col_w);
    let hi = lo + n_shown - 1;
    let max = (lo..=hi)
        .map(|b| promoted.get(b).copied().unwrap_or(0) + rejected.get(b).copied().unwrap_or(0))
        .max()
        .unwrap_or(0);
    let base_y = area.y + 1 + bars_h; // row below the bars
    if total == 0 {
        Paragraph::new(dim("no decided faults yet"))
            .render(Rect::new(area.x, area.y + 1, area.width, 1), buf);
    }
    for (j, b) in (lo..=hi).enumerate() {
        let x0 = area.x + (j * col_w) as u16;
        let bar = Bar {
            x: x0,
            base_y,
            width: if col_w > 1 { col_w - 1 } else { 1 },
            height: bars_h,
        };
        let (p, r) = (
            promoted.get(b).copied().unwrap_or(0),
            rejected.get(b).copied().unwrap_or(0),
        );
        if max > 0 && p + r > 0 {
            draw_bar(buf, &bar, p, r, max);
        }
        // Marks sharing a bucket sit side by side.
        for (k, m) in marks.iter().filter(|m| m.bucket == b).enumerate() {
            if let Some(c) = buf.cell_mut((x0 + k as u16, base_y)) {
                c.set_char(m.symbol).set_style(Style::default().fg(m.color));
            }
        }
    }
    draw_axis(buf, area, base_y + 1, (lo, hi), col_w, label);
    draw_legend(buf, Rect::new(area.x, base_y + 2, area.width, 1), marks);
}

/// Where one bucket's bar goes: `height` rows above `base_y`.
struct Bar {
    x: u16,
    base_y: u16,
    width: usize,
    height: u16,
}

/// One bucket's bar scaled to `max`, in eighths of a cell.
fn draw_bar(buf: &mut Buffer, bar: &Bar, promoted: u64, rejected: u64, max: u64) {
    let scale = |v: u64| -> usize {
        let e = (v as f64 / max as f64 * f64::from(bar.height) * 8.0).round() as usize;
        if v > 0 {
            e.max(1)
        } else {
            0
        }
    };
    let (re, pe) = (scale(rejected), scale(promoted));
    // Rejected from the bottom; promoted above, from the next cell.
    let r_cells = re.div_ceil(8);
    for row in 0..bar.height as usize {
        let y = bar.base_y - 1 - row as u16;
        let (sym, color) = if row < r_cells {
            let filled = (re - row * 8).min(8);
            (EIGHTHS[filled], RED)
        } else {
            let prow = row - r_cells;
            if prow * 8 >= pe {
                continue;
            }
            (EIGHTHS[(pe - prow * 8).min(8)], GREEN)
        };
        for dx in 0..bar.width {
            if let Some(c) = buf.cell_mut((bar.x + dx as u16, y)) {
                c.set_symbol(sym).set_style(Style::default().fg(color));
            }
        }
    }
}

/// Axis labels of buckets `lo..=hi` on row `y`, left to right where they
/// fit.
fn draw_axis(
    buf: &mut Buffer,
    area: Rect,
    y: u16,
    (lo, hi): (usize, usize),
    col_w: usize,
    label: &dyn Fn(u64) -> String,
) {
    let mut next_free = 0usize;
    for (j, b) in (lo..=hi).enumerate() {
        let x = j * col_w;
        if x < next_free {
            continue;
        }
        let s = label(bucket_le(b));
        if x + s.len() > area.width as usize {
            break;
        }
        buf.set_string(area.x + x as u16, y, &s, Style::default().fg(DIM));
        next_free = x + s.len() + 1;
    }
}

fn draw_legend(buf: &mut Buffer, area: Rect, marks: &[Mark]) {
    let mut legend = vec![
        Span::styled("█ promoted ", Style::default().fg(GREEN)),
        Span::styled("█ rejected ", Style::default().fg(RED)),
    ];
    for m in marks {
        legend.push(Span::styled(
            format!(" {}", m.legend),
            Style::default().fg(m.color),
        ));
    }
    Paragraph::new(Line::from(legend)).render(area, buf);
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let h: &HistView = &app.frame.hist;
    let who = format!("[{}]", printable(&h.title));
    let (left, right) = if area.width >= 70 {
        let lw = area.width / 2;
        (
            Rect::new(area.x, area.y, lw - 1, area.height),
            Some(Rect::new(area.x + lw, area.y, area.width - lw, area.height)),
        )
    } else {
        (area, None)
    };
    draw_one(
        left,
        buf,
        &if left.width >= 60 {
            format!("scan→fault latency {who}")
        } else {
            format!("latency {who}")
        },
        &h.latency_promoted,
        &h.latency_rejected,
        &marks(app, true),
        &fmt::ns_label,
    );
    if let Some(r) = right {
        draw_one(
            r,
            buf,
            "fault-count delta",
            &h.delta_promoted,
            &h.delta_rejected,
            &marks(app, false),
            &fmt::count,
        );
    }
}
