//! The kernel's NUMA topology and counters as data: nodes, memory tiers,
//! tunables, vmstat, and the pure parsers of their sysfs/procfs text (the
//! host crate reads the files).
use std::collections::BTreeMap;

use serde::Serialize;

/// Node ids are below this (the kernel's `MAX_NUMNODES` at its largest,
/// `CONFIG_NODES_SHIFT=10`); a record or header naming another node is
/// corrupt or crafted, and refused before anything is kept per node.
pub const MAX_NUMNODES: u32 = 1024;

/// Ids a cpulist or nodelist can hold (the kernel's largest NR_CPUS is
/// 8192): a list naming more is corrupt, and its rest is ignored rather
/// than expanded into memory.
const MAX_LIST_IDS: u32 = 1 << 16;

/// Parses a kernel cpulist/nodelist such as `0-3,8,10-11`; ids at or above
/// [`MAX_LIST_IDS`] are dropped.
pub fn parse_list(list: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b.min(MAX_LIST_IDS - 1));
                }
            }
            None => {
                if let Ok(n) = part.parse::<u32>() {
                    if n < MAX_LIST_IDS {
                        out.push(n);
                    }
                }
            }
        }
    }
    out
}

/// `(major, minor)` of a release string such as `6.12.117+deb12-amd64`.
pub fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
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

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct MemoryTier {
    /// Directory name, e.g. `memory_tier4`.
    pub tier: String,
    /// The number in the name: lower is faster (the top tier has the lowest).
    pub id: u32,
    pub nodes: Vec<u32>,
}

/// Tunables of NUMA balancing and tiering, each `None` when not readable.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Tunables {
    pub hot_threshold_ms: Option<u64>,
    /// The fault-count RFC's threshold (hint faults); absent on mainline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_count_threshold: Option<u64>,
    pub promote_rate_limit_mbps: Option<u64>,
    pub demotion_enabled: Option<bool>,
    pub scan_delay_ms: Option<u64>,
    pub scan_period_min_ms: Option<u64>,
    pub scan_period_max_ms: Option<u64>,
    pub scan_size_mb: Option<u64>,
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

#[cfg(test)]
mod list_tests {
    use super::*;

    #[test]
    fn a_huge_range_is_cut_not_expanded() {
        assert_eq!(parse_list("0-3,8,10-11"), vec![0, 1, 2, 3, 8, 10, 11]);
        let ids = parse_list("0-3,10-1000000000,4000000000");
        assert_eq!(ids.len(), 4 + (MAX_LIST_IDS as usize - 10));
        assert_eq!(ids.last(), Some(&(MAX_LIST_IDS - 1)));
    }
}
