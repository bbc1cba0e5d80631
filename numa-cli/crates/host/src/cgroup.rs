//! Cgroup v2 ids to paths: a cgroup's id, as BPF reports it, is its
//! directory's inode number in the cgroup2 filesystem, so the path of an
//! id is found by walking that filesystem.
use std::{
    collections::{BTreeMap, BTreeSet},
    os::unix::fs::MetadataExt,
    path::Path,
};

use numa_core::model::cgroups::PathLookup;

/// How the cgroup ids of a run are named: by this host's cgroup tree when
/// the run is this boot's (`recorded_boot`, a trace header's `boot_id`;
/// a live run's is this boot's), else not at all, as an id of another
/// boot may name another cgroup here.
pub fn lookup(recorded_boot: Option<&str>) -> PathLookup {
    let this = crate::system::boot_id();
    if recorded_boot.is_some() && recorded_boot == this.as_deref() {
        Box::new(paths)
    } else {
        Box::new(|_| BTreeMap::new())
    }
}

/// Directories looked at, at most, in one walk: a host with more cgroups
/// than this leaves the rest's ids without a path rather than making a
/// report wait on them.
pub const MAX_WALK: usize = 1 << 16;

/// The paths (below the cgroup2 mount, `/` for its root) of the cgroups
/// among `ids` that exist now; ids without one are left out.
pub fn paths(ids: &BTreeSet<u64>) -> BTreeMap<u64, String> {
    let Some(root) = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|mi| numa_core::procfs::cgroup2_mount(&mi))
    else {
        return BTreeMap::new();
    };
    paths_below(&root, ids, MAX_WALK)
}

/// [`paths`] in the hierarchy mounted at `root`, looking at no more than
/// `max_dirs` directories (breadth first, so shallow cgroups are found
/// first).
pub fn paths_below(root: &Path, ids: &BTreeSet<u64>, max_dirs: usize) -> BTreeMap<u64, String> {
    let mut found = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([(root.to_path_buf(), String::from("/"))]);
    let mut seen = 0;
    while let Some((dir, rel)) = queue.pop_front() {
        if found.len() == ids.len() || seen >= max_dirs {
            break;
        }
        seen += 1;
        let Ok(meta) = std::fs::symlink_metadata(&dir) else {
            continue;
        };
        if ids.contains(&meta.ino()) {
            found.insert(meta.ino(), rel.clone());
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let name = e.file_name().to_string_lossy().into_owned();
                let child = if rel == "/" {
                    format!("/{name}")
                } else {
                    format!("{rel}/{name}")
                };
                queue.push_back((e.path(), child));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inode numbers of a plain directory tree stand in for cgroup ids.
    #[test]
    fn ids_are_found_by_their_directorys_inode_and_the_walk_is_bounded() {
        let root = std::env::temp_dir().join(format!("numatrace-cg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["a/b", "a/c", "d"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        let ino = |d: &str| std::fs::metadata(root.join(d)).expect("stat").ino();
        let ids: BTreeSet<u64> = [ino("a/c"), ino("d"), ino(""), 1].into();
        let got = paths_below(&root, &ids, MAX_WALK);
        let want: BTreeMap<u64, String> = [
            (ino(""), "/".to_owned()),
            (ino("a/c"), "/a/c".to_owned()),
            (ino("d"), "/d".to_owned()),
        ]
        .into();
        assert_eq!(got, want);
        // Two directories looked at: the root and one of its children.
        assert!(paths_below(&root, &ids, 2).len() <= 2);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A trace of another boot (or of none recorded) names no cgroup.
    #[test]
    fn ids_of_another_boot_are_not_looked_up() {
        let ids: BTreeSet<u64> = [1].into();
        assert!(lookup(Some("another boot"))(&ids).is_empty());
        assert!(lookup(None)(&ids).is_empty());
    }
}
