//! The guest's root file system: an uncompressed `newc` cpio archive written
//! directly (no staging directory) holding busybox, `/init`
//! (test/vm-init/init) and the files beside it in `/numatrace-vmtest/`,
//! `/bin/numatrace`, the decompressed kernel modules,
//! the run's configuration and command, and any `--file` extras.
//! It is rebuilt for every boot: a few MB, a few milliseconds.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, Context, Result};

use crate::kernels::Module;

/// `--file HOSTPATH[:GUESTPATH]`; the guest path defaults to `/bin/<name>`.
#[derive(Clone, Debug)]
pub(crate) struct GuestFile {
    pub host: PathBuf,
    pub guest: String,
}

impl FromStr for GuestFile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (host, guest) = match s.split_once(':') {
            Some((host, guest)) => (PathBuf::from(host), guest.to_string()),
            None => {
                let host = PathBuf::from(s);
                let name = host
                    .file_name()
                    .ok_or_else(|| format!("{s:?} names no file"))?
                    .to_string_lossy()
                    .into_owned();
                (host, format!("/bin/{name}"))
            }
        };
        if !guest.starts_with('/') {
            return Err(format!("guest path {guest:?} must be absolute"));
        }
        Ok(GuestFile { host, guest })
    }
}

/// Everything that goes into one guest's initramfs.
pub(crate) struct Contents<'a> {
    /// Becomes `/init` (test/vm-init/init); [`VMTEST_FILES`] beside it go
    /// to `/numatrace-vmtest/`.
    pub init: &'a Path,
    /// A static busybox: `/bin/busybox`, `/bin/sh`; init installs the applets.
    pub busybox: &'a Path,
    /// Becomes `/bin/numatrace`.
    pub numatrace: &'a Path,
    /// Become `/lib/modules/<name>.ko`, loaded in this order by init.
    pub modules: &'a [Module],
    /// `/etc/numatrace-vm.conf`, sourced by init (shell assignments).
    pub config: &'a str,
    /// `/cmd.sh`, run by init with `sh` (absent in `--shell` mode).
    pub command: Option<&'a str>,
    pub files: &'a [GuestFile],
}

/// Shared by init and the systemd guest (which init copies them into):
/// the results sender, the unit that runs the tests under systemd, and
/// what that unit runs.
const VMTEST_FILES: &[&str] = &["send-results", "numatrace-vmtest.service", "run"];

pub(crate) fn build(c: &Contents) -> Result<Vec<u8>> {
    let mut cpio = Cpio::new();
    for dir in [
        "bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "tmp", "root",
    ] {
        cpio.dir(dir)?;
    }
    // The kernel opens /dev/console for init before init can mount devtmpfs.
    cpio.char_device("dev/console", 0o600, 5, 1)?;
    cpio.file("init", 0o755, &read(c.init)?)?;
    let init_dir = c.init.parent().unwrap_or(Path::new("."));
    for name in VMTEST_FILES {
        cpio.file(
            &format!("numatrace-vmtest/{name}"),
            0o644,
            &read(&init_dir.join(name))?,
        )?;
    }
    cpio.file("bin/busybox", 0o755, &read(c.busybox)?)?;
    cpio.symlink("bin/sh", "busybox")?;
    cpio.file("bin/numatrace", 0o755, &read(c.numatrace)?)?;
    for m in c.modules {
        cpio.file(&format!("lib/modules/{}.ko", m.name), 0o644, &m.data)?;
    }
    cpio.file("etc/numatrace-vm.conf", 0o644, c.config.as_bytes())?;
    if let Some(command) = c.command {
        cpio.file("cmd.sh", 0o755, command.as_bytes())?;
    }
    for f in c.files {
        let meta = std::fs::metadata(&f.host)
            .with_context(|| format!("--file {}: cannot read it", f.host.display()))?;
        if !meta.is_file() {
            bail!(
                "--file {}: only regular files are supported",
                f.host.display()
            );
        }
        cpio.file(&f.guest, meta.permissions().mode(), &read(&f.host)?)?;
    }
    Ok(cpio.finish())
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// An in-memory `newc` ("070701") cpio archive, as the kernel's initramfs
/// unpacker reads it (Documentation/driver-api/early-userspace/buffer-format.rst).
#[derive(Default)]
pub(crate) struct Cpio {
    buf: Vec<u8>,
    next_ino: u32,
    dirs: BTreeSet<String>,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

impl Cpio {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A directory and, first, its missing parents.
    pub(crate) fn dir(&mut self, path: &str) -> Result<()> {
        let path = normalize(path)?;
        let mut prefix = String::new();
        for part in path.split('/') {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            if self.dirs.insert(prefix.clone()) {
                self.entry(&prefix.clone(), S_IFDIR | 0o755, (0, 0), b"");
            }
        }
        Ok(())
    }

    pub(crate) fn file(&mut self, path: &str, mode: u32, data: &[u8]) -> Result<()> {
        let path = self.parent_dirs(path)?;
        self.entry(&path, S_IFREG | (mode & 0o7777), (0, 0), data);
        Ok(())
    }

    pub(crate) fn symlink(&mut self, path: &str, target: &str) -> Result<()> {
        let path = self.parent_dirs(path)?;
        self.entry(&path, S_IFLNK | 0o777, (0, 0), target.as_bytes());
        Ok(())
    }

    pub(crate) fn char_device(
        &mut self,
        path: &str,
        mode: u32,
        major: u32,
        minor: u32,
    ) -> Result<()> {
        let path = self.parent_dirs(path)?;
        self.entry(&path, S_IFCHR | (mode & 0o7777), (major, minor), b"");
        Ok(())
    }

    /// The archive with its trailer.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), b"");
        self.buf
    }

    fn parent_dirs(&mut self, path: &str) -> Result<String> {
        let path = normalize(path)?;
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent)?;
        }
        Ok(path)
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        self.next_ino += 1;
        let nlink = if mode & S_IFDIR != 0 { 2 } else { 1 };
        let fields = [
            self.next_ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime: fixed, so identical inputs give identical archives
            data.len() as u32,
            0, // dev major
            0, // dev minor
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0, // check
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }
}

/// `/a/./b/` -> `a/b`; rejects `..` and empty paths.
fn normalize(path: &str) -> Result<String> {
    let mut parts = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::ParentDir | Component::Prefix(_) => {
                bail!("guest path {path:?} must not contain `..`")
            }
        }
    }
    if parts.is_empty() {
        bail!("guest path {path:?} names no file");
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_layout() {
        let mut cpio = Cpio::new();
        cpio.file("/bin/sh", 0o755, b"abc").expect("valid path");
        let bytes = cpio.finish();
        let text = String::from_utf8_lossy(&bytes);
        // "bin" directory first (auto-created), then the file, then the trailer.
        assert!(text.starts_with("070701"));
        let names: Vec<&str> = ["bin\0", "bin/sh\0", "abc", "TRAILER!!!\0"]
            .into_iter()
            .filter(|n| text.contains(n))
            .collect();
        assert_eq!(names.len(), 4);
        assert!(bytes.len().is_multiple_of(4));
        // First header: mode field (2nd) of the directory is 040755.
        assert_eq!(&text[14..22], "000041ed");
    }

    #[test]
    fn guest_file_args() {
        let f: GuestFile = "target/x/work".parse().expect("valid");
        assert_eq!(
            (f.host, f.guest.as_str()),
            (PathBuf::from("target/x/work"), "/bin/work")
        );
        let f: GuestFile = "a.json:/data/b.json".parse().expect("valid");
        assert_eq!(f.guest, "/data/b.json");
        assert!("a:relative".parse::<GuestFile>().is_err());
    }

    #[test]
    fn rejects_escaping_paths() {
        assert!(normalize("/../etc/passwd").is_err());
        assert!(normalize("/").is_err());
        assert_eq!(normalize("/usr/./bin/").expect("valid"), "usr/bin");
    }
}
