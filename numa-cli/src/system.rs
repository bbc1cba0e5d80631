//! Read-only views of the running kernel's NUMA state: nodes, memory tiers,
//! sysctls and vmstat, from procfs, sysfs and debugfs. Every reader returns
//! `None`/empty rather than failing: a missing file is a fact to report.
use std::{collections::BTreeMap, fs, path::Path};

use serde::Serialize;

fn read_trim(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn read_num<T: std::str::FromStr>(path: impl AsRef<Path>) -> Option<T> {
    read_trim(path)?.parse().ok()
}

/// Parses a kernel cpulist/nodelist such as `0-3,8,10-11`.
pub fn parse_list(list: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(n) = part.parse() {
                    out.push(n);
                }
            }
        }
    }
    out
}

pub fn kernel_release() -> String {
    read_trim("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into())
}

/// `(major, minor)` of a release string such as `6.12.117+deb12-amd64`.
pub fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// `/proc/sys/kernel/numa_balancing`: 0 off, 1 normal, 2 tiering, 3 both.
pub fn numa_balancing() -> Option<u32> {
    read_num("/proc/sys/kernel/numa_balancing")
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Node {
    pub id: u32,
    pub cpus: Vec<u32>,
    pub mem_total_kb: u64,
    pub mem_free_kb: u64,
    /// Distances to every node, in node order (from `distance`).
    pub distances: Vec<u32>,
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

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct MemoryTier {
    /// Directory name, e.g. `memory_tier4`.
    pub tier: String,
    /// The number in the name: lower is faster (the top tier has the lowest).
    pub id: u32,
    pub nodes: Vec<u32>,
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

/// Tunables of NUMA balancing and tiering, each `None` when not readable.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Tunables {
    pub hot_threshold_ms: Option<u64>,
    pub promote_rate_limit_mbps: Option<u64>,
    pub demotion_enabled: Option<bool>,
    pub scan_delay_ms: Option<u64>,
    pub scan_period_min_ms: Option<u64>,
    pub scan_period_max_ms: Option<u64>,
    pub scan_size_mb: Option<u64>,
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

pub fn parse_vmstat(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_owned(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The vmstat counters that describe NUMA balancing and tiering.
pub const NUMA_VMSTAT: &[&str] = &[
    "numa_pte_updates",
    "numa_huge_pte_updates",
    "numa_hint_faults",
    "numa_hint_faults_local",
    "numa_pages_migrated",
    "pgpromote_success",
    "pgpromote_candidate",
    "pgpromote_candidate_nrl",
    "pgdemote_kswapd",
    "pgdemote_direct",
    "pgdemote_khugepaged",
    "pgmigrate_success",
    "pgmigrate_fail",
];

/// `after - before` for the NUMA counters present in both snapshots.
pub fn vmstat_delta(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    NUMA_VMSTAT
        .iter()
        .filter_map(|k| {
            let (a, b) = (after.get(*k)?, before.get(*k)?);
            Some(((*k).to_owned(), a.saturating_sub(*b)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(parse_list("0-2,5,7-8\n"), vec![0, 1, 2, 5, 7, 8]);
        assert_eq!(parse_list(""), Vec::<u32>::new());
        assert_eq!(parse_list("1"), vec![1]);
    }

    #[test]
    fn releases() {
        assert_eq!(parse_release("6.12.117+deb12-amd64"), Some((6, 12)));
        assert_eq!(parse_release("6.1.0-57-amd64"), Some((6, 1)));
        assert_eq!(parse_release("garbage"), None);
    }

    #[test]
    fn vmstat_deltas() {
        let a = parse_vmstat("numa_hint_faults 10\npgpromote_success 3\nnr_free_pages 9\n");
        let b = parse_vmstat("numa_hint_faults 25\npgpromote_success 3\nnr_free_pages 1\n");
        let d = vmstat_delta(&a, &b);
        assert_eq!(d.get("numa_hint_faults"), Some(&15));
        assert_eq!(d.get("pgpromote_success"), Some(&0));
        assert!(!d.contains_key("nr_free_pages"));
    }
}
