//! Tests that need a real kernel: each is a guest shell script plus a host
//! check of what it left in its results directory. All tests for one kernel
//! run in a single boot (a TCG boot costs seconds), but for those that need
//! instruction-count mode, which share a second one; each writes to
//! `/results/<name>/` and is reported on its own.
//!
//! Tests run in table order in the same guest, so a test must set any global
//! state it relies on (e.g. `numa_balancing`) itself.
//!
//! Each test is a guest script `NAME.sh` (included as `NAME::SCRIPT`)
//! beside its host-side check in `NAME.rs` (`check`); [`TESTS`] lists them
//! in run order. README.md here says how to add one.

mod cgroups;
mod demotion;
mod detach;
mod doctor;
mod export;
mod funnel;
mod hostile;
mod logging;
mod observer;
mod passes;
mod probe_count;
mod promote;
mod recording;
mod rfc;
mod shadow;
mod shapes;
pub(crate) mod soak;
mod systemd;
mod top;

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

use crate::kernels::{Kernel, Series};
use crate::vm::{self, Guest, Mode, Topology};

/// One VM test.
pub(crate) struct VmTest {
    pub name: &'static str,
    /// Run with `sh` in `$RESULTS` (= /results/<name>), numatrace on PATH.
    /// Its exit status must be 0.
    pub script: &'static str,
    pub kernels: &'static [Series],
    /// The guest kills the script after this long.
    pub timeout_s: u64,
    /// Host-side check: (results dir, this test's console lines, kernel).
    pub check: fn(&Path, &str, Series) -> Result<()>,
    /// Runs in the kernel's instruction-count boot (guest time = guest
    /// instructions, [`vm::icount_cpus`] vCPUs) instead of the boot the
    /// other tests share.
    pub icount: bool,
    /// Runs in the kernel's systemd boot (guest_image.rs: a Debian userland
    /// with systemd as PID 1, the test run as a unit) instead.
    pub systemd: bool,
}

pub(crate) const TESTS: &[VmTest] = &[
    VmTest {
        name: "doctor",
        script: doctor::SCRIPT,
        kernels: &Series::ALL,
        timeout_s: 180,
        check: doctor::check,
        icount: false,
        systemd: false,
    },
    // Sets demotion_enabled and puts it back. First after doctor: its
    // phases land where they must in a boot of little else (the earlier
    // tests' files on the root tmpfs are demoted before its hot set), and
    // it leaves the kernel's promotion threshold reset, as a boot does.
    VmTest {
        name: "demotion",
        script: demotion::SCRIPT,
        kernels: &Series::ALL,
        // Two attaches around 30 s of workloads, and two passes over a
        // trace of about 250,000 hint faults (300 s on 6.1 on a busy host).
        timeout_s: 480,
        check: demotion::check,
        icount: false,
        systemd: false,
    },
    VmTest {
        name: "probe_count",
        script: probe_count::SCRIPT,
        kernels: &Series::ALL,
        timeout_s: 180,
        check: probe_count::check,
        icount: false,
        systemd: false,
    },
    // Records the trace that `shadow` reads.
    VmTest {
        name: "recording",
        script: recording::SCRIPT,
        kernels: &Series::ALL,
        timeout_s: 400,
        check: recording::check,
        icount: false,
        systemd: false,
    },
    VmTest {
        name: "shadow",
        script: shadow::SCRIPT,
        kernels: &Series::ALL,
        timeout_s: 120,
        check: shadow::check,
        icount: false,
        systemd: false,
    },
    VmTest {
        name: "shapes",
        script: shapes::SCRIPT,
        kernels: &Series::ALL,
        // One attach around a workload of three processes of three threads.
        timeout_s: 240,
        check: shapes::check,
        icount: false,
        systemd: false,
    },
    // What it tests (the TUI in a real terminal) is numatrace's own: the
    // data it shows takes the same path on every kernel, which the other
    // tests check. One kernel keeps the suite within CI's time.
    VmTest {
        name: "top",
        script: top::SCRIPT,
        kernels: &[Series::V6_12],
        timeout_s: 240,
        check: top::check,
        icount: false,
        systemd: false,
    },
    VmTest {
        name: "export",
        script: export::SCRIPT,
        kernels: &Series::ALL,
        // Two attaches (export, hist) around 30 s of workloads; an attach
        // takes tens of seconds under TCG on a busy host.
        timeout_s: 240,
        check: export::check,
        icount: false,
        systemd: false,
    },
    VmTest {
        name: "funnel",
        script: funnel::SCRIPT,
        kernels: &Series::ALL,
        // Three attaches around about 100 s of workloads.
        timeout_s: 360,
        check: funnel::check,
        icount: false,
        systemd: false,
    },
    VmTest {
        name: "cgroups",
        script: cgroups::SCRIPT,
        kernels: &Series::ALL,
        // Two attaches (the live run, then its recording read back)
        // around 6 s of workloads.
        timeout_s: 240,
        check: cgroups::check,
        icount: false,
        systemd: false,
    },
    // Sets scan_period_max_ms and puts it back.
    VmTest {
        name: "passes",
        script: passes::SCRIPT,
        kernels: &Series::ALL,
        // doctor, DRAM filled, two attaches, 70 s of workload, four
        // reports from the two traces.
        timeout_s: 540,
        check: passes::check,
        icount: false,
        systemd: false,
    },
    VmTest {
        name: "promote",
        script: promote::SCRIPT,
        kernels: &Series::ALL,
        timeout_s: 300,
        check: promote::check,
        icount: false,
        systemd: false,
    },
    VmTest {
        name: "detach",
        script: detach::SCRIPT,
        kernels: &Series::ALL,
        timeout_s: 420,
        check: detach::check,
        icount: false,
        systemd: false,
    },
    // SIGTERM and SIGHUP: numatrace's one path for the three signals, on
    // the kernel where an attach is quickest.
    VmTest {
        name: "detach_signals",
        script: detach::SIGNALS_SCRIPT,
        kernels: &[Series::V6_1],
        timeout_s: 300,
        check: detach::check_signals,
        icount: false,
        systemd: false,
    },
    // 90 s of soak, plus four attaches and their reports. What it watches
    // (numatrace's memory, descriptors and series over time) is
    // numatrace's own, not the kernel's: one kernel keeps the suite within
    // CI's time; `cargo xtask soak --kernel K` runs it long on any other.
    VmTest {
        name: "soak",
        script: soak::SCRIPT,
        kernels: &[Series::V7],
        timeout_s: 420,
        check: soak::check,
        icount: false,
        systemd: false,
    },
    // The patched kernel's own test: doctor, counters and the fault-count
    // model's agreement with its decisions.
    VmTest {
        name: "rfc_fault_count",
        script: rfc::SCRIPT,
        kernels: &[Series::V6_12Rfc],
        timeout_s: 600,
        check: rfc::check,
        icount: false,
        systemd: false,
    },
    // Late: it switches numa_balancing from 2 to 1 and back, which resets
    // the kernel's adaptive promotion threshold (reset_memory_tiering) in
    // the middle of its window; the tests that compare models with the
    // kernel must not run after that.
    VmTest {
        name: "logging",
        script: logging::SCRIPT,
        kernels: &Series::ALL,
        timeout_s: 240,
        check: logging::check,
        icount: false,
        systemd: false,
    },
    // Its own instruction-count boot, where it is the only test: runs
    // compared across a boot must see the same instructions whatever the
    // host's load. The kernels' instruction-count boots run side by side.
    VmTest {
        name: "observer",
        script: observer::SCRIPT,
        kernels: &Series::ALL,
        // A warm-up and parts of five and three runs, 15-35 s each in TCG.
        timeout_s: 600,
        check: observer::check,
        icount: true,
        systemd: false,
    },
    // Its own boot: the Debian guest with systemd as PID 1 (guest_image.rs),
    // numatrace installed from its .deb and run by its units. On the
    // kernel Debian trixie (the image's userland) ships: what it tests is
    // the package and its units, which the kernels do not change.
    VmTest {
        name: "systemd",
        script: systemd::SCRIPT,
        kernels: &[Series::V6_12],
        // systemd's start, three attaches (export twice, shadow), 20 s of
        // workload, Prometheus' start and a 15 s shadow period.
        timeout_s: 720,
        check: systemd::check,
        icount: false,
        systemd: true,
    },
    // Last in every boot: it puts the kernel in lockdown, which holds
    // until the guest powers off.
    VmTest {
        name: "hostile",
        script: hostile::SCRIPT,
        kernels: &Series::ALL,
        timeout_s: 300,
        check: hostile::check,
        icount: false,
        systemd: false,
    },
];

/// Judges the results a hand-run `name` test left in `dir` (no console).
pub(crate) fn check_results(name: &str, dir: &Path, series: Series) -> Result<()> {
    let Some(test) = TESTS.iter().find(|t| t.name == name) else {
        let names: Vec<&str> = TESTS.iter().map(|t| t.name).collect();
        bail!(
            "no VM test named {name:?}; the tests are: {}",
            names.join(", ")
        );
    };
    (test.check)(dir, "", series)
}

/// Result of one VM test.
pub(crate) struct TestResult {
    pub name: String,
    pub outcome: Result<()>,
    /// Guest-side time of the test (from its end marker), if it ran: wall
    /// time, or in an instruction-count boot its instructions in ns plus
    /// the idle time the guest skipped.
    pub seconds: Option<u64>,
}

const TEST_BEGIN: &str = "===NUMATRACE-TEST-BEGIN ";
const TEST_END: &str = "===NUMATRACE-TEST-END ";

/// Whether `test` is among `only` (every test when `only` is empty).
pub(crate) fn selected(test: &VmTest, only: &[String]) -> bool {
    only.is_empty() || only.iter().any(|n| n == test.name)
}

/// The boots of one kernel's tests.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Boot {
    /// The busybox guest most tests share.
    Shared,
    /// The busybox guest in instruction-count mode.
    Icount,
    /// The Debian guest with systemd as PID 1.
    Systemd,
}

impl VmTest {
    fn boot(&self) -> Boot {
        match (self.icount, self.systemd) {
            (_, true) => Boot::Systemd,
            (true, false) => Boot::Icount,
            (false, false) => Boot::Shared,
        }
    }
}

/// Whether a test the suite runs on `kernels` (those in `only`, if any)
/// boots the systemd guest.
pub(crate) fn needs_systemd_image(kernels: &[Series], only: &[String]) -> bool {
    kernels
        .iter()
        .any(|&k| !tests_of(k, only, Boot::Systemd).is_empty())
}

/// Runs the tests of [`TESTS`] that apply to `kernel` (those in `only`, if
/// any) and do not count instructions: one boot for the tests that share
/// it, one systemd boot for the others (each only if it has tests).
/// [`run_icount`] runs the rest.
pub(crate) fn run_kernel(kernel: &Kernel, numatrace: &Path, only: &[String]) -> Vec<TestResult> {
    [Boot::Shared, Boot::Systemd]
        .into_iter()
        .flat_map(|boot| run_tests_of(kernel, numatrace, only, boot, true))
        .collect()
}

/// The instruction-count boots of `kernels`, side by side, each kernel's
/// results in `kernels`' order. A boot is one host thread (TCG with one
/// thread for all vCPUs), and its guest's clock counts its instructions:
/// the other boots change how long it takes, not what it measures. Their
/// consoles go to their console.log files, not to stdout.
pub(crate) fn run_icount(
    kernels: &[Kernel],
    numatrace: &Path,
    only: &[String],
) -> Vec<Vec<TestResult>> {
    let show_console = kernels.len() == 1;
    std::thread::scope(|scope| {
        let boots: Vec<_> = kernels
            .iter()
            .map(|k| {
                scope.spawn(move || run_tests_of(k, numatrace, only, Boot::Icount, show_console))
            })
            .collect();
        boots
            .into_iter()
            .zip(kernels)
            .map(|(boot, k)| {
                boot.join().unwrap_or_else(|_| {
                    let tests = tests_of(k.series, only, Boot::Icount);
                    all_failed(&tests, "the thread running this boot panicked")
                })
            })
            .collect()
    })
}

/// Whether the suite (or `only`) boots `series` in instruction-count mode.
pub(crate) fn boots_icount(series: Series, only: &[String]) -> bool {
    !tests_of(series, only, Boot::Icount).is_empty()
}

/// The tests of `boot` the suite (or `only`) runs on `series`.
fn tests_of(series: Series, only: &[String], boot: Boot) -> Vec<&'static VmTest> {
    TESTS
        .iter()
        .filter(|t| t.boot() == boot && t.kernels.contains(&series) && selected(t, only))
        .collect()
}

/// Boots `kernel` as `boot` says and runs its tests, if it has any.
fn run_tests_of(
    kernel: &Kernel,
    numatrace: &Path,
    only: &[String],
    boot: Boot,
    show_console: bool,
) -> Vec<TestResult> {
    let tests = tests_of(kernel.series, only, boot);
    if tests.is_empty() {
        Vec::new()
    } else {
        run_boot(kernel, numatrace, &tests, boot, show_console)
    }
}

/// The results of `tests` that could not run for `why`.
fn all_failed(tests: &[&VmTest], why: &str) -> Vec<TestResult> {
    tests
        .iter()
        .map(|t| TestResult {
            name: t.name.to_string(),
            outcome: Err(anyhow::anyhow!("{why}")),
            seconds: None,
        })
        .collect()
}

/// Guest path of numatrace's .deb in the systemd guest (init copies
/// /numatrace-vmtest/ onto the root disk).
pub(crate) const GUEST_DEB_DIR: &str = "/numatrace-vmtest/deb";

/// Boots `kernel` once (as `boot` says) and runs `tests` in it, in order.
fn run_boot(
    kernel: &Kernel,
    numatrace: &Path,
    tests: &[&VmTest],
    boot: Boot,
    show_console: bool,
) -> Vec<TestResult> {
    let icount = boot == Boot::Icount;
    // Each boot its own directory: the console log goes beside the results.
    let out = vm::state_dir(kernel.series)
        .join(match boot {
            Boot::Shared => "test",
            Boot::Icount => "test-icount",
            Boot::Systemd => "test-systemd",
        })
        .join("results");
    let boot_budget_s = match boot {
        // systemd's own start under TCG comes on top of the kernel's.
        Boot::Systemd => 240,
        Boot::Shared | Boot::Icount => 120,
    };
    // tmux for the `top` test; without it that test fails and says why.
    let mut files = top::guest_files().unwrap_or_default();
    let image = match boot {
        Boot::Systemd => {
            // The image comes from `cargo xtask setup`; built here if it
            // is missing (a minute of mmdebstrap), so the test runs.
            let image = crate::guest_image::ensure(&mut crate::host::Setup::new(false));
            let deb = crate::package::build(numatrace);
            match (image, deb) {
                (Ok(image), Ok(deb)) => {
                    let name = deb
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_else(|| "numatrace.deb".into());
                    files.push(crate::initramfs::GuestFile {
                        host: deb,
                        guest: format!("{GUEST_DEB_DIR}/{name}"),
                    });
                    Some(image)
                }
                (Err(e), _) => return all_failed(tests, &format!("no systemd guest image: {e:#}")),
                (_, Err(e)) => return all_failed(tests, &format!("no .deb: {e:#}")),
            }
        }
        Boot::Shared | Boot::Icount => None,
    };
    let topology = if icount {
        Topology {
            cpus: vm::icount_cpus(kernel.series),
            ..Topology::default()
        }
    } else {
        Topology::default()
    };
    let guest = Guest {
        kernel,
        topology,
        numatrace,
        files: &files,
        mode: Mode::Command(guest_script(tests)),
        timeout: Duration::from_secs(
            boot_budget_s + tests.iter().map(|t| t.timeout_s).sum::<u64>(),
        ),
        out: &out,
        icount,
        root_disk: image.as_deref(),
        plugin: None,
        show_console,
    };
    let outcome = match vm::boot(&guest) {
        Ok(outcome) => outcome,
        Err(err) => return all_failed(tests, &format!("cannot boot: {err:#}")),
    };
    let sections: Vec<(&VmTest, String)> = tests
        .iter()
        .map(|t| (*t, section(&outcome.console, t.name)))
        .collect();
    let boot_failure = boot_failure(&outcome, &sections);
    sections
        .into_iter()
        .map(|(t, console)| {
            let outcome = if boot_failure.is_empty() {
                judge(t, &out.join(t.name), &console, kernel.series)
            } else {
                Err(anyhow::anyhow!(
                    "{} (console: {})",
                    boot_failure.join("; "),
                    outcome_log(&out)
                ))
            };
            TestResult {
                name: t.name.to_string(),
                outcome,
                seconds: test_seconds(&out.join(t.name)),
            }
        })
        .collect()
}

/// Why every test of this boot fails, if it does: kernel problems outside
/// every test's section (e.g. at boot) and all other test bed failures.
fn boot_failure(outcome: &vm::Outcome, sections: &[(&VmTest, String)]) -> Vec<String> {
    let stray_problems: Vec<&String> = outcome
        .kernel_problems
        .iter()
        .filter(|p| {
            !sections
                .iter()
                .any(|(_, s)| s.lines().any(|l| l == p.as_str()))
        })
        .collect();
    let mut boot_failure = Vec::new();
    if outcome.timed_out || outcome.exit_status.is_none() || outcome.setup_failed.is_some() {
        boot_failure.extend(outcome.failure());
    } else if let Some(err) = &outcome.results_error {
        boot_failure.push(format!("results: {err}"));
    }
    if !stray_problems.is_empty() {
        boot_failure.push(format!(
            "kernel problems on the console: {}",
            stray_problems
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    boot_failure
}

fn outcome_log(out: &Path) -> String {
    out.parent()
        .unwrap_or(Path::new("."))
        .join("console.log")
        .display()
        .to_string()
}

fn judge(test: &VmTest, dir: &Path, console: &str, series: Series) -> Result<()> {
    let problems: Vec<&str> = console
        .lines()
        .filter(|l| vm::is_kernel_problem(l))
        .collect();
    ensure!(
        problems.is_empty(),
        "kernel problems during the test: {}",
        problems.join(" | ")
    );
    let status_file = dir.join("exit_status");
    let status = std::fs::read_to_string(&status_file)
        .with_context(|| format!("no {} (the test did not run?)", status_file.display()))?;
    match status.trim() {
        "0" => {}
        "137" => bail!("killed after {} s (timeout)", test.timeout_s),
        other => bail!(
            "guest script exited with status {other}{}",
            last_words(console)
        ),
    }
    (test.check)(dir, console, series)
}

/// The last lines a failed script printed (its stderr is the console),
/// so that a CI log names the reason without the console log beside it.
fn last_words(console: &str) -> String {
    const LINES: usize = 4;
    let lines: Vec<&str> = console
        .lines()
        // Kernel messages ("[   12.345678] ...") interleave with the script's.
        .filter(|l| !l.trim().is_empty() && !l.starts_with('['))
        .collect();
    let tail = &lines[lines.len().saturating_sub(LINES)..];
    if tail.is_empty() {
        return String::new();
    }
    format!("; it printed last: {}", tail.join(" | "))
}

/// The guest script running `tests` one after another.
fn guest_script(tests: &[&VmTest]) -> String {
    // The scripts' stderr is the serial console, a terminal: TERM=dumb
    // keeps progress bars (and their escapes) out of the log the checks
    // read, as in a CI log. A test that needs a terminal sets its own.
    let mut s = String::from("failed=0\nexport TERM=dumb\n");
    for t in tests {
        let dir = format!("/results/{}", t.name);
        let _ = write!(
            s,
            "echo '{TEST_BEGIN}{name}==='\n\
             mkdir -p {dir} && cd {dir}\n\
             t0=$(date +%s)\n\
             RESULTS={dir} timeout -s KILL {timeout} sh -c {script}\n\
             rc=$?\n\
             echo $rc > {dir}/exit_status\n\
             echo $(( $(date +%s) - t0 )) > {dir}/seconds\n\
             echo \"{TEST_END}{name} exit=$rc===\"\n\
             [ $rc -eq 0 ] || failed=1\n\
             cd /\n",
            name = t.name,
            timeout = t.timeout_s,
            script = vm::shell_quote(t.script),
        );
    }
    s.push_str("exit $failed\n");
    s
}

/// The console lines between a test's begin and end markers.
fn section(console: &str, name: &str) -> String {
    let begin = format!("{TEST_BEGIN}{name}===");
    let end = format!("{TEST_END}{name} ");
    console
        .lines()
        .skip_while(|l| *l != begin)
        .skip(1)
        .take_while(|l| !l.starts_with(&end))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The guest-side seconds a test took, from its results directory (not
/// from the console: the last test's end marker can be lost to the results
/// block that follows it on the serial line).
fn test_seconds(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("seconds"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_boots_in_instruction_count_mode_for_the_observer() {
        for k in [Series::V6_1, Series::V6_12, Series::V7] {
            assert!(boots_icount(k, &[]), "{k:?}");
            assert!(boots_icount(k, &["observer".into()]), "{k:?}");
            assert!(!boots_icount(k, &["doctor".into()]), "{k:?}");
            let shared = tests_of(k, &[], Boot::Shared);
            assert!(shared.iter().all(|t| !t.icount), "{k:?}");
        }
    }

    #[test]
    fn the_systemd_image_is_needed_by_the_kernels_of_its_tests() {
        assert!(needs_systemd_image(&[Series::V6_12], &[]));
        assert!(needs_systemd_image(&Series::ALL, &["systemd".into()]));
        assert!(!needs_systemd_image(&[Series::V6_1, Series::V7], &[]));
        assert!(!needs_systemd_image(&Series::ALL, &["doctor".into()]));
    }

    #[test]
    fn check_results_names_the_tests_and_judges_the_dir() {
        let err = check_results("nope", Path::new("/"), Series::V6_12)
            .expect_err("unknown test")
            .to_string();
        assert!(err.contains("promote") && err.contains("doctor"), "{err}");
        let empty = std::env::temp_dir().join(format!("xtask-empty-{}", std::process::id()));
        std::fs::create_dir_all(&empty).expect("temp dir");
        assert!(check_results("promote", &empty, Series::V6_12).is_err());
        let _ = std::fs::remove_dir_all(&empty);
    }

    #[test]
    fn the_lockdown_test_comes_last_in_every_boot() {
        for series in Series::ALL {
            let last = TESTS
                .iter()
                .rfind(|t| t.boot() == Boot::Shared && t.kernels.contains(&series));
            assert_eq!(last.map(|t| t.name), Some("hostile"), "{series:?}");
        }
        assert!(TESTS
            .iter()
            .all(|t| t.name != "hostile" || t.boot() == Boot::Shared));
    }

    /// The mode switch resets the kernel's adaptive threshold: every test
    /// that compares a model or a count with the kernel runs before it.
    #[test]
    fn the_mode_switching_test_runs_after_the_kernel_comparisons() {
        let at = |name: &str| TESTS.iter().position(|t| t.name == name);
        let logging = at("logging").expect("the logging test");
        for name in [
            "probe_count",
            "recording",
            "shadow",
            "top",
            "export",
            "promote",
            "detach",
            "detach_signals",
            "soak",
        ] {
            assert!(
                at(name).is_some_and(|i| i < logging),
                "{name} runs after logging"
            );
        }
    }

    #[test]
    fn a_failed_script_names_its_last_words_not_the_kernels() {
        let console = "a\nwhy: no room\n[   12.5] oom-kill\n\n";
        assert_eq!(last_words(console), "; it printed last: a | why: no room");
        assert_eq!(last_words("[ 1.0] x\n"), "");
    }

    #[test]
    fn sections_and_script() {
        let console = "boot\n===NUMATRACE-TEST-BEGIN doctor===\na\nb\n===NUMATRACE-TEST-END doctor exit=0===\nafter\n";
        assert_eq!(section(console, "doctor"), "a\nb\n");
        assert_eq!(section(console, "other"), "");
        let dir = std::env::temp_dir().join(format!("xtask-secs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        assert_eq!(test_seconds(&dir), None);
        std::fs::write(dir.join("seconds"), "42\n").expect("write");
        assert_eq!(test_seconds(&dir), Some(42));
        let _ = std::fs::remove_dir_all(&dir);
        let script = guest_script(&[&TESTS[0]]);
        assert!(script.contains("RESULTS=/results/doctor timeout -s KILL 180 sh -c 'echo 2"));
        assert!(script.ends_with("exit $failed\n"));
    }
}
