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
    ("s / S", "next sort column / reverse the order"),
    ("/", "filter by command name or pid (Enter applies)"),
    ("p", "pause the display (collection goes on)"),
    ("+ / -", "longer / shorter refresh interval"),
    ("m", "next shadow model (table columns, marked thresholds)"),
    ("?", "this help (any key closes it)"),
];

pub fn render(area: Rect, buf: &mut Buffer) {
    let w = area.width.min(72);
    let h = (KEYS.len() as u16 + 6).min(area.height);
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
    lines.push(Line::from(
        " Rates are per second of event time; latency and delta columns",
    ));
    lines.push(Line::from(
        " are since start. Wider terminals add LOC% and RESIDENT PAGES.",
    ));
    Paragraph::new(lines)
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(" numatrace top: keys ")
                .title_style(Style::default().add_modifier(Modifier::BOLD)),
        )
        .render(r, buf);
}
