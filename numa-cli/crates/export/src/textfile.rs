//! Textfile mode: the classic Prometheus text format written for
//! node_exporter's textfile collector, replaced atomically (see
//! [`numa_host::fs::write_atomic`]) so the collector never reads a
//! half-written file.
use std::path::Path;

use anyhow::{Context, Result};

/// Readable by a node_exporter running as another user.
const MODE: u32 = 0o644;

/// Replaces the textfile at `path` with `contents`. The temporary name is
/// hidden and does not end in `.prom`, so the collector (which reads
/// `*.prom`) never picks it up.
pub fn write(path: &Path, contents: &[u8]) -> Result<()> {
    numa_host::fs::write_atomic(path, contents, MODE).with_context(|| {
        format!(
            "writing the textfile {}: is the directory writable? \
             (node_exporter reads --collector.textfile.directory)",
            path.display(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_atomically_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("numatrace-textfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("numatrace.prom");
        write(&path, b"a 1\n").expect("first write");
        write(&path, b"a 2\n").expect("second write");
        assert_eq!(std::fs::read(&path).expect("read"), b"a 2\n");
        let names: Vec<String> = std::fs::read_dir(&dir)
            .expect("ls")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["numatrace.prom".to_owned()]);
        let err = write(&dir.join("missing/x.prom"), b"").expect_err("no such dir");
        assert!(format!("{err:#}").contains("directory writable"), "{err:#}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A write that keeps failing says the same thing each time (no
    /// temporary's random name in it), so the writer warns once per cause.
    #[test]
    fn a_lasting_failure_gives_the_same_message_each_time() {
        let dir =
            std::env::temp_dir().join(format!("numatrace-textfile-same-{}", std::process::id()));
        let path = dir.join("numatrace.prom");
        std::fs::create_dir_all(path.join("inside")).expect("mkdir");
        let first = format!("{:#}", write(&path, b"a 1\n").expect_err("a directory"));
        let second = format!("{:#}", write(&path, b"a 1\n").expect_err("a directory"));
        assert_eq!(first, second);
        assert!(first.contains("numatrace.prom"), "{first}");
        let names: Vec<_> = std::fs::read_dir(&dir).expect("ls").collect();
        assert_eq!(names.len(), 1, "temporaries left behind");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
