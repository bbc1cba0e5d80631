//! A hostile host: an attaching command run without root, without BTF,
//! with NUMA balancing off and under lockdown's confidentiality mode, and
//! files planted where numatrace reads and writes (a FIFO at the promoter's
//! state file, symlinks at the state file and at an output, an existing
//! trace). Each refusal is a non-zero exit within seconds, with a message
//! that names the problem and its remedy; nothing is left loaded in the
//! kernel and no planted file's target is written. Lockdown cannot be
//! lowered while the kernel runs, so this test comes last in a boot.
use std::path::Path;

use anyhow::{ensure, Context, Result};

use crate::kernels::Series;
use crate::results::text;

pub(super) const SCRIPT: &str = include_str!("hostile.sh");

/// Refusals: (case, words its message must hold: the problem, the remedy).
const REFUSED: &[(&str, &[&str])] = &[
    (
        "balancing",
        &[
            "numa_balancing",
            "mode 0",
            "sysctl -w kernel.numa_balancing=2",
        ],
    ),
    ("user", &["privileges", "CAP_BPF", "run as root"]),
    ("btf", &["/sys/kernel/btf/vmlinux", "CONFIG_DEBUG_INFO_BTF"]),
    ("trace_exists", &["earlier.trace", "--overwrite"]),
    ("lockdown", &["confidentiality", "lockdown=integrity"]),
];

pub(super) fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    let mode = text(dir, "lockdown.mode").unwrap_or_default();
    ensure!(
        mode.contains("[confidentiality]"),
        "the guest kernel did not enter lockdown's confidentiality mode ({:?}): the lockdown case tests nothing",
        mode.trim()
    );
    for &(case, words) in REFUSED {
        refused(dir, case, words).with_context(|| format!("case {case}"))?;
    }
    for case in ["fifo", "state_link", "out_link"] {
        went_on(dir, case).with_context(|| format!("case {case}"))?;
    }
    crate::results::read_report::<numa_core::model::shadow::ShadowReport>(dir, "out.json")
        .context("shadow -o through a planted symlink wrote no report")?;
    let fifo = text(dir, "fifo.out")?;
    ensure!(
        fifo.contains("state file ignored"),
        "top --once with a FIFO at the state file did not say it ignored it:\n{fifo}"
    );
    for (file, what) in [
        ("state_link.kept", "the promoter's state file"),
        ("out_link.kept", "the -o output"),
    ] {
        ensure!(
            !dir.join(file).exists(),
            "the symlink planted at {what} is still a symlink: it was written through or not replaced"
        );
    }
    for (file, what) in [
        ("target.changed", "the symlinks' target"),
        ("earlier.changed", "the existing trace"),
    ] {
        ensure!(!dir.join(file).exists(), "{what} was written");
    }
    Ok(())
}

/// A non-zero exit (not the guard's SIGKILL), a message with `words`, and
/// nothing left loaded.
fn refused(dir: &Path, case: &str, words: &[&str]) -> Result<()> {
    let (rc, err) = exit_of(dir, case)?;
    ensure!(
        !matches!(rc.as_str(), "0" | "137"),
        "exit status {rc} (want a refusal):\n{err}"
    );
    ensure!(!err.contains("panicked"), "it panicked:\n{err}");
    for w in words {
        ensure!(err.contains(w), "the message does not say {w:?}:\n{err}");
    }
    left_nothing(dir, case)
}

/// Exit 0 despite what was planted, nothing left loaded.
fn went_on(dir: &Path, case: &str) -> Result<()> {
    let (rc, err) = exit_of(dir, case)?;
    ensure!(rc == "0", "exit status {rc}:\n{err}");
    left_nothing(dir, case)
}

/// A case's exit status and its stderr.
fn exit_of(dir: &Path, case: &str) -> Result<(String, String)> {
    let rc = text(dir, &format!("{case}.rc"))?.trim().to_owned();
    Ok((rc, text(dir, &format!("{case}.err"))?))
}

fn left_nothing(dir: &Path, case: &str) -> Result<()> {
    let left = text(dir, &format!("{case}.left"))?;
    ensure!(
        left.trim() == "0",
        "{} of numatrace's BPF objects left in the kernel",
        left.trim()
    );
    Ok(())
}
