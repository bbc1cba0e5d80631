//! The shadow evaluation engine: runs several policies beside the kernel on
//! one event stream and reports decisions, agreement and outcome evidence.
//! Pure and deterministic: a replay of a recording gives the live report.
use std::{cell::RefCell, collections::BTreeMap};

use rustc_hash::FxHashMap;

use numa_ebpf_common::{fault_flags as ff, Counter, FaultEvent, Outcome};
use serde::Serialize;

use super::{
    hist::Log2Hist,
    pagetable::{self, PageTable},
    policy::{FaultView, Policy},
    scans::ScanIndex,
    window::Window,
};
use crate::decode::{comm, Event, Snapshot};

/// At most this many refused pages are followed per set (memory bound).
const MAX_TRACKED: usize = 1 << 22;
/// (latency, threshold) samples kept, like the RFC's first table.
const MAX_SAMPLES: usize = 32;

#[derive(Debug, Default, Clone, Serialize)]
pub struct Agreement {
    pub both: u64,
    pub kernel_only: u64,
    pub model_only: u64,
    pub neither: u64,
}

impl Agreement {
    fn add(&mut self, kernel: bool, model: bool) {
        match (kernel, model) {
            (true, true) => self.both += 1,
            (true, false) => self.kernel_only += 1,
            (false, true) => self.model_only += 1,
            (false, false) => self.neither += 1,
        }
    }

    pub fn agree_pct(&self) -> f64 {
        let total = self.both + self.kernel_only + self.model_only + self.neither;
        if total == 0 {
            100.0
        } else {
            100.0 * (self.both + self.neither) as f64 / total as f64
        }
    }
}

/// Follows refused pages: did they fault again (still hot), and when?
/// One entry per refused page for all models at once, with the sets it
/// counts in: bit `i` = model `i` wanted it, bit `models` = no model did.
#[derive(Debug, Default)]
struct Refaults {
    /// Pending refusals: `[packed (tgid, addr), packed (ts_ns, sets)]`,
    /// 16 bytes each: the table is what every event touches.
    table: PageTable<2>,
    /// Pending refusals whose key or value does not pack (never a
    /// kernel's key; a time beyond the packed range): exact, slower.
    wide: FxHashMap<(u32, u64), Pending>,
    sets: Vec<RefaultSet>,
    /// Origin of the packed times (set at the first refusal).
    base_ns: Option<u64>,
    /// Low bits of a packed value: `ts_ns - base_ns`; high bits: sets.
    ts_bits: u32,
    /// How much older than the first refusal's a packed time may be.
    slack_ns: u64,
    /// At most this many pending ([`MAX_TRACKED`]; smaller in tests).
    max_tracked: usize,
}

/// A packed time may be this much older than the first refusal's (less
/// with many models: a sixteenth of the packed range).
const BASE_SLACK_NS: u64 = 1 << 32;

#[derive(Debug, Clone, Copy)]
struct Pending {
    ts_ns: u64,
    sets: u64,
}

/// A page key, packed once per event.
#[derive(Debug, Clone, Copy)]
struct Page {
    tgid: u32,
    addr: u64,
    packed: Option<u64>,
}

impl Page {
    #[inline]
    fn new(tgid: u32, addr: u64) -> Self {
        Page {
            tgid,
            addr,
            packed: pagetable::pack(tgid, addr),
        }
    }
}

/// The table slot of a pending refusal that a fault has just answered:
/// logically removed, physically kept until [`Refaults::refused`] reuses
/// it or [`Refaults::release`] frees it (one probe per event, not three).
#[must_use]
#[derive(Debug, Clone, Copy)]
struct Held(Option<usize>);

/// Models at once: their sets and the "no model wanted" set fit a u64.
const MAX_MODELS: usize = 63;

#[derive(Debug, Default, Clone)]
struct RefaultSet {
    tracked: u64,
    untracked: u64,
    refaulted: u64,
    delay_ms: Log2Hist,
}

#[derive(Debug, Clone, Serialize)]
pub struct RefaultReport {
    /// Refusals followed (distinct pages at the time of refusal).
    pub pages: u64,
    /// Of those, faulted again before the end of the window.
    pub refaulted: u64,
    pub refaulted_pct: f64,
    pub delay_ms_p50: Option<u64>,
    pub delay_ms_p90: Option<u64>,
    /// Refusals not followed because the tracking table was full.
    pub untracked: u64,
}

impl Refaults {
    fn new(models: usize) -> Self {
        Refaults {
            table: PageTable::default(),
            wide: FxHashMap::default(),
            sets: vec![RefaultSet::default(); models + 1],
            base_ns: None,
            ts_bits: 64 - (models as u32 + 1),
            slack_ns: BASE_SLACK_NS.min(1 << (64 - (models as u32 + 1)).saturating_sub(4)),
            max_tracked: MAX_TRACKED,
        }
    }

    /// Refusals pending.
    fn len(&self) -> usize {
        self.table.len() + self.wide.len()
    }

    #[inline]
    fn pack_value(&mut self, ts_ns: u64, sets: u64) -> Option<u64> {
        let base = *self
            .base_ns
            .get_or_insert(ts_ns.saturating_sub(self.slack_ns));
        let off = ts_ns.checked_sub(base)?;
        (off >> self.ts_bits == 0).then_some(off | sets << self.ts_bits)
    }

    #[inline]
    fn unpack_value(&self, v: u64) -> (u64, u64) {
        let off = v & ((1 << self.ts_bits) - 1);
        (self.base_ns.unwrap_or(0) + off, v >> self.ts_bits)
    }

    /// A fault on `page`: answers a pending refusal of that page.
    #[inline]
    fn fault(&mut self, page: &Page, ts_ns: u64) -> Held {
        if let Some(i) = page.packed.and_then(|key| self.table.find(key)) {
            let (then, sets) = self.unpack_value(self.table.slot(i)[1]);
            self.answer(then, sets, ts_ns);
            return Held(Some(i));
        }
        if !self.wide.is_empty() {
            if let Some(p) = self.wide.remove(&(page.tgid, page.addr)) {
                self.answer(p.ts_ns, p.sets, ts_ns);
            }
        }
        Held(None)
    }

    #[inline]
    fn answer(&mut self, then_ns: u64, sets: u64, ts_ns: u64) {
        let delay = ts_ns.saturating_sub(then_ns) / 1_000_000;
        for i in Bits(sets) {
            let set = &mut self.sets[i as usize];
            set.refaulted += 1;
            set.delay_ms.add(delay);
        }
    }

    /// Frees the slot of an answered refusal that is not renewed.
    #[inline]
    fn release(&mut self, held: Held) {
        if let Some(i) = held.0 {
            self.table.remove_at(i);
        }
    }

    /// The page was refused by the kernel; `sets` says who wanted it.
    #[inline]
    fn refused(&mut self, held: Held, page: &Page, ts_ns: u64, sets: u64) {
        if sets == 0 {
            self.release(held);
            return;
        }
        // The held entry is already answered: it does not count.
        if self.len() - usize::from(held.0.is_some()) >= self.max_tracked {
            self.release(held);
            for i in Bits(sets) {
                self.sets[i as usize].untracked += 1;
            }
            return;
        }
        match (page.packed, self.pack_value(ts_ns, sets), held.0) {
            (Some(_), Some(v), Some(i)) => self.table.value_mut(i)[0] = v,
            (Some(key), Some(v), None) => self.table.insert([key, v]),
            _ => {
                self.release(held);
                self.wide
                    .insert((page.tgid, page.addr), Pending { ts_ns, sets });
            }
        }
        for i in Bits(sets) {
            self.sets[i as usize].tracked += 1;
        }
    }

    fn report(&self, i: usize) -> RefaultReport {
        let s = &self.sets[i];
        RefaultReport {
            pages: s.tracked,
            refaulted: s.refaulted,
            refaulted_pct: if s.tracked == 0 {
                0.0
            } else {
                100.0 * s.refaulted as f64 / s.tracked as f64
            },
            delay_ms_p50: s.delay_ms.quantile(0.5),
            delay_ms_p90: s.delay_ms.quantile(0.9),
            untracked: s.untracked,
        }
    }
}

/// Iterates the set bits of a mask.
struct Bits(u64);
impl Iterator for Bits {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        if self.0 == 0 {
            return None;
        }
        let b = self.0.trailing_zeros();
        self.0 &= self.0 - 1;
        Some(b)
    }
}

struct ModelState {
    policy: Box<dyn Policy>,
    promote: u64,
    reject: u64,
    /// Few distinct reasons per model: a linear scan beats a map.
    reasons: Vec<(&'static str, u64)>,
    agreement: Agreement,
}

impl ModelState {
    #[inline]
    fn count_reason(&mut self, reason: &'static str) {
        // Policies return the same few literals: compare addresses first,
        // contents (memcmp) only for a literal not seen at this address.
        for (r, n) in self.reasons.iter_mut() {
            if std::ptr::eq(*r, reason) {
                *n += 1;
                return;
            }
        }
        match self.reasons.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += 1,
            None => self.reasons.push((reason, 1)),
        }
    }
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct KernelCounts {
    pub promote: u64,
    pub reject_latency: u64,
    pub reject_rate_limit: u64,
    pub reject_other: u64,
    pub free_space: u64,
    pub migrate_success: u64,
    pub migrate_fail: u64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct ProcessRow {
    pub pid: u32,
    pub comm: String,
    pub hint_faults: u64,
    pub decisions: u64,
    pub kernel_promote: u64,
    pub reject_latency: u64,
    /// Would-promote per model, in model order.
    pub model_promote: Vec<u64>,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct NodePairRow {
    pub src_node: i32,
    pub dst_node: i32,
    pub decisions: u64,
    pub kernel_promote: u64,
    pub model_promote: Vec<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelReport {
    pub name: String,
    pub params: BTreeMap<String, String>,
    pub promote: u64,
    pub reject: u64,
    pub reasons: BTreeMap<&'static str, u64>,
    pub agreement: Agreement,
    pub agreement_pct: f64,
    /// Pages this model wanted and the kernel refused: faulted again later?
    pub refault_after_model_only: RefaultReport,
    pub threshold: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencySample {
    pub latency_ms: u32,
    pub threshold_ms: u32,
    pub promoted: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ShadowReport {
    pub duration_s: f64,
    pub hint_faults: u64,
    pub decisions: u64,
    pub kernel: KernelCounts,
    pub models: Vec<ModelReport>,
    /// Pages the kernel refused and no model wanted: faulted again later?
    pub refault_after_neither: RefaultReport,
    pub latency_threshold_samples: Vec<LatencySample>,
    pub processes: Vec<ProcessRow>,
    pub node_pairs: Vec<NodePairRow>,
    pub drops: u64,
    pub evidence_note: &'static str,
}

pub const EVIDENCE_NOTE: &str = "A refusal followed by another hint fault on the same page means the page was \
still being accessed after the kernel kept it on slow memory: evidence that promoting it would have served later \
accesses from DRAM. It is a lower bound on reuse (a page is seen again only when the scanner re-protects it, so \
accesses between scans are invisible), it cannot show what the promotion would have cost (DRAM pressure, demotions, \
migration bandwidth), and pages refaulting after a promotion by another path are not counted here.";

pub struct Shadow {
    /// Everything the events change, and the events not applied yet. In a
    /// RefCell so that `report(&self)` can first apply the events still in
    /// the lookahead window.
    engine: RefCell<(Engine, Lookahead)>,
    window: Window,
    top_n: usize,
}

/// Events are applied [`LOOKAHEAD`] events after they arrive; on arrival
/// only the cache lines of their per-page state are prefetched. Every
/// event touches a page table too big for the cache, so without this each
/// event would wait for memory in turn; with it the loads of the next
/// events are in flight while one is applied. The order of application is
/// the order of arrival: results are the same as applying each at once.
const LOOKAHEAD: usize = 16;

struct Engine {
    models: Vec<ModelState>,
    kernel: KernelCounts,
    hint_faults: u64,
    decisions: u64,
    refaults: Refaults,
    samples: Vec<LatencySample>,
    sample_stride: u64,
    rejected_seen: u64,
    /// The next `rejected_seen` that is a multiple of `sample_stride`.
    next_sample: u64,
    processes: Rows<u32, ProcessRow>,
    node_pairs: Rows<(i32, i32), NodePairRow>,
    scans: ScanIndex,
}

/// The events arrived and not yet applied, oldest first.
struct Lookahead {
    ring: Box<[Event; LOOKAHEAD]>,
    start: usize,
    len: usize,
}

impl Lookahead {
    fn new() -> Self {
        Lookahead {
            ring: Box::new([Event::Skip(Default::default()); LOOKAHEAD]),
            start: 0,
            len: 0,
        }
    }

    /// Queues `ev`; when the window is full, first applies the oldest
    /// event to `engine` in place (no copy out) and puts `ev` in its slot.
    #[inline]
    fn push(&mut self, ev: &Event, engine: &mut Engine) {
        if self.len == LOOKAHEAD {
            let slot = &mut self.ring[self.start];
            engine.apply(slot);
            *slot = *ev;
            self.start = (self.start + 1) % LOOKAHEAD;
            return;
        }
        self.ring[(self.start + self.len) % LOOKAHEAD] = *ev;
        self.len += 1;
    }

    fn pop(&mut self) -> Option<Event> {
        if self.len == 0 {
            return None;
        }
        let ev = self.ring[self.start];
        self.start = (self.start + 1) % LOOKAHEAD;
        self.len -= 1;
        Some(ev)
    }
}

/// Entries of [`Rows`]' direct-mapped cache of recent lookups.
const ROW_CACHE: usize = 16;

/// Rows by key in first-seen order, with recent lookups cached in a small
/// direct-mapped array (few processes and node pairs are active at once).
#[derive(Debug)]
struct Rows<K, R> {
    rows: Vec<R>,
    index: FxHashMap<K, usize>,
    cache: [Option<(K, usize)>; ROW_CACHE],
}

impl<K: Copy, R> Default for Rows<K, R> {
    fn default() -> Self {
        Rows {
            rows: Vec::new(),
            index: FxHashMap::default(),
            cache: [None; ROW_CACHE],
        }
    }
}

impl<K: Copy + Eq + std::hash::Hash, R> Rows<K, R> {
    /// The row of `key`, made by `new` when first seen; `hint` picks the
    /// cache entry (any value is correct, distinct ones for distinct keys
    /// are faster).
    #[inline]
    fn get(&mut self, key: K, hint: usize, new: impl FnOnce() -> R) -> usize {
        let c = &mut self.cache[hint % ROW_CACHE];
        if let Some((k, i)) = *c {
            if k == key {
                return i;
            }
        }
        let rows = &mut self.rows;
        let i = *self.index.entry(key).or_insert_with(|| {
            rows.push(new());
            rows.len() - 1
        });
        *c = Some((key, i));
        i
    }

    fn len(&self) -> usize {
        self.rows.len()
    }
}

impl Shadow {
    pub fn new(policies: Vec<Box<dyn Policy>>, top_n: usize) -> Self {
        assert!(policies.len() < MAX_MODELS, "at most 63 models at once");
        let refaults = Refaults::new(policies.len());
        Shadow {
            engine: RefCell::new((
                Engine {
                    models: policies
                        .into_iter()
                        .map(|policy| ModelState {
                            policy,
                            promote: 0,
                            reject: 0,
                            reasons: Vec::new(),
                            agreement: Agreement::default(),
                        })
                        .collect(),
                    kernel: KernelCounts::default(),
                    hint_faults: 0,
                    decisions: 0,
                    refaults,
                    samples: Vec::new(),
                    sample_stride: 1,
                    rejected_seen: 0,
                    next_sample: 1,
                    processes: Rows::default(),
                    node_pairs: Rows::default(),
                    scans: ScanIndex::default(),
                },
                Lookahead::new(),
            )),
            window: Window::default(),
            top_n,
        }
    }

    /// The engine with every event received applied.
    fn applied(&self) -> std::cell::RefMut<'_, Engine> {
        let mut e = self.engine.borrow_mut();
        let (engine, ahead) = &mut *e;
        while let Some(ev) = ahead.pop() {
            engine.apply(&ev);
        }
        std::cell::RefMut::map(e, |(engine, _)| engine)
    }

    /// Entries in the engine's per-page and per-process tables (bounded by
    /// distinct pages and processes, never by stream length), and the
    /// slots allocated for pending refusals (16 bytes each).
    pub fn state_sizes(&self) -> BTreeMap<&'static str, usize> {
        let e = self.applied();
        BTreeMap::from([
            ("refused_pages_pending", e.refaults.len()),
            ("refused_pages_slots", e.refaults.table.capacity()),
            ("processes", e.processes.len()),
            ("node_pairs", e.node_pairs.len()),
        ])
    }

    pub fn snapshot(&mut self, s: &Snapshot) {
        self.window.push(s);
    }

    #[inline]
    pub fn event(&mut self, ev: &Event) {
        let ts = ev.ts_ns();
        // Same window rule as the totals: nothing before the first snapshot.
        if self.window.first().is_some_and(|s| ts < s.ts_ns) {
            return;
        }
        if matches!(ev, Event::Skip(_)) {
            return;
        }
        let (engine, ahead) = self.engine.get_mut();
        engine.prefetch(ev);
        ahead.push(ev, engine);
    }

    pub fn report(&self) -> ShadowReport {
        let e = self.applied();
        let drops = self.window.count(Counter::RingDrops);
        let mut processes: Vec<ProcessRow> = e.processes.rows.clone();
        processes.sort_by(|a, b| b.hint_faults.cmp(&a.hint_faults).then(a.pid.cmp(&b.pid)));
        processes.truncate(self.top_n);
        let mut node_pairs: Vec<NodePairRow> = e.node_pairs.rows.clone();
        node_pairs.sort_by_key(|p| (p.src_node, p.dst_node));
        ShadowReport {
            duration_s: self.window.span_ns() as f64 / 1e9,
            hint_faults: e.hint_faults,
            decisions: e.decisions,
            kernel: e.kernel.clone(),
            models: e
                .models
                .iter()
                .enumerate()
                .map(|(i, m)| ModelReport {
                    name: m.policy.name(),
                    params: m.policy.params(),
                    promote: m.promote,
                    reject: m.reject,
                    reasons: m.reasons.iter().copied().collect(),
                    agreement: m.agreement.clone(),
                    agreement_pct: m.agreement.agree_pct(),
                    refault_after_model_only: e.refaults.report(i),
                    threshold: m.policy.threshold(),
                })
                .collect(),
            refault_after_neither: e.refaults.report(e.models.len()),
            latency_threshold_samples: e.samples.clone(),
            processes,
            node_pairs,
            drops,
            evidence_note: EVIDENCE_NOTE,
        }
    }
}

impl Engine {
    /// Starts loading the page state of an event that arrives (it is
    /// applied [`LOOKAHEAD`] events later).
    #[inline]
    fn prefetch(&self, ev: &Event) {
        if let Event::Fault(f) = ev {
            let tgid = (f.pid_tgid >> 32) as u32;
            if let Some(key) = pagetable::pack(tgid, f.addr) {
                self.refaults.table.prefetch(key);
            }
            for m in &self.models {
                m.policy.prefetch(f);
            }
        }
    }

    #[inline]
    fn apply(&mut self, ev: &Event) {
        match ev {
            Event::Fault(f) => self.fault(f),
            Event::Scan(s) => self.scans.record(s),
            Event::Skip(_) => {}
        }
    }

    fn fault(&mut self, f: &FaultEvent) {
        self.hint_faults += 1;
        let tgid = (f.pid_tgid >> 32) as u32;
        let page = Page::new(tgid, f.addr);
        // Every fault may answer an earlier refusal of the same page.
        let held = self.refaults.fault(&page, f.ts_ns);
        let n_models = self.models.len();
        let pi = self.processes.get(tgid, tgid as usize, || ProcessRow {
            pid: tgid,
            model_promote: vec![0; n_models],
            ..ProcessRow::default()
        });
        let proc_row = &mut self.processes.rows[pi];
        proc_row.hint_faults += 1;
        if proc_row.comm.is_empty() {
            proc_row.comm = comm(&f.comm);
        }
        if f.flags & ff::MIGRATE_TRIED != 0 {
            if f.migrate_ok != 0 {
                self.kernel.migrate_success += 1;
            } else {
                self.kernel.migrate_fail += 1;
            }
        }
        let outcome = Outcome::from_u8(f.outcome).unwrap_or(Outcome::NoDecision);
        if matches!(outcome, Outcome::NoDecision | Outcome::NotTiering)
            || f.flags & ff::DECIDED == 0
        {
            self.refaults.release(held);
            return;
        }
        self.decisions += 1;
        proc_row.decisions += 1;
        let kernel_promote = f.decision == 1;
        match outcome {
            Outcome::PromoteHot => self.kernel.promote += 1,
            Outcome::PromoteFreeSpace => {
                self.kernel.promote += 1;
                self.kernel.free_space += 1;
            }
            Outcome::RejectLatency => {
                self.kernel.reject_latency += 1;
                proc_row.reject_latency += 1;
            }
            Outcome::RejectRateLimit => self.kernel.reject_rate_limit += 1,
            _ => self.kernel.reject_other += 1,
        }
        if kernel_promote {
            proc_row.kernel_promote += 1;
        }
        if f.flags & ff::KERNEL_LATENCY != 0 && !kernel_promote {
            self.rejected_seen += 1;
            if self.rejected_seen == self.next_sample {
                self.sample_rejection(f);
            }
        }
        let hint = (f.src_nid as usize) ^ (f.dst_nid as usize) << 2;
        let ni = self
            .node_pairs
            .get((f.src_nid, f.dst_nid), hint, || NodePairRow {
                src_node: f.src_nid,
                dst_node: f.dst_nid,
                model_promote: vec![0; n_models],
                ..NodePairRow::default()
            });
        let pair = &mut self.node_pairs.rows[ni];
        pair.decisions += 1;
        pair.kernel_promote += u64::from(kernel_promote);
        let proc_row = &mut self.processes.rows[pi];
        let view = FaultView {
            latest_scan: self.scans.latest(tgid, f.addr, f.ts_ns),
        };
        let mut wanted = 0u64;
        for (i, m) in self.models.iter_mut().enumerate() {
            let v = m.policy.decide(f, &view);
            m.count_reason(v.reason);
            m.agreement.add(kernel_promote, v.promote);
            if v.promote {
                m.promote += 1;
                proc_row.model_promote[i] += 1;
                pair.model_promote[i] += 1;
                wanted |= 1 << i;
            } else {
                m.reject += 1;
            }
        }
        if kernel_promote {
            self.refaults.release(held);
        } else {
            let sets = if wanted == 0 { 1 << n_models } else { wanted };
            self.refaults.refused(held, &page, f.ts_ns, sets);
        }
    }

    /// Every stride-th rejection, stride doubling as the table fills:
    /// deterministic and spread over the whole run. Called when
    /// `rejected_seen` reaches `next_sample` (no division per event).
    #[cold]
    #[inline(never)]
    fn sample_rejection(&mut self, f: &FaultEvent) {
        if self.samples.len() == MAX_SAMPLES {
            let kept: Vec<LatencySample> =
                self.samples.iter().skip(1).step_by(2).cloned().collect();
            self.samples = kept;
            self.sample_stride *= 2;
        }
        self.samples.push(LatencySample {
            latency_ms: f.kernel_latency_ms,
            threshold_ms: f.threshold_ms,
            promoted: false,
        });
        self.next_sample = (self.rejected_seen / self.sample_stride + 1) * self.sample_stride;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        decode::fixtures::fault,
        model::policy::{build, KernelDefaults, ModelDefaults},
        rng::Rng,
    };

    fn engine(specs: &[&str]) -> Shadow {
        let d = ModelDefaults::default();
        let k = KernelDefaults::default();
        Shadow::new(
            specs
                .iter()
                .map(|s| build(s, &d, &k).expect("model"))
                .collect(),
            10,
        )
    }

    fn stream() -> Vec<Event> {
        // Page 1: refused on latency, then refaults; page 2 promoted;
        // page 3 refused and never seen again.
        let mut a = fault(100, 1, 5000, Outcome::RejectLatency);
        a.scan_seq_mm = 99; // 1 fault since its scan: fault-count says hot
        let b = fault(101, 2, 100, Outcome::PromoteHot);
        let mut c = fault(102, 3, 5000, Outcome::RejectLatency);
        c.scan_seq_mm = 0; // 102 faults since the scan
        let mut a2 = fault(200, 1, 10, Outcome::PromoteHot);
        a2.scan_seq_mm = 199;
        vec![
            Event::Fault(a),
            Event::Fault(b),
            Event::Fault(c),
            Event::Fault(a2),
        ]
    }

    #[test]
    fn agreement_and_refault_evidence() {
        let mut s = engine(&["kernel-time", "fault-count:threshold=50"]);
        for ev in stream() {
            s.event(&ev);
        }
        let r = s.report();
        assert_eq!(r.decisions, 4);
        assert_eq!(r.kernel.promote, 2);
        assert_eq!(r.kernel.reject_latency, 2);
        let kt = &r.models[0];
        assert_eq!(
            (
                kt.agreement.both,
                kt.agreement.neither,
                kt.agreement.model_only,
                kt.agreement.kernel_only
            ),
            (2, 2, 0, 0)
        );
        let fc = &r.models[1];
        // fault-count wants page 1 (model_only) and page 2, 1 refault of page 1.
        assert_eq!(fc.agreement.model_only, 1);
        assert_eq!(fc.refault_after_model_only.pages, 1);
        assert_eq!(fc.refault_after_model_only.refaulted, 1);
        // Page 3 was refused by everyone and never came back.
        assert_eq!(r.refault_after_neither.pages, 1);
        assert_eq!(r.refault_after_neither.refaulted, 0);
        assert_eq!(
            r.processes.first().map(|p| p.comm.as_str()),
            Some("hot-chunks")
        );
    }

    /// The refusal tracking as it was before the packed table: one map
    /// entry per pending refusal, removed by the next fault.
    struct RefRefaults {
        pending: FxHashMap<(u32, u64), (u64, u64)>,
        sets: Vec<(u64, u64, u64, Log2Hist)>,
        max: usize,
    }

    impl RefRefaults {
        fn fault(&mut self, key: (u32, u64), ts: u64) {
            if let Some((then, mask)) = self.pending.remove(&key) {
                for i in Bits(mask) {
                    let s = &mut self.sets[i as usize];
                    s.2 += 1;
                    s.3.add(ts.saturating_sub(then) / 1_000_000);
                }
            }
        }
        fn refused(&mut self, key: (u32, u64), ts: u64, mask: u64) {
            let full = self.pending.len() >= self.max;
            if !full {
                self.pending.insert(key, (ts, mask));
            }
            for i in Bits(mask) {
                let s = &mut self.sets[i as usize];
                if full {
                    s.1 += 1;
                } else {
                    s.0 += 1;
                }
            }
        }
    }

    /// Random faults and refusals, with keys and times that do not pack
    /// (huge tgids, unaligned or huge addresses, times before the base or
    /// beyond the packed range), a full table, and few or many models.
    #[test]
    fn refaults_match_the_plain_map() {
        for (models, max, seed) in [
            (1usize, 1 << 20, 1u64),
            (3, 300, 2),
            (40, 1 << 20, 3),
            (62, 50, 4),
        ] {
            let mut new = Refaults::new(models);
            new.max_tracked = max;
            let mut old = RefRefaults {
                pending: FxHashMap::default(),
                sets: vec![(0, 0, 0, Log2Hist::default()); models + 1],
                max,
            };
            let mut r = Rng::new(0x2545_F491_4F6C_DD1D ^ seed);
            let mut ts = 1u64 << 40;
            let (mut saw_table, mut saw_wide) = (false, false);
            for _ in 0..300_000 {
                ts += r.next_u64() % 3_000_000;
                let t = match r.next_u64() % 100 {
                    0 => ts - (1 << 33),
                    1 => u64::MAX - r.next_u64() % 1000,
                    2 => ts + (1 << 50),
                    _ => ts,
                };
                let tgid = match r.next_u64() % 50 {
                    0 => u32::MAX,
                    1 => 1 << 22,
                    n => (n % 4) as u32,
                };
                let addr = match r.next_u64() % 50 {
                    0 => 0x7f00_0000_0123,
                    1 => !0xfff,
                    _ => 0x7f00_0000_0000 + (r.next_u64() % 600) * 4096,
                };
                let page = Page::new(tgid, addr);
                let held = new.fault(&page, t);
                old.fault((tgid, addr), t);
                if r.next_u64().is_multiple_of(4) {
                    new.release(held);
                } else {
                    let sets = match r.next_u64() % (models as u64 + 2) {
                        0 => 1 << models,
                        _ => (r.next_u64() & ((1 << models) - 1)).max(1),
                    };
                    new.refused(held, &page, t, sets);
                    old.refused((tgid, addr), t, sets);
                }
                assert_eq!(new.len(), old.pending.len());
                saw_table |= !new.table.is_empty();
                saw_wide |= !new.wide.is_empty();
            }
            assert!(saw_wide && (saw_table || models > 60), "{models} models");
            for (i, o) in old.sets.iter().enumerate() {
                let n = &new.sets[i];
                assert_eq!(
                    (n.tracked, n.untracked, n.refaulted),
                    (o.0, o.1, o.2),
                    "set {i}"
                );
                assert_eq!(n.delay_ms, o.3, "set {i}");
            }
        }
    }

    #[test]
    fn replay_is_deterministic() {
        let run = || {
            let mut s = engine(&["kernel-time", "fault-count", "two-touch"]);
            for ev in stream() {
                s.event(&ev);
            }
            serde_json::to_string(&s.report()).expect("json")
        };
        assert_eq!(run(), run());
    }
}
