//! The real binary refuses the numeric flag values that used to panic in
//! `Duration`, kill the exporter's timer thread or overflow the ring size:
//! exit status 2 before anything runs, the flag and its range in the
//! message, no panic. The whole table of flags is in src/cli/tests.rs.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::process::{Command, Stdio};

const NUMATRACE: &str = env!("CARGO_BIN_EXE_numatrace");
const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/testdata/hot-chunks-6.12.trace"
);

#[test]
fn values_that_used_to_panic_exit_2_with_the_range() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["stats", "--live", "--duration", "-1"],
            "from 0.001 to 31536000",
        ),
        (
            &["stats", "--live", "--duration", "nan"],
            "from 0.001 to 31536000",
        ),
        (
            &["stats", "--live", "--duration", "inf"],
            "from 0.001 to 31536000",
        ),
        (
            &["stats", "--live", "--duration", "1e19"],
            "from 0.001 to 31536000",
        ),
        (
            &[
                "export",
                "--replay",
                TRACE,
                "--textfile",
                "m.prom",
                "--interval",
                "1e-10",
            ],
            "from 0.01 to 31536000",
        ),
        (
            &["record", "-o", "t", "--ring-mb", "2049"],
            "from 1 to 2048",
        ),
        (
            &["top", "--replay", TRACE, "--speed", "-1"],
            "from 0.001 to 1000000",
        ),
        (
            &["hist", "--from", TRACE, "--interval", "-inf"],
            "from 0.01 to 31536000",
        ),
        (
            &["workload", "hot-chunks", "--duration", "1e19"],
            "from 0.001 to 31536000",
        ),
    ];
    for (args, range) in cases {
        let out = Command::new(NUMATRACE)
            .args(*args)
            .stdin(Stdio::null())
            .output()
            .expect("running numatrace");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let flag = args
            .iter()
            .rev()
            .nth(1)
            .expect("the flag precedes its value");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains(range),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    }
}
