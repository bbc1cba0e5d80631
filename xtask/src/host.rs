//! The host side of setup: the nightly toolchain with rust-src, the musl
//! target, bpf-linker, and the Debian packages of the QEMU test bed, plus
//! `apt-get` and the `did:`/`skip:` progress lines every setup step prints;
//! and a Python venv with DuckDB for the Parquet test.
//! Guest kernels (kernels.rs) build on this; `cargo xtask setup` (setup.rs)
//! runs both.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::cmd;

/// Debian packages the test bed needs on the host.
/// xz-utils/zstd decompress kernel modules and images; tmux drives TUI demos.
const HOST_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "cpio",
    "xz-utils",
    "zstd",
    "tmux",
    // Renders `numatrace report` pages in the report test (headless).
    "chromium",
    // The real Prometheus (and promtool) of the exporter's host test
    // (numa-cli/tests/export_prometheus.rs).
    "prometheus",
    // `cargo xtask package`: builds the .deb, installs it into an empty
    // root, verifies its units and renders its man pages.
    "dpkg",
    "systemd",
    "man-db",
];

/// The bpf-linker release known to build against rustc's own LLVM 22.
const BPF_LINKER_VERSION: &str = "0.13.0";

/// The cargo-fuzz release `cargo xtask fuzz` installs.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// The DuckDB that numa-cli/tests/dump_duckdb.rs queries Parquet files
/// with (pip's `duckdb`, in a venv: the system Python is left alone).
const DUCKDB_VERSION: &str = "1.5.6";

pub(crate) const MUSL_TARGET: &str = "x86_64-unknown-linux-musl";

/// Progress printer plus the "apt-get update at most once" memory.
pub(crate) struct Setup {
    show_skips: bool,
    apt_updated: bool,
    toolchain_checked: bool,
}

impl Setup {
    /// `show_skips`: print `skip:` lines too (the `setup` command does; the
    /// automatic calls from other commands stay quiet about what is present).
    pub(crate) fn new(show_skips: bool) -> Self {
        Setup {
            show_skips,
            apt_updated: false,
            toolchain_checked: false,
        }
    }

    pub(crate) fn did(&self, what: &str) {
        crate::progress::println(format_args!("did: {what}"));
    }

    pub(crate) fn skip(&self, what: &str) {
        if self.show_skips {
            crate::progress::println(format_args!("skip: {what}"));
        }
    }

    /// Runs `apt-get update` the first time it is called in this process.
    pub(crate) fn apt_update(&mut self) -> Result<()> {
        if self.apt_updated {
            return Ok(());
        }
        cmd::run(apt_get().arg("update").arg("-q"))
            .context("apt-get update failed: check the network and /etc/apt/sources.list*")?;
        self.apt_updated = true;
        self.did("apt-get update");
        Ok(())
    }

    /// Rust pieces needed to build numatrace and its eBPF object.
    pub(crate) fn toolchain(&mut self) -> Result<()> {
        if self.toolchain_checked {
            return Ok(());
        }
        if cmd::succeeds(Command::new("rustc").args(["+nightly", "--version"])) {
            self.skip("nightly toolchain (already present)");
        } else {
            cmd::run(Command::new("rustup").args([
                "toolchain",
                "install",
                "nightly",
                "--profile",
                "minimal",
            ]))?;
            self.did("rustup toolchain install nightly --profile minimal");
        }

        let components = cmd::output(Command::new("rustup").args([
            "component",
            "list",
            "--toolchain",
            "nightly",
            "--installed",
        ]))?;
        if components.lines().any(|l| l.starts_with("rust-src")) {
            self.skip("rust-src for nightly (already present)");
        } else {
            cmd::run(Command::new("rustup").args([
                "component",
                "add",
                "rust-src",
                "--toolchain",
                "nightly",
            ]))?;
            self.did("rustup component add rust-src --toolchain nightly");
        }

        let channel = pinned_channel()?;
        let targets = cmd::output(Command::new("rustup").args([
            "target",
            "list",
            "--installed",
            "--toolchain",
            &channel,
        ]))?;
        if targets.lines().any(|l| l.trim() == MUSL_TARGET) {
            self.skip(&format!("{MUSL_TARGET} for {channel} (already present)"));
        } else {
            cmd::run(Command::new("rustup").args([
                "target",
                "add",
                MUSL_TARGET,
                "--toolchain",
                &channel,
            ]))?;
            self.did(&format!(
                "rustup target add {MUSL_TARGET} --toolchain {channel}"
            ));
        }

        self.bpf_linker()?;
        self.toolchain_checked = true;
        Ok(())
    }

    /// bpf-linker built against the nightly toolchain's own libLLVM, so that
    /// its LLVM major matches rustc's (see toolchain notes).
    fn bpf_linker(&mut self) -> Result<()> {
        if cmd::succeeds(Command::new("bpf-linker").arg("--version")) {
            self.skip("bpf-linker (already present)");
            return Ok(());
        }
        let sysroot = cmd::output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?;
        let lib_dir = PathBuf::from(sysroot.trim()).join("lib");
        let names = std::fs::read_dir(&lib_dir)
            .with_context(|| format!("cannot list {}", lib_dir.display()))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect::<Vec<_>>();
        let Some((lib, major)) = names.iter().find_map(|n| llvm_dylib(n)) else {
            bail!(
                "no libLLVM-<major>-*.so in {}: the nightly toolchain is incomplete; \
                 reinstall it with `rustup toolchain install nightly --force`",
                lib_dir.display()
            );
        };
        let rustflags = format!(
            "-L {dir} -l dylib={lib} -C link-arg=-Wl,-rpath,{dir}",
            dir = lib_dir.display()
        );
        let mut install = Command::new("cargo");
        install
            .env("RUSTFLAGS", &rustflags)
            .args(["+nightly", "install", "bpf-linker", "--version"])
            .arg(BPF_LINKER_VERSION)
            .args(["--no-default-features", "--features"])
            .arg(format!("llvm-{major},no-llvm-linking"));
        crate::progress::println(format_args!(
            "building bpf-linker (about a minute): {}",
            cmd::describe(&install)
        ));
        cmd::run(&mut install)?;
        if !cmd::succeeds(Command::new("bpf-linker").arg("--version")) {
            bail!("bpf-linker was installed but `bpf-linker --version` fails: is ~/.cargo/bin on PATH?");
        }
        self.did(&format!(
            "cargo install bpf-linker {BPF_LINKER_VERSION} (llvm-{major}, {lib})"
        ));
        Ok(())
    }

    /// cargo-fuzz, for `cargo xtask fuzz` (built with the pinned toolchain;
    /// the fuzz targets themselves build with nightly).
    pub(crate) fn cargo_fuzz(&mut self) -> Result<()> {
        self.toolchain()?;
        if cmd::succeeds(Command::new("cargo").args(["+nightly", "fuzz", "--version"])) {
            self.skip("cargo-fuzz (already present)");
            return Ok(());
        }
        let mut install = Command::new("cargo");
        install.args(["install", "cargo-fuzz", "--locked", "--version"]);
        install.arg(CARGO_FUZZ_VERSION);
        crate::progress::println(format_args!(
            "building cargo-fuzz (about a minute): {}",
            cmd::describe(&install)
        ));
        cmd::run(&mut install)?;
        self.did(&format!("cargo install cargo-fuzz {CARGO_FUZZ_VERSION}"));
        Ok(())
    }

    /// A venv at [`duckdb_venv`] with pip's duckdb at [`DUCKDB_VERSION`].
    pub(crate) fn duckdb(&mut self) -> Result<()> {
        let venv = duckdb_venv();
        let python = venv.join("bin/python3");
        let check =
            format!("import duckdb, sys; sys.exit(duckdb.__version__ != '{DUCKDB_VERSION}')");
        if cmd::succeeds(Command::new(&python).args(["-c", &check])) {
            self.skip(&format!(
                "duckdb {DUCKDB_VERSION} (already in {})",
                venv.display()
            ));
            return Ok(());
        }
        if !cmd::succeeds(Command::new(&python).args(["-m", "pip", "--version"])) {
            cmd::run(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv))
                .context("python3 -m venv failed: install python3 with its venv module (Debian: python3-venv)")?;
        }
        cmd::run(Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &format!("duckdb=={DUCKDB_VERSION}"),
        ]))
        .context("pip install duckdb failed: check that PyPI is reachable")?;
        self.did(&format!(
            "pip install duckdb=={DUCKDB_VERSION} (venv {})",
            venv.display()
        ));
        Ok(())
    }

    /// Debian packages for the QEMU test bed.
    pub(crate) fn host_packages(&mut self) -> Result<()> {
        self.packages(HOST_PACKAGES)
    }

    /// Installs those of `packages` that are missing.
    pub(crate) fn packages(&mut self, packages: &[&str]) -> Result<()> {
        let missing = missing_packages(packages)?;
        if missing.is_empty() {
            self.skip(&format!(
                "apt packages {} (already present)",
                packages.join(" ")
            ));
            return Ok(());
        }
        self.apt_update()?;
        cmd::run(
            apt_get()
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&missing),
        )?;
        self.did(&format!("apt-get install {}", missing.join(" ")));
        Ok(())
    }
}

/// The venv the Parquet test finds DuckDB in: `duckdb-venv` in cargo's
/// target directory, as the test looks for it.
pub(crate) fn duckdb_venv() -> PathBuf {
    cmd::target_dir().join("duckdb-venv")
}

/// `apt-get` made non-interactive.
pub(crate) fn apt_get() -> Command {
    let mut cmd = Command::new("apt-get");
    cmd.env("DEBIAN_FRONTEND", "noninteractive");
    cmd
}

fn missing_packages(packages: &[&str]) -> Result<Vec<String>> {
    // dpkg-query exits 1 when some package is unknown; stdout still lists the rest.
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Package} ${db:Status-Abbrev}\n"])
        .args(packages)
        .output()
        .context("cannot run dpkg-query: is this a Debian machine?")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let installed: Vec<&str> = stdout
        .lines()
        .filter_map(|l| {
            let (name, status) = l.split_once(' ')?;
            status.starts_with("ii").then_some(name)
        })
        .collect();
    Ok(packages
        .iter()
        .filter(|p| !installed.contains(p))
        .map(|p| p.to_string())
        .collect())
}

/// The stable channel pinned in rust-toolchain.toml (e.g. "1.95.0").
fn pinned_channel() -> Result<String> {
    let path = cmd::workspace_root().join("rust-toolchain.toml");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("channel"))
        .filter_map(|rest| rest.trim().strip_prefix('='))
        .map(|v| v.trim().trim_matches('"').to_string())
        .next()
        .with_context(|| format!("no `channel = \"...\"` line in {}", path.display()))
}

/// `libLLVM-22-rust-1.97.0-nightly.so` -> ("LLVM-22-rust-1.97.0-nightly", 22).
fn llvm_dylib(file_name: &str) -> Option<(String, u32)> {
    let lib = file_name.strip_prefix("lib")?.strip_suffix(".so")?;
    let rest = lib.strip_prefix("LLVM-")?;
    let major = rest.split(['-', '.']).next()?.parse().ok()?;
    Some((lib.to_string(), major))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llvm_dylib_names() {
        assert_eq!(
            llvm_dylib("libLLVM-22-rust-1.97.0-nightly.so"),
            Some(("LLVM-22-rust-1.97.0-nightly".to_string(), 22))
        );
        assert_eq!(llvm_dylib("libLLVM.so.22.1-rust-1.97.0-nightly"), None);
        assert_eq!(llvm_dylib("librustc_driver-b5a965480ee51f9a.so"), None);
    }
}
