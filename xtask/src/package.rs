//! `cargo xtask package`: a Debian package of numatrace, built with
//! dpkg-deb from the static release binary, and its check: installed with
//! dpkg into an empty root, its files are where Debian puts them, its
//! systemd units pass `systemd-analyze verify` and `man` renders its pages.
//!
//! The package holds the binary, a man page per command (generated from
//! the same clap definitions as `--help`), bash, zsh and fish completions,
//! the `numatrace-export` and `numatrace-shadow` units (not enabled: a
//! tracing tool starts when its administrator says so) and their options
//! in `/etc/default/numatrace`, a conffile.
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};

use crate::cmd;

const NAME: &str = "numatrace";
const VERSION: &str = env!("CARGO_PKG_VERSION");
const UNITS: [&str; 2] = ["numatrace-export.service", "numatrace-shadow.service"];

/// Where the package and its staging tree go.
fn out_dir() -> PathBuf {
    cmd::target_dir().join("package")
}

/// Builds the .deb from the release binary at `numatrace`; returns its path.
pub(crate) fn build(numatrace: &Path) -> Result<PathBuf> {
    let root = out_dir().join("root");
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    }
    stage_binary_and_docs(numatrace, &root)?;
    stage_completions(numatrace, &root)?;
    stage_services(&root)?;
    stage_control(&root)?;
    let deb = out_dir().join(format!("{NAME}_{VERSION}_amd64.deb"));
    cmd::run(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&root)
            .arg(&deb),
    )?;
    println!("built {}", deb.display());
    Ok(deb)
}

fn put(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", path.display()))
}

/// The binary, the man pages (gzip -9n, as Debian wants them) and the
/// copyright file.
fn stage_binary_and_docs(numatrace: &Path, root: &Path) -> Result<()> {
    let bytes = fs::read(numatrace).with_context(|| format!("reading {}", numatrace.display()))?;
    put(&root.join("usr/bin/numatrace"), &bytes, 0o755)?;
    let man = root.join("usr/share/man/man1");
    cmd::run(Command::new(numatrace).arg("manpages").arg(&man))?;
    for entry in fs::read_dir(&man)? {
        let page = entry?.path();
        fs::set_permissions(&page, fs::Permissions::from_mode(0o644))?;
        cmd::run(Command::new("gzip").args(["-9n"]).arg(&page))?;
    }
    let copyright = format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: {NAME}\n\n\
         Files: *\n\
         License: {}\n",
        env!("CARGO_PKG_LICENSE")
    );
    put(
        &root.join("usr/share/doc/numatrace/copyright"),
        copyright.as_bytes(),
        0o644,
    )
}

/// Where each shell looks for a system-wide completion of `numatrace`.
const COMPLETIONS: [(&str, &str); 3] = [
    ("bash", "usr/share/bash-completion/completions/numatrace"),
    ("zsh", "usr/share/zsh/vendor-completions/_numatrace"),
    ("fish", "usr/share/fish/vendor_completions.d/numatrace.fish"),
];

fn stage_completions(numatrace: &Path, root: &Path) -> Result<()> {
    for (shell, path) in COMPLETIONS {
        let script = cmd::output(Command::new(numatrace).args(["completions", shell]))?;
        put(&root.join(path), script.as_bytes(), 0o644)?;
    }
    Ok(())
}

fn contrib() -> PathBuf {
    cmd::workspace_root().join("contrib")
}

fn stage_services(root: &Path) -> Result<()> {
    for unit in UNITS {
        let text = fs::read(contrib().join("systemd").join(unit))
            .with_context(|| format!("reading contrib/systemd/{unit}"))?;
        put(&root.join("lib/systemd/system").join(unit), &text, 0o644)?;
    }
    let default = fs::read(contrib().join("default/numatrace"))
        .context("reading contrib/default/numatrace")?;
    put(&root.join("etc/default/numatrace"), &default, 0o644)
}

/// DEBIAN/: control, conffiles, and the maintainer scripts that tell
/// systemd about the units (enabled by nobody but the administrator).
fn stage_control(root: &Path) -> Result<()> {
    let size_kib = dir_size(root)? / 1024;
    let control = format!(
        "Package: {NAME}\n\
         Version: {VERSION}\n\
         Architecture: amd64\n\
         Maintainer: numatrace developers <numatrace@localhost>\n\
         Installed-Size: {size_kib}\n\
         Section: admin\n\
         Priority: optional\n\
         Homepage: https://github.com/numatrace/numatrace\n\
         Description: shows and second-guesses Linux NUMA tiered-memory promotion\n \
         eBPF probes on the NUMA hint-fault path record per-folio scan-to-fault\n \
         latency and fault-count deltas with the kernel's decision on every fault;\n \
         shadow policies (the fault-count RFC among them) run beside the kernel's.\n \
         Includes a live TUI (numatrace top), a Prometheus exporter service and a\n \
         promoter driven by move_pages(2). Statically linked: no dependencies.\n"
    );
    let debian = root.join("DEBIAN");
    put(&debian.join("control"), control.as_bytes(), 0o644)?;
    put(
        &debian.join("conffiles"),
        b"/etc/default/numatrace\n",
        0o644,
    )?;
    let reload = "#!/bin/sh\nset -e\n\
        if [ -d /run/systemd/system ]; then systemctl --system daemon-reload >/dev/null || true; fi\n";
    put(&debian.join("postinst"), reload.as_bytes(), 0o755)?;
    put(&debian.join("postrm"), reload.as_bytes(), 0o755)?;
    let stop = "#!/bin/sh\nset -e\n\
        if [ -d /run/systemd/system ] && [ \"$1\" = remove ]; then\n\
        \tsystemctl stop numatrace-export.service numatrace-shadow.service >/dev/null 2>&1 || true\n\
        fi\n";
    put(&debian.join("prerm"), stop.as_bytes(), 0o755)
}

fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// Installs `deb` with dpkg into a fresh, empty root and checks what a
/// user of the package gets.
pub(crate) fn check(deb: &Path) -> Result<()> {
    let root = out_dir().join("installed");
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    for dir in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        fs::create_dir_all(root.join(dir))?;
    }
    fs::write(root.join("var/lib/dpkg/status"), b"")?;
    // No maintainer scripts can run in a root without a shell; --force-script-chrootless
    // runs them here, where /run/systemd/system decides what they do.
    cmd::run(
        Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            .args([
                "--force-not-root",
                "--force-script-chrootless",
                "--force-bad-path",
            ])
            .arg("--install")
            .arg(deb),
    )?;
    check_files(&root)?;
    check_units(&root)?;
    check_man(&root)
}

fn check_files(root: &Path) -> Result<()> {
    let listed = cmd::output(
        Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            .args(["-L", NAME]),
    )?;
    let mut want = vec![
        "/usr/bin/numatrace".to_owned(),
        "/usr/share/man/man1/numatrace.1.gz".to_owned(),
        "/usr/share/man/man1/numatrace-top.1.gz".to_owned(),
        "/etc/default/numatrace".to_owned(),
        "/usr/share/doc/numatrace/copyright".to_owned(),
    ];
    want.extend(COMPLETIONS.iter().map(|(_, p)| format!("/{p}")));
    want.extend(UNITS.iter().map(|u| format!("/lib/systemd/system/{u}")));
    for w in &want {
        ensure!(
            listed.lines().any(|l| l == w),
            "the package does not install {w}; it lists:\n{listed}"
        );
    }
    let mode = fs::metadata(root.join("usr/bin/numatrace"))?
        .permissions()
        .mode();
    ensure!(
        mode & 0o777 == 0o755,
        "/usr/bin/numatrace has mode {mode:o}"
    );
    let conffiles = fs::read_to_string(root.join("var/lib/dpkg/info/numatrace.conffiles"))
        .context("dpkg recorded no conffiles")?;
    ensure!(
        conffiles.contains("/etc/default/numatrace"),
        "/etc/default/numatrace is not a conffile: {conffiles}"
    );
    let version = cmd::output(Command::new(root.join("usr/bin/numatrace")).arg("--version"))?;
    ensure!(
        version.contains(VERSION),
        "the installed binary says {version:?}"
    );
    println!(
        "    {} files installed, binary {}",
        listed.lines().count(),
        version.trim()
    );
    Ok(())
}

/// `systemd-analyze verify` reads each unit as systemd would load it:
/// every directive known, every executable there. The host's systemd
/// resolves the targets a unit depends on, so each unit is verified as a
/// copy whose `/usr/bin/numatrace` is the installed root's; the man page
/// its `Documentation=` names must be in the package.
fn check_units(root: &Path) -> Result<()> {
    let dir = out_dir().join("verify");
    fs::create_dir_all(&dir)?;
    let installed = root.join("usr/bin/numatrace");
    for unit in UNITS {
        let text = fs::read_to_string(root.join("lib/systemd/system").join(unit))?;
        let copy = dir.join(unit);
        fs::write(
            &copy,
            text.replace("/usr/bin/numatrace", &installed.to_string_lossy()),
        )?;
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&copy)
            .output()
            .context("running systemd-analyze (package systemd)")?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(
            out.status.success() && !said.contains(unit),
            "systemd-analyze verify {unit}: {}\n{said}",
            out.status
        );
        for doc in text
            .lines()
            .filter_map(|l| l.strip_prefix("Documentation=man:"))
        {
            let page = doc.replace("(1)", ".1.gz");
            ensure!(
                root.join("usr/share/man/man1").join(&page).exists(),
                "{unit} documents man:{doc}, which the package does not install"
            );
        }
        println!("    {unit}: systemd-analyze verify clean");
    }
    Ok(())
}

fn check_man(root: &Path) -> Result<()> {
    let page = root.join("usr/share/man/man1/numatrace-top.1.gz");
    let text = cmd::output(
        Command::new("man")
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100")
            .arg("-l")
            .arg(&page),
    )?;
    for want in [
        "NAME",
        "numatrace-top",
        "SYNOPSIS",
        "--replay",
        "--interval",
    ] {
        ensure!(
            text.contains(want),
            "man numatrace-top does not show {want:?}:\n{text}"
        );
    }
    println!(
        "    man numatrace-top renders ({} lines)",
        text.lines().count()
    );
    Ok(())
}
