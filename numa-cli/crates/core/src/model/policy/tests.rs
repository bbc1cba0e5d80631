use numa_ebpf_common::{ext_flags as xf, fault_flags as ff, FaultEvent, Outcome};

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
    let limited = (1..=300).filter(|c| r.limited(0, 5_000, *c)).count();
    // The window opens at the first call and includes it (as the
    // kernel's nbp_rl_nr_cand does): call k sees k-1 candidates.
    assert_eq!(limited, 300 - 256);
    // A new second opens a new window.
    assert!(!r.limited(0, 6_100, 301));
    // 0 MB/s limits every candidate, as the kernel's `>= rate_limit` does.
    assert!(RateLimiter::new(0).limited(0, 5_000, 1));
}

fn model(spec: &str) -> Box<dyn Policy> {
    build(spec, &ModelDefaults::default(), &KernelDefaults::default()).expect("model")
}

fn step(v: Decision) -> (bool, &'static str) {
    (v.promote, v.reason)
}

#[test]
fn kernel_time_rejects_on_latency_and_promotes_below() {
    let mut m = model("kernel-time");
    let view = FaultView::default();
    let mut ev = fault(10, 1, 1500, Outcome::RejectLatency);
    ev.threshold_ms = 1000;
    assert_eq!(step(m.decide(&ev, &view)), (false, "latency"));
    let ev = fault(11, 2, 200, Outcome::PromoteHot);
    assert_eq!(step(m.decide(&ev, &view)), (true, "hot"));
    let ev = fault(12, 3, 5000, Outcome::PromoteFreeSpace);
    assert_eq!(step(m.decide(&ev, &view)), (true, "free_space"));
    // Rejected before the threshold path (no memory on the destination).
    let mut ev = fault(13, 4, 10, Outcome::RejectOther);
    ev.ext_flags &= !xf::THRESHOLD_PATH;
    assert_eq!(step(m.decide(&ev, &view)), (false, "other"));
}

/// A fault `ms` after `t0` on a node the kernel decided past the shortcut,
/// without a stamp numatrace saw.
fn unstamped(seq: u64, ms: u64) -> FaultEvent {
    let mut ev = fault(seq, seq, 0, Outcome::RejectOther);
    ev.ts_ns = 1_000_000_000_000 + ms * 1_000_000;
    ev.flags &= !(ff::HAS_STAMP | ff::KERNEL_LATENCY);
    ev.threshold_ms = 0;
    ev
}

#[test]
fn kernel_time_adjusts_on_every_decision_and_free_space_resets_only_the_threshold() {
    // 1 MB/s: ref_cand = 256 pages/s * 60 s; no candidates -> +125 ms.
    let mut m = KernelTime::new(1000, 60_000, 1);
    let view = FaultView::default();
    let mut first = unstamped(1, 0);
    first.threshold_ms = 1000; // the kernel's threshold at attach
    assert_eq!(step(m.decide(&first, &view)), (false, "no_stamp"));
    // 61 s later, still no stamp: the kernel adjusts all the same.
    assert_eq!(
        step(m.decide(&unstamped(2, 61_000), &view)),
        (false, "no_stamp")
    );
    assert_eq!(m.threshold(), Some(1125.0));
    // The free-space shortcut resets nbp_threshold, not the period.
    let mut free = fault(3, 3, 0, Outcome::PromoteFreeSpace);
    free.ts_ns = 1_000_000_000_000 + 62_000 * 1_000_000;
    assert_eq!(step(m.decide(&free, &view)), (true, "free_space"));
    assert_eq!(m.threshold(), Some(1000.0));
    // The model's period (from 61 s) started at a guess (attached at 0 s,
    // mid-period): the kernel reporting 1125 at 63 s is the kernel
    // adjusting, and its period starts there.
    let mut ev = fault(4, 4, 1100, Outcome::PromoteHot);
    ev.ts_ns = 1_000_000_000_000 + 63_000 * 1_000_000;
    ev.threshold_ms = 1125;
    assert_eq!(step(m.decide(&ev, &view)), (true, "hot"));
    // From then on the model adjusts by itself: within that period it
    // keeps 1125 whatever a record says.
    let mut ev = fault(5, 5, 1200, Outcome::PromoteHot);
    ev.ts_ns = 1_000_000_000_000 + 64_000 * 1_000_000;
    ev.threshold_ms = 1250;
    assert_eq!(step(m.decide(&ev, &view)), (false, "latency"));
    assert_eq!(m.threshold(), Some(1125.0));
}

/// Attached when the kernel had already raised its threshold: the model
/// follows the kernel's threshold, through a free-space reset, until the
/// kernel is seen adjusting (measured on 7.2: 268 decisions refused by a
/// model that restarted its period at the first record).
#[test]
fn kernel_time_attached_mid_period_follows_the_kernel_until_it_adjusts() {
    let mut m = KernelTime::new(1000, 60_000, 1);
    let view = FaultView::default();
    let at = |seq: u64, ms: u64, latency: u64, outcome, th: u32| {
        let mut ev = fault(seq, seq, latency, outcome);
        ev.ts_ns = 1_000_000_000_000 + ms * 1_000_000;
        ev.threshold_ms = th;
        ev
    };
    assert_eq!(
        step(m.decide(&at(1, 0, 1050, Outcome::PromoteHot, 1125), &view)),
        (true, "hot")
    );
    let free = at(2, 1_000, 0, Outcome::PromoteFreeSpace, 0);
    assert_eq!(step(m.decide(&free, &view)), (true, "free_space"));
    // The kernel's period ended here (it reports 1125 again right after
    // its reset); the model's own guess (from 0 s) would say 1000.
    assert_eq!(
        step(m.decide(&at(3, 1_500, 1050, Outcome::PromoteHot, 1125), &view)),
        (true, "hot")
    );
    assert_eq!(m.threshold(), Some(1125.0));
}

#[test]
fn kernel_time_masks_its_own_latency_like_the_kernel() {
    // (now - last) & PAGE_ACCESS_TIME_MASK, 21 bits: 2^21 + 5 ms is 5 ms.
    let mut m = KernelTime::new(1000, 60_000, 65536).with_access_time((1 << 21) - 1, 0);
    let mut ev = fault(3_000_000, 1, (1 << 21) + 5, Outcome::PromoteHot);
    ev.flags &= !ff::KERNEL_LATENCY;
    assert_eq!(step(m.decide(&ev, &FaultView::default())), (true, "hot"));
}

#[test]
fn kernel_time_rate_limit_counts_every_process_candidates() {
    // 1 MB/s = 256 pages/s. Between two candidates numatrace kept, the
    // node's count rose by 300: 299 of other processes' and its own.
    let mut m = KernelTime::new(1000, 60_000, 1);
    let view = FaultView::default();
    let mut a = fault(100, 1, 10, Outcome::PromoteHot);
    a.node_candidates = 1000;
    a.ext_flags |= xf::NODE_CANDIDATES;
    assert_eq!(step(m.decide(&a, &view)), (true, "hot"));
    let mut b = fault(110, 2, 10, Outcome::RejectRateLimit);
    b.node_candidates = 1300;
    b.ext_flags |= xf::NODE_CANDIDATES;
    assert_eq!(step(m.decide(&b, &view)), (false, "rate_limit"));
    // Without the node's count only the model's own two count.
    let mut m = KernelTime::new(1000, 60_000, 1);
    a.ext_flags &= !xf::NODE_CANDIDATES;
    b.ext_flags &= !xf::NODE_CANDIDATES;
    m.decide(&a, &view);
    assert_eq!(step(m.decide(&b, &view)), (true, "hot"));
}

#[test]
fn candidates_add_the_unseen_and_never_go_back() {
    let mut c = Candidates::default();
    let mut ev = fault(1, 1, 10, Outcome::PromoteHot);
    ev.ext_flags |= xf::NODE_CANDIDATES;
    ev.node_candidates = 50;
    c.observe(&ev);
    assert_eq!(c.count(0), 0);
    assert_eq!(c.add(0, 1), 1);
    // A fault that was no candidate reads 20 more: others' candidates.
    let mut other = fault(2, 2, 5000, Outcome::RejectLatency);
    other.ext_flags |= xf::NODE_CANDIDATES;
    other.node_candidates = 70;
    c.observe(&other);
    assert_eq!(c.count(0), 1 + 20);
    // A reading that lags (per-CPU batches not folded yet) takes nothing
    // back.
    other.node_candidates = 60;
    c.observe(&other);
    assert_eq!(c.count(0), 21);
}

#[test]
fn patch_latency_is_the_patchs_int_arithmetic() {
    let mask = (1 << 21) - 1;
    // Below 2^16 the stored field is 0: the latency is the whole count.
    assert_eq!(patch_latency(103, 100, mask), 103);
    // The field keeps count >> 16: 69000 -> 1, compared as 65536.
    assert_eq!(patch_latency(70_000, 69_000, mask), 70_000 - 65_536);
    // The unsigned counter wrapped since the stamp: 21 faults, and the
    // 16-bit truncation of the stamp (0xffff_fff0 -> 0xffff_0000).
    assert_eq!(patch_latency(5, 0xffff_fff0, mask), 0x1_0005);
    // Across the int sign: the same.
    assert_eq!(patch_latency(0x8000_0005, 0x7fff_fff0, mask), 0x1_0005);
    // A narrower field (NR_CPUS=64: 14 bits) loses the stamp's top bits
    // once the count passes 2^30: the latency jumps past any threshold.
    assert_eq!(
        patch_latency(0x8000_0005, 0x7fff_fff0, (1 << 14) - 1),
        0x4001_0005
    );
    // The counter was reset (a clone) since the stamp: int 1 - 983040 is
    // negative, a huge unsigned latency.
    assert_eq!(
        patch_latency(1, 1_000_000, mask),
        1u32.wrapping_sub(983_040)
    );
    assert_eq!(patch_latency(1, 1_000_000, mask), 4_293_984_257);
}

#[test]
fn fault_count_is_the_patch_by_default() {
    let view = FaultView::default();
    let mut m = model("fault-count:threshold=10000");
    assert_eq!(m.params().get("mode").map(String::as_str), Some("patch"));
    // 100k faults between the scan (count 100000) and this fault.
    let mut ev = fault(200_000, 1, 50_000, Outcome::RejectLatency);
    ev.stored_fault_count = 100_000;
    // latency 200000 - 65536 = 134464 >= 10000
    assert_eq!(step(m.decide(&ev, &view)), (false, "fault_count"));
    // The fault-time exchange: a second fault on the folio with no rescan
    // is compared with the first fault's count (200000 >> 16 = 3).
    let mut again = fault(200_010, 1, 0, Outcome::RejectOther);
    again.flags &= !ff::HAS_STAMP;
    again.stored_fault_count = 200_000;
    assert_eq!(step(m.decide(&again, &view)), (true, "hot"));
    // The idealised count has no stamp for it and never promotes.
    let mut exact = model("fault-count:exact,threshold=10000");
    assert_eq!(step(exact.decide(&again, &view)), (false, "no_stamp"));
    // Below 2^16 the patch compares the whole count, not the delta.
    let small = fault(20_000, 2, 10, Outcome::RejectLatency);
    assert_eq!(step(m.decide(&small, &view)), (false, "fault_count"));
    assert_eq!(step(exact.decide(&small, &view)), (true, "hot"));
    // Without the patch's counter for this mm: no answer.
    let mut none = small;
    none.ext_flags &= !xf::MM_FAULT_COUNT;
    assert_eq!(step(m.decide(&none, &view)), (false, "no_stamp"));
}

#[test]
fn fault_count_keeps_the_free_space_shortcut_first() {
    let view = FaultView::default();
    let mut m = model("fault-count:threshold=10");
    let mut ev = fault(5_000_000, 1, 90_000, Outcome::PromoteFreeSpace);
    ev.stored_fault_count = 0;
    ev.scan_seq_mm = 0;
    let v = m.decide(&ev, &view);
    assert_eq!(step(v), (true, "free_space"));
    assert!(!v.candidate());
    // The idealised count ignores it: a disagreement.
    let mut exact = model("fault-count:exact,threshold=10");
    assert_eq!(step(exact.decide(&ev, &view)), (false, "fault_count"));
}

#[test]
fn fault_count_rate_limit_is_on_and_node_wide() {
    // 1 MB/s; the node's count rises by 300 between the two faults.
    let k = KernelDefaults {
        rate_limit_mbps: 1,
        ..KernelDefaults::default()
    };
    let mut m = build("fault-count", &ModelDefaults::default(), &k).expect("model");
    let view = FaultView::default();
    let mut a = fault(100, 1, 10, Outcome::PromoteHot);
    a.ext_flags |= xf::NODE_CANDIDATES;
    a.node_candidates = 1000;
    assert_eq!(step(m.decide(&a, &view)), (true, "hot"));
    let mut b = fault(110, 2, 10, Outcome::PromoteHot);
    b.ext_flags |= xf::NODE_CANDIDATES;
    b.node_candidates = 1300;
    let v = m.decide(&b, &view);
    assert_eq!(step(v), (false, "rate_limit"));
    assert!(v.candidate());
    // rate_limit=off leaves it out.
    let mut off =
        build("fault-count:rate_limit=off", &ModelDefaults::default(), &k).expect("model");
    off.decide(&a, &view);
    assert_eq!(step(off.decide(&b, &view)), (true, "hot"));
}

#[test]
fn exact_fault_count_threshold_counter_and_wraparound() {
    let view = FaultView::default();
    let mut m = model("fault-count:exact,threshold=100");
    let mut ev = fault(1000, 1, 50_000, Outcome::RejectLatency);
    ev.scan_seq_mm = 950; // 50 faults since the scan
    assert_eq!(step(m.decide(&ev, &view)), (true, "hot"));
    ev.scan_seq_mm = 900; // exactly 100: not below the threshold
    assert_eq!(step(m.decide(&ev, &view)), (false, "fault_count"));
    // The counter wrapped between scan and fault: still 10 faults.
    ev.seq_mm = 5;
    ev.scan_seq_mm = u64::MAX - 4;
    assert_eq!(
        fault_delta(&ev, &view, Counter::Mm, StampKind::First),
        Some(10)
    );
    // Global counter uses the global sequence numbers.
    let mut g = model("fault-count:exact,threshold=100,counter=global");
    ev.seq_global = 10_000;
    ev.scan_seq_global = 1_000;
    assert_eq!(step(g.decide(&ev, &view)), (false, "fault_count"));
    // No stamp: no opinion but "don't promote".
    ev.flags &= !ff::HAS_STAMP;
    assert_eq!(step(m.decide(&ev, &view)), (false, "no_stamp"));
}

fn pass(ts_ns: u64, seq_mm: u64, mm_fault_count: Option<u32>) -> FaultView {
    FaultView {
        latest_scan: Some(RangeScan {
            start: 0,
            end: u64::MAX,
            ts_ns,
            seq_global: seq_mm,
            seq_mm,
            mm_fault_count,
        }),
    }
}

#[test]
fn latest_stamp_uses_the_newer_range_scan() {
    let mut ev = fault(1000, 1, 50_000, Outcome::RejectLatency);
    ev.scan_seq_mm = 100;
    let view = pass(ev.scan_ns + 1, 990, None);
    assert_eq!(
        fault_delta(&ev, &view, Counter::Mm, StampKind::First),
        Some(900)
    );
    assert_eq!(
        fault_delta(&ev, &view, Counter::Mm, StampKind::Latest),
        Some(10)
    );
    // A pass whose counters were read after this fault (it raced the
    // pass) gives no delta near 2^64: the folio's own stamp stands.
    let racing = pass(ev.scan_ns + 1, 1010, None);
    assert_eq!(
        fault_delta(&ev, &racing, Counter::Mm, StampKind::Latest),
        Some(900)
    );
    ev.flags &= !ff::HAS_STAMP;
    assert_eq!(
        fault_delta(&ev, &racing, Counter::Mm, StampKind::Latest),
        None
    );
}

#[test]
fn latest_stamp_is_patch_2_of_2() {
    // Stamped at count 100000 (field 1); a later pass found the PTE still
    // PROT_NONE at count 260000 and re-stamped it (field 3 = 196608).
    let mut ev = fault(262_000, 1, 50_000, Outcome::RejectLatency);
    ev.stored_fault_count = 100_000;
    let later = pass(ev.stored_fault_count_ns + 1, 0, Some(260_000));
    let mut first = model("fault-count:threshold=100000");
    let mut latest = model("fault-count:threshold=100000,stamp=latest");
    assert_eq!(step(first.decide(&ev, &later)), (false, "fault_count"));
    assert_eq!(step(latest.decide(&ev, &later)), (true, "hot"));
    // A pass older than what the folio holds (the fault-time exchange or
    // the scanner's own stamp) changes nothing.
    let older = pass(ev.stored_fault_count_ns - 1, 0, Some(260_000));
    assert_eq!(step(latest.decide(&ev, &older)), (false, "fault_count"));
    // A pass without the patch's counter is not a re-stamp.
    let unknown = pass(ev.stored_fault_count_ns + 1, 0, None);
    assert_eq!(step(latest.decide(&ev, &unknown)), (false, "fault_count"));
}

#[test]
fn two_touch_needs_a_second_fault_within_the_window() {
    let mut m = TwoTouch::new(1000, 16);
    let view = FaultView::default();
    let a = fault(1, 7, 10, Outcome::RejectLatency);
    assert_eq!(step(m.decide(&a, &view)), (false, "first_touch"));
    let mut b = a;
    b.ts_ns += 500_000_000;
    assert_eq!(step(m.decide(&b, &view)), (true, "second_touch"));
    let mut c = b;
    c.ts_ns += 5_000_000_000;
    assert_eq!(step(m.decide(&c, &view)), (false, "first_touch"));
}

#[test]
fn specs_parse_and_bad_ones_explain() {
    let d = ModelDefaults {
        threshold: Some(2e5),
        counter: Some("global".into()),
        ..Default::default()
    };
    let k = KernelDefaults::default();
    // The patch counts per mm: a global counter only in the exact variant.
    let err = build("fault-count", &d, &k)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("fault-count:exact,counter=global"), "{err}");
    let m = build("fault-count:exact", &d, &k).expect("model");
    assert_eq!(m.params().get("mode").map(String::as_str), Some("exact"));
    assert_eq!(
        m.params().get("threshold").map(String::as_str),
        Some("200000")
    );
    assert_eq!(
        m.params().get("counter").map(String::as_str),
        Some("global")
    );
    let m = build("fault-count:exact,threshold=1e4,stamp=latest", &d, &k).expect("model");
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
    let err = build("fault-count:precise", &d, &k)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("not key=value"), "{err}");
    for bad in [
        "fault-count:threshold=NaN",
        "fault-count:exact,threshold=0.5",
    ] {
        let err = build(bad, &ModelDefaults::default(), &k)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("from 1 to 4294967295"), "{bad}: {err}");
    }
    // The patched kernel's own threshold is the default.
    let k = KernelDefaults {
        fault_count_threshold: 4242,
        ..KernelDefaults::default()
    };
    let m = build("fault-count", &ModelDefaults::default(), &k).expect("model");
    assert_eq!(
        m.params().get("threshold").map(String::as_str),
        Some("4242")
    );
}

#[test]
fn spec_numbers_are_checked_and_kernel_values_cannot_overflow() {
    let d = ModelDefaults::default();
    let k = KernelDefaults::default();
    for spec in [
        "kernel-time:threshold=NaN",
        "kernel-time:threshold=-1",
        "kernel-time:rate_limit=inf",
        "kernel-time:rate_limit=5e9",
        "two-touch:window_ms=0",
        "two-touch:window_ms=-inf",
        "two-touch:window_ms=86400001",
    ] {
        let err = build(spec, &d, &k)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("use a number from"), "{spec}: {err:?}");
    }
    // A damaged trace header's tunables: every model still builds and
    // judges, with the kernel's unsigned int limits.
    let huge = KernelDefaults {
        hot_threshold_ms: u64::MAX,
        scan_period_max_ms: u64::MAX,
        rate_limit_mbps: u64::MAX,
        fault_count_threshold: u64::MAX,
        ..KernelDefaults::default()
    };
    for spec in DEFAULT_MODELS {
        let mut m = build(spec, &d, &huge).expect("model");
        for (seq, now) in [0, u64::MAX / 2, u64::MAX].into_iter().enumerate() {
            let mut ev = fault(seq as u64, 0x1000, 5000, Outcome::RejectLatency);
            (ev.ts_ns, ev.scan_ns) = (now, 0);
            ev.threshold_ms = u32::MAX;
            let _ = m.decide(&ev, &FaultView::default());
        }
    }
}

fn build_err(spec: &str, d: &ModelDefaults) -> String {
    build(spec, d, &KernelDefaults::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

#[test]
fn unknown_model_options_are_refused_with_the_valid_keys() {
    let d = ModelDefaults::default();
    for (spec, keys) in [
        (
            "fault-count:treshold=5",
            "exact, threshold, counter, stamp, rate_limit",
        ),
        ("fault-count:exact,window_ms=5", "exact, threshold"),
        ("kernel-time:counter=mm", "threshold, rate_limit"),
        ("two-touch:threshold=5", "window_ms"),
    ] {
        let err = build_err(spec, &d);
        assert!(err.contains("has no option"), "{spec}: {err:?}");
        assert!(err.contains(keys), "{spec}: {err:?}");
    }
}

#[test]
fn the_threshold_has_one_range_in_both_modes_and_one_message() {
    let msg = check_threshold(5e9).expect_err("above the range");
    assert!(msg.contains("from 1 to 4294967295"), "{msg}");
    for spec in [
        "fault-count:threshold=5e9",
        "fault-count:exact,threshold=5e9",
    ] {
        assert_eq!(build_err(spec, &ModelDefaults::default()), msg, "{spec}");
    }
    let flat = ModelDefaults {
        threshold: Some(5e9),
        ..ModelDefaults::default()
    };
    assert_eq!(build_err("fault-count:exact", &flat), msg);
    for ok in [1.0, 4_294_967_295.0] {
        assert_eq!(check_threshold(ok), Ok(ok));
    }
    for bad in [0.5, f64::NAN, f64::INFINITY, 4_294_967_296.0] {
        assert!(check_threshold(bad).is_err(), "{bad}");
    }
}
