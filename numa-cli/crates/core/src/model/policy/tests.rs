use numa_ebpf_common::{fault_flags as ff, Outcome};

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

#[test]
fn spec_numbers_are_checked_and_kernel_values_cannot_overflow() {
    let d = ModelDefaults::default();
    let k = KernelDefaults::default();
    for spec in [
        "kernel-time:threshold=NaN",
        "kernel-time:threshold=-1",
        "kernel-time:rate_limit=inf",
        "kernel-time:rate_limit=5e9",
        "fault-count:threshold=0.5",
        "fault-count:threshold=1e300",
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
