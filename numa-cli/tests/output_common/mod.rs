//! What the output tests share: the recorded trace they write from, a
//! scratch directory removed after the test, and its listing.
use std::path::{Path, PathBuf};

pub(crate) const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/testdata/hot-chunks-6.12.trace"
);

/// A fresh directory under the system's temporary one, named by `tag` and
/// the test process, removed when dropped.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        let d =
            std::env::temp_dir().join(format!("numatrace-outputs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The names in `dir`, sorted.
pub(crate) fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
