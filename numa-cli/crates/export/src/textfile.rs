//! Textfile mode: the classic Prometheus text format written for
//! node_exporter's textfile collector, replaced atomically (write a
//! temporary file in the same directory, fsync, rename) so the collector
//! never reads a half-written file.
use std::{
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};

/// The temporary name: hidden and not ending in `.prom`, so the collector
/// (which reads `*.prom`) never picks it up.
fn temporary(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "numatrace".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.tmp.{}", std::process::id()))
}

pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    let tmp = temporary(path);
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| {
        format!(
            "writing the textfile {} (via {}): is the directory writable? \
             (node_exporter reads --collector.textfile.directory)",
            path.display(),
            tmp.display()
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
        write_atomic(&path, b"a 1\n").expect("first write");
        write_atomic(&path, b"a 2\n").expect("second write");
        assert_eq!(std::fs::read(&path).expect("read"), b"a 2\n");
        let names: Vec<String> = std::fs::read_dir(&dir)
            .expect("ls")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["numatrace.prom".to_owned()]);
        let err = write_atomic(&dir.join("missing/x.prom"), b"").expect_err("no such dir");
        assert!(format!("{err:#}").contains("directory writable"), "{err:#}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
