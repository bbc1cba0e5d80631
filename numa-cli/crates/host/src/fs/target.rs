//! Where an output named by the user goes, decided from what is at its
//! name before a byte is written.
use std::{
    fs,
    io::{self, Write},
    os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt},
    path::Path,
};

use super::{kind, AtomicFile};

/// An output file: a regular file replaced atomically ([`AtomicFile`]),
/// or, written in place, standard output (`-`, or its file by any name
/// such as `/dev/stdout`), the null device or a FIFO with a reader.
/// Anything else at the name is refused by [`Output::create`].
pub struct Output(Sink);

enum Sink {
    Replace(AtomicFile),
    InPlace(fs::File),
    Stdout(io::Stdout),
}

impl Output {
    /// The output for `path` (a new or replaced file gets `mode`, less the
    /// umask).
    pub fn create(path: &Path, mode: u32) -> io::Result<Output> {
        if path == Path::new("-") {
            return Ok(Output(Sink::Stdout(io::stdout())));
        }
        let meta = match fs::metadata(path) {
            Ok(m) => m,
            // Nothing there (or a dangling symlink, which is replaced).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return AtomicFile::create(path, mode).map(|f| Output(Sink::Replace(f)))
            }
            Err(e) => return Err(named(path, e)),
        };
        if stdout_identity().is_some_and(|id| id == (meta.dev(), meta.ino())) {
            return Ok(Output(Sink::Stdout(io::stdout())));
        }
        let t = meta.file_type();
        if t.is_file() {
            return AtomicFile::create(path, mode).map(|f| Output(Sink::Replace(f)));
        }
        if (t.is_char_device() && meta.rdev() == null_device()) || t.is_fifo() {
            return open_in_place(path, &meta).map(|f| Output(Sink::InPlace(f)));
        }
        Err(refused(path, &meta))
    }

    /// Finishes the output: a replaced file is flushed to disk and renamed
    /// into place; a stream is flushed.
    pub fn commit(self) -> io::Result<()> {
        match self.0 {
            Sink::Replace(f) => f.commit(),
            Sink::InPlace(mut f) => f.flush(),
            Sink::Stdout(mut s) => s.flush(),
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.0 {
            Sink::Replace(f) => f.write(buf),
            Sink::InPlace(f) => f.write(buf),
            Sink::Stdout(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.0 {
            Sink::Replace(f) => f.flush(),
            Sink::InPlace(f) => f.flush(),
            Sink::Stdout(s) => s.flush(),
        }
    }
}

/// Refuses an output that is the same file (device and inode, so by any
/// path, symlink or hard link) as one of `inputs`: writing it would
/// replace what is being read. `None` is standard output. An input that
/// cannot be examined is left to its reader to report.
pub fn check_not_input(output: Option<&Path>, inputs: &[&Path]) -> io::Result<()> {
    let id = match output {
        None => stdout_identity(),
        Some(p) if p == Path::new("-") => stdout_identity(),
        Some(p) => fs::metadata(p).ok().map(|m| (m.dev(), m.ino())),
    };
    let Some(id) = id else { return Ok(()) };
    for input in inputs {
        if fs::metadata(input).is_ok_and(|m| (m.dev(), m.ino()) == id) {
            let out = output.map_or_else(|| "standard output".into(), |p| p.display().to_string());
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{out} is the same file as the input {}: writing it would replace the \
                     trace being read; name another output",
                    input.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Device and inode of this process's standard output, if it is open.
fn stdout_identity() -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd 1 and a pointer to a stat alive for the call.
    (unsafe { libc::fstat(1, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// The null device's number (1, 3 on Linux).
fn null_device() -> u64 {
    libc::makedev(1, 3)
}

/// Opens the null device or a FIFO for writing, without blocking (a FIFO
/// without a reader is refused, not waited on) and checking that the file
/// opened is still the kind examined.
fn open_in_place(path: &Path, examined: &fs::Metadata) -> io::Result<fs::File> {
    let f = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is a FIFO with no reader: start its reader first, or name a file",
                    path.display()
                ),
            ),
            _ => named(path, e),
        })?;
    let m = f.metadata().map_err(|e| named(path, e))?;
    if m.file_type() != examined.file_type() || m.rdev() != examined.rdev() {
        return Err(refused(path, &m));
    }
    // Blocking from here on: a full pipe waits for its reader.
    // SAFETY: fcntl on a descriptor `f` owns, alive for the calls.
    let ok = unsafe {
        let flags = libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&f), libc::F_GETFL);
        flags >= 0
            && libc::fcntl(
                std::os::fd::AsRawFd::as_raw_fd(&f),
                libc::F_SETFL,
                flags & !libc::O_NONBLOCK,
            ) == 0
    };
    if !ok {
        return Err(named(path, io::Error::last_os_error()));
    }
    Ok(f)
}

fn refused(path: &Path, m: &fs::Metadata) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is {}, not a regular file: numatrace writes only a regular file (replaced), \
             standard output (`-`), the null device or a FIFO with a reader; name a new file",
            path.display(),
            kind(m.mode())
        ),
    )
}

fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("writing {}: {e}", path.display()))
}
