//! The trace file a run records into. A trace holds kernel addresses (the
//! header's kernel parameters) and other processes' names and addresses,
//! so it is readable by its owner only; it is created exclusively, never
//! through a symlink and never over an existing file unless asked
//! ([`numa_host::fs::create_exclusive`], `create_replacing`), and at its
//! final name: a recording cut short is readable up to its last record.
use std::{
    fs::File,
    io::{BufWriter, ErrorKind},
    path::Path,
};

use anyhow::{anyhow, Context, Result};
use numa_core::trace;
use numa_host::fs;

/// Owner read/write only.
const TRACE_MODE: u32 = 0o600;

/// Where and how a run records its trace.
#[derive(Debug, Clone, Copy)]
pub struct Recording<'a> {
    pub path: &'a Path,
    pub header: &'a trace::Header,
    /// Replace a file already at `path` (else that is an error).
    pub overwrite: bool,
}

impl Recording<'_> {
    /// The trace writer, its header written.
    pub(crate) fn create(&self) -> Result<trace::Writer<BufWriter<File>>> {
        let path = self.path;
        let created = if self.overwrite {
            fs::create_replacing(path, TRACE_MODE)
        } else {
            fs::create_exclusive(path, TRACE_MODE)
        };
        let file = created.map_err(|e| match e.kind() {
            ErrorKind::AlreadyExists => exists(path),
            _ => anyhow!(e).context(format!(
                "creating trace file {}: check that its directory exists and this user may \
                 create files in it",
                path.display()
            )),
        })?;
        trace::Writer::new(BufWriter::with_capacity(1 << 20, file), self.header)
            .with_context(|| format!("writing trace file {}", path.display()))
    }
}

/// Refuses, before a run starts (attaching takes seconds), a trace name
/// already taken when `overwrite` is not set. Only a courtesy: the
/// exclusive create when the run starts is what guarantees it.
pub fn check_new(path: &Path, overwrite: bool) -> Result<()> {
    if !overwrite && path.symlink_metadata().is_ok() {
        return Err(exists(path));
    }
    Ok(())
}

fn exists(path: &Path) -> anyhow::Error {
    anyhow!(
        "trace file {} already exists: record to another name, remove it, \
         or pass --overwrite to replace it",
        path.display()
    )
}

/// Writes the footer and flushes the trace to disk.
pub(crate) fn finish(
    w: trace::Writer<BufWriter<File>>,
    ended_mono_ns: u64,
    reason: &str,
) -> Result<()> {
    let out = w.finish(ended_mono_ns, reason)?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::{os::unix::fs::MetadataExt, path::PathBuf};

    use numa_core::{
        decode::{fixtures::fault, Event},
        trace::fixtures::header,
    };
    use numa_ebpf_common::Outcome;

    use super::*;
    use crate::Source;

    struct TempDir(PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A directory with a three-fault trace `in.trace`.
    fn with_input(tag: &str) -> (TempDir, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "numatrace-record-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut w = trace::Writer::new(Vec::new(), &header()).expect("writer");
        for i in 1..=3 {
            w.event(&Event::Fault(fault(i, i, 10, Outcome::PromoteHot)))
                .expect("event");
        }
        let input = dir.join("in.trace");
        std::fs::write(&input, w.finish(1, "duration").expect("finish")).expect("write");
        (TempDir(dir), input)
    }

    fn record(input: &Path, out: &Path, overwrite: bool) -> Result<()> {
        let h = header();
        let r = Recording {
            path: out,
            header: &h,
            overwrite,
        };
        Source::File(input.to_owned()).run_recorded(None, Some(r), &mut [])?;
        Ok(())
    }

    fn events_in(path: &Path) -> usize {
        trace::Reader::open(path)
            .expect("reader")
            .filter(|i| matches!(i, Ok(trace::Item::Event(_))))
            .count()
    }

    #[test]
    fn a_trace_is_private_complete_and_never_overwrites() {
        let (dir, input) = with_input("new");
        let out = dir.0.join("out.trace");
        record(&input, &out, false).expect("record");
        assert_eq!(std::fs::metadata(&out).expect("meta").mode() & 0o777, 0o600);
        assert_eq!(events_in(&out), 3);
        // Again to the same name: refused with the remedy, the file intact.
        let before = std::fs::read(&out).expect("read");
        let err = format!("{:#}", record(&input, &out, false).expect_err("exists"));
        assert!(err.contains("already exists"), "{err}");
        assert!(err.contains("--overwrite"), "{err}");
        assert_eq!(std::fs::read(&out).expect("read"), before);
        let early = format!("{:#}", check_new(&out, false).expect_err("exists"));
        assert_eq!(early, err);
        check_new(&out, true).expect("asked to overwrite");
        check_new(&dir.0.join("other.trace"), false).expect("a new name");
        // Asked to: replaced.
        record(&input, &out, true).expect("overwrite");
        assert_eq!(events_in(&out), 3);
        // A directory that is not there: the error says what to check.
        let err = format!(
            "{:#}",
            record(&input, &dir.0.join("no/x.trace"), false).unwrap_err()
        );
        assert!(err.contains("check that its directory exists"), "{err}");
    }

    #[test]
    fn a_symlink_at_the_name_is_never_written_through() {
        let (dir, input) = with_input("link");
        let victim = dir.0.join("victim");
        std::fs::write(&victim, b"precious").expect("victim");
        let link = dir.0.join("link.trace");
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");
        let err = format!("{:#}", record(&input, &link, false).expect_err("a symlink"));
        assert!(err.contains("already exists"), "{err}");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
        // --overwrite replaces the link itself.
        record(&input, &link, true).expect("overwrite");
        assert!(std::fs::symlink_metadata(&link).expect("meta").is_file());
        assert_eq!(events_in(&link), 3);
        assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
    }
}
