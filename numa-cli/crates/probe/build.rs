//! Compiles `numa-ebpf` for `bpfel-unknown-none` with the nightly toolchain
//! and leaves the object in `OUT_DIR/numa-ebpf` for `include_bytes!`.
//!
//! This is aya-build's recipe with one addition aya-build 0.2.0 cannot
//! express: `-C target-cpu=v3`, without which BPF atomics lose their fetch
//! variants (the hint-fault sequence numbers need `atomic_fetch_add`).
//! `NUMATRACE_EBPF_OBJ=path` uses a prebuilt object instead.
use std::{
    env,
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

fn main() -> Result<()> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR not set")?);
    let dst = out_dir.join("numa-ebpf");
    println!("cargo:rerun-if-env-changed=NUMATRACE_EBPF_OBJ");
    if let Some(prebuilt) = env::var_os("NUMATRACE_EBPF_OBJ") {
        std::fs::copy(&prebuilt, &dst)
            .with_context(|| format!("copying NUMATRACE_EBPF_OBJ={prebuilt:?}"))?;
        return Ok(());
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").context("no manifest dir")?);
    // numa-cli/crates/probe -> the workspace root.
    let root = manifest
        .ancestors()
        .nth(3)
        .context("numa-cli/crates/probe has no workspace root above it")?;
    for dir in [
        "numa-ebpf/src",
        "numa-ebpf/Cargo.toml",
        "numa-ebpf-common/src",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    let target_dir = out_dir.join("ebpf-target");
    let rustflags = [
        "-Cdebuginfo=2",
        "-Clink-arg=--btf",
        "-Ctarget-cpu=v3",
        "--cfg=bpf_target_arch=\"x86_64\"",
    ]
    .join("\x1f");
    let mut cmd = Command::new("rustup");
    cmd.current_dir(root)
        .args(["run", "nightly", "cargo", "build", "--package", "numa-ebpf"])
        .args(["--bins", "--release", "--target", "bpfel-unknown-none"])
        .args(["-Z", "build-std=core", "--target-dir"])
        .arg(&target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags)
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| {
        format!(
            "running {cmd:?}: is rustup installed? `cargo xtask setup` installs the BPF toolchain"
        )
    })?;
    let mut log = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.starts_with("warning") || line.starts_with("error") {
                println!("cargo:warning={line}");
            }
            log.push(line);
        }
    }
    let status = child.wait().context("waiting for the eBPF build")?;
    if !status.success() {
        let tail = log[log.len().saturating_sub(40)..].join("\n");
        bail!(
            "building numa-ebpf failed ({status}); run `cargo xtask setup` to install \
             nightly rust-src and bpf-linker.\n{tail}"
        );
    }
    let obj = target_dir.join("bpfel-unknown-none/release/numa-ebpf");
    std::fs::copy(&obj, &dst).with_context(|| format!("copying {}", obj.display()))?;
    Ok(())
}
