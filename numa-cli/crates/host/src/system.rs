//! Read-only views of the running kernel's NUMA state: nodes, memory tiers,
//! sysctls and vmstat, from procfs, sysfs and debugfs. Every reader returns
//! `None`/empty rather than failing: a missing file is a fact to report.
use std::{collections::BTreeMap, fs, path::Path};

use numa_core::topology::{parse_list, parse_vmstat, MemoryTier, Node, Tunables, NUMA_VMSTAT};

fn read_trim(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn read_num<T: std::str::FromStr>(path: impl AsRef<Path>) -> Option<T> {
    read_trim(path)?.parse().ok()
}

pub fn kernel_release() -> String {
    read_trim("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into())
}

/// `/proc/sys/kernel/numa_balancing`: 0 off, 1 normal, 2 tiering, 3 both.
pub fn numa_balancing() -> Option<u32> {
    read_num("/proc/sys/kernel/numa_balancing")
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
    let base = Path::new("/sys/devices/virtual/memory_tiering");
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
