//! The `?` overlay.
use ratatui::{
    buffer::Buffer,
    layout::Rect,
    style::{Modifier, Style},
    text::Line,
    widgets::{Block, Borders, Clear, Paragraph, Widget},
};

pub const KEYS: &[(&str, &str)] = &[
    ("q, Ctrl-C", "quit"),
    ("↑ ↓  j k", "select a process (top row: all processes)"),
    ("PgUp PgDn g G", "page, first, last"),
    ("Enter", "process detail: VMAs, scan coverage, heat strip"),
    ("Esc", "back / clear the filter"),
    ("c", "cgroups: one row each (Enter lists its processes)"),
    ("s / S", "next sort column / reverse the order"),
    ("/", "filter by command, cgroup path or pid (Enter applies)"),
    ("p", "pause the display (collection goes on)"),
    ("+ / -", "longer / shorter refresh interval"),
    ("m", "next shadow model (table columns, marked thresholds)"),
    ("?", "this help (any key closes it)"),
];

/// What the figures mean, below the keys.
const NOTES: &[&str] = &[
    " Rates are per second of event time; latency and delta columns",
    " are since start. Wider terminals add LOC% and RESIDENT PAGES.",
    " Units: folios, one per hint fault (a THP is one), unless marked",
    " pg or vmstat: pages, as vmstat counts them (a THP is 512).",
    " promoted pg: pages moved to the top tier (pgpromote_success's).",
];

pub fn render(area: Rect, buf: &mut Buffer) {
    let w = area.width.min(72);
    let h = (KEYS.len() + NOTES.len() + 4).min(usize::from(area.height)) as u16;
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    Clear.render(r, buf);
    let mut lines: Vec<Line> = KEYS
        .iter()
        .map(|(k, what)| Line::from(format!(" {k:<14} {what}")))
        .collect();
    lines.push(Line::from(""));
    lines.extend(NOTES.iter().map(|l| Line::from(*l)));
    Paragraph::new(lines)
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(" numatrace top: keys ")
                .title_style(Style::default().add_modifier(Modifier::BOLD)),
        )
        .render(r, buf);
}
