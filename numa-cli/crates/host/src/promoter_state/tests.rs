//! The state file: round trips, judging, and the reader's refusals.
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
    // Removed for good: a late publication (the mover thread, still
    // running while a panic unwinds the main thread) does not bring it back.
    w.publish(&mut s).expect("publish after removal");
    assert_eq!(
        Source::at(&path).read(),
        Reading::NotRunning(NotRunning::NoFile)
    );
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn a_panic_guard_closes_the_writer_another_thread_publishes_with() {
    let dir = std::env::temp_dir().join(format!("numatrace-guard-{}", std::process::id()));
    let path = dir.join("promoter.json");
    let mut w = Writer::at(&path, false).expect("writer");
    let guard = w.panic_guard();
    let unwound = std::thread::spawn(move || {
        let _guard = guard;
        panic!("the main thread's test panic");
    })
    .join();
    assert!(unwound.is_err());
    assert_eq!(
        Source::at(&path).read(),
        Reading::NotRunning(NotRunning::NoFile)
    );
    w.publish(&mut PromoterState::default()).expect("publish");
    assert_eq!(
        Source::at(&path).read(),
        Reading::NotRunning(NotRunning::NoFile),
        "the writer published again after the guard removed its file"
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
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
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

/// Reads on another thread: a read that blocks fails the test instead of
/// hanging it.
fn read_within(source: &Source) -> Reading {
    let limit = std::time::Duration::from_secs(5);
    let (tx, rx) = std::sync::mpsc::channel();
    let s = source.clone();
    std::thread::spawn(move || {
        let _ = tx.send(s.read());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("reading {source:?} blocked for {limit:?}"))
}

/// A valid state of this (live) process, as a file of mode 0644.
fn live_state_file(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut s = state(std::process::id(), unix_now());
    s.pid_start_ticks = pid_start_ticks(std::process::id());
    fs::write(path, serde_json::to_vec(&s).expect("json")).expect("write");
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).expect("chmod");
}

fn refused(source: &Source) -> String {
    match read_within(source) {
        Reading::NotRunning(NotRunning::Ignored(why)) => why,
        other => panic!("{source:?}: {other:?}"),
    }
}

#[test]
fn planted_fifos_links_foreign_and_open_files_are_refused_without_blocking() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmp("planted");
    let target = dir.join("target.json");
    live_state_file(&target);
    assert!(read_within(&Source::at(&target)).running().is_some());

    // A FIFO nobody writes to: opening it for reading would wait forever.
    let fifo = dir.join("fifo.json");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a NUL-terminated path alive for the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
    let why = refused(&Source::at(&fifo));
    assert!(why.contains("a FIFO, not a regular file"), "{why}");

    // A symlink to a perfectly good state file is not followed.
    let link = dir.join("link.json");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let why = refused(&Source::at(&link));
    assert!(why.contains("symbolic link, not followed"), "{why}");

    // A file anyone may write.
    let open = dir.join("open.json");
    live_state_file(&open);
    fs::set_permissions(&open, fs::Permissions::from_mode(0o666)).expect("chmod");
    let why = refused(&Source::at(&open));
    assert!(why.contains("writable by other users (mode 666)"), "{why}");

    // A file of another user (nobody); as root it is chowned, otherwise
    // the same check is made for a reader of another user id.
    let foreign = dir.join("foreign.json");
    live_state_file(&foreign);
    let why = if crate::fs::euid() == 0 {
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).expect("chown");
        refused(&Source::at(&foreign))
    } else {
        match crate::fs::read_shared_as(&foreign, 1 << 16, crate::fs::Dir::Named, 65534) {
            Err(crate::fs::ReadError::Refused(why)) => why,
            other => panic!("{other:?}"),
        }
    };
    assert!(why.contains("owned by uid"), "{why}");
    assert!(why.contains(&foreign.display().to_string()), "{why}");
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn the_fallback_directory_must_be_private_to_the_reader() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmp("fallback");
    let private = dir.join("numatrace-me");
    ensure_dir(&private, true).expect("private dir");
    let path = private.join("promoter.json");
    live_state_file(&path);
    let source = Source::fallback(&path);
    assert!(read_within(&source).running().is_some());
    // Opened up to others: whoever can write there could plant the file.
    fs::set_permissions(&private, fs::Permissions::from_mode(0o777)).expect("chmod");
    let why = refused(&source);
    assert!(
        why.contains("not a private directory of this user"),
        "{why}"
    );
    // A symlink to a private directory in its place is not followed.
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).expect("chmod");
    let link = dir.join("numatrace-link");
    std::os::unix::fs::symlink(&private, &link).expect("symlink");
    let why = refused(&Source::fallback(link.join("promoter.json")));
    assert!(why.contains("a symbolic link (not followed)"), "{why}");
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn the_panic_guard_removes_the_file_only_when_a_panic_unwinds() {
    let dir = tmp("guard");
    let path = dir.join("promoter.json");
    let mut w = Writer::at(&path, false).expect("writer");
    w.publish(&mut state(std::process::id(), 0.0))
        .expect("publish");
    drop(w.panic_guard());
    assert!(
        path.exists(),
        "a guard dropped without a panic removed the file"
    );
    let guard = w.panic_guard();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _guard = guard;
        panic!("the test panic");
    }));
    assert!(unwound.is_err());
    assert!(
        !path.exists(),
        "a panic unwound past the guard and left the file"
    );
    let _ = fs::remove_dir_all(dir);
}
