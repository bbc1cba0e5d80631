//! The systemd guest's root disk: a Debian (trixie, minbase) userland with
//! systemd as PID 1 and Prometheus, built by mmdebstrap into a directory and
//! packed into an ext4 image with `mkfs.ext4 -d` (no loop mount). The test
//! bed attaches it read-only (`snapshot=on`): guests write to a throwaway
//! overlay, so the cached image is never changed.
//!
//! Built by `cargo xtask setup` into the cache (beside the kernels), under a
//! name keyed by a hash of [`RECIPE`]: a changed recipe builds a new image,
//! an unchanged one is reused.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::cmd;
use crate::host::Setup;
use crate::kernels;

const SUITE: &str = "trixie";
const MIRROR: &str = "http://deb.debian.org/debian";

/// Packages besides minbase. numatrace's .deb depends on nothing (static);
/// `apt-get install ./numatrace_*.deb` needs apt only, which minbase has.
/// No udev: the root disk is mounted by the initramfs, and nothing the
/// test runs waits for a device unit.
const PACKAGES: &[&str] = &[
    "systemd",
    "systemd-sysv",
    "dbus",
    "prometheus",
    "curl",
    "procps",
];

/// Units masked in the image: irrelevant to the test and slow under TCG,
/// or in the way of the test's use of the serial console.
/// - serial-getty@ttyS0, getty@tty1: a login prompt on the console would
///   interleave with the test's output (and there is no tty1 to speak of);
/// - apt-daily*, dpkg-db-backup, e2scrub*, fstrim, man-db timers: periodic
///   jobs that would compete with the test for the two vCPUs;
/// - systemd-networkd-wait-online: the guest has no network;
/// - systemd-timesyncd: no network, and the guest clock is QEMU's;
/// - systemd-modules-load: the root disk has no kernel modules (init loads
///   those the guest needs from the initramfs), so it can only fail;
/// - prometheus-node-exporter is not installed (minbase, no recommends).
const MASKED: &[&str] = &[
    "serial-getty@ttyS0.service",
    "getty@tty1.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "man-db.timer",
    "systemd-networkd-wait-online.service",
    "systemd-timesyncd.service",
    "systemd-modules-load.service",
];

/// Everything that decides the image's contents; its hash names the image.
fn recipe() -> String {
    format!(
        "mmdebstrap --variant=minbase {SUITE} {MIRROR}\ninclude {}\nmask {}\n\
         dpkg excludes: man, doc (but copyright), locale\nempty machine-id\nhostname numatrace-vm\n",
        PACKAGES.join(","),
        MASKED.join(",")
    )
}

fn images_dir() -> Result<PathBuf> {
    Ok(kernels::cache_root()?.join("images"))
}

/// The image's path for the current recipe (present or not).
pub(crate) fn path() -> Result<PathBuf> {
    let hash = fnv1a(recipe().as_bytes());
    Ok(images_dir()?.join(format!("systemd-{SUITE}-{hash:016x}.ext4")))
}

/// 64-bit FNV-1a: a stable name for the recipe (not a security boundary).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The cached image, built now if the recipe changed or it is missing
/// (about 30 s of mmdebstrap on a machine near a Debian mirror, plus mkfs).
pub(crate) fn ensure(setup: &mut Setup) -> Result<PathBuf> {
    let image = path()?;
    if image.is_file() {
        setup.skip(&format!(
            "systemd guest image {} (already present)",
            image.display()
        ));
        return Ok(image);
    }
    setup.packages(&["mmdebstrap", "e2fsprogs"])?;
    let dir = images_dir()?;
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let _lock = cmd::lock_waiting(&dir.join(".lock"), || {
        eprintln!("waiting for another `cargo xtask` run building the systemd guest image")
    })?;
    if image.is_file() {
        return Ok(image);
    }
    let root = dir.join("root.tmp");
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("cannot clear {}", root.display()))?;
    }
    let masks: Vec<String> = MASKED
        .iter()
        .map(|u| format!("ln -sf /dev/null \"$1/etc/systemd/system/{u}\""))
        .collect();
    let customize = format!(
        "{}; : > \"$1/etc/machine-id\"; echo numatrace-vm > \"$1/etc/hostname\"",
        masks.join("; ")
    );
    cmd::run(
        Command::new("mmdebstrap")
            .args(["--variant=minbase", "--mode=root", "--format=directory"])
            .arg(format!("--include={}", PACKAGES.join(",")))
            .args([
                "--dpkgopt=path-exclude=/usr/share/man/*",
                "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-include=/usr/share/doc/*/copyright",
                "--dpkgopt=path-exclude=/usr/share/locale/*",
            ])
            .arg(format!("--customize-hook={customize}"))
            .arg(SUITE)
            .arg(&root)
            .arg(MIRROR),
    )
    .context("mmdebstrap of the systemd guest's root failed")?;
    let tmp = image.with_extension("ext4.tmp");
    // Room for the test's writes beyond what the userland takes (they go
    // to QEMU's snapshot overlay, but the file system must have the space).
    let size_mib = dir_size_mib(&root)? + 512;
    cmd::run(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L", "numatrace-root", "-d"])
            .arg(&root)
            .arg(&tmp)
            .arg(format!("{size_mib}M")),
    )
    .context("mkfs.ext4 of the systemd guest image failed")?;
    fs::rename(&tmp, &image).with_context(|| format!("cannot write {}", image.display()))?;
    fs::remove_dir_all(&root).with_context(|| format!("cannot remove {}", root.display()))?;
    fs::write(image.with_extension("recipe"), recipe())
        .with_context(|| format!("cannot write the recipe beside {}", image.display()))?;
    remove_other_images(&dir, &image);
    setup.did(&format!("systemd guest image {}", image.display()));
    Ok(image)
}

/// Older recipes' images: gigabytes nobody boots any more.
fn remove_other_images(dir: &Path, keep: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let p = e.path();
        let stem_differs = p.file_stem() != keep.file_stem();
        let ours = p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("systemd-"));
        if ours && stem_differs {
            let _ = fs::remove_file(&p);
        }
    }
}

fn dir_size_mib(dir: &Path) -> Result<u64> {
    let out = cmd::output(Command::new("du").args(["-s", "-m", "-x"]).arg(dir))?;
    out.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("cannot read du's size of {}: {out:?}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_name_follows_the_recipe() {
        assert_ne!(fnv1a(b"a"), fnv1a(b"b"));
        assert!(recipe().contains("prometheus") && recipe().contains("serial-getty@ttyS0"));
    }
}
