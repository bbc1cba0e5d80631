//! VM test of `numatrace top`: the TUI runs live against the
//! hot-chunks workload inside tmux in the guest; the guest script captures
//! the screen, switches to the cgroup view (`c`), filters it to the
//! workload's cgroup (`/topw`) and opens it, quits with `q`, and records
//! how the terminal was left. The host checks the captured screens.
//!
//! tmux is not in the initramfs: [`guest_files`] copies the host's tmux
//! and the shared libraries `ldd` lists (the test bed's guests are Debian
//! kernels with a busybox userland; glibc + tmux run there unchanged).
use std::{path::Path, process::Command};

use anyhow::{bail, ensure, Context, Result};

use crate::{cmd, initramfs::GuestFile, kernels::Series};

const TMUX: &str = "/usr/bin/tmux";
const LOCALE: &str = "/usr/lib/locale/C.utf8/LC_CTYPE";
const TERMINFO_XTERM: &str = "/lib/terminfo/x/xterm";
const TERMINFO_SCREEN: &str = "/lib/terminfo/s/screen";

/// tmux and its shared libraries (and the ELF interpreter), at the same
/// paths in the guest.
pub(super) fn guest_files() -> Result<Vec<GuestFile>> {
    ensure!(
        Path::new(TMUX).is_file(),
        "{TMUX} missing: run `cargo xtask setup` (the top VM test runs tmux in the guest)"
    );
    let ldd = cmd::output(Command::new("ldd").arg(TMUX)).context("ldd /usr/bin/tmux")?;
    let mut files = vec![GuestFile {
        host: TMUX.into(),
        guest: TMUX.into(),
    }];
    for line in ldd.lines() {
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` or
        // `/lib64/ld-linux-x86-64.so.2 (0x...)`; vdso has no file.
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            files.push(GuestFile {
                host: p.into(),
                guest: p.to_owned(),
            });
        }
    }
    // tmux refuses to start without a UTF-8 LC_CTYPE and the client's
    // terminfo entry (the script sets TERM=xterm); busybox has neither.
    for extra in [LOCALE, TERMINFO_XTERM, TERMINFO_SCREEN] {
        ensure!(
            Path::new(extra).is_file(),
            "{extra} missing on the host (the top VM test copies it for tmux)"
        );
        files.push(GuestFile {
            host: extra.into(),
            guest: extra.to_owned(),
        });
    }
    ensure!(
        files.iter().any(|f| f.guest.contains("ld-linux")),
        "ldd {TMUX} named no ELF interpreter:\n{ldd}"
    );
    Ok(files)
}

/// The guest script: top in a 120x40 tmux pane against the workload.
///
/// With DRAM free the kernel promotes every page on its first hint fault,
/// so the workload's faults come in one pass over its chunks; computing
/// half a second after each chunk visit spreads that pass over several of
/// top's one-second intervals, longer than the capture loop's period even
/// on a loaded host.
pub(super) const SCRIPT: &str = include_str!("top.sh");

fn read(dir: &Path, name: &str) -> Result<String> {
    let p = dir.join(name);
    std::fs::read_to_string(&p).with_context(|| format!("no {}", p.display()))
}

/// The table row of `comm` in a captured screen: (pid, faults/s).
pub(super) fn process_row<'a>(screen: &'a str, comm: &str) -> Option<(&'a str, &'a str)> {
    screen.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let pid = it.next()?;
        (it.next()? == comm && pid.parse::<u32>().is_ok()).then_some(())?;
        Some((pid, it.next()?))
    })
}

pub(super) fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    let screen = read(dir, "screen.txt")?;
    ensure!(
        screen.contains("numatrace top") && screen.contains("numa_balancing=2 (tiering)"),
        "the captured screen is not top's header:\n{screen}"
    );
    let Some((pid, faults)) = process_row(&screen, "hot-chunks") else {
        bail!("no hot-chunks row in the process table:\n{screen}");
    };
    ensure!(
        faults != "0" && faults != "0.0",
        "hot-chunks (pid {pid}) shows {faults} hint faults/s:\n{screen}"
    );
    ensure!(
        read(dir, "alt_before.txt")?.trim() == "1",
        "top was not on the alternate screen while running"
    );
    let rc = read(dir, "top.rc")?;
    ensure!(
        rc.trim() == "0",
        "numatrace top exited with {} after q: {}",
        rc.trim(),
        read(dir, "top.err").unwrap_or_default()
    );
    ensure!(
        read(dir, "alt_after.txt")?.trim() == "0",
        "the alternate screen is still on after q"
    );
    let stty = read(dir, "stty.txt")?;
    let flags: Vec<&str> = stty.split_whitespace().collect();
    for f in ["icanon", "echo", "isig"] {
        ensure!(
            flags.contains(&f),
            "terminal not restored after q ({f} off): {stty}"
        );
    }
    let err = read(dir, "top.err")?;
    ensure!(err.contains("stopped: quit"), "top's summary: {err}");
    check_cgroup_view(dir)
}

/// The workload's cgroup has a row with hint faults in the cgroup view,
/// and opening it lists the workload.
fn check_cgroup_view(dir: &Path) -> Result<()> {
    let screen = read(dir, "screen_cgroups.txt")?;
    let row = screen.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == "/topw").then(|| it.next()).flatten()
    });
    ensure!(
        screen.contains("cgroups (") && row.is_some_and(|f| f != "0" && f != "0.0"),
        "the cgroup view has no /topw row with hint faults ({row:?}):\n{screen}"
    );
    let filtered = read(dir, "screen_cgroups_filtered.txt")?;
    let inside = read(dir, "screen_in_cgroup.txt")?;
    ensure!(
        inside.contains("processes (1) of /topw") && process_row(&inside, "hot-chunks").is_some(),
        "Enter on /topw does not list its process:\n{inside}\nthe filtered cgroup view before Enter:\n{filtered}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_process_row() {
        let screen = "    PID COMM          FLT/s▼   PRM/s\n      - all process~    2.0k       0\n    173 hot-chunks      1.5k       0\n";
        assert_eq!(process_row(screen, "hot-chunks"), Some(("173", "1.5k")));
        assert_eq!(process_row(screen, "postgres"), None);
    }

    #[test]
    fn guest_files_include_the_interpreter() {
        if Path::new(TMUX).is_file() {
            let files = guest_files().expect("ldd tmux");
            assert!(files.iter().any(|f| f.guest == TMUX));
            assert!(files.iter().any(|f| f.guest.contains("libc.so")));
        }
    }
}
