//! The table: one row per process with hint faults or scanned pages (or,
//! `c`, per cgroup), and a first row for all processes together.
use numa_core::printable::printable;
use ratatui::{
    buffer::Buffer,
    layout::Rect,
    style::{Modifier, Style},
    text::{Line, Span},
    widgets::{Paragraph, Widget},
};

use super::{dim, fmt, title_style};
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

impl Col {
    /// A right-aligned column (numbers).
    fn right(
        title: impl Into<String>,
        width: usize,
        key: SortKey,
        cell: impl Fn(&ProcRow) -> String + 'static,
    ) -> Col {
        Col {
            title: title.into(),
            width,
            key,
            left: false,
            cell: Box::new(cell),
        }
    }

    /// A left-aligned column (text).
    fn left(
        title: impl Into<String>,
        width: usize,
        key: SortKey,
        cell: impl Fn(&ProcRow) -> String + 'static,
    ) -> Col {
        Col {
            left: true,
            ..Col::right(title, width, key, cell)
        }
    }
}

/// The narrowest verdict column: room for `pid_inactive 42s`.
const WHY_MIN: usize = 16;

/// The columns that fit `width`, in display order: the identity and rate
/// columns, then the model's, then latency and the resident pages when
/// wide, and last the verdict in what is left. The verdict comes first:
/// latency and resident pages are shown only with room left for it (the
/// hist pane and the detail view have them too).
fn columns(app: &App, width: u16) -> Vec<Col> {
    let w = width as usize;
    let (wide, wider) = (w >= 110, w >= 130);
    let mut cols = rate_columns(app.by_cgroup, wide, wider);
    cols.extend(model_columns(app));
    let used = |cols: &[Col]| cols.iter().map(|c| c.width + 1).sum::<usize>();
    let latency = latency_columns();
    if w >= used(&cols) + used(&latency) + WHY_MIN {
        cols.extend(latency);
    }
    let resident_w = if wider { 24 } else { 18 };
    // Resident pages are read per process.
    if wide && !app.by_cgroup && w >= used(&cols) + resident_w + 1 + WHY_MIN {
        cols.push(Col::left(
            "RESIDENT PAGES",
            resident_w,
            SortKey::Resident,
            resident,
        ));
    }
    let why = w.saturating_sub(used(&cols)).min(40);
    if why >= WHY_MIN {
        cols.push(Col::left("WHY", why, SortKey::Verdict, |r| {
            r.verdict.clone().unwrap_or_else(|| "-".into())
        }));
    }
    cols
}

/// The row's name: pid and command, or the cgroup's path (the first
/// row's "all processes" in either).
fn identity_columns(by_cgroup: bool, wide: bool) -> Vec<Col> {
    if by_cgroup {
        return vec![Col::left(
            "CGROUP",
            if wide { 28 } else { 20 },
            SortKey::Comm,
            |r| {
                let name = r.cgroup.as_deref().unwrap_or(&r.comm);
                printable(name).into_owned()
            },
        )];
    }
    let pid = |r: &ProcRow| {
        if r.pid == 0 {
            "-".into()
        } else {
            r.pid.to_string()
        }
    };
    vec![
        Col::right("PID", 7, SortKey::Pid, pid),
        Col::left("COMM", if wide { 16 } else { 12 }, SortKey::Comm, |r| {
            printable(&r.comm).into_owned()
        }),
    ]
}

fn rate_columns(by_cgroup: bool, wide: bool, wider: bool) -> Vec<Col> {
    let mut cols = identity_columns(by_cgroup, wide);
    cols.push(Col::right("FLT/s", 7, SortKey::Faults, |r| {
        fmt::rate(r.faults_s)
    }));
    if wider {
        cols.push(Col::right("LOC%", 5, SortKey::Faults, |r| {
            fmt::opt(r.local_pct, |v| format!("{v:.0}"))
        }));
    }
    cols.push(Col::right("PRM/s", 7, SortKey::Promoted, |r| {
        fmt::rate(r.promoted_s)
    }));
    if wide {
        // Of the row's promotions, those demoted again (ping-pong).
        cols.push(Col::right("PP%", 4, SortKey::PingPong, |r| {
            fmt::opt(r.pingpong_pct, |v| format!("{v:.0}"))
        }));
    }
    cols.push(Col::right("RLAT/s", 7, SortKey::RejLatency, |r| {
        fmt::rate(r.rej_latency_s)
    }));
    cols
}

/// The selected model's would-promote rate and agreement.
fn model_columns(app: &App) -> [Col; 2] {
    let model = app.model;
    let short = app
        .frame
        .models
        .get(model)
        .map_or("model".to_owned(), |m| m.short.clone());
    [
        Col::right(format!("{short}/s"), 8, SortKey::Model, move |r| {
            fmt::rate(r.model_s.get(model).copied().unwrap_or(0.0))
        }),
        Col::right("AGR%", 5, SortKey::Agree, move |r| {
            fmt::opt(r.agree_pct.get(model).copied().flatten(), |v| {
                format!("{v:.0}")
            })
        }),
    ]
}

fn latency_columns() -> [Col; 3] {
    [
        Col::right("P50", 6, SortKey::P50, |r| fmt::opt(r.lat_p50_ms, fmt::ms)),
        Col::right("P99", 6, SortKey::P99, |r| fmt::opt(r.lat_p99_ms, fmt::ms)),
        Col::right("ΔFLT", 6, SortKey::Delta, |r| {
            fmt::opt(r.delta_p50, fmt::count)
        }),
    ]
}

fn cell(text: &str, width: usize, left: bool) -> String {
    let t = fmt::fit(text, width);
    if left {
        format!("{t:<width$}")
    } else {
        format!("{t:>width$}")
    }
}

/// "processes (N)" (of a cgroup) or "cgroups (N)", the rates' unit, the
/// active filter, the sort and the model.
fn title_line(app: &App, n: usize) -> Line<'static> {
    let what = match (&app.in_cgroup, app.by_cgroup) {
        (_, true) => format!("cgroups ({n})"),
        (Some(c), false) => format!("processes ({n}) of {}", printable(c)),
        (None, false) => format!("processes ({n})"),
    };
    let mut title = vec![
        Span::styled(what, title_style()),
        // Every rate column counts folios, one per hint fault.
        dim("  folios/s"),
    ];
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
    if let Some(m) = app.frame.models.get(app.model) {
        title.push(Span::raw(format!("  model: {} ({})", m.name, m.params)));
    }
    Line::from(title)
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let rows = app.rows();
    let f = &app.frame;
    let title = title_line(app, rows.len());
    Paragraph::new(title).render(Rect::new(area.x, area.y, area.width, 1), buf);
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
        let listed = if app.by_cgroup {
            &f.cgroups
        } else {
            &f.processes
        };
        let msg = if listed.is_empty() {
            "no hint faults yet: numa_balancing must be 2 (tiering) and a workload must touch slow-tier memory"
        } else if app.in_cgroup.is_some() {
            "none of this cgroup's processes matches the filter (Esc: back to the cgroups)"
        } else {
            "no row matches the filter (Esc clears it)"
        };
        Paragraph::new(dim(format!("  {msg}")))
            .render(Rect::new(area.x, area.y + 3, area.width, 1), buf);
    }
}
