//! System rates, each with a sparkline of its history.
use ratatui::{
    buffer::Buffer,
    layout::Rect,
    style::{Color, Style},
    text::{Line, Span},
    widgets::{Paragraph, Widget},
};

use super::{dim, fmt, titled, GREEN, RED};
use crate::{app::App, frame::RateSeries};

const CELL_MIN: u16 = 26;
const LABEL: usize = 12;

fn columns(width: u16) -> u16 {
    (width / CELL_MIN).clamp(1, 4)
}

pub fn height(app: &App, width: u16) -> u16 {
    let n = app.frame.rates.len().max(1) as u16;
    1 + n.div_ceil(columns(width))
}

fn color(name: &str) -> Style {
    if name.starts_with("rej") || name == "migrate fail" {
        Style::default().fg(RED)
    } else if name.starts_with("promoted") {
        Style::default().fg(GREEN)
    } else if name.ends_with("would") {
        Style::default().fg(Color::Cyan)
    } else {
        Style::default()
    }
}

fn value(r: &RateSeries) -> String {
    if r.unit == "%" {
        format!("{:.0}%", r.current)
    } else {
        fmt::rate(r.current)
    }
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let f = &app.frame;
    let points = f.rates.first().map_or(0, |r| r.history.len());
    // The units first: a narrow terminal cuts the end.
    let title = titled(
        "rates per second",
        format!(
            "  folios (1 per hint fault); pg, vmstat: pages; last {points} × {:.1}s",
            f.interval_s
        ),
    );
    Paragraph::new(title).render(Rect::new(area.x, area.y, area.width, 1), buf);
    if f.rates.is_empty() {
        Paragraph::new(dim("  waiting for the first interval...")).render(
            Rect::new(
                area.x,
                area.y + 1,
                area.width,
                area.height.saturating_sub(1),
            ),
            buf,
        );
        return;
    }
    let cols = columns(area.width);
    let rows = (area.height - 1).max(1);
    let cell_w = area.width / cols;
    for (i, r) in f.rates.iter().enumerate() {
        let (col, row) = (i as u16 / rows, i as u16 % rows);
        if col >= cols {
            break;
        }
        let x = area.x + col * cell_w;
        let y = area.y + 1 + row;
        if y >= area.y + area.height {
            continue;
        }
        let label = fmt::fit(&r.name, LABEL);
        let spark_w = (cell_w as usize).saturating_sub(LABEL + 1 + 6 + 2);
        let line = Line::from(vec![
            Span::styled(format!("{label:<LABEL$} "), color(&r.name)),
            Span::raw(format!("{:>6} ", value(r))),
            Span::styled(fmt::sparkline(&r.history, spark_w), color(&r.name)),
        ]);
        Paragraph::new(line).render(Rect::new(x, y, cell_w.saturating_sub(1), 1), buf);
    }
}
