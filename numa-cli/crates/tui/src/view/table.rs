//! The process table: one row per process with hint faults, and a first
//! row for all processes together.
use ratatui::{
    buffer::Buffer,
    layout::Rect,
    style::{Modifier, Style},
    text::{Line, Span},
    widgets::{Paragraph, Widget},
};

use super::{fmt, title_style, DIM};
use crate::{
    app::{App, SortKey},
    frame::ProcRow,
};

struct Col {
    title: String,
    width: usize,
    key: SortKey,
    left: bool,
    cell: Box<dyn Fn(&ProcRow) -> String>,
}

fn resident(r: &ProcRow) -> String {
    match &r.resident {
        None => "-".into(),
        Some(v) if v.is_empty() => "0".into(),
        Some(v) => v
            .iter()
            .map(|(n, p)| format!("N{n}:{}", fmt::count(*p)))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// The columns that fit `width`, in display order.
fn columns(app: &App, width: u16) -> Vec<Col> {
    let model = app.model;
    let short = app
        .frame
        .models
        .get(model)
        .map_or("model".to_owned(), |m| m.short.clone());
    let w = width as usize;
    let wide = w >= 110;
    let wider = w >= 130;
    let mut cols = vec![Col {
        title: "PID".into(),
        width: 7,
        key: SortKey::Pid,
        left: false,
        cell: Box::new(|r| {
            if r.pid == 0 {
                "-".into()
            } else {
                r.pid.to_string()
            }
        }),
    }];
    cols.push(Col {
        title: "COMM".into(),
        width: if wide { 16 } else { 12 },
        key: SortKey::Comm,
        left: true,
        cell: Box::new(|r| r.comm.clone()),
    });
    cols.push(Col {
        title: "FLT/s".into(),
        width: 7,
        key: SortKey::Faults,
        left: false,
        cell: Box::new(|r| fmt::rate(r.faults_s)),
    });
    if wider {
        cols.push(Col {
            title: "LOC%".into(),
            width: 5,
            key: SortKey::Faults,
            left: false,
            cell: Box::new(|r| fmt::opt(r.local_pct, |v| format!("{v:.0}"))),
        });
    }
    cols.push(Col {
        title: "PRM/s".into(),
        width: 7,
        key: SortKey::Promoted,
        left: false,
        cell: Box::new(|r| fmt::rate(r.promoted_s)),
    });
    cols.push(Col {
        title: "RLAT/s".into(),
        width: 7,
        key: SortKey::RejLatency,
        left: false,
        cell: Box::new(|r| fmt::rate(r.rej_latency_s)),
    });
    cols.push(Col {
        title: format!("{short}/s"),
        width: 8,
        key: SortKey::Model,
        left: false,
        cell: Box::new(move |r| fmt::rate(r.model_s.get(model).copied().unwrap_or(0.0))),
    });
    cols.push(Col {
        title: "AGR%".into(),
        width: 5,
        key: SortKey::Agree,
        left: false,
        cell: Box::new(move |r| {
            fmt::opt(r.agree_pct.get(model).copied().flatten(), |v| {
                format!("{v:.0}")
            })
        }),
    });
    cols.push(Col {
        title: "P50".into(),
        width: 6,
        key: SortKey::P50,
        left: false,
        cell: Box::new(|r| fmt::opt(r.lat_p50_ms, fmt::ms)),
    });
    cols.push(Col {
        title: "P99".into(),
        width: 6,
        key: SortKey::P99,
        left: false,
        cell: Box::new(|r| fmt::opt(r.lat_p99_ms, fmt::ms)),
    });
    cols.push(Col {
        title: "ΔFLT".into(),
        width: 6,
        key: SortKey::Delta,
        left: false,
        cell: Box::new(|r| fmt::opt(r.delta_p50, fmt::count)),
    });
    if wide {
        cols.push(Col {
            title: "RESIDENT PAGES".into(),
            width: if wider { 24 } else { 18 },
            key: SortKey::Resident,
            left: true,
            cell: Box::new(resident),
        });
    }
    cols
}

fn cell(text: &str, width: usize, left: bool) -> String {
    let t = fmt::fit(text, width);
    if left {
        format!("{t:<width$}")
    } else {
        format!("{t:>width$}")
    }
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let rows = app.rows();
    let f = &app.frame;
    let model = f.models.get(app.model);
    let mut title = vec![Span::styled(
        format!("processes ({})", rows.len()),
        title_style(),
    )];
    if !app.active_filter().is_empty() {
        title.push(Span::styled(
            format!("  filter: {}", app.active_filter()),
            Style::default().add_modifier(Modifier::BOLD),
        ));
    }
    title.push(Span::raw(format!(
        "  sort: {} {}",
        app.sort.name(),
        if app.sort_desc { "▼" } else { "▲" }
    )));
    if let Some(m) = model {
        title.push(Span::raw(format!("  model: {} ({})", m.name, m.params)));
    }
    Paragraph::new(Line::from(title)).render(Rect::new(area.x, area.y, area.width, 1), buf);
    if area.height < 2 {
        return;
    }
    let cols = columns(app, area.width);
    let head: Vec<String> = cols
        .iter()
        .map(|c| {
            let mut t = c.title.clone();
            if c.key == app.sort && c.title != "LOC%" {
                t.push(if app.sort_desc { '▼' } else { '▲' });
            }
            cell(&t, c.width, c.left)
        })
        .collect();
    Paragraph::new(Line::styled(
        head.join(" "),
        Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
    ))
    .render(Rect::new(area.x, area.y + 1, area.width, 1), buf);
    let body = area.height.saturating_sub(2) as usize;
    if body == 0 {
        return;
    }
    let sel = app.selected_index(&rows);
    // Row 0 is "all processes"; scroll so the selection stays visible.
    let total = rows.len() + 1;
    let first = if sel >= body { sel + 1 - body } else { 0 };
    for (i, idx) in (first..total.min(first + body)).enumerate() {
        let r: &ProcRow = if idx == 0 { &f.system } else { rows[idx - 1] };
        let text: Vec<String> = cols
            .iter()
            .map(|c| cell(&(c.cell)(r), c.width, c.left))
            .collect();
        let mut style = Style::default();
        if idx == 0 {
            style = style.add_modifier(Modifier::ITALIC);
        }
        if idx == sel {
            style = style.add_modifier(Modifier::REVERSED);
        }
        let y = area.y + 2 + i as u16;
        Paragraph::new(Line::styled(text.join(" "), style))
            .render(Rect::new(area.x, y, area.width, 1), buf);
    }
    if rows.is_empty() && body >= 2 {
        let msg = if f.processes.is_empty() {
            "no hint faults yet: numa_balancing must be 2 (tiering) and a workload must touch slow-tier memory"
        } else {
            "no process matches the filter (Esc clears it)"
        };
        Paragraph::new(Span::styled(format!("  {msg}"), Style::default().fg(DIM)))
            .render(Rect::new(area.x, area.y + 3, area.width, 1), buf);
    }
}
