//! Strings from the kernel or other processes (process names, cgroup
//! paths, a trace's hostname and kernel release, file names) made safe to
//! print on a terminal. Any local user names their processes: a name with
//! `\r` and `ESC [31m` would otherwise move the cursor and recolour root's
//! screen. Text outputs and the TUI show names through [`printable`];
//! JSON, CSV, OpenMetrics and HTML escape by their own rules.
use std::{borrow::Cow, fmt::Write};

/// Whether `c` is shown escaped: control characters (C0, DEL, C1: cursor
/// movement, colours, the terminal's own commands), the bidirectional
/// overrides, embeddings, isolates and marks (they reorder the rest of the
/// line), the line and paragraph separators, and the byte-order mark.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{feff}'
        )
}

/// `s` with every character a terminal would act on, rather than show,
/// written visibly: `\t`, `\n`, `\r`, `\x1b` for the other ASCII controls,
/// `\u{202e}` beyond. Borrowed when there is none (the usual case).
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_ascii_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if hidden(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_overrides_are_written_visibly() {
        assert_eq!(
            printable("\r\x1b[31mevil\x07\x7f"),
            "\\r\\x1b[31mevil\\x07\\x7f"
        );
        assert_eq!(
            printable("a\u{202e}b\u{2066}\u{9b}c"),
            "a\\u{202e}b\\u{2066}\\u{9b}c"
        );
        assert_eq!(printable("tab\there\nnl"), "tab\\there\\nnl");
    }

    #[test]
    fn ordinary_names_are_borrowed_unchanged() {
        for s in [
            "hot-chunks",
            "kworker/u8:2",
            "Ünïcode ✓",
            "/sys/fs/cgroup/a.slice",
            "",
        ] {
            assert!(matches!(printable(s), Cow::Borrowed(b) if b == s), "{s}");
        }
    }
}
