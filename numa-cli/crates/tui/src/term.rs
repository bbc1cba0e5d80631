//! The terminal: raw mode + alternate screen in, and back out on every exit
//! path (normal return, error, signal, panic). The panic hook restores the
//! terminal first, so the panic message lands on the normal screen, then
//! chains to the previous hook (ratatui's `init` does the same).
use std::{
    io::{self, Stdout},
    sync::{
        atomic::{AtomicBool, Ordering},
        Once,
    },
    time::Duration,
};

use anyhow::Result;
use crossterm::{
    cursor,
    event::{self, Event as CtEvent},
    execute,
    terminal::{self, EnterAlternateScreen, LeaveAlternateScreen},
};
use ratatui::{backend::Backend, Terminal};

use super::{
    action::{key_action, Action, UiEvent},
    agg::Focus,
    app::App,
};

static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Leaves the alternate screen and raw mode; idempotent, safe from a hook.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = terminal::disable_raw_mode();
        let _ = execute!(io::stdout(), LeaveAlternateScreen, cursor::Show);
    }
}

pub fn is_active() -> bool {
    ACTIVE.load(Ordering::SeqCst)
}

fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}

/// Restores the terminal when dropped (error returns unwind through it).
pub struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}

/// Enters raw mode and the alternate screen.
pub fn enter() -> Result<(Terminal<ratatui::backend::CrosstermBackend<Stdout>>, Guard)> {
    install_panic_hook();
    terminal::enable_raw_mode()?;
    ACTIVE.store(true, Ordering::SeqCst);
    let guard = Guard;
    execute!(io::stdout(), EnterAlternateScreen, cursor::Hide)?;
    let backend = ratatui::backend::CrosstermBackend::new(io::stdout());
    // A serial console nobody sized reports 0x0: draw 80x24 there.
    let terminal = match terminal::size() {
        Ok((w, h)) if w > 0 && h > 0 => Terminal::new(backend)?,
        _ => Terminal::with_options(
            backend,
            ratatui::TerminalOptions {
                viewport: ratatui::Viewport::Fixed(ratatui::layout::Rect::new(0, 0, 80, 24)),
            },
        )?,
    };
    Ok((terminal, guard))
}

/// Waits up to `timeout` for stdin: `Some(true)` readable, `Some(false)`
/// nothing, `None` hung up (its tmux, ssh or xterm went away; the shell may
/// not pass SIGHUP on).
fn wait_stdin(timeout: Duration) -> Option<bool> {
    let mut fds = libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut fds, 1, ms) };
    if n == 1 && fds.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        return None;
    }
    Some(n == 1)
}

/// Reads one input event, waiting at most `timeout`. A hung-up terminal
/// reads as SIGHUP: crossterm would spin on its endless EOF, so with a tty
/// on stdin the waiting is done here and crossterm only ever polls with a
/// zero timeout (which still picks up SIGWINCH).
pub fn read_input(timeout: Duration) -> Result<UiEvent> {
    use std::io::IsTerminal;
    let ready = if io::stdin().is_terminal() {
        match wait_stdin(timeout) {
            None => return Ok(UiEvent::Signal("SIGHUP")),
            Some(_) => event::poll(Duration::ZERO)?,
        }
    } else {
        event::poll(timeout)?
    };
    if !ready {
        return Ok(UiEvent::Tick);
    }
    Ok(match event::read()? {
        CtEvent::Key(k) => UiEvent::Key(k),
        CtEvent::Resize(_, _) => UiEvent::Resize,
        _ => UiEvent::Tick,
    })
}

/// What the background side tells the UI besides frames.
#[derive(Debug)]
pub enum Msg {
    Frame(Box<super::frame::Frame>),
    /// The source ended; `exit` when the run was bounded by the user.
    Ended {
        exit: bool,
    },
    Signal(&'static str),
}

/// Why the UI loop returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Quit,
    Signal(&'static str),
    SourceEnded,
    /// The background side went away (its error is reported by the caller).
    Disconnected,
}

/// The draw loop: generic over the backend, fed by `inbox` (frames and
/// signals, never blocking) and `input` (keys, with a short timeout).
/// `changed` is told the focus and refresh interval whenever they change.
pub fn run<B: Backend>(
    terminal: &mut Terminal<B>,
    app: &mut App,
    inbox: &std::sync::mpsc::Receiver<Msg>,
    mut input: impl FnMut(Duration) -> Result<UiEvent>,
    mut changed: impl FnMut(Focus, Duration),
) -> Result<Exit> {
    let mut dirty = true;
    let (mut focus, mut refresh) = (app.focus(), app.refresh());
    loop {
        loop {
            match inbox.try_recv() {
                Ok(Msg::Frame(f)) => {
                    app.update(Action::Sample(f));
                    dirty = true;
                }
                Ok(Msg::Ended { exit: true }) => return Ok(Exit::SourceEnded),
                Ok(Msg::Ended { exit: false }) => dirty = true,
                Ok(Msg::Signal(s)) => return Ok(Exit::Signal(s)),
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return Ok(Exit::Disconnected),
            }
        }
        if dirty {
            terminal.draw(|f| f.render_widget(&*app, f.area()))?;
            let h = terminal.size()?.height;
            app.page = usize::from(h / 3).max(1);
            dirty = false;
        }
        let action = match input(Duration::from_millis(50))? {
            UiEvent::Key(k) => key_action(k, app.mode()),
            UiEvent::Resize => Some(Action::Redraw),
            UiEvent::Sample(f) => Some(Action::Sample(f)),
            UiEvent::Signal(s) => return Ok(Exit::Signal(s)),
            UiEvent::Tick => None,
        };
        if let Some(a) = action {
            app.update(a);
            dirty = true;
        }
        if app.quit {
            return Ok(Exit::Quit);
        }
        if app.focus() != focus || app.refresh() != refresh {
            focus = app.focus();
            refresh = app.refresh();
            changed(focus, refresh);
        }
    }
}
