//! Running host programs: every external command goes through here so that a
//! failure names the exact command line and what it printed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// The command line as a user could paste it (good enough for error messages).
pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = String::new();
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            s.push_str(&format!(
                "{}={} ",
                key.to_string_lossy(),
                value.to_string_lossy()
            ));
        }
    }
    s.push_str(&cmd.get_program().to_string_lossy());
    for arg in cmd.get_args() {
        let arg = arg.to_string_lossy();
        if arg.contains(' ') || arg.is_empty() {
            s.push_str(&format!(" '{arg}'"));
        } else {
            s.push(' ');
            s.push_str(&arg);
        }
    }
    s
}

/// Runs `cmd` with inherited stdio (progress bars cleared meanwhile);
/// fails unless it exits 0.
pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let line = describe(cmd);
    let status = crate::progress::suspend(|| cmd.status())
        .with_context(|| format!("cannot start `{line}` (is it installed and on PATH?)"))?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    Ok(())
}

/// Runs `cmd`, returns its stdout; fails with its stderr unless it exits 0.
pub(crate) fn output(cmd: &mut Command) -> Result<String> {
    Ok(String::from_utf8_lossy(&output_bytes(cmd)?).into_owned())
}

/// Like [`output`], for binary output.
pub(crate) fn output_bytes(cmd: &mut Command) -> Result<Vec<u8>> {
    let line = describe(cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start `{line}` (is it installed and on PATH?)"))?;
    if !out.status.success() {
        bail!(
            "`{line}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// True if `cmd` can be started and exits 0 (output discarded).
pub(crate) fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The workspace root (xtask lives in `<root>/xtask`).
pub(crate) fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Cargo's target directory, honouring `CARGO_TARGET_DIR`.
pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

/// `cargo` through the rustup proxy, run in the workspace root.
pub(crate) fn cargo() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(workspace_root());
    cmd
}

/// Takes the exclusive lock of `path` (created if missing), held while the
/// returned file lives; when another process holds it, calls `waiting`
/// (to say why this one stops) and waits.
pub(crate) fn lock_waiting(path: &Path, waiting: impl FnOnce()) -> Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => return Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => waiting(),
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
    file.lock()
        .with_context(|| format!("cannot lock {}", path.display()))?;
    Ok(file)
}
