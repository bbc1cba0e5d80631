//! Guest kernels: Debian kernel image packages, fetched with `apt-get download`
//! (never installed on the host), unpacked with `dpkg-deb -x` into a cache
//! outside the repository, plus the few modules the guest loads.
//!
//! Cache layout (root: `$NUMATRACE_CACHE`, default `~/.cache/numatrace`):
//! `kernels/<package>_<version>/{kernel.info, vmlinux, root/...}` with the
//! packages' files under `root/` (where the kernel and modules are depends
//! on the package layout, see unpack.rs; `kernel.info` names them), and
//! `apt/sid/` for Debian unstable's lists (apt.rs).

mod apt;
mod rfc;
mod unpack;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::host::Setup;
use apt::{Candidate, Lists};
use unpack::{index_modules, modinfo_depends, module_key, module_name, read_module, Layout};

/// A kernel line the test bed boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub(crate) enum Series {
    /// Debian 12's own kernel (newest linux-image-6.1.0-<abi>-amd64-unsigned):
    /// `page` based NUMA hooks, no HMAT tiering.
    #[value(name = "6.1")]
    V6_1,
    /// Debian 12 backports (newest linux-image-6.12.<patch>+deb12-amd64-unsigned):
    /// `folio` based hooks, HMAT tiering.
    #[value(name = "6.12")]
    V6_12,
    /// The newest 7.x in Debian unstable's lists
    /// (linux-image-7.<minor>.<patch>+deb<N>-amd64, highest minor, then patch;
    /// 7.2.13 on 2026-12-01), read through a private apt configuration.
    #[value(name = "7")]
    V7,
    /// Debian's 6.12 source with the fault-count RFC's patches, built here
    /// (rfc.rs); not in [`Series::ALL`], which are Debian's images.
    #[value(name = "6.12-rfc")]
    V6_12Rfc,
}

/// How the guest gets its slow, CPU-less node into a lower memory tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tiering {
    /// ACPI HMAT latencies/bandwidths place node 1 in a lower tier by themselves.
    Hmat,
    /// 6.1 ignores HMAT for tiering: node 1's range is soft-reserved
    /// (`memmap=..%..+0xefffffff`) and hot-added through dax_hmem + kmem,
    /// whose default memory type sits in a lower tier.
    SoftReserved,
}

impl Series {
    pub(crate) const ALL: [Series; 3] = [Series::V6_1, Series::V6_12, Series::V7];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Series::V6_1 => "6.1",
            Series::V6_12 => "6.12",
            Series::V7 => "7",
            Series::V6_12Rfc => "6.12-rfc",
        }
    }

    pub(crate) fn tiering(self) -> Tiering {
        match self {
            Series::V6_1 => Tiering::SoftReserved,
            Series::V6_12 | Series::V7 | Series::V6_12Rfc => Tiering::Hmat,
        }
    }

    fn lists(self) -> Lists {
        match self {
            Series::V6_1 | Series::V6_12 | Series::V6_12Rfc => Lists::Host,
            Series::V7 => Lists::Sid,
        }
    }

    /// `apt-cache search --names-only` pattern that finds the candidates.
    fn search_pattern(self) -> &'static str {
        match self {
            Series::V6_1 => r"^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$",
            Series::V6_12 => r"^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$",
            Series::V7 => r"^linux-image-7\.[0-9]+\.[0-9]+\+deb[0-9]+-amd64",
            Series::V6_12Rfc => r"^linux-source-6\.12$",
        }
    }

    /// The newest package of this series among `names` (ordering key, name).
    pub(crate) fn pick(self, names: &[&str]) -> Option<String> {
        names
            .iter()
            .filter_map(|n| self.order_key(n).map(|k| (k, n.to_string())))
            .max()
            .map(|(_, n)| n)
    }

    /// Sort key of a package name of this series; None if it is not one.
    fn order_key(self, name: &str) -> Option<(u32, u32, bool)> {
        let number = |s: &str| s.parse::<u32>().ok();
        match self {
            Series::V6_1 => {
                let abi = name
                    .strip_prefix("linux-image-6.1.0-")?
                    .strip_suffix("-amd64-unsigned")?;
                Some((0, number(abi)?, true))
            }
            Series::V6_12 => {
                let patch = name
                    .strip_prefix("linux-image-6.12.")?
                    .strip_suffix("+deb12-amd64-unsigned")?;
                Some((0, number(patch)?, true))
            }
            Series::V7 => {
                let (version, flavour) = name.strip_prefix("linux-image-7.")?.split_once('+')?;
                let (minor, patch) = version.split_once('.')?;
                let debian = flavour.strip_prefix("deb")?;
                let (abi, variant) = debian.split_once('-')?;
                number(abi)?;
                // Prefer -unsigned (same image without the signature) at equal version.
                let unsigned = match variant {
                    "amd64-unsigned" => true,
                    "amd64" => false,
                    _ => return None,
                };
                Some((number(minor)?, number(patch)?, unsigned))
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

/// A kernel of a series, or why there is none where a missing kernel is
/// a skip, not a failure (the patched kernel, not built under CI).
pub(crate) enum Availability {
    Ready(Kernel),
    Unavailable(String),
}

/// [`ensure`], but the patched kernel may be unavailable (see
/// `rfc::ensure`); every Debian series must be there.
pub(crate) fn available(series: Series, setup: &mut Setup) -> Result<Availability> {
    if series == Series::V6_12Rfc {
        return rfc::ensure(setup);
    }
    ensure(series, setup).map(Availability::Ready)
}

/// Removes the cached kernels of `olds` other than `kept` (a newer one
/// replaced them).
pub(crate) fn remove_older(kept: &Kernel, olds: Vec<Kernel>, setup: &mut Setup) -> Result<()> {
    for old in olds.into_iter().filter(|o| o.dir != kept.dir) {
        fs::remove_dir_all(&old.dir)
            .with_context(|| format!("cannot remove old kernel {}", old.dir.display()))?;
        setup.did(&format!(
            "removed older cached kernel {}",
            old.dir.display()
        ));
    }
    Ok(())
}

/// An unpacked guest kernel in the cache.
#[derive(Clone, Debug)]
pub(crate) struct Kernel {
    pub series: Series,
    pub package: String,
    pub version: String,
    /// `uname -r` of the guest, e.g. `6.1.0-57-amd64`.
    pub release: String,
    pub dir: PathBuf,
    layout: Layout,
}

const INFO_FILE: &str = "kernel.info";

impl Kernel {
    /// The image QEMU boots: the uncompressed `vmlinux` (PVH entry, saves
    /// ~5 s of in-guest decompression under TCG) if we could extract one,
    /// else the bzImage.
    pub(crate) fn boot_image(&self) -> PathBuf {
        let vmlinux = self.dir.join("vmlinux");
        if vmlinux.is_file() {
            vmlinux
        } else {
            self.dir.join(&self.layout.vmlinuz)
        }
    }

    fn modules_dir(&self) -> PathBuf {
        self.dir.join(&self.layout.modules)
    }

    /// `kernel.info`: `key=value` lines. Entries without `vmlinuz=` and
    /// `modules=` have Debian 12's layout.
    fn info(series: Series, package: &str, version: &str, layout: &Layout) -> String {
        format!(
            "series={}\npackage={package}\nversion={version}\nrelease={}\n\
             vmlinuz={}\nmodules={}\nconfig={}\n",
            series.name(),
            layout.release,
            layout.vmlinuz.display(),
            layout.modules.display(),
            layout.config.display(),
        )
    }

    pub(crate) fn load(dir: &Path) -> Result<Kernel> {
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
        let series = <Series as clap::ValueEnum>::value_variants()
            .iter()
            .copied()
            .find(|s| s.name() == series_name)
            .with_context(|| format!("{}: unknown series {series_name}", path.display()))?;
        let release = get("release")?;
        let mut layout = Layout::boot_dir(&release);
        for (key, slot) in [
            ("vmlinuz", &mut layout.vmlinuz),
            ("modules", &mut layout.modules),
            ("config", &mut layout.config),
        ] {
            if let Some(value) = fields.get(key) {
                *slot = PathBuf::from(value);
            }
        }
        Ok(Kernel {
            series,
            package: get("package")?,
            version: get("version")?,
            release,
            dir: dir.to_path_buf(),
            layout,
        })
    }

    /// Kernel modules `names` plus their dependencies (from each module's
    /// `depends=` modinfo), dependencies first, decompressed, skipping
    /// modules built into this kernel. Debian's packages carry no
    /// modules.dep (depmod runs at install), so we read modinfo ourselves.
    pub(crate) fn modules(&self, names: &[&str]) -> Result<Vec<Module>> {
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

    /// Whether this kernel has module `name` as a file (not built in).
    pub(crate) fn has_module(&self, name: &str) -> Result<bool> {
        let mut index = HashMap::new();
        index_modules(&self.modules_dir().join("kernel"), &mut index)?;
        Ok(index.contains_key(&module_key(name)))
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
pub(crate) struct Module {
    pub name: String,
    pub data: Vec<u8>,
}

/// Cache root: `$NUMATRACE_CACHE`, else `~/.cache/numatrace`.
pub(crate) fn cache_root() -> Result<PathBuf> {
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
pub(crate) fn present(series: Series, setup: &mut Setup) -> Result<Kernel> {
    if series == Series::V6_12Rfc {
        return match rfc::present(setup)? {
            Availability::Ready(k) => Ok(k),
            Availability::Unavailable(why) => anyhow::bail!("{why}"),
        };
    }
    match cached(series).into_iter().next() {
        Some(kernel) => Ok(kernel),
        None => ensure(series, setup),
    }
}

/// Makes the newest kernel of `series` that its apt lists offer available
/// in the cache. Falls back to a cached one when apt fails or no longer
/// offers the series; fails when neither has one.
pub(crate) fn ensure(series: Series, setup: &mut Setup) -> Result<Kernel> {
    if series == Series::V6_12Rfc {
        return match rfc::ensure(setup)? {
            Availability::Ready(k) => Ok(k),
            Availability::Unavailable(why) => anyhow::bail!("{why}"),
        };
    }
    let resolved = match apt::resolve(series, setup) {
        Ok(r) => r,
        Err(err) => match cached(series).into_iter().next() {
            Some(k) => {
                crate::progress::println(format_args!(
                    "note: kernel {series}: apt lookup failed ({err:#}); using cached {}",
                    k.package
                ));
                return Ok(k);
            }
            None => return Err(err.context(format!("no {series} guest kernel"))),
        },
    };
    let Some(candidate) = resolved else {
        if let Some(k) = cached(series).into_iter().next() {
            setup.skip(&format!(
                "kernel {series}: {} {} (already present; the apt lists no longer offer it)",
                k.package, k.version
            ));
            return Ok(k);
        }
        bail!(
            "no {series} guest kernel: {} offer no package matching {}",
            match series.lists() {
                Lists::Host => "the host's apt lists (/etc/apt/sources.list*)",
                Lists::Sid => "Debian sid's lists",
            },
            series.search_pattern()
        );
    };
    let Candidate {
        package, version, ..
    } = &candidate;
    let dir = kernels_dir()?.join(dir_name(package, version));
    if dir.join(INFO_FILE).is_file() {
        let kernel = Kernel::load(&dir)?;
        setup.skip(&format!(
            "kernel {series}: {package} {version} (already present in {})",
            dir.display()
        ));
        return Ok(kernel);
    }
    crate::progress::println(format_args!(
        "kernel {series}: chose {package} {version} ({})",
        candidate.downloads.join(" ")
    ));
    let kernel = fetch(series, &candidate, &dir)?;
    setup.did(&format!(
        "kernel {series}: {package} {version} -> {} (uname -r {})",
        dir.display(),
        kernel.release
    ));
    remove_older(&kernel, cached(series), setup)?;
    Ok(kernel)
}

/// Downloads and unpacks `candidate` into `<dir>.partial`, then renames it
/// to `dir`: a cache entry with a `kernel.info` is always complete.
fn fetch(series: Series, candidate: &Candidate, dir: &Path) -> Result<Kernel> {
    let partial = dir.with_extension("partial");
    if partial.exists() {
        fs::remove_dir_all(&partial)
            .with_context(|| format!("cannot remove stale {}", partial.display()))?;
    }
    fs::create_dir_all(&partial).with_context(|| format!("cannot create {}", partial.display()))?;
    apt::download(series, candidate, &partial)?;
    let layout = unpack::unpack(&partial)?;
    unpack::write_vmlinux(&partial, &layout);
    let info = Kernel::info(series, &candidate.package, &candidate.version, &layout);
    fs::write(partial.join(INFO_FILE), info)?;
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("cannot replace {}", dir.display()))?;
    }
    fs::rename(&partial, dir)
        .with_context(|| format!("cannot move {} to {}", partial.display(), dir.display()))?;
    Kernel::load(dir)
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
            pick(Series::V7).as_deref(),
            Some("linux-image-7.2.13+deb14-amd64")
        );
        assert_eq!(Series::V7.pick(&[]), None);
        // The newest minor wins over a higher patch; unsigned at equal version.
        let later = [
            "linux-image-7.2.13+deb14-amd64",
            "linux-image-7.10.1+deb15-amd64",
            "linux-image-7.3.20+deb14-amd64",
            "linux-image-7.10.1+deb15-amd64-unsigned",
            "linux-image-7.11.0+deb15-cloud-amd64",
            "linux-image-8.0.1+deb15-amd64",
        ];
        assert_eq!(
            Series::V7.pick(&later).as_deref(),
            Some("linux-image-7.10.1+deb15-amd64-unsigned")
        );
    }
}
