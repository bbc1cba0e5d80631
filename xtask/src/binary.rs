//! `cargo xtask build`: the static musl `numatrace` binary (package numa-cli).
//! numa-probe's build script (numa-cli/crates/probe/build.rs) compiles the
//! eBPF object with nightly, so the toolchain part of setup runs first.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cmd;
use crate::host::{Setup, MUSL_TARGET};

/// Builds numatrace for musl, checks that it is static, returns its path.
pub(crate) fn build(release: bool, setup: &mut Setup) -> Result<PathBuf> {
    setup.toolchain()?;
    let mut cargo = cmd::cargo();
    cargo.args([
        "build",
        "-p",
        "numa-cli",
        "--bin",
        "numatrace",
        "--target",
        MUSL_TARGET,
    ]);
    if release {
        cargo.arg("--release");
    }
    cmd::run(&mut cargo)?;
    let path = path(release);
    check_static(&path)?;
    Ok(path)
}

/// Where cargo puts the musl binary.
pub(crate) fn path(release: bool) -> PathBuf {
    let profile = if release { "release" } else { "debug" };
    cmd::target_dir()
        .join(MUSL_TARGET)
        .join(profile)
        .join("numatrace")
}

/// Fails unless `path` is an x86-64 ELF executable without a program
/// interpreter (static or static-pie), i.e. runs in a bare busybox guest.
pub(crate) fn check_static(path: &Path) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    match elf_interpreter(&bytes) {
        Ok(None) => Ok(()),
        Ok(Some(interp)) => bail!(
            "{} is dynamically linked (interpreter {interp}); build it for {MUSL_TARGET}",
            path.display()
        ),
        Err(err) => Err(err.context(format!(
            "{} is not an x86-64 ELF executable",
            path.display()
        ))),
    }
}

/// The PT_INTERP path of a 64-bit little-endian ELF, None if there is none.
fn elf_interpreter(elf: &[u8]) -> Result<Option<String>> {
    let u16_at = |off: usize| {
        elf.get(off..off + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u64_at = |off: usize| {
        elf.get(off..off + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    if !elf.starts_with(b"\x7fELF\x02\x01") {
        bail!("no ELF64 little-endian header");
    }
    const PT_INTERP: u32 = 3;
    let phoff = u64_at(0x20).context("truncated ELF header")? as usize;
    let phentsize = usize::from(u16_at(0x36).context("truncated ELF header")?);
    let phnum = usize::from(u16_at(0x38).context("truncated ELF header")?);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let p_type = elf
            .get(ph..ph + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .context("truncated program header")?;
        if p_type == PT_INTERP {
            let offset = u64_at(ph + 8).context("truncated program header")? as usize;
            let size = u64_at(ph + 32).context("truncated program header")? as usize;
            let interp = elf.get(offset..offset + size).context("bad PT_INTERP")?;
            return Ok(Some(
                String::from_utf8_lossy(interp)
                    .trim_end_matches('\0')
                    .to_string(),
            ));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 image with one program header of type `p_type`.
    fn elf_with_phdr(p_type: u32) -> Vec<u8> {
        let mut elf = vec![0u8; 0x40 + 0x38 + 16];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        elf[0x40..0x44].copy_from_slice(&p_type.to_le_bytes());
        let data = 0x40 + 0x38;
        elf[0x48..0x50].copy_from_slice(&(data as u64).to_le_bytes());
        elf[0x60..0x68].copy_from_slice(&6u64.to_le_bytes());
        elf[data..data + 6].copy_from_slice(b"/ld.so");
        elf
    }

    #[test]
    fn finds_the_interpreter() {
        assert_eq!(
            elf_interpreter(&elf_with_phdr(3))
                .expect("valid ELF")
                .as_deref(),
            Some("/ld.so")
        );
        assert_eq!(elf_interpreter(&elf_with_phdr(1)).expect("valid ELF"), None);
        assert!(elf_interpreter(b"#!/bin/sh\n").is_err());
    }
}
