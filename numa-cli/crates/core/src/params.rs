//! Kernel-specific values the BPF programs need, as resolved by userspace
//! at load time (the probe crate reads them from kallsyms, BTF and tracefs;
//! a trace header carries them): addresses of kernel variables, struct
//! field offsets, the cpupid mask, top-tier nodes, tracepoint field offsets.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::topology::{MemoryTier, Node};

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct KernelParams {
    /// Address of sysctl_numa_balancing_mode (0: unknown, use the mode at load).
    pub sym_nb_mode: u64,
    pub sym_hot_threshold: u64,
    pub sym_node_data: u64,
    /// Byte offset of pglist_data.nbp_threshold (0: unknown).
    pub off_nbp_threshold: u32,
    /// Byte offsets of task_struct.mm, of vm_fault.address and of
    /// pglist_data.vm_stat[PGPROMOTE_CANDIDATE] (0: unknown).
    #[serde(default)]
    pub off_task_mm: u32,
    /// Byte offset of task_struct.comm (0: unknown).
    #[serde(default)]
    pub off_task_comm: u32,
    /// Byte offset of task_struct.flags (0: unknown).
    #[serde(default)]
    pub off_task_flags: u32,
    /// PG_head's bit in page->flags (None: unknown), and the byte holding
    /// a large folio's order (0: unknown).
    #[serde(default)]
    pub pg_head_bit: Option<u32>,
    #[serde(default)]
    pub off_folio_order: u32,
    /// Where a folio's memory cgroup id is (demotion records' `memcg_id`):
    /// folio.memcg_data, mem_cgroup.css.cgroup (None: unknown),
    /// cgroup.kn and kernfs_node.id (0: unknown).
    #[serde(default)]
    pub off_memcg_data: u32,
    #[serde(default)]
    pub off_memcg_cgroup: Option<u32>,
    /// Where an object cgroup's memcg is (obj_cgroup.memcg) on kernels
    /// whose user folios are charged to an object cgroup (7.1+:
    /// folio.memcg_data holds an obj_cgroup, not the memcg); None before.
    #[serde(default)]
    pub off_objcg_memcg: Option<u32>,
    #[serde(default)]
    pub off_cgroup_kn: u32,
    #[serde(default)]
    pub off_kn_id: u32,
    #[serde(default)]
    pub off_vmf_address: u32,
    #[serde(default)]
    pub off_promote_candidate: u32,
    pub cpupid_mask: u32,
    pub access_time_buckets: u32,
    pub toptier_mask: u64,
    pub nb_mode_at_load: u32,
    /// CPU -> node.
    pub cpu_node: BTreeMap<u32, u32>,
    /// mm_migrate_pages field offsets: succeeded, failed, reason.
    pub tp_migrate: Option<(u32, u32, u32)>,
    /// mm_migrate_pages reason numbers by name (from its print fmt).
    pub migrate_reasons: BTreeMap<u32, String>,
    /// What the kernel's promotion threshold measures.
    #[serde(default)]
    pub hotness: KernelHotness,
    /// Byte offset of mm_struct.hint_faults (the fault-count RFC's
    /// per-process counter; 0: not that kernel).
    #[serde(default)]
    pub off_mm_hint_faults: u32,
    /// Address of `vmemmap_base` (0: the kernel has a fixed vmemmap).
    #[serde(default)]
    pub sym_vmemmap_base: u64,
    /// sizeof(struct page) from BTF (0: unknown).
    #[serde(default)]
    pub page_struct_size: u32,
    /// Every node's PFN span, from /proc/zoneinfo.
    #[serde(default)]
    pub pfn_spans: Vec<crate::mapplan::PfnSpan>,
    /// Where a folio's LAST_CPUPID field (the kernel's stored access time)
    /// is: its shift in page->flags and the node field's ([`flags_layout`];
    /// 0: unknown), or the byte offset of page._last_cpupid where the
    /// kernel keeps it outside the flags (0: in the flags).
    #[serde(default)]
    pub access_pgshift: u32,
    #[serde(default)]
    pub nodes_pgshift: u32,
    #[serde(default)]
    pub off_last_cpupid: u32,
    /// The kernel's HZ (0: unknown): its access clock is
    /// `jiffies_to_msecs(jiffies)`.
    #[serde(default)]
    pub hz: u32,
    /// Where a CPU's share of a node's PGPROMOTE_CANDIDATE count waits to
    /// be folded: the address of `__per_cpu_offset`, the offsets of
    /// pglist_data.per_cpu_nodestats and of
    /// per_cpu_nodestat.vm_node_stat_diff[PGPROMOTE_CANDIDATE] (0: unknown).
    #[serde(default)]
    pub sym_per_cpu_offset: u64,
    #[serde(default)]
    pub off_pcp_nodestats: u32,
    #[serde(default)]
    pub off_candidate_diff: u32,
}

/// What a kernel compares with its promotion threshold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelHotness {
    /// Mainline: scan-to-fault time in ms against `hot_threshold_ms`.
    #[default]
    Latency,
    /// The fault-count RFC (patch 1/2): hint faults of the process between
    /// the scan and the fault against `fault_count_threshold`; the kernel's
    /// BTF has `mm_struct.hint_faults`.
    FaultCount,
}

impl KernelHotness {
    /// The kernel's rejection on its threshold, as a reason.
    pub fn reject_reason(self) -> &'static str {
        match self {
            KernelHotness::Latency => "latency over threshold",
            KernelHotness::FaultCount => "fault count over threshold",
        }
    }

    /// The unit of the kernel's own latency and threshold.
    pub fn unit(self) -> &'static str {
        match self {
            KernelHotness::Latency => "ms",
            KernelHotness::FaultCount => "faults",
        }
    }

    /// The kernel's threshold knob.
    pub fn knob(self) -> &'static str {
        match self {
            KernelHotness::Latency => "hot_threshold_ms",
            KernelHotness::FaultCount => "fault_count_threshold",
        }
    }
}

/// PAGE_FAULT_COUNT_BUCKETS of the fault-count RFC: the folio keeps the
/// process's hint-fault count shifted right by this much.
pub const FAULT_COUNT_BUCKETS: u32 = 16;

impl KernelParams {
    /// The mm_migrate_pages reason number of NUMA-balancing migrations.
    pub fn numa_misplaced_reason(&self) -> Option<u32> {
        self.migrate_reasons
            .iter()
            .find(|(_, name)| name.as_str() == "numa_misplaced")
            .map(|(n, _)| *n)
    }
}

/// jiffies_to_msecs(j) = ceil(j * num / den) for a kernel of `hz`: `(num,
/// den)`, 1000 / HZ in lowest terms (the kernel's HZ_TO_MSEC_NUM/DEN);
/// None for HZ 0 (unknown).
pub fn jiffy_ms_ratio(hz: u32) -> Option<(u64, u64)> {
    if hz == 0 {
        return None;
    }
    let (mut a, mut b) = (1000u64, u64::from(hz));
    while b != 0 {
        (a, b) = (b, a % b);
    }
    Some((1000 / a, u64::from(hz) / a))
}

/// The HZ values Linux is built with on the machines numatrace serves.
pub const KNOWN_HZ: [u32; 4] = [100, 250, 300, 1000];

/// The known HZ that `jiffies` advancing over `ns` nanoseconds gives,
/// within 10% (None over a span too short or a rate no kernel has).
pub fn hz_of_rate(jiffies: u64, ns: u64) -> Option<u32> {
    if ns < 50_000_000 || jiffies == 0 {
        return None;
    }
    let rate = jiffies as f64 * 1e9 / ns as f64;
    KNOWN_HZ
        .into_iter()
        .find(|&hz| (rate / f64::from(hz) - 1.0).abs() <= 0.1)
}

/// `CONFIG_HZ` from a kernel's config text.
pub fn hz_of_config(config: &str) -> Option<u32> {
    config
        .lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&hz| hz > 0)
}

/// /proc/timer_list's clock (`now at N nsecs`) and the first CPU's
/// `jiffies: N`.
pub fn timer_list_sample(text: &str) -> Option<(u64, u64)> {
    let now = text.lines().find_map(|l| {
        l.trim()
            .strip_prefix("now at ")?
            .strip_suffix(" nsecs")?
            .parse()
            .ok()
    })?;
    let jiffies = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("jiffies: ")?.trim().parse().ok())?;
    Some((now, jiffies))
}

/// `order_base_2(n)`: ceil(log2 n).
pub fn order_base_2(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

/// LAST_CPUPID_MASK and PAGE_ACCESS_TIME_BUCKETS for a kernel built with
/// `nr_cpus` = CONFIG_NR_CPUS (include/linux/page-flags-layout.h).
pub fn cpupid_layout(nr_cpus: u32) -> (u32, u32) {
    let shift = 8 + order_base_2(nr_cpus);
    let buckets = 12u32.saturating_sub(shift);
    ((1u32 << shift.min(31)) - 1, buckets)
}

/// The shifts of the LAST_CPUPID and node fields in page->flags
/// (include/linux/page-flags-layout.h on 64-bit with SPARSEMEM_VMEMMAP, no
/// section bits): from the top, | NODE | ZONE | LAST_CPUPID | ..., the
/// node field NODES_SHIFT = log2(MAX_NUMNODES) wide, the zone field
/// ZONES_SHIFT = order_base_2(MAX_NR_ZONES). None when they do not fit.
pub fn flags_layout(max_numnodes: u32, max_nr_zones: u32, cpupid_mask: u32) -> Option<(u32, u32)> {
    let nodes = order_base_2(max_numnodes);
    let used = nodes + order_base_2(max_nr_zones) + cpupid_mask.count_ones();
    (nodes > 0 && used < 64).then_some((64 - used, 64 - nodes))
}

/// Nodes the kernel treats as top tier: every tier up to and including the
/// first one that holds a node with CPUs (mm/memory-tiers.c).
pub fn toptier_mask(tiers: &[MemoryTier], nodes: &[Node]) -> u64 {
    let cpu_nodes: Vec<u32> = nodes
        .iter()
        .filter(|n| !n.cpus.is_empty())
        .map(|n| n.id)
        .collect();
    let mut mask = 0u64;
    for t in tiers {
        for n in &t.nodes {
            if *n < 64 {
                mask |= 1 << n;
            }
        }
        if t.nodes.iter().any(|n| cpu_nodes.contains(n)) {
            return mask;
        }
    }
    u64::MAX
}

/// Parses a tracefs `format` file: field name -> offset, and the
/// `__print_symbolic(REC->reason, {0,"compaction"}, ...)` table.
pub fn parse_tp_format(text: &str) -> (BTreeMap<String, u32>, BTreeMap<u32, String>) {
    let offsets = parse_tp_fields(text)
        .into_iter()
        .map(|(name, (offset, _))| (name, offset))
        .collect();
    (offsets, parse_reason_symbols(text))
}

/// `field:<decl> <name>;\toffset:<n>;\tsize:<n>;...` lines: name ->
/// (offset, size); a line without an offset is skipped, one without a
/// size has size 0. `char comm[16]` names the field `comm`.
pub fn parse_tp_fields(text: &str) -> BTreeMap<String, (u32, u32)> {
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let decl = rest.split(';').next().unwrap_or("");
        let name = decl
            .split_whitespace()
            .last()
            .unwrap_or("")
            .trim_start_matches('*');
        let name = name.split('[').next().unwrap_or(name);
        let number = |key: &str| {
            rest.split(';')
                .find_map(|p| p.trim().strip_prefix(key))
                .and_then(|v| v.parse().ok())
        };
        if let Some(off) = number("offset:") {
            fields.insert(name.to_owned(), (off, number("size:").unwrap_or(0)));
        }
    }
    fields
}

/// The `{n, "name"}` pairs of the `__print_symbolic` on `REC->reason`.
fn parse_reason_symbols(text: &str) -> BTreeMap<u32, String> {
    let mut symbols = BTreeMap::new();
    if let Some(pos) = text.find("REC->reason") {
        let tail = &text[pos..];
        for part in tail.split("{").skip(1) {
            let Some((num, rest)) = part.split_once(',') else {
                continue;
            };
            let Ok(n) = num.trim().parse::<u32>() else {
                continue;
            };
            if let Some(name) = rest.split('"').nth(1) {
                symbols.insert(n, name.to_owned());
            }
        }
    }
    symbols
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_without_hotness_are_a_latency_kernel() {
        let old = serde_json::to_value(KernelParams::default()).expect("serialise");
        let mut old = old.as_object().cloned().expect("object");
        for key in ["hotness", "off_task_mm", "off_mm_hint_faults"] {
            old.remove(key);
        }
        let k: KernelParams =
            serde_json::from_value(serde_json::Value::Object(old)).expect("older header");
        assert_eq!(k.hotness, KernelHotness::Latency);
        let rfc = KernelParams {
            hotness: KernelHotness::FaultCount,
            ..KernelParams::default()
        };
        let json = serde_json::to_value(&rfc).expect("serialise");
        assert_eq!(json["hotness"], "fault_count");
        assert_eq!(
            KernelHotness::FaultCount.reject_reason(),
            "fault count over threshold"
        );
        assert_eq!(KernelHotness::Latency.knob(), "hot_threshold_ms");
    }

    #[test]
    fn jiffies_to_msecs_as_the_kernel_reduces_it() {
        assert_eq!(jiffy_ms_ratio(250), Some((4, 1)));
        assert_eq!(jiffy_ms_ratio(300), Some((10, 3)));
        assert_eq!(jiffy_ms_ratio(1000), Some((1, 1)));
        assert_eq!(jiffy_ms_ratio(100), Some((10, 1)));
        assert_eq!(jiffy_ms_ratio(0), None);
    }

    #[test]
    fn hz_from_config_or_from_jiffies_over_time() {
        assert_eq!(
            hz_of_config("# CONFIG_HZ_1000 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n"),
            Some(250)
        );
        assert_eq!(hz_of_config("CONFIG_HZ_250=y\n"), None);
        assert_eq!(hz_of_rate(51, 200_000_000), Some(250));
        assert_eq!(hz_of_rate(59, 200_000_000), Some(300));
        assert_eq!(hz_of_rate(19, 200_000_000), Some(100));
        assert_eq!(hz_of_rate(200, 200_000_000), Some(1000));
        assert_eq!(hz_of_rate(40, 200_000_000), None, "200 Hz: no kernel's");
        assert_eq!(hz_of_rate(1, 1_000_000), None, "too short a span");
        let text = "Timer List Version: v0.9\nHRTIMER_MAX_CLOCK_BASES: 8\nnow at 1234567890 nsecs\n\ncpu: 0\n clock 0:\n  .base: x\njiffies: 4295123456\n";
        assert_eq!(
            timer_list_sample(text),
            Some((1_234_567_890, 4_295_123_456))
        );
        assert_eq!(timer_list_sample("now at x nsecs\n"), None);
    }

    #[test]
    fn cpupid_layout_matches_debian() {
        // Debian amd64: CONFIG_NR_CPUS=8192 -> LAST_CPUPID_SHIFT = 8 + 13.
        assert_eq!(cpupid_layout(8192), ((1 << 21) - 1, 0));
        assert_eq!(order_base_2(1), 0);
        assert_eq!(order_base_2(2), 1);
        assert_eq!(order_base_2(3), 2);
        // Tiny NR_CPUS: the access time needs 12 bits, so buckets kick in.
        assert_eq!(cpupid_layout(2), ((1 << 9) - 1, 3));
    }

    #[test]
    fn flags_layout_matches_debian() {
        // Debian amd64: NODES_SHIFT 10, five zones (DMA, DMA32, NORMAL,
        // MOVABLE, DEVICE: 3 bits), LAST_CPUPID 21 bits.
        assert_eq!(flags_layout(1024, 5, (1 << 21) - 1), Some((30, 54)));
        assert_eq!(flags_layout(1, 5, (1 << 21) - 1), None);
    }

    #[test]
    fn toptier_is_up_to_first_cpu_tier() {
        let node = |id: u32, cpus: Vec<u32>| Node {
            id,
            cpus,
            mem_total_kb: 1,
            mem_free_kb: 1,
            distances: vec![],
        };
        let tier = |id: u32, nodes: Vec<u32>| MemoryTier {
            tier: format!("memory_tier{id}"),
            id,
            nodes,
        };
        let nodes = [node(0, vec![0, 1]), node(1, vec![])];
        assert_eq!(
            toptier_mask(&[tier(4, vec![0]), tier(22, vec![1])], &nodes),
            0b01
        );
        assert_eq!(toptier_mask(&[], &nodes), u64::MAX);
    }

    #[test]
    fn parses_mm_migrate_pages_format() {
        let text = "name: mm_migrate_pages\nID: 500\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned long succeeded;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long failed;\toffset:16;\tsize:8;\tsigned:0;\n\
\tfield:enum migrate_mode mode;\toffset:56;\tsize:4;\tsigned:0;\n\
\tfield:int reason;\toffset:60;\tsize:4;\tsigned:1;\n\n\
print fmt: \"nr_succeeded=%lu reason=%s\", REC->succeeded, __print_symbolic(REC->reason, { 0, \"compaction\" }, { 5, \"numa_misplaced\" }, { 9, \"demotion\" })\n";
        let (fields, reasons) = parse_tp_format(text);
        assert_eq!(fields.get("succeeded"), Some(&8));
        assert_eq!(fields.get("reason"), Some(&60));
        assert_eq!(reasons.get(&5).map(String::as_str), Some("numa_misplaced"));
        assert_eq!(reasons.get(&9).map(String::as_str), Some("demotion"));
        let k = KernelParams {
            migrate_reasons: reasons,
            ..KernelParams::default()
        };
        assert_eq!(k.numa_misplaced_reason(), Some(5));
        assert_eq!(KernelParams::default().numa_misplaced_reason(), None);
    }
}
