//! `cargo xtask vm`: the tiered-NUMA test bed. Boots a Debian guest kernel
//! under QEMU (TCG: KVM does not work on this machine kind) with
//! node 0 = all CPUs + DRAM and node 1 = CPU-less slow memory in a lower
//! memory tier, runs one command as root in a busybox initramfs, and brings
//! `/results` back over the serial console.
//!
//! This is the only runner: `demo` and `test` boot through [`boot`] too.
//!
//! Console protocol (written by test/vm-init/init, one marker per line):
//! `===NUMATRACE-READY===` (test bed set up), `===NUMATRACE-SETUP-FAILED=== why`,
//! `===NUMATRACE-RESULTS-BEGIN===`, base64 of a tar.gz of /results,
//! `===NUMATRACE-RESULTS-END===`, `===NUMATRACE-EXIT-STATUS=N===`.

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::binary;
use crate::cmd;
use crate::initramfs::{self, GuestFile};
use crate::kernels::{Availability, Kernel, Series, Tiering};
use crate::setup::Setup;

/// Exit status of `cargo xtask vm` when the test bed itself failed (boot
/// failure, timeout, kernel oops/WARNING, guest setup), as opposed to the
/// guest command's own status.
pub const TESTBED_FAILURE: u8 = 125;

const READY: &str = "===NUMATRACE-READY===";
const SETUP_FAILED: &str = "===NUMATRACE-SETUP-FAILED===";
const RESULTS_BEGIN: &str = "===NUMATRACE-RESULTS-BEGIN===";
const RESULTS_END: &str = "===NUMATRACE-RESULTS-END===";
const EXIT_PREFIX: &str = "===NUMATRACE-EXIT-STATUS=";

/// Console lines that mean the kernel is unwell, even if the command succeeded.
const KERNEL_PROBLEMS: &[&str] = &[
    "Oops:",
    "BUG:",
    "WARNING: CPU:",
    "Kernel panic",
    "general protection fault",
    "Call Trace:",
];

/// Modules that hot-add the soft-reserved range as node 1 (6.1), in load order.
const SOFT_RESERVED_MODULES: &[&str] = &["dax_hmem", "device_dax", "kmem"];

/// Boot the tiered-NUMA guest and run COMMAND in it (as `sh -c`, in /, with
/// numatrace in /bin). Exits with the command's status, or 125 if the test
/// bed failed (no boot, timeout, kernel oops/BUG/WARNING, guest setup).
///
/// A single COMMAND argument is a shell script (`-- 'a; b'`); several are
/// quoted and joined (`-- numatrace doctor --json`). Files written to
/// /results in the guest land in --out.
#[derive(clap::Args, Debug)]
pub struct VmArgs {
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
    /// Interactive busybox shell on the serial console instead of a command
    /// (Ctrl-A x kills QEMU).
    #[arg(long, conflicts_with = "command")]
    pub shell: bool,
    /// The command to run in the guest.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `cargo xtask vm`.
pub fn run(args: VmArgs) -> Result<ExitCode> {
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
        Mode::Command(command_script(&args.command)?)
    };
    let kernel = ready_kernel(args.kernel, &mut setup)?;
    let numatrace = match args.numatrace {
        Some(path) => {
            binary::check_static(&path)?;
            path
        }
        None => numatrace(!args.no_build, &mut setup)?,
    };
    let out = args
        .out
        .unwrap_or_else(|| state_dir(args.kernel).join("results"));
    let guest = Guest {
        kernel: &kernel,
        topology,
        numatrace: &numatrace,
        files: &args.files,
        mode,
        timeout: Duration::from_secs(args.timeout),
        out: &out,
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
pub fn ready_kernel(series: Series, setup: &mut Setup) -> Result<Kernel> {
    setup.host_packages()?;
    match setup.kernel_present(series)? {
        Availability::Ready(kernel) => Ok(kernel),
        Availability::Unavailable(why) => bail!("no {series} guest kernel: {why}"),
    }
}

/// The release musl numatrace: built now, or the existing one if `build` is false.
pub fn numatrace(build: bool, setup: &mut Setup) -> Result<PathBuf> {
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

/// Per-kernel scratch directory: target/vm/<kernel>/.
pub fn state_dir(series: Series) -> PathBuf {
    cmd::target_dir().join("vm").join(series.name())
}

/// Takes the exclusive lock of a kernel's scratch directory, waiting (and
/// saying so) while another `cargo xtask` run boots that kernel.
fn lock_state(state: &Path) -> Result<fs::File> {
    let path = state.join(".lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => return Ok(file),
        Err(fs::TryLockError::WouldBlock) => eprintln!(
            "waiting for another `cargo xtask` VM run on this kernel to finish ({} is locked)",
            path.display()
        ),
        Err(fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
    file.lock()
        .with_context(|| format!("cannot lock {}", path.display()))?;
    Ok(file)
}

/// The guest's NUMA layout.
#[derive(Clone, Copy, Debug)]
pub struct Topology {
    pub dram_mib: u64,
    pub slow_mib: u64,
    pub cpus: u32,
}

/// Memory hot-plug works in 128 MiB blocks on x86-64.
const BLOCK_MIB: u64 = 128;
/// q35 keeps at most 2 GiB of RAM below 4 GiB once the guest has >= 2.75 GiB.
const MAX_LOW_RAM_MIB: u64 = 2048;

impl Default for Topology {
    fn default() -> Self {
        Topology {
            dram_mib: 2048,
            slow_mib: 1024,
            cpus: 2,
        }
    }
}

impl Topology {
    pub fn validate(&self, tiering: Tiering) -> Result<()> {
        if self.cpus == 0 || self.cpus > 64 {
            bail!("--cpus {}: use 1 to 64", self.cpus);
        }
        if self.dram_mib < 512 {
            bail!(
                "--dram {}M: node 0 needs at least 512M to boot",
                self.dram_mib
            );
        }
        for (flag, mib) in [("--dram", self.dram_mib), ("--slow", self.slow_mib)] {
            if mib == 0 || mib % BLOCK_MIB != 0 {
                bail!("{flag} {mib}M: use a non-zero multiple of {BLOCK_MIB}M (the memory block size)");
            }
        }
        if tiering == Tiering::SoftReserved && self.dram_mib > MAX_LOW_RAM_MIB {
            bail!(
                "--dram {}M is too large for 6.1: node 0 must be exactly the RAM below 4 GiB, \
                 because node 1 is soft-reserved starting at 4 GiB \
                 (memmap=SIZE%0x100000000+0xefffffff), and q35 puts at most {MAX_LOW_RAM_MIB}M \
                 below 4 GiB. Use --dram {MAX_LOW_RAM_MIB}M or less",
                self.dram_mib
            );
        }
        Ok(())
    }

    /// QEMU machine, memory and NUMA arguments.
    pub fn qemu_args(&self, tiering: Tiering) -> Vec<String> {
        let mut machine = "q35,hmat=on".to_string();
        if tiering == Tiering::SoftReserved {
            // All of node 0 below 4 GiB, all of node 1 from 4 GiB on: the
            // range memmap= soft-reserves is then exactly node 1.
            let _ = write!(machine, ",max-ram-below-4g={}M", self.dram_mib);
        }
        let cpus = if self.cpus == 1 {
            "0".to_string()
        } else {
            format!("0-{}", self.cpus - 1)
        };
        let mut args: Vec<String> = vec![
            "-machine".into(),
            machine,
            "-smp".into(),
            self.cpus.to_string(),
            "-m".into(),
            format!("{}M", self.dram_mib + self.slow_mib),
            "-object".into(),
            format!("memory-backend-ram,id=m0,size={}M", self.dram_mib),
            "-object".into(),
            format!("memory-backend-ram,id=m1,size={}M", self.slow_mib),
            "-numa".into(),
            format!("node,nodeid=0,cpus={cpus},memdev=m0,initiator=0"),
            "-numa".into(),
            "node,nodeid=1,memdev=m1,initiator=0".into(),
            "-numa".into(),
            "dist,src=0,dst=1,val=20".into(),
        ];
        // HMAT: node 1 is 4x slower and has 1/5 of the bandwidth, which puts
        // it in a lower memory tier on kernels that use HMAT for tiering.
        for (target, latency_ns, bandwidth) in [(0, 10, "10G"), (1, 40, "2G")] {
            let lb = format!("hmat-lb,initiator=0,target={target},hierarchy=memory");
            args.push("-numa".into());
            args.push(format!(
                "{lb},data-type=access-latency,latency={latency_ns}"
            ));
            args.push("-numa".into());
            args.push(format!(
                "{lb},data-type=access-bandwidth,bandwidth={bandwidth}"
            ));
        }
        args
    }

    /// Extra kernel command line.
    pub fn kernel_args(&self, tiering: Tiering) -> Vec<String> {
        match tiering {
            Tiering::Hmat => Vec::new(),
            // 0xefffffff: E820_TYPE_SOFT_RESERVED.
            Tiering::SoftReserved => {
                vec![format!("memmap={}M%0x100000000+0xefffffff", self.slow_mib)]
            }
        }
    }
}

/// What the guest runs.
pub enum Mode {
    /// A shell script, run with `sh` in / (becomes /cmd.sh).
    Command(String),
    /// An interactive shell on the console, QEMU attached to this terminal.
    Shell,
}

/// One boot.
pub struct Guest<'a> {
    pub kernel: &'a Kernel,
    pub topology: Topology,
    pub numatrace: &'a Path,
    pub files: &'a [GuestFile],
    pub mode: Mode,
    pub timeout: Duration,
    /// Receives the guest's /results; `../console.log` gets the console.
    pub out: &'a Path,
}

/// What happened during one boot.
pub struct Outcome {
    /// The command's status as the guest reported it.
    pub exit_status: Option<i32>,
    pub timed_out: bool,
    pub timeout: Duration,
    /// Guest-side test bed setup failure (`===NUMATRACE-SETUP-FAILED===`).
    pub setup_failed: Option<String>,
    /// Console lines matching [`KERNEL_PROBLEMS`].
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
    pub fn failure(&self) -> Option<String> {
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

    pub fn tail(&self, n: usize) -> Vec<&str> {
        let lines: Vec<&str> = self.console.lines().collect();
        lines[lines.len().saturating_sub(n)..].to_vec()
    }
}

/// Boots `guest`, streams its console to stdout, and collects the results.
/// Errors are host-side problems (cannot build the initramfs, start QEMU,
/// write the results); guest problems are in the [`Outcome`].
pub fn boot(guest: &Guest) -> Result<Outcome> {
    let tiering = guest.kernel.series.tiering();
    guest.topology.validate(tiering)?;
    let state = state_dir(guest.kernel.series);
    fs::create_dir_all(&state).with_context(|| format!("cannot create {}", state.display()))?;
    let lock = lock_state(&state)?;

    let modules = match tiering {
        Tiering::SoftReserved => guest.kernel.modules(SOFT_RESERVED_MODULES)?,
        Tiering::Hmat => Vec::new(),
    };
    let module_names: Vec<&str> = modules.iter().map(|m| m.name.as_str()).collect();
    let mut config = format!(
        "TIERING={}\nMODULES=\"{}\"\nMODE={}\n",
        match tiering {
            Tiering::Hmat => "hmat",
            Tiering::SoftReserved => "soft-reserved",
        },
        module_names.join(" "),
        match guest.mode {
            Mode::Command(_) => "command",
            Mode::Shell => "shell",
        }
    );
    if let Some((rows, cols)) = terminal_size() {
        let _ = writeln!(config, "ROWS={rows}\nCOLS={cols}");
    }
    let command = match &guest.mode {
        Mode::Command(script) => Some(script.as_str()),
        Mode::Shell => None,
    };
    let busybox = busybox()?;
    let init = cmd::workspace_root().join("test/vm-init/init");
    let image = initramfs::build(&initramfs::Contents {
        init: &init,
        busybox: &busybox,
        numatrace: guest.numatrace,
        modules: &modules,
        config: &config,
        command,
        files: guest.files,
    })?;
    let initrd = state.join("initramfs.cpio");
    fs::write(&initrd, image).with_context(|| format!("cannot write {}", initrd.display()))?;

    fresh_results_dir(guest.out)?;
    let console_log = guest
        .out
        .parent()
        .unwrap_or(Path::new("."))
        .join("console.log");

    let mut kernel_cmdline = vec!["console=ttyS0".to_string(), "panic=-1".to_string()];
    kernel_cmdline.extend(guest.topology.kernel_args(tiering));
    let mut qemu = Command::new("qemu-system-x86_64");
    // thread=single, not multi: with multi-threaded TCG about one 6.12 boot
    // in ten died with `Oops: int3` in code the kernel was live-patching
    // (static keys; fentry/fexit attach patches text the same way). One host
    // thread for all vCPUs avoids that race and boots as fast.
    qemu.args(["-accel", "tcg,thread=single", "-cpu", "max"])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
        ])
        .args(guest.topology.qemu_args(tiering))
        .arg("-kernel")
        .arg(guest.kernel.boot_image())
        .arg("-initrd")
        .arg(&initrd)
        .arg("-append")
        .arg(kernel_cmdline.join(" "));
    println!(
        "numatrace-vm: booting {} ({}) with {}M DRAM + {}M slow memory, {} CPUs",
        guest.kernel.release,
        guest.kernel.package,
        guest.topology.dram_mib,
        guest.topology.slow_mib,
        guest.topology.cpus
    );
    let start = Instant::now();
    match &guest.mode {
        Mode::Shell => {
            // QEMU owns the terminal; the monitor is muxed in (Ctrl-A c),
            // Ctrl-C goes to the guest.
            let chardev = format!(
                "stdio,id=console,mux=on,signal=off,logfile={}",
                console_log.display().to_string().replace(',', ",,")
            );
            qemu.arg("-chardev").arg(chardev).args([
                "-serial",
                "chardev:console",
                "-mon",
                "chardev=console,mode=readline",
            ]);
            let line = cmd::describe(&qemu);
            let status = qemu
                .status()
                .with_context(|| format!("cannot start `{line}`: run `cargo xtask setup`"))?;
            let console = fs::read_to_string(&console_log).unwrap_or_default();
            Ok(Outcome {
                exit_status: status.code(),
                timed_out: false,
                timeout: guest.timeout,
                setup_failed: None,
                kernel_problems: Vec::new(),
                results_error: None,
                qemu_errors: Vec::new(),
                console,
                console_log,
                ready_after: None,
                elapsed: start.elapsed(),
                _lock: lock,
            })
        }
        Mode::Command(_) => {
            qemu.args(["-serial", "stdio"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let line = cmd::describe(&qemu);
            let child = qemu
                .spawn()
                .with_context(|| format!("cannot start `{line}`: run `cargo xtask setup`"))?;
            let outcome = watch(child, guest, start, console_log, lock)?;
            if let Some(ready) = outcome.ready_after {
                println!(
                    "numatrace-vm: {} ready after {:.1} s, done after {:.1} s",
                    guest.kernel.release,
                    ready.as_secs_f64(),
                    outcome.elapsed.as_secs_f64()
                );
            }
            Ok(outcome)
        }
    }
}

enum Event {
    Console(Vec<u8>),
    ConsoleClosed,
    QemuError(String),
}

/// Streams the console until the guest powers off, the timeout hits, or
/// QEMU dies; then extracts the results.
fn watch(
    mut child: Child,
    guest: &Guest,
    start: Instant,
    console_log: PathBuf,
    lock: fs::File,
) -> Result<Outcome> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().context("QEMU stdout not captured")?;
    let stderr = child.stderr.take().context("QEMU stderr not captured")?;
    let console_tx = tx.clone();
    std::thread::spawn(move || {
        let mut stdout = stdout;
        let mut buf = [0u8; 8192];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if console_tx.send(Event::Console(buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = console_tx.send(Event::ConsoleClosed);
    });
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(Event::QemuError(line)).is_err() {
                break;
            }
        }
    });

    let mut console = Console::default();
    let mut qemu_errors = Vec::new();
    let mut ready_after = None;
    let mut timed_out = false;
    let mut deadline = start + guest.timeout;
    let mut out = std::io::stdout();
    loop {
        let now = Instant::now();
        if now >= deadline {
            // After the exit marker this is only the grace period for poweroff.
            timed_out = console.exit_status.is_none();
            break;
        }
        match rx.recv_timeout(deadline - now) {
            Ok(Event::Console(bytes)) => {
                let shown = console.feed(&bytes);
                // The user's terminal going away must not stop the run.
                let _ = out.write_all(&shown).and_then(|()| out.flush());
                if console.ready && ready_after.is_none() {
                    ready_after = Some(start.elapsed());
                }
                if console.exit_status.is_some() {
                    deadline = deadline.min(Instant::now() + Duration::from_secs(10));
                }
            }
            Ok(Event::QemuError(line)) => {
                eprintln!("qemu: {line}");
                qemu_errors.push(line);
            }
            Ok(Event::ConsoleClosed) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    console.finish();
    // Killing an already exited QEMU fails harmlessly.
    let _ = child.kill();
    let _ = child.wait();
    let elapsed = start.elapsed();

    fs::write(&console_log, &console.log)
        .with_context(|| format!("cannot write {}", console_log.display()))?;
    let results_error = if console.exit_status.is_some() {
        extract_results(&console, guest.out)
            .err()
            .map(|e| format!("{e:#}"))
    } else {
        None
    };
    Ok(Outcome {
        exit_status: console.exit_status,
        timed_out,
        timeout: guest.timeout,
        setup_failed: console.setup_failed.clone(),
        kernel_problems: console.problems.clone(),
        results_error,
        qemu_errors,
        console: console.log,
        console_log,
        ready_after,
        elapsed,
        _lock: lock,
    })
}

fn extract_results(console: &Console, out: &Path) -> Result<()> {
    if !console.results_complete {
        bail!("the guest sent no complete results block");
    }
    let tarball = base64_decode(&console.results_b64)?;
    let mut tar = Command::new("tar")
        .arg("-xzf")
        .arg("-")
        .arg("-C")
        .arg(out)
        .stdin(Stdio::piped())
        .spawn()
        .context("cannot start tar")?;
    tar.stdin
        .take()
        .context("tar stdin not captured")?
        .write_all(&tarball)
        .context("cannot feed tar")?;
    let status = tar.wait()?;
    if !status.success() {
        bail!(
            "tar could not unpack the results into {} ({status})",
            out.display()
        );
    }
    Ok(())
}

/// Marks the directories we create so that we only ever delete our own.
const RESULTS_MARK: &str = ".numatrace-vm-results";

fn fresh_results_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        let empty = fs::read_dir(dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .next()
            .is_none();
        if !empty && !dir.join(RESULTS_MARK).exists() {
            bail!(
                "--out {} exists and was not made by `cargo xtask vm`: remove it or choose another directory",
                dir.display()
            );
        }
        fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    fs::write(dir.join(RESULTS_MARK), "")
        .with_context(|| format!("cannot write into {}", dir.display()))
}

/// The console parser: tracks markers and kernel problems, keeps the log,
/// and hides the base64 block from the user.
#[derive(Default)]
struct Console {
    line: Vec<u8>,
    /// Bytes of `line` already echoed.
    shown: usize,
    in_results: bool,
    log: String,
    results_b64: String,
    results_complete: bool,
    exit_status: Option<i32>,
    setup_failed: Option<String>,
    ready: bool,
    problems: Vec<String>,
}

impl Console {
    /// Consumes console bytes; returns the bytes to show the user (passed
    /// through unbuffered, so full-screen programs render, except a line
    /// that may still turn out to be the results marker).
    fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut show = Vec::new();
        for &b in bytes {
            self.line.push(b);
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\r', '\n']);
                let hidden = self.in_results || text == RESULTS_BEGIN;
                if !hidden {
                    show.extend_from_slice(&line[self.shown.min(line.len())..]);
                }
                self.shown = 0;
                self.on_line(text);
            } else if !self.in_results {
                let pending = trim_cr(&self.line);
                if !RESULTS_BEGIN.as_bytes().starts_with(pending) {
                    show.extend_from_slice(&self.line[self.shown..]);
                    self.shown = self.line.len();
                }
            }
        }
        show
    }

    /// Flushes a last unterminated line into the log.
    fn finish(&mut self) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.on_line(String::from_utf8_lossy(&line).trim_end_matches('\r'));
        }
    }

    fn on_line(&mut self, text: &str) {
        if self.in_results {
            if text == RESULTS_END {
                self.in_results = false;
                self.results_complete = true;
                let _ = writeln!(
                    self.log,
                    "[{} bytes of base64 results elided]\n{RESULTS_END}",
                    self.results_b64.len()
                );
                return;
            }
            if is_base64_line(text) {
                self.results_b64.push_str(text);
                return;
            }
            // A stray kernel message inside the block: keep it in the log.
        }
        self.log.push_str(text);
        self.log.push('\n');
        if text == RESULTS_BEGIN {
            self.in_results = true;
            self.results_b64.clear();
        } else if text == READY {
            self.ready = true;
        } else if let Some(why) = text.strip_prefix(SETUP_FAILED) {
            self.setup_failed = Some(why.trim().to_string());
        } else if let Some(status) = text
            .strip_prefix(EXIT_PREFIX)
            .and_then(|rest| rest.strip_suffix("==="))
        {
            self.exit_status = status.parse().ok();
        }
        if is_kernel_problem(text) && self.problems.len() < 20 {
            self.problems.push(text.to_string());
        }
    }
}

/// Does this console line show the kernel in trouble?
pub fn is_kernel_problem(line: &str) -> bool {
    KERNEL_PROBLEMS.iter().any(|p| line.contains(p))
}

fn trim_cr(line: &[u8]) -> &[u8] {
    let mut line = line;
    while let [rest @ .., b'\r'] = line {
        line = rest;
    }
    line
}

fn is_base64_line(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
}

fn base64_decode(text: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut acc = 0u32;
    let mut bits = 0;
    for b in text.bytes() {
        let value = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' => continue,
            _ => bail!("invalid base64 byte {b:#04x} in the results block"),
        };
        acc = (acc << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
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
pub fn shell_quote(s: &str) -> String {
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

/// A static busybox for the guest (Debian's busybox-static).
fn busybox() -> Result<PathBuf> {
    let path = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .context("no busybox: run `cargo xtask setup` (installs busybox-static)")?;
    binary::check_static(&path)
        .context("the guest needs a static busybox: apt-get install busybox-static")?;
    Ok(path)
}

/// The host terminal's rows and columns, if stdout is a terminal.
fn terminal_size() -> Option<(u16, u16)> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    let tty = fs::File::open("/dev/tty").ok()?;
    let out = Command::new("stty").arg("size").stdin(tty).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace().map(|n| n.parse::<u16>().ok());
    match (it.next()??, it.next()??) {
        (0, _) | (_, 0) => None,
        size => Some(size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(chunks: &[&[u8]]) -> (Console, String) {
        let mut console = Console::default();
        let mut shown = Vec::new();
        for c in chunks {
            shown.extend(console.feed(c));
        }
        console.finish();
        (console, String::from_utf8_lossy(&shown).into_owned())
    }

    #[test]
    fn console_protocol() {
        let (c, shown) = feed_all(&[
            b"[    1.0] booting\r\n===NUMATRACE-READY===\r\nhello\r\n===NUMATRACE-RES",
            b"ULTS-BEGIN===\r\naGVsbG8g\r\nd29ybGQ=\r\n===NUMATRACE-RESULTS-END===\r\n",
            b"===NUMATRACE-EXIT-STATUS=3===\r\n[    2.0] reboot: Power down\r\n",
        ]);
        assert!(c.ready);
        assert_eq!(c.exit_status, Some(3));
        assert!(c.results_complete);
        assert_eq!(
            base64_decode(&c.results_b64).expect("valid"),
            b"hello world"
        );
        assert!(!shown.contains("aGVsbG8g") && !shown.contains("RESULTS-BEGIN"));
        assert!(shown.contains("hello\r\n") && shown.contains("EXIT-STATUS=3"));
        assert!(c.log.contains("[16 bytes of base64 results elided]"));
        assert!(c.problems.is_empty());
    }

    #[test]
    fn console_partial_lines_are_shown_immediately() {
        let mut c = Console::default();
        assert_eq!(c.feed(b"\x1b[2J~ # "), b"\x1b[2J~ # ");
        assert_eq!(c.feed(b"\n===NUM"), b"\n");
        assert_eq!(c.feed(b"BER\n"), b"===NUMBER\n");
    }

    #[test]
    fn console_kernel_problems() {
        let (c, _) = feed_all(&[
            b"[ 3.1] WARNING: CPU: 1 PID: 7 at mm/x.c:1 f+0x1/0x2\n",
            b"[ 3.2] Call Trace:\n[ 3.3] fine\n",
            b"===NUMATRACE-SETUP-FAILED=== node 1 has CPUs (1)\n",
        ]);
        assert_eq!(c.problems.len(), 2);
        assert_eq!(c.setup_failed.as_deref(), Some("node 1 has CPUs (1)"));
        assert_eq!(c.exit_status, None);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_mib("2G"), Ok(2048));
        assert_eq!(parse_mib("1536M"), Ok(1536));
        assert_eq!(parse_mib("512"), Ok(512));
        assert!(parse_mib("lots").is_err());
    }

    #[test]
    fn topology_limits() {
        let t = |dram_mib, slow_mib| Topology {
            dram_mib,
            slow_mib,
            cpus: 2,
        };
        assert!(t(2048, 1024).validate(Tiering::SoftReserved).is_ok());
        assert!(t(3072, 1024).validate(Tiering::SoftReserved).is_err());
        assert!(t(3072, 1024).validate(Tiering::Hmat).is_ok());
        assert!(t(2048, 1000).validate(Tiering::Hmat).is_err());
        assert_eq!(
            t(1536, 1024).kernel_args(Tiering::SoftReserved),
            ["memmap=1024M%0x100000000+0xefffffff"]
        );
        let args = t(1536, 1024).qemu_args(Tiering::SoftReserved);
        assert!(args.contains(&"q35,hmat=on,max-ram-below-4g=1536M".to_string()));
        assert!(args.contains(&"2560M".to_string()));
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
