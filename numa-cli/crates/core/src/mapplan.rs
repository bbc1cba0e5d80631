//! The folio map's plan: which page frame numbers (PFNs) the per-folio BPF
//! array covers, and how sparsely it follows them so that it fits a kernel
//! memory budget (`--map-budget`).
//!
//! The array is indexed by PFN over the slow (non-top-tier) nodes' spans.
//! Sampling is deterministic: of each aligned block of `rate = 1 << shift`
//! PFNs exactly one is followed, chosen by a hash of the block index, so a
//! span of `len` PFNs needs `ceil(len / rate)` slots. [`followed`] is the
//! same test the BPF program makes, so userspace can tell which pages a
//! trace can speak for.
//!
//! Pure: the caller reads `/proc/zoneinfo` and the tier mask.
use std::collections::BTreeMap;

use serde::Serialize;

/// The PFNs `[start, end)` of one NUMA node (or of several merged ones,
/// then `node` is the lowest of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PfnSpan {
    pub node: u32,
    pub start: u64,
    pub end: u64,
}

impl PfnSpan {
    /// PFNs in the span.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots the span needs when one PFN in `rate` is followed.
    fn slots(&self, shift: u32) -> u64 {
        self.len().div_ceil(1u64 << shift)
    }
}

/// Spans the BPF program checks at most: each costs a compare per fault,
/// and a fixed count keeps its loop bounded for the verifier.
pub use numa_ebpf_common::MAX_SPANS;

/// The sparsest sampling: one PFN in 16 Mi (64 GiB of 4 KiB pages).
pub const MAX_SHIFT: u32 = 24;

/// `--map-budget`'s default: kernel memory for every map (a TiB of slow
/// memory is then followed at 1 folio in 64), and apart from it as much
/// again for the lifecycle's table of the top tier's PFNs.
pub const DEFAULT_MAP_BUDGET: u64 = 256 << 20;

/// One zone block of `/proc/zoneinfo` while it is read.
#[derive(Default)]
struct Zone {
    node: Option<u32>,
    spanned: Option<u64>,
    start_pfn: Option<u64>,
}

/// The node of a `Node 1, zone   Normal` line.
fn zone_header(line: &str) -> Option<Option<u32>> {
    let rest = line.strip_prefix("Node ")?;
    let (node, zone) = rest.split_once(',')?;
    if !zone.trim_start().starts_with("zone") {
        return None;
    }
    Some(node.trim().parse().ok())
}

/// Adds a finished zone to its node's span, when it spans anything.
fn close_zone(zone: &Zone, nodes: &mut BTreeMap<u32, (u64, u64)>) {
    let (Some(node), Some(spanned), Some(start)) = (zone.node, zone.spanned, zone.start_pfn) else {
        return;
    };
    if spanned == 0 {
        return;
    }
    let end = start.saturating_add(spanned);
    let span = nodes.entry(node).or_insert((start, end));
    span.0 = span.0.min(start);
    span.1 = span.1.max(end);
}

/// Each node's PFN span from `/proc/zoneinfo`: from its lowest zone start
/// to its highest zone end, over the zones that span any pages. Sorted by
/// node; lines that don't parse are skipped.
pub fn parse_zoneinfo(text: &str) -> Vec<PfnSpan> {
    let mut nodes = BTreeMap::new();
    let mut zone = Zone::default();
    for line in text.lines() {
        if let Some(node) = zone_header(line) {
            close_zone(&zone, &mut nodes);
            zone = Zone {
                node,
                ..Zone::default()
            };
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(key), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        match (key, value.parse::<u64>()) {
            ("spanned", Ok(v)) => zone.spanned = Some(v),
            ("start_pfn:", Ok(v)) => zone.start_pfn = Some(v),
            _ => {}
        }
    }
    close_zone(&zone, &mut nodes);
    nodes
        .into_iter()
        .map(|(node, (start, end))| PfnSpan { node, start, end })
        .collect()
}

/// Whether node `node` is in the top tier per `toptier_mask` (bit n for
/// node n; nodes the mask cannot name are slow).
fn is_toptier(node: u32, toptier_mask: u64) -> bool {
    node < 64 && toptier_mask & (1 << node) != 0
}

/// The spans of the slow nodes, sorted by start, overlapping and adjacent
/// ones merged, and at most [`MAX_SPANS`] of them: beyond that the two
/// neighbours with the smallest gap between them merge, and the gap's PFNs
/// get slots too.
pub fn slow_spans(all: &[PfnSpan], toptier_mask: u64) -> Vec<PfnSpan> {
    tier_spans(all, |node| !is_toptier(node, toptier_mask))
}

/// The top tier's spans, as [`slow_spans`] gives the others.
pub fn top_spans(all: &[PfnSpan], toptier_mask: u64) -> Vec<PfnSpan> {
    tier_spans(all, |node| is_toptier(node, toptier_mask))
}

fn tier_spans(all: &[PfnSpan], of_tier: impl Fn(u32) -> bool) -> Vec<PfnSpan> {
    let mut spans: Vec<PfnSpan> = all
        .iter()
        .filter(|s| !s.is_empty() && of_tier(s.node))
        .copied()
        .collect();
    spans.sort_by_key(|s| (s.start, s.node));
    let mut merged: Vec<PfnSpan> = Vec::with_capacity(spans.len());
    for s in spans {
        match merged.last_mut() {
            Some(last) if s.start <= last.end => join(last, &s),
            _ => merged.push(s),
        }
    }
    while merged.len() > MAX_SPANS {
        let closest = (0..merged.len() - 1)
            .min_by_key(|&i| merged[i + 1].start - merged[i].end)
            .unwrap_or(0);
        let next = merged.remove(closest + 1);
        join(&mut merged[closest], &next);
    }
    merged
}

/// Widens `a` to cover `b` and what lies between them.
fn join(a: &mut PfnSpan, b: &PfnSpan) {
    a.start = a.start.min(b.start);
    a.end = a.end.max(b.end);
    a.node = a.node.min(b.node);
}

/// Whether the PFN at `offset` in its span is the one followed in its
/// aligned block of `1 << shift` PFNs. The BPF program makes the same test.
/// A `shift` above [`MAX_SHIFT`] counts as [`MAX_SHIFT`].
pub fn followed(offset: u64, shift: u32) -> bool {
    let shift = shift.min(MAX_SHIFT);
    if shift == 0 {
        return true;
    }
    chosen_in_block(offset >> shift, shift) == offset & ((1u64 << shift) - 1)
}

/// The offset within aligned block `block` of `1 << shift` PFNs (`shift` in
/// 1..=[`MAX_SHIFT`]) of the one PFN followed there.
fn chosen_in_block(block: u64, shift: u32) -> u64 {
    block.wrapping_mul(numa_ebpf_common::FOLLOW_HASH) >> (64 - shift)
}

/// Why no sampling rate fits the budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "--map-budget {} is below the {} the other maps need (ring buffer, counters, \
         per-process tables); raise --map-budget to at least {} or lower --ring-mb",
        human_bytes(*.budget), human_bytes(*.fixed), human_bytes(*.need)
    )]
    BelowFixed { budget: u64, fixed: u64, need: u64 },
    #[error(
        "--map-budget {} cannot hold the folio map even following one page in {}: \
         the other maps need {} and the folio map {}; raise --map-budget to at least {} \
         or lower --ring-mb",
        human_bytes(*.budget), 1u64 << MAX_SHIFT, human_bytes(*.fixed),
        human_bytes(.need.saturating_sub(*.fixed)), human_bytes(*.need)
    )]
    TooSmall { budget: u64, fixed: u64, need: u64 },
}

/// How the folio map covers the slow nodes within a budget of kernel
/// memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MapPlan {
    /// Kernel memory all maps together may take.
    pub budget_bytes: u64,
    /// What the other maps take.
    pub fixed_bytes: u64,
    /// Bytes per folio-map slot.
    pub slot_bytes: u64,
    /// The slow spans, at most [`MAX_SPANS`].
    pub spans: Vec<PfnSpan>,
    /// One PFN in `1 << shift` is followed.
    pub shift: u32,
    /// The folio map's entries, at least 1.
    pub slots: u64,
}

/// Slots for `spans` at `shift`; an empty map still needs one entry to be
/// created.
fn slots_for(spans: &[PfnSpan], shift: u32) -> u64 {
    spans.iter().map(|s| s.slots(shift)).sum::<u64>().max(1)
}

/// `fixed + slots * slot_bytes`, saturating.
fn total_for(fixed: u64, slots: u64, slot_bytes: u64) -> u64 {
    fixed.saturating_add(slots.saturating_mul(slot_bytes))
}

impl MapPlan {
    /// The densest sampling whose map fits: the smallest shift up to
    /// [`MAX_SHIFT`] with `fixed + slots * slot_bytes <= budget` and no
    /// more slots than a BPF array can have (`u32` entries).
    pub fn choose(
        budget_bytes: u64,
        fixed_bytes: u64,
        slot_bytes: u64,
        spans: Vec<PfnSpan>,
    ) -> Result<MapPlan, PlanError> {
        let fits = |shift: u32| {
            let slots = slots_for(&spans, shift);
            slots <= u64::from(u32::MAX)
                && total_for(fixed_bytes, slots, slot_bytes) <= budget_bytes
        };
        let need = total_for(fixed_bytes, slots_for(&spans, MAX_SHIFT), slot_bytes);
        if budget_bytes < fixed_bytes {
            return Err(PlanError::BelowFixed {
                budget: budget_bytes,
                fixed: fixed_bytes,
                need,
            });
        }
        let Some(shift) = (0..=MAX_SHIFT).find(|&s| fits(s)) else {
            return Err(PlanError::TooSmall {
                budget: budget_bytes,
                fixed: fixed_bytes,
                need,
            });
        };
        let slots = slots_for(&spans, shift);
        Ok(MapPlan {
            budget_bytes,
            fixed_bytes,
            slot_bytes,
            spans,
            shift,
            slots,
        })
    }

    /// One PFN in `rate` is followed.
    pub fn rate(&self) -> u64 {
        1u64 << self.shift
    }

    /// PFNs in the slow spans.
    pub fn slow_pfns(&self) -> u64 {
        self.spans.iter().map(PfnSpan::len).sum()
    }

    /// PFNs followed: one per aligned block of each span.
    pub fn followed_pfns(&self) -> u64 {
        self.spans.iter().map(|s| s.slots(self.shift)).sum()
    }

    /// The share of slow PFNs followed; 1 when there are none.
    pub fn coverage(&self) -> f64 {
        match self.slow_pfns() {
            0 => 1.0,
            n => self.followed_pfns() as f64 / n as f64,
        }
    }

    /// What the folio map takes.
    pub fn stamp_bytes(&self) -> u64 {
        self.slots.saturating_mul(self.slot_bytes)
    }

    /// What all maps take.
    pub fn total_bytes(&self) -> u64 {
        self.fixed_bytes.saturating_add(self.stamp_bytes())
    }

    /// The slot where each span's slots begin; unused entries hold
    /// `slots`, past every used one.
    pub fn span_bases(&self) -> [u64; MAX_SPANS] {
        let mut out = [self.slots; MAX_SPANS];
        let mut base = 0;
        for (o, s) in out.iter_mut().zip(&self.spans) {
            *o = base;
            base += s.slots(self.shift);
        }
        out
    }

    /// Each span's first PFN; 0 in unused entries.
    pub fn span_starts(&self) -> [u64; MAX_SPANS] {
        let mut out = [0; MAX_SPANS];
        for (o, s) in out.iter_mut().zip(&self.spans) {
            *o = s.start;
        }
        out
    }

    /// Each span's end PFN (exclusive); 0 in unused entries, so an unused
    /// entry contains no PFN.
    pub fn span_ends(&self) -> [u64; MAX_SPANS] {
        let mut out = [0; MAX_SPANS];
        for (o, s) in out.iter_mut().zip(&self.spans) {
            *o = s.end;
        }
        out
    }

    /// The slow PFNs in `[start, end)` and, of them, those followed (one per
    /// aligned block of each span): a range's sample without a test of
    /// each PFN.
    pub fn followed_in(&self, start: u64, end: u64) -> (u64, Vec<u64>) {
        let shift = self.shift.min(MAX_SHIFT);
        let mut slow = 0;
        let mut followed_pfns = Vec::new();
        for s in &self.spans {
            let (a, b) = (start.max(s.start), end.min(s.end));
            if a >= b {
                continue;
            }
            slow += b - a;
            for block in ((a - s.start) >> shift)..=((b - 1 - s.start) >> shift) {
                let within = if shift == 0 {
                    0
                } else {
                    chosen_in_block(block, shift)
                };
                let pfn = s.start + (block << shift) + within;
                if (a..b).contains(&pfn) {
                    followed_pfns.push(pfn);
                }
            }
        }
        (slow, followed_pfns)
    }

    /// The folio map index of `pfn`, when it lies in a span and is the one
    /// followed in its block.
    pub fn slot_of(&self, pfn: u64) -> Option<u64> {
        let bases = self.span_bases();
        let (s, base) = self
            .spans
            .iter()
            .zip(bases)
            .find(|(s, _)| (s.start..s.end).contains(&pfn))?;
        let offset = pfn - s.start;
        followed(offset, self.shift).then_some(base + (offset >> self.shift))
    }
}

/// `bytes` with a binary unit and one decimal: `512 B`, `24.0 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests;
