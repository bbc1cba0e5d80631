//! From downloaded `.deb`s to a bootable cache entry: `dpkg-deb -x`, where
//! the package put the kernel and its modules, the uncompressed `vmlinux`
//! QEMU boots fastest, and decompressed modules with their dependencies.
//!
//! Two package layouts exist. Debian 12's images are one package with
//! `boot/vmlinuz-<release>`, `boot/config-<release>` and
//! `lib/modules/<release>/`. Newer ones are split (`linux-image-<release>`
//! depends on `linux-binary-`, `linux-modules-` and `linux-base-<release>`)
//! and keep everything under `usr/lib/modules/<release>/`, the kernel as
//! `vmlinuz`, its configuration as `config`.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::cmd;

/// Where one unpacked kernel keeps its files, relative to the cache entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    /// `uname -r` of the guest.
    pub release: String,
    pub vmlinuz: PathBuf,
    pub modules: PathBuf,
    pub config: PathBuf,
}

impl Layout {
    /// Debian 12's single-package layout (also what cache entries written
    /// before the split layout existed hold).
    pub(super) fn boot_dir(release: &str) -> Layout {
        Layout {
            release: release.to_string(),
            vmlinuz: PathBuf::from(format!("root/boot/vmlinuz-{release}")),
            modules: PathBuf::from(format!("root/lib/modules/{release}")),
            config: PathBuf::from(format!("root/boot/config-{release}")),
        }
    }

    /// The split layout: everything in `usr/lib/modules/<release>/`.
    fn modules_dir(release: &str) -> Layout {
        let dir = PathBuf::from(format!("root/usr/lib/modules/{release}"));
        Layout {
            release: release.to_string(),
            vmlinuz: dir.join("vmlinuz"),
            config: dir.join("config"),
            modules: dir,
        }
    }
}

/// `dpkg-deb -x` of every `.deb` in `dir` into `dir/root`, deleting each
/// package once unpacked; then finds the kernel in it.
pub(super) fn unpack(dir: &Path) -> Result<Layout> {
    let mut debs: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    if debs.is_empty() {
        bail!("apt-get download left no .deb in {}", dir.display());
    }
    debs.sort();
    let root = dir.join("root");
    for deb in &debs {
        cmd::run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&root))?;
        fs::remove_file(deb).with_context(|| format!("cannot remove {}", deb.display()))?;
    }
    locate(dir)
}

/// The layout of the kernel unpacked in `dir/root`.
fn locate(dir: &Path) -> Result<Layout> {
    let root = dir.join("root");
    let in_boot = fs::read_dir(root.join("boot")).ok().and_then(|entries| {
        entries.filter_map(|e| e.ok()).find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("vmlinuz-").map(Layout::boot_dir)
        })
    });
    let in_modules = || {
        fs::read_dir(root.join("usr/lib/modules"))
            .ok()?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().join("vmlinuz").is_file())
            .map(|e| Layout::modules_dir(&e.file_name().to_string_lossy()))
            .next()
    };
    in_boot.or_else(in_modules).with_context(|| {
        format!(
            "no kernel in {}: neither boot/vmlinuz-<release> nor usr/lib/modules/<release>/vmlinuz",
            root.display()
        )
    })
}

/// Writes `<out_dir>/vmlinux` when the kernel's configuration says it has
/// a PVH entry (QEMU can then boot the ELF directly, which saves ~5 s of
/// in-guest decompression under TCG). A failure only costs that time.
pub(super) fn write_vmlinux(dir: &Path, layout: &Layout) {
    let config = fs::read_to_string(dir.join(&layout.config)).unwrap_or_default();
    if !config.lines().any(|l| l == "CONFIG_PVH=y") {
        return;
    }
    if let Err(err) = extract_vmlinux(&dir.join(&layout.vmlinuz), dir) {
        println!("note: booting the bzImage, no PVH vmlinux: {err:#}");
    }
}

/// Writes `<out_dir>/vmlinux`: the ELF inside a bzImage, decompressed on
/// the host. See Documentation/arch/x86/boot.rst: `payload_offset` and
/// `payload_length` locate the compressed kernel after the setup sectors;
/// its last 4 bytes are the decompressed size.
fn extract_vmlinux(vmlinuz: &Path, out_dir: &Path) -> Result<()> {
    let image = fs::read(vmlinuz).with_context(|| format!("cannot read {}", vmlinuz.display()))?;
    let (payload, size) = bzimage_payload(&image)?;
    let tool = match payload {
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => "xz",
        [0x28, 0xb5, 0x2f, 0xfd, ..] => "zstd",
        [0x1f, 0x8b, ..] => "gzip",
        _ => bail!("unknown compression in {}", vmlinuz.display()),
    };
    let compressed = out_dir.join("vmlinux.compressed");
    fs::write(&compressed, payload)?;
    let elf = cmd::output_bytes(Command::new(tool).arg("-dc").arg(&compressed))?;
    fs::remove_file(&compressed)?;
    if !elf.starts_with(b"\x7fELF") || elf.len() as u64 != u64::from(size) {
        bail!(
            "{tool} output of {} is not the expected ELF",
            vmlinuz.display()
        );
    }
    fs::write(out_dir.join("vmlinux"), elf)?;
    Ok(())
}

/// (compressed payload without its size trailer, decompressed size).
fn bzimage_payload(image: &[u8]) -> Result<(&[u8], u32)> {
    let u32_at = |off: usize| -> Option<u32> {
        Some(u32::from_le_bytes(
            image.get(off..off + 4)?.try_into().ok()?,
        ))
    };
    if image.get(0x202..0x206) != Some(b"HdrS") {
        bail!("not a bzImage (no HdrS signature)");
    }
    let setup_sects = match image[0x1f1] {
        0 => 4,
        n => usize::from(n),
    };
    let (offset, length) = u32_at(0x248)
        .zip(u32_at(0x24c))
        .context("bzImage header truncated")?;
    let start = (setup_sects + 1) * 512 + offset as usize;
    let end = start + length as usize;
    if length < 4 || end > image.len() {
        bail!("bzImage payload out of bounds");
    }
    let size = u32_at(end - 4).context("bzImage payload truncated")?;
    Ok((&image[start..end - 4], size))
}

pub(super) fn index_modules(dir: &Path, index: &mut HashMap<String, PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            index_modules(&path, index)?;
        } else if let Some(name) = module_name(&path) {
            index.insert(name, path);
        }
    }
    Ok(())
}

/// `.../dax_hmem.ko.xz` -> `dax_hmem` (module names use `_`, files may use `-`).
pub(super) fn module_name(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    let stem = [".ko", ".ko.xz", ".ko.zst", ".ko.gz"]
        .iter()
        .find_map(|ext| file.strip_suffix(ext))?;
    Some(module_key(stem))
}

pub(super) fn module_key(name: &str) -> String {
    name.replace('-', "_")
}

pub(super) fn read_module(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        "xz"
    } else if name.ends_with(".zst") {
        "zstd"
    } else if name.ends_with(".gz") {
        "gzip"
    } else {
        return fs::read(path).with_context(|| format!("cannot read {name}"));
    };
    cmd::output_bytes(Command::new(tool).arg("-dc").arg(path))
}

/// The `depends=` entry of a module's `.modinfo` strings (NUL separated).
pub(super) fn modinfo_depends(module: &[u8]) -> Vec<String> {
    module
        .split(|&b| b == 0)
        .find_map(|s| s.strip_prefix(b"depends="))
        .map(|deps| {
            String::from_utf8_lossy(deps)
                .split(',')
                .filter(|d| !d.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_and_depends() {
        assert_eq!(
            module_name(Path::new("kernel/drivers/dax/hmem/dax_hmem.ko.xz")).as_deref(),
            Some("dax_hmem")
        );
        assert_eq!(
            module_name(Path::new("kernel/drivers/dax/device-dax.ko")).as_deref(),
            Some("device_dax")
        );
        assert_eq!(module_name(Path::new("modules.order")), None);
        let modinfo = b"\0license=GPL\0depends=device_dax,dax_pmem\0name=kmem\0";
        assert_eq!(modinfo_depends(modinfo), ["device_dax", "dax_pmem"]);
        assert!(modinfo_depends(b"\0depends=\0name=kmem\0").is_empty());
    }

    #[test]
    fn bzimage_payload_location() {
        let mut image = vec![0u8; 4096];
        image[0x1f1] = 1; // setup sectors: payload area starts at 2 * 512
        image[0x202..0x206].copy_from_slice(b"HdrS");
        image[0x248..0x24c].copy_from_slice(&16u32.to_le_bytes());
        image[0x24c..0x250].copy_from_slice(&8u32.to_le_bytes());
        image[1040..1044].copy_from_slice(b"data");
        image[1044..1048].copy_from_slice(&1234u32.to_le_bytes());
        let (payload, size) = bzimage_payload(&image).expect("valid header");
        assert_eq!((payload, size), (&b"data"[..], 1234));
        assert!(bzimage_payload(&[0u8; 1024]).is_err());
    }

    /// Both package layouts, as unpacked files.
    #[test]
    fn locates_the_kernel_in_either_layout() {
        let base = std::env::temp_dir().join(format!("xtask-layout-{}", std::process::id()));
        let make = |name: &str, file: &str| {
            let dir = base.join(name);
            let path = dir.join("root").join(file);
            fs::create_dir_all(path.parent().expect("has parent")).expect("mkdir");
            fs::write(&path, b"").expect("write");
            dir
        };
        let boot = make("boot", "boot/vmlinuz-6.12.117+deb12-amd64");
        assert_eq!(
            locate(&boot).expect("boot layout"),
            Layout::boot_dir("6.12.117+deb12-amd64")
        );
        let split = make("split", "usr/lib/modules/7.2.13+deb14-amd64/vmlinuz");
        let layout = locate(&split).expect("split layout");
        assert_eq!(layout.release, "7.2.13+deb14-amd64");
        assert_eq!(
            layout.vmlinuz,
            Path::new("root/usr/lib/modules/7.2.13+deb14-amd64/vmlinuz")
        );
        assert_eq!(
            layout.modules,
            Path::new("root/usr/lib/modules/7.2.13+deb14-amd64")
        );
        let empty = make("empty", "usr/share/doc/x");
        assert!(locate(&empty).is_err());
        let _ = fs::remove_dir_all(&base);
    }
}
