//! The one way numatrace creates files, and the one way it reads a file
//! from a place other users may write to.
//!
//! Published files (the promoter's state file, the node_exporter textfile,
//! reports) are replaced atomically: readers see the whole old file or the
//! whole new one, never a half-written one. The new contents go to a
//! temporary file beside the target (a rename is only atomic within one
//! filesystem), which is then renamed over it. The temporary name is random
//! and the file is created exclusively without following symlinks: these
//! directories may be shared (`/tmp`, a textfile directory other users
//! write to), and a predictable name would let anyone who can write there
//! plant a symlink or a file that numatrace then writes through.
//!
//! Only a regular file (or nothing) is ever replaced. An output named by
//! the user ([`Output`]) that is something else is written in place when
//! that is what the user means: `-` and this process's standard output by
//! any name (`/dev/stdout`), the null device, a FIFO with a reader (`-o
//! >(gzip > x.gz)`); anything else (another device, a socket, a directory,
//! a FIFO nobody reads) is refused with a message. An output that is the
//! same file as an input is refused before anything is written
//! ([`check_not_input`]). A stop signal while a temporary file exists
//! removes it (see `cleanup`).
//!
//! A stream (a trace being recorded) is created exclusively at its final
//! name, so that whatever was written before a crash is readable there.
//!
//! Reading a shared file never follows a symlink, never blocks (a FIFO or
//! device is refused before a byte is read), and trusts only a regular
//! file of this user (or root) that nobody else may write, up to a size.
use std::{
    ffi::CString,
    fmt::Write as _,
    fs,
    io::{self, Read, Write},
    os::unix::{
        ffi::OsStrExt,
        fs::{MetadataExt, OpenOptionsExt},
        io::{AsRawFd, FromRawFd, OwnedFd},
    },
    path::{Path, PathBuf},
};

mod cleanup;
mod target;

pub use cleanup::stop_signals_handled;
pub(crate) use cleanup::KdamondSlot;
pub use target::{check_not_input, Output};

/// How many random names to try before giving up: a collision of 64
/// random bits means someone is planting files, not bad luck.
const ATTEMPTS: usize = 4;

/// Writes `bytes` to `path` atomically: a new temporary file with a random
/// hidden name in the same directory, created with `mode` (less the
/// umask), written, flushed to disk, then renamed over `path`; the
/// directory is flushed too, so the rename survives a crash.
///
/// On error nothing is left behind, `path` keeps its old contents, and the
/// error names the path and what to check.
///
/// `path` may also be standard output, the null device or a FIFO with a
/// reader, written in place ([`Output`]); anything else that is not a
/// regular file is refused.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut out = Output::create(path, mode)?;
    out.write_all(bytes)?;
    out.commit()
}

/// The directory `path` is in (`.` for a bare name) and its file name,
/// the stem of the temporary names made beside it.
fn dir_and_name(path: &Path) -> (&Path, String) {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or_else(|| "numatrace".into(), |n| n.to_string_lossy().into_owned());
    (dir, name)
}

/// [`write_atomic`] to a regular file with the source of temporary-name
/// suffixes as a parameter, so tests can make the names predictable.
#[cfg(test)]
fn write_atomic_named(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    suffix: impl FnMut() -> io::Result<String>,
) -> io::Result<()> {
    let mut file = AtomicFile::create_named(path, mode, suffix)?;
    match file.write_all(bytes) {
        Ok(()) => file.commit(),
        Err(e) => Err(file.abandon(e)),
    }
}

/// [`write_atomic`] for contents written piece by piece (too big to hold
/// in memory first): the same temporary file, flush and rename, with the
/// rename in [`commit`](Self::commit). Dropped without a commit (an error
/// on the way, a panic), the temporary file is removed and `path` keeps
/// its old contents.
pub struct AtomicFile {
    path: PathBuf,
    tmp: PathBuf,
    file: Option<fs::File>,
    /// The temporary's entry in the list a stop signal removes.
    slot: Option<cleanup::Slot>,
}

impl AtomicFile {
    /// Creates the temporary file beside `path`, with `mode` (less the
    /// umask).
    pub fn create(path: &Path, mode: u32) -> io::Result<AtomicFile> {
        Self::create_named(path, mode, random_suffix)
    }

    fn create_named(
        path: &Path,
        mode: u32,
        mut suffix: impl FnMut() -> io::Result<String>,
    ) -> io::Result<AtomicFile> {
        replaceable(path)?;
        let (dir, name) = dir_and_name(path);
        let (tmp, file, slot) =
            create_temporary(dir, &name, mode, &mut suffix).map_err(|e| write_error(path, e))?;
        Ok(AtomicFile {
            path: path.to_owned(),
            tmp,
            file: Some(file),
            slot,
        })
    }

    /// Flushes the file to disk and renames it over `path`; the directory
    /// is flushed too, so the rename survives a crash.
    pub fn commit(mut self) -> io::Result<()> {
        let Some(file) = self.file.take() else {
            return Err(io::Error::other("committed twice"));
        };
        // Checked again at the last moment: something else may have been
        // put at the name while the file was written.
        let done = file.sync_all().and_then(|()| {
            drop(file);
            replaceable(&self.path)?;
            fs::rename(&self.tmp, &self.path)
        });
        if let Err(e) = done {
            return Err(self.abandon(e));
        }
        self.slot = None;
        // The file is in place whatever happens here; some filesystems
        // refuse to fsync a directory, which costs durability, not
        // correctness.
        if let Ok(d) = fs::File::open(dir_and_name(&self.path).0) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Removes the temporary file and returns `e` naming the path and what
    /// to check.
    fn abandon(&mut self, e: io::Error) -> io::Error {
        self.remove();
        write_error(&self.path, e)
    }

    fn remove(&mut self) {
        self.file = None;
        // Only ever the file created here: create_new guarantees it is ours.
        let _ = fs::remove_file(&self.tmp);
        self.slot = None;
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(f) => f.write(buf),
            None => Err(io::Error::other("written after its commit")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.as_mut().map_or(Ok(()), Write::flush)
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.is_some() {
            self.remove();
        }
    }
}

/// An error writing `path`, naming it and what to check. Not the
/// temporary's random name (it is gone by now): the same cause gives the
/// same message, so a writer retrying every interval can tell a lasting
/// failure from a new one.
fn write_error(path: &Path, e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::InvalidInput {
        // A refusal from `replaceable`: it names the path and the remedy.
        return e;
    }
    io::Error::new(
        e.kind(),
        format!(
            "writing {}: {e}: check that {} exists and this user may create files in it",
            path.display(),
            dir_and_name(path).0.display()
        ),
    )
}

/// Nothing at `path`, or a regular file (by its name or through a
/// symlink, which is replaced, never written through): the only things a
/// rename may replace. Anything else is an [`io::ErrorKind::InvalidInput`]
/// error naming what is there.
fn replaceable(path: &Path) -> io::Result<()> {
    match fs::metadata(path) {
        Ok(m) if !m.file_type().is_file() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is {}, not a regular file: numatrace replaces only regular files; \
                 name a new file, or `-` for standard output",
                path.display(),
                kind(m.mode())
            ),
        )),
        _ => Ok(()),
    }
}

/// Creates a fresh temporary file in `dir`: exclusively (an existing file
/// or symlink at the name is never opened) and without following a
/// symlink. Hidden and ending in `.tmp`, so collectors matching `*.prom`
/// or readers of the final name never pick it up.
/// The temporary is entered in the list a stop signal removes (`None`: a
/// name too long for it).
fn create_temporary(
    dir: &Path,
    name: &str,
    mode: u32,
    suffix: &mut impl FnMut() -> io::Result<String>,
) -> io::Result<(PathBuf, fs::File, Option<cleanup::Slot>)> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let tmp = dir.join(format!(".{name}.{}.tmp", suffix()?));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => {
                let slot = cleanup::Slot::enter(&tmp);
                return Ok((tmp, f, slot));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no temporary name to try")))
}

/// Creates `path` for a stream of writes (a trace being recorded), with
/// `mode` (less the umask): a new file only, never an existing one, and
/// never through a symlink planted at the name. Created at its final name
/// rather than renamed into place at the end: a recording cut short (the
/// machine crashed, the process was killed) is still there and readable up
/// to its last complete record. An existing name is an
/// [`io::ErrorKind::AlreadyExists`] error; see [`create_replacing`].
pub fn create_exclusive(path: &Path, mode: u32) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// [`create_exclusive`] for a caller asked to replace what is at `path`:
/// the stream is created exclusively under a random temporary name beside
/// it and at once renamed over `path`. The rename replaces the name itself
/// (a symlink there is replaced, its target never written), and the file is
/// at its final name from the start, as with [`create_exclusive`].
///
/// Only a regular file (or a symlink to one) is replaced; anything else at
/// `path` is an [`io::ErrorKind::InvalidInput`] error.
pub fn create_replacing(path: &Path, mode: u32) -> io::Result<fs::File> {
    replaceable(path)?;
    let (dir, name) = dir_and_name(path);
    let (tmp, file, _slot) = create_temporary(dir, &name, mode, &mut random_suffix)?;
    if let Err(e) = replaceable(path).and_then(|()| fs::rename(&tmp, path)) {
        // Only ever the file created above: create_new guarantees it is ours.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(file)
}

/// Where a file read with [`read_shared`] lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// A directory the caller named (its environment, its flags).
    Named,
    /// A directory that must be this user's and writable by nobody else
    /// (a per-user directory in a shared `/tmp`): checked too.
    Private,
}

/// Why a shared file was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// Nothing at the path (or no directory for it).
    Missing,
    /// Something is there but was refused or could not be read: why,
    /// naming the path.
    Refused(String),
}

/// Reads a small file from a place other users may write to, trusting only
/// a regular file owned by this user or root, writable by nobody else, of
/// at most `max_bytes`. It is opened without following a symlink and
/// without blocking (`O_NOFOLLOW | O_NONBLOCK`: opening a FIFO returns at
/// once) and its type is checked on the open descriptor before anything is
/// read, so a FIFO, socket or device planted at the name is refused, never
/// read from. What remains is reading at most `max_bytes` of a regular
/// file, which does not wait for anyone.
pub fn read_shared(path: &Path, max_bytes: u64, dir: Dir) -> Result<Vec<u8>, ReadError> {
    read_shared_as(path, max_bytes, dir, euid())
}

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// [`read_shared`] for a reader of user id `euid`.
pub(crate) fn read_shared_as(
    path: &Path,
    max_bytes: u64,
    dir: Dir,
    euid: u32,
) -> Result<Vec<u8>, ReadError> {
    let refuse = |why: String| ReadError::Refused(format!("{}: {why}", path.display()));
    let file = open_shared(path, dir, euid)?;
    let meta = file.metadata().map_err(|e| refuse(e.to_string()))?;
    if !meta.file_type().is_file() {
        return Err(refuse(format!("{}, not a regular file", kind(meta.mode()))));
    }
    trusted_owner(&meta, euid).map_err(refuse)?;
    if meta.len() > max_bytes {
        return Err(refuse(format!(
            "{} bytes, more than the {max_bytes} read here",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(e.to_string()))?;
    if bytes.len() as u64 > max_bytes {
        return Err(refuse(format!("grew past {max_bytes} bytes while read")));
    }
    Ok(bytes)
}

/// Opens `path` for [`read_shared`]; for a private directory, the
/// directory is opened (not following a symlink), checked, and the file
/// opened relative to it, so the directory checked is the one read from.
fn open_shared(path: &Path, dir: Dir, euid: u32) -> Result<fs::File, ReadError> {
    const FLAGS: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    let failed = |at: &Path, e: io::Error| match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => ReadError::Missing,
        Some(libc::ELOOP) => {
            ReadError::Refused(format!("{}: a symbolic link, not followed", at.display()))
        }
        Some(libc::ENXIO) => ReadError::Refused(format!(
            "{}: a socket or device without a reader, not a regular file",
            at.display()
        )),
        _ => ReadError::Refused(format!("{}: {e}", at.display())),
    };
    if dir == Dir::Named {
        return fs::OpenOptions::new()
            .read(true)
            .custom_flags(FLAGS)
            .open(path)
            .map_err(|e| failed(path, e));
    }
    let parent = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let d = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(parent)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTDIR) => ReadError::Refused(format!(
                "{}: not a directory, or a symbolic link (not followed)",
                parent.display()
            )),
            _ => failed(parent, e),
        })?;
    let m = d.metadata().map_err(|e| failed(parent, e))?;
    if m.uid() != euid || m.mode() & 0o022 != 0 {
        return Err(ReadError::Refused(format!(
            "{}: not a private directory of this user (owner uid {}, mode {:o})",
            parent.display(),
            m.uid(),
            m.mode() & 0o7777
        )));
    }
    let name = path
        .file_name()
        .and_then(|n| CString::new(n.as_bytes()).ok())
        .ok_or_else(|| ReadError::Refused(format!("{}: not a file name", path.display())))?;
    // SAFETY: `d` is an open directory and `name` a NUL-terminated string,
    // both alive for the call.
    let fd = unsafe { libc::openat(d.as_raw_fd(), name.as_ptr(), libc::O_RDONLY | FLAGS) };
    if fd < 0 {
        return Err(failed(path, io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just returned by openat and is owned by nothing else.
    Ok(fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Owned by `euid` or root, and writable by neither group nor others:
/// nobody else could have written it.
fn trusted_owner(meta: &fs::Metadata, euid: u32) -> Result<(), String> {
    if meta.uid() != euid && meta.uid() != 0 {
        return Err(format!(
            "owned by uid {}, not by this user ({euid}) or root",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "writable by other users (mode {:o})",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// What a non-regular file is, from its `st_mode`.
fn kind(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFDIR => "a directory",
        libc::S_IFLNK => "a symbolic link",
        _ => "a special file",
    }
}

/// 64 random bits in hex, from the kernel.
fn random_suffix() -> io::Result<String> {
    let mut buf = [0u8; 8];
    fill_random(&mut buf)?;
    Ok(buf.iter().fold(String::with_capacity(16), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    }))
}

fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    loop {
        // SAFETY: the pointer and length describe `buf`, which outlives the call.
        let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n == buf.len() as isize {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            // Kernels before 3.17 lack the system call.
            Some(libc::ENOSYS) => return fs::File::open("/dev/urandom")?.read_exact(buf),
            _ if n >= 0 => {
                return Err(io::Error::other(
                    "getrandom returned fewer bytes than asked",
                ))
            }
            _ => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn tmp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "numatrace-fs-test-{tag}-{}-{}",
            std::process::id(),
            random_suffix().expect("random")
        ));
        fs::create_dir_all(&d).expect("temp dir");
        d
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_with_the_mode_and_leaves_no_temporary() {
        let dir = tmp_dir("mode");
        let path = dir.join("f.prom");
        write_atomic(&path, b"one", 0o600).expect("first");
        write_atomic(&path, b"two", 0o600).expect("second");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        assert_eq!(fs::metadata(&path).expect("meta").mode() & 0o777, 0o600);
        assert_eq!(names(&dir), ["f.prom"]);
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn a_stream_appears_only_when_committed() {
        let dir = tmp_dir("stream");
        let path = dir.join("f.parquet");
        fs::write(&path, b"old").expect("old");
        let mut f = AtomicFile::create(&path, 0o600).expect("create");
        f.write_all(b"ne").expect("write");
        f.write_all(b"w").expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"old", "not before commit");
        f.commit().expect("commit");
        assert_eq!(fs::read(&path).expect("read"), b"new");
        let mut dropped = AtomicFile::create(&path, 0o600).expect("create");
        dropped.write_all(b"half").expect("write");
        drop(dropped);
        assert_eq!(fs::read(&path).expect("read"), b"new", "a dropped stream");
        assert_eq!(names(&dir), ["f.parquet"], "no temporary left");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn temporary_names_are_random() {
        let a = random_suffix().expect("a");
        let b = random_suffix().expect("b");
        assert_eq!(a.len(), 16);
        assert_ne!(a, b);
    }

    #[test]
    fn planted_symlinks_and_files_are_not_written_through() {
        let dir = tmp_dir("plant");
        let victim = dir.join("victim");
        fs::write(&victim, b"precious").expect("victim");
        let path = dir.join("out.prom");
        // The names earlier versions used (fixed, pid-based) and the first
        // two names this write will try: a symlink and a regular file.
        let pid = std::process::id();
        for planted in [
            format!(".out.prom.tmp.{pid}"),
            format!(".out.prom.{pid}.tmp"),
            ".out.prom.a.tmp".to_owned(),
        ] {
            std::os::unix::fs::symlink(&victim, dir.join(planted)).expect("symlink");
        }
        let squatter = dir.join(".out.prom.b.tmp");
        fs::write(&squatter, b"squatter").expect("squatter");
        fs::set_permissions(&squatter, fs::Permissions::from_mode(0o666)).expect("chmod");

        let mut tries = ["a", "b", "c"].into_iter();
        let next = || Ok(tries.next().expect("a name").to_owned());
        write_atomic_named(&path, b"new", 0o644, next).expect("write");
        assert_eq!(fs::read(&path).expect("out"), b"new");
        assert!(!fs::symlink_metadata(&path).expect("meta").is_symlink());
        assert_eq!(fs::read(&victim).expect("victim"), b"precious");
        assert_eq!(fs::read(&squatter).expect("squatter"), b"squatter");
        // The planted entries are left alone, the temporary is gone.
        assert!(fs::symlink_metadata(dir.join(".out.prom.a.tmp")).is_ok());
        assert!(!dir.join(".out.prom.c.tmp").exists());

        // With the public, random names, the fixed-name traps are ignored.
        write_atomic(&path, b"newer", 0o644).expect("write");
        assert_eq!(fs::read(&path).expect("out"), b"newer");
        assert_eq!(fs::read(&victim).expect("victim"), b"precious");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn errors_name_the_path_and_remove_nothing_else() {
        let dir = tmp_dir("err");
        let path = dir.join("x.json");
        // Every name taken: an error, and the planted file is not removed.
        let planted = dir.join(".x.json.same.tmp");
        fs::write(&planted, b"mine").expect("plant");
        let err = write_atomic_named(&path, b"", 0o644, || Ok("same".to_owned()))
            .expect_err("all names taken");
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        assert_eq!(fs::read(&planted).expect("planted"), b"mine");
        assert!(!path.exists());
        // A missing directory: the error says what to check.
        let missing = dir.join("missing/x.json");
        let err = write_atomic(&missing, b"", 0o644).expect_err("no such dir");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(
            err.to_string()
                .contains("exists and this user may create files"),
            "{err}"
        );
        // A directory at the name: refused before a temporary is made.
        let target = dir.join("busy");
        fs::create_dir_all(target.join("inside")).expect("mkdir");
        let err = write_atomic(&target, b"x", 0o644).expect_err("rename onto a directory");
        assert!(
            err.to_string().contains("a directory, not a regular file"),
            "{err}"
        );
        assert_eq!(names(&dir), [".x.json.same.tmp", "busy"]);
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn streams_are_created_exclusively_or_replaced_by_rename() {
        let dir = tmp_dir("stream");
        let victim = dir.join("victim");
        fs::write(&victim, b"precious").expect("victim");
        let link = dir.join("link.trace");
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");
        let dangling = dir.join("dangling.trace");
        std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).expect("symlink");

        // Exclusive: a new file of the mode; never an existing name, file
        // or symlink (dangling or not), which is left as it was.
        let path = dir.join("new.trace");
        let mut f = create_exclusive(&path, 0o600).expect("create");
        f.write_all(b"one").expect("write");
        assert_eq!(fs::metadata(&path).expect("meta").mode() & 0o777, 0o600);
        for taken in [&path, &link, &dangling, &victim] {
            let err = create_exclusive(taken, 0o600).expect_err("taken");
            assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{taken:?}");
        }
        assert_eq!(fs::read(&path).expect("read"), b"one");
        assert_eq!(fs::read(&victim).expect("victim"), b"precious");
        assert!(!dir.join("nowhere").exists());

        // Replacing: the name now holds a new regular file; a symlink there
        // is replaced, its target untouched.
        for name in [&path, &link, &dangling] {
            let mut f = create_replacing(name, 0o600).expect("replace");
            f.write_all(b"two").expect("write");
            let m = fs::symlink_metadata(name).expect("meta");
            assert!(m.is_file(), "{name:?}");
            assert_eq!(m.mode() & 0o777, 0o600);
            assert_eq!(fs::read(name).expect("read"), b"two");
        }
        assert_eq!(fs::read(&victim).expect("victim"), b"precious");
        assert!(!dir.join("nowhere").exists());
        assert_eq!(
            names(&dir),
            ["dangling.trace", "link.trace", "new.trace", "victim"]
        );
        let _ = fs::remove_dir_all(dir);
    }

    fn mkfifo(path: &Path) {
        let c = CString::new(path.as_os_str().as_bytes()).expect("path");
        // SAFETY: a NUL-terminated path alive for the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }

    fn is_fifo(path: &Path) -> bool {
        use std::os::unix::fs::FileTypeExt;
        fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
    }

    /// Nothing but a regular file is ever renamed over: a FIFO (by its
    /// name or through a symlink) without a reader, a directory, are
    /// refused by every writer, and left as they were.
    #[test]
    fn only_regular_files_are_replaced() {
        let dir = tmp_dir("kinds");
        let fifo = dir.join("pipe");
        mkfifo(&fifo);
        let link = dir.join("link");
        std::os::unix::fs::symlink(&fifo, &link).expect("symlink");
        let sub = dir.join("sub");
        fs::create_dir(&sub).expect("mkdir");
        for p in [&fifo, &link] {
            let err = write_atomic(p, b"x", 0o644).expect_err("no reader");
            assert!(err.to_string().contains("a FIFO with no reader"), "{err}");
            let err = create_replacing(p, 0o600).expect_err("a FIFO");
            assert!(
                err.to_string().contains("a FIFO, not a regular file"),
                "{err}"
            );
            let err = AtomicFile::create(p, 0o600).err().expect("a FIFO");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        }
        let err = write_atomic(&sub, b"x", 0o644).expect_err("a directory");
        assert!(err.to_string().contains("a directory"), "{err}");
        assert!(create_replacing(&sub, 0o600).is_err());
        assert!(is_fifo(&fifo));
        assert!(fs::symlink_metadata(&link).expect("link").is_symlink());
        assert_eq!(names(&dir), ["link", "pipe", "sub"]);
        let _ = fs::remove_dir_all(dir);
    }

    /// A FIFO with a reader is written in place, not replaced.
    #[test]
    fn a_fifo_with_a_reader_is_written_in_place() {
        let dir = tmp_dir("fifo");
        let fifo = dir.join("pipe");
        mkfifo(&fifo);
        let reader = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .expect("reader");
        write_atomic(&fifo, b"through", 0o644).expect("write");
        let mut got = Vec::new();
        (&reader).read_to_end(&mut got).expect("read");
        assert_eq!(got, b"through");
        assert!(is_fifo(&fifo));
        assert_eq!(names(&dir), ["pipe"]);
        let _ = fs::remove_dir_all(dir);
    }

    /// The same file by its name, a hard link or a symlink is refused as
    /// an output; another file, or one not there yet, is not.
    #[test]
    fn an_input_is_never_an_output() {
        let dir = tmp_dir("input");
        let input = dir.join("in.trace");
        fs::write(&input, b"trace").expect("input");
        let hard = dir.join("hard");
        fs::hard_link(&input, &hard).expect("hard link");
        let soft = dir.join("soft");
        std::os::unix::fs::symlink(&input, &soft).expect("symlink");
        for out in [&input, &hard, &soft] {
            let err = check_not_input(Some(out), &[&dir.join("none"), &input]).expect_err("same");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            assert!(err.to_string().contains("same file as the input"), "{err}");
        }
        let other = dir.join("other");
        fs::write(&other, b"other").expect("other");
        check_not_input(Some(&other), &[&input]).expect("another file");
        check_not_input(Some(&dir.join("new")), &[&input]).expect("a new file");
        let _ = fs::remove_dir_all(dir);
    }

    /// A temporary is listed for removal on a stop signal while it exists,
    /// and off the list once committed or dropped.
    #[test]
    fn temporaries_are_listed_while_they_exist() {
        let dir = tmp_dir("listed");
        let path = dir.join("out");
        let f = AtomicFile::create(&path, 0o600).expect("create");
        assert!(f.slot.is_some());
        let g = AtomicFile::create(&path, 0o600).expect("create");
        assert!(g.slot.is_some());
        f.commit().expect("commit");
        drop(g);
        assert_eq!(names(&dir), ["out"]);
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn shared_reads_refuse_what_another_user_could_have_written() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tmp_dir("shared");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = dir.join("state.json");
        fs::write(&path, b"{}").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        let me = euid();
        assert_eq!(read_shared_as(&path, 2, Dir::Named, me), Ok(b"{}".to_vec()));
        let refused = |r: Result<Vec<u8>, ReadError>| match r {
            Err(ReadError::Refused(why)) => why,
            other => panic!("{other:?}"),
        };
        // Over the size cap.
        let why = refused(read_shared_as(&path, 1, Dir::Named, me));
        assert!(why.contains("2 bytes, more than the 1 read here"), "{why}");
        // Another reader: the file is not its own (unless it is root's).
        if me != 0 {
            let why = refused(read_shared_as(&path, 2, Dir::Named, me + 1));
            assert!(why.contains("owned by uid"), "{why}");
        }
        // A private directory: this user's and writable by nobody else; a
        // reader of another user id finds it is not theirs.
        assert!(read_shared_as(&path, 2, Dir::Private, me).is_ok());
        let why = refused(read_shared_as(&path, 2, Dir::Private, me + 1));
        assert!(
            why.contains("not a private directory of this user"),
            "{why}"
        );
        // Nothing there, or no directory: missing, not refused.
        assert_eq!(
            read_shared_as(&dir.join("none"), 2, Dir::Named, me),
            Err(ReadError::Missing)
        );
        assert_eq!(
            read_shared_as(&dir.join("none/x"), 2, Dir::Private, me),
            Err(ReadError::Missing)
        );
        let _ = fs::remove_dir_all(dir);
    }
}
