//! `cargo xtask vm`: the tiered-NUMA test bed. Boots a Debian guest kernel
//! under QEMU (TCG: KVM does not work on this machine kind) with
//! node 0 = all CPUs + DRAM and node 1 = CPU-less slow memory in a lower
//! memory tier, runs one command as root in a busybox initramfs, and brings
//! `/results` back over the serial console.
//!
//! This is the only runner: `demo` and `test` boot through [`boot`] too.
//!
//! With `--systemd` (and for the tests marked so) init hands over to
//! systemd on a Debian root disk (guest_image.rs), which runs the command
//! as a unit: same topology, same console protocol.
//!
//! Console protocol (written by test/vm-init/init and test/vm-init/send-results,
//! one marker per line):
//! `===NUMATRACE-READY===` (test bed set up), `===NUMATRACE-SETUP-FAILED=== why`,
//! `===NUMATRACE-RESULTS-BEGIN===`, base64 of a tar.gz of /results,
//! `===NUMATRACE-RESULTS-END===`, `===NUMATRACE-EXIT-STATUS=N===`.

mod boot;
mod console;
pub(crate) mod known;
mod serial;
mod topology;
pub(crate) mod truth;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::binary;
use crate::cmd;
use crate::host::Setup;
use crate::initramfs::GuestFile;
use crate::kernels::{self, Kernel, Series};

pub(crate) use boot::boot;
pub(crate) use console::is_kernel_problem;
pub(crate) use topology::Topology;

/// Exit status of `cargo xtask vm` when the test bed itself failed (boot
/// failure, timeout, kernel oops/WARNING, guest setup), as opposed to the
/// guest command's own status.
pub(crate) const TESTBED_FAILURE: u8 = 125;

/// Boot the tiered-NUMA guest and run COMMAND in it (as `sh -c`, in /, with
/// numatrace in /bin). Exits with the command's status, or 125 if the test
/// bed failed (no boot, timeout, kernel oops/BUG/WARNING, guest setup).
///
/// A single COMMAND argument is a shell script (`-- 'a; b'`); several are
/// quoted and joined (`-- numatrace doctor --json`). Files written to
/// /results in the guest land in --out.
#[derive(clap::Args, Debug)]
pub(crate) struct VmArgs {
    /// Guest kernel series.
    #[arg(long, value_enum, default_value = "6.12")]
    pub kernel: Series,
    /// Size of node 0 (CPUs + DRAM), e.g. 2G or 1536M. On 6.1 at most 2G.
    #[arg(long, default_value = "2G", value_parser = parse_mib)]
    pub dram: u64,
    /// Size of node 1 (CPU-less, lower memory tier), e.g. 1G.
    #[arg(long, default_value = "1G", value_parser = parse_mib)]
    pub slow: u64,
    /// Number of CPUs, all on node 0.
    #[arg(long, default_value_t = 2)]
    pub cpus: u32,
    /// Seconds before QEMU is killed and the run reported as failed.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Extra file for the guest (default guest path: /bin/<name>). Repeatable.
    #[arg(long = "file", value_name = "HOSTPATH[:GUESTPATH]")]
    pub files: Vec<GuestFile>,
    /// Where the guest's /results go [default: target/vm/<kernel>/results];
    /// the console log is saved next to it as console.log.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Use the numatrace already built (target/x86_64-unknown-linux-musl/release).
    #[arg(long)]
    pub no_build: bool,
    /// Put this static binary into the guest as /bin/numatrace (implies --no-build).
    #[arg(long, value_name = "PATH", conflicts_with = "no_build")]
    pub numatrace: Option<PathBuf>,
    /// Instruction-count mode (`-icount shift=0,sleep=off`): the guest's
    /// clock advances one nanosecond per executed guest instruction, so
    /// guest CPU times are instruction counts, whatever the host's load.
    #[arg(long)]
    pub icount: bool,
    /// Count every load and store of the guest's user-space instructions
    /// per guest-physical 4 KiB page with the test bed's QEMU plugin, in
    /// windows of --truth-window-ms of the guest's CLOCK_MONOTONIC (cut by
    /// `numatrace workload ticker`, started before COMMAND), into FILE.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["shell", "systemd"])]
    pub truth: Option<PathBuf>,
    /// --truth: the window, in milliseconds (10 to 3600000).
    #[arg(long, default_value_t = 1000, requires = "truth",
          value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub truth_window_ms: u64,
    /// Boot the systemd guest: after setting up the test bed, init hands
    /// over to systemd on a Debian root disk (built by `cargo xtask setup`),
    /// which runs COMMAND as numatrace-vmtest.service.
    #[arg(long, conflicts_with = "shell")]
    pub systemd: bool,
    /// Interactive busybox shell on the serial console instead of a command
    /// (Ctrl-A x kills QEMU).
    #[arg(long, conflicts_with = "command")]
    pub shell: bool,
    /// The command to run in the guest.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `cargo xtask vm`.
pub(crate) fn run(args: VmArgs) -> Result<ExitCode> {
    let mut setup = Setup::new(false);
    let topology = Topology {
        dram_mib: args.dram,
        slow_mib: args.slow,
        cpus: args.cpus,
    };
    topology.validate(args.kernel.tiering())?;
    let mode = if args.shell {
        Mode::Shell
    } else {
        let script = command_script(&args.command)?;
        Mode::Command(match args.truth {
            Some(_) => truth::wrap(&script, args.truth_window_ms),
            None => script,
        })
    };
    let kernel = ready_kernel(args.kernel, &mut setup)?;
    let numatrace = match args.numatrace {
        Some(path) => {
            binary::check_static(&path)?;
            path
        }
        None => numatrace(!args.no_build, &mut setup)?,
    };
    let root_disk = if args.systemd {
        Some(crate::guest_image::ensure(&mut setup)?)
    } else {
        None
    };
    let out = args
        .out
        .unwrap_or_else(|| state_dir(args.kernel).join("results"));
    let plugin = match &args.truth {
        Some(file) => Some(truth::plugin_arg(
            &truth::build_plugin(&mut setup)?,
            &truth::raw_path(file),
        )?),
        None => None,
    };
    let guest = Guest {
        kernel: &kernel,
        topology,
        numatrace: &numatrace,
        files: &args.files,
        mode,
        timeout: Duration::from_secs(args.timeout),
        out: &out,
        icount: args.icount,
        root_disk: root_disk.as_deref(),
        plugin: plugin.as_deref(),
        show_console: true,
    };
    let outcome = boot(&guest)?;
    if args.shell {
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(failure) = outcome.failure() {
        eprintln!("\nerror: {failure}");
        eprintln!(
            "--- last console lines ({}) ---",
            outcome.console_log.display()
        );
        for line in outcome.tail(40) {
            eprintln!("{line}");
        }
        return Ok(ExitCode::from(TESTBED_FAILURE));
    }
    if let Some(file) = &args.truth {
        let done = truth::assemble(file, &out)?;
        println!(
            "numatrace-vm: truth in {}: {} windows, {} page counts, {} accesses \
             (window bounds within {} ns of the guest's clock)",
            file.display(),
            done.windows,
            done.records,
            done.accesses,
            done.clock_err_ns
        );
    }
    let status = outcome.exit_status.unwrap_or(i32::from(TESTBED_FAILURE));
    println!(
        "numatrace-vm: command exited with status {status}; results in {}",
        out.display()
    );
    Ok(ExitCode::from(status.clamp(0, 255) as u8))
}

/// Host packages present and a kernel of `series` in the cache (runs the
/// needed parts of setup; `cargo xtask setup` updates to the newest);
/// fails if the series cannot be fetched.
pub(crate) fn ready_kernel(series: Series, setup: &mut Setup) -> Result<Kernel> {
    setup.host_packages()?;
    kernels::present(series, setup)
}

/// The release musl numatrace: built now, or the existing one if `build` is false.
pub(crate) fn numatrace(build: bool, setup: &mut Setup) -> Result<PathBuf> {
    if build {
        return binary::build(true, setup);
    }
    let path = binary::path(true);
    if !path.is_file() {
        bail!(
            "--no-build, but {} does not exist: run `cargo xtask build --release` first",
            path.display()
        );
    }
    binary::check_static(&path)?;
    Ok(path)
}

/// vCPUs of an instruction-count boot: 2, but 1 on 6.1, which hangs
/// bringing up a second CPU in instruction-count mode.
pub(crate) fn icount_cpus(series: Series) -> u32 {
    if series == Series::V6_1 {
        1
    } else {
        2
    }
}

/// Per-kernel scratch directory: target/vm/<kernel>/.
pub(crate) fn state_dir(series: Series) -> PathBuf {
    cmd::target_dir().join("vm").join(series.name())
}

/// Takes the exclusive lock of a kernel's scratch directory, waiting (and
/// saying so) while another `cargo xtask` run boots that kernel.
fn lock_state(state: &Path) -> Result<fs::File> {
    let path = state.join(".lock");
    cmd::lock_waiting(&path, || {
        eprintln!(
            "waiting for another `cargo xtask` VM run on this kernel to finish ({} is locked)",
            path.display()
        )
    })
}

/// What the guest runs.
pub(crate) enum Mode {
    /// A shell script, run with `sh` in / (becomes /cmd.sh).
    Command(String),
    /// An interactive shell on the console, QEMU attached to this terminal.
    Shell,
}

/// One boot.
pub(crate) struct Guest<'a> {
    pub kernel: &'a Kernel,
    pub topology: Topology,
    pub numatrace: &'a Path,
    pub files: &'a [GuestFile],
    pub mode: Mode,
    pub timeout: Duration,
    /// Receives the guest's /results; `../console.log` gets the console.
    pub out: &'a Path,
    /// QEMU's instruction-count mode (guest ns = guest instructions).
    pub icount: bool,
    /// A root disk image (guest_image.rs): init sets up the test bed, then
    /// hands over to systemd on it, which runs the command as a unit.
    pub root_disk: Option<&'a Path>,
    /// QEMU's `-plugin` argument (`--truth`).
    pub plugin: Option<&'a str>,
    /// Streams the console to stdout as it comes; else it is only saved
    /// (boots side by side would interleave their consoles mid-line).
    pub show_console: bool,
}

/// What happened during one boot.
pub(crate) struct Outcome {
    /// The command's status as the guest reported it.
    pub exit_status: Option<i32>,
    pub timed_out: bool,
    pub timeout: Duration,
    /// Guest-side test bed setup failure (`===NUMATRACE-SETUP-FAILED===`).
    pub setup_failed: Option<String>,
    /// Console lines that show the kernel in trouble ([`is_kernel_problem`]).
    pub kernel_problems: Vec<String>,
    /// Results missing or undecodable.
    pub results_error: Option<String>,
    /// QEMU's own stderr.
    pub qemu_errors: Vec<String>,
    /// The console as shown (base64 block elided), also saved to `console_log`.
    pub console: String,
    pub console_log: PathBuf,
    /// From QEMU start to `===NUMATRACE-READY===`.
    pub ready_after: Option<Duration>,
    pub elapsed: Duration,
    /// Held while the results are read: another run on the same kernel
    /// waits instead of overwriting this one's scratch directory.
    _lock: fs::File,
}

impl Outcome {
    /// Why this boot failed as a test bed, if it did (the command's own
    /// non-zero status is not a test bed failure).
    pub(crate) fn failure(&self) -> Option<String> {
        let mut why = Vec::new();
        if self.timed_out {
            why.push(format!(
                "timed out after {} s; QEMU was killed",
                self.timeout.as_secs()
            ));
        } else if self.exit_status.is_none() {
            let mut msg =
                "the guest never reported an exit status (boot failure or crash)".to_string();
            if !self.qemu_errors.is_empty() {
                let _ = write!(msg, "; QEMU said: {}", self.qemu_errors.join(" | "));
            }
            why.push(msg);
        }
        if let Some(setup) = &self.setup_failed {
            why.push(format!("test bed setup failed in the guest: {setup}"));
        }
        if !self.kernel_problems.is_empty() {
            why.push(format!(
                "kernel problems on the console:\n  {}",
                self.kernel_problems.join("\n  ")
            ));
        }
        if self.exit_status.is_some() {
            if let Some(err) = &self.results_error {
                why.push(format!("results: {err}"));
            }
        }
        (!why.is_empty()).then(|| why.join("\n"))
    }

    pub(crate) fn tail(&self, n: usize) -> Vec<&str> {
        let lines: Vec<&str> = self.console.lines().collect();
        lines[lines.len().saturating_sub(n)..].to_vec()
    }
}

/// `-- a b c` -> a shell command line; a single argument is taken as a script.
fn command_script(args: &[String]) -> Result<String> {
    match args {
        [] => bail!(
            "nothing to run: give a command after `--` \
             (e.g. `cargo xtask vm -- numatrace doctor`) or use --shell"
        ),
        [script] => Ok(format!("{script}\n")),
        argv => Ok(format!(
            "{}\n",
            argv.iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" ")
        )),
    }
}

/// Single-quotes `s` for sh.
pub(crate) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// "2G", "1536M", "1024" (MiB) -> MiB.
fn parse_mib(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, factor) = match s.char_indices().last() {
        Some((i, 'G' | 'g')) => (&s[..i], 1024),
        Some((i, 'M' | 'm')) => (&s[..i], 1),
        _ => (s, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| format!("{s:?} is not a size like 2G or 1536M"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_mib("2G"), Ok(2048));
        assert_eq!(parse_mib("1536M"), Ok(1536));
        assert_eq!(parse_mib("512"), Ok(512));
        assert!(parse_mib("lots").is_err());
    }

    #[test]
    fn commands() {
        assert_eq!(
            command_script(&["echo hi; exit 3".into()]).expect("valid"),
            "echo hi; exit 3\n"
        );
        assert_eq!(
            command_script(&["sh".into(), "-c".into(), "echo 'x'".into()]).expect("valid"),
            "'sh' '-c' 'echo '\\''x'\\'''\n"
        );
        assert!(command_script(&[]).is_err());
    }
}
