//! Files numatrace writes from a trace (`report -o`, `replay -o`, `dump -o`) go
//! through the one write helper: a symlink planted at the name is replaced,
//! never written through, and no temporary file is left behind.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::process::Command;

const NUMATRACE: &str = env!("CARGO_BIN_EXE_numatrace");
mod output_common;

use output_common::{names, TempDir, TRACE};

#[test]
fn outputs_replace_a_planted_symlink_instead_of_writing_through_it() {
    let dir = TempDir::new("symlink");
    let victim = dir.0.join("victim");
    std::fs::write(&victim, b"precious").expect("victim");
    for (name, args) in [
        ("report.html", vec!["report", TRACE, "-o"]),
        ("replay.json", vec!["replay", TRACE, "--json", "-o"]),
        ("dump.jsonl", vec!["dump", TRACE, "-o"]),
        (
            "dump.parquet",
            vec!["dump", TRACE, "--format", "parquet", "-o"],
        ),
    ] {
        let out = dir.0.join(name);
        std::os::unix::fs::symlink(&victim, &out).expect("symlink");
        let run = Command::new(NUMATRACE)
            .args(&args)
            .arg(&out)
            .output()
            .expect("numatrace runs");
        assert!(
            run.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let meta = std::fs::symlink_metadata(&out).expect("output");
        assert!(meta.is_file(), "{name} is still a symlink");
        assert!(meta.len() > 100, "{name}: {} bytes", meta.len());
        assert_eq!(
            std::fs::read(&victim).expect("victim"),
            b"precious",
            "{name}"
        );
    }
    assert_eq!(
        names(&dir.0),
        [
            "dump.jsonl",
            "dump.parquet",
            "replay.json",
            "report.html",
            "victim"
        ]
    );
}

/// Off a terminal (here: stderr a pipe) the commands that read whole
/// traces draw no progress bar: no carriage return or escape sequence on
/// stderr, and stdout holds only the data.
#[test]
fn no_progress_bar_off_a_terminal() {
    for args in [
        &["replay", TRACE][..],
        &["replay", TRACE, "--sweep", "threshold=1e4,1e6"],
        &["dump", TRACE],
        &["stats", TRACE],
    ] {
        let out = Command::new(NUMATRACE).args(args).output().expect("run");
        assert!(out.status.success(), "{args:?} failed");
        for (name, bytes) in [("stderr", &out.stderr), ("stdout", &out.stdout)] {
            assert!(
                !bytes.contains(&b'\r') && !bytes.contains(&0x1b),
                "{args:?}: progress drawn on {name}: {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            );
        }
    }
}
