//! Progress bars of the commands that read whole traces (`replay`,
//! `report`, `replay --sweep`, `dump`, `stats`/`hist` from a file): bytes
//! of the trace read, rate and time left, on stderr.
//!
//! A bar is drawn only where it cannot get in the way of data or logs:
//! stderr must be a terminal (not a CI log, not `2>file`, not TERM=dumb),
//! stdout must not be a pipe (its reader, a pager or `head`, may be
//! drawing on the same terminal, and piped output is a script's), and a
//! command that streams its records to stdout while it reads draws none
//! when that stdout is the terminal (the bar would tear the lines). Output
//! redirected to a file, or results printed after the read, keep the bar.
//! Everywhere else the bar is hidden: it writes nothing at all.
use std::{io::IsTerminal, os::unix::fs::FileTypeExt, path::Path, time::Duration};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// When the command writes its output to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// After the read (a report, totals): the bar is cleared first.
    AtEnd,
    /// Record by record during the read (`dump`, `hist --interval`).
    Streamed,
}

/// What stdout is connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stdout {
    Terminal,
    /// A pipe or a socket: another program reads it.
    Pipe,
    /// A file, /dev/null, or unknown.
    Other,
}

fn stdout_kind() -> Stdout {
    if std::io::stdout().is_terminal() {
        return Stdout::Terminal;
    }
    // stat() of the fd's /proc link reaches pipes and sockets too.
    match std::fs::metadata("/proc/self/fd/1") {
        Ok(m) if m.file_type().is_fifo() || m.file_type().is_socket() => Stdout::Pipe,
        _ => Stdout::Other,
    }
}

/// The rule of the module comment, on the facts it reads.
fn shown(stderr_tty: bool, term: Option<&str>, stdout: Stdout, output: Output) -> bool {
    stderr_tty
        && term != Some("dumb")
        && match stdout {
            Stdout::Pipe => false,
            Stdout::Terminal => output == Output::AtEnd,
            Stdout::Other => true,
        }
}

/// A progress bar that is cleared when dropped, so an error ends it too
/// and nothing is left half drawn above the message.
pub(crate) struct Bar(ProgressBar);

impl Bar {
    /// The bar for reading `path`: its size in bytes, labelled with its
    /// file name; hidden where the module comment says.
    pub(crate) fn trace(path: &Path, output: Output) -> Bar {
        let term = std::env::var("TERM").ok();
        if !shown(
            std::io::stderr().is_terminal(),
            term.as_deref(),
            stdout_kind(),
            output,
        ) {
            return Bar(ProgressBar::hidden());
        }
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        let name = path.file_name().unwrap_or(path.as_os_str());
        bar.set_message(name.to_string_lossy().into_owned());
        // Redraws between updates keep the rate and ETA moving on a slow
        // disk; 10 a second is what a reader can follow.
        bar.enable_steady_tick(Duration::from_millis(100));
        Bar(bar)
    }

    /// Bytes of the trace read so far.
    pub(crate) fn at(&self, bytes: u64) {
        self.0.set_position(bytes);
    }

    #[cfg(test)]
    fn is_hidden(&self) -> bool {
        self.0.is_hidden()
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawn_only_on_a_terminal_and_never_beside_piped_or_streamed_data() {
        use Output::*;
        use Stdout::*;
        let xterm = Some("xterm");
        assert!(shown(true, xterm, Terminal, AtEnd));
        assert!(shown(true, xterm, Other, AtEnd));
        assert!(shown(true, xterm, Other, Streamed), "dump > file");
        assert!(shown(true, None, Other, AtEnd));
        assert!(
            !shown(true, xterm, Terminal, Streamed),
            "dump to the screen"
        );
        assert!(!shown(true, xterm, Pipe, AtEnd), "| less, | jq");
        assert!(!shown(true, Some("dumb"), Terminal, AtEnd));
        for stdout in [Terminal, Pipe, Other] {
            assert!(!shown(false, xterm, stdout, AtEnd), "stderr not a terminal");
        }
    }

    #[test]
    fn hidden_under_the_test_harness() {
        // Under CI and captured runs stderr is a pipe or a file; run by
        // hand in a terminal, there is nothing to check.
        if std::io::stderr().is_terminal() {
            return;
        }
        let bar = Bar::trace(Path::new("/dev/null"), Output::AtEnd);
        assert!(bar.is_hidden());
        bar.at(1);
    }
}
