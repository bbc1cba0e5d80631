//! The shadow evaluation engine: runs several policies beside the kernel on
//! one event stream and reports decisions, agreement and outcome evidence.
//! Pure and deterministic: a replay of a recording gives the live report.
mod procs;
mod refaults;
mod report;
mod verdicts;

use std::{cell::RefCell, collections::BTreeMap};

use rustc_hash::FxHashMap;

use numa_ebpf_common::{Counter, FaultEvent, Outcome, OUTCOMES};

pub use self::report::{
    Agreement, KernelCounts, LatencySample, ModelReport, NodePairRow, PingpongCost, ProcessRow,
    Projected, RefaultReport, ShadowReport, EVIDENCE_NOTE,
};
pub use self::verdicts::FaultVerdicts;
use self::{
    procs::Processes,
    refaults::{Page, Refaults, MAX_MODELS},
};
use super::{
    lifecycle::Lifecycle,
    pagetable,
    policy::{Decision, FaultView, Policy, PolicyBank, Step},
    window::Window,
};
use crate::{
    decode::{comm, Event, Snapshot},
    mapplan::MapPlan,
    sampling::{SampledShadow, Sampling},
};

/// (latency, threshold) samples kept, like the RFC's first table.
const MAX_SAMPLES: usize = 32;

/// Node pairs with rows of their own (a kernel has at most 1024 nodes, and
/// a real run a handful of pairs); past it, as only a crafted trace gets,
/// the rest share one row whose nodes are [`OTHER_NODE_PAIRS`].
const MAX_NODE_PAIRS: usize = 4096;
pub const OTHER_NODE_PAIRS: (i32, i32) = (i32::MIN, i32::MIN);

/// A model's counts; its policy is the one at the same place in the
/// engine's [`PolicyBank`].
struct ModelState {
    /// The distinct verdicts given so far, with how often: every count
    /// the report shows of a model is a sum over these, so a decision
    /// costs one small search and two additions.
    tallies: Vec<Tally>,
    /// Agreement on the faults whose folio was stamped by another
    /// process's scan (a shared folio): what the fault-count patch
    /// computes there differs most from what a per-process count means.
    stamped_elsewhere: Agreement,
    pingpong: PingpongCost,
}

/// How often a model gave one decision.
struct Tally {
    decision: Decision,
    /// Faults (folios), by the kernel's decision: `[refused, promoted]`.
    faults: [u64; 2],
    /// Their pages ([`FaultEvent::pages`]), the same way.
    pages: [u64; 2],
}

impl ModelState {
    #[inline]
    fn tally(&mut self, v: Decision, kernel_promote: bool, pages: u64) {
        // Policies return the same few constants: compare the reason's
        // address first, its contents (memcmp) only for a decision not seen
        // at this address.
        let same = |t: &&mut Tally| {
            std::ptr::eq(t.decision.reason, v.reason)
                && t.decision.promote == v.promote
                && t.decision.step == v.step
        };
        let t = match self.tallies.iter_mut().find(same) {
            Some(t) => t,
            None => self.new_tally(v),
        };
        t.faults[usize::from(kernel_promote)] += 1;
        t.pages[usize::from(kernel_promote)] += pages;
    }

    #[cold]
    fn new_tally(&mut self, v: Decision) -> &mut Tally {
        let i = match self.tallies.iter().position(|t| t.decision == v) {
            Some(i) => i,
            None => {
                self.tallies.push(Tally {
                    decision: v,
                    faults: [0; 2],
                    pages: [0; 2],
                });
                self.tallies.len() - 1
            }
        };
        &mut self.tallies[i]
    }

    /// The model's part of the report, summed over its verdicts.
    fn counts(&self) -> ModelCounts {
        let mut c = ModelCounts::default();
        for t in &self.tallies {
            let v = &t.decision;
            let [refused, promoted] = t.faults;
            let [refused_pages, promoted_pages] = t.pages;
            let (n, pages) = (refused + promoted, refused_pages + promoted_pages);
            *c.reasons.entry(v.reason).or_default() += n;
            *c.reasons_pages.entry(v.reason).or_default() += pages;
            c.agreement.count(true, v.promote, promoted, promoted_pages);
            c.agreement.count(false, v.promote, refused, refused_pages);
            let p = &mut c.projected;
            if v.promote {
                c.promote += n;
                p.promote_pages += pages;
            } else {
                c.reject += n;
                c.reject_pages += pages;
            }
            if v.candidate() {
                p.candidate_folios += n;
                p.candidate_pages += pages;
            }
            let rejected = match v.step {
                Step::Threshold => Some((&mut p.reject_threshold, &mut p.reject_threshold_pages)),
                Step::RateLimit => Some((&mut p.reject_rate_limit, &mut p.reject_rate_limit_pages)),
                Step::FreeSpace | Step::Promoted | Step::Other => None,
            };
            if let Some((folios, in_pages)) = rejected {
                *folios += n;
                *in_pages += pages;
            }
        }
        c
    }
}

/// A model's counts in folios, with their pages beside.
#[derive(Default)]
struct ModelCounts {
    promote: u64,
    reject: u64,
    reject_pages: u64,
    reasons: BTreeMap<&'static str, u64>,
    reasons_pages: BTreeMap<&'static str, u64>,
    agreement: Agreement,
    projected: Projected,
}

pub struct Shadow {
    /// Everything the events change, and the events not applied yet. In a
    /// RefCell so that `report(&self)` can first apply the events still in
    /// the lookahead window.
    engine: RefCell<(Engine, Lookahead)>,
    window: Window,
    top_n: usize,
    /// The run's per-folio plan and the kernel's figure for its maps.
    map: Option<(MapPlan, u64)>,
}

/// Events are applied [`LOOKAHEAD`] events after they arrive; on arrival
/// only the cache lines of their per-page state are prefetched. Every
/// event touches a page table too big for the cache, so without this each
/// event would wait for memory in turn; with it the loads of the next
/// events are in flight while one is applied. The order of application is
/// the order of arrival: results are the same as applying each at once.
const LOOKAHEAD: usize = 16;

struct Engine {
    /// The policies and the scan index they read.
    bank: PolicyBank,
    /// Each policy's counts, in the bank's order.
    models: Vec<ModelState>,
    /// The migration counts; the outcome counts are in `outcomes`.
    kernel: KernelCounts,
    /// Decided faults by outcome (`Outcome as usize`): folios, and their
    /// pages.
    outcomes: [u64; OUTCOMES],
    outcome_pages: [u64; OUTCOMES],
    hint_faults: u64,
    hint_fault_pages: u64,
    decisions: u64,
    decision_pages: u64,
    /// Of `decisions`, those on folios per-folio sampling does not follow:
    /// counted for the kernel, not judged by the models.
    unfollowed: u64,
    unfollowed_pages: u64,
    refaults: Refaults,
    samples: Vec<LatencySample>,
    sample_stride: u64,
    rejected_seen: u64,
    /// The next `rejected_seen` that is a multiple of `sample_stride`.
    next_sample: u64,
    processes: Processes,
    node_pairs: Rows<(i32, i32), NodePairRow>,
    /// Promotions followed to the demotion that undoes them, each tagged
    /// with the models that would have made it ([`JUDGED`] set when the
    /// models were asked).
    lifecycle: Lifecycle,
    /// Nodes of the top tier (bit per node).
    toptier_mask: u64,
}

/// The lifecycle tag bit of a promotion the models judged (bits below it:
/// the models that would have promoted).
const JUDGED: u64 = 1 << 63;

/// The events arrived and not yet applied, oldest first.
struct Lookahead {
    ring: Box<[Event; LOOKAHEAD]>,
    /// The packed page key of each fault in `ring` (same index; 0 when
    /// it does not pack): packed once, for the prefetch, not again.
    keys: [u64; LOOKAHEAD],
    start: usize,
    len: usize,
}

impl Lookahead {
    fn new() -> Self {
        Lookahead {
            ring: Box::new([Event::Skip(Default::default()); LOOKAHEAD]),
            keys: [0; LOOKAHEAD],
            start: 0,
            len: 0,
        }
    }

    /// Queues `ev`; when the window is full, first applies the oldest
    /// event to `engine` in place (no copy out) and puts `ev` in its slot.
    #[inline]
    fn push(&mut self, ev: &Event, key: u64, engine: &mut Engine) {
        if self.len == LOOKAHEAD {
            let slot = &mut self.ring[self.start];
            engine.apply(slot, self.keys[self.start]);
            *slot = *ev;
            self.keys[self.start] = key;
            self.start = (self.start + 1) % LOOKAHEAD;
            return;
        }
        let i = (self.start + self.len) % LOOKAHEAD;
        self.ring[i] = *ev;
        self.keys[i] = key;
        self.len += 1;
    }

    fn pop(&mut self) -> Option<(Event, u64)> {
        if self.len == 0 {
            return None;
        }
        let ev = (self.ring[self.start], self.keys[self.start]);
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

/// Models one engine runs at once: each has its set of refusals, and the
/// sets with the "no model wanted" set fit one u64 mask. Commands check it
/// where they read their command line.
pub const MAX_POLICIES: usize = MAX_MODELS - 1;

impl Shadow {
    pub fn new(policies: Vec<Box<dyn Policy>>, top_n: usize) -> Self {
        assert!(
            policies.len() <= MAX_POLICIES,
            "the command line lets through at most MAX_POLICIES models"
        );
        let refaults = Refaults::new(policies.len());
        Shadow {
            engine: RefCell::new((
                Engine {
                    models: (0..policies.len())
                        .map(|_| ModelState {
                            tallies: Vec::new(),
                            stamped_elsewhere: Agreement::default(),
                            pingpong: PingpongCost::default(),
                        })
                        .collect(),
                    bank: PolicyBank::new(policies),
                    kernel: KernelCounts::default(),
                    outcomes: [0; OUTCOMES],
                    outcome_pages: [0; OUTCOMES],
                    hint_faults: 0,
                    hint_fault_pages: 0,
                    decisions: 0,
                    decision_pages: 0,
                    unfollowed: 0,
                    unfollowed_pages: 0,
                    refaults,
                    samples: Vec::new(),
                    sample_stride: 1,
                    rejected_seen: 0,
                    next_sample: 1,
                    processes: Processes::new(top_n),
                    node_pairs: Rows::default(),
                    lifecycle: Lifecycle::default(),
                    toptier_mask: 1,
                },
                Lookahead::new(),
            )),
            window: Window::default(),
            map: None,
            top_n,
        }
    }

    /// The engine with every event received applied.
    fn applied(&self) -> std::cell::RefMut<'_, Engine> {
        let mut e = self.engine.borrow_mut();
        let (engine, ahead) = &mut *e;
        while let Some((ev, key)) = ahead.pop() {
            engine.apply(&ev, key);
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
            ("refused_pages_slots", e.refaults.capacity()),
            ("processes", e.processes.len().0),
            ("processes_gone_kept", e.processes.len().1),
            ("node_pairs", e.node_pairs.len()),
            ("scan_index_entries", e.bank.scan_index_len().0),
            ("scan_index_processes", e.bank.scan_index_len().1),
        ])
    }

    pub fn snapshot(&mut self, s: &Snapshot) {
        self.window.push(s);
    }

    /// The top tier's nodes (bit per node; node 0 unless told): a
    /// promotion moves a folio into them.
    /// The source's header: see [`Lifecycle::set_top_tier`].
    pub fn header(&mut self, h: &crate::trace::Header) {
        self.engine.get_mut().0.lifecycle.set_top_tier(h);
    }

    pub fn set_toptier_mask(&mut self, mask: u64) {
        self.engine.get_mut().0.toptier_mask = mask;
    }

    #[inline]
    pub fn event(&mut self, ev: &Event) {
        let ts = ev.ts_ns();
        // Same window rule as the totals: nothing before the first snapshot.
        if self.window.first().is_some_and(|s| ts < s.ts_ns) {
            return;
        }
        // Neither is an input of the models: no place in the lookahead.
        if matches!(ev, Event::Skip(_) | Event::Damon(_)) {
            return;
        }
        let (engine, ahead) = self.engine.get_mut();
        let key = engine.prefetch(ev);
        ahead.push(ev, key, engine);
    }

    /// States the per-folio sampling of the run in every report (its plan
    /// and the kernel's figure for all maps), with each model's error.
    pub fn set_map_plan(&mut self, plan: Option<&MapPlan>, map_bytes: u64) {
        self.map = plan.map(|p| (p.clone(), map_bytes));
    }

    fn sampling(&self, models: &[ModelReport], judged: u64) -> Option<SampledShadow> {
        let (plan, map_bytes) = self.map.as_ref()?;
        let s = Sampling::new(plan, *map_bytes, self.window.count(Counter::StampInserts));
        let per_folio = judged as f64 / s.folios.max(1) as f64;
        Some(SampledShadow {
            agreement_pct_error: models
                .iter()
                .map(|m| 100.0 * s.fraction_error(m.agreement_pct / 100.0))
                .collect(),
            projected_all: models
                .iter()
                .map(|m| s.scale(m.projected.promote_pages, per_folio))
                .collect(),
            sampling: s,
        })
    }

    pub fn report(&self) -> ShadowReport {
        let e = self.applied();
        let drops = self.window.count(Counter::RingDrops);
        let mut processes: Vec<ProcessRow> = e.processes.rows();
        processes.sort_by(|a, b| b.hint_faults.cmp(&a.hint_faults).then(a.pid.cmp(&b.pid)));
        processes.truncate(self.top_n);
        let mut node_pairs: Vec<NodePairRow> = e.node_pairs.rows.clone();
        node_pairs.sort_by_key(|p| (p.src_node, p.dst_node));
        let mut r = ShadowReport {
            duration_s: self.window.span_ns() as f64 / 1e9,
            hint_faults: e.hint_faults,
            hint_fault_pages: e.hint_fault_pages,
            decisions: e.decisions,
            decision_pages: e.decision_pages,
            judged_decisions: e.decisions - e.unfollowed,
            judged_decision_pages: e.decision_pages - e.unfollowed_pages,
            sampling: None,
            kernel: e.kernel.with_outcomes(&e.outcomes, &e.outcome_pages),
            models: e
                .models
                .iter()
                .zip(e.bank.policies())
                .enumerate()
                .map(|(i, (m, policy))| {
                    let c = m.counts();
                    ModelReport {
                        name: policy.name(),
                        params: policy.params(),
                        promote: c.promote,
                        reject: c.reject,
                        reject_pages: c.reject_pages,
                        reasons: super::named(c.reasons),
                        reasons_pages: super::named(c.reasons_pages),
                        agreement_pct: c.agreement.agree_pct(),
                        agreement_pages_pct: c.agreement.agree_pages_pct(),
                        agreement: c.agreement,
                        agreement_stamped_elsewhere: m.stamped_elsewhere.clone(),
                        refault_after_model_only: e.refaults.report(i),
                        threshold: policy.threshold(),
                        projected: c.projected,
                        pingpong: m.pingpong,
                    }
                })
                .collect(),
            refault_after_neither: e.refaults.report(e.models.len()),
            latency_threshold_samples: e.samples.clone(),
            processes,
            node_pairs,
            drops,
            evidence_note: EVIDENCE_NOTE.into(),
            lifecycle: e.lifecycle.report(),
        };
        r.sampling = self.sampling(&r.models, r.judged_decisions);
        r
    }
}

/// A process's row before its first fault: a count per model.
fn process_row(pid: u32, models: usize) -> ProcessRow {
    ProcessRow {
        pid,
        model_promote: vec![0; models],
        model_promote_pages: vec![0; models],
        model_promote_refused: vec![0; models],
        model_promote_refused_pages: vec![0; models],
        ..ProcessRow::default()
    }
}

// The counting below adds 0 or 1 instead of branching: outcomes and
// verdicts vary from fault to fault without a pattern, so a branch per
// count is a misprediction every few faults. Outcomes are counted by
// outcome, one addition a fault, and summed into the kernel's counts
// for a report.
impl KernelCounts {
    #[inline]
    fn count_migration(&mut self, f: &FaultEvent) {
        let (success, fail) = (u64::from(f.migrated()), u64::from(f.migrate_failed()));
        self.migrate_success += success;
        self.migrate_fail += fail;
        self.migrate_success_pages += success * f.pages();
        self.migrate_fail_pages += fail * f.pages();
    }

    /// The counts with the outcomes of the decided faults (`NoDecision`
    /// and `NotTiering` never counted), by `Outcome as usize`: folios and
    /// their pages.
    fn with_outcomes(&self, n: &[u64; OUTCOMES], pages: &[u64; OUTCOMES]) -> KernelCounts {
        let [promote, free_space, latency, rate, other] = by_decision(n);
        let [promote_p, free_space_p, latency_p, rate_p, other_p] = by_decision(pages);
        KernelCounts {
            promote,
            promote_pages: promote_p,
            free_space,
            free_space_pages: free_space_p,
            reject_latency: latency,
            reject_latency_pages: latency_p,
            reject_rate_limit: rate,
            reject_rate_limit_pages: rate_p,
            reject_other: other,
            reject_other_pages: other_p,
            ..self.clone()
        }
    }
}

/// Counts by outcome summed as the report shows them: `[promote, of those
/// by free space, reject latency, reject rate limit, reject other]`.
fn by_decision(n: &[u64; OUTCOMES]) -> [u64; 5] {
    let at = |o: Outcome| n[o as usize];
    let (hot, free) = (at(Outcome::PromoteHot), at(Outcome::PromoteFreeSpace));
    let (latency, rate) = (at(Outcome::RejectLatency), at(Outcome::RejectRateLimit));
    let other = n.iter().sum::<u64>() - (hot + free + latency + rate);
    [hot + free, free, latency, rate, other]
}

impl Engine {
    /// Starts loading the page state of an event that arrives (it is
    /// applied [`LOOKAHEAD`] events later). Returns the packed page key
    /// of a fault, 0 for other events and keys that do not pack.
    #[inline]
    fn prefetch(&self, ev: &Event) -> u64 {
        let Event::Fault(f) = ev else {
            return 0;
        };
        let tgid = f.tgid();
        let Some(key) = pagetable::pack(tgid, f.addr) else {
            return 0;
        };
        self.refaults.prefetch(key);
        self.bank.prefetch(key);
        key
    }

    /// Applies `ev`; `key` is what [`prefetch`](Self::prefetch) returned.
    #[inline]
    fn apply(&mut self, ev: &Event, key: u64) {
        match ev {
            Event::Fault(f) => {
                self.fault(f, key);
                if let Some(gone) = self.processes.take_gone() {
                    self.refaults.forget(&gone);
                }
            }
            Event::Scan(s) => self.bank.scan(s),
            Event::Demote(d) => self.demote(d),
            // The models replay NUMA balancing's inputs; DAMON is none.
            Event::Skip(_) | Event::Damon(_) => {}
        }
    }

    /// A demotion that undid a promotion the models judged: each model
    /// would have made it too, or avoided it.
    fn demote(&mut self, d: &numa_ebpf_common::DemoteEvent) {
        let Some(pp) = self.lifecycle.demote(d) else {
            return;
        };
        if pp.tag & JUDGED == 0 {
            return;
        }
        for (i, m) in self.models.iter_mut().enumerate() {
            let shared = pp.tag >> i & 1 == 1;
            m.pingpong.shared += pp.weight * u64::from(shared);
            m.pingpong.avoided += pp.weight * u64::from(!shared);
        }
    }

    fn fault(&mut self, f: &FaultEvent, key: u64) {
        let tag = self.judge_fault(f, key);
        self.lifecycle.fault_tagged(f, self.toptier_mask, tag);
    }

    /// Counts `f` and asks the models about it; the lifecycle tag of its
    /// promotion (0 when the models were not asked).
    fn judge_fault(&mut self, f: &FaultEvent, key: u64) -> u64 {
        let pages = f.pages();
        self.hint_faults += 1;
        self.hint_fault_pages += pages;
        let tgid = f.tgid();
        let page = Page::packed_as(tgid, f.addr, key);
        // Every fault may answer an earlier refusal of the same page.
        let held = self.refaults.fault(&page, f.ts_ns, pages);
        let view = self.bank.view(f);
        let n_models = self.models.len();
        let pi = self
            .processes
            .get(tgid, f.ts_ns, || process_row(tgid, n_models));
        let proc_row = self.processes.row(pi);
        proc_row.hint_faults += 1;
        proc_row.hint_fault_pages += pages;
        if proc_row.comm.is_empty() {
            proc_row.comm = comm(&f.comm);
        }
        self.kernel.count_migration(f);
        if !PolicyBank::asks(f) {
            self.refaults.release(held);
            return 0;
        }
        let kernel_promote = f.kernel_promoted();
        self.count_decision(f, pi, kernel_promote);
        if !PolicyBank::judges(f) {
            self.unfollowed += 1;
            self.unfollowed_pages += pages;
            self.refaults.release(held);
            return 0;
        }
        let rejected = f.has_kernel_latency() && !kernel_promote;
        self.rejected_seen += u64::from(rejected);
        // `next_sample` is always past the count before this fault, so
        // only a fault that counted can reach it.
        if self.rejected_seen == self.next_sample {
            self.sample_rejection(f);
        }
        let wanted = self.decide(f, view, key, pi, kernel_promote);
        if kernel_promote {
            self.refaults.release(held);
        } else {
            let sets = if wanted == 0 { 1 << n_models } else { wanted };
            self.refaults.refused(held, &page, f.ts_ns, sets, pages);
        }
        JUDGED | wanted
    }

    /// Counts the kernel's decision on `f` in the totals and in the
    /// process row `pi`: folios, and their pages.
    #[inline]
    fn count_decision(&mut self, f: &FaultEvent, pi: usize, kernel_promote: bool) {
        let pages = f.pages();
        let outcome = f.typed_outcome();
        self.decisions += 1;
        self.decision_pages += pages;
        self.outcomes[outcome as usize] += 1;
        self.outcome_pages[outcome as usize] += pages;
        let latency = u64::from(outcome == Outcome::RejectLatency);
        let promote = u64::from(kernel_promote);
        let row = self.processes.row(pi);
        row.decisions += 1;
        row.decision_pages += pages;
        row.reject_latency += latency;
        row.reject_latency_pages += latency * pages;
        row.kernel_promote += promote;
        row.kernel_promote_pages += promote * pages;
    }

    /// Asks every model about a fault the kernel decided on and counts the
    /// answers against the kernel's, in the process row `pi` and the
    /// fault's node pair. Returns the set of models that wanted to promote
    /// (bit `i` = model `i`).
    #[inline]
    fn decide(
        &mut self,
        f: &FaultEvent,
        view: FaultView,
        key: u64,
        pi: usize,
        kernel_promote: bool,
    ) -> u64 {
        let n = self.models.len();
        let mut pair_key = (f.src_nid, f.dst_nid);
        if self.node_pairs.len() >= MAX_NODE_PAIRS && !self.node_pairs.index.contains_key(&pair_key)
        {
            pair_key = OTHER_NODE_PAIRS;
        }
        let (src, dst) = pair_key;
        let hint = (src as usize) ^ (dst as usize) << 2;
        let ni = self.node_pairs.get(pair_key, hint, || NodePairRow {
            src_node: src,
            dst_node: dst,
            model_promote: vec![0; n],
            model_promote_pages: vec![0; n],
            ..NodePairRow::default()
        });
        let pages = f.pages();
        let promote = u64::from(kernel_promote);
        let pair = &mut self.node_pairs.rows[ni];
        pair.decisions += 1;
        pair.decision_pages += pages;
        pair.kernel_promote += promote;
        pair.kernel_promote_pages += promote * pages;
        let row = self.processes.row(pi);
        // Every row is made with one count per model: sliced to `n`, the
        // loop below indexes them without a bounds check per model.
        let models = &mut self.models[..n];
        let row_promote = &mut row.model_promote[..n];
        let row_promote_pages = &mut row.model_promote_pages[..n];
        let row_refused = &mut row.model_promote_refused[..n];
        let row_refused_pages = &mut row.model_promote_refused_pages[..n];
        let pair_promote = &mut pair.model_promote[..n];
        let pair_promote_pages = &mut pair.model_promote_pages[..n];
        let stamped_elsewhere = f.stamp_other_mm();
        let mut wanted = 0u64;
        let answers = self.bank.answers(f, view, key);
        for (i, (m, a)) in models.iter_mut().zip(answers).enumerate() {
            m.tally(a.decision, a.kernel, pages);
            if stamped_elsewhere {
                m.stamped_elsewhere.count(a.kernel, a.promote(), 1, pages);
            }
            let p = u64::from(a.promote());
            let added = u64::from(a.adds());
            row_promote[i] += p;
            row_promote_pages[i] += p * pages;
            row_refused[i] += added;
            row_refused_pages[i] += added * pages;
            pair_promote[i] += p;
            pair_promote_pages[i] += p * pages;
            wanted |= p << i;
        }
        wanted
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
    };
    use numa_ebpf_common::fault_flags as ff;

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

    /// A crafted trace with more node pairs than any machine: the rows
    /// stay bounded and the overflow shares one.
    #[test]
    fn node_pairs_past_the_bound_share_one_row() {
        let mut s = engine(&["kernel-time"]);
        let n = MAX_NODE_PAIRS as u64 + 100;
        for i in 0..n {
            let mut f = fault(100 + i, i % 64, 5000, Outcome::RejectLatency);
            f.src_nid = i as i32;
            s.event(&Event::Fault(f));
        }
        let r = s.report();
        assert_eq!(r.node_pairs.len(), MAX_NODE_PAIRS + 1);
        let other = r
            .node_pairs
            .iter()
            .find(|p| (p.src_node, p.dst_node) == OTHER_NODE_PAIRS);
        assert_eq!(other.map(|p| p.decisions), Some(100));
    }

    #[test]
    fn agreement_and_refault_evidence() {
        let mut s = engine(&["kernel-time", "fault-count:exact,threshold=50"]);
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
        // Per process, what each model would add to the kernel's promotions.
        let p = &r.processes[0];
        assert_eq!(p.model_promote_refused, vec![0, fc.agreement.model_only]);
    }

    #[test]
    fn models_project_the_kernels_counters() {
        let mut s = engine(&["kernel-time", "fault-count:threshold=150"]);
        for ev in stream() {
            s.event(&ev);
        }
        let mut free = fault(300, 4, 0, Outcome::PromoteFreeSpace);
        free.nr_pages = 512;
        s.event(&Event::Fault(free));
        let r = s.report();
        // kernel-time: pages 1 and 3 over 1000 ms, page 2 and page 1's
        // refault promoted as candidates, the THP by the free-space path.
        let kt = &r.models[0].projected;
        assert_eq!(
            (
                kt.promote_pages,
                kt.candidate_pages,
                kt.reject_threshold,
                kt.reject_rate_limit
            ),
            (2 + 512, 2, 2, 0)
        );
        // fault-count (the patch): counts below 2^16 compare whole, so
        // only the faults with a count under 150 pass (100, 101, 102).
        let fc = &r.models[1].projected;
        assert_eq!(
            (fc.promote_pages, fc.candidate_pages, fc.reject_threshold),
            (3 + 512, 3, 1)
        );
    }

    /// Each outcome lands in the kernel's counts, the undecided ones in
    /// none; a page whose key does not pack (no key kept beside it in the
    /// lookahead) is followed after a refusal as any other.
    #[test]
    fn outcomes_count_and_unpacked_pages_are_followed() {
        let mut s = engine(&["kernel-time"]);
        let mut seq = 100;
        for o in Outcome::ALL {
            for unaligned in [0, 1] {
                let mut f = fault(seq, seq, 5000, o);
                f.addr += unaligned;
                s.event(&Event::Fault(f));
                seq += 1;
            }
        }
        // Page 105 (unaligned) was refused on latency: it faults again.
        let mut again = fault(seq, 105, 10, Outcome::PromoteHot);
        again.addr += 1;
        s.event(&Event::Fault(again));
        let r = s.report();
        let k = &r.kernel;
        assert_eq!((r.hint_faults, r.decisions), (15, 11));
        assert_eq!(
            (
                k.promote,
                k.free_space,
                k.reject_latency,
                k.reject_rate_limit,
                k.reject_other
            ),
            (5, 2, 2, 2, 2)
        );
        let n = &r.refault_after_neither;
        assert_eq!((n.pages, n.refaulted), (6, 1));
    }

    /// A THP decision is one folio of 512 pages: every figure counts it
    /// once in folios and 512 times in pages, beside 4 KiB folios counted
    /// once in both.
    #[test]
    fn folios_and_pages_are_counted_apart() {
        let mut s = engine(&["kernel-time", "fault-count:exact,threshold=50"]);
        let thp = |mut f: FaultEvent| {
            f.nr_pages = 512;
            f
        };
        let mut migrated = thp(fault(100, 1, 100, Outcome::PromoteHot));
        let mut failed = fault(101, 2, 100, Outcome::PromoteHot);
        for (f, ok) in [(&mut migrated, 1), (&mut failed, 0)] {
            f.flags |= ff::MIGRATE_TRIED;
            f.migrate_ok = ok;
        }
        // kernel-time refuses what the kernel promoted: over its 1000 ms.
        let kernel_only = thp(fault(102, 3, 5000, Outcome::PromoteHot));
        // fault-count wants the THP the kernel refused (3 faults since
        // its scan), not the small page (104 since).
        let refused = thp(fault(103, 4, 5000, Outcome::RejectLatency));
        let mut small_refused = fault(104, 5, 5000, Outcome::RejectLatency);
        small_refused.scan_seq_mm = 0;
        let not_tiering = thp(fault(105, 6, 0, Outcome::NotTiering));
        let refault = thp(fault(200, 4, 10, Outcome::PromoteHot));
        for f in [
            migrated,
            failed,
            kernel_only,
            refused,
            small_refused,
            not_tiering,
            refault,
        ] {
            s.event(&Event::Fault(f));
        }
        let r = s.report();
        assert_eq!((r.hint_faults, r.hint_fault_pages), (7, 5 * 512 + 2));
        assert_eq!((r.decisions, r.decision_pages), (6, 4 * 512 + 2));
        assert_eq!((r.judged_decisions, r.judged_decision_pages), (6, 2050));
        let k = &r.kernel;
        assert_eq!((k.promote, k.promote_pages), (4, 3 * 512 + 1));
        assert_eq!((k.reject_latency, k.reject_latency_pages), (2, 513));
        assert_eq!((k.migrate_success, k.migrate_success_pages), (1, 512));
        assert_eq!((k.migrate_fail, k.migrate_fail_pages), (1, 1));
        let kt = &r.models[0];
        let a = &kt.agreement;
        assert_eq!((a.both, a.both_pages), (3, 1025));
        assert_eq!((a.kernel_only, a.kernel_only_pages), (1, 512));
        assert_eq!((a.neither, a.neither_pages), (2, 513));
        assert_eq!((kt.reject, kt.reject_pages), (3, 1025));
        assert_eq!(kt.reasons_pages.values().sum::<u64>(), 2050);
        assert!((kt.agreement_pct - 500.0 / 6.0).abs() < 1e-9);
        assert!((kt.agreement_pages_pct - 100.0 * 1538.0 / 2050.0).abs() < 1e-9);
        let p = &kt.projected;
        assert_eq!((kt.promote, p.promote_pages), (3, 1025));
        assert_eq!((p.reject_threshold, p.reject_threshold_pages), (3, 1025));
        assert_eq!((p.candidate_folios, p.candidate_pages), (3, 1025));
        // The refused THP that faulted again: one folio, 512 pages.
        let fc = &r.models[1].refault_after_model_only;
        assert_eq!((fc.pages, fc.followed_pages), (1, 512));
        assert_eq!((fc.refaulted, fc.refaulted_pages), (1, 512));
        let n = &r.refault_after_neither;
        assert_eq!((n.pages, n.followed_pages, n.refaulted_pages), (1, 1, 0));
        let row = &r.processes[0];
        assert_eq!((row.hint_faults, row.hint_fault_pages), (7, 2562));
        assert_eq!((row.kernel_promote, row.kernel_promote_pages), (4, 1537));
        assert_eq!((row.reject_latency, row.reject_latency_pages), (2, 513));
        assert_eq!(row.model_promote_pages[0], 1025);
        assert_eq!(row.model_promote_refused, vec![0, 1]);
        assert_eq!(row.model_promote_refused_pages, vec![0, 512]);
        let pair = &r.node_pairs[0];
        assert_eq!((pair.decisions, pair.decision_pages), (6, 2050));
        assert_eq!((pair.kernel_promote, pair.kernel_promote_pages), (4, 1537));
        assert_eq!(pair.model_promote_pages[0], 1025);
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
