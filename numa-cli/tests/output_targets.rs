//! What numatrace does with an output that is not a regular file, or is
//! its own input, and with a stop signal while it writes: it writes in
//! place to what the user means (standard output, the null device, a FIFO
//! with a reader), refuses anything else with a message, never renames over
//! a non-regular file nor replaces a trace it reads, and leaves no
//! temporary file behind. Runs unprivileged; as root the null-device case
//! uses a device node of its own, so a regression cannot damage /dev/null.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::{
    io::Read,
    os::unix::{
        fs::{FileTypeExt, MetadataExt},
        process::ExitStatusExt,
    },
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

const NUMATRACE: &str = env!("CARGO_BIN_EXE_numatrace");
mod output_common;

use output_common::{names, TempDir, TRACE};

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a NUL-terminated path alive for the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

fn is_fifo(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

fn run(args: &[&str], out: &Path, cwd: &Path) -> Output {
    Command::new(NUMATRACE)
        .args(args)
        .arg(out)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("numatrace runs")
}

/// The commands that write a file from the trace, each ending in `-o`.
fn writers(trace: &str) -> Vec<(&'static str, Vec<String>)> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        ("dump", v(&["dump", trace, "-o"])),
        ("parquet", v(&["dump", trace, "--format", "parquet", "-o"])),
        (
            "parquet demotions",
            v(&["dump", trace, "--format", "parquet", "--demotions", "-o"]),
        ),
        ("replay", v(&["replay", trace, "--json", "-o"])),
        ("report", v(&["report", trace, "-o"])),
    ]
}

/// A reader of a FIFO, open before numatrace starts: a reader that is
/// still starting (a `cat` not yet in its open) is no reader, and
/// numatrace rightly refuses a FIFO without one. Opened non-blocking (it
/// is a reader at once), then polled: a FIFO reports a hang-up only once a
/// writer has come and gone, so the end of numatrace's output is told
/// apart from a writer not there yet. Copies what it reads into a file.
struct FifoReader(std::thread::JoinHandle<bool>);

impl FifoReader {
    fn start(fifo: &Path, into: &Path) -> FifoReader {
        use std::os::unix::{fs::OpenOptionsExt, io::AsRawFd};
        let mut pipe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo)
            .expect("open the FIFO for reading");
        let mut out = std::fs::File::create(into).expect("reader output");
        FifoReader(std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(60);
            let mut buf = vec![0u8; 1 << 16];
            while Instant::now() < end {
                let mut p = libc::pollfd {
                    fd: pipe.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd for the duration of the call.
                if unsafe { libc::poll(&mut p, 1, 100) } <= 0 {
                    continue;
                }
                match pipe.read(&mut buf) {
                    Ok(0) if p.revents & libc::POLLHUP != 0 => return true,
                    Ok(n) => std::io::Write::write_all(&mut out, &buf[..n]).expect("copy"),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("reading the FIFO: {e}"),
                }
            }
            false
        }))
    }

    /// Whether the reader saw its writer close (within a minute).
    fn finished(self) -> bool {
        self.0.join().expect("reader thread")
    }
}

#[test]
fn a_fifo_with_a_reader_is_written_in_place_directly_or_through_a_symlink() {
    let dir = TempDir::new("fifo");
    let fifo = dir.0.join("pipe");
    mkfifo(&fifo);
    let link = dir.0.join("link");
    std::os::unix::fs::symlink(&fifo, &link).expect("symlink");
    for (name, args) in writers(TRACE) {
        for out in [&fifo, &link] {
            let got = dir.0.join("got");
            let reader = FifoReader::start(&fifo, &got);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = run(&args, out, &dir.0);
            assert!(
                r.status.success(),
                "{name} -o {out:?}: {}",
                String::from_utf8_lossy(&r.stderr)
            );
            assert!(is_fifo(&fifo), "{name} -o {out:?}: the FIFO was replaced");
            assert!(
                std::fs::symlink_metadata(&link).is_ok_and(|m| m.is_symlink()),
                "{name} -o {out:?}: the symlink was replaced"
            );
            assert!(
                reader.finished(),
                "{name} -o {out:?}: the FIFO never closed"
            );
            let len = std::fs::metadata(&got).expect("got").len();
            assert!(len > 100, "{name} -o {out:?}: {len} bytes through the FIFO");
            assert_eq!(names(&dir.0), ["got", "link", "pipe"], "{name}");
        }
    }
}

#[test]
fn a_fifo_without_a_reader_or_a_directory_is_refused_not_replaced() {
    let dir = TempDir::new("noreader");
    let fifo = dir.0.join("pipe");
    mkfifo(&fifo);
    let sub = dir.0.join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    std::fs::write(sub.join("inside"), b"x").expect("inside");
    for (name, args) in writers(TRACE) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run(&args, &fifo, &dir.0);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success(), "{name}: exit 0 with no reader");
        assert!(
            err.contains("pipe") && err.contains("no reader"),
            "{name}: {err}"
        );
        assert!(is_fifo(&fifo), "{name}: the FIFO was replaced");
        let r = run(&args, &sub, &dir.0);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success(), "{name}: exit 0 onto a directory");
        assert!(
            err.contains("a directory, not a regular file"),
            "{name}: {err}"
        );
        assert_eq!(names(&dir.0), ["pipe", "sub"], "{name}");
    }
}

/// The null device: as root a node of its own (a regression would rename
/// over it, not over /dev/null), else /dev/null itself (which an
/// unprivileged process cannot replace).
#[test]
fn the_null_device_is_written_in_place() {
    let dir = TempDir::new("null");
    let own = dir.0.join("null");
    let c = std::ffi::CString::new(own.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: geteuid has no preconditions; mknod gets a NUL-terminated path.
    let root = unsafe { libc::geteuid() } == 0;
    let made =
        root && unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) } == 0;
    if root && !made {
        eprintln!("skipped: root without CAP_MKNOD, and /dev/null is not to be risked");
        return;
    }
    let null = if made {
        own
    } else {
        PathBuf::from("/dev/null")
    };
    for (name, args) in writers(TRACE) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run(&args, &null, &dir.0);
        assert!(
            r.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let m = std::fs::symlink_metadata(&null).expect("null");
        assert!(m.file_type().is_char_device(), "{name}: {null:?} replaced");
        assert_eq!(m.rdev(), libc::makedev(1, 3), "{name}");
    }
    let m = std::fs::symlink_metadata("/dev/null").expect("/dev/null");
    assert!(
        m.file_type().is_char_device(),
        "/dev/null is no longer a device"
    );
    assert_eq!(m.mode() & 0o777, 0o666, "/dev/null's mode");
}

/// `-` and a symlink to this process's standard output (what
/// `/dev/stdout` is) are standard output; neither name is replaced.
#[test]
fn dash_and_a_link_to_stdout_write_to_stdout() {
    let dir = TempDir::new("stdout");
    let link = dir.0.join("stdout");
    std::os::unix::fs::symlink("/proc/self/fd/1", &link).expect("symlink");
    for (name, args) in writers(TRACE) {
        if name.starts_with("parquet") {
            continue;
        }
        for out in [Path::new("-"), &link] {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = run(&args, out, &dir.0);
            assert!(
                r.status.success(),
                "{name} -o {out:?}: {}",
                String::from_utf8_lossy(&r.stderr)
            );
            assert!(r.stdout.len() > 100, "{name} -o {out:?}: nothing on stdout");
            assert!(
                std::fs::symlink_metadata(&link).is_ok_and(|m| m.is_symlink()),
                "{name} -o {out:?}: the link to stdout was replaced"
            );
            assert_eq!(names(&dir.0), ["stdout"], "{name} -o {out:?}");
        }
    }
}

#[test]
fn an_output_that_is_an_input_is_refused_before_anything_is_written() {
    let dir = TempDir::new("input");
    let input = dir.0.join("in.trace");
    std::fs::copy(TRACE, &input).expect("copy");
    let hard = dir.0.join("hard.trace");
    std::fs::hard_link(&input, &hard).expect("hard link");
    let soft = dir.0.join("soft.trace");
    std::os::unix::fs::symlink(&input, &soft).expect("symlink");
    let before = std::fs::read(&input).expect("input");
    let i = input.to_string_lossy().into_owned();
    let mut cases = writers(&i);
    let export = ["export", "--replay", &i, "--speed", "0", "--textfile"];
    cases.push(("export", export.iter().map(|s| s.to_string()).collect()));
    for (name, args) in cases {
        for out in [&input, &hard, &soft] {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = run(&args, out, &dir.0);
            let err = String::from_utf8_lossy(&r.stderr);
            assert!(!r.status.success(), "{name} -o {out:?}: exit 0");
            assert!(
                err.contains("same file as the input"),
                "{name} -o {out:?}: {err}"
            );
            assert_eq!(std::fs::read(&input).expect("input"), before, "{name}");
            assert_eq!(std::fs::metadata(&input).expect("meta").nlink(), 2);
        }
    }
    assert_eq!(names(&dir.0), ["hard.trace", "in.trace", "soft.trace"]);
}

/// Without `-o`, `report` writes report.html in the current directory only
/// if nothing is there; `--json` and `--csv` are refused with the command
/// that has them.
#[test]
fn report_without_output_never_replaces_and_refuses_json() {
    let dir = TempDir::new("report");
    let r = Command::new(NUMATRACE)
        .args(["report", TRACE])
        .current_dir(&dir.0)
        .output()
        .expect("report");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(
        std::fs::metadata(dir.0.join("report.html"))
            .expect("report")
            .len()
            > 1000
    );
    std::fs::write(dir.0.join("report.html"), b"mine").expect("write");
    let r = Command::new(NUMATRACE)
        .args(["report", TRACE])
        .current_dir(&dir.0)
        .output()
        .expect("report");
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "replaced an existing report.html");
    assert!(err.contains("report.html") && err.contains("-o"), "{err}");
    assert_eq!(
        std::fs::read(dir.0.join("report.html")).expect("read"),
        b"mine"
    );
    for flag in ["--json", "--csv"] {
        let r = Command::new(NUMATRACE)
            .args(["report", TRACE, flag, "-o", "x.html"])
            .current_dir(&dir.0)
            .output()
            .expect("report");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success(), "{flag} accepted and ignored");
        assert!(err.contains(flag) && err.contains("replay"), "{err}");
    }
    assert_eq!(names(&dir.0), ["report.html"]);
}

/// A trace of `faults` hint faults, big enough that dumping it takes a
/// while.
fn big_trace(path: &Path, faults: u64) {
    use numa_core::{decode::fixtures::fault, trace};
    let f = std::io::BufWriter::new(std::fs::File::create(path).expect("trace"));
    let mut w = trace::Writer::new(f, &trace::fixtures::header()).expect("writer");
    for i in 1..=faults {
        let ev = numa_core::decode::Event::Fault(fault(
            i,
            i % 4096,
            5,
            numa_ebpf_common::Outcome::PromoteHot,
        ));
        w.event(&ev).expect("event");
    }
    w.finish(faults, "duration").expect("finish");
}

#[test]
fn a_stop_signal_mid_write_leaves_no_temporary() {
    let dir = TempDir::new("signal");
    let trace = dir.0.join("big.trace");
    big_trace(&trace, 500_000);
    let out = dir.0.join("out.jsonl");
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let mut cmd = Command::new(NUMATRACE);
        cmd.arg("dump")
            .arg(&trace)
            .arg("-o")
            .arg(&out)
            .stderr(Stdio::piped());
        // A test run started in the background of a shell inherits SIGINT
        // ignored, which numatrace rightly leaves ignored: the child starts
        // with the default action, as from a terminal.
        // SAFETY: signal() is async-signal-safe, fit to run between fork
        // and exec.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                libc::signal(sig, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("dump");
        assert!(
            stopped_mid_write(&child, &dir.0, 1 << 20),
            "signal {sig}: dump never wrote 1 MiB"
        );
        // SAFETY: kill with the pid of a child not yet waited for; the
        // signal is pending while it is stopped, and handled as it goes on.
        unsafe {
            assert_eq!(libc::kill(child.id() as i32, sig), 0);
            assert_eq!(libc::kill(child.id() as i32, libc::SIGCONT), 0);
        }
        let status = child.wait().expect("wait");
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        assert_eq!(status.signal(), Some(sig), "signal {sig}: {status:?} {err}");
        assert_eq!(names(&dir.0), ["big.trace"], "signal {sig}: left behind");
    }
}

/// Lets `child` run in slices of a few milliseconds, stopped in between,
/// until its temporary in `dir` holds more than `bytes`, and leaves it
/// stopped there: a signal sent then lands mid-write however loaded the
/// machine is (polling a running child can see it finish first). False
/// when it exited first or never got there.
fn stopped_mid_write(child: &std::process::Child, dir: &Path, bytes: u64) -> bool {
    let pid = child.id() as i32;
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(2));
        let mut status = 0;
        // SAFETY: signals and a wait for stop on our own child, not yet
        // reaped (an exit reaped here makes the caller's assertion fail).
        let stopped = unsafe {
            libc::kill(pid, libc::SIGSTOP) == 0
                && libc::waitpid(pid, &mut status, libc::WUNTRACED) == pid
                && libc::WIFSTOPPED(status)
        };
        if !stopped {
            return false;
        }
        let written = std::fs::read_dir(dir)
            .expect("ls")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(".out.jsonl."))
            .any(|e| e.metadata().is_ok_and(|m| m.len() > bytes));
        if written {
            return true;
        }
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
    }
    false
}

/// `shadow --record X -o X`: the report would replace the trace at the
/// end of the run; refused before attaching.
#[test]
fn shadow_refuses_its_report_over_its_trace() {
    let dir = TempDir::new("shadow");
    let r = Command::new(NUMATRACE)
        .args(["shadow", "--record", "x.trace", "-o", "x.trace"])
        .args(["--duration", "1"])
        .current_dir(&dir.0)
        .output()
        .expect("shadow");
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success());
    assert!(err.contains("also the --record trace"), "{err}");
    assert!(names(&dir.0).is_empty());
}
