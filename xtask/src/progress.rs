//! Progress on a terminal: a bar over `cargo xtask setup`'s steps and a
//! spinner over the patched kernel's build (objects compiled, their rate,
//! time elapsed). Drawn on stderr only when stderr is a terminal (and
//! TERM is not dumb): in CI logs and redirected output nothing is drawn.
//!
//! Child processes that print to the terminal (apt-get, rustup, cargo)
//! and our own status lines run with the bars cleared ([`suspend`],
//! [`println`]), so a bar never splits a line of theirs.
use std::{fmt::Display, io::IsTerminal, sync::OnceLock, time::Duration};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether bars are drawn: on a terminal that can redraw a line.
fn shown(stderr_tty: bool, term: Option<&str>) -> bool {
    stderr_tty && term != Some("dumb")
}

/// Every bar of the process, drawn together on stderr, or hidden.
fn multi() -> &'static MultiProgress {
    static MULTI: OnceLock<MultiProgress> = OnceLock::new();
    MULTI.get_or_init(|| {
        let term = std::env::var("TERM").ok();
        let target = if shown(std::io::stderr().is_terminal(), term.as_deref()) {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        MultiProgress::with_draw_target(target)
    })
}

fn styled(bar: ProgressBar, template: &str) -> ProgressBar {
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bar = multi().add(bar.with_style(style));
    // Redraws keep the elapsed time moving during a long step.
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A bar over `len` steps; each step's name is its message.
pub(crate) fn steps(len: u64) -> ProgressBar {
    styled(
        ProgressBar::new(len),
        "setup [{bar:24}] {pos}/{len} {msg} ({elapsed}, ETA {eta})",
    )
}

/// A spinner counting things done (no total is known): their number,
/// rate and the time elapsed.
pub(crate) fn counter(what: &str) -> ProgressBar {
    let bar = styled(
        ProgressBar::no_length(),
        "{spinner} {msg}: {pos} {prefix} ({per_sec}, {elapsed})",
    );
    bar.set_prefix(what.to_owned());
    bar
}

/// Runs `f`, which writes to the terminal, with the bars cleared; they
/// are drawn again after it. Not to be nested.
pub(crate) fn suspend<R>(f: impl FnOnce() -> R) -> R {
    multi().suspend(f)
}

/// `println!` that does not split a bar.
pub(crate) fn println(line: impl Display) {
    suspend(|| println!("{line}"));
}

/// Ends `bar` and takes it off the terminal.
pub(crate) fn finish(bar: &ProgressBar) {
    bar.finish_and_clear();
    multi().remove(bar);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_only_on_a_terminal_that_redraws() {
        assert!(shown(true, Some("xterm-256color")));
        assert!(shown(true, None));
        assert!(!shown(true, Some("dumb")));
        assert!(!shown(false, Some("xterm")));
    }
}
