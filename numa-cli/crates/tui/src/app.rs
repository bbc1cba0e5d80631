//! The UI state. Only [`App::update`] changes it; the views only read it.
use std::time::Duration;

use super::{
    action::{Action, InputMode},
    agg::Focus,
    frame::{Frame, ProcRow},
};

/// Refresh intervals `+`/`-` step through.
pub const REFRESH_STEPS: [f64; 7] = [0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Pid,
    Comm,
    Faults,
    Promoted,
    PingPong,
    RejLatency,
    Model,
    Agree,
    P50,
    P99,
    Delta,
    Resident,
    Verdict,
}

impl SortKey {
    pub const ALL: [SortKey; 13] = [
        SortKey::Pid,
        SortKey::Comm,
        SortKey::Faults,
        SortKey::Promoted,
        SortKey::PingPong,
        SortKey::RejLatency,
        SortKey::Model,
        SortKey::Agree,
        SortKey::P50,
        SortKey::P99,
        SortKey::Delta,
        SortKey::Resident,
        SortKey::Verdict,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Pid => "pid",
            SortKey::Comm => "comm",
            SortKey::Faults => "faults/s",
            SortKey::Promoted => "promoted/s",
            SortKey::PingPong => "ping-pong %",
            SortKey::RejLatency => "rejected latency/s",
            SortKey::Model => "model would/s",
            SortKey::Agree => "agreement",
            SortKey::P50 => "latency p50",
            SortKey::P99 => "latency p99",
            SortKey::Delta => "fault-count delta",
            SortKey::Resident => "resident pages",
            SortKey::Verdict => "verdict",
        }
    }

    fn next(self) -> SortKey {
        let i = SortKey::ALL.iter().position(|k| *k == self).unwrap_or(0);
        SortKey::ALL[(i + 1) % SortKey::ALL.len()]
    }

    /// Text columns sort ascending by default, numbers descending.
    fn default_desc(self) -> bool {
        !matches!(self, SortKey::Pid | SortKey::Comm | SortKey::Verdict)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Table,
    Detail(u32),
}

#[derive(Debug)]
pub struct App {
    pub frame: Frame,
    /// The newest frame received while paused.
    pub held: Option<Box<Frame>>,
    pub paused: bool,
    /// Selected process; `None` is the "all processes" row.
    pub selected: Option<u32>,
    pub sort: SortKey,
    pub sort_desc: bool,
    /// The applied filter (substring of comm, or pid prefix).
    pub filter: String,
    /// The filter being typed.
    pub editing: Option<String>,
    pub view: View,
    /// The table lists cgroups, not processes.
    pub by_cgroup: bool,
    /// The selected cgroup's path in the cgroup table.
    pub selected_cgroup: Option<String>,
    /// The process table lists only this cgroup's processes.
    pub in_cgroup: Option<String>,
    pub help: bool,
    pub refresh_idx: usize,
    pub model: usize,
    pub quit: bool,
    /// Rows of the table last drawn (for page up/down).
    pub page: usize,
    /// Where a running `numatrace promote` publishes its state; read once
    /// per frame (`None`: not looked for, as in tests).
    pub promoter_source: Option<numa_host::promoter_state::Source>,
    /// The promoter as last read.
    pub promoter: Option<numa_host::promoter_state::Reading>,
}

impl Default for App {
    /// Does not look for a promoter (deterministic for tests).
    fn default() -> Self {
        App {
            promoter_source: None,
            ..App::new(Duration::from_secs(1))
        }
    }
}

fn sort_value(r: &ProcRow, key: SortKey, model: usize) -> f64 {
    let o = |v: Option<f64>| v.unwrap_or(-1.0);
    match key {
        SortKey::Pid => f64::from(r.pid),
        SortKey::Comm | SortKey::Verdict => 0.0,
        SortKey::Faults => r.faults_s,
        SortKey::Promoted => r.promoted_s,
        SortKey::PingPong => o(r.pingpong_pct),
        SortKey::RejLatency => r.rej_latency_s,
        SortKey::Model => r.model_s.get(model).copied().unwrap_or(0.0),
        SortKey::Agree => o(r.agree_pct.get(model).copied().flatten()),
        SortKey::P50 => o(r.lat_p50_ms),
        SortKey::P99 => o(r.lat_p99_ms),
        SortKey::Delta => o(r.delta_p50.map(|v| v as f64)),
        SortKey::Resident => r
            .resident
            .as_ref()
            .map_or(-1.0, |v| v.iter().map(|(_, p)| *p as f64).sum()),
    }
}

/// Rows of `rows` in cgroup `only` (when given) matching `filter`
/// (case-insensitive substring of the command name or the cgroup path, or
/// a prefix of the pid), sorted by `key`.
pub fn visible<'a>(
    rows: &'a [ProcRow],
    only: Option<&str>,
    filter: &str,
    (key, desc, model): (SortKey, bool, usize),
) -> Vec<&'a ProcRow> {
    let f = filter.trim().to_lowercase();
    let matches = |r: &ProcRow| {
        let path = r.cgroup.as_deref().unwrap_or_default();
        f.is_empty()
            || r.comm.to_lowercase().contains(&f)
            || path.to_lowercase().contains(&f)
            || r.pid.to_string().starts_with(&f)
    };
    let mut v: Vec<&ProcRow> = rows
        .iter()
        .filter(|r| only.is_none_or(|c| r.cgroup.as_deref() == Some(c)))
        .filter(|r| matches(r))
        .collect();
    v.sort_by(|a, b| {
        let ord = if key == SortKey::Comm {
            (&a.comm, &a.cgroup).cmp(&(&b.comm, &b.cgroup))
        } else if key == SortKey::Verdict {
            a.verdict.cmp(&b.verdict)
        } else {
            sort_value(a, key, model).total_cmp(&sort_value(b, key, model))
        };
        let ord = if desc { ord.reverse() } else { ord };
        ord.then(a.pid.cmp(&b.pid)).then(a.cgroup.cmp(&b.cgroup))
    });
    v
}

impl App {
    pub fn new(refresh: Duration) -> Self {
        let secs = refresh.as_secs_f64();
        let refresh_idx = REFRESH_STEPS
            .iter()
            .position(|s| *s >= secs - 1e-9)
            .unwrap_or(REFRESH_STEPS.len() - 1);
        App {
            frame: Frame::default(),
            held: None,
            paused: false,
            selected: None,
            sort: SortKey::Faults,
            sort_desc: true,
            filter: String::new(),
            editing: None,
            view: View::Table,
            by_cgroup: false,
            selected_cgroup: None,
            in_cgroup: None,
            help: false,
            refresh_idx,
            model: 0,
            quit: false,
            page: 10,
            promoter_source: Some(numa_host::promoter_state::Source::from_env()),
            promoter: None,
        }
    }

    pub fn refresh(&self) -> Duration {
        Duration::from_secs_f64(REFRESH_STEPS[self.refresh_idx.min(REFRESH_STEPS.len() - 1)])
    }

    pub fn mode(&self) -> InputMode {
        if self.help {
            InputMode::Help
        } else if self.editing.is_some() {
            InputMode::Filter
        } else {
            InputMode::Normal
        }
    }

    /// The filter in effect (the one being typed applies live).
    pub fn active_filter(&self) -> &str {
        self.editing.as_deref().unwrap_or(&self.filter)
    }

    /// The table's rows: the cgroups, or the processes (of the cgroup
    /// opened), filtered and sorted.
    pub fn rows(&self) -> Vec<&ProcRow> {
        let (rows, only) = if self.by_cgroup {
            (&self.frame.cgroups, None)
        } else {
            (&self.frame.processes, self.in_cgroup.as_deref())
        };
        let order = (self.sort, self.sort_desc, self.model);
        visible(rows, only, self.active_filter(), order)
    }

    /// Whether `r` is the selected row of the table shown.
    fn is_selected(&self, r: &ProcRow) -> bool {
        if self.by_cgroup {
            self.selected_cgroup.is_some() && r.cgroup == self.selected_cgroup
        } else {
            self.selected == Some(r.pid)
        }
    }

    /// A row of the table shown is selected (not "all processes").
    fn has_selection(&self) -> bool {
        if self.by_cgroup {
            self.selected_cgroup.is_some()
        } else {
            self.selected.is_some()
        }
    }

    /// What the aggregator should detail.
    pub fn focus(&self) -> Focus {
        Focus {
            hist_pid: match self.view {
                View::Detail(pid) => Some(pid),
                View::Table if self.by_cgroup => None,
                View::Table => self.selected,
            },
            detail_pid: match self.view {
                View::Detail(pid) => Some(pid),
                View::Table => None,
            },
        }
    }

    /// Index of the selection in the table: 0 is "all processes".
    pub fn selected_index(&self, rows: &[&ProcRow]) -> usize {
        rows.iter()
            .position(|r| self.is_selected(r))
            .map_or(0, |i| i + 1)
    }

    fn select_index(&mut self, i: usize) {
        let row = {
            let rows = self.rows();
            // Row i of the table is rows[i - 1]: none for 0 ("all").
            let at = i.min(rows.len()).checked_sub(1).filter(|_| i > 0);
            at.and_then(|at| rows.get(at))
                .map(|r| (r.pid, r.cgroup.clone()))
        };
        if self.by_cgroup {
            self.selected_cgroup = row.and_then(|(_, c)| c);
        } else {
            self.selected = row.map(|(pid, _)| pid);
        }
    }

    fn move_by(&mut self, delta: isize) {
        let (cur, len) = {
            let rows = self.rows();
            (self.selected_index(&rows), rows.len())
        };
        let next = (cur as isize + delta).clamp(0, len as isize) as usize;
        self.select_index(next);
    }

    /// A selected process that left the table falls back to "all"; a
    /// detail view stays open (it shows the process's last state).
    fn fix_selection(&mut self) {
        if let Some(pid) = self.selected {
            if !self.frame.processes.iter().any(|r| r.pid == pid) {
                self.selected = None;
            }
        }
        if let Some(c) = &self.selected_cgroup {
            if !self
                .frame
                .cgroups
                .iter()
                .any(|r| r.cgroup.as_ref() == Some(c))
            {
                self.selected_cgroup = None;
            }
        }
    }

    /// A new frame: shown now, or held while paused.
    fn sample(&mut self, frame: Box<Frame>) {
        if self.paused {
            self.held = Some(frame);
        } else {
            self.frame = *frame;
            self.fix_selection();
            self.promoter = self.promoter_source.as_ref().map(|s| s.read());
        }
    }

    /// Accepts the filter being edited, opens the selected process, or
    /// lists the selected cgroup's processes.
    fn enter(&mut self) {
        if self.editing.is_some() {
            self.accept_filter();
        } else if self.by_cgroup {
            if let Some(c) = self.selected_cgroup.clone() {
                self.in_cgroup = Some(c);
                self.by_cgroup = false;
                self.selected = None;
                self.filter.clear();
            }
        } else if let (View::Table, Some(pid)) = (self.view, self.selected) {
            self.view = View::Detail(pid);
        }
    }

    /// Back to the table, then from a cgroup's processes to the cgroups,
    /// then clears the filter.
    fn back(&mut self) {
        if self.view != View::Table {
            self.view = View::Table;
        } else if self.in_cgroup.take().is_some() {
            self.by_cgroup = true;
        } else if !self.filter.is_empty() {
            self.filter.clear();
        }
    }

    /// Switches the table between processes and cgroups.
    fn toggle_cgroups(&mut self) {
        self.by_cgroup = !self.by_cgroup;
        self.in_cgroup = None;
        self.view = View::Table;
    }

    fn accept_filter(&mut self) {
        if let Some(e) = self.editing.take() {
            self.filter = e.trim().to_owned();
        }
        // Keep the selection visible: first match when it was filtered out.
        let visible = if self.has_selection() {
            self.selected_index(&self.rows()) > 0
        } else {
            self.filter.is_empty()
        };
        if !visible {
            self.select_index(1);
        }
    }

    /// Unpausing shows the frame held while paused.
    fn toggle_pause(&mut self) {
        self.paused = !self.paused;
        if !self.paused {
            if let Some(f) = self.held.take() {
                self.frame = *f;
                self.fix_selection();
            }
        }
    }

    pub fn update(&mut self, action: Action) {
        match action {
            Action::Quit => self.quit = true,
            Action::Sample(frame) => self.sample(frame),
            Action::Up => self.move_by(-1),
            Action::Down => self.move_by(1),
            Action::PageUp => self.move_by(-(self.page.max(1) as isize)),
            Action::PageDown => self.move_by(self.page.max(1) as isize),
            Action::Home => self.selected = None,
            Action::End => self.move_by(isize::MAX / 2),
            Action::Enter => self.enter(),
            Action::Back => self.back(),
            Action::NextSort => {
                self.sort = self.sort.next();
                self.sort_desc = self.sort.default_desc();
            }
            Action::ToggleSortDir => self.sort_desc = !self.sort_desc,
            Action::StartFilter => {
                self.view = View::Table;
                self.editing = Some(self.filter.clone());
            }
            Action::FilterChar(c) => {
                if let Some(e) = &mut self.editing {
                    if e.chars().count() < 32 {
                        e.push(c);
                    }
                }
            }
            Action::FilterBackspace => {
                if let Some(e) = &mut self.editing {
                    e.pop();
                }
            }
            Action::FilterAccept => self.accept_filter(),
            Action::FilterCancel => self.editing = None,
            Action::TogglePause => self.toggle_pause(),
            Action::SlowerRefresh => {
                self.refresh_idx = (self.refresh_idx + 1).min(REFRESH_STEPS.len() - 1);
            }
            Action::FasterRefresh => self.refresh_idx = self.refresh_idx.saturating_sub(1),
            Action::NextModel => {
                let n = self.frame.models.len().max(1);
                self.model = (self.model + 1) % n;
            }
            Action::ToggleHelp => self.help = !self.help,
            Action::ToggleCgroups => self.toggle_cgroups(),
            Action::Redraw => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pid: u32, comm: &str, faults_s: f64) -> ProcRow {
        ProcRow {
            pid,
            comm: comm.into(),
            faults_s,
            model_s: vec![faults_s / 2.0, 1.0],
            agree_pct: vec![Some(50.0), None],
            lat_p50_ms: Some(faults_s / 10.0),
            ..ProcRow::default()
        }
    }

    fn app() -> App {
        let mut a = App::default();
        let frame = Frame {
            processes: vec![
                row(10, "hot-chunks", 500.0),
                row(22, "postgres", 900.0),
                row(3, "kswapd0", 5.0),
            ],
            models: vec![Default::default(), Default::default()],
            ..Frame::default()
        };
        a.update(Action::Sample(Box::new(frame)));
        a
    }

    fn pids(a: &App) -> Vec<u32> {
        a.rows().iter().map(|r| r.pid).collect()
    }

    #[test]
    fn sorts_by_every_column_and_direction() {
        let mut a = app();
        assert_eq!(pids(&a), vec![22, 10, 3]);
        a.update(Action::ToggleSortDir);
        assert_eq!(pids(&a), vec![3, 10, 22]);
        // s cycles to the next column: faults -> promoted (all 0: by pid).
        a.update(Action::NextSort);
        assert_eq!(a.sort, SortKey::Promoted);
        assert!(a.sort_desc);
        assert_eq!(pids(&a), vec![3, 10, 22]);
        // All the way round to pid (ascending) and comm.
        while a.sort != SortKey::Pid {
            a.update(Action::NextSort);
        }
        assert!(!a.sort_desc);
        assert_eq!(pids(&a), vec![3, 10, 22]);
        a.update(Action::NextSort);
        assert_eq!(a.sort, SortKey::Comm);
        assert_eq!(pids(&a), vec![10, 3, 22]);
        // The model column follows the model `m` selects.
        a.sort = SortKey::Model;
        a.sort_desc = true;
        assert_eq!(pids(&a), vec![22, 10, 3]);
        a.update(Action::NextModel);
        assert_eq!(a.model, 1);
        assert_eq!(pids(&a), vec![3, 10, 22]); // all 1.0: by pid
        a.update(Action::NextModel);
        assert_eq!(a.model, 0);
    }

    #[test]
    fn filters_by_name_or_pid_and_keeps_selection_visible() {
        let mut a = app();
        a.update(Action::Down);
        assert_eq!(a.selected, Some(22));
        a.update(Action::StartFilter);
        for c in "HOT".chars() {
            a.update(Action::FilterChar(c));
        }
        // Applies while typing.
        assert_eq!(pids(&a), vec![10]);
        a.update(Action::FilterAccept);
        assert_eq!(a.filter, "HOT");
        assert_eq!(a.selected, Some(10));
        // By pid prefix.
        a.update(Action::StartFilter);
        a.update(Action::FilterBackspace);
        a.update(Action::FilterBackspace);
        a.update(Action::FilterBackspace);
        a.update(Action::FilterChar('2'));
        a.update(Action::FilterAccept);
        assert_eq!(pids(&a), vec![22]);
        // Esc clears the filter.
        a.update(Action::Back);
        assert_eq!(pids(&a).len(), 3);
        // Cancel keeps the old filter.
        a.update(Action::StartFilter);
        a.update(Action::FilterChar('x'));
        a.update(Action::FilterCancel);
        assert_eq!(a.filter, "");
    }

    #[test]
    fn selection_detail_pause_refresh_help() {
        let mut a = app();
        a.update(Action::Up);
        assert_eq!(a.selected, None);
        a.update(Action::Enter); // "all processes" has no detail
        assert_eq!(a.view, View::Table);
        a.update(Action::End);
        assert_eq!(a.selected, Some(3));
        a.update(Action::Down);
        assert_eq!(a.selected, Some(3));
        a.update(Action::Enter);
        assert_eq!(a.view, View::Detail(3));
        assert_eq!(
            a.focus(),
            Focus {
                hist_pid: Some(3),
                detail_pid: Some(3)
            }
        );
        a.update(Action::Back);
        assert_eq!(a.view, View::Table);
        assert_eq!(a.focus().detail_pid, None);
        // Pause holds new frames back until resumed.
        a.update(Action::TogglePause);
        a.update(Action::Sample(Box::new(Frame {
            seq: 9,
            ..Frame::default()
        })));
        assert_ne!(a.frame.seq, 9);
        a.update(Action::TogglePause);
        assert_eq!(a.frame.seq, 9);
        // The selected process left: back to "all".
        assert_eq!(a.selected, None);
        assert_eq!(a.refresh(), Duration::from_secs(1));
        a.update(Action::SlowerRefresh);
        assert_eq!(a.refresh(), Duration::from_secs(2));
        for _ in 0..10 {
            a.update(Action::FasterRefresh);
        }
        assert_eq!(a.refresh(), Duration::from_millis(250));
        a.update(Action::ToggleHelp);
        assert_eq!(a.mode(), InputMode::Help);
        a.update(Action::ToggleHelp);
        assert_eq!(a.mode(), InputMode::Normal);
        a.update(Action::Quit);
        assert!(a.quit);
    }

    #[test]
    fn the_cgroup_table_lists_cgroups_and_enter_lists_one_s_processes() {
        let mut a = app();
        let in_cg = |pid: u32, path: &str| {
            let mut r = row(pid, "w", 1.0);
            r.cgroup = Some(path.into());
            r
        };
        let group = |path: &str, faults_s: f64| ProcRow {
            cgroup: Some(path.into()),
            ..row(0, "", faults_s)
        };
        a.update(Action::Sample(Box::new(Frame {
            processes: vec![in_cg(10, "/a"), in_cg(11, "/b"), in_cg(12, "/a")],
            cgroups: vec![group("/a", 2.0), group("/b", 9.0)],
            ..Frame::default()
        })));
        let paths =
            |a: &App| -> Vec<String> { a.rows().iter().filter_map(|r| r.cgroup.clone()).collect() };
        a.update(Action::ToggleCgroups);
        assert_eq!(paths(&a), ["/b", "/a"]);
        assert_eq!(a.focus().hist_pid, None);
        a.update(Action::Down);
        a.update(Action::Down);
        assert_eq!(a.selected_cgroup.as_deref(), Some("/a"));
        assert_eq!(a.selected_index(&a.rows()), 2);
        // Enter: the processes of /a only; Esc: back to the cgroups.
        a.update(Action::Enter);
        assert!(!a.by_cgroup);
        assert_eq!(pids(&a), [10, 12]);
        a.update(Action::Down);
        a.update(Action::Enter);
        assert_eq!(a.view, View::Detail(10));
        a.update(Action::Back);
        a.update(Action::Back);
        assert!(a.by_cgroup && a.in_cgroup.is_none());
        assert_eq!(a.selected_cgroup.as_deref(), Some("/a"));
        // The filter matches cgroup paths; a cgroup gone loses its selection.
        a.update(Action::StartFilter);
        a.update(Action::FilterChar('b'));
        a.update(Action::FilterAccept);
        assert_eq!(paths(&a), ["/b"]);
        assert_eq!(a.selected_cgroup.as_deref(), Some("/b"));
        a.update(Action::Sample(Box::default()));
        assert_eq!(a.selected_cgroup, None);
        a.update(Action::ToggleCgroups);
        assert!(!a.by_cgroup);
    }
}
