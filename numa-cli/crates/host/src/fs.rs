//! Replacing a file atomically, for every file numatrace publishes (the
//! promoter's state file, the node_exporter textfile): readers see the
//! whole old file or the whole new one, never a half-written one.
//!
//! The new contents go to a temporary file beside the target (a rename is
//! only atomic within one filesystem), which is then renamed over it. The
//! temporary name is random and the file is created exclusively without
//! following symlinks: these directories may be shared (`/tmp`, a textfile
//! directory other users write to), and a predictable name would let
//! anyone who can write there plant a symlink or a file that numatrace
//! then writes through.
use std::{
    fmt::Write as _,
    fs,
    io::{self, Read, Write},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

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
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_atomic_named(path, bytes, mode, random_suffix)
}

/// [`write_atomic`] with the source of temporary-name suffixes as a
/// parameter, so tests can make the names predictable.
fn write_atomic_named(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    mut suffix: impl FnMut() -> io::Result<String>,
) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or_else(|| "numatrace".into(), |n| n.to_string_lossy().into_owned());
    let fail = |tmp: Option<&Path>, e: io::Error| {
        let via = tmp.map_or_else(String::new, |t| format!(" (via {})", t.display()));
        io::Error::new(
            e.kind(),
            format!(
                "writing {}{via}: {e}: check that {} exists and this user may create files in it",
                path.display(),
                dir.display()
            ),
        )
    };
    let (tmp, mut file) =
        create_temporary(dir, &name, mode, &mut suffix).map_err(|e| fail(None, e))?;
    let result = (|| {
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        // Only ever the file created above: create_new guarantees it is ours.
        let _ = fs::remove_file(&tmp);
        return Err(fail(Some(&tmp), e));
    }
    // The file is in place whatever happens here; some filesystems refuse
    // to fsync a directory, which costs durability, not correctness.
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Creates a fresh temporary file in `dir`: exclusively (an existing file
/// or symlink at the name is never opened) and without following a
/// symlink. Hidden and ending in `.tmp`, so collectors matching `*.prom`
/// or readers of the final name never pick it up.
fn create_temporary(
    dir: &Path,
    name: &str,
    mode: u32,
    suffix: &mut impl FnMut() -> io::Result<String>,
) -> io::Result<(PathBuf, fs::File)> {
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
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no temporary name to try")))
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
        // A rename that fails (the target is a non-empty directory): the
        // temporary is removed.
        let target = dir.join("busy");
        fs::create_dir_all(target.join("inside")).expect("mkdir");
        let err = write_atomic(&target, b"x", 0o644).expect_err("rename onto a directory");
        assert!(err.to_string().contains("(via "), "{err}");
        assert_eq!(names(&dir), [".x.json.same.tmp", "busy"]);
        let _ = fs::remove_dir_all(dir);
    }
}
