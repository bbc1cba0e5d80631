//! Read-only views of the running kernel's NUMA state: nodes, memory tiers,
//! sysctls and vmstat, from procfs, sysfs and debugfs. Every reader returns
//! `None`/empty rather than failing: a missing file is a fact to report.
//! The `*_at` readers take the root directory the files are under (`/` on
//! the running system, a directory of fake files in tests).
use std::{collections::BTreeMap, fs, path::Path};

use numa_core::topology::{parse_list, parse_vmstat, MemoryTier, Node, Tunables, NUMA_VMSTAT};

fn read_trim(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn read_num<T: std::str::FromStr>(path: impl AsRef<Path>) -> Option<T> {
    read_trim(path)?.parse().ok()
}

/// The root directory of the running system.
pub const ROOT: &str = "/";

pub fn kernel_release() -> String {
    kernel_release_at(Path::new(ROOT))
}

pub fn kernel_release_at(root: &Path) -> String {
    read_trim(root.join("proc/sys/kernel/osrelease")).unwrap_or_else(|| "unknown".into())
}

/// The host's name (`uname -n`, of this UTS namespace); empty if unknown.
pub fn hostname() -> String {
    read_trim(Path::new(ROOT).join("proc/sys/kernel/hostname")).unwrap_or_default()
}

/// This boot's random id (`/proc/sys/kernel/random/boot_id`).
pub fn boot_id() -> Option<String> {
    read_trim(Path::new(ROOT).join("proc/sys/kernel/random/boot_id"))
}

/// `/proc/sys/kernel/numa_balancing`: 0 off, 1 normal, 2 tiering, 3 both.
pub fn numa_balancing() -> Option<u32> {
    numa_balancing_at(Path::new(ROOT))
}

pub fn numa_balancing_at(root: &Path) -> Option<u32> {
    read_num(root.join("proc/sys/kernel/numa_balancing"))
}

/// The kernel lockdown mode (`none`, `integrity`, `confidentiality`): the
/// bracketed word of `/sys/kernel/security/lockdown`; None without
/// securityfs or a kernel without lockdown.
pub fn lockdown_at(root: &Path) -> Option<String> {
    let text = read_trim(root.join("sys/kernel/security/lockdown"))?;
    let start = text.find('[')? + 1;
    let len = text[start..].find(']')?;
    Some(text[start..start + len].to_owned())
}

pub fn nodes() -> Vec<Node> {
    let base = Path::new("/sys/devices/system/node");
    let Some(online) = read_trim(base.join("online")) else {
        return Vec::new();
    };
    parse_list(&online)
        .into_iter()
        .map(|id| {
            let dir = base.join(format!("node{id}"));
            let meminfo = read_trim(dir.join("meminfo")).unwrap_or_default();
            let field = |name: &str| {
                meminfo
                    .lines()
                    .find(|l| l.contains(&format!(" {name}:")))
                    .and_then(|l| l.split_whitespace().rev().nth(1))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            Node {
                id,
                cpus: parse_list(&read_trim(dir.join("cpulist")).unwrap_or_default()),
                mem_total_kb: field("MemTotal"),
                mem_free_kb: field("MemFree"),
                distances: read_trim(dir.join("distance"))
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|d| d.parse().ok())
                    .collect(),
            }
        })
        .collect()
}

pub fn memory_tiers() -> Vec<MemoryTier> {
    memory_tiers_at(Path::new(ROOT))
}

pub fn memory_tiers_at(root: &Path) -> Vec<MemoryTier> {
    let base = root.join("sys/devices/virtual/memory_tiering");
    let Ok(entries) = fs::read_dir(base) else {
        return Vec::new();
    };
    let mut tiers: Vec<MemoryTier> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = name.strip_prefix("memory_tier")?.parse().ok()?;
            let list = read_trim(e.path().join("nodelist"))
                .or_else(|| read_trim(e.path().join("nodes")))
                .unwrap_or_default();
            Some(MemoryTier {
                tier: name,
                id,
                nodes: parse_list(&list),
            })
        })
        .filter(|t| !t.nodes.is_empty())
        .collect();
    tiers.sort_by_key(|t| t.id);
    tiers
}

const SCHED_DEBUG: &str = "/sys/kernel/debug/sched/numa_balancing";

pub fn tunables() -> Tunables {
    let dbg = |name: &str| read_num(Path::new(SCHED_DEBUG).join(name));
    Tunables {
        hot_threshold_ms: read_num("/proc/sys/kernel/numa_balancing_hot_threshold_ms")
            .or_else(|| dbg("hot_threshold_ms")),
        // The fault-count patch renames hot_threshold_ms to this.
        fault_count_threshold: dbg("fault_count_threshold"),
        promote_rate_limit_mbps: read_num(
            "/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps",
        ),
        demotion_enabled: read_trim("/sys/kernel/mm/numa/demotion_enabled")
            .map(|s| s == "true" || s == "1"),
        scan_delay_ms: dbg("scan_delay_ms"),
        scan_period_min_ms: dbg("scan_period_min_ms"),
        scan_period_max_ms: dbg("scan_period_max_ms"),
        scan_size_mb: dbg("scan_size_mb"),
    }
}

/// Folds the per-CPU parts of the kernel's node and zone counters into
/// their totals, so that the next `/proc/vmstat` holds every page counted
/// so far: `pgpromote_*` and `pgdemote_*` are node counters, whose per-CPU
/// parts reach `/proc/vmstat` only once a second or past a threshold, so a
/// reading right after a promotion can miss it (the event counters, such
/// as `numa_hint_faults`, are summed over CPUs when read). Reading
/// `/proc/sys/vm/stat_refresh` does it (root only: otherwise the error,
/// and the reading may lag by those parts).
pub fn fold_vmstat() -> std::io::Result<()> {
    fs::read("/proc/sys/vm/stat_refresh").map(drop)
}

/// `/proc/vmstat` as name -> value.
pub fn vmstat() -> BTreeMap<String, u64> {
    parse_vmstat(&fs::read_to_string("/proc/vmstat").unwrap_or_default())
}

/// Per-node counters node_exporter lacks (it has no per-node vmstat): the
/// tiering ones (`pgpromote_*`, `pgdemote_*`) and any NUMA balancing
/// counter the kernel keeps per node.
pub fn node_vmstat() -> Vec<(u32, Vec<(String, u64)>)> {
    let base = Path::new("/sys/devices/system/node");
    let online = fs::read_to_string(base.join("online")).unwrap_or_default();
    parse_list(&online)
        .into_iter()
        .filter_map(|n| {
            let text = fs::read_to_string(base.join(format!("node{n}/vmstat"))).ok()?;
            let counters: Vec<(String, u64)> = parse_vmstat(&text)
                .into_iter()
                .filter(|(k, _)| {
                    NUMA_VMSTAT.contains(&k.as_str())
                        || k.starts_with("pgpromote_")
                        || k.starts_with("pgdemote_")
                })
                .collect();
            (!counters.is_empty()).then_some((n, counters))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_under_a_root_directory() {
        let root = std::env::temp_dir().join(format!("numatrace-system-{}", std::process::id()));
        let put = |rel: &str, text: &str| {
            let p = root.join(rel);
            fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            fs::write(p, text).expect("write");
        };
        assert_eq!(numa_balancing_at(&root), None);
        assert_eq!(lockdown_at(&root), None);
        assert_eq!(kernel_release_at(&root), "unknown");
        put("proc/sys/kernel/numa_balancing", "2\n");
        put("proc/sys/kernel/osrelease", "6.12.0-test\n");
        put(
            "sys/kernel/security/lockdown",
            "none [integrity] confidentiality\n",
        );
        put(
            "sys/devices/virtual/memory_tiering/memory_tier4/nodelist",
            "0\n",
        );
        put(
            "sys/devices/virtual/memory_tiering/memory_tier22/nodelist",
            "1-2\n",
        );
        assert_eq!(numa_balancing_at(&root), Some(2));
        assert_eq!(kernel_release_at(&root), "6.12.0-test");
        assert_eq!(lockdown_at(&root).as_deref(), Some("integrity"));
        let tiers = memory_tiers_at(&root);
        assert_eq!(tiers.len(), 2);
        assert_eq!((tiers[0].id, tiers[1].nodes.clone()), (4, vec![1, 2]));
        let _ = fs::remove_dir_all(&root);
    }
}
