use numa_ebpf_common::{scan_ext_flags, EventKind, ScanEvent};

use super::*;

const MS: u64 = 1_000_000;
/// LAST_CPUPID_MASK on Debian's kernels.
const MASK: u32 = (1 << 21) - 1;

fn pass(ts_ns: u64, first: u32, last: u32) -> Event {
    Event::Scan(ScanEvent {
        kind: EventKind::Scan as u32,
        pid_tgid: 7 << 32,
        ts_ns,
        start: 0x4000_0000,
        end: 0x4020_0000,
        seq_global: 11,
        seq_mm: 5,
        mm_fault_count: 40,
        ext_flags: scan_ext_flags::MM_FAULT_COUNT | scan_ext_flags::ACCESS_RANGE,
        access_first: first,
        access_last: last,
        ptes_updated: 512,
        ..Default::default()
    })
}

fn fault(ts_ns: u64, access: u32) -> Event {
    Event::Fault(FaultEvent {
        kind: EventKind::Fault as u32,
        pid_tgid: 7 << 32 | 8,
        ts_ns,
        addr: 0x4000_1000,
        access_at_fault: access,
        ext_flags: xf::ACCESS_AT_FAULT | xf::NEEDS_PASS | xf::MM_FAULT_COUNT,
        ..Default::default()
    })
}

/// A sink for the stage that keeps the events it hands on.
fn into(out: &mut Vec<Event>) -> impl FnMut(Item) -> Result<(), ()> + '_ {
    |item| {
        if let Item::Event(ev) = item {
            out.push(ev);
        }
        Ok(())
    }
}

/// Runs `events` through a stage, then flushes: what came out, in order.
fn run(events: Vec<Event>) -> Vec<Event> {
    let mut st = Stamper::new(MASK);
    let mut out = Vec::new();
    let mut take = into(&mut out);
    for ev in events {
        st.event(ev, &mut take).unwrap();
    }
    st.flush(&mut take).unwrap();
    drop(take);
    out
}

fn faults(out: &[Event]) -> Vec<FaultEvent> {
    out.iter()
        .filter_map(|e| match e {
            Event::Fault(f) => Some(*f),
            _ => None,
        })
        .collect()
}

#[test]
fn a_fault_gets_the_pass_that_wrote_its_folios_value() {
    let out = run(vec![
        pass(100 * MS, 100, 104),
        pass(2_000 * MS, 2_000, 2_001),
        fault(3_000 * MS, 102),
    ]);
    let f = faults(&out)[0];
    assert!(f.has_stamp() && f.stamp_from_pass() && !f.needs_pass());
    assert_eq!(
        (f.scan_ns, f.scan_seq_global, f.scan_seq_mm),
        (100 * MS, 11, 5)
    );
    assert!(f.has_stored_fault_count());
    assert_eq!(
        (f.stored_fault_count, f.stored_fault_count_ns),
        (40, 100 * MS)
    );
}

#[test]
fn on_a_kernel_that_promotes_on_time_a_folio_is_dated_by_its_value_within_its_pass() {
    let k = KernelParams {
        cpupid_mask: MASK,
        hz: 250,
        ..KernelParams::default()
    };
    let mut st = Stamper::of(&k);
    let mut out = Vec::new();
    let mut take = into(&mut out);
    for ev in [
        pass(100 * MS, 100, 140),
        fault(3_000 * MS, 100),
        fault(3_000 * MS, 132),
        // Its pass began late in the jiffy of 3,900; the next jiffy's value
        // came a moment later, and so did the fault: no later than it.
        pass(4_000 * MS, 3_900, 3_904),
        fault(4_001 * MS, 3_904),
    ] {
        st.event(ev, &mut take).unwrap();
    }
    st.flush(&mut take).unwrap();
    drop(take);
    let stamps: Vec<u64> = faults(&out).iter().map(|f| f.scan_ns).collect();
    assert_eq!(stamps, [100 * MS, 132 * MS, 4_001 * MS]);
    // The fault-count RFC's values are counts: the pass's start.
    let rfc = KernelParams {
        hotness: KernelHotness::FaultCount,
        ..k
    };
    assert_eq!(Stamper::of(&rfc).ms_shift, None);
}

#[test]
fn a_pass_that_protected_nothing_is_no_folio_s_pass() {
    let Event::Scan(empty) = pass(100 * MS, 100, 104) else {
        unreachable!()
    };
    let out = run(vec![
        Event::Scan(ScanEvent {
            ptes_updated: 0,
            ..empty
        }),
        fault(3_000 * MS, 102),
    ]);
    let f = faults(&out)[0];
    assert!(!f.has_stamp() && f.stamp_unmatched(), "{f:?}");
    // Unless its end was not seen: its PTE count is unknown then.
    let out = run(vec![
        Event::Scan(ScanEvent {
            ptes_updated: 0,
            ext_flags: empty.ext_flags | scan_ext_flags::LATE_END,
            ..empty
        }),
        fault(3_000 * MS, 102),
    ]);
    assert!(faults(&out)[0].has_stamp());
}

#[test]
fn a_fault_before_its_pass_record_waits_for_it_in_order() {
    let out = run(vec![
        fault(100 * MS, 150),
        pass(101 * MS, 101, 101),
        pass(99 * MS, 149, 151),
    ]);
    // The fault stays first, stamped by the pass recorded after it.
    let Event::Fault(f) = out[0] else {
        panic!("order changed: {out:?}");
    };
    assert!(f.has_stamp(), "{f:?}");
    assert_eq!(f.scan_ns, 99 * MS);
    assert_eq!(out.len(), 3);
}

#[test]
fn a_fault_no_pass_explains_goes_on_unmatched_after_its_wait() {
    let mut st = Stamper::new(MASK);
    let mut out = Vec::new();
    let mut take = into(&mut out);
    st.event(pass(10 * MS, 10, 10), &mut take).unwrap();
    st.event(fault(100 * MS, 5_000), &mut take).unwrap();
    st.event(pass(200 * MS, 200, 200), &mut take).unwrap();
    assert_eq!(st.held(), 2, "still within its wait");
    st.event(pass(100 * MS + WAIT_NS, 300, 300), &mut take)
        .unwrap();
    assert_eq!(st.held(), 0);
    drop(take);
    let f = faults(&out)[0];
    assert!(f.stamp_unmatched() && !f.has_stamp() && !f.needs_pass());
}

#[test]
fn held_items_stay_bounded() {
    let mut st = Stamper::new(MASK);
    let mut n = 0usize;
    let mut take = |_: Item| -> Result<(), ()> {
        n += 1;
        Ok(())
    };
    // A waiting fault, then many more within its wait.
    st.event(fault(MS, 1), &mut take).unwrap();
    for i in 0..(MAX_HELD as u64 + 10) {
        st.event(fault(MS + i, 1), &mut take).unwrap();
        assert!(st.held() <= MAX_HELD + 1);
    }
    st.flush(&mut take).unwrap();
    assert_eq!(n, MAX_HELD + 11);
}

#[test]
fn records_that_need_no_pass_and_snapshots_pass_through_in_order() {
    let mut st = Stamper::new(MASK);
    let mut order = Vec::new();
    let mut take = |item: Item| -> Result<(), ()> {
        order.push(match item {
            Item::Event(Event::Fault(f)) => f.ts_ns,
            Item::Event(_) => 0,
            Item::Snapshot(_) => 1,
        });
        Ok(())
    };
    let plain = Event::Fault(FaultEvent {
        kind: EventKind::Fault as u32,
        ts_ns: 5 * MS,
        ..Default::default()
    });
    st.event(fault(4 * MS, 9), &mut take).unwrap();
    st.snapshot(Snapshot::default(), &mut take).unwrap();
    st.event(plain, &mut take).unwrap();
    assert_eq!(st.held(), 3, "held behind the waiting fault");
    st.flush(&mut take).unwrap();
    assert_eq!(order, vec![4 * MS, 1, 5 * MS]);
}

#[test]
fn a_folio_shared_across_a_fork_gets_the_other_process_s_pass() {
    let other = match pass(100 * MS, 100, 104) {
        Event::Scan(s) => Event::Scan(ScanEvent {
            pid_tgid: 9 << 32,
            ..s
        }),
        e => e,
    };
    let out = run(vec![other, fault(3_000 * MS, 102)]);
    let f = faults(&out)[0];
    assert!(f.has_stamp() && f.stamp_other_mm() && f.stamp_from_pass());
    assert_eq!(f.scan_ns, 100 * MS);
}

/// `pass` as process `tgid`'s, with its own mm fault count.
fn pass_of(tgid: u64, ts_ns: u64, first: u32, last: u32) -> Event {
    match pass(ts_ns, first, last) {
        Event::Scan(s) => Event::Scan(ScanEvent {
            pid_tgid: tgid << 32,
            mm_fault_count: tgid as u32,
            ..s
        }),
        e => e,
    }
}

#[test]
fn a_shared_folio_two_processes_protected_in_one_tick_gets_the_latest_pass() {
    // Forked together, two other processes scan the shared folio within
    // the same tick: both passes hold its value.
    let out = run(vec![
        pass_of(9, 100 * MS, 100, 104),
        pass_of(10, 104 * MS, 102, 102),
        fault(3_000 * MS, 102),
    ]);
    let f = faults(&out)[0];
    assert!(f.has_stamp() && f.stamp_other_mm() && f.stamp_from_pass());
    assert!(f.stamp_ambiguous() && !f.stamp_unmatched(), "{f:?}");
    assert_eq!(f.stored_fault_count, 10, "the latest pass's count");
    // One candidate only: not ambiguous.
    let out = run(vec![
        pass_of(9, 100 * MS, 100, 104),
        pass_of(10, 104 * MS, 103, 103),
        fault(3_000 * MS, 102),
    ]);
    let f = faults(&out)[0];
    assert!(f.stamp_other_mm() && !f.stamp_ambiguous(), "{f:?}");
    assert_eq!(f.stored_fault_count, 9);
}

fn pass_at(ts_ns: u64, start: u64, first: u32, last: u32) -> Event {
    match pass(ts_ns, first, last) {
        Event::Scan(s) => Event::Scan(ScanEvent {
            start,
            end: start + 0x20_0000,
            ..s
        }),
        e => e,
    }
}

#[test]
fn a_page_protected_many_passes_ago_finds_its_pass() {
    // A thousand passes over the faulting chunk and its neighbour, 1 s
    // apart, the value in ms wrapping the 21-bit field on the way.
    let base: u32 = MASK - 300_000;
    let mut evs = Vec::new();
    for i in 0..1000u64 {
        let v = base.wrapping_add(1000 * i as u32) & MASK;
        evs.push(pass_at(i * 1000 * MS, 0x4000_0000, v, (v + 2) & MASK));
        evs.push(pass_at(
            i * 1000 * MS + MS,
            0x4020_0000,
            (v + 3) & MASK,
            (v + 3) & MASK,
        ));
    }
    let wanted = |i: u32| (base.wrapping_add(1000 * i) + 1) & MASK;
    evs.push(fault(1_000_000 * MS, wanted(5)));
    evs.push(fault(1_000_000 * MS, wanted(400)));
    evs.push(fault(1_000_000 * MS, wanted(999)));
    // In the neighbour's pass, not over the faulting address.
    evs.push(fault(1_000_000 * MS, (wanted(700) + 2) & MASK));
    let f = faults(&run(evs));
    let stamped: Vec<_> = f
        .iter()
        .map(|f| f.has_stamp().then_some(f.scan_ns))
        .collect();
    assert_eq!(
        stamped,
        vec![
            Some(5_000 * MS),
            Some(400_000 * MS),
            Some(999_000 * MS),
            None
        ]
    );
    assert!(f[3].stamp_unmatched());
}

#[test]
fn passes_older_than_half_the_fields_wrap_are_not_trusted() {
    let half = MASK / 2;
    let out = run(vec![
        pass(MS, 10, 10),
        pass(2 * MS, half + 20, half + 20),
        fault(3 * MS, 10),
    ]);
    assert!(faults(&out)[0].stamp_unmatched());
}

#[test]
fn the_passes_kept_stay_bounded() {
    let mut st = Stamper::new(MASK);
    let mut sink = |_: Item| -> Result<(), ()> { Ok(()) };
    for i in 0..(MAX_PASSES as u64 + 5000) {
        let tgid = 1 + i % 3;
        let ev = match pass(i, (i / 64) as u32 & MASK, (i / 64) as u32 & MASK) {
            Event::Scan(s) => Event::Scan(ScanEvent {
                pid_tgid: tgid << 32,
                ..s
            }),
            e => e,
        };
        st.event(ev, &mut sink).unwrap();
    }
    assert!(st.passes.cost() <= MAX_PASSES, "{}", st.passes.cost());
}

#[test]
fn a_shared_folio_waits_for_the_other_process_s_pass_record() {
    let other = |ev| match ev {
        Event::Scan(s) => Event::Scan(ScanEvent {
            pid_tgid: 9 << 32,
            ..s
        }),
        e => e,
    };
    // The other process's pass protected the page and this process faulted
    // on it before that pass's record was sent.
    let out = run(vec![fault(100 * MS, 150), other(pass(99 * MS, 149, 151))]);
    let f = faults(&out)[0];
    assert!(f.has_stamp() && f.stamp_other_mm(), "{f:?}");
}
