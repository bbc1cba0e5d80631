//! The serial console protocol of the guest's init: the markers, kernel
//! problems, and the base64 results block, parsed as the bytes arrive.

use std::fmt::Write as _;

use anyhow::{bail, Context, Result};
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;

const READY: &str = "===NUMATRACE-READY===";
const SETUP_FAILED: &str = "===NUMATRACE-SETUP-FAILED===";
const RESULTS_BEGIN: &str = "===NUMATRACE-RESULTS-BEGIN===";
const RESULTS_END: &str = "===NUMATRACE-RESULTS-END===";
const EXIT_PREFIX: &str = "===NUMATRACE-EXIT-STATUS=";

/// Console lines that mean the kernel is unwell, even if the command succeeded.
const KERNEL_PROBLEMS: &[&str] = &[
    "Oops:",
    "BUG:",
    "WARNING: CPU:",
    "Kernel panic",
    "general protection fault",
    "Call Trace:",
];

/// The console parser: tracks markers and kernel problems, keeps the log,
/// and hides the base64 block from the user.
#[derive(Default)]
pub(super) struct Console {
    pub(super) line: Vec<u8>,
    /// Bytes of `line` already echoed.
    pub(super) shown: usize,
    pub(super) in_results: bool,
    pub(super) log: String,
    pub(super) results_b64: String,
    pub(super) results_complete: bool,
    pub(super) exit_status: Option<i32>,
    pub(super) setup_failed: Option<String>,
    pub(super) ready: bool,
    pub(super) problems: Vec<String>,
}

impl Console {
    /// Consumes console bytes; returns the bytes to show the user (passed
    /// through unbuffered, so full-screen programs render, except a line
    /// that may still turn out to be the results marker).
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut show = Vec::new();
        for &b in bytes {
            self.line.push(b);
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\r', '\n']);
                let hidden = self.in_results || text == RESULTS_BEGIN;
                if !hidden {
                    show.extend_from_slice(&line[self.shown.min(line.len())..]);
                }
                self.shown = 0;
                for piece in split_markers(text) {
                    self.on_line(piece);
                }
            } else if !self.in_results {
                let pending = trim_cr(&self.line);
                if !RESULTS_BEGIN.as_bytes().starts_with(pending) {
                    show.extend_from_slice(&self.line[self.shown..]);
                    self.shown = self.line.len();
                }
            }
        }
        show
    }

    /// Flushes a last unterminated line into the log.
    pub(super) fn finish(&mut self) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.on_line(String::from_utf8_lossy(&line).trim_end_matches('\r'));
        }
    }

    fn on_line(&mut self, text: &str) {
        if self.in_results {
            if text == RESULTS_END {
                self.in_results = false;
                self.results_complete = true;
                let _ = writeln!(
                    self.log,
                    "[{} bytes of base64 results elided]\n{RESULTS_END}",
                    self.results_b64.len()
                );
                return;
            }
            if is_base64_line(text) {
                self.results_b64.push_str(text);
                return;
            }
            // A stray kernel message inside the block: keep it in the log.
        }
        self.log.push_str(text);
        self.log.push('\n');
        if text == RESULTS_BEGIN {
            self.in_results = true;
            self.results_b64.clear();
        } else if text == READY {
            self.ready = true;
        } else if let Some(why) = text.strip_prefix(SETUP_FAILED) {
            self.setup_failed = Some(why.trim().to_string());
        } else if let Some(status) = text
            .strip_prefix(EXIT_PREFIX)
            .and_then(|rest| rest.strip_suffix("==="))
        {
            self.exit_status = status.parse().ok();
        }
        if is_kernel_problem(text) && self.problems.len() < 20 {
            self.problems.push(text.to_string());
        }
    }
}

/// Every marker begins with this.
const MARKER: &str = "===NUMATRACE-";

/// `text` cut before each marker that does not begin it: the serial line
/// can lose the newline between two markers (a test's end and the results
/// block), or a program's last line may have none.
fn split_markers(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.get(1..).and_then(|r| r.find(MARKER)).map(|i| i + 1) {
        pieces.push(&rest[..at]);
        rest = &rest[at..];
    }
    pieces.push(rest);
    pieces
}

/// Does this console line show the kernel in trouble?
pub(crate) fn is_kernel_problem(line: &str) -> bool {
    KERNEL_PROBLEMS.iter().any(|p| line.contains(p))
}

fn trim_cr(line: &[u8]) -> &[u8] {
    let mut line = line;
    while let [rest @ .., b'\r'] = line {
        line = rest;
    }
    line
}

fn is_base64_digit(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'+' || b == b'/'
}

fn is_base64_line(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| is_base64_digit(b) || b == b'=')
}

/// Decodes with no padding required and unused bits in the last digit
/// ignored: see [`base64_decode`].
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

/// The results block's bytes. Lenient on purpose: `=` and line breaks are
/// skipped wherever they are, and a block cut short on the serial line
/// still decodes to every whole byte that arrived, so that tar, not the
/// decoder, reports how far the archive got. Only a byte outside the
/// alphabet is an error.
pub(super) fn base64_decode(text: &str) -> Result<Vec<u8>> {
    let skipped = |b: u8| matches!(b, b'=' | b'\n' | b'\r');
    if let Some(b) = text.bytes().find(|&b| !is_base64_digit(b) && !skipped(b)) {
        bail!("invalid base64 byte {b:#04x} in the results block");
    }
    let mut digits: Vec<u8> = text.bytes().filter(|&b| !skipped(b)).collect();
    // A lone last digit holds 6 bits: not a whole byte.
    if digits.len() % 4 == 1 {
        digits.pop();
    }
    LENIENT
        .decode(&digits)
        .context("the results block is not base64")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(chunks: &[&[u8]]) -> (Console, String) {
        let mut console = Console::default();
        let mut shown = Vec::new();
        for c in chunks {
            shown.extend(console.feed(c));
        }
        console.finish();
        (console, String::from_utf8_lossy(&shown).into_owned())
    }

    #[test]
    fn console_protocol() {
        let (c, shown) = feed_all(&[
            b"[    1.0] booting\r\n===NUMATRACE-READY===\r\nhello\r\n===NUMATRACE-RES",
            b"ULTS-BEGIN===\r\naGVsbG8g\r\nd29ybGQ=\r\n===NUMATRACE-RESULTS-END===\r\n",
            b"===NUMATRACE-EXIT-STATUS=3===\r\n[    2.0] reboot: Power down\r\n",
        ]);
        assert!(c.ready);
        assert_eq!(c.exit_status, Some(3));
        assert!(c.results_complete);
        assert_eq!(
            base64_decode(&c.results_b64).expect("valid"),
            b"hello world"
        );
        assert!(!shown.contains("aGVsbG8g") && !shown.contains("RESULTS-BEGIN"));
        assert!(shown.contains("hello\r\n") && shown.contains("EXIT-STATUS=3"));
        assert!(c.log.contains("[16 bytes of base64 results elided]"));
        assert!(c.problems.is_empty());
    }

    #[test]
    fn markers_run_together_on_one_line_are_read_apart() {
        let (c, _) = feed_all(&[
            b"===NUMATRACE-TEST-END shapes exit=0======NUMATRACE-RESULTS-BEGIN===\r\n",
            b"aGVsbG8g\r\nd29ybGQ=\r\n===NUMATRACE-RESULTS-END===\r\n",
            b"last words===NUMATRACE-EXIT-STATUS=0===\r\n",
        ]);
        assert!(c.results_complete);
        assert_eq!(
            base64_decode(&c.results_b64).expect("valid"),
            b"hello world"
        );
        assert_eq!(c.exit_status, Some(0));
        assert!(c.log.contains("===NUMATRACE-TEST-END shapes exit=0===\n"));
        assert_eq!(split_markers("plain"), vec!["plain"]);
    }

    #[test]
    fn console_partial_lines_are_shown_immediately() {
        let mut c = Console::default();
        assert_eq!(c.feed(b"\x1b[2J~ # "), b"\x1b[2J~ # ");
        assert_eq!(c.feed(b"\n===NUM"), b"\n");
        assert_eq!(c.feed(b"BER\n"), b"===NUMBER\n");
    }

    #[test]
    fn console_kernel_problems() {
        let (c, _) = feed_all(&[
            b"[ 3.1] WARNING: CPU: 1 PID: 7 at mm/x.c:1 f+0x1/0x2\n",
            b"[ 3.2] Call Trace:\n[ 3.3] fine\n",
            b"===NUMATRACE-SETUP-FAILED=== node 1 has CPUs (1)\n",
        ]);
        assert_eq!(c.problems.len(), 2);
        assert_eq!(c.setup_failed.as_deref(), Some("node 1 has CPUs (1)"));
        assert_eq!(c.exit_status, None);
    }

    #[test]
    fn results_block_decoding_is_lenient_but_rejects_foreign_bytes() {
        // Padding and line breaks anywhere are skipped.
        assert_eq!(base64_decode("aGVs\r\nbG8=").expect("valid"), b"hello");
        assert_eq!(base64_decode("aG=VsbG8").expect("valid"), b"hello");
        // A block cut short: every whole byte that arrived.
        assert_eq!(base64_decode("aGVsbG").expect("valid"), b"hell");
        assert_eq!(base64_decode("aGVsbG8gd").expect("valid"), b"hello ");
        assert_eq!(base64_decode("").expect("valid"), b"");
        let err = base64_decode("aGVs-bG8=").expect_err("foreign byte");
        assert_eq!(
            err.to_string(),
            "invalid base64 byte 0x2d in the results block"
        );
    }
}
