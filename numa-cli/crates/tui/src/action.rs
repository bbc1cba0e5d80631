//! Inputs of the UI loop and the actions they map to. Only
//! [`super::app::App::update`] acts on an [`Action`].
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::frame::Frame;

/// Everything the UI loop reacts to (a closed set).
#[derive(Debug)]
pub enum UiEvent {
    Key(KeyEvent),
    Resize,
    /// A new frame from the aggregator.
    Sample(Box<Frame>),
    /// The process got SIGINT/SIGTERM/SIGHUP.
    Signal(&'static str),
    /// Nothing happened within the poll timeout.
    Tick,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Quit,
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Enter,
    Back,
    NextSort,
    ToggleSortDir,
    StartFilter,
    FilterChar(char),
    FilterBackspace,
    FilterAccept,
    FilterCancel,
    TogglePause,
    SlowerRefresh,
    FasterRefresh,
    NextModel,
    ToggleHelp,
    /// The table lists cgroups, or processes again.
    ToggleCgroups,
    Sample(Box<Frame>),
    Redraw,
}

/// How keys are read: normal, typing a filter, or the help overlay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputMode {
    Normal,
    Filter,
    Help,
}

/// Maps a key to an action in the given input mode.
pub fn key_action(key: KeyEvent, mode: InputMode) -> Option<Action> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('d')) {
        return Some(Action::Quit);
    }
    match mode {
        InputMode::Help => Some(match key.code {
            KeyCode::Char('q') => Action::Quit,
            _ => Action::ToggleHelp,
        }),
        InputMode::Filter => match key.code {
            KeyCode::Enter => Some(Action::FilterAccept),
            KeyCode::Esc => Some(Action::FilterCancel),
            KeyCode::Backspace => Some(Action::FilterBackspace),
            KeyCode::Char(c) if !ctrl => Some(Action::FilterChar(c)),
            KeyCode::Up => Some(Action::Up),
            KeyCode::Down => Some(Action::Down),
            _ => None,
        },
        InputMode::Normal => match key.code {
            KeyCode::Char('q') => Some(Action::Quit),
            KeyCode::Up | KeyCode::Char('k') => Some(Action::Up),
            KeyCode::Down | KeyCode::Char('j') => Some(Action::Down),
            KeyCode::PageUp => Some(Action::PageUp),
            KeyCode::PageDown => Some(Action::PageDown),
            KeyCode::Home | KeyCode::Char('g') => Some(Action::Home),
            KeyCode::End | KeyCode::Char('G') => Some(Action::End),
            KeyCode::Enter => Some(Action::Enter),
            KeyCode::Esc | KeyCode::Backspace => Some(Action::Back),
            KeyCode::Char('s') => Some(Action::NextSort),
            KeyCode::Char('S') => Some(Action::ToggleSortDir),
            KeyCode::Char('/') => Some(Action::StartFilter),
            KeyCode::Char('p') | KeyCode::Char(' ') => Some(Action::TogglePause),
            KeyCode::Char('+') | KeyCode::Char('=') => Some(Action::SlowerRefresh),
            KeyCode::Char('-') | KeyCode::Char('_') => Some(Action::FasterRefresh),
            KeyCode::Char('m') => Some(Action::NextModel),
            KeyCode::Char('c') => Some(Action::ToggleCgroups),
            KeyCode::Char('?') | KeyCode::Char('h') | KeyCode::F(1) => Some(Action::ToggleHelp),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    #[test]
    fn keys_map_per_mode() {
        use InputMode::*;
        assert_eq!(
            key_action(k(KeyCode::Char('q')), Normal),
            Some(Action::Quit)
        );
        assert_eq!(
            key_action(k(KeyCode::Char('j')), Normal),
            Some(Action::Down)
        );
        assert_eq!(
            key_action(k(KeyCode::Char('S')), Normal),
            Some(Action::ToggleSortDir)
        );
        // In the filter, letters are text, q included.
        assert_eq!(
            key_action(k(KeyCode::Char('q')), Filter),
            Some(Action::FilterChar('q'))
        );
        assert_eq!(
            key_action(k(KeyCode::Esc), Filter),
            Some(Action::FilterCancel)
        );
        // Any key closes help; q still quits.
        assert_eq!(
            key_action(k(KeyCode::Char('x')), Help),
            Some(Action::ToggleHelp)
        );
        assert_eq!(key_action(k(KeyCode::Char('q')), Help), Some(Action::Quit));
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(key_action(ctrl_c, Filter), Some(Action::Quit));
    }
}
