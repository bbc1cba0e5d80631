//! Run as a systemd service, numatrace logs to the journal, with each
//! message's priority, instead of writing text to stderr: a real
//! systemd-journald receives the message and `journalctl` reads it back.
//!
//! systemd tells a service that its stderr is the journal through
//! `$JOURNAL_STREAM` (the stream's device and inode, systemd.exec(5)); the
//! test sets it to the file it gives numatrace as stderr. If no journald
//! runs here, the test starts one (root and the Debian package systemd,
//! which `cargo xtask setup` installs).
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::{
    os::unix::fs::{FileTypeExt, MetadataExt},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

const SOCKET: &str = "/run/systemd/journal/socket";
const JOURNALD: &str = "/lib/systemd/systemd-journald";

/// A journald this test started, stopped when the test ends.
struct Journald(Option<Child>);

impl Drop for Journald {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Whether a journald listens: a socket left by one that stopped refuses
/// the connection.
fn socket_ready() -> bool {
    std::fs::metadata(SOCKET).is_ok_and(|m| m.file_type().is_socket())
        && std::os::unix::net::UnixDatagram::unbound().is_ok_and(|s| s.connect(SOCKET).is_ok())
}

fn journald() -> Journald {
    if socket_ready() {
        return Journald(None);
    }
    assert!(
        Path::new(JOURNALD).exists(),
        "{JOURNALD} is missing: `cargo xtask setup` installs the Debian package systemd"
    );
    std::fs::create_dir_all("/run/systemd/journal")
        .expect("creating /run/systemd/journal (the journal test needs root)");
    let child = Command::new(JOURNALD)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting systemd-journald");
    let started = Journald(Some(child));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket_ready() {
        assert!(
            Instant::now() < deadline,
            "systemd-journald did not create {SOCKET} within 20 s (the journal test needs root)"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    started
}

/// The entries journald holds from process `pid`, as JSON lines.
fn entries_of(pid: u32) -> String {
    let out = Command::new("journalctl")
        .args(["--no-pager", "-o", "json", &format!("_PID={pid}")])
        .output()
        .expect("running journalctl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_service_s_warning_reaches_the_journal_with_its_priority() {
    let _journald = journald();
    let dir = std::env::temp_dir().join(format!("numatrace-journal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // A trace cut inside its last record: `dump` warns about it.
    let whole = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/hot-chunks-6.12.trace"),
    )
    .expect("test trace");
    let cut = dir.join("cut.trace");
    std::fs::write(&cut, &whole[..whole.len() - 7]).expect("cut trace");
    let stderr_path = dir.join("stderr");
    let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
    let meta = stderr.metadata().expect("stat stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_numatrace"))
        .arg("dump")
        .arg(&cut)
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("run numatrace dump");
    let pid = child.id();
    assert!(
        child.wait().expect("wait").success(),
        "numatrace dump failed"
    );

    let deadline = Instant::now() + Duration::from_secs(20);
    let entry = loop {
        let entries = entries_of(pid);
        if let Some(e) = entries.lines().find(|l| l.contains("trace truncated")) {
            break e.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no journal entry of numatrace (pid {pid}) within 20 s; journalctl shows:\n{entries}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let e: serde_json::Value = serde_json::from_str(&entry).expect("journalctl JSON");
    let text = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(e["SYSLOG_IDENTIFIER"], "numatrace", "{entry}");
    // syslog's warning priority.
    assert_eq!(e["PRIORITY"], "4", "{entry}");
    assert!(
        !text.contains("trace truncated"),
        "the warning went to stderr as text too:\n{text}"
    );
}
