//! The guest kernel of series `6.12-rfc`: Debian's `linux-source-6.12`
//! (Debian's patches already applied, same version as the 6.12 image) with
//! the fault-count RFC's two patches (`xtask/kernels/rfc/*.patch`) and a
//! small config (Debian's 6.12 image config without modules, plus
//! `xtask/kernels/rfc/config`), built once and cached beside the Debian
//! kernels.
//!
//! Layout: the build runs in `<cache>/build/linux-6.12-rfc.partial` (an
//! interrupted build resumes there when its inputs are unchanged) and its
//! product lands in `<cache>/kernels/linux-6.12-rfc_<version>_<inputs>/`
//! in the same shape as a Debian kernel (`kernel.info`, `vmlinux`,
//! `root/boot/{vmlinuz,config}-<release>`); the build tree is removed
//! afterwards. `<inputs>` fingerprints the patches, the config fragment,
//! the base config and the source version, so editing any of them builds
//! anew.
//!
//! The build takes tens of minutes on two cores, longer than CI can spare
//! next to the rest of the suite: with `CI` set it is never started, and
//! the series is reported unavailable with the command that builds it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::{Availability, Kernel, Series, INFO_FILE};
use crate::cmd;
use crate::host::{apt_get, Setup};

/// Debian's source package of the 6.12 kernel.
const SOURCE_PACKAGE: &str = "linux-source-6.12";
/// `series=` in the product's kernel.info.
const SERIES_NAME: &str = "6.12-rfc";
/// Packages the kernel build needs (pahole comes with dwarves).
const BUILD_PACKAGES: &[&str] = &[
    "build-essential",
    "bc",
    "bison",
    "flex",
    "libelf-dev",
    "libssl-dev",
    "dwarves",
    "xz-utils",
    "patch",
];
/// How long a build takes, for messages: it runs at the lowest priority,
/// so other load on the machine stretches it.
const BUILD_TIME: &str = "tens of minutes on 2 idle cores, longer under other load";
/// The command that builds the kernel, for messages.
pub(super) const BUILD_COMMAND: &str = "cargo xtask setup --kernels 6.12-rfc";

const INPUTS_FILE: &str = "numatrace-inputs";

/// The repository's patches and config fragment.
fn rfc_dir() -> PathBuf {
    cmd::workspace_root().join("xtask/kernels/rfc")
}

/// The patches, in the order they apply.
fn patches() -> Result<Vec<PathBuf>> {
    let dir = rfc_dir();
    let mut patches: Vec<PathBuf> = fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "patch"))
        .collect();
    patches.sort();
    if patches.is_empty() {
        bail!("{} holds no *.patch", dir.display());
    }
    Ok(patches)
}

/// FNV-1a, 64 bit: a fingerprint that stays the same across Rust releases
/// (std's hasher may change, which would rebuild the kernel for nothing).
fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Fingerprint of everything the build depends on.
fn inputs_key(version: &str, base_config: &str, fragment: &str, patches: &[Vec<u8>]) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325;
    for part in [
        version.as_bytes(),
        base_config.as_bytes(),
        fragment.as_bytes(),
    ] {
        h = fnv1a(h, part);
        h = fnv1a(h, &[0]);
    }
    for p in patches {
        h = fnv1a(h, p);
        h = fnv1a(h, &[0]);
    }
    format!("{h:016x}")
}

/// Whether this process may start the build (`ci`: the `CI` variable),
/// and if not why.
fn may_build(ci: Option<&str>) -> Result<(), String> {
    match ci {
        Some(v) if !v.is_empty() && v != "false" && v != "0" => Err(format!(
            "not built on this machine, and CI does not start the kernel build \
             ({BUILD_TIME}); build it once with `{BUILD_COMMAND}` and the tests run"
        )),
        _ => Ok(()),
    }
}

/// A cached patched kernel, if there is one (newest first; no apt look-ups).
fn cached() -> Vec<Kernel> {
    let Ok(dir) = super::cache_root().map(|r| r.join("kernels")) else {
        return Vec::new();
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(std::time::SystemTime, Kernel)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let kernel = load(&e.path()).ok()?;
            let time = e.metadata().and_then(|m| m.modified()).ok()?;
            Some((time, kernel))
        })
        .collect();
    found.sort_by_key(|(t, _)| std::cmp::Reverse(*t));
    found.into_iter().map(|(_, k)| k).collect()
}

/// Reads a product directory's kernel.info if it is one of ours.
fn load(dir: &Path) -> Result<Kernel> {
    let kernel = Kernel::load(dir)?;
    if kernel.series != Series::V6_12Rfc {
        bail!("{} is not a {SERIES_NAME} kernel", dir.display());
    }
    Ok(kernel)
}

/// A cached patched kernel whatever its inputs (no apt look-ups, no
/// build), else [`ensure`].
pub(super) fn present(setup: &mut Setup) -> Result<Availability> {
    match cached().into_iter().next() {
        Some(kernel) => Ok(Availability::Ready(kernel)),
        None => ensure(setup),
    }
}

/// The patched kernel for the current patches, config and source: cached,
/// or built now (unless [`may_build`] says no).
pub(super) fn ensure(setup: &mut Setup) -> Result<Availability> {
    let inputs = match Inputs::resolve(setup) {
        Ok(inputs) => inputs,
        Err(err) => {
            return match cached().into_iter().next() {
                Some(k) => {
                    crate::progress::println(format_args!(
                        "note: kernel {SERIES_NAME}: cannot check its inputs ({err:#}); \
                         using cached {}",
                        k.dir.display()
                    ));
                    Ok(Availability::Ready(k))
                }
                // Under CI a missing kernel is a skip whatever stops it.
                None => match may_build(std::env::var("CI").ok().as_deref()) {
                    Err(why) => Ok(Availability::Unavailable(format!(
                        "{why} (and its inputs cannot be had: {err:#})"
                    ))),
                    Ok(()) => Err(err),
                },
            };
        }
    };
    let dir = inputs.product_dir()?;
    if dir.join(INFO_FILE).is_file() {
        setup.skip(&format!(
            "kernel {SERIES_NAME}: {SOURCE_PACKAGE} {} + RFC patches (already built in {})",
            inputs.version,
            dir.display()
        ));
        return load(&dir).map(Availability::Ready);
    }
    if let Err(why) = may_build(std::env::var("CI").ok().as_deref()) {
        crate::progress::println(format_args!("skip: kernel {SERIES_NAME} ({why})"));
        return Ok(Availability::Unavailable(why));
    }
    let kernel = build(setup, &inputs, &dir)?;
    super::remove_older(&kernel, cached(), setup)?;
    Ok(Availability::Ready(kernel))
}

/// What a build is made from.
struct Inputs {
    /// Fingerprint of the source version and the patches (the tree).
    tree_key: String,
    /// Candidate version of linux-source-6.12.
    version: String,
    /// Debian's 6.12 image config.
    base_config: String,
    fragment: String,
    patches: Vec<PathBuf>,
    key: String,
}

impl Inputs {
    fn resolve(setup: &mut Setup) -> Result<Inputs> {
        let version = source_version(setup)?;
        let base = super::present(Series::V6_12, setup)
            .context("the patched kernel's config starts from the 6.12 image's")?;
        let base_path = base
            .dir
            .join("root/boot")
            .join(format!("config-{}", base.release));
        let base_config = fs::read_to_string(&base_path)
            .with_context(|| format!("cannot read {}", base_path.display()))?;
        let fragment_path = rfc_dir().join("config");
        let fragment = fs::read_to_string(&fragment_path)
            .with_context(|| format!("cannot read {}", fragment_path.display()))?;
        let patches = patches()?;
        let bytes = patches
            .iter()
            .map(|p| fs::read(p).with_context(|| format!("cannot read {}", p.display())))
            .collect::<Result<Vec<_>>>()?;
        let key = inputs_key(&version, &base_config, &fragment, &bytes);
        let tree_key = inputs_key(&version, "", "", &bytes);
        Ok(Inputs {
            tree_key,
            version,
            base_config,
            fragment,
            patches,
            key,
        })
    }

    /// The build tree's record of its inputs: the tree's, then everything's.
    fn stamp(&self) -> String {
        format!("tree={}\nall={}\n", self.tree_key, self.key)
    }

    fn product_dir(&self) -> Result<PathBuf> {
        let version: String = self
            .version
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || ".+~-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Ok(super::cache_root()?
            .join("kernels")
            .join(format!("linux-{SERIES_NAME}_{version}_{}", self.key)))
    }
}

/// Candidate version of linux-source-6.12 in the apt lists.
fn source_version(setup: &mut Setup) -> Result<String> {
    let candidate = || -> Result<Option<String>> {
        let policy = cmd::output(Command::new("apt-cache").args(["policy", SOURCE_PACKAGE]))?;
        Ok(policy
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Candidate:"))
            .map(|v| v.trim().to_string())
            .find(|v| v != "(none)"))
    };
    if let Some(v) = candidate()? {
        return Ok(v);
    }
    setup.apt_update()?;
    candidate()?.with_context(|| {
        format!("the apt lists offer no {SOURCE_PACKAGE}: the patched kernel cannot be built")
    })
}

/// Downloads, patches, configures and builds; caches the product in `dir`.
fn build(setup: &mut Setup, inputs: &Inputs, dir: &Path) -> Result<Kernel> {
    setup.packages(BUILD_PACKAGES)?;
    let build_dir = super::cache_root()?.join("build");
    fs::create_dir_all(&build_dir)
        .with_context(|| format!("cannot create {}", build_dir.display()))?;
    let _lock = lock_build(&build_dir.join("linux-6.12-rfc.lock"))?;
    if dir.join(INFO_FILE).is_file() {
        // Another run built it while this one waited for the lock.
        return load(dir);
    }
    let tree = build_dir.join("linux-6.12-rfc.partial");
    let stamp = tree.join(INPUTS_FILE);
    let want = inputs.stamp();
    let have = fs::read_to_string(&stamp).unwrap_or_default();
    if have == want {
        crate::progress::println(format_args!(
            "kernel {SERIES_NAME}: resuming the build in {}",
            tree.display()
        ));
    } else {
        // The source and patches decide the tree; a new config alone
        // rebuilds only what it changes.
        if have.lines().next() != want.lines().next() {
            prepare_tree(inputs, &tree)?;
        }
        configure(inputs, &tree)?;
        fs::write(&stamp, &want).with_context(|| format!("cannot write {}", stamp.display()))?;
    }
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    crate::progress::println(format_args!(
        "kernel {SERIES_NAME}: building with `nice -n 19 make -j{jobs}` \
         ({BUILD_TIME}; log: {}/build.log)",
        tree.display()
    ));
    let start = Instant::now();
    make(&tree, jobs)?;
    let minutes = start.elapsed().as_secs_f64() / 60.0;
    let kernel = install(inputs, &tree, dir)?;
    setup.did(&format!(
        "kernel {SERIES_NAME}: built {SOURCE_PACKAGE} {} + RFC patches in {minutes:.1} min \
         -> {} (uname -r {})",
        inputs.version,
        dir.display(),
        kernel.release
    ));
    fs::remove_dir_all(&tree)
        .with_context(|| format!("cannot remove the build tree {}", tree.display()))?;
    Ok(kernel)
}

/// Holds the build tree for this process: a second run (another `cargo
/// xtask` on the same machine) waits instead of building into it too.
fn lock_build(path: &Path) -> Result<fs::File> {
    cmd::lock_waiting(path, || {
        crate::progress::println(format_args!(
            "kernel {SERIES_NAME}: another run is building it ({} is locked); waiting",
            path.display()
        ))
    })
}

/// A fresh source tree in `tree`: unpacked and patched.
fn prepare_tree(inputs: &Inputs, tree: &Path) -> Result<()> {
    if tree.exists() {
        fs::remove_dir_all(tree)
            .with_context(|| format!("cannot remove stale {}", tree.display()))?;
    }
    let download = tree.with_extension("download");
    if download.exists() {
        fs::remove_dir_all(&download)?;
    }
    fs::create_dir_all(&download)
        .with_context(|| format!("cannot create {}", download.display()))?;
    cmd::run(
        apt_get()
            .current_dir(&download)
            .args(["download", "-q", "-o", "APT::Sandbox::User=root"])
            .arg(format!("{SOURCE_PACKAGE}={}", inputs.version)),
    )
    .with_context(|| format!("cannot download {SOURCE_PACKAGE} {}", inputs.version))?;
    let deb = fs::read_dir(&download)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .context("apt-get download left no .deb")?;
    let pkg = download.join("pkg");
    cmd::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&pkg))?;
    let tarball = pkg.join(format!("usr/src/{SOURCE_PACKAGE}.tar.xz"));
    fs::create_dir_all(tree)?;
    cmd::run(
        Command::new("tar")
            .arg("xJf")
            .arg(&tarball)
            .arg("-C")
            .arg(tree)
            .arg("--strip-components=1"),
    )?;
    fs::remove_dir_all(&download)?;
    for patch in &inputs.patches {
        let file = fs::File::open(patch)?;
        let status = Command::new("patch")
            .args(["-p1", "--forward", "--batch", "--quiet"])
            .current_dir(tree)
            .stdin(file)
            .status()
            .context("cannot run patch")?;
        if !status.success() {
            bail!(
                "{} does not apply to {SOURCE_PACKAGE} {}: port it again (see xtask/kernels/rfc/README.md)",
                patch.display(),
                inputs.version
            );
        }
    }
    Ok(())
}

/// Writes the tree's .config (Debian's, modules off, the fragment on top)
/// and checks that `make olddefconfig` kept the fragment.
fn configure(inputs: &Inputs, tree: &Path) -> Result<()> {
    let config = merged_config(&inputs.base_config, &inputs.fragment);
    fs::write(tree.join(".config"), config)?;
    cmd::run(
        Command::new("make")
            .arg("olddefconfig")
            .current_dir(tree)
            .stdout(std::process::Stdio::null()),
    )?;
    let final_config = fs::read_to_string(tree.join(".config"))?;
    let unmet = unmet_settings(&inputs.fragment, &final_config);
    if !unmet.is_empty() {
        bail!(
            "the kernel config does not keep what xtask/kernels/rfc/config asks for \
             (a dependency is missing): {}",
            unmet.join(", ")
        );
    }
    Ok(())
}

/// `nice -n 19 make -jN bzImage`, output in `<tree>/build.log`.
fn make(tree: &Path, jobs: usize) -> Result<()> {
    let log_path = tree.join("build.log");
    let log = fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut child = Command::new("nice")
        .args(["-n", "19", "make"])
        .arg(format!("-j{jobs}"))
        .args(["LOCALVERSION=", "bzImage"])
        .current_dir(tree)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot run make")?;
    let status = watch_make(&mut child, &log_path)?;
    if !status.success() {
        let text = fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        bail!(
            "the kernel build failed ({status}); last lines of {}:\n{}",
            log_path.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(())
}

/// Waits for the kernel's `make`; on a terminal a spinner shows the
/// objects compiled so far (the log's `CC` lines), their rate and the
/// time elapsed. A spinner, not a bar: how many objects a config compiles
/// is not known before the build, and a resumed build compiles only some.
fn watch_make(child: &mut std::process::Child, log: &Path) -> Result<std::process::ExitStatus> {
    let bar = crate::progress::counter("objects compiled");
    bar.set_message(format!("kernel {SERIES_NAME}: make"));
    let status = loop {
        if let Some(status) = child.try_wait().context("cannot wait for make")? {
            break status;
        }
        // The log stays small (one line per object): reading it whole
        // twice a second costs nothing next to the build.
        let text = fs::read(log).unwrap_or_default();
        bar.set_position(compiled(&String::from_utf8_lossy(&text)));
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    crate::progress::finish(&bar);
    Ok(status)
}

/// Objects compiled in a kbuild log: its `  CC      path.o` lines.
fn compiled(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.trim_start().starts_with("CC "))
        .count() as u64
}

/// Copies the built kernel into `dir` in the Debian kernels' layout.
fn install(inputs: &Inputs, tree: &Path, dir: &Path) -> Result<Kernel> {
    let release = cmd::output(
        Command::new("make")
            .args(["-s", "LOCALVERSION=", "kernelrelease"])
            .current_dir(tree),
    )?
    .trim()
    .to_string();
    let partial = dir.with_extension("partial");
    if partial.exists() {
        fs::remove_dir_all(&partial)?;
    }
    let boot = partial.join("root/boot");
    fs::create_dir_all(&boot)?;
    fs::copy(
        tree.join("arch/x86/boot/bzImage"),
        boot.join(format!("vmlinuz-{release}")),
    )?;
    fs::copy(tree.join(".config"), boot.join(format!("config-{release}")))?;
    // The ELF QEMU boots through PVH, as the bzImage carries it (no
    // symbols or DWARF; .BTF stays, it is part of the image).
    cmd::run(
        Command::new("objcopy")
            .args(["-R", ".comment", "-S"])
            .arg(tree.join("vmlinux"))
            .arg(partial.join("vmlinux")),
    )?;
    let info = format!(
        "series={SERIES_NAME}\npackage={SOURCE_PACKAGE}\nversion={}\nrelease={release}\ninputs={}\n",
        inputs.version, inputs.key
    );
    fs::write(partial.join(INFO_FILE), info)?;
    if dir.exists() {
        fs::remove_dir_all(dir)?;
    }
    fs::rename(&partial, dir)
        .with_context(|| format!("cannot move {} to {}", partial.display(), dir.display()))?;
    load(dir)
}

/// Debian's config with every module turned off (the guest loads none),
/// then the fragment's settings in place of the base's.
fn merged_config(base: &str, fragment: &str) -> String {
    let settings: Vec<(&str, &str)> = fragment.lines().filter_map(setting).collect();
    let mut out = String::new();
    for line in base.lines() {
        match setting(line) {
            Some((name, _)) if settings.iter().any(|(n, _)| *n == name) => continue,
            Some((name, "m")) => out.push_str(&format!("# {name} is not set\n")),
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for line in fragment.lines().filter(|l| setting(l).is_some()) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `CONFIG_X=v` -> (CONFIG_X, v); `# CONFIG_X is not set` -> (CONFIG_X, "n").
fn setting(line: &str) -> Option<(&str, &str)> {
    let line = line.trim();
    if let Some(rest) = line.strip_prefix("# ") {
        let name = rest.strip_suffix(" is not set")?;
        return name.starts_with("CONFIG_").then_some((name, "n"));
    }
    let (name, value) = line.split_once('=')?;
    name.starts_with("CONFIG_").then_some((name, value))
}

/// Fragment settings the final config does not have (olddefconfig drops
/// a setting whose dependencies are off).
fn unmet_settings(fragment: &str, config: &str) -> Vec<String> {
    let actual: Vec<(&str, &str)> = config.lines().filter_map(setting).collect();
    fragment
        .lines()
        .filter_map(setting)
        .filter(|(name, want)| {
            let have = actual
                .iter()
                .find(|(n, _)| n == name)
                .map_or("n", |(_, v)| *v);
            have != *want
        })
        .map(|(name, want)| format!("{name}={want}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiled_objects_are_the_logs_cc_lines() {
        let log = "  SYNC    include/config/auto.conf\n  CC      init/main.o\n  \
                   AS      arch/x86/entry/entry_64.o\n  CC      kernel/fork.o\n  LD      vmlinux\n";
        assert_eq!(compiled(log), 2);
    }

    #[test]
    fn config_merge_turns_modules_off_and_fragment_wins() {
        let base = "CONFIG_A=y\nCONFIG_B=m\n# CONFIG_C is not set\nCONFIG_D=m\nCONFIG_S=\"x\"\n";
        let fragment = "# why\nCONFIG_C=y\nCONFIG_D=y\n# CONFIG_A is not set\n";
        let merged = merged_config(base, fragment);
        assert_eq!(
            merged,
            "# CONFIG_B is not set\nCONFIG_S=\"x\"\nCONFIG_C=y\nCONFIG_D=y\n# CONFIG_A is not set\n"
        );
    }

    #[test]
    fn unmet_settings_name_what_olddefconfig_dropped() {
        let fragment = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_L=\"-rfc\"\n";
        assert!(unmet_settings(fragment, "CONFIG_A=y\nCONFIG_L=\"-rfc\"\n").is_empty());
        assert_eq!(
            unmet_settings(
                fragment,
                "# CONFIG_A is not set\nCONFIG_B=y\nCONFIG_L=\"\"\n"
            ),
            ["CONFIG_A=y", "CONFIG_B=n", "CONFIG_L=\"-rfc\""]
        );
    }

    #[test]
    fn ci_never_starts_the_build_and_says_how_to() {
        assert!(may_build(None).is_ok());
        assert!(may_build(Some("")).is_ok());
        assert!(may_build(Some("false")).is_ok());
        let why = may_build(Some("true")).expect_err("CI=true");
        assert!(why.contains(BUILD_COMMAND), "{why}");
    }

    #[test]
    fn inputs_key_changes_with_every_input() {
        let k = |v: &str, b: &str, f: &str, p: &[&[u8]]| {
            inputs_key(v, b, f, &p.iter().map(|x| x.to_vec()).collect::<Vec<_>>())
        };
        let base = k("1", "b", "f", &[b"p1", b"p2"]);
        assert_eq!(base, k("1", "b", "f", &[b"p1", b"p2"]));
        assert_ne!(base, k("2", "b", "f", &[b"p1", b"p2"]));
        assert_ne!(base, k("1", "c", "f", &[b"p1", b"p2"]));
        assert_ne!(base, k("1", "b", "g", &[b"p1", b"p2"]));
        assert_ne!(base, k("1", "b", "f", &[b"p1", b"p3"]));
        assert_ne!(base, k("1", "b", "f", &[b"p1p2"]));
        // Stable across builds of xtask: a fixed value, not a random hasher.
        assert_eq!(fnv1a(0xcbf2_9ce4_8422_2325, b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn the_repository_holds_both_patches_and_the_fragment_asks_for_the_probes_needs() {
        let names: Vec<String> = patches()
            .expect("patches")
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names[0].starts_with("0001-") && names[1].starts_with("0002-"));
        let fragment = fs::read_to_string(rfc_dir().join("config")).expect("config");
        let set: Vec<(&str, &str)> = fragment.lines().filter_map(setting).collect();
        for need in [
            "CONFIG_NUMA_BALANCING",
            "CONFIG_ACPI_HMAT",
            "CONFIG_DEV_DAX_KMEM",
            "CONFIG_DEBUG_INFO_BTF",
            "CONFIG_BPF_JIT",
            "CONFIG_FUNCTION_TRACER",
        ] {
            assert!(
                set.contains(&(need, "y")),
                "{need} is not =y in the fragment"
            );
        }
    }
}
