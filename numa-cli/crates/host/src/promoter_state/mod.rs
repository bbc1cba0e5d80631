//! The promoter's live state, shared across processes: `numatrace promote`
//! publishes a small JSON file about once a second (written to a temporary
//! file and renamed over the old one, so a reader sees a whole file or the
//! previous one); `numatrace top` and `numatrace export` read it.
//!
//! Path: `$NUMATRACE_PROMOTER_STATE` when set, else
//! `/run/numatrace/promoter.json`; when `/run` is not writable the promoter
//! falls back to `$TMPDIR/numatrace-<euid>/promoter.json` (a directory of
//! its own, mode 0700), where readers of the same user also look.
//!
//! A reader trusts only a regular file of its own user (or root) that
//! nobody else may write, opened without following a symlink or blocking
//! (`numa_host::fs::read_shared`), in the fallback case inside a directory
//! private to that user: `top` and `export` run as root and read from
//! places where other users may plant a symlink, a FIFO or a file of their
//! own. It ignores a file whose process is gone (pid not alive, or reused:
//! its start time differs), one not updated for [`STALE_AFTER_S`], and one
//! it refuses or cannot parse (truncated, garbage, too large): each is "not
//! running", with the reason, never a panic or a wait.
use std::{
    collections::BTreeMap,
    fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use serde::{Deserialize, Serialize};

use crate::fs::{euid, read_shared, Dir, ReadError};

/// Environment variable overriding the path (readers and the promoter).
pub const ENV: &str = "NUMATRACE_PROMOTER_STATE";
pub const DEFAULT_PATH: &str = "/run/numatrace/promoter.json";
/// The promoter rewrites the file this often.
pub const PUBLISH_EVERY_S: f64 = 1.0;
/// A file not rewritten for this long is ignored.
pub const STALE_AFTER_S: f64 = 5.0;
/// Larger files are not read (a state is a few hundred bytes).
const MAX_BYTES: u64 = 64 << 10;
pub const FORMAT_VERSION: u32 = 1;

/// What the promoter publishes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PromoterState {
    pub version: u32,
    pub pid: u32,
    /// Field 22 of /proc/PID/stat (clock ticks after boot): tells a reused
    /// pid apart.
    pub pid_start_ticks: Option<u64>,
    pub started_unix_s: f64,
    pub updated_unix_s: f64,
    pub dry_run: bool,
    pub scope: String,
    pub model: String,
    pub moved_pages: u64,
    pub moved_bytes: u64,
    /// Pages moved per second since the previous publication.
    pub moved_pages_per_s: f64,
    pub already_on_target: u64,
    /// Failed page moves (every status but moved and already-on-target).
    pub failures: u64,
    /// `ebusy`, `enomem`, `eacces`, `efault`, `enoent`, `not_migrated`, `other`.
    pub failures_by_status: BTreeMap<String, u64>,
    /// Requests on the channel plus pages in the mover's queue.
    pub queue_depth: u64,
    pub queue_overflows: u64,
    /// Dry run: pages that would have been moved.
    pub would_move_pages: u64,
    /// 0: unlimited.
    pub rate_limit_bytes_per_s: u64,
    /// `--batch-ms`, the time each move_pages call aims for.
    pub batch_ms: f64,
    /// Pages the next call will take (adaptive).
    pub batch_pages: u64,
    pub move_calls: u64,
    /// Time inside move_pages (moves and location queries).
    pub move_pages_seconds: f64,
    /// Mean time per move call over the run, ms.
    pub mean_call_ms: Option<f64>,
    pub rate_waits: u64,
    pub floor_waits: u64,
    /// The promoter's index of scan passes (2 MiB chunks held, and the
    /// processes they belong to): bounded by the processes of the last
    /// ten minutes, which a run of days must show.
    #[serde(default)]
    pub scan_index_entries: u64,
    #[serde(default)]
    pub scan_index_processes: u64,
    /// Folios it moved that reclaim demoted again within 600 s
    /// (ping-pong).
    #[serde(default)]
    pub pingpong: u64,
}

impl PromoterState {
    /// Pages and failures per second since `prev` (0 if not later).
    pub fn failures_per_s(&self, prev: &PromoterState) -> f64 {
        let dt = self.updated_unix_s - prev.updated_unix_s;
        if dt > 0.0 {
            self.failures.saturating_sub(prev.failures) as f64 / dt
        } else {
            0.0
        }
    }
}

/// Why a reader shows no promoter.
#[derive(Debug, Clone, PartialEq)]
pub enum NotRunning {
    NoFile,
    /// Unreadable, truncated or not a state file: the error.
    Ignored(String),
    /// Not rewritten for `age_s` seconds.
    Stale {
        pid: u32,
        age_s: f64,
    },
    /// Its process is gone (or the pid now belongs to another process).
    Exited {
        pid: u32,
    },
}

impl std::fmt::Display for NotRunning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotRunning::NoFile => write!(f, "no state file"),
            NotRunning::Ignored(why) => write!(f, "state file ignored: {why}"),
            NotRunning::Stale { pid, age_s } => {
                write!(f, "pid {pid} silent for {age_s:.0} s")
            }
            NotRunning::Exited { pid } => write!(f, "pid {pid} exited"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    Running(Box<PromoterState>),
    NotRunning(NotRunning),
}

impl Reading {
    pub fn running(&self) -> Option<&PromoterState> {
        match self {
            Reading::Running(s) => Some(s),
            Reading::NotRunning(_) => None,
        }
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The fallback when `/run` is not writable: a directory of this user's.
pub fn fallback_path() -> PathBuf {
    std::env::temp_dir()
        .join(format!("numatrace-{}", euid()))
        .join("promoter.json")
}

/// Where to look, in order: the override alone, or the default then the
/// fallback (in a directory that must be private to this user).
pub fn paths() -> Vec<(PathBuf, Dir)> {
    match std::env::var_os(ENV) {
        Some(p) if !p.is_empty() => vec![(PathBuf::from(p), Dir::Named)],
        _ => vec![
            (PathBuf::from(DEFAULT_PATH), Dir::Named),
            (fallback_path(), Dir::Private),
        ],
    }
}

/// `starttime` (field 22) of /proc/PID/stat.
pub fn pid_start_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The comm (field 2) may contain spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Is `pid` the process that wrote the state (alive, same start time)?
pub fn process_alive(pid: u32, start_ticks: Option<u64>) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    let exists = rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists {
        return false;
    }
    match (start_ticks, pid_start_ticks(pid)) {
        (Some(want), Some(now)) => want == now,
        _ => true,
    }
}

/// Parses and judges one file's text.
pub fn judge(text: &str, now_unix_s: f64, alive: impl Fn(u32, Option<u64>) -> bool) -> Reading {
    let s: PromoterState = match serde_json::from_str(text) {
        Ok(s) => s,
        Err(e) => return Reading::NotRunning(NotRunning::Ignored(format!("not a state: {e}"))),
    };
    if s.version != FORMAT_VERSION {
        return Reading::NotRunning(NotRunning::Ignored(format!(
            "format version {} (this numatrace reads {FORMAT_VERSION})",
            s.version
        )));
    }
    let age_s = now_unix_s - s.updated_unix_s;
    if !age_s.is_finite() || age_s.abs() > STALE_AFTER_S {
        return Reading::NotRunning(NotRunning::Stale { pid: s.pid, age_s });
    }
    if !alive(s.pid, s.pid_start_ticks) {
        return Reading::NotRunning(NotRunning::Exited { pid: s.pid });
    }
    Reading::Running(Box::new(s))
}

/// Reads one file (at most [`MAX_BYTES`], checked as `read_shared` does).
pub fn read_path(
    path: &Path,
    dir: Dir,
    now_unix_s: f64,
    alive: impl Fn(u32, Option<u64>) -> bool,
) -> Reading {
    match read_shared(path, MAX_BYTES, dir) {
        Ok(bytes) => judge(&String::from_utf8_lossy(&bytes), now_unix_s, alive),
        Err(ReadError::Missing) => Reading::NotRunning(NotRunning::NoFile),
        Err(ReadError::Refused(why)) => Reading::NotRunning(NotRunning::Ignored(why)),
    }
}

/// Where readers look; cheap to clone.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub paths: Vec<(PathBuf, Dir)>,
}

impl Source {
    /// `$NUMATRACE_PROMOTER_STATE`, else the default and the fallback.
    pub fn from_env() -> Source {
        Source { paths: paths() }
    }

    /// One file, where the caller says.
    pub fn at(path: impl Into<PathBuf>) -> Source {
        Source {
            paths: vec![(path.into(), Dir::Named)],
        }
    }

    /// One file in a directory that must be private to this user.
    pub fn fallback(path: impl Into<PathBuf>) -> Source {
        Source {
            paths: vec![(path.into(), Dir::Private)],
        }
    }

    /// The first running promoter among the paths, else why the most
    /// telling one is not running (a file beats no file).
    pub fn read(&self) -> Reading {
        let now = unix_now();
        let mut why = NotRunning::NoFile;
        for (p, dir) in &self.paths {
            match read_path(p, *dir, now, process_alive) {
                r @ Reading::Running(_) => return r,
                Reading::NotRunning(NotRunning::NoFile) => {}
                Reading::NotRunning(w) => {
                    if why == NotRunning::NoFile {
                        why = w;
                    }
                }
            }
        }
        Reading::NotRunning(why)
    }
}

/// Creates `dir` if needed; the fallback directory must be a real
/// directory of this user's, private (no symlink games in a shared /tmp).
fn ensure_dir(dir: &Path, private: bool) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match fs::DirBuilder::new()
        .recursive(!private)
        .mode(if private { 0o700 } else { 0o755 })
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    if private {
        let m = fs::symlink_metadata(dir)?;
        if !m.is_dir() || m.uid() != euid() || m.mode() & 0o022 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} is not a private directory of this user", dir.display()),
            ));
        }
    }
    Ok(())
}

/// The promoter's side: where it publishes, and the previous publication
/// for the rate.
#[derive(Debug)]
pub struct Writer {
    pub path: PathBuf,
    /// How its own file is read back (to remove it only if still ours).
    dir: Dir,
    prev: Option<(f64, u64)>,
    /// Set once the file is removed: no publication may bring it back.
    /// Held while writing, so a removal (the panic guard's, on another
    /// thread) never lands between a publication's check and its rename.
    closed: Arc<Mutex<bool>>,
}

impl Writer {
    /// Picks the path (`$NUMATRACE_PROMOTER_STATE`, `/run/numatrace`, or
    /// the fallback) and checks it can be written. Refuses to take over the
    /// file of another promoter that is still running.
    pub fn open() -> Result<Writer, String> {
        let candidates: Vec<(PathBuf, bool)> = match std::env::var_os(ENV) {
            Some(p) if !p.is_empty() => vec![(PathBuf::from(p), false)],
            _ => vec![
                (PathBuf::from(DEFAULT_PATH), false),
                (fallback_path(), true),
            ],
        };
        let mut errors = Vec::new();
        for (path, private) in candidates {
            match Writer::at(&path, private) {
                Ok(w) => return Ok(w),
                Err(e) => errors.push(e),
            }
        }
        Err(errors.join("; "))
    }

    /// Publishes at `path` (its directory is created).
    pub fn at(path: &Path, private_dir: bool) -> Result<Writer, String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            ensure_dir(dir, private_dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let dir = if private_dir {
            Dir::Private
        } else {
            Dir::Named
        };
        if let Reading::Running(other) = read_path(path, dir, unix_now(), process_alive) {
            if other.pid != std::process::id() {
                return Err(format!(
                    "{} belongs to another running promoter (pid {}); set {ENV} to publish elsewhere",
                    path.display(),
                    other.pid
                ));
            }
        }
        let w = Writer {
            path: path.to_owned(),
            dir,
            prev: None,
            closed: Arc::new(Mutex::new(false)),
        };
        // Fail now, not at the first publication.
        w.write(&PromoterState {
            version: FORMAT_VERSION,
            pid: std::process::id(),
            pid_start_ticks: pid_start_ticks(std::process::id()),
            started_unix_s: unix_now(),
            updated_unix_s: unix_now(),
            ..PromoterState::default()
        })
        // The error names the path already.
        .map_err(|e| e.to_string())?;
        Ok(w)
    }

    fn write(&self, s: &PromoterState) -> io::Result<()> {
        let bytes = serde_json::to_vec(s).map_err(io::Error::other)?;
        let closed = lock(&self.closed);
        if *closed {
            return Ok(());
        }
        crate::fs::write_atomic(&self.path, &bytes, 0o644)
    }

    /// Stamps `s` (version, update time, rate since the last publication)
    /// and writes it.
    pub fn publish(&mut self, s: &mut PromoterState) -> io::Result<()> {
        s.version = FORMAT_VERSION;
        s.updated_unix_s = unix_now();
        s.moved_pages_per_s = match self.prev {
            Some((t, moved)) if s.updated_unix_s > t => {
                s.moved_pages.saturating_sub(moved) as f64 / (s.updated_unix_s - t)
            }
            _ => 0.0,
        };
        self.prev = Some((s.updated_unix_s, s.moved_pages));
        self.write(s)
    }

    /// Removes the file if it is still ours (readers then say "not running"
    /// at once instead of after the staleness delay).
    pub fn remove(&self) {
        close_and_remove(&self.closed, &self.path, self.dir);
    }

    /// A guard that removes this process's file if a panic unwinds past it:
    /// the thread that owns the writer dies with the process without
    /// cleaning up, and may still be publishing until then.
    pub fn panic_guard(&self) -> PanicGuard {
        PanicGuard {
            path: self.path.clone(),
            dir: self.dir,
            closed: Arc::clone(&self.closed),
        }
    }
}

/// See [`Writer::panic_guard`].
pub struct PanicGuard {
    path: PathBuf,
    dir: Dir,
    closed: Arc<Mutex<bool>>,
}

impl Drop for PanicGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            close_and_remove(&self.closed, &self.path, self.dir);
        }
    }
}

/// A poisoned lock still guards a plain flag.
fn lock(m: &Mutex<bool>) -> std::sync::MutexGuard<'_, bool> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Stops further publications, then removes the file if it is ours.
fn close_and_remove(closed: &Mutex<bool>, path: &Path, dir: Dir) {
    let mut closed = lock(closed);
    *closed = true;
    remove_own(path, dir);
}

/// Removes the file at `path` if it is this process's state.
fn remove_own(path: &Path, dir: Dir) {
    if let Ok(bytes) = read_shared(path, MAX_BYTES, dir) {
        if serde_json::from_slice::<PromoterState>(&bytes)
            .is_ok_and(|s| s.pid == std::process::id())
        {
            let _ = fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests;
