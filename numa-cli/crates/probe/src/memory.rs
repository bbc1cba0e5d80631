//! The kernel memory numatrace's maps take: the budget plan made before
//! load (which decides the per-folio sampling rate) and the kernel's own
//! accounting of every map once loaded.
use std::{
    fs,
    mem::size_of,
    os::fd::{AsFd, AsRawFd},
};

use anyhow::Result;
use aya::{
    maps::{Map, MapData},
    Ebpf,
};
use numa_core::{
    mapplan::{slow_spans, MapPlan},
    params::KernelParams,
};
use numa_ebpf_common::{
    MmFaultCount, Stamp, COUNTER_SLOTS, HIST_SLOTS, MAX_CPUS, MIGRATE_REASONS,
    MM_FAULT_COUNT_ENTRIES, OUTCOMES,
};

pub use numa_core::mapplan::DEFAULT_MAP_BUDGET;

/// Bytes of one `STAMPS` slot (an array element is its value, 8-aligned).
pub const SLOT_BYTES: u64 = size_of::<Stamp>().next_multiple_of(8) as u64;

/// A hash element's bookkeeping beside its key and value (`htab_elem`
/// with its list node, hash and LRU links), rounded up.
const HASH_ELEM_OVERHEAD: u64 = 64;
/// Threads whose task-local context the estimate allows for.
const THREADS_ALLOWED: u64 = 4096;
/// A thread's context (`ThreadCtx`, a fault record and the pass state)
/// with task storage's own element, bounded above.
const THREAD_CTX_BYTES: u64 = 512;
/// The object's global-data maps, the log ring and what the estimate
/// leaves out.
const SLACK_BYTES: u64 = 1 << 20;

/// Kernel memory of every map but `STAMPS`, estimated before load from the
/// map definitions; `measured` gives the kernel's figure afterwards.
pub fn fixed_bytes(ring_bytes: u64, cpus: u64) -> u64 {
    let hash = |entries: u32, key: usize, value: usize| {
        u64::from(entries)
            * (HASH_ELEM_OVERHEAD
                + key.next_multiple_of(8) as u64
                + value.next_multiple_of(8) as u64)
    };
    let per_cpu_slots = u64::from(COUNTER_SLOTS)
        + 2 * HIST_SLOTS as u64
        + 2 * OUTCOMES as u64
        + 2 * u64::from(MIGRATE_REASONS);
    ring_bytes
        + hash(MM_FAULT_COUNT_ENTRIES, 8, size_of::<MmFaultCount>())
        + per_cpu_slots * 8 * cpus
        + u64::from(MAX_CPUS) * 4
        + THREADS_ALLOWED * THREAD_CTX_BYTES
        + SLACK_BYTES
}

/// The stamp array's plan for `budget` bytes of kernel memory: the slow
/// nodes' spans, and the smallest sampling rate that fits beside the other
/// maps. Without sizeof(struct page) in BTF no folio can be placed, so
/// nothing is followed.
pub fn plan(k: &KernelParams, budget: u64, ring_bytes: u64) -> Result<MapPlan> {
    let cpus = aya::util::nr_cpus().map_or(u64::from(MAX_CPUS), |n| n as u64);
    let spans = if k.page_struct_size == 0 {
        Vec::new()
    } else {
        slow_spans(&k.pfn_spans, k.toptier_mask)
    };
    Ok(MapPlan::choose(
        budget,
        fixed_bytes(ring_bytes, cpus),
        SLOT_BYTES,
        spans,
    )?)
}

/// The kernel's own figure for each map: `memlock` in the map's fdinfo.
pub fn measured(ebpf: &Ebpf) -> Vec<(String, u64)> {
    ebpf.maps()
        .filter_map(|(name, map)| {
            let fd = map_data(map)?.fd().as_fd().as_raw_fd();
            let text = fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
            Some((name.to_owned(), memlock(&text)?))
        })
        .collect()
}

fn memlock(fdinfo: &str) -> Option<u64> {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("memlock:"))
        .and_then(|v| v.trim().parse().ok())
}

fn map_data(map: &Map) -> Option<&MapData> {
    match map {
        Map::Array(m)
        | Map::PerCpuArray(m)
        | Map::HashMap(m)
        | Map::LruHashMap(m)
        | Map::RingBuf(m)
        | Map::Unsupported(m) => Some(m),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use numa_core::mapplan::PfnSpan;

    use super::*;

    #[test]
    fn memlock_is_read_from_fdinfo() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t2079\nmap_type:\t2\n\
                    key_size:\t4\nvalue_size:\t48\nmax_entries:\t65536\nmap_flags:\t0x0\n\
                    map_extra:\t0x0\nmemlock:\t3149824\nmap_id:\t12\n";
        assert_eq!(memlock(text), Some(3_149_824));
        assert_eq!(memlock("pos:\t0\n"), None);
    }

    #[test]
    fn a_tib_of_slow_memory_is_followed_at_one_in_64_by_default() {
        let k = KernelParams {
            page_struct_size: 64,
            toptier_mask: 1,
            pfn_spans: vec![
                PfnSpan {
                    node: 0,
                    start: 1,
                    end: 1 << 24,
                },
                PfnSpan {
                    node: 1,
                    start: 1 << 24,
                    end: (1 << 24) + (1 << 28),
                },
            ],
            ..KernelParams::default()
        };
        let plan = plan(&k, DEFAULT_MAP_BUDGET, 16 << 20).expect("fits");
        assert_eq!((plan.rate(), plan.slots), (64, 1 << 22));
        assert!(plan.total_bytes() <= DEFAULT_MAP_BUDGET);
    }

    #[test]
    fn the_fixed_estimate_counts_the_ring_and_grows_with_cpus() {
        let one = fixed_bytes(16 << 20, 1);
        assert!(one > 16 << 20);
        assert!(fixed_bytes(16 << 20, 64) > one);
        assert_eq!(SLOT_BYTES, 32);
    }
}
