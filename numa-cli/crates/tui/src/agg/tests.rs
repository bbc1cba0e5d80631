//! Aggregation on synthetic event streams: rates, percentiles, per-process
//! rows, window rule, warnings, scan coverage and the heat strip.
use numa_ebpf_common::{fault_flags as ff, tnf, Counter, EventKind, Outcome, ScanEvent, SkipEvent};

use super::*;
use crate::frame::{Axis, Warnings};
use numa_core::{
    decode::fixtures::fault,
    model::{
        policy::{build, KernelDefaults, ModelDefaults},
        GONE_AFTER_NS,
    },
};

const T0: u64 = 1_000_000_000_000;
const S: u64 = 1_000_000_000;

fn header() -> trace::Header {
    let json = serde_json::json!({
        "format_version": 1, "numatrace_version": "t", "abi_version": 1,
        "kernel_release": "6.12.0-test", "attach_plan": null,
        "nodes": [
            {"id": 0, "cpus": [0, 1], "mem_total_kb": 2_000_000, "mem_free_kb": 500_000, "distances": [10, 20]},
            {"id": 1, "cpus": [], "mem_total_kb": 1_000_000, "mem_free_kb": 900_000, "distances": [20, 10]}
        ],
        "memory_tiers": [{"tier": "memory_tier4", "id": 4, "nodes": [0]}, {"tier": "memory_tier22", "id": 22, "nodes": [1]}],
        "tunables": {"hot_threshold_ms": 1000, "promote_rate_limit_mbps": 65536, "demotion_enabled": null,
                     "scan_delay_ms": 1000, "scan_period_min_ms": 1000, "scan_period_max_ms": 60000, "scan_size_mb": 256},
        "numa_balancing": 2, "params": null, "started_unix_ns": 0, "started_mono_ns": 0,
        "attach_started_mono_ns": 0, "sample_every": 1, "stamp_entries": 100, "record_sizes": [136, 72, 40]
    });
    serde_json::from_value(json).expect("header")
}

fn agg(specs: &[&str]) -> Aggregator {
    let d = ModelDefaults::default();
    let k = KernelDefaults::default();
    let policies = specs
        .iter()
        .map(|s| build(s, &d, &k).expect("model"))
        .collect();
    Aggregator::new(policies, &header(), "test".into())
}

fn snap(ts: u64, drops: u64, inserts: u64, demoted: u64) -> Snapshot {
    let mut counters = vec![0; 32];
    counters[Counter::RingDrops as usize] = drops;
    counters[Counter::StampInserts as usize] = inserts;
    Snapshot {
        ts_ns: ts,
        counters,
        vmstat: [("pgdemote_kswapd".to_owned(), demoted)]
            .into_iter()
            .collect(),
        ..Snapshot::default()
    }
}

/// A fault of process `pid` at `ts` with the given latency and outcome.
fn f(pid: u32, ts: u64, page: u64, latency_ms: u64, outcome: Outcome) -> Event {
    Event::Fault(fault_event(pid, ts, page, latency_ms, outcome))
}

fn fault_event(
    pid: u32,
    ts: u64,
    page: u64,
    latency_ms: u64,
    outcome: Outcome,
) -> numa_ebpf_common::FaultEvent {
    let mut e = fault(1, page, 0, outcome);
    e.pid_tgid = (u64::from(pid) << 32) | u64::from(pid);
    e.ts_ns = ts;
    e.scan_ns = ts - latency_ms * 1_000_000;
    e.kernel_latency_ms = latency_ms as u32;
    e.seq_mm = 1_000_000;
    e.scan_seq_mm = 1_000_000 - latency_ms; // delta == latency in ms, for easy checks
    e
}

/// `n` decisions of process 7 in its first second, 10 ms apart: the first
/// `promoted` promoted (fast), the rest rejected on latency.
fn promoted_then_refused(a: &mut Aggregator, promoted: u64, n: u64) {
    for i in 0..n {
        let (lat, o) = if i < promoted {
            (100, Outcome::PromoteHot)
        } else {
            (5000, Outcome::RejectLatency)
        };
        a.event(&f(7, T0 + i * 10_000_000, i, lat, o));
    }
}

#[test]
fn rates_per_interval_and_history() {
    let mut a = agg(&["kernel-time"]);
    a.snapshot(&snap(T0, 0, 0, 0));
    // First second: 100 faults, 40 promoted (fast), 60 rejected on latency.
    promoted_then_refused(&mut a, 40, 100);
    let fr = a.publish(Some(T0 + S), Focus::default());
    assert_eq!(fr.interval_s, 1.0);
    let p = &fr.processes[0];
    assert_eq!((p.pid, p.comm.as_str()), (7, "hot-chunks"));
    assert_eq!(p.faults_s, 100.0);
    assert_eq!(p.decisions_s, 100.0);
    assert_eq!(p.promoted_s, 40.0);
    assert_eq!(p.rej_latency_s, 60.0);
    // kernel-time agrees with the kernel on every one of these.
    assert_eq!(p.model_s, vec![40.0]);
    assert_eq!(p.agree_pct, vec![Some(100.0)]);
    assert_eq!(fr.system.faults_s, 100.0);
    assert_eq!(fr.models[0].promote_s, 40.0);
    let faults = fr
        .rates
        .iter()
        .find(|r| r.name == "hint faults")
        .expect("series");
    assert_eq!(faults.history, vec![100.0]);
    // Second interval of 2 s: 50 faults -> 25/s; history grows.
    for i in 0..50 {
        a.event(&f(
            7,
            T0 + S + i * 1_000_000,
            1000 + i,
            100,
            Outcome::PromoteHot,
        ));
    }
    a.snapshot(&snap(T0 + 3 * S, 0, 0, 30));
    let fr = a.publish(Some(T0 + 3 * S), Focus::default());
    assert_eq!(fr.interval_s, 2.0);
    assert_eq!(fr.processes[0].faults_s, 25.0);
    assert_eq!(fr.processes[0].promoted_s, 25.0);
    let faults = fr
        .rates
        .iter()
        .find(|r| r.name == "hint faults")
        .expect("series");
    assert_eq!(faults.history, vec![100.0, 25.0]);
    // Demotions come from vmstat snapshots: 30 pages over 3 s.
    let dem = fr
        .rates
        .iter()
        .find(|r| r.name == "demoted pg")
        .expect("series");
    assert_eq!((dem.current, dem.unit.as_str()), (10.0, PAGES));
    // A publication at the same time adds no point and keeps the rates.
    let fr = a.publish(Some(T0 + 3 * S), Focus::default());
    assert_eq!(fr.processes[0].faults_s, 25.0);
    let faults = fr
        .rates
        .iter()
        .find(|r| r.name == "hint faults")
        .expect("series");
    assert_eq!(faults.history.len(), 2);
    // The history is bounded.
    for k in 0..(HISTORY as u64 + 20) {
        a.publish(Some(T0 + (4 + k) * S), Focus::default());
    }
    let fr = a.publish(Some(T0 + (HISTORY as u64 + 30) * S), Focus::default());
    assert!(fr.rates.iter().all(|r| r.history.len() == HISTORY));
}

/// A fault of process 7 at `ms` into the window, whose folio of `pages`
/// pages the kernel decided to promote and migrated from `src` to node 0
/// (`Some(ok)`) or did not try to.
fn promotion(ms: u64, pages: u32, src: i32, migrated: Option<bool>) -> Event {
    let mut e = fault_event(7, T0 + ms * 1_000_000, ms, 100, Outcome::PromoteHot);
    (e.nr_pages, e.src_nid) = (pages, src);
    if let Some(ok) = migrated {
        e.flags |= ff::MIGRATE_TRIED;
        e.migrate_ok = u8::from(ok);
    }
    Event::Fault(e)
}

/// A THP promotion is one folio and 512 pages: the folio rates count it
/// once, "promoted pg" counts what vmstat's pgpromote_success adds, and
/// shows vmstat's rate beside it.
/// Every model is counted in a process's row, however many run.
#[test]
fn a_process_row_counts_each_of_nine_models() {
    let mut a = agg(&["kernel-time"; 9]);
    a.snapshot(&snap(T0, 0, 0, 0));
    promoted_then_refused(&mut a, 4, 10);
    let fr = a.publish(Some(T0 + S), Focus::default());
    let p = &fr.processes[0];
    assert_eq!(p.model_s, vec![4.0; 9]);
    assert_eq!(p.agree_pct, vec![Some(100.0); 9]);
    assert!(fr.models.iter().all(|m| m.promote_s == 4.0));
}

#[test]
fn a_thp_promotion_is_one_folio_and_512_pages() {
    let mut a = agg(&[]);
    let promoted_vmstat = |ts: u64, pages: u64| Snapshot {
        vmstat: [("pgpromote_success".to_owned(), pages)].into(),
        ..snap(ts, 0, 0, 0)
    };
    a.snapshot(&promoted_vmstat(T0, 1000));
    for ev in [
        promotion(1, 512, 1, Some(true)),
        promotion(2, 1, 1, Some(true)),
        // Failed, DRAM to DRAM, not tried: no page promoted.
        promotion(3, 512, 1, Some(false)),
        promotion(4, 512, 0, Some(true)),
        promotion(5, 512, 1, None),
    ] {
        a.event(&ev);
    }
    a.snapshot(&promoted_vmstat(T0 + S, 1000 + 513));
    let fr = a.publish(Some(T0 + S), Focus::default());
    let (sys, p) = (&fr.system, &fr.processes[0]);
    assert_eq!((sys.promoted_s, sys.promoted_pages_s), (5.0, 513.0));
    assert_eq!((p.promoted_s, p.promoted_pages_s), (5.0, 513.0));
    let rate = |name: &str| {
        let r = fr.rates.iter().find(|r| r.name == name).expect(name);
        (r.current, r.unit.as_str())
    };
    assert_eq!(rate("promoted"), (5.0, FOLIOS));
    assert_eq!(rate("decisions"), (5.0, FOLIOS));
    assert_eq!(rate("promoted pg"), (513.0, PAGES));
    assert_eq!(rate("vmstat promo"), (513.0, PAGES));
    assert_eq!(rate("local %").1, "%");
}

#[test]
fn percentiles_are_log2_bucket_bounds() {
    let mut a = agg(&[]);
    a.snapshot(&snap(T0, 0, 0, 0));
    // 98 faults at 100 ms, 2 at 40 s: p50 in (67, 134] ms, p99 in (34, 68] s.
    for i in 0..100 {
        let lat = if i < 98 { 100 } else { 40_000 };
        a.event(&f(9, T0 + 60 * S + i, i, lat, Outcome::RejectLatency));
    }
    let fr = a.publish(Some(T0 + 61 * S), Focus::default());
    let p = &fr.processes[0];
    let p50 = p.lat_p50_ms.expect("p50");
    let p99 = p.lat_p99_ms.expect("p99");
    assert!((100.0..=134.3).contains(&p50), "p50 {p50}");
    assert!((40_000.0..=68_720.0).contains(&p99), "p99 {p99}");
    // The fault-count delta equals the latency in ms here: median bucket 128.
    assert_eq!(p.delta_p50, Some(128));
    // Histograms split by decision; the kernel threshold is marked.
    assert_eq!(fr.hist.latency_rejected.iter().sum::<u64>(), 100);
    assert_eq!(fr.hist.latency_promoted.iter().sum::<u64>(), 0);
    assert_eq!(fr.hist.kernel_threshold_ms, Some(1000));
}

#[test]
fn processes_sorted_busiest_first_and_focus_selects_histogram() {
    let mut a = agg(&["fault-count:exact,threshold=50", "two-touch"]);
    a.snapshot(&snap(T0, 0, 0, 0));
    for i in 0..30 {
        a.event(&f(1, T0 + i, i, 10, Outcome::PromoteHot));
    }
    for i in 0..70 {
        a.event(&f(2, T0 + i, i, 100, Outcome::RejectLatency));
    }
    let fr = a.publish(
        Some(T0 + S),
        Focus {
            hist_pid: Some(1),
            detail_pid: None,
        },
    );
    let pids: Vec<u32> = fr.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![2, 1]);
    assert_eq!(a.busiest(1), vec![2]);
    // fault-count (delta 10 < 50) promotes pid 1's faults; pid 2's delta is
    // 100: rejected, agreeing with the kernel.
    assert_eq!(fr.processes[1].model_s[0], 30.0);
    assert_eq!(fr.processes[0].model_s[0], 0.0);
    assert_eq!(fr.processes[0].agree_pct[0], Some(100.0));
    assert_eq!(fr.models[0].short, "fcount");
    assert_eq!(fr.models[0].axis, Axis::FaultDelta);
    assert_eq!(fr.models[1].axis, Axis::WindowMs);
    assert_eq!(fr.hist.pid, Some(1));
    assert_eq!(fr.hist.latency_promoted.iter().sum::<u64>(), 30);
    assert!(fr.detail.is_none());
    assert_eq!(fr.system.faults_total, 100);
}

#[test]
fn window_rule_local_share_thresholds_and_undecided_faults() {
    let mut a = agg(&[]);
    // Older than the first snapshot: not counted (same rule as the totals).
    a.snapshot(&snap(T0, 0, 0, 0));
    a.event(&f(3, T0 - 5, 1, 10, Outcome::PromoteHot));
    let Event::Fault(mut local) = f(3, T0 + 1, 2, 10, Outcome::PromoteHot) else {
        unreachable!()
    };
    local.tnf_flags = tnf::FAULT_LOCAL;
    local.threshold_ms = 1125;
    local.dst_nid = 0;
    a.event(&Event::Fault(local));
    let Event::Fault(mut undecided) = f(3, T0 + 2, 3, 10, Outcome::NoDecision) else {
        unreachable!()
    };
    undecided.flags &= !(ff::DECIDED | ff::KERNEL_LATENCY);
    undecided.flags |= ff::MIGRATE_TRIED; // and the migration failed
    a.event(&Event::Fault(undecided));
    let fr = a.publish(Some(T0 + S), Focus::default());
    assert_eq!(fr.events, 2);
    let p = &fr.processes[0];
    assert_eq!(p.faults_s, 2.0);
    assert_eq!(p.decisions_s, 1.0);
    assert_eq!(p.local_pct, Some(50.0));
    assert_eq!(fr.header.kernel_threshold_ms.get(&0), Some(&1125));
    assert_eq!(fr.hist.kernel_threshold_ms, Some(1125));
    let mig = fr
        .rates
        .iter()
        .find(|r| r.name == "migrate fail")
        .expect("series");
    assert_eq!(mig.current, 1.0);
    let local = fr
        .rates
        .iter()
        .find(|r| r.name == "local %")
        .expect("series");
    assert_eq!(local.current, 50.0);
}

#[test]
fn drops_and_evictions_from_snapshots() {
    let mut a = agg(&[]);
    a.snapshot(&snap(T0, 5, 50, 0));
    let fr = a.publish(Some(T0 + S), Focus::default());
    assert_eq!(fr.warnings, Warnings::default());
    a.snapshot(&snap(T0 + S, 12, 180, 0));
    let fr = a.publish(Some(T0 + 2 * S), Focus::default());
    // Drops since start; evictions = inserts - capacity (100 in the header).
    assert_eq!(fr.warnings.ring_drops, 7);
    assert_eq!(fr.warnings.evictions, 30);
    assert_eq!(fr.header.tiers.len(), 2);
    assert_eq!(fr.header.tiers[1].nodes[0].cpus, 0);
}

/// A `sched_skip_vma_numa` record of `pid` naming `start..end`.
fn skip(pid: u64, start: u64, end: u64, ts: u64, reason: u32) -> Event {
    Event::Skip(SkipEvent {
        kind: EventKind::VmaSkip as u32,
        reason,
        ts_ns: ts,
        pid_tgid: pid << 32,
        vm_start: start,
        vm_end: end,
        ..SkipEvent::default()
    })
}

fn scan(pid: u32, start: u64, end: u64, ts: u64, ptes: u64) -> Event {
    Event::Scan(ScanEvent {
        kind: EventKind::Scan as u32,
        pid_tgid: u64::from(pid) << 32,
        start,
        end,
        ptes_updated: ptes,
        ts_ns: ts,
        ..ScanEvent::default()
    })
}

#[test]
fn detail_has_scan_coverage_skips_vmas_and_heat() {
    let mut a = agg(&[]);
    a.snapshot(&snap(T0, 0, 0, 0));
    let base = 0x7f00_0000_0000u64;
    // Region A (8 MiB) scanned and hot; region B (far away) scanned, cold.
    a.event(&scan(5, base, base + (8 << 20), T0 + 1, 2048));
    a.event(&scan(
        5,
        base + (1 << 30),
        base + (1 << 30) + (2 << 20),
        T0 + 2,
        512,
    ));
    a.event(&skip(
        5,
        base + (1 << 30),
        base + (1 << 30) + (2 << 20),
        T0 + 3,
        2,
    ));
    for i in 0..40u64 {
        let mut ev = f(5, T0 + 10 + i, 0, 50, Outcome::PromoteHot);
        if let Event::Fault(e) = &mut ev {
            e.addr = base + (i % 4) * (2 << 20) + 4096;
        }
        a.event(&ev);
    }
    a.set_vmas(
        5,
        Some(vec![
            Vma {
                start: base,
                end: base + (8 << 20),
                perms: "rw-p".into(),
                path: String::new(),
            },
            Vma {
                start: base + (1 << 30),
                end: base + (1 << 30) + (2 << 20),
                perms: "r--p".into(),
                path: "/lib/x.so".into(),
            },
        ]),
    );
    let focus = Focus {
        hist_pid: Some(5),
        detail_pid: Some(5),
    };
    let fr = a.publish(Some(T0 + S), focus);
    let d = fr.detail.expect("detail");
    assert_eq!((d.pid, d.faults_total), (5, 40));
    assert_eq!((d.scan_passes, d.ptes_updated), (2, 2560));
    assert_eq!(d.skips.get("inaccessible"), Some(&1));
    assert_eq!(d.ranges.len(), 2);
    let hot = d.ranges.iter().find(|r| r.start == base).expect("range");
    assert_eq!((hot.passes, hot.ptes_updated, hot.faults), (1, 2048, 40));
    let cold = d.ranges.iter().find(|r| r.start != base).expect("range");
    assert_eq!(cold.skip.as_deref(), Some("inaccessible"));
    let vmas = d.vmas.expect("vmas");
    assert_eq!((vmas[0].faults, vmas[0].scan_passes), (40, 1));
    assert_eq!(vmas[1].skip.as_deref(), Some("inaccessible"));
    // Heat: the two regions are separate rows (split at the gap, then the
    // hot one halved); the latest column has the faults, 10 per chunk.
    let heat = d.heat;
    assert!(heat.rows.len() >= 2);
    let last = heat.slots - 1;
    let hot_faults: u32 = heat
        .rows
        .iter()
        .filter(|r| r.start < base + (1 << 30))
        .map(|r| r.faults[last])
        .sum();
    assert_eq!(hot_faults, 40);
    let cold_row = heat
        .rows
        .iter()
        .find(|r| r.start == base + (1 << 30))
        .expect("row");
    assert_eq!(cold_row.faults[last], 0);
    assert!(cold_row.scanned[last]);
    assert_eq!(heat.max, 10);
    // Older columns are empty; a later quiet interval adds an empty column.
    let fr = a.publish(Some(T0 + 2 * S), focus);
    let heat = fr.detail.expect("detail").heat;
    let total_last: u32 = heat.rows.iter().map(|r| r.faults[heat.slots - 1]).sum();
    let total_prev: u32 = heat.rows.iter().map(|r| r.faults[heat.slots - 2]).sum();
    assert_eq!((total_prev, total_last), (40, 0));
}

#[test]
fn regions_split_at_gaps_then_halve() {
    assert!(regions(&[], 4).is_empty());
    assert_eq!(regions(&[1, 2, 3, 100, 101], 2), vec![0..3, 3..5]);
    assert_eq!(regions(&[1, 2, 3, 4], 4), vec![0..1, 1..2, 2..3, 3..4]);
    assert_eq!(regions(&[1, 2, 3, 4, 5, 6, 7, 8], 2), vec![0..4, 4..8]);
    assert_eq!(regions(&[1], 16), vec![0..1]);
}

#[test]
fn idle_processes_are_pruned_and_memory_is_capped() {
    let mut a = agg(&[]);
    a.snapshot(&snap(T0, 0, 0, 0));
    a.event(&f(11, T0 + 1, 1, 10, Outcome::PromoteHot));
    a.publish(Some(T0 + S), Focus::default());
    assert_eq!(a.procs.len(), 1);
    // Silent for less than the gone bound: still there.
    a.publish(Some(T0 + GONE_AFTER_NS - S), Focus::default());
    assert_eq!(a.procs.len(), 1);
    a.publish(Some(T0 + GONE_AFTER_NS + 2 * S), Focus::default());
    assert_eq!(a.procs.len(), 0);
    // One process touching more chunks than the cap keeps the cap.
    let mut p = Proc::new(1, 0);
    for c in 0..(MAX_CHUNKS_PER_PROC as u64 + 100) {
        if let Some(ch) = p.chunk(c) {
            ch.faults += 1;
        }
    }
    assert_eq!(p.chunks.len(), MAX_CHUNKS_PER_PROC);
    p.roll_heat();
    assert_eq!(p.heat[0].len(), MAX_SLOT_ENTRIES);
    assert!(p.touched.is_empty());
    for _ in 0..(HEAT_SLOTS + 5) {
        p.roll_heat();
    }
    assert_eq!(p.heat.len(), HEAT_SLOTS);
}

/// Processes come and go: the table holds those active within the gone
/// bound, at most [`MAX_PROCS`] (the least recently active go first), and a
/// process first seen after thousands of others is tracked.
#[test]
fn process_churn_keeps_the_table_bounded_and_new_processes_tracked() {
    let mut a = agg(&[]);
    a.snapshot(&snap(T0, 0, 0, 0));
    let gone = (GONE_AFTER_NS / S) as usize + 1;
    // Two a second for 10 000 s.
    let mut ts = T0;
    for i in 0..20_000u32 {
        ts = T0 + 1 + u64::from(i) * S / 2;
        a.event(&f(100_000 + i, ts, 1, 10, Outcome::PromoteHot));
        if i % 97 == 0 {
            a.publish(Some(ts), Focus::default());
        }
        assert!(a.procs.len() <= 2 * gone, "{} processes", a.procs.len());
    }
    // Twice the table's bound within a millisecond.
    for i in 0..(2 * MAX_PROCS as u32) {
        a.event(&f(
            200_000 + i,
            ts + u64::from(i),
            1,
            10,
            Outcome::PromoteHot,
        ));
        assert!(a.procs.len() <= MAX_PROCS);
    }
    assert!(a.procs.contains(200_000 + 2 * MAX_PROCS as u32 - 1));
    assert!(!a.procs.contains(200_000));
}

/// The test bed's stuck VMA: two passes, their pages faulted, then only
/// `pid_inactive` skips. The table row and the detail say so at the next
/// publication after the skips.
#[test]
fn a_vma_the_scanner_stopped_skipping_shows_its_verdict() {
    let mut a = agg(&[]);
    a.snapshot(&snap(T0, 0, 0, 0));
    let base = 0x7f00_0000_0000u64;
    let mib = 1u64 << 20;
    a.event(&scan(9, base, base + 16 * mib, T0 + S, 4096));
    a.event(&scan(9, base + 16 * mib, base + 32 * mib, T0 + 2 * S, 4096));
    for i in 0..8192u64 {
        let mut ev = f(9, T0 + 3 * S + i, i, 2500, Outcome::RejectLatency);
        if let Event::Fault(e) = &mut ev {
            e.addr = base + i * 4096;
        }
        a.event(&ev);
    }
    let focus = Focus {
        hist_pid: None,
        detail_pid: Some(9),
    };
    // Before the skips: the pages were refused on latency.
    let early = a.publish(Some(T0 + 4 * S), focus);
    assert_eq!(
        early.processes[0].verdict.as_deref(),
        Some("refused 2.5s>1.0s")
    );
    for t in 0..80u64 {
        a.event(&skip(9, base, base + 256 * mib, T0 + 4 * S + t * S / 2, 4));
    }
    let frame = a.publish(Some(T0 + 44 * S), focus);
    assert_eq!(
        frame.processes[0].verdict.as_deref(),
        Some("pid_inactive 42s")
    );
    let d = frame.detail.expect("detail of pid 9");
    assert_eq!(
        d.verdict.as_deref(),
        Some("not scanned for 42 s (pid_inactive, 80 skips since the last pass)")
    );
    assert_eq!(d.vma_verdicts.len(), 1, "{:?}", d.vma_verdicts);
    assert!(d.vma_verdicts[0].named);
}

/// A process with pages protected but no hint fault (the scanner came by
/// once, then only skipped its VMA) is in the table, with its verdict.
#[test]
fn a_process_without_faults_but_with_protected_pages_is_listed() {
    let mut a = agg(&[]);
    a.snapshot(&snap(T0, 0, 0, 0));
    let base = 0x7f00_0000_0000u64;
    let mib = 1u64 << 20;
    a.event(&scan(11, base, base + 256 * mib, T0 + S, 4096));
    for t in 0..60u64 {
        a.event(&skip(11, base, base + 256 * mib, T0 + 2 * S + t * S / 2, 4));
    }
    let focus = Focus {
        hist_pid: None,
        detail_pid: None,
    };
    let frame = a.publish(Some(T0 + 33 * S), focus);
    let row = frame
        .processes
        .iter()
        .find(|p| p.pid == 11)
        .expect("pid 11 listed");
    assert_eq!(row.verdict.as_deref(), Some("pid_inactive 32s"));
}

#[test]
fn cgroup_rows_sum_their_processes_and_a_scanned_cgroup_has_its_verdict() {
    use std::collections::{BTreeMap, BTreeSet};
    let lookup = |ids: &BTreeSet<u64>| -> BTreeMap<u64, String> {
        ids.iter()
            .filter(|&&id| id != 9)
            .map(|&id| (id, format!("/c{id}")))
            .collect()
    };
    let mut a = agg(&["kernel-time"]).with_cgroup_paths(Box::new(lookup));
    a.snapshot(&snap(T0, 0, 0, 0));
    // Processes 7 and 8 in cgroup 5, process 6 in cgroup 9 (no path);
    // cgroup 3's process scanned, never faulted.
    for (i, (pid, cg)) in [(7, 5), (8, 5), (8, 5), (6, 9)].into_iter().enumerate() {
        let mut e = fault_event(pid, T0 + 1 + i as u64, i as u64, 100, Outcome::PromoteHot);
        e.cgroup_id = cg;
        a.event(&Event::Fault(e));
    }
    let Event::Scan(s) = scan(4, 0x7f00_0000_0000, 0x7f00_0100_0000, T0 + 10, 4096) else {
        unreachable!("scan() makes scans")
    };
    a.event(&Event::Scan(ScanEvent { cgroup_id: 3, ..s }));
    let fr = a.publish(Some(T0 + S), Focus::default());
    let rows: Vec<(Option<&str>, u64)> = fr
        .cgroups
        .iter()
        .map(|r| (r.cgroup.as_deref(), r.faults_total))
        .collect();
    assert_eq!(
        rows,
        [(Some("/c5"), 3), (Some("id 9"), 1), (Some("/c3"), 0)]
    );
    assert_eq!(fr.cgroups[0].faults_s, 3.0);
    assert_eq!(fr.cgroups[0].agree_pct, [Some(100.0)]);
    assert_eq!(fr.cgroups[2].verdict.as_deref(), Some("cold"));
    let of = |pid: u32| {
        let p = fr.processes.iter().find(|r| r.pid == pid);
        p.and_then(|r| r.cgroup.as_deref())
    };
    assert_eq!(
        (of(7), of(8), of(6), of(4)),
        (Some("/c5"), Some("/c5"), Some("id 9"), Some("/c3"))
    );
}

/// Process 7 promotes four folios; reclaim demotes three of them 12 s
/// later and a folio of another identity on the same PFN: the row's
/// ping-pong share, the system's rate, its cgroup's row and the verdict
/// say so.
#[test]
fn promotions_demoted_again_are_ping_pong_in_rows_rates_and_verdict() {
    let mut a = agg(&[]);
    a.snapshot(&snap(T0, 0, 0, 0));
    for i in 0..4u64 {
        let e = fault_event(7, T0 + i * 1_000_000, i, 100, Outcome::PromoteHot);
        let mut e = numa_core::decode::fixtures::migrated(e, 0xa1, i);
        e.cgroup_id = 77;
        a.event(&Event::Fault(e));
    }
    a.publish(Some(T0 + S), Focus::default());
    let demote = |index: u64, mapping: u64| {
        Event::Demote(numa_core::decode::fixtures::demotion(
            T0 + 12 * S,
            mapping,
            index,
        ))
    };
    for i in 0..3 {
        a.event(&demote(i, 0xa1));
    }
    a.event(&demote(3, 0xb2));
    let focus = Focus {
        hist_pid: None,
        detail_pid: Some(7),
    };
    let fr = a.publish(Some(T0 + 13 * S), focus);
    let d = fr.detail.as_ref().and_then(|d| d.trips.as_ref());
    let d = d.expect("detail of 7 with its trips");
    assert_eq!((d.promotions, d.pingpong), (4, 3));
    assert_eq!(d.demoted_by.get("kswapd"), Some(&3), "{:?}", d.demoted_by);
    assert_eq!(d.demoted_by.values().sum::<u64>(), 3, "{:?}", d.demoted_by);
    let p = &fr.processes[0];
    assert_eq!(p.pid, 7);
    assert_eq!(p.pingpong_pct, Some(75.0));
    assert_eq!(fr.system.pingpong_pct, Some(75.0));
    // 12 s on DRAM: the log2 bucket up to 2^34 ns.
    assert_eq!(p.verdict.as_deref(), Some("ping-pong 17s"));
    let rate = fr
        .rates
        .iter()
        .find(|r| r.name == "ping-pong")
        .expect("series");
    assert_eq!(rate.history, vec![0.0, 0.25]);
    let g = fr
        .cgroups
        .iter()
        .find(|g| g.faults_total == 4)
        .expect("cgroup row");
    assert_eq!(g.pingpong_pct, Some(75.0));
    assert_eq!(g.verdict.as_deref(), Some("ping-pong 17s"));
}
