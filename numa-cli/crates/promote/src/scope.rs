//! Which processes the promoter may touch: `--pid` (a fixed set),
//! `--cgroup` (every process in the cgroup or below it, including ones
//! started later) or `--all`. Checked when a fault is queued *and* again
//! right before each move_pages call.
use std::{
    collections::{BTreeMap, HashMap},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use numa_host::promoter_state::pid_start_ticks;

#[derive(Debug, Clone)]
pub enum Scope {
    /// pid -> the start time of its process when the scope was made
    /// (field 22 of /proc/PID/stat): the process, not the number, is in
    /// scope, and a later process with the same pid is not.
    Pids(BTreeMap<u32, u64>),
    Cgroup {
        /// Inode of the cgroup directory = the BPF cgroup id.
        id: u64,
        /// Path below the cgroup2 mount, e.g. `/work/jobs`.
        rel: String,
        dir: PathBuf,
        /// tgid -> member, cached for queueing (not for moving).
        cache: HashMap<u32, bool>,
    },
    All,
}

/// Where cgroup2 is mounted (the rel path is computed against it).
const CGROUP2_ROOT: &str = "/sys/fs/cgroup";

impl Scope {
    /// The processes these pids name now.
    pub fn pids(pids: &[u32]) -> Result<Scope> {
        let mut pinned = BTreeMap::new();
        for &pid in pids {
            let Some(ticks) = pid_start_ticks(pid) else {
                bail!(
                    "--pid {pid}: no such process (it may have exited); check with `ps -p {pid}`"
                );
            };
            pinned.insert(pid, ticks);
        }
        Ok(Scope::Pids(pinned))
    }

    pub fn cgroup(dir: &Path) -> Result<Scope> {
        let meta = std::fs::metadata(dir).with_context(|| {
            format!(
                "--cgroup {}: not a cgroup v2 directory (try /sys/fs/cgroup/...)",
                dir.display()
            )
        })?;
        let canon = dir
            .canonicalize()
            .with_context(|| format!("--cgroup {}", dir.display()))?;
        let rel = canon
            .strip_prefix(CGROUP2_ROOT)
            .with_context(|| {
                format!(
                    "--cgroup {}: not below the cgroup2 mount {CGROUP2_ROOT}",
                    dir.display()
                )
            })?
            .to_string_lossy()
            .into_owned();
        Ok(Scope::Cgroup {
            id: meta.ino(),
            rel: format!("/{}", rel.trim_start_matches('/')),
            dir: canon,
            cache: HashMap::new(),
        })
    }

    pub fn describe(&self) -> String {
        match self {
            Scope::Pids(p) => format!(
                "--pid {}",
                p.keys().map(u32::to_string).collect::<Vec<_>>().join(",")
            ),
            Scope::Cgroup { dir, .. } => format!("--cgroup {}", dir.display()),
            Scope::All => "--all".into(),
        }
    }

    /// For a fault: in scope? (`cgroup_id` is the faulting task's.)
    pub fn admits(&mut self, tgid: u32, cgroup_id: u64) -> bool {
        match self {
            Scope::Pids(p) => p.contains_key(&tgid),
            Scope::All => true,
            Scope::Cgroup { id, rel, cache, .. } => {
                if cgroup_id == *id {
                    return true;
                }
                let rel = rel.clone();
                *cache
                    .entry(tgid)
                    .or_insert_with(|| proc_in_cgroup(tgid, &rel))
            }
        }
    }

    /// Is `tgid` one of a `--pid` scope's processes?
    pub fn pinned(&self, tgid: u32) -> bool {
        matches!(self, Scope::Pids(p) if p.contains_key(&tgid))
    }

    /// Right before a move: still in scope? Reads /proc for cgroups (a
    /// process may have been moved out since its fault). For `--pid`,
    /// whether the pid is still its process is the mover's to check.
    pub fn allows_now(&self, tgid: u32) -> bool {
        match self {
            Scope::Pids(p) => p.contains_key(&tgid),
            Scope::All => true,
            Scope::Cgroup { rel, .. } => proc_in_cgroup(tgid, rel),
        }
    }
}

fn proc_in_cgroup(tgid: u32, rel: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{tgid}/cgroup"))
        .is_ok_and(|text| cgroup_file_in(&text, rel))
}

/// `/proc/PID/cgroup` (v2 line `0::/path`) is `rel` or below it.
pub fn cgroup_file_in(text: &str, rel: &str) -> bool {
    text.lines()
        .filter_map(|l| l.strip_prefix("0::"))
        .any(|path| {
            let rel = rel.trim_end_matches('/');
            rel.is_empty()
                || path == rel
                || path
                    .strip_prefix(rel)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
}

/// CAP_SYS_NICE (bit 23) in the `CapEff:` line of /proc/self/status.
pub fn has_cap_sys_nice(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 23) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_membership_follows_children() {
        assert!(cgroup_file_in("0::/jobs/a\n", "/jobs"));
        assert!(cgroup_file_in("0::/jobs\n", "/jobs/"));
        assert!(!cgroup_file_in("0::/jobsx\n", "/jobs"));
        assert!(!cgroup_file_in("0::/other\n", "/jobs"));
        assert!(cgroup_file_in("0::/\n", "/"));
    }

    #[test]
    fn pid_scope_is_exact() {
        let mut s = Scope::Pids([(10, 1), (20, 2)].into_iter().collect());
        assert!(s.admits(10, 0));
        assert!(!s.admits(11, 0));
        assert!(s.allows_now(20));
        assert!(!s.allows_now(21));
        assert_eq!(s.describe(), "--pid 10,20");
    }

    #[test]
    fn cap_sys_nice_bit() {
        assert!(has_cap_sys_nice("Name:\tx\nCapEff:\t000001ffffffffff\n"));
        assert!(!has_cap_sys_nice("CapEff:\t0000000000000000\n"));
        assert!(has_cap_sys_nice("CapEff:\t0000000000800000\n"));
        assert!(!has_cap_sys_nice("no caps line"));
    }
}
