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
//! A reader ignores a file whose process is gone (pid not alive, or reused:
//! its start time differs), one not updated for [`STALE_AFTER_S`], and one
//! it cannot parse (truncated, garbage, too large): each is "not running",
//! with the reason, never a panic.
use std::{
    collections::BTreeMap,
    fs,
    io::{self, Read},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

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

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The fallback when `/run` is not writable: a directory of this user's.
pub fn fallback_path() -> PathBuf {
    std::env::temp_dir()
        .join(format!("numatrace-{}", euid()))
        .join("promoter.json")
}

/// Where to look, in order: the override alone, or the default then the
/// fallback.
pub fn paths() -> Vec<PathBuf> {
    match std::env::var_os(ENV) {
        Some(p) if !p.is_empty() => vec![PathBuf::from(p)],
        _ => vec![PathBuf::from(DEFAULT_PATH), fallback_path()],
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

/// Reads one file (at most [`MAX_BYTES`]).
pub fn read_path(
    path: &Path,
    now_unix_s: f64,
    alive: impl Fn(u32, Option<u64>) -> bool,
) -> Reading {
    let f = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Reading::NotRunning(NotRunning::NoFile)
        }
        Err(e) => {
            return Reading::NotRunning(NotRunning::Ignored(format!("{}: {e}", path.display())))
        }
    };
    let mut text = String::new();
    if let Err(e) = f.take(MAX_BYTES + 1).read_to_string(&mut text) {
        return Reading::NotRunning(NotRunning::Ignored(format!("{}: {e}", path.display())));
    }
    if text.len() as u64 > MAX_BYTES {
        return Reading::NotRunning(NotRunning::Ignored(format!(
            "{}: larger than {MAX_BYTES} bytes",
            path.display()
        )));
    }
    judge(&text, now_unix_s, alive)
}

/// Where readers look; cheap to clone.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub paths: Vec<PathBuf>,
}

impl Source {
    /// `$NUMATRACE_PROMOTER_STATE`, else the default and the fallback.
    pub fn from_env() -> Source {
        Source { paths: paths() }
    }

    pub fn at(path: impl Into<PathBuf>) -> Source {
        Source {
            paths: vec![path.into()],
        }
    }

    /// The first running promoter among the paths, else why the most
    /// telling one is not running (a file beats no file).
    pub fn read(&self) -> Reading {
        let now = unix_now();
        let mut why = NotRunning::NoFile;
        for p in &self.paths {
            match read_path(p, now, process_alive) {
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
    prev: Option<(f64, u64)>,
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
        if let Reading::Running(other) = read_path(path, unix_now(), process_alive) {
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
            prev: None,
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
        if let Ok(text) = fs::read_to_string(&self.path) {
            if serde_json::from_str::<PromoterState>(&text)
                .is_ok_and(|s| s.pid == std::process::id())
            {
                let _ = fs::remove_file(&self.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(pid: u32, updated: f64) -> PromoterState {
        PromoterState {
            version: FORMAT_VERSION,
            pid,
            pid_start_ticks: Some(77),
            started_unix_s: updated - 10.0,
            updated_unix_s: updated,
            scope: "pid 42".into(),
            moved_pages: 1234,
            moved_bytes: 1234 * 4096,
            failures: 3,
            failures_by_status: [("ebusy".to_owned(), 2), ("enomem".to_owned(), 1)]
                .into_iter()
                .collect(),
            queue_depth: 17,
            batch_ms: 20.0,
            ..PromoterState::default()
        }
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "numatrace-state-test-{tag}-{}-{}",
            std::process::id(),
            unix_now().to_bits()
        ));
        fs::create_dir_all(&d).expect("temp dir");
        d
    }

    #[test]
    fn round_trip_through_the_writer() {
        let dir = tmp("rt");
        let path = dir.join("sub").join("promoter.json");
        let mut w = Writer::at(&path, false).expect("writer");
        let mut s = state(std::process::id(), 0.0);
        s.pid_start_ticks = pid_start_ticks(std::process::id());
        w.publish(&mut s).expect("publish");
        let Reading::Running(mut got) = Source::at(&path).read() else {
            panic!("not running: {:?}", Source::at(&path).read());
        };
        // JSON keeps 17 significant digits of a float, not always all bits.
        assert!((got.updated_unix_s - s.updated_unix_s).abs() < 1e-6);
        got.updated_unix_s = s.updated_unix_s;
        assert_eq!(*got, s);
        // A second publication: the rate follows the moved pages.
        std::thread::sleep(std::time::Duration::from_millis(20));
        s.moved_pages += 100;
        w.publish(&mut s).expect("publish");
        assert!(s.moved_pages_per_s > 0.0, "{}", s.moved_pages_per_s);
        let got = Source::at(&path).read();
        assert_eq!(got.running().map(|r| r.moved_pages), Some(1334));
        // No temporary file left behind.
        let names: Vec<String> = fs::read_dir(path.parent().expect("dir"))
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["promoter.json"]);
        w.remove();
        assert_eq!(
            Source::at(&path).read(),
            Reading::NotRunning(NotRunning::NoFile)
        );
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn stale_and_future_files_are_ignored() {
        let s = serde_json::to_string(&state(1, 1000.0)).expect("json");
        let alive = |_: u32, _: Option<u64>| true;
        assert!(judge(&s, 1004.0, alive).running().is_some());
        assert_eq!(
            judge(&s, 1010.0, alive),
            Reading::NotRunning(NotRunning::Stale {
                pid: 1,
                age_s: 10.0
            })
        );
        assert!(matches!(
            judge(&s, 990.0, alive),
            Reading::NotRunning(NotRunning::Stale { .. })
        ));
    }

    #[test]
    fn dead_or_reused_pid_is_not_running() {
        let s = serde_json::to_string(&state(4242, 1000.0)).expect("json");
        assert_eq!(
            judge(&s, 1000.5, |_, _| false),
            Reading::NotRunning(NotRunning::Exited { pid: 4242 })
        );
        // The real liveness check: a child that has exited and been reaped.
        let mut child = std::process::Command::new("true").spawn().expect("true");
        let pid = child.id();
        child.wait().expect("wait");
        assert!(!process_alive(pid, None));
        // This process, with the wrong start time: a reused pid.
        let me = std::process::id();
        let ticks = pid_start_ticks(me).expect("own start time");
        assert!(process_alive(me, Some(ticks)));
        assert!(!process_alive(me, Some(ticks + 1)));
        assert!(!process_alive(0, None));
    }

    #[test]
    fn truncated_garbage_or_huge_files_are_ignored_not_fatal() {
        let dir = tmp("bad");
        let full = serde_json::to_string(&state(std::process::id(), unix_now())).expect("json");
        let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(MAX_BYTES as usize));
        for (name, text) in [
            ("truncated", &full[..full.len() / 2]),
            ("garbage", "\u{0}\u{1}not json at all"),
            ("empty", ""),
            ("other-json", "{\"version\": 1}"),
            (
                "wrong-version",
                &full.replace("\"version\":1", "\"version\":99"),
            ),
            ("huge", &huge),
        ] {
            let p = dir.join(name);
            fs::write(&p, text).expect("write");
            match Source::at(&p).read() {
                Reading::NotRunning(NotRunning::Ignored(why)) => {
                    assert!(!why.is_empty(), "{name}");
                    assert!(!NotRunning::Ignored(why).to_string().is_empty());
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        // A directory where the file should be: ignored too.
        assert!(matches!(
            Source::at(&dir).read(),
            Reading::NotRunning(NotRunning::Ignored(_))
        ));
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn a_running_promoter_keeps_its_file() {
        let dir = tmp("own");
        let path = dir.join("promoter.json");
        // Another process (our parent stands in for it) publishes here.
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        let mut other = state(parent, unix_now());
        other.pid_start_ticks = pid_start_ticks(parent);
        fs::write(&path, serde_json::to_vec(&other).expect("json")).expect("write");
        let err = Writer::at(&path, false).expect_err("taken");
        assert!(err.contains("another running promoter"), "{err}");
        // Once it has exited (a pid that is not alive), the file is taken over.
        other.pid = u32::MAX / 2;
        fs::write(&path, serde_json::to_vec(&other).expect("json")).expect("write");
        let w = Writer::at(&path, false).expect("taken over");
        assert_eq!(
            Source::at(&path).read().running().map(|s| s.pid),
            Some(std::process::id())
        );
        w.remove();
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn private_fallback_dir_must_be_ours() {
        let dir = tmp("priv");
        let p = dir.join("numatrace-x");
        ensure_dir(&p, true).expect("private dir");
        let m = fs::metadata(&p).expect("meta");
        assert_eq!(m.mode() & 0o777, 0o700);
        // A symlink planted where the directory should be is refused.
        let link = dir.join("numatrace-link");
        std::os::unix::fs::symlink(&p, &link).expect("symlink");
        assert!(ensure_dir(&link, true).is_err());
        let _ = fs::remove_dir_all(dir);
    }
}
