//! Names other processes choose (a process's comm) and a trace's host
//! strings reach the terminal made printable: a process named
//! `\r ESC[31m ...` cannot move the cursor or recolour the screen of root's
//! `stats`, `replay`, `hist --by process` or `top --once`.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::{path::PathBuf, process::Command};

use numa_core::{
    decode::Event,
    trace::{Item, Reader, Writer},
};

const NUMATRACE: &str = env!("CARGO_BIN_EXE_numatrace");
const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/testdata/hot-chunks-6.12.trace"
);

/// Carriage return, a colour, a right-to-left override: 15 bytes and a NUL.
const HOSTILE_COMM: [u8; 16] = *b"\r\x1b[31mEVIL\xe2\x80\xae!!\0";
/// How the hostile name starts once printable.
const VISIBLE: &str = "\\r\\x1b[31mEVIL";

/// The recorded test trace with every process renamed to [`HOSTILE_COMM`]
/// and terminal commands in its kernel release and hostname.
fn hostile_trace() -> PathBuf {
    // Left in the temporary directory: the tests run in parallel.
    let path = std::env::temp_dir().join(format!(
        "numatrace-hostile-names-{}.trace",
        std::process::id()
    ));
    let mut reader = Reader::open(std::path::Path::new(TRACE)).expect("test trace");
    let mut header = reader.header.clone();
    header.kernel_release = "6.12\x1b]0;pwned\x07".into();
    header.hostname = "host\x1b[2J".into();
    let mut w = Writer::new(Vec::new(), &header).expect("writer");
    let mut end = (0, String::new());
    for item in reader.by_ref() {
        match item.expect("a good record") {
            Item::Event(Event::Fault(mut f)) => {
                f.comm = HOSTILE_COMM;
                w.event(&Event::Fault(f)).expect("fault");
            }
            Item::Event(ev) => w.event(&ev).expect("event"),
            Item::Snapshot(s) => w.snapshot(&s).expect("snapshot"),
            Item::Footer(f) => end = (f.ended_mono_ns, f.reason),
        }
    }
    let bytes = w.finish(end.0, &end.1).expect("finish");
    std::fs::write(&path, bytes).expect("write the trace");
    path
}

/// Stdout of numatrace with `args`, the trace's path in place of `TRACE`.
fn run(args: &[&str], trace: &std::path::Path) -> String {
    let out = Command::new(NUMATRACE)
        .args(args.iter().map(|a| {
            if *a == "TRACE" {
                trace.as_os_str()
            } else {
                std::ffi::OsStr::new(a)
            }
        }))
        .output()
        .expect("running numatrace");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// No character in `text` that a terminal acts on instead of showing,
/// besides the line ends.
fn assert_printable(what: &str, text: &str) {
    let bad: Vec<char> = text
        .chars()
        .filter(|&c| (c.is_control() && c != '\n') || c == '\u{202e}')
        .collect();
    assert!(bad.is_empty(), "{what} prints {bad:?}:\n{text}");
}

/// The crafted trace, written once for every test here.
fn trace() -> &'static std::path::Path {
    static TRACE_FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TRACE_FILE.get_or_init(hostile_trace)
}

/// `args`' output holds the hostile name escaped, and nothing a terminal
/// acts on.
fn shows_it_escaped(args: &[&str]) -> String {
    let text = run(args, trace());
    assert_printable(&format!("{args:?}"), &text);
    assert!(
        text.contains(VISIBLE),
        "{args:?} does not show the name escaped:\n{text}"
    );
    text
}

#[test]
fn stats_text_shows_hostile_names_escaped() {
    shows_it_escaped(&["stats", "TRACE"]);
}

#[test]
fn replay_text_shows_hostile_names_escaped() {
    shows_it_escaped(&["replay", "TRACE"]);
}

#[test]
fn hist_by_process_shows_hostile_names_escaped() {
    shows_it_escaped(&["hist", "--from", "TRACE", "--by", "process"]);
}

#[test]
fn top_once_shows_hostile_names_and_kernel_release_escaped() {
    let top = shows_it_escaped(&["top", "--replay", "TRACE", "--once"]);
    assert!(top.contains("6.12\\x1b]0;pwned\\x07"), "{top}");
}
