//! The source's static facts (trace header, tiers, node memory) as the
//! header of a frame.
use std::collections::BTreeMap;

use numa_core::{
    plan::{HookStatus, Mechanism, PlannedHook},
    topology::{MemoryTier, Node},
    trace,
};

use crate::frame::{HeaderView, NodeMem, TierView};

/// Static facts of the source (header) plus what changes slowly.
pub(super) struct Static {
    pub(super) header: HeaderView,
    pub(super) nodes: Vec<Node>,
    pub(super) tiers: Vec<MemoryTier>,
    pub(super) stamp_capacity: u64,
}

pub(super) fn header_view(h: &trace::Header) -> HeaderView {
    let mut plan = String::from("no attach plan");
    let mut degraded = Vec::new();
    if let Some(p) = &h.attach_plan {
        let attached = p
            .hooks
            .iter()
            .filter(|h| h.status == HookStatus::Attached)
            .count();
        let mut by_mech: BTreeMap<&str, usize> = BTreeMap::new();
        for hk in p.hooks.iter().filter(|h| h.status == HookStatus::Attached) {
            if let Some(m) = hk.mechanism {
                *by_mech.entry(m.name()).or_default() += 1;
            }
            if matches!(hk.mechanism, Some(Mechanism::Kprobe | Mechanism::Kretprobe)) {
                degraded.push(format!("{} via kprobe", hk.hook.name()));
            }
        }
        let not_attached =
            |h: &&PlannedHook| !matches!(h.status, HookStatus::Attached | HookStatus::Unneeded);
        for hk in p.hooks.iter().filter(not_attached) {
            let what = match hk.status {
                HookStatus::Missing => "missing",
                HookStatus::Refused => "refused",
                _ => "not attached",
            };
            degraded.push(format!("{} {what}", hk.hook.name()));
        }
        let mechs: Vec<String> = by_mech.iter().map(|(m, n)| format!("{m} {n}")).collect();
        let wanted = p
            .hooks
            .iter()
            .filter(|h| h.status != HookStatus::Unneeded)
            .count();
        plan = format!(
            "{attached}/{wanted} hooks ({})",
            if mechs.is_empty() {
                "none".to_owned()
            } else {
                mechs.join(", ")
            }
        );
    }
    let t = &h.tunables;
    let ms = |v: Option<u64>| v.map_or("?".to_owned(), |v| v.to_string());
    HeaderView {
        kernel: h.kernel_release.clone(),
        numa_balancing: h.numa_balancing,
        plan,
        degraded,
        tiers: Vec::new(),
        hot_threshold_ms: t.hot_threshold_ms,
        rate_limit_mbps: t.promote_rate_limit_mbps,
        scan: format!(
            "delay {} ms, period {}-{} ms, size {} MB",
            ms(t.scan_delay_ms),
            ms(t.scan_period_min_ms),
            ms(t.scan_period_max_ms),
            ms(t.scan_size_mb)
        ),
        kernel_threshold_ms: BTreeMap::new(),
        sample_every: h.sample_every,
        folio_rate: h.map_plan.as_ref().map_or(1, |p| p.rate()),
        folio_coverage: h.map_plan.as_ref().map_or(1.0, |p| p.coverage()),
    }
}

pub(super) fn tier_views(tiers: &[MemoryTier], nodes: &[Node]) -> Vec<TierView> {
    let mem = |id: u32| {
        let n = nodes.iter().find(|n| n.id == id);
        NodeMem {
            id,
            total_kb: n.map_or(0, |n| n.mem_total_kb),
            free_kb: n.map_or(0, |n| n.mem_free_kb),
            cpus: n.map_or(0, |n| n.cpus.len()),
        }
    };
    if tiers.is_empty() {
        return vec![TierView {
            id: 0,
            nodes: nodes.iter().map(|n| mem(n.id)).collect(),
        }];
    }
    tiers
        .iter()
        .map(|t| TierView {
            id: t.id,
            nodes: t.nodes.iter().map(|n| mem(*n)).collect(),
        })
        .collect()
}
