use numa_ebpf_common::{EventKind, Outcome, ScanEvent, SkipEvent};

use super::*;
use crate::decode::fixtures::fault;
use crate::model::totals::Totals;

const S: u64 = 1_000_000_000;
const BASE: u64 = 0x7f00_0000_0000;
const MIB: u64 = 1 << 20;

fn scan(pid: u64, start: u64, end: u64, ts_ns: u64, ptes: u64) -> ScanEvent {
    ScanEvent {
        kind: EventKind::Scan as u32,
        pid_tgid: pid << 32,
        start,
        end,
        ts_ns,
        ptes_updated: ptes,
        ..ScanEvent::default()
    }
}

fn skip(pid: u64, start: u64, end: u64, ts_ns: u64, reason: u32) -> SkipEvent {
    SkipEvent {
        kind: EventKind::VmaSkip as u32,
        reason,
        ts_ns,
        pid_tgid: pid << 32,
        vm_start: start,
        vm_end: end,
        ..SkipEvent::default()
    }
}

/// The test bed's story: two 16 MiB passes over a 256 MiB VMA, their
/// pages faulted and promoted, then only `pid_inactive` skips of it for
/// 40 s, while a small scanned VMA elsewhere has no fault.
#[test]
fn a_vma_scanned_twice_then_skipped_is_not_scanned() {
    let mut f = Funnel::default();
    f.scan(&scan(42, BASE, BASE + 16 * MIB, S, 4096));
    f.scan(&scan(42, BASE + 16 * MIB, BASE + 32 * MIB, 2 * S, 4096));
    f.scan(&scan(42, 0x1000_0000, 0x1000_1000, 2 * S, 1));
    for i in 0..8192 {
        let mut ev = fault(i, i, 500, Outcome::PromoteHot);
        ev.ts_ns = 3 * S + i;
        f.fault(&ev, true);
    }
    for t in 0..80 {
        f.skip(&skip(42, BASE, BASE + 256 * MIB, 4 * S + t * S / 2, 4));
    }
    let rows = f.report(44 * S);
    assert_eq!(rows.len(), 1);
    let p = &rows[0];
    assert_eq!((p.pid, p.comm.as_str()), (42, "hot-chunks"));
    assert_eq!(p.verdict_kind, "not_scanned");
    assert_eq!(
        p.verdict,
        "not scanned for 42 s (pid_inactive, 80 skips since the last pass)"
    );
    assert_eq!(p.verdict_vma, Some([BASE, BASE + 256 * MIB]));
    // The skip record took both passes' region into its VMA.
    assert_eq!(p.vmas.len(), 2);
    let vma = &p.vmas[0];
    assert!(vma.named);
    assert_eq!(
        (vma.stages.scan_passes, vma.stages.ptes_protected),
        (2, 8192)
    );
    assert_eq!(vma.stages.slow_faults, 8192);
    assert_eq!(vma.stages.skips["pid_inactive"].count, 80);
    assert_eq!(
        (p.vmas[1].start, p.vmas[1].named, &*p.vmas[1].verdict_kind),
        (0x1000_0000, false, "cold")
    );
    assert_eq!(p.stages.scan_passes, 3);
    // The table cell, and one process asked for by pid.
    assert_eq!(p.judged.short(), "pid_inactive 42s");
    let one = f.process(42, 44 * S).expect("pid 42 is live");
    assert_eq!(one.verdict, p.verdict);
    assert!(f.process(43, 44 * S).is_none());
}

#[test]
fn regions_are_bounded_and_faults_outside_count_for_the_process() {
    let mut f = Funnel::default();
    for i in 0..(MAX_REGIONS as u64 + 8) {
        let start = BASE + i * 64 * MIB;
        f.skip(&skip(7, start, start + 32 * MIB, S + i, 0));
    }
    let mut ev = fault(1, 1, 5, Outcome::PromoteHot);
    ev.pid_tgid = 7 << 32;
    (ev.addr, ev.ts_ns) = (0x10_0000, 2 * S);
    f.fault(&ev, true);
    f.fault(&ev, false);
    let rows = f.report(2 * S);
    assert_eq!(rows[0].vmas.len(), MAX_REGIONS);
    assert_eq!(rows[0].stages.slow_faults, 1);
    assert!(rows[0].vmas.iter().all(|v| v.stages.slow_faults == 0));
}

/// A thread stack mapped right below a big VMA: their passes join into
/// one provisional region, which goes to the VMA holding most of it when
/// skip records name them, not to the first one named.
#[test]
fn passes_joined_across_adjacent_vmas_go_to_the_vma_holding_most() {
    let mut f = Funnel::default();
    let (stack, big) = (BASE, BASE + 68 * 1024);
    f.scan(&scan(7, stack, big, S, 0));
    f.scan(&scan(7, big, big + 256 * MIB, S, 4096));
    f.skip(&skip(7, stack, big, 2 * S, 4));
    f.skip(&skip(7, big, big + 256 * MIB, 3 * S, 4));
    let rows = f.report(40 * S);
    let p = &rows[0];
    assert_eq!(p.verdict_vma, Some([big, big + 256 * MIB]));
    let vma = p.vmas.iter().find(|v| v.start == big).expect("the big VMA");
    assert!(vma.named);
    assert_eq!(vma.stages.ptes_protected, 4096);
    assert_eq!(p.verdict_kind, "not_scanned");
}

/// A VMA named whole, then split: its small piece named first does not
/// take the whole's counts; the big piece does.
#[test]
fn a_named_vma_split_since_goes_to_its_bigger_piece() {
    let mut f = Funnel::default();
    let (small, big) = (BASE, BASE + 8 * 1024);
    f.scan(&scan(7, small, big + 256 * MIB, S, 4096));
    f.skip(&skip(7, small, big + 256 * MIB, 2 * S, 4));
    f.skip(&skip(7, small, big, 3 * S, 4));
    f.skip(&skip(7, big, big + 256 * MIB, 4 * S, 4));
    let rows = f.report(40 * S);
    let p = &rows[0];
    assert_eq!(p.verdict_vma, Some([big, big + 256 * MIB]));
    let piece = |start| p.vmas.iter().find(|v| v.start == start).expect("piece");
    assert_eq!(piece(big).stages.ptes_protected, 4096);
    assert_eq!(piece(small).stages.ptes_protected, 0);
}

/// A process of many threads: each thread's stack guard is a VMA the
/// scanner skips. They take the free places, but a VMA with slow-tier
/// activity that comes after them still gets one, and keeps it.
#[test]
fn vmas_only_skipped_give_way_to_one_with_activity() {
    let mut f = Funnel::default();
    let guard = |i: u64| BASE + i * 64 * MIB;
    for i in 0..(MAX_REGIONS as u64) {
        f.skip(&skip(7, guard(i), guard(i) + 4096, S + i, 3));
    }
    let hot = 0x10_0000_0000;
    f.scan(&scan(7, hot, hot + 16 * MIB, 2 * S, 4096));
    for i in 0..(2 * MAX_REGIONS as u64) {
        f.skip(&skip(
            7,
            guard(100 + i),
            guard(100 + i) + 4096,
            3 * S + i,
            3,
        ));
    }
    f.skip(&skip(7, hot, hot + 256 * MIB, 4 * S, 4));
    let rows = f.report(40 * S);
    let p = &rows[0];
    assert_eq!(p.vmas.len(), MAX_REGIONS);
    assert_eq!(p.verdict_vma, Some([hot, hot + 256 * MIB]));
    assert_eq!(p.vmas[0].stages.ptes_protected, 4096);
    assert_eq!(p.verdict_kind, "not_scanned");
    // The latest skip-only VMAs hold the other places.
    assert!(p
        .vmas
        .iter()
        .any(|v| v.start == guard(100 + 2 * MAX_REGIONS as u64 - 1)));
}

#[test]
fn gone_processes_leave_unless_they_rank() {
    let mut f = Funnel::default();
    // 30 short-lived processes, one every 100 s; pid 1000 the busiest.
    for pid in 0..30u64 {
        let ptes = if pid == 0 { 1_000_000 } else { 10 + pid };
        f.scan(&scan(1000 + pid, BASE, BASE + MIB, 100 * S * pid, ptes));
    }
    let (live, retired) = f.len();
    assert!(live <= 8, "{live}");
    assert!(retired <= 2 * TOP + 1, "{live} + {retired}");
    let rows = f.report(3000 * S);
    assert_eq!(rows.len(), TOP);
    assert_eq!(rows[0].pid, 1000);
    // A pid back after its process went is a new process.
    f.scan(&scan(1000, BASE, BASE + MIB, 3000 * S, 2_000_000));
    let rows = f.report(3000 * S);
    assert_eq!(rows.iter().filter(|r| r.pid == 1000).count(), 2);
}

/// The recorded test-bed trace: the funnel's sums are the totals'.
#[test]
fn the_recorded_trace_funnel_adds_up_to_the_totals() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/testdata/hot-chunks-6.12.trace");
    let mut reader = crate::trace::Reader::open(&path).expect("test trace");
    let mask = reader.header.params.as_ref().map_or(1, |p| p.toptier_mask);
    let mut totals = Totals::new(mask);
    let mut watch = Watch::new(mask);
    for item in reader.by_ref() {
        match item.expect("trace item") {
            crate::trace::Item::Event(ev) => {
                totals.event(&ev);
                crate::sink::Sink::event(&mut watch, &ev).expect("watch");
            }
            crate::trace::Item::Snapshot(s) => {
                totals.snapshot(&s);
                crate::sink::Sink::snapshot(&mut watch, &s).expect("watch");
            }
            crate::trace::Item::Footer(_) => {}
        }
    }
    let r = totals.report(1 << 20, 0);
    // The funnel on its own (beside the shadow models) sees the same.
    let alone = watch.report(crate::params::KernelHotness::Latency);
    let line = |p: &ProcessFunnel| (p.pid, p.verdict.clone(), p.stages.slow_faults);
    assert_eq!(
        alone.iter().map(line).collect::<Vec<_>>(),
        r.funnel.iter().map(line).collect::<Vec<_>>()
    );
    assert!(r.funnel.len() < TOP, "every process listed");
    let sum = |g: fn(&ProcessFunnel) -> u64| r.funnel.iter().map(g).sum::<u64>();
    assert!(r.checks.slow_node_faults > 0);
    assert_eq!(sum(|p| p.stages.slow_faults), r.checks.slow_node_faults);
    assert_eq!(sum(|p| p.stages.scan_passes), r.scan_ranges);
    assert_eq!(sum(|p| p.stages.ptes_protected), r.scan_ptes_updated);
    assert_eq!(sum(|p| p.stages.promoted), r.kernel_promote);
    assert_eq!(sum(|p| p.stages.rejected_latency), r.kernel_reject.latency);
    let skips: u64 = r.vma_skips.values().sum();
    let funnel_skips = r
        .funnel
        .iter()
        .flat_map(|p| p.stages.skips.values())
        .map(|s| s.count)
        .sum::<u64>();
    assert_eq!(funnel_skips, skips);
    let hot = r
        .funnel
        .iter()
        .find(|p| p.comm == "hot-chunks")
        .expect("the workload's process");
    assert!(!hot.verdict.is_empty() && !hot.verdict_kind.is_empty());
    assert_eq!(hot.pid, r.funnel[0].pid, "the workload ranks first");
    let json = serde_json::to_value(&r).expect("report as JSON");
    assert_eq!(json["funnel"][0]["verdict_kind"], *hot.verdict_kind);
}

/// A VMA named again with other bounds (a heap that grew) is the same
/// region; a damaged skip naming an empty range changes nothing.
#[test]
fn a_vma_named_with_new_bounds_takes_the_old_one_in() {
    let mut f = Funnel::default();
    f.skip(&skip(7, BASE, BASE + 4 * MIB, S, 4));
    f.scan(&scan(7, BASE, BASE + 4 * MIB, 2 * S, 1024));
    f.skip(&skip(7, BASE, BASE + 8 * MIB, 3 * S, 4));
    f.skip(&skip(7, BASE + 8 * MIB, BASE + 2 * MIB, 3 * S, 4));
    let rows = f.report(4 * S);
    let vmas = &rows[0].vmas;
    assert_eq!(vmas.len(), 1);
    assert_eq!((vmas[0].start, vmas[0].end), (BASE, BASE + 8 * MIB));
    assert_eq!(vmas[0].stages.ptes_protected, 1024);
    assert_eq!(vmas[0].stages.skips["pid_inactive"].count, 2);
    assert_eq!(rows[0].stages.skips["pid_inactive"].count, 3);
}

/// A THP fault is one folio of 512 pages: every stage counts it once in
/// folios and 512 times in pages, beside 4 KiB faults counted once in both.
#[test]
fn stages_count_folios_and_their_pages() {
    use numa_ebpf_common::fault_flags as ff;
    let mut f = Funnel::default();
    let ev = |seq, pages, outcome, migrated: Option<bool>| {
        let mut e = fault(seq, seq, 5, outcome);
        e.nr_pages = pages;
        if let Some(ok) = migrated {
            e.flags |= ff::MIGRATE_TRIED;
            e.migrate_ok = u8::from(ok);
        }
        e
    };
    for e in [
        ev(1, 512, Outcome::PromoteHot, Some(true)),
        ev(2, 1, Outcome::PromoteHot, Some(true)),
        ev(3, 512, Outcome::PromoteHot, Some(false)),
        ev(4, 512, Outcome::RejectLatency, None),
        ev(5, 1, Outcome::RejectLatency, None),
        ev(6, 512, Outcome::RejectRateLimit, None),
        ev(7, 1, Outcome::RejectOther, None),
        ev(8, 512, Outcome::NotTiering, None),
    ] {
        f.fault(&e, true);
    }
    let s = &f.report(S)[0].stages;
    assert_eq!((s.slow_faults, s.slow_fault_pages), (8, 5 * 512 + 3));
    assert_eq!((s.promoted, s.promoted_pages), (3, 1025));
    assert_eq!((s.rejected_latency, s.rejected_latency_pages), (2, 513));
    assert_eq!(
        (s.rejected_rate_limit, s.rejected_rate_limit_pages),
        (1, 512)
    );
    assert_eq!((s.rejected_other, s.rejected_other_pages), (1, 1));
    assert_eq!((s.decisions, s.decision_pages), (7, 2051));
    assert_eq!((s.migrate_ok, s.migrate_ok_pages), (2, 513));
    assert_eq!((s.migrate_fail, s.migrate_fail_pages), (1, 512));
    // The JSON keeps the folio fields and puts the pages beside them.
    let json = serde_json::to_value(s).expect("stages as JSON");
    assert_eq!(json["promoted"], 3);
    assert_eq!(json["promoted_pages"], 1025);
    assert_eq!(json["migrate_fail_pages"], 512);
    // A VMA's counts taken into another keep both units.
    let mut taken = Stages::default();
    taken.absorb(&f.live.get(42).expect("pid 42 is live").all);
    assert_eq!(taken.row(S).rejected_rate_limit_pages, 512);
    assert_eq!(taken.refused_pages(), 1026);
}

/// Many processes come and go, more at once than the table holds: the
/// live table stays within its bound, and the busiest processes, long
/// gone or evicted, still lead the report.
#[test]
fn pid_churn_keeps_the_table_bounded_and_the_top_exact() {
    let mut f = Funnel::default();
    for pid in 1..=3u64 {
        f.scan(&scan(pid, BASE, BASE + MIB, pid, 1_000_000 * pid));
    }
    let churn = MAX_PROCS as u64 * 3;
    let mut peak = (0, 0);
    for i in 0..churn {
        // One new process every millisecond: all of them within the
        // gone time, so only the bound holds the table.
        f.scan(&scan(
            10_000 + i,
            BASE,
            BASE + MIB,
            S + i * 1_000_000,
            10 + i % 7,
        ));
        let (live, retired) = f.len();
        peak = (peak.0.max(live), peak.1.max(retired));
    }
    assert!(peak.0 <= MAX_PROCS, "{peak:?}");
    assert!(peak.1 <= 2 * TOP + 1, "{peak:?}");
    let rows = f.report(S + churn * 1_000_000);
    assert_eq!(rows.len(), TOP);
    let top: Vec<u32> = rows.iter().take(3).map(|r| r.pid).collect();
    assert_eq!(top, [3, 2, 1]);
    // The rest are the churners scanning 16 PTEs, the most any did.
    assert!(rows[3..].iter().all(|r| r.pid >= 10_000));
}

#[test]
fn a_cgroup_s_funnel_sums_its_processes_and_old_records_have_none() {
    let mut f = Funnel::default();
    let hotness = crate::params::KernelHotness::default();
    // Two processes of cgroup 5, scanned and faulting; cgroup 6 only
    // scanned; a scan without a cgroup (an older trace) in none.
    for (pid, ts) in [(41, S), (42, 2 * S)] {
        let mut s = scan(pid, BASE, BASE + 16 * MIB, ts, 4096);
        s.cgroup_id = 5;
        f.scan(&s);
        for i in 0..4096 {
            let mut ev = fault(i, i, 500, Outcome::PromoteHot);
            (ev.pid_tgid, ev.ts_ns, ev.cgroup_id) = (pid << 32 | pid, ts + 1 + i, 5);
            f.fault(&ev, true);
        }
    }
    let mut cold = scan(43, BASE, BASE + 16 * MIB, S, 4096);
    cold.cgroup_id = 6;
    f.scan(&cold);
    let mut skip6 = skip(43, BASE, BASE + 16 * MIB, 2 * S, 4);
    skip6.cgroup_id = 6;
    f.skip(&skip6);
    f.scan(&scan(44, BASE, BASE + 16 * MIB, S, 4096));
    let hot = f.cgroup_funnel(5, 3 * S, hotness).expect("cgroup 5");
    assert_eq!(
        (hot.stages.scan_passes, hot.stages.ptes_protected),
        (2, 8192)
    );
    assert_eq!((hot.stages.slow_faults, hot.stages.promoted), (8192, 8192));
    assert_eq!(hot.verdict_kind, "promoted");
    let cold = f.cgroup_funnel(6, 3 * S, hotness).expect("cgroup 6");
    assert_eq!(cold.verdict_kind, "cold");
    assert_eq!(cold.stages.skips["pid_inactive"].count, 1);
    assert!(f.cgroup_funnel(0, 3 * S, hotness).is_none());
}
