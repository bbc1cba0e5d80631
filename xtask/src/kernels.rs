//! Guest kernels: Debian kernel image packages, fetched with `apt-get download`
//! (never installed on the host), unpacked with `dpkg-deb -x` into a cache
//! outside the repository, plus the few modules the guest loads.
//!
//! Cache layout (root: `$NUMATRACE_CACHE`, default `~/.cache/numatrace`):
//! `kernels/<package>_<version>/{kernel.info, vmlinux, root/boot/vmlinuz-*, root/lib/modules/*}`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::cmd;
use crate::host::{apt_get, Setup};

/// A kernel line the test bed boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Series {
    /// Debian 12's own kernel: `page` based NUMA hooks, no HMAT tiering.
    #[value(name = "6.1")]
    V6_1,
    /// Debian 12 backports: `folio` based hooks, HMAT tiering.
    #[value(name = "6.12")]
    V6_12,
    /// Newest offered, if the apt lists have one (optional).
    #[value(name = "7.2")]
    V7_2,
    /// Debian's 6.12 source with the fault-count RFC's patches, built here
    /// (rfc_kernel.rs); not in [`Series::ALL`], which are Debian's images.
    #[value(name = "6.12-rfc")]
    V6_12Rfc,
}

/// How the guest gets its slow, CPU-less node into a lower memory tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiering {
    /// ACPI HMAT latencies/bandwidths place node 1 in a lower tier by themselves.
    Hmat,
    /// 6.1 ignores HMAT for tiering: node 1's range is soft-reserved
    /// (`memmap=..%..+0xefffffff`) and hot-added through dax_hmem + kmem,
    /// whose default memory type sits in a lower tier.
    SoftReserved,
}

impl Series {
    pub const ALL: [Series; 3] = [Series::V6_1, Series::V6_12, Series::V7_2];

    pub fn name(self) -> &'static str {
        match self {
            Series::V6_1 => "6.1",
            Series::V6_12 => "6.12",
            Series::V7_2 => "7.2",
            Series::V6_12Rfc => "6.12-rfc",
        }
    }

    /// A required series that cannot be fetched is a failure, not a skip.
    pub fn required(self) -> bool {
        !matches!(self, Series::V7_2 | Series::V6_12Rfc)
    }

    pub fn tiering(self) -> Tiering {
        match self {
            Series::V6_1 => Tiering::SoftReserved,
            Series::V6_12 | Series::V7_2 | Series::V6_12Rfc => Tiering::Hmat,
        }
    }

    /// `apt-cache search --names-only` pattern that finds the candidates.
    fn search_pattern(self) -> &'static str {
        match self {
            Series::V6_1 => r"^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$",
            Series::V6_12 => r"^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$",
            Series::V7_2 => r"^linux-image-7\.2\.[0-9]+\+deb14-amd64",
            Series::V6_12Rfc => r"^linux-source-6\.12$",
        }
    }

    /// The newest package of this series among `names` (ordering key, name).
    pub fn pick(self, names: &[&str]) -> Option<String> {
        names
            .iter()
            .filter_map(|n| self.order_key(n).map(|k| (k, n.to_string())))
            .max()
            .map(|(_, n)| n)
    }

    /// Sort key of a package name of this series; None if it is not one.
    fn order_key(self, name: &str) -> Option<(u32, bool)> {
        let number = |s: &str| s.parse::<u32>().ok();
        match self {
            Series::V6_1 => {
                let abi = name
                    .strip_prefix("linux-image-6.1.0-")?
                    .strip_suffix("-amd64-unsigned")?;
                Some((number(abi)?, true))
            }
            Series::V6_12 => {
                let patch = name
                    .strip_prefix("linux-image-6.12.")?
                    .strip_suffix("+deb12-amd64-unsigned")?;
                Some((number(patch)?, true))
            }
            Series::V7_2 => {
                let (patch, flavour) = name.strip_prefix("linux-image-7.2.")?.split_once('+')?;
                // Prefer -unsigned (same image without the signature) at equal patch level.
                let unsigned = match flavour {
                    "deb14-amd64-unsigned" => true,
                    "deb14-amd64" => false,
                    _ => return None,
                };
                Some((number(patch)?, unsigned))
            }
            Series::V6_12Rfc => None,
        }
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unpacked guest kernel in the cache.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub series: Series,
    pub package: String,
    pub version: String,
    /// `uname -r` of the guest, e.g. `6.1.0-57-amd64`.
    pub release: String,
    pub dir: PathBuf,
}

/// Whether a series can be booted.
pub enum Availability {
    Ready(Kernel),
    Unavailable(String),
}

const INFO_FILE: &str = "kernel.info";

impl Kernel {
    /// The image QEMU boots: the uncompressed `vmlinux` (PVH entry, saves
    /// ~5 s of in-guest decompression under TCG) if we could extract one,
    /// else the bzImage.
    pub fn boot_image(&self) -> PathBuf {
        let vmlinux = self.dir.join("vmlinux");
        if vmlinux.is_file() {
            vmlinux
        } else {
            self.vmlinuz()
        }
    }

    pub fn vmlinuz(&self) -> PathBuf {
        self.dir
            .join("root/boot")
            .join(format!("vmlinuz-{}", self.release))
    }

    fn modules_dir(&self) -> PathBuf {
        self.dir.join("root/lib/modules").join(&self.release)
    }

    fn load(dir: &Path) -> Result<Kernel> {
        let path = dir.join(INFO_FILE);
        let text =
            fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let fields: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        let get = |key: &str| {
            fields
                .get(key)
                .map(|v| v.to_string())
                .with_context(|| format!("{} lacks `{key}=`", path.display()))
        };
        let series_name = get("series")?;
        let series = Series::ALL
            .into_iter()
            .find(|s| s.name() == series_name)
            .with_context(|| format!("{}: unknown series {series_name}", path.display()))?;
        Ok(Kernel {
            series,
            package: get("package")?,
            version: get("version")?,
            release: get("release")?,
            dir: dir.to_path_buf(),
        })
    }

    /// Kernel modules `names` plus their dependencies (from each module's
    /// `depends=` modinfo), dependencies first, decompressed, skipping
    /// modules built into this kernel. Debian's packages carry no
    /// modules.dep (depmod runs at install), so we read modinfo ourselves.
    pub fn modules(&self, names: &[&str]) -> Result<Vec<Module>> {
        let dir = self.modules_dir();
        let mut index = HashMap::new();
        index_modules(&dir.join("kernel"), &mut index)?;
        let builtin: HashSet<String> = fs::read_to_string(dir.join("modules.builtin"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| module_name(Path::new(l)))
            .collect();
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for name in names {
            self.add_module(&module_key(name), &index, &builtin, &mut seen, &mut out)?;
        }
        Ok(out)
    }

    fn add_module(
        &self,
        name: &str,
        index: &HashMap<String, PathBuf>,
        builtin: &HashSet<String>,
        seen: &mut HashSet<String>,
        out: &mut Vec<Module>,
    ) -> Result<()> {
        if builtin.contains(name) || !seen.insert(name.to_string()) {
            return Ok(());
        }
        let path = index.get(name).with_context(|| {
            format!(
                "kernel {} has no module {name} under {}",
                self.release,
                self.modules_dir().display()
            )
        })?;
        let data = read_module(path)?;
        for dep in modinfo_depends(&data) {
            self.add_module(&module_key(&dep), index, builtin, seen, out)?;
        }
        out.push(Module {
            name: name.to_string(),
            data,
        });
        Ok(())
    }
}

/// A decompressed kernel module, ready for busybox `insmod`.
pub struct Module {
    pub name: String,
    pub data: Vec<u8>,
}

/// Cache root: `$NUMATRACE_CACHE`, else `~/.cache/numatrace`.
pub fn cache_root() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("NUMATRACE_CACHE") {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME").context(
        "neither NUMATRACE_CACHE nor HOME is set: set NUMATRACE_CACHE to a cache directory",
    )?;
    Ok(PathBuf::from(home).join(".cache/numatrace"))
}

fn kernels_dir() -> Result<PathBuf> {
    Ok(cache_root()?.join("kernels"))
}

/// Cached kernels of `series`, newest package first.
fn cached(series: Series) -> Vec<Kernel> {
    let Ok(dir) = kernels_dir() else {
        return Vec::new();
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut kernels: Vec<Kernel> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| Kernel::load(&e.path()).ok())
        .filter(|k| k.series == series)
        .collect();
    kernels.sort_by_key(|k| std::cmp::Reverse(series.order_key(&k.package)));
    kernels
}

/// A cached kernel of `series` if there is one (no apt look-ups: they take
/// seconds), else [`ensure`].
pub fn present(series: Series, setup: &mut Setup) -> Result<Availability> {
    if series == Series::V6_12Rfc {
        return crate::rfc_kernel::present(setup);
    }
    match cached(series).into_iter().next() {
        Some(kernel) => Ok(Availability::Ready(kernel)),
        None => ensure(series, setup),
    }
}

/// Makes the newest kernel of `series` that the apt lists offer available
/// in the cache. Falls back to a cached one when apt knows none (or fails).
pub fn ensure(series: Series, setup: &mut Setup) -> Result<Availability> {
    if series == Series::V6_12Rfc {
        return crate::rfc_kernel::ensure(setup);
    }
    let resolved = match resolve(series, setup) {
        Ok(r) => r,
        Err(err) => match cached(series).into_iter().next() {
            Some(k) => {
                println!(
                    "note: kernel {series}: apt lookup failed ({err:#}); using cached {}",
                    k.package
                );
                return Ok(Availability::Ready(k));
            }
            None => return Err(err),
        },
    };
    let Some((package, version)) = resolved else {
        if let Some(k) = cached(series).into_iter().next() {
            setup.skip(&format!(
                "kernel {series}: {} {} (already present; the apt lists no longer offer it)",
                k.package, k.version
            ));
            return Ok(Availability::Ready(k));
        }
        let reason = format!(
            "the apt lists offer no package matching {}",
            series.search_pattern()
        );
        println!("skip: kernel {series} ({reason})");
        return Ok(Availability::Unavailable(reason));
    };
    let dir = kernels_dir()?.join(dir_name(&package, &version));
    if dir.join(INFO_FILE).is_file() {
        let kernel = Kernel::load(&dir)?;
        setup.skip(&format!(
            "kernel {series}: {package} {version} (already present in {})",
            dir.display()
        ));
        return Ok(Availability::Ready(kernel));
    }
    println!("kernel {series}: chose {package} {version}");
    let kernel = download(series, &package, &version, &dir)?;
    setup.did(&format!(
        "kernel {series}: {package} {version} -> {} (uname -r {})",
        dir.display(),
        kernel.release
    ));
    for old in cached(series) {
        if old.dir != kernel.dir {
            fs::remove_dir_all(&old.dir)
                .with_context(|| format!("cannot remove old kernel {}", old.dir.display()))?;
            setup.did(&format!(
                "removed older cached kernel {}",
                old.dir.display()
            ));
        }
    }
    Ok(Availability::Ready(kernel))
}

/// (package, candidate version) of the newest kernel of `series` in the apt lists.
fn resolve(series: Series, setup: &mut Setup) -> Result<Option<(String, String)>> {
    let search = |pattern: &str| -> Result<Vec<String>> {
        let out = cmd::output(Command::new("apt-cache").args(["search", "--names-only", pattern]))?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect())
    };
    let mut names = search(series.search_pattern())?;
    // Fresh machines have empty or stale lists: refresh once, but not merely
    // because an optional series is absent from healthy lists.
    if names.is_empty() && (series.required() || search("^linux-image-")?.is_empty()) {
        setup.apt_update()?;
        names = search(series.search_pattern())?;
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let Some(package) = series.pick(&names) else {
        return Ok(None);
    };
    let policy = cmd::output(Command::new("apt-cache").args(["policy", &package]))?;
    let version = policy
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Candidate:"))
        .map(|v| v.trim().to_string())
        .find(|v| v != "(none)")
        .with_context(|| format!("apt-cache policy {package} shows no candidate version"))?;
    Ok(Some((package, version)))
}

fn dir_name(package: &str, version: &str) -> String {
    format!("{package}_{version}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._+~-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// apt-get download + dpkg-deb -x into `<dir>.partial`, then renamed to `dir`.
fn download(series: Series, package: &str, version: &str, dir: &Path) -> Result<Kernel> {
    let partial = dir.with_extension("partial");
    if partial.exists() {
        fs::remove_dir_all(&partial)
            .with_context(|| format!("cannot remove stale {}", partial.display()))?;
    }
    fs::create_dir_all(&partial).with_context(|| format!("cannot create {}", partial.display()))?;
    // The sandbox user `_apt` cannot write into root's cache directory.
    cmd::run(
        apt_get()
            .current_dir(&partial)
            .args(["download", "-q", "-o", "APT::Sandbox::User=root"])
            .arg(format!("{package}={version}")),
    )
    .with_context(|| format!("cannot download {package} {version}"))?;
    let deb = fs::read_dir(&partial)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .with_context(|| format!("apt-get download left no .deb in {}", partial.display()))?;
    let root = partial.join("root");
    cmd::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
    fs::remove_file(&deb).with_context(|| format!("cannot remove {}", deb.display()))?;

    let boot = root.join("boot");
    let release = fs::read_dir(&boot)
        .with_context(|| format!("{package} has no /boot"))?
        .filter_map(|e| e.ok())
        .find_map(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_prefix("vmlinuz-")
                .map(str::to_string)
        })
        .with_context(|| format!("{package} has no /boot/vmlinuz-*"))?;

    let config = fs::read_to_string(boot.join(format!("config-{release}"))).unwrap_or_default();
    if config.lines().any(|l| l == "CONFIG_PVH=y") {
        let vmlinuz = boot.join(format!("vmlinuz-{release}"));
        match extract_vmlinux(&vmlinuz, &partial) {
            Ok(()) => {}
            Err(err) => println!("note: booting the bzImage, no PVH vmlinux: {err:#}"),
        }
    }

    let info = format!(
        "series={}\npackage={package}\nversion={version}\nrelease={release}\n",
        series.name()
    );
    fs::write(partial.join(INFO_FILE), info)?;
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("cannot replace {}", dir.display()))?;
    }
    fs::rename(&partial, dir)
        .with_context(|| format!("cannot move {} to {}", partial.display(), dir.display()))?;
    Kernel::load(dir)
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

fn index_modules(dir: &Path, index: &mut HashMap<String, PathBuf>) -> Result<()> {
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
fn module_name(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    let stem = [".ko", ".ko.xz", ".ko.zst", ".ko.gz"]
        .iter()
        .find_map(|ext| file.strip_suffix(ext))?;
    Some(module_key(stem))
}

fn module_key(name: &str) -> String {
    name.replace('-', "_")
}

fn read_module(path: &Path) -> Result<Vec<u8>> {
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
fn modinfo_depends(module: &[u8]) -> Vec<String> {
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
    fn picks_newest_package_of_each_series() {
        let names = [
            "linux-image-6.1.0-9-amd64-unsigned",
            "linux-image-6.1.0-57-amd64-unsigned",
            "linux-image-6.1.0-57-cloud-amd64-unsigned",
            "linux-image-6.1.0-57-rt-amd64-unsigned",
            "linux-image-6.12.113+deb12-amd64-unsigned",
            "linux-image-6.12.117+deb12-amd64-unsigned",
            "linux-image-6.12.117+deb12-rt-amd64-unsigned",
            "linux-image-6.12.117+deb12-amd64",
            "linux-image-7.2.13+deb14-amd64",
            "linux-image-7.2.9+deb14-amd64-unsigned",
            "linux-image-7.2.13+deb14-amd64-dbg",
        ];
        let pick = |s: Series| s.pick(&names);
        assert_eq!(
            pick(Series::V6_1).as_deref(),
            Some("linux-image-6.1.0-57-amd64-unsigned")
        );
        assert_eq!(
            pick(Series::V6_12).as_deref(),
            Some("linux-image-6.12.117+deb12-amd64-unsigned")
        );
        assert_eq!(
            pick(Series::V7_2).as_deref(),
            Some("linux-image-7.2.13+deb14-amd64")
        );
        assert_eq!(Series::V7_2.pick(&[]), None);
    }

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
}
