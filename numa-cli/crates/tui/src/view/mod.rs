//! Drawing: `impl Widget for &App`, one module per pane. Views read the
//! app and its frame; they never change state.
pub mod detail;
pub mod fmt;
pub mod header;
pub mod help;
pub mod hist;
pub mod rates;
pub mod table;

use std::borrow::Cow;

use ratatui::{
    buffer::Buffer,
    layout::Rect,
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Paragraph, Widget},
};

use super::app::{App, View};

pub const GREEN: Color = Color::Green;
pub const RED: Color = Color::Red;
pub const DIM: Color = Color::DarkGray;

pub fn title_style() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

/// Secondary text: notes, separators, empty-state messages.
pub fn dim(text: impl Into<Cow<'static, str>>) -> Span<'static> {
    Span::styled(text, Style::default().fg(DIM))
}

/// A pane's title line: its name in bold, then a dim note.
pub fn titled(name: &'static str, note: impl Into<Cow<'static, str>>) -> Line<'static> {
    Line::from(vec![Span::styled(name, title_style()), dim(note)])
}

/// The panes' areas for a terminal of `area`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Areas {
    pub header: Rect,
    pub rates: Rect,
    /// Table (or the detail view, which also takes `hist`).
    pub table: Rect,
    pub hist: Rect,
    pub status: Rect,
}

pub fn layout(area: Rect, app: &App) -> Areas {
    let header_h = header::height(app, area.width).min(area.height);
    let status_h = u16::from(area.height > header_h);
    let rest = area.height - header_h - status_h;
    let rates_h = rates::height(app, area.width).min(rest / 2);
    let rest2 = rest - rates_h;
    let hist_h = if rest2 >= 12 {
        (rest2 / 3).clamp(6, 16)
    } else {
        0
    };
    let table_h = rest2 - hist_h;
    let mut y = area.y;
    let mut take = |h: u16| {
        let r = Rect::new(area.x, y, area.width, h);
        y += h;
        r
    };
    Areas {
        header: take(header_h),
        rates: take(rates_h),
        table: take(table_h),
        hist: take(hist_h),
        status: take(status_h),
    }
}

impl Widget for &App {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let a = layout(area, self);
        header::render(self, a.header, buf);
        rates::render(self, a.rates, buf);
        match self.view {
            View::Table => {
                table::render(self, a.table, buf);
                hist::render(self, a.hist, buf);
            }
            View::Detail(pid) => {
                let r = Rect::new(
                    a.table.x,
                    a.table.y,
                    a.table.width,
                    a.table.height + a.hist.height,
                );
                detail::render(self, pid, r, buf);
            }
        }
        status(self, a.status, buf);
        if self.help {
            help::render(area, buf);
        }
        no_terminal_controls(area, buf);
    }
}

/// What a cell shows instead of a character the terminal would act on.
const HIDDEN_CELL: &str = "\u{fffd}";

/// Names from other processes reach the panes through
/// [`numa_core::printable::printable`], escaped visibly; this is the net
/// for any other string: no cell of the screen holds a character the
/// terminal would act on (ratatui's spans pass them through).
fn no_terminal_controls(area: Rect, buf: &mut Buffer) {
    for y in area.top()..area.bottom() {
        for x in area.left()..area.right() {
            if let Some(cell) = buf.cell_mut((x, y)) {
                if numa_core::printable::printable(cell.symbol()) != cell.symbol() {
                    cell.set_symbol(HIDDEN_CELL);
                }
            }
        }
    }
}

fn status(app: &App, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let key = Style::default().add_modifier(Modifier::REVERSED);
    let mut spans = Vec::new();
    if let Some(e) = &app.editing {
        spans.push(Span::styled(" filter: ", key));
        spans.push(Span::raw(format!("{e}_")));
        spans.push(Span::styled(" Enter ", key));
        spans.push(Span::raw(" apply "));
        spans.push(Span::styled(" Esc ", key));
        spans.push(Span::raw(" cancel"));
    } else {
        let refresh = format!(" refresh {}s ", app.refresh().as_secs_f64());
        for (k, what) in [
            ("q", " quit "),
            ("↑↓", " select "),
            ("⏎", " detail "),
            ("s/S", " sort "),
            ("/", " filter "),
            ("p", if app.paused { " resume " } else { " pause " }),
            ("+-", refresh.as_str()),
            ("m", " model "),
            ("?", " help "),
            // Last: cut first on a narrow terminal, and `?` lists it.
            (
                "c",
                if app.by_cgroup {
                    " processes "
                } else {
                    " cgroups "
                },
            ),
        ] {
            spans.push(Span::styled(k.to_owned(), key));
            spans.push(Span::raw(what.to_owned()));
        }
    }
    let mut right = Vec::new();
    if app.paused {
        right.push(Span::styled(
            " PAUSED ",
            Style::default().fg(Color::Black).bg(Color::Yellow),
        ));
    }
    if let Some(why) = &app.frame.ended {
        right.push(Span::styled(
            format!(" ended: {why} "),
            Style::default().fg(Color::Black).bg(Color::Cyan),
        ));
    }
    let right_w: u16 = right.iter().map(|s| s.width() as u16).sum();
    Paragraph::new(Line::from(spans)).render(area, buf);
    if right_w > 0 && right_w < area.width {
        let r = Rect::new(area.x + area.width - right_w, area.y, right_w, 1);
        Paragraph::new(Line::from(right)).render(r, buf);
    }
}

/// The screen `app` draws at `width` x `height`, as text lines.
pub fn screen_text(app: &App, width: u16, height: u16) -> Vec<String> {
    use ratatui::{buffer::Buffer, layout::Rect, widgets::Widget};
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    app.render(area, &mut buf);
    (0..height)
        .map(|y| {
            let line: String = (0..width)
                .filter_map(|x| buf.cell((x, y)).map(|c| c.symbol().to_owned()))
                .collect();
            line.trim_end().to_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests;
