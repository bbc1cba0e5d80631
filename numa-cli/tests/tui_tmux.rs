//! `numatrace top` in a real terminal: tmux runs it on a recorded trace, the
//! test types keys (send-keys) and reads the screen (capture-pane) through
//! sort, filter, detail, help, pause, resize and quit, and checks that the
//! terminal is restored after q, Ctrl-C, SIGTERM and SIGHUP. `dump` there
//! shows its progress bar, with a rate, and clears it when done.
//!
//! tmux is required (`cargo xtask setup` installs it): without it this test
//! fails rather than skips.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_numatrace");

fn trace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/hot-chunks-6.12.trace")
}

/// A private tmux server with one session running `sh`; killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(w: u16, h: u16) -> Tmux {
        let version = Command::new("tmux").arg("-V").output();
        assert!(
            version.as_ref().is_ok_and(|o| o.status.success()),
            "tmux is missing: run `cargo xtask setup` (or `apt-get install tmux`); \
             the real-terminal test of `numatrace top` needs it"
        );
        let socket = format!("numatrace-test-{}-{w}x{h}", std::process::id());
        let t = Tmux { socket };
        t.cmd(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &w.to_string(),
            "-y",
            &h.to_string(),
            "env PS1='$ ' TERM=xterm-256color sh",
        ]);
        // Keys typed before the shell's first prompt are echoed ahead of
        // it, and the command's output then starts after the prompt, not
        // at the start of a line.
        t.wait("the shell's prompt", |s| s.starts_with('$'));
        t
    }

    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("running tmux");
        assert!(
            out.status.success(),
            "tmux {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        self.cmd(&args);
    }

    fn type_line(&self, line: &str) {
        self.cmd(&["send-keys", "-t", "t", "-l", line]);
        self.keys(&["Enter"]);
    }

    fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "t"])
    }

    fn display(&self, what: &str) -> String {
        self.cmd(&["display-message", "-p", "-t", "t", what])
            .trim()
            .to_owned()
    }

    /// Waits until the screen satisfies `pred`; panics with the screen.
    fn wait(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    fn wait_for(&self, text: &str) -> String {
        self.wait(text, |s| s.contains(text))
    }

    /// Waits until one screen holds every text: tmux can capture a frame
    /// half drawn, so texts asserted together are waited for together.
    fn wait_all(&self, texts: &[&str]) -> String {
        self.wait(&texts.join(" and "), |s| holds_all(s, texts))
    }

    /// The pid of the command the shell in the pane runs.
    fn child_pid(&self) -> u32 {
        let shell = self.display("#{pane_pid}");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
                .unwrap_or_default();
            if let Some(pid) = children
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
            {
                return pid;
            }
            assert!(Instant::now() < deadline, "no child of the shell {shell}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// After top exited: normal screen, cursor shown, cooked mode.
    fn assert_restored(&self, how: &str) {
        let s = self.wait(&format!("EXIT= after {how}"), |s| s.contains("EXIT="));
        assert_eq!(
            self.display("#{alternate_on}"),
            "0",
            "still on the alternate screen after {how}:\n{s}"
        );
        assert_eq!(
            self.display("#{cursor_flag}"),
            "1",
            "cursor hidden after {how}"
        );
        let s = self.wait(&format!("stty output after {how}"), |s| {
            s.contains("STTY-END")
        });
        let stty: Vec<&str> = s.split_whitespace().collect();
        for flag in ["icanon", "echo", "isig", "opost"] {
            assert!(
                stty.contains(&flag),
                "terminal not restored after {how}: {flag} is off\n{s}"
            );
        }
    }

    /// Runs top on the trace in the pane, with stty checked afterwards.
    fn run_top(&self, extra: &str) {
        self.run_top_env("", extra);
    }

    fn run_top_env(&self, env: &str, extra: &str) {
        self.keys(&["clear", "Enter"]);
        self.type_line(&format!(
            "{env} {BIN} top --replay {} {extra} 2>/tmp/numatrace-top-{}.err; echo EX\"\"IT=$?; stty -a; echo STTY\"\"-END",
            trace().display(),
            self.socket
        ));
        self.wait("the process row", |s| {
            s.contains("hot-chunks") && s.contains("FLT/s") && !s.contains("EXIT=")
        });
        assert_eq!(
            self.display("#{alternate_on}"),
            "1",
            "not on the alternate screen"
        );
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(format!("/tmp/numatrace-top-{}.err", self.socket))
            .unwrap_or_default()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let dir = std::env::var("TMUX_TMPDIR").unwrap_or_else(|_| "/tmp".into());
        let _ = std::fs::remove_file(format!("{dir}/tmux-{uid}/{}", self.socket));
        let _ = std::fs::remove_file(format!("/tmp/numatrace-top-{}.err", self.socket));
    }
}

fn holds_all(screen: &str, texts: &[&str]) -> bool {
    texts.iter().all(|t| screen.contains(t))
}

/// The table's header and first rows of the current screen.
fn table_lines(s: &str) -> Vec<&str> {
    s.lines()
        .skip_while(|l| !l.contains("FLT/s"))
        .take(4)
        .collect()
}

#[test]
fn top_in_tmux_sort_filter_detail_help_resize_quit() {
    let t = Tmux::start(100, 30);
    t.run_top("--speed 2");
    t.wait("the header and the process row", |s| {
        holds_all(
            s,
            &[
                "numatrace top",
                "numa_balancing=2 (tiering)",
                "10/10 hooks",
                "hint faults",
            ],
        ) && table_lines(s)
            .iter()
            .any(|l| l.contains("173") && l.contains("hot-chunks"))
    });
    // Wait for non-zero hint faults/s in the process row.
    t.wait("non-zero faults/s for hot-chunks", |s| {
        s.lines().any(|l| {
            l.contains("hot-chunks")
                && l.split_whitespace()
                    .nth(2)
                    .is_some_and(|v| v != "0" && v != "0.0")
        })
    });
    // The funnel's verdict for the recorded workload: its pages were
    // refused on latency (3.2 s mean against the 1 s threshold).
    t.wait("the verdict column", |s| {
        s.contains("WHY")
            && s.lines()
                .any(|l| l.contains("hot-chunks") && l.contains("refused 3"))
    });

    // Sort: next column, then reverse.
    t.keys(&["s"]);
    t.wait_for("sort: promoted/s ▼");
    t.keys(&["S"]);
    t.wait_for("sort: promoted/s ▲");
    t.keys(&["s"]);
    t.wait_for("sort: ping-pong % ▼");
    t.keys(&["s"]);
    t.wait_for("sort: rejected latency/s ▼");

    // Filter: a match, a miss, then Esc clears.
    t.keys(&["/"]);
    t.wait_for("filter: _");
    t.keys(&["-l", "chunks"]);
    t.wait_for("filter: chunks_");
    t.keys(&["Enter"]);
    t.wait_all(&["filter: chunks", "processes (1)"]);
    t.keys(&["/"]);
    t.keys(&["BSpace", "BSpace", "BSpace", "BSpace", "BSpace", "BSpace"]);
    t.keys(&["-l", "nomatch"]);
    t.keys(&["Enter"]);
    t.wait_all(&["no row matches the filter", "processes (0)"]);
    t.keys(&["Escape"]);
    t.wait_for("processes (1)");

    // The cgroup view (the recording is of another boot: the cgroup is
    // named by its id), its process, and back to all processes.
    t.keys(&["c"]);
    t.wait_all(&["cgroups (1)", "CGROUP", "id 1 "]);
    t.keys(&["j", "Enter"]);
    t.wait_all(&["processes (1) of id 1", "hot-chunks"]);
    t.keys(&["Escape"]);
    t.wait_for("cgroups (1)");
    t.keys(&["c"]);
    t.wait_for("processes (1)");

    // Detail of the process, and back.
    t.keys(&["j"]);
    t.keys(&["Enter"]);
    t.wait_all(&["address-space heat", "173 hot-chunks"]);
    t.wait_all(&["scanned ranges", "START"]);
    t.keys(&["Escape"]);
    t.wait_for("processes (1)");

    // The histogram follows the selection.
    t.wait_for("[173 hot-chunks]");

    // Help overlay: opens, any key closes.
    t.keys(&["?"]);
    t.wait_all(&[
        "numatrace top: keys",
        "filter by command, cgroup path or pid",
    ]);
    t.keys(&["x"]);
    t.wait("help closed", |s| !s.contains("numatrace top: keys"));

    // Pause and resume.
    t.keys(&["p"]);
    t.wait_for("PAUSED");
    t.keys(&["p"]);
    t.wait("resumed", |s| !s.contains("PAUSED"));

    // Model cycling changes the model column.
    t.keys(&["m"]);
    t.wait_for("fcount/s");

    // Resize down to 80x24 and up to 200x50.
    t.cmd(&["resize-window", "-t", "t", "-x", "80", "-y", "24"]);
    t.wait("an 80x24 layout", |s| {
        s.lines().count() <= 24
            && s.lines().all(|l| l.chars().count() <= 80)
            && holds_all(s, &["q quit", "hot-chunks", "FLT/s"])
    });
    t.cmd(&["resize-window", "-t", "t", "-x", "200", "-y", "50"]);
    t.wait_all(&["RESIDENT PAGES", "fault-count delta"]);

    // Refresh interval.
    t.keys(&["+"]);
    t.wait_for("refresh 2s");
    t.keys(&["-", "-"]);
    t.wait_for("refresh 0.5s");

    t.keys(&["q"]);
    t.assert_restored("q");
    let err = t.stderr();
    assert!(
        err.contains("numatrace: top:") && err.contains("stopped: quit"),
        "{err}"
    );
}

#[test]
fn top_restores_the_terminal_on_ctrl_c_sigterm_and_sighup() {
    let t = Tmux::start(90, 26);
    t.run_top("--speed 4");
    t.keys(&["C-c"]);
    t.assert_restored("Ctrl-C");
    for (sig, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")] {
        t.run_top("--speed 4");
        let pid = t.child_pid();
        // SAFETY: kill(2) with a pid this test's tmux pane started.
        let rc = unsafe { libc::kill(pid as i32, sig) };
        assert_eq!(rc, 0, "kill {pid}");
        t.assert_restored(name);
        let err = t.stderr();
        assert!(err.contains(&format!("stopped: {name} received")), "{err}");
    }
    // A panic: the hook restores the terminal, then the message is printed.
    t.run_top_env("NUMATRACE_TOP_PANIC_KEY=1", "--speed 4");
    t.keys(&["!"]);
    t.assert_restored("a panic");
    let s = t.screen();
    assert!(s.contains("EXIT=101"), "{s}");
    let err = t.stderr();
    assert!(err.contains("test panic"), "{err}");
}

#[test]
fn top_exits_when_its_terminal_goes_away() {
    let t = Tmux::start(90, 26);
    t.run_top("--speed 4");
    let pid = t.child_pid();
    // The terminal disappears (tmux killed): no spinning on EOF, top exits.
    // 30 s: a loaded 2-core host (a VM beside the tests) took over 10.
    t.cmd(&["kill-server"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if state.contains(") Z") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "numatrace top (pid {pid}) still running 30 s after its terminal went away"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The stdout of a command that must succeed (its stderr in the failure).
fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().expect("running numatrace");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn without_a_terminal_top_suggests_once() {
    let out = Command::new(BIN)
        .args(["top", "--replay"])
        .arg(trace())
        .output()
        .expect("running numatrace");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--once"), "{err}");
    // --once --json works without one, on the whole trace.
    let out = stdout_of(
        Command::new(BIN)
            .args(["top", "--once", "--json", "--replay"])
            .arg(trace()),
    );
    // Read as the type readers (bench top) read it.
    let v: numa_core::frame::Frame = serde_json::from_str(&out).expect("top's frame");
    let p = &v.processes[0];
    assert_eq!(p.comm, "hot-chunks");
    assert_eq!(p.faults_total, 27820);
    assert_eq!(v.system.faults_total, 27820);
    assert_eq!(v.ended.as_deref(), Some("end of trace"));
    // The cgroups: the recording is of another boot, so named by id.
    let c = &v.cgroups[0];
    assert_eq!((c.cgroup.as_deref(), c.faults_total), (Some("id 1"), 27820));
    assert_eq!(p.cgroup.as_deref(), Some("id 1"));
    // --by cgroup starts with them on screen.
    let text = stdout_of(
        Command::new(BIN)
            .args(["top", "--once", "--by", "cgroup", "--replay"])
            .arg(trace()),
    );
    assert!(
        text.contains("cgroups (1)") && text.lines().any(|l| l.starts_with("id 1 ")),
        "{text}"
    );
}

#[test]
fn once_shows_a_running_promoter_from_its_state_file() {
    use numa_host::promoter_state::{pid_start_ticks, PromoterState, Writer, ENV};
    let dir = std::env::temp_dir().join(format!("numatrace-top-promoter-{}", std::process::id()));
    let state_path = dir.join("promoter.json");
    let run = |args: &[&str]| {
        stdout_of(
            Command::new(BIN)
                .args(args)
                .arg("--replay")
                .arg(trace())
                .env(ENV, &state_path),
        )
    };
    // No promoter: said so, not guessed.
    let v: serde_json::Value =
        serde_json::from_str(&run(&["top", "--once", "--json"])).expect("JSON");
    assert_eq!(v["promoter"]["running"], false, "{}", v["promoter"]);
    assert_eq!(v["promoter"]["reason"], "no state file");

    // This process stands in for the promoter (its pid is alive).
    let me = std::process::id();
    let mut writer = Writer::at(&state_path, false).expect("state file");
    let mut state = PromoterState {
        pid: me,
        pid_start_ticks: pid_start_ticks(me),
        scope: "pid 4242".into(),
        model: "fault-count".into(),
        moved_pages: 1234,
        moved_bytes: 1234 * 4096,
        failures: 5,
        queue_depth: 17,
        ..PromoterState::default()
    };
    writer.publish(&mut state).expect("publish");
    let v: serde_json::Value =
        serde_json::from_str(&run(&["top", "--once", "--json"])).expect("JSON");
    assert_eq!(v["promoter"]["running"], true, "{}", v["promoter"]);
    assert_eq!(v["promoter"]["state"]["moved_pages"], 1234);
    assert_eq!(v["promoter"]["state"]["queue_depth"], 17);
    let text = run(&["top", "--once"]);
    assert!(
        text.lines()
            .any(|l| l.contains("promoter") && l.contains("queue 17")),
        "{text}"
    );
    writer.remove();
    let _ = std::fs::remove_dir_all(&dir);
}

/// On a terminal `dump` into a file draws a bar with the trace's name, the
/// bytes read, their rate and the time left on stderr, and clears it when
/// done. The unoptimised test build takes seconds over the 5 MB trace: the
/// bar is on screen for many polls of the pane.
#[test]
fn dump_to_a_file_shows_a_progress_bar_on_the_terminal() {
    let t = Tmux::start(150, 20);
    let out = std::env::temp_dir().join(format!("numatrace-dump-{}.jsonl", t.socket));
    t.type_line(&format!(
        "{BIN} dump {} > {}; echo DUMP\"\"-DONE=$?",
        trace().display(),
        out.display()
    ));
    let bar = t.wait("the progress bar", |s| {
        s.contains("ETA") && s.contains("/s")
    });
    let line = bar.lines().find(|l| l.contains("ETA")).unwrap_or_default();
    assert!(line.contains("hot-chunks-6.12.trace"), "{line}");
    assert!(line.contains("MiB"), "bytes read: {line}");
    let done = t.wait_for("DUMP-DONE=0");
    let _ = std::fs::remove_file(&out);
    assert!(!done.contains("ETA"), "the bar is left on screen:\n{done}");
}
