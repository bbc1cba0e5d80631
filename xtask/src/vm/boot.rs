//! One boot of the test bed: the initramfs, the QEMU command line, and
//! QEMU run either on this terminal (shell) or watched (command).

use std::fmt::Write as _;
use std::fs;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::{lock_state, serial, state_dir, Guest, Mode, Outcome};
use crate::binary;
use crate::cmd;
use crate::initramfs;
use crate::kernels::{Module, Tiering};

/// Modules that hot-add the soft-reserved range as node 1 (6.1), in load order.
const SOFT_RESERVED_MODULES: &[&str] = &["dax_hmem", "device_dax", "kmem"];

/// Modules that mount the systemd guest's root disk (virtio-blk, ext4 and
/// what ext4 depends on), in load order; the kernels build them as modules.
const ROOT_DISK_MODULES: &[&str] = &["virtio_blk", "ext4"];

/// ext4 computes its checksums through the crypto API's crc32c on 6.12 (a
/// soft dependency modinfo does not list): loaded before ext4 where the
/// kernel has it as a module; 7.x uses the CRC library, built in.
const CRC32C_MODULE: &str = "crc32c_generic";

/// The root disk as the guest sees it (the only virtio-blk device).
const ROOT_DISK: &str = "/dev/vda";

/// Boots `guest`, streams its console to stdout, and collects the results.
/// Errors are host-side problems (cannot build the initramfs, start QEMU,
/// write the results); guest problems are in the [`Outcome`].
pub(crate) fn boot(guest: &Guest) -> Result<Outcome> {
    let tiering = guest.kernel.series.tiering();
    guest.topology.validate(tiering)?;
    let state = state_dir(guest.kernel.series);
    fs::create_dir_all(&state).with_context(|| format!("cannot create {}", state.display()))?;
    let lock = lock_state(&state)?;
    let initrd = write_initramfs(guest, tiering, &state)?;

    fresh_results_dir(guest.out)?;
    let console_log = guest
        .out
        .parent()
        .unwrap_or(Path::new("."))
        .join("console.log");

    let qemu = qemu_command(guest, tiering, &initrd);
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
        Mode::Shell => run_shell(qemu, guest, start, console_log, lock),
        Mode::Command(_) => run_command(qemu, guest, start, console_log, lock),
    }
}

/// Builds the guest's initramfs (init, busybox, numatrace, the modules
/// `tiering` needs, its config and command, the extra files) and writes it
/// into the scratch directory `state`; returns its path.
fn write_initramfs(guest: &Guest, tiering: Tiering, state: &Path) -> Result<PathBuf> {
    let modules = match tiering {
        Tiering::SoftReserved => guest.kernel.modules(SOFT_RESERVED_MODULES)?,
        Tiering::Hmat => Vec::new(),
    };
    let root_modules = match guest.root_disk {
        Some(_) => {
            let mut names = Vec::new();
            if guest.kernel.has_module(CRC32C_MODULE)? {
                names.push(CRC32C_MODULE);
            }
            names.extend(ROOT_DISK_MODULES);
            guest.kernel.modules(&names)?
        }
        None => Vec::new(),
    };
    let mut config = guest_config(tiering, &modules, &guest.mode);
    if guest.root_disk.is_some() {
        let names: Vec<&str> = root_modules.iter().map(|m| m.name.as_str()).collect();
        let _ = writeln!(
            config,
            "ROOT_DISK={ROOT_DISK}\nROOT_MODULES=\"{}\"",
            names.join(" ")
        );
    }
    let modules: Vec<Module> = modules.into_iter().chain(root_modules).collect();
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
    Ok(initrd)
}

/// The init's config file: how to set up tiering, which modules to load,
/// the mode, and the host terminal's size if there is one.
fn guest_config(tiering: Tiering, modules: &[Module], mode: &Mode) -> String {
    let module_names: Vec<&str> = modules.iter().map(|m| m.name.as_str()).collect();
    let mut config = format!(
        "TIERING={}\nMODULES=\"{}\"\nMODE={}\n",
        match tiering {
            Tiering::Hmat => "hmat",
            Tiering::SoftReserved => "soft-reserved",
        },
        module_names.join(" "),
        match mode {
            Mode::Command(_) => "command",
            Mode::Shell => "shell",
        }
    );
    if let Some((rows, cols)) = terminal_size() {
        let _ = writeln!(config, "ROWS={rows}\nCOLS={cols}");
    }
    config
}

/// QEMU with the machine, topology, kernel, initramfs and kernel command
/// line; the console's wiring is up to the mode.
fn qemu_command(guest: &Guest, tiering: Tiering, initrd: &Path) -> Command {
    // tsc=reliable: under TCG the TSC and the HPET both follow QEMU's clock,
    // yet on a busy host the clocksource watchdog sees them skew (QEMU is
    // preempted between its two reads) and switches to the HPET, whose
    // every read is an emulated MMIO access: the guest then crawls and
    // tests time out (seen on 7.2 with both cores of the host loaded).
    let mut kernel_cmdline = vec![
        "console=ttyS0".to_string(),
        "panic=-1".to_string(),
        "tsc=reliable".to_string(),
    ];
    kernel_cmdline.extend(guest.topology.kernel_args(tiering));
    if guest.root_disk.is_some() {
        // systemd's status lines would interleave with the test's output on
        // the console; its warnings stay (they go to the console log).
        kernel_cmdline.push("systemd.show_status=0".to_string());
    }
    let mut qemu = Command::new("qemu-system-x86_64");
    // thread=single, not multi: with multi-threaded TCG about one 6.12 boot
    // in ten died with `Oops: int3` in code the kernel was live-patching
    // (static keys; fentry/fexit attach patches text the same way). One host
    // thread for all vCPUs avoids that race and boots as fast.
    qemu.args(["-accel", "tcg,thread=single", "-cpu", "max"]);
    if guest.icount {
        // shift=0: one guest ns per instruction; sleep=off: an idle guest's
        // clock jumps to its next timer instead of waiting in real time.
        qemu.args(["-icount", "shift=0,sleep=off"]);
    }
    if let Some(plugin) = guest.plugin {
        qemu.arg("-plugin").arg(plugin);
    }
    qemu.args([
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
    .arg(initrd)
    .arg("-append")
    .arg(kernel_cmdline.join(" "));
    if let Some(disk) = guest.root_disk {
        // snapshot=on: the guest's writes go to a temporary overlay, never
        // to the cached image.
        let file = disk.display().to_string().replace(',', ",,");
        qemu.arg("-drive")
            .arg(format!("file={file},if=virtio,format=raw,snapshot=on"));
    }
    qemu
}

/// QEMU owns the terminal; the monitor is muxed in (Ctrl-A c), Ctrl-C goes
/// to the guest. The console is read back from QEMU's log file.
fn run_shell(
    mut qemu: Command,
    guest: &Guest,
    start: Instant,
    console_log: PathBuf,
    lock: fs::File,
) -> Result<Outcome> {
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

/// QEMU's serial console on a pipe, watched until the guest is done.
fn run_command(
    mut qemu: Command,
    guest: &Guest,
    start: Instant,
    console_log: PathBuf,
    lock: fs::File,
) -> Result<Outcome> {
    qemu.args(["-serial", "stdio"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let line = cmd::describe(&qemu);
    let child = qemu
        .spawn()
        .with_context(|| format!("cannot start `{line}`: run `cargo xtask setup`"))?;
    let outcome = serial::watch(child, guest, start, console_log, lock)?;
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
