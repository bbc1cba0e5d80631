//! Clean detach: `numatrace promote --all` (BPF probes plus the promoter's
//! state file) ended by SIGINT, a panic and SIGKILL on every kernel, and by
//! SIGTERM and SIGHUP in `detach_signals` (one kernel: the three signals
//! take one path in numatrace, and the kernel's side of a detach does not
//! depend on which of them ended the run). After
//! each, no numatrace BPF program, map or link is left in the kernel
//! (`doctor --loaded`, the object-id syscalls) and, except after SIGKILL,
//! no state file either; after SIGKILL the next run replaces the leftover
//! file and cleans up (readers' judgement of a dead promoter's file is
//! unit-tested in numa-host).
use std::path::Path;

use anyhow::{ensure, Context, Result};
use numa_core::doctor::Loaded;

use crate::kernels::Series;
use crate::results::{read_report, text};

pub(super) const SCRIPT: &str = concat!(include_str!("detach/cases.sh"), include_str!("detach.sh"));
pub(super) const SIGNALS_SCRIPT: &str = concat!(
    include_str!("detach/cases.sh"),
    include_str!("detach/signals.sh")
);

/// Cases that end with a signal or a panic, and how they must exit.
const CASES: &[(&str, &str)] = &[("INT", "0"), ("panic", "101"), ("KILL", "137")];
/// The other signals numatrace ends cleanly on.
const SIGNAL_CASES: &[(&str, &str)] = &[("TERM", "0"), ("HUP", "0")];

fn check_cases(dir: &Path, cases: &[(&str, &str)]) -> Result<()> {
    for &(case, rc) in cases {
        check_case(dir, case, rc).with_context(|| format!("promote ended by {case}"))?;
    }
    Ok(())
}

pub(super) fn check_signals(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    check_cases(dir, SIGNAL_CASES)?;
    let damon = text(dir, "damon.out")?;
    ensure!(
        text(dir, "damon.rc")?.trim() == "1" && damon.contains("no DAMON sysfs interface"),
        "--truth damon on 6.1, which has no DAMON, should be refused with the reason: {damon}"
    );
    Ok(())
}

pub(super) fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    check_cases(dir, CASES)?;
    ensure!(
        text(dir, "again.rc")?.trim() == "0",
        "a promote run after SIGKILL failed: {}",
        text(dir, "again.out")?
    );
    ensure!(
        text(dir, "again.state-after")?.trim() == "0",
        "the promote run after SIGKILL left its state file"
    );
    Ok(())
}

fn check_case(dir: &Path, case: &str, want_rc: &str) -> Result<()> {
    let out = text(dir, &format!("{case}.out")).unwrap_or_default();
    ensure!(
        text(dir, &format!("{case}.state-during"))?.trim() == "1",
        "the promoter never wrote its state file: {out}"
    );
    let during = ours(&read_report(dir, &format!("{case}.during.json"))?);
    ensure!(
        during.iter().all(|&n| n > 0),
        "while attached, doctor --loaded listed numatrace's programs, maps, links {during:?}: it cannot see them"
    );
    let rc = text(dir, &format!("{case}.rc"))?;
    ensure!(
        rc.trim() == want_rc,
        "exit status {} (want {want_rc}): {out}",
        rc.trim()
    );
    let after = ours(&read_report(dir, &format!("{case}.after.json"))?);
    ensure!(
        after == [0, 0, 0],
        "numatrace programs, maps, links left in the kernel: {after:?}"
    );
    let state_left = text(dir, &format!("{case}.state-after"))?.trim() == "1";
    if case == "KILL" {
        ensure!(
            state_left,
            "SIGKILL cannot remove the state file, yet it is gone"
        );
    } else {
        ensure!(!state_left, "the state file was left behind");
    }
    Ok(())
}

/// numatrace's programs, maps and links in a `doctor --loaded --json`.
fn ours(loaded: &Loaded) -> [usize; 3] {
    let (programs, maps, links) = loaded.numatrace_counts();
    [programs, maps, links]
}
