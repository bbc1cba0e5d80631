//! The shadow evaluation engine: runs several policies beside the kernel on
//! one event stream and reports decisions, agreement and outcome evidence.
//! Pure and deterministic: a replay of a recording gives the live report.
use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use numa_ebpf_common::{fault_flags as ff, Counter, FaultEvent, Outcome};
use serde::Serialize;

use super::{
    hist::Log2Hist,
    policy::{FaultView, Policy},
    scans::ScanIndex,
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
/// One entry per refused page for all models at once: `mask` bit `i` = model
/// `i` wanted it, bit [`NEITHER`] = no model wanted it.
#[derive(Debug, Default)]
struct Refaults {
    pending: FxHashMap<(u32, u64), Pending>,
    sets: Vec<RefaultSet>,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    ts_ns: u64,
    mask: u64,
}

/// Bit of the "kernel refused, no model wanted" set.
const NEITHER: u32 = 63;

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
            pending: FxHashMap::default(),
            sets: vec![RefaultSet::default(); models + 1],
        }
    }

    fn set_index(&self, bit: u32) -> usize {
        if bit == NEITHER {
            self.sets.len() - 1
        } else {
            bit as usize
        }
    }

    /// The page was refused by the kernel; `mask` says who wanted it.
    fn refused(&mut self, key: (u32, u64), ts_ns: u64, mask: u64) {
        if mask == 0 {
            return;
        }
        if self.pending.len() >= MAX_TRACKED {
            for bit in Bits(mask) {
                let i = self.set_index(bit);
                self.sets[i].untracked += 1;
            }
            return;
        }
        self.pending.insert(key, Pending { ts_ns, mask });
        for bit in Bits(mask) {
            let i = self.set_index(bit);
            self.sets[i].tracked += 1;
        }
    }

    /// A fault on `key`: answers a pending refusal of that page.
    fn fault(&mut self, key: (u32, u64), ts_ns: u64) {
        if self.pending.is_empty() {
            return;
        }
        if let Some(p) = self.pending.remove(&key) {
            let delay = ts_ns.saturating_sub(p.ts_ns) / 1_000_000;
            for bit in Bits(p.mask) {
                let i = self.set_index(bit);
                let set = &mut self.sets[i];
                set.refaulted += 1;
                set.delay_ms.add(delay);
            }
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
    models: Vec<ModelState>,
    kernel: KernelCounts,
    hint_faults: u64,
    decisions: u64,
    refaults: Refaults,
    samples: Vec<LatencySample>,
    sample_stride: u64,
    rejected_seen: u64,
    processes: FxHashMap<u32, ProcessRow>,
    node_pairs: FxHashMap<(i32, i32), NodePairRow>,
    scans: ScanIndex,
    first: Option<Snapshot>,
    last: Option<Snapshot>,
    top_n: usize,
}

impl Shadow {
    pub fn new(policies: Vec<Box<dyn Policy>>, top_n: usize) -> Self {
        assert!(
            policies.len() < NEITHER as usize,
            "at most 63 models at once"
        );
        let refaults = Refaults::new(policies.len());
        Shadow {
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
            processes: FxHashMap::default(),
            node_pairs: FxHashMap::default(),
            scans: ScanIndex::default(),
            first: None,
            last: None,
            top_n,
        }
    }

    /// Entries in the engine's per-page and per-process tables (bounded by
    /// distinct pages and processes, never by stream length).
    pub fn state_sizes(&self) -> BTreeMap<&'static str, usize> {
        BTreeMap::from([
            ("refused_pages_pending", self.refaults.pending.len()),
            ("processes", self.processes.len()),
            ("node_pairs", self.node_pairs.len()),
        ])
    }

    pub fn snapshot(&mut self, s: &Snapshot) {
        if self.first.is_none() {
            self.first = Some(s.clone());
        }
        self.last = Some(s.clone());
    }

    pub fn event(&mut self, ev: &Event) {
        let ts = ev.ts_ns();
        // Same window rule as the totals: nothing before the first snapshot.
        if self.first.as_ref().is_some_and(|s| ts < s.ts_ns) {
            return;
        }
        match ev {
            Event::Fault(f) => self.fault(f),
            Event::Scan(s) => self.scans.record(s),
            Event::Skip(_) => {}
        }
    }

    fn fault(&mut self, f: &FaultEvent) {
        self.hint_faults += 1;
        let tgid = (f.pid_tgid >> 32) as u32;
        let key = (tgid, f.addr);
        // Every fault may answer an earlier refusal of the same page.
        self.refaults.fault(key, f.ts_ns);
        let n_models = self.models.len();
        let proc_row = self.processes.entry(tgid).or_insert_with(|| ProcessRow {
            pid: tgid,
            model_promote: vec![0; n_models],
            ..ProcessRow::default()
        });
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
            // Every stride-th rejection, stride doubling as the table fills:
            // deterministic and spread over the whole run.
            self.rejected_seen += 1;
            if self.rejected_seen.is_multiple_of(self.sample_stride) {
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
            }
        }
        let pair = self
            .node_pairs
            .entry((f.src_nid, f.dst_nid))
            .or_insert_with(|| NodePairRow {
                src_node: f.src_nid,
                dst_node: f.dst_nid,
                model_promote: vec![0; n_models],
                ..NodePairRow::default()
            });
        pair.decisions += 1;
        pair.kernel_promote += u64::from(kernel_promote);
        let view = FaultView {
            latest_scan: self.scans.latest(tgid, f.addr, f.ts_ns),
        };
        let mut wanted = 0u64;
        for (i, m) in self.models.iter_mut().enumerate() {
            let v = m.policy.decide(f, &view);
            match m.reasons.iter_mut().find(|(r, _)| *r == v.reason) {
                Some((_, n)) => *n += 1,
                None => m.reasons.push((v.reason, 1)),
            }
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
        if !kernel_promote {
            let mask = if wanted == 0 { 1 << NEITHER } else { wanted };
            self.refaults.refused(key, f.ts_ns, mask);
        }
    }

    pub fn report(&self) -> ShadowReport {
        let drops = match (&self.first, &self.last) {
            (Some(a), Some(b)) => {
                let i = Counter::RingDrops as usize;
                b.counters
                    .get(i)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(a.counters.get(i).copied().unwrap_or(0))
            }
            _ => 0,
        };
        let mut processes: Vec<ProcessRow> = self.processes.values().cloned().collect();
        processes.sort_by(|a, b| b.hint_faults.cmp(&a.hint_faults).then(a.pid.cmp(&b.pid)));
        processes.truncate(self.top_n);
        let mut node_pairs: Vec<NodePairRow> = self.node_pairs.values().cloned().collect();
        node_pairs.sort_by_key(|p| (p.src_node, p.dst_node));
        ShadowReport {
            duration_s: match (&self.first, &self.last) {
                (Some(a), Some(b)) => b.ts_ns.saturating_sub(a.ts_ns) as f64 / 1e9,
                _ => 0.0,
            },
            hint_faults: self.hint_faults,
            decisions: self.decisions,
            kernel: self.kernel.clone(),
            models: self
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
                    refault_after_model_only: self.refaults.report(i),
                    threshold: m.policy.threshold(),
                })
                .collect(),
            refault_after_neither: self.refaults.report(self.models.len()),
            latency_threshold_samples: self.samples.clone(),
            processes,
            node_pairs,
            drops,
            evidence_note: EVIDENCE_NOTE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        decode::tests::fault,
        model::policy::{build, KernelDefaults, ModelDefaults},
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
