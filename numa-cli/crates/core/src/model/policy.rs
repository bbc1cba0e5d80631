//! Promotion policies run in shadow beside the kernel. Each sees the same
//! hint faults (with the kernel's decision and the scan stamps) and says
//! whether *it* would promote. Pure: time comes from the events.
use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use crate::topology::Tunables;

use anyhow::{bail, Context, Result};
use numa_ebpf_common::{fault_flags as ff, FaultEvent, Outcome};

use super::{
    pagetable::{self, PageTable},
    scans::RangeScan,
};

/// What a policy sees besides the fault itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultView {
    /// The latest range scan covering the page before the fault.
    pub latest_scan: Option<RangeScan>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub promote: bool,
    pub reason: &'static str,
}

const fn yes(reason: &'static str) -> Verdict {
    Verdict {
        promote: true,
        reason,
    }
}
const fn no(reason: &'static str) -> Verdict {
    Verdict {
        promote: false,
        reason,
    }
}

pub trait Policy {
    fn name(&self) -> String;
    fn params(&self) -> BTreeMap<String, String>;
    /// Called for every hint fault the kernel decided in tiering mode on a
    /// slow-node folio (the decisions the policies compete on).
    fn decide(&mut self, ev: &FaultEvent, view: &FaultView) -> Verdict;
    /// Told of a fault some events before `decide` sees it: a policy with
    /// per-page state may start loading it (a hint; no effect on results).
    fn prefetch(&self, _ev: &FaultEvent) {}
    /// The threshold to mark on latency/delta charts, if the policy has one.
    fn threshold(&self) -> Option<f64> {
        None
    }
}

/// The kernel's promotion rate limit (numa_promotion_rate_limit), per
/// destination node, on the policy's own candidate count.
#[derive(Debug, Clone, Default)]
pub struct RateLimiter {
    /// Pages per second; 0 disables.
    pub pages_per_s: u64,
    /// Per node: a handful, a linear scan beats a map.
    nodes: Vec<(i32, RlState)>,
}

#[derive(Debug, Clone, Default)]
struct RlState {
    nr_cand: u64,
    start_ms: u64,
    start_cand: u64,
}

impl RateLimiter {
    pub fn new(mbps: u64) -> Self {
        RateLimiter {
            pages_per_s: mbps << (20 - 12),
            nodes: Vec::new(),
        }
    }

    /// Counts `nr` candidate pages at `now_ms`; true when over the limit.
    pub fn limited(&mut self, node: i32, now_ms: u64, nr: u64) -> bool {
        if self.pages_per_s == 0 {
            return false;
        }
        let s = node_entry(&mut self.nodes, node, RlState::default);
        s.nr_cand += nr;
        if now_ms.saturating_sub(s.start_ms) > 1000 {
            s.start_ms = now_ms;
            s.start_cand = s.nr_cand;
        }
        s.nr_cand - s.start_cand >= self.pages_per_s
    }

    pub fn candidates(&self, node: i32) -> u64 {
        self.nodes
            .iter()
            .find(|(n, _)| *n == node)
            .map_or(0, |(_, s)| s.nr_cand)
    }
}

/// The state of `node` in a small per-node list, made by `new` if absent.
#[inline]
fn node_entry<T>(nodes: &mut Vec<(i32, T)>, node: i32, new: impl FnOnce() -> T) -> &mut T {
    let i = match nodes.iter().position(|(n, _)| *n == node) {
        Some(i) => i,
        None => {
            nodes.push((node, new()));
            nodes.len() - 1
        }
    };
    &mut nodes[i].1
}

pub const NUMA_MIGRATION_ADJUST_STEPS: u64 = 16;

/// numa_promotion_adjust_threshold's state for one node.
#[derive(Debug, Clone, Default)]
pub struct AdaptiveThreshold {
    pub th_ms: u64,
    start_ms: Option<u64>,
    nr_cand_at_start: u64,
}

impl AdaptiveThreshold {
    /// One adjustment step, as the kernel does at each decision: every
    /// `period_ms` (scan_period_max) compare the candidates of the period
    /// with what the rate limit allows, and move the threshold by
    /// `ref_th * 2 / 16` within `[unit, 2 * ref_th]`.
    pub fn adjust(
        &mut self,
        now_ms: u64,
        period_ms: u64,
        ref_th: u64,
        rate_pages_per_s: u64,
        nr_cand: u64,
    ) {
        let due = match self.start_ms {
            None => true,
            Some(s) => now_ms.saturating_sub(s) > period_ms,
        };
        if !due {
            return;
        }
        self.start_ms = Some(now_ms);
        let ref_cand = rate_pages_per_s.saturating_mul(period_ms) / 1000;
        let diff = nr_cand.saturating_sub(self.nr_cand_at_start);
        let unit = (ref_th * 2 / NUMA_MIGRATION_ADJUST_STEPS).max(1);
        let th = if self.th_ms == 0 { ref_th } else { self.th_ms };
        let th = if diff > ref_cand * 11 / 10 {
            th.saturating_sub(unit).max(unit)
        } else if diff < ref_cand * 9 / 10 {
            (th + unit).min(ref_th * 2)
        } else {
            th
        };
        self.nr_cand_at_start = nr_cand;
        self.th_ms = th;
    }

    pub fn current(&self, ref_th: u64) -> u64 {
        if self.th_ms == 0 {
            ref_th
        } else {
            self.th_ms
        }
    }

    /// Starts from an observed kernel state: the threshold in force, with
    /// the adjustment period starting now.
    pub fn sync(&mut self, th_ms: u64, now_ms: u64, nr_cand: u64) {
        self.th_ms = th_ms;
        self.start_ms = Some(now_ms);
        self.nr_cand_at_start = nr_cand;
    }
}

/// `kernel-time`: should_numa_migrate_memory's tiering branch re-implemented.
#[derive(Debug, Clone)]
pub struct KernelTime {
    pub hot_threshold_ms: u64,
    pub scan_period_max_ms: u64,
    pub rate: RateLimiter,
    nodes: Vec<(i32, AdaptiveThreshold)>,
}

impl KernelTime {
    pub fn new(hot_threshold_ms: u64, scan_period_max_ms: u64, rate_limit_mbps: u64) -> Self {
        KernelTime {
            hot_threshold_ms,
            scan_period_max_ms,
            rate: RateLimiter::new(rate_limit_mbps),
            nodes: Vec::new(),
        }
    }
}

/// The kernel's own latency when numatrace saw it, else numatrace's.
fn latency_ms(ev: &FaultEvent) -> Option<u64> {
    if ev.flags & ff::KERNEL_LATENCY != 0 {
        Some(u64::from(ev.kernel_latency_ms))
    } else if ev.flags & ff::HAS_STAMP != 0 {
        Some(ev.ts_ns.saturating_sub(ev.scan_ns) / 1_000_000)
    } else {
        None
    }
}

impl Policy for KernelTime {
    fn name(&self) -> String {
        "kernel-time".into()
    }

    fn params(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("hot_threshold_ms".into(), self.hot_threshold_ms.to_string()),
            (
                "scan_period_max_ms".into(),
                self.scan_period_max_ms.to_string(),
            ),
            (
                "rate_limit_pages_per_s".into(),
                self.rate.pages_per_s.to_string(),
            ),
        ])
    }

    fn decide(&mut self, ev: &FaultEvent, _view: &FaultView) -> Verdict {
        // pgdat_free_space_enough() is not observable per fault; the kernel's
        // own answer (no access-time exchange before promoting) is the input.
        if ev.outcome == Outcome::PromoteFreeSpace as u8 {
            self.nodes.retain(|(n, _)| *n != ev.dst_nid);
            return yes("free_space");
        }
        let Some(latency) = latency_ms(ev) else {
            return no("no_stamp");
        };
        let now_ms = ev.ts_ns / 1_000_000;
        let nr_cand = self.rate.candidates(ev.dst_nid);
        let (ref_th, period, rate) = (
            self.hot_threshold_ms,
            self.scan_period_max_ms,
            self.rate.pages_per_s,
        );
        let node = node_entry(&mut self.nodes, ev.dst_nid, || {
            // Start from the kernel's threshold at attach when seen.
            let mut t = AdaptiveThreshold::default();
            if ev.threshold_ms > 0 {
                t.sync(u64::from(ev.threshold_ms), now_ms, nr_cand);
            }
            t
        });
        node.adjust(now_ms, period, ref_th, rate, nr_cand);
        if latency >= node.current(ref_th) {
            return no("latency");
        }
        if self
            .rate
            .limited(ev.dst_nid, now_ms, u64::from(ev.nr_pages.max(1)))
        {
            return no("rate_limit");
        }
        yes("hot")
    }

    fn threshold(&self) -> Option<f64> {
        Some(
            self.nodes
                .iter()
                .map(|(_, n)| n.current(self.hot_threshold_ms))
                .max()
                .unwrap_or(self.hot_threshold_ms) as f64,
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Mm,
    Global,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampKind {
    First,
    Latest,
}

/// `fault-count` (the RFC): promote when fewer than `threshold` hint faults
/// happened between the protecting scan and this fault.
#[derive(Debug, Clone)]
pub struct FaultCount {
    pub threshold: u64,
    pub counter: Counter,
    pub stamp: StampKind,
    pub rate: Option<RateLimiter>,
}

/// Faults between the stamp and this fault (this one included); counters
/// are compared with wrapping arithmetic.
pub fn fault_delta(
    ev: &FaultEvent,
    view: &FaultView,
    counter: Counter,
    stamp: StampKind,
) -> Option<u64> {
    let (scan_g, scan_m) = match stamp {
        StampKind::First => {
            if ev.flags & ff::HAS_STAMP == 0 {
                return None;
            }
            (ev.scan_seq_global, ev.scan_seq_mm)
        }
        StampKind::Latest => {
            // The latest pass over the range, or the folio's own stamp when
            // that is newer (a pass that found the PTE still accessible).
            let s = view.latest_scan;
            match (s, ev.flags & ff::HAS_STAMP != 0) {
                (Some(s), true) if s.ts_ns > ev.scan_ns => (s.seq_global, s.seq_mm),
                (_, true) => (ev.scan_seq_global, ev.scan_seq_mm),
                (Some(s), false) => (s.seq_global, s.seq_mm),
                (None, false) => return None,
            }
        }
    };
    match counter {
        Counter::Global => Some(ev.seq_global.wrapping_sub(scan_g)),
        Counter::Mm if ev.flags & ff::STAMP_OTHER_MM != 0 && stamp == StampKind::First => None,
        Counter::Mm => Some(ev.seq_mm.wrapping_sub(scan_m)),
    }
}

impl Policy for FaultCount {
    fn name(&self) -> String {
        "fault-count".into()
    }

    fn params(&self) -> BTreeMap<String, String> {
        let mut p = BTreeMap::from([
            ("threshold".into(), self.threshold.to_string()),
            (
                "counter".into(),
                if self.counter == Counter::Mm {
                    "mm"
                } else {
                    "global"
                }
                .into(),
            ),
            (
                "stamp".into(),
                if self.stamp == StampKind::First {
                    "first"
                } else {
                    "latest"
                }
                .into(),
            ),
        ]);
        if let Some(r) = &self.rate {
            p.insert("rate_limit_pages_per_s".into(), r.pages_per_s.to_string());
        }
        p
    }

    fn decide(&mut self, ev: &FaultEvent, view: &FaultView) -> Verdict {
        let Some(delta) = fault_delta(ev, view, self.counter, self.stamp) else {
            return no("no_stamp");
        };
        if delta >= self.threshold {
            return no("fault_count");
        }
        if let Some(r) = &mut self.rate {
            if r.limited(
                ev.dst_nid,
                ev.ts_ns / 1_000_000,
                u64::from(ev.nr_pages.max(1)),
            ) {
                return no("rate_limit");
            }
        }
        yes("hot")
    }

    fn threshold(&self) -> Option<f64> {
        Some(self.threshold as f64)
    }
}

/// `two-touch` (pghot's hint-fault source): promote on the second hint
/// fault on the same page within `window_ms`.
#[derive(Debug, Clone)]
pub struct TwoTouch {
    pub window_ms: u64,
    /// Last fault time (ms) per (tgid, page): `[packed key, ms]`; with
    /// `wide`, bounded by `cap` entries.
    last: PageTable<2>,
    /// Keys that do not pack (see `pagetable`).
    wide: HashMap<(u32, u64), u64>,
    cap: usize,
}

impl TwoTouch {
    pub fn new(window_ms: u64, cap: usize) -> Self {
        TwoTouch {
            window_ms,
            last: PageTable::default(),
            wide: HashMap::default(),
            cap,
        }
    }

    /// Before a new page is remembered: bounded memory, forget touches
    /// older than the window, everything if that is not enough.
    fn make_room(&mut self, now_ms: u64) {
        if self.last.len() + self.wide.len() < self.cap {
            return;
        }
        let window = self.window_ms;
        self.last.retain(|e| now_ms.saturating_sub(e[1]) <= window);
        self.wide.retain(|_, t| now_ms.saturating_sub(*t) <= window);
        if self.last.len() + self.wide.len() >= self.cap {
            self.last.clear();
            self.wide.clear();
        }
    }
}

impl Policy for TwoTouch {
    fn name(&self) -> String {
        "two-touch".into()
    }

    fn params(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("window_ms".into(), self.window_ms.to_string())])
    }

    fn prefetch(&self, ev: &FaultEvent) {
        if let Some(key) = pagetable::pack((ev.pid_tgid >> 32) as u32, ev.addr) {
            self.last.prefetch(key);
        }
    }

    fn decide(&mut self, ev: &FaultEvent, _view: &FaultView) -> Verdict {
        let tgid = (ev.pid_tgid >> 32) as u32;
        let now_ms = ev.ts_ns / 1_000_000;
        let Some(key) = pagetable::pack(tgid, ev.addr) else {
            let key = (tgid, ev.addr);
            if !self.wide.contains_key(&key) {
                self.make_room(now_ms);
            }
            return match self.wide.insert(key, now_ms) {
                Some(prev) if now_ms.saturating_sub(prev) <= self.window_ms => {
                    self.wide.remove(&key);
                    yes("second_touch")
                }
                _ => no("first_touch"),
            };
        };
        if let Some(i) = self.last.find(key) {
            let prev = self.last.slot(i)[1];
            if now_ms.saturating_sub(prev) <= self.window_ms {
                self.last.remove_at(i);
                return yes("second_touch");
            }
            self.last.value_mut(i)[0] = now_ms;
            return no("first_touch");
        }
        self.make_room(now_ms);
        self.last.insert([key, now_ms]);
        no("first_touch")
    }

    fn threshold(&self) -> Option<f64> {
        Some(self.window_ms as f64)
    }
}

/// Kernel tunables the models default to (from the trace header).
#[derive(Debug, Clone, Copy)]
pub struct KernelDefaults {
    pub hot_threshold_ms: u64,
    pub scan_period_max_ms: u64,
    pub rate_limit_mbps: u64,
}

impl Default for KernelDefaults {
    fn default() -> Self {
        KernelDefaults {
            hot_threshold_ms: 1000,
            scan_period_max_ms: 60000,
            rate_limit_mbps: 65536,
        }
    }
}

impl KernelDefaults {
    /// The host's tunables where it had them (a trace header's), else the
    /// kernel's defaults.
    pub fn from_tunables(t: &Tunables) -> Self {
        let d = KernelDefaults::default();
        KernelDefaults {
            hot_threshold_ms: t.hot_threshold_ms.unwrap_or(d.hot_threshold_ms),
            scan_period_max_ms: t.scan_period_max_ms.unwrap_or(d.scan_period_max_ms),
            rate_limit_mbps: t.promote_rate_limit_mbps.unwrap_or(d.rate_limit_mbps),
        }
    }
}

/// The models run when none is named.
pub const DEFAULT_MODELS: [&str; 3] = ["kernel-time", "fault-count", "two-touch"];

/// Builds every model in `specs`; none named: [`DEFAULT_MODELS`].
pub fn build_all(
    specs: &[String],
    d: &ModelDefaults,
    k: &KernelDefaults,
) -> Result<Vec<Box<dyn Policy>>> {
    if specs.is_empty() {
        return DEFAULT_MODELS.iter().map(|s| build(s, d, k)).collect();
    }
    specs.iter().map(|s| build(s, d, k)).collect()
}

/// Flat model options (`--threshold 2e5 --counter global`) that apply to
/// every model that does not set them in its spec.
#[derive(Debug, Clone, Default)]
pub struct ModelDefaults {
    pub threshold: Option<f64>,
    pub counter: Option<String>,
    pub stamp: Option<String>,
    pub window_ms: Option<u64>,
    pub rate_limit: Option<bool>,
}

fn parse_num(v: &str) -> Result<f64> {
    v.parse::<f64>()
        .with_context(|| format!("{v:?} is not a number (1e6 and 1000000 both work)"))
}

/// Builds a policy from `name[:key=value,...]`.
pub fn build(spec: &str, d: &ModelDefaults, k: &KernelDefaults) -> Result<Box<dyn Policy>> {
    let (name, rest) = spec.split_once(':').unwrap_or((spec, ""));
    let mut kv: BTreeMap<&str, &str> = BTreeMap::new();
    for pair in rest.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .with_context(|| format!("model option {pair:?} is not key=value"))?;
        kv.insert(key.trim(), value.trim());
    }
    let get = |key: &str| kv.get(key).map(|v| (*v).to_owned());
    let policy: Box<dyn Policy> = match name {
        "kernel-time" => {
            let th = match get("threshold") {
                Some(v) => parse_num(&v)? as u64,
                None => k.hot_threshold_ms,
            };
            let rate = match get("rate_limit") {
                Some(v) => parse_num(&v)? as u64,
                None => k.rate_limit_mbps,
            };
            Box::new(KernelTime::new(th, k.scan_period_max_ms, rate))
        }
        "fault-count" => {
            let threshold = match get("threshold") {
                Some(v) => parse_num(&v)?,
                None => d.threshold.unwrap_or(1e6),
            };
            if threshold < 1.0 {
                bail!("fault-count threshold must be >= 1");
            }
            let counter = match get("counter").or_else(|| d.counter.clone()).as_deref() {
                None | Some("mm") => Counter::Mm,
                Some("global") => Counter::Global,
                Some(o) => bail!("--counter {o}: use mm or global"),
            };
            let stamp = match get("stamp").or_else(|| d.stamp.clone()).as_deref() {
                None | Some("first") => StampKind::First,
                Some("latest") => StampKind::Latest,
                Some(o) => bail!("--stamp {o}: use first or latest"),
            };
            let rate_on = match get("rate_limit").as_deref() {
                Some("on") | Some("true") => true,
                Some("off") | Some("false") => false,
                Some(o) => bail!("rate_limit={o}: use on or off"),
                None => d.rate_limit.unwrap_or(false),
            };
            Box::new(FaultCount {
                threshold: threshold as u64,
                counter,
                stamp,
                rate: rate_on.then(|| RateLimiter::new(k.rate_limit_mbps)),
            })
        }
        "two-touch" => {
            let window = match get("window_ms") {
                Some(v) => parse_num(&v)? as u64,
                None => d.window_ms.unwrap_or(k.hot_threshold_ms * 2),
            };
            Box::new(TwoTouch::new(window, 1 << 22))
        }
        other => bail!("unknown model {other:?}: use kernel-time, fault-count or two-touch"),
    };
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::fixtures::fault;

    #[test]
    fn adaptive_threshold_steps_like_the_kernel() {
        // ref_th 1000 ms, 16 steps: unit 125 ms. No candidates in a period
        // -> the threshold rises by one unit (the RFC's 1125 ms), up to 2000.
        let mut t = AdaptiveThreshold::default();
        t.adjust(0, 60_000, 1000, 1000, 0);
        assert_eq!(t.current(1000), 1125);
        t.adjust(30_000, 60_000, 1000, 1000, 0); // within the period: no change
        assert_eq!(t.current(1000), 1125);
        for i in 1..20 {
            t.adjust(i * 61_000, 60_000, 1000, 1000, 0);
        }
        assert_eq!(t.current(1000), 2000);
        // Far more candidates than the rate allows (1000 pages/s * 60 s):
        // the threshold falls by a unit per period, never below one unit.
        let mut cand = 0;
        for i in 21..60 {
            cand += 1_000_000;
            t.adjust(i * 61_000, 60_000, 1000, 1000, cand);
        }
        assert_eq!(t.current(1000), 125);
    }

    #[test]
    fn rate_limit_counts_candidates_per_second() {
        // 1 MB/s = 256 pages/s.
        let mut r = RateLimiter::new(1);
        assert_eq!(r.pages_per_s, 256);
        let limited = (0..300).filter(|_| r.limited(0, 5_000, 1)).count();
        // The window opens at the first call and includes it (as the
        // kernel's nbp_rl_nr_cand does): call k sees k-1 candidates.
        assert_eq!(limited, 300 - 256);
        // A new second opens a new window.
        assert!(!r.limited(0, 6_100, 1));
    }

    #[test]
    fn kernel_time_rejects_on_latency_and_promotes_below() {
        let mut m = KernelTime::new(1000, 60_000, 65536);
        let view = FaultView::default();
        let mut ev = fault(10, 1, 1500, Outcome::RejectLatency);
        ev.threshold_ms = 1000;
        assert_eq!(m.decide(&ev, &view), no("latency"));
        let ev = fault(11, 2, 200, Outcome::PromoteHot);
        assert_eq!(m.decide(&ev, &view), yes("hot"));
        let ev = fault(12, 3, 5000, Outcome::PromoteFreeSpace);
        assert_eq!(m.decide(&ev, &view), yes("free_space"));
    }

    #[test]
    fn fault_count_threshold_counter_and_wraparound() {
        let view = FaultView::default();
        let mut m = FaultCount {
            threshold: 100,
            counter: Counter::Mm,
            stamp: StampKind::First,
            rate: None,
        };
        let mut ev = fault(1000, 1, 50_000, Outcome::RejectLatency);
        ev.scan_seq_mm = 950; // 50 faults since the scan
        assert_eq!(m.decide(&ev, &view), yes("hot"));
        ev.scan_seq_mm = 900; // exactly 100: not below the threshold
        assert_eq!(m.decide(&ev, &view), no("fault_count"));
        // The counter wrapped between scan and fault: still 10 faults.
        ev.seq_mm = 5;
        ev.scan_seq_mm = u64::MAX - 4;
        assert_eq!(
            fault_delta(&ev, &view, Counter::Mm, StampKind::First),
            Some(10)
        );
        // Global counter uses the global sequence numbers.
        let mut g = FaultCount {
            counter: Counter::Global,
            ..m.clone()
        };
        ev.seq_global = 10_000;
        ev.scan_seq_global = 1_000;
        assert_eq!(g.decide(&ev, &view), no("fault_count"));
        // No stamp: no opinion but "don't promote".
        ev.flags &= !ff::HAS_STAMP;
        assert_eq!(m.decide(&ev, &view), no("no_stamp"));
    }

    #[test]
    fn latest_stamp_uses_the_newer_range_scan() {
        let mut ev = fault(1000, 1, 50_000, Outcome::RejectLatency);
        ev.scan_seq_mm = 100;
        let view = FaultView {
            latest_scan: Some(RangeScan {
                start: 0,
                end: u64::MAX,
                ts_ns: ev.scan_ns + 1,
                seq_global: 990,
                seq_mm: 990,
            }),
        };
        assert_eq!(
            fault_delta(&ev, &view, Counter::Mm, StampKind::First),
            Some(900)
        );
        assert_eq!(
            fault_delta(&ev, &view, Counter::Mm, StampKind::Latest),
            Some(10)
        );
    }

    #[test]
    fn two_touch_needs_a_second_fault_within_the_window() {
        let mut m = TwoTouch::new(1000, 16);
        let view = FaultView::default();
        let a = fault(1, 7, 10, Outcome::RejectLatency);
        assert_eq!(m.decide(&a, &view), no("first_touch"));
        let mut b = a;
        b.ts_ns += 500_000_000;
        assert_eq!(m.decide(&b, &view), yes("second_touch"));
        let mut c = b;
        c.ts_ns += 5_000_000_000;
        assert_eq!(m.decide(&c, &view), no("first_touch"));
    }

    /// two-touch as it was before the packed table.
    struct RefTwoTouch {
        window_ms: u64,
        last: HashMap<(u32, u64), u64>,
        cap: usize,
    }

    impl RefTwoTouch {
        fn decide(&mut self, ev: &FaultEvent) -> Verdict {
            let key = ((ev.pid_tgid >> 32) as u32, ev.addr);
            let now_ms = ev.ts_ns / 1_000_000;
            if self.last.len() >= self.cap && !self.last.contains_key(&key) {
                let window = self.window_ms;
                self.last.retain(|_, t| now_ms.saturating_sub(*t) <= window);
                if self.last.len() >= self.cap {
                    self.last.clear();
                }
            }
            match self.last.insert(key, now_ms) {
                Some(prev) if now_ms.saturating_sub(prev) <= self.window_ms => {
                    self.last.remove(&key);
                    yes("second_touch")
                }
                _ => no("first_touch"),
            }
        }
    }

    /// Same verdicts as the plain map, through the cap's forgetting and
    /// clearing and with keys that do not pack.
    #[test]
    fn two_touch_matches_the_plain_map() {
        for (cap, window, seed) in [(1usize << 20, 2000u64, 1u64), (64, 500, 2), (7, 100_000, 3)] {
            let mut new = TwoTouch::new(window, cap);
            let mut old = RefTwoTouch {
                window_ms: window,
                last: HashMap::default(),
                cap,
            };
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ seed;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let view = FaultView::default();
            let mut ev = fault(1, 1, 10, Outcome::RejectLatency);
            let mut seconds = 0;
            for _ in 0..200_000 {
                ev.ts_ns = ev.ts_ns.wrapping_add(next() % 20_000_000);
                if next() % 1000 == 0 {
                    ev.ts_ns = ev.ts_ns.wrapping_sub(1 << 40);
                }
                let tgid = match next() % 40 {
                    0 => u64::from(u32::MAX),
                    1 => 1 << 22,
                    n => n % 3,
                };
                ev.pid_tgid = tgid << 32;
                ev.addr = match next() % 40 {
                    0 => 0x7f00_0000_0001 + next() % 3,
                    1 => u64::MAX - 4095,
                    _ => 0x7f00_0000_0000 + (next() % 300) * 4096,
                };
                let v = new.decide(&ev, &view);
                assert_eq!(v, old.decide(&ev));
                seconds += u64::from(v.promote);
                assert_eq!(new.last.len() + new.wide.len(), old.last.len());
            }
            assert!(seconds > 100, "{seconds} second touches");
        }
    }

    #[test]
    fn specs_parse_and_bad_ones_explain() {
        let d = ModelDefaults {
            threshold: Some(2e5),
            counter: Some("global".into()),
            ..Default::default()
        };
        let k = KernelDefaults::default();
        let m = build("fault-count", &d, &k).expect("model");
        assert_eq!(
            m.params().get("threshold").map(String::as_str),
            Some("200000")
        );
        assert_eq!(
            m.params().get("counter").map(String::as_str),
            Some("global")
        );
        let m = build("fault-count:threshold=1e4,stamp=latest", &d, &k).expect("model");
        assert_eq!(
            m.params().get("threshold").map(String::as_str),
            Some("10000")
        );
        assert_eq!(m.params().get("stamp").map(String::as_str), Some("latest"));
        let err = build("lru", &d, &k)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("unknown model"), "{err}");
        let err = build("fault-count:counter=cpu", &d, &k)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("use mm or global"), "{err}");
    }
}
