use std::collections::BTreeMap;

use numa_ebpf_common::{fault_flags, FaultEvent, Outcome};

use super::*;
use crate::{
    decode::fixtures::fault,
    mapplan::PfnSpan,
    model::policy::{Decision, FaultView, Step},
    truth::{PageCount, TruthReader, Window},
};

const S: u64 = 1_000_000_000;
/// The fixtures' clock: fault `seq` is at `T0 + seq` ms.
const T0: u64 = 1_000 * S;

/// A model that promotes the faults on the slow frames it names.
struct Names(Vec<u64>);

impl Policy for Names {
    fn name(&self) -> String {
        "names".into()
    }
    fn params(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    fn decide(&mut self, ev: &FaultEvent, _: &FaultView) -> Decision {
        Decision {
            promote: self.0.contains(&ev.src_pfn),
            reason: "named",
            step: Step::Other,
        }
    }
}

/// The slow tier at frames 1000..2000, every frame followed.
fn plan() -> MapPlan {
    let span = PfnSpan {
        node: 1,
        start: 1000,
        end: 2000,
    };
    MapPlan::choose(1 << 20, 0, 8, vec![span]).expect("a plan")
}

/// A refused hint fault on slow frame `pfn` at `ms` after T0.
fn refused(ms: u64, pfn: u64) -> FaultEvent {
    let mut f = fault(ms, pfn, 5000, Outcome::RejectLatency);
    f.src_pfn = pfn;
    f
}

/// The kernel promoting slow frame `pfn` to `dst` at `ms` after T0.
fn promoted(ms: u64, pfn: u64, dst: u64) -> FaultEvent {
    let mut f = fault(ms, pfn, 50, Outcome::PromoteHot);
    f.flags |= fault_flags::MIGRATE_TRIED;
    f.migrate_ok = 1;
    f.src_pfn = pfn;
    f.dst_pfn = dst;
    f
}

/// A truth file of `n` one-second windows from T0 and `counts` (window,
/// pfn, accesses), sorted as the file keeps them.
fn truth(n: u32, counts: &[(u32, u32, u32)]) -> Vec<u8> {
    let windows: Vec<Window> = (0..u64::from(n))
        .map(|i| Window {
            start_ns: T0 + i * S,
            end_ns: T0 + (i + 1) * S,
            clock_err_ns: 1000,
        })
        .collect();
    let mut counts: Vec<PageCount> = counts
        .iter()
        .map(|&(window, pfn, loads)| PageCount {
            window,
            pfn,
            loads,
            stores: 0,
        })
        .collect();
    counts.sort_unstable_by_key(|c| (c.window, c.pfn));
    crate::truth::encode(&windows, &counts).expect("a truth file")
}

/// The faults, then the trace's end at 20 s (the tests' truth is 20 s).
fn run(p: &mut Promotions, faults: &[FaultEvent]) {
    for f in faults {
        p.event(&Event::Fault(*f)).expect("event");
    }
    p.last_ns = T0 + 20 * S;
}

fn rules() -> Rules {
    Rules {
        hot_accesses: vec![1, 30],
        horizon_ns: 3 * S,
    }
}

fn score(p: &PolicyScore) -> (u64, u64, u64, u64, Option<f64>) {
    (
        p.judged,
        p.precise,
        p.recalled,
        p.bursts,
        p.to_promotion_p50_ms,
    )
}

/// A: hot on the slow tier from 3 s, promoted by the kernel at 5.5 s and
/// hot at its DRAM frame after (precise). B: the same until the kernel
/// promotes it, then never accessed (a burst); another page takes its
/// frame at 7 s. C: hot on the slow tier throughout; the model promotes
/// it at 1.5 s, the kernel never. D: promoted by the model at 2 s, never
/// accessed. DRAM traffic of other pages, and A's DRAM frame before A
/// came there, are nobody's.
#[test]
fn promotions_are_judged_by_the_accesses_at_the_frames_the_page_was_in() {
    let (a, b, c, d) = (1001, 1002, 1003, 1500);
    let mut p = Promotions::with_plan(plan(), vec![Box::new(Names(vec![c, d]))]);
    run(
        &mut p,
        &[
            refused(1500, c),
            refused(2000, d),
            promoted(5500, a, 5001),
            promoted(5500, b, 5002),
        ],
    );
    let mut counts = Vec::new();
    for w in 3..=5 {
        counts.extend([(w, a as u32, 20), (w, b as u32, 20)]);
    }
    counts.extend((6..=10).map(|w| (w, 5001, 20)));
    counts.extend((0..20).map(|w| (w, c as u32, 20)));
    counts.extend([(0, 7000, 40), (2, 5001, 20), (7, b as u32, 20)]);
    let file = truth(20, &counts);
    let card = p
        .score(TruthReader::new(&file[..]).expect("truth"), &rules())
        .expect("score");

    // DRAM traffic of pages never on the slow tier: 40 + 20.
    assert_eq!(
        (card.accesses, card.slow_page_accesses, card.slow_accesses),
        (700, 640, 540)
    );
    let shares: Vec<_> = card
        .shares
        .iter()
        .map(|s| (s.policy.as_str(), s.promoted_pages, s.measured))
        .collect();
    assert_eq!(shares, [("kernel", 2, true), ("names", 2, false)]);
    // The model leaves A and B on the slow tier (160 + 60 accesses), C
    // only in the windows before its promotion (40), and the other page
    // at B's frame (20).
    let share = |i: usize| card.shares[i].slow_access_share.expect("accesses");
    assert!((share(0) - 540.0 / 700.0).abs() < 1e-12);
    assert!((share(1) - 280.0 / 700.0).abs() < 1e-12);
    let of_pages = card.shares[1].slow_page_access_share.expect("accesses");
    assert!((of_pages - 280.0 / 640.0).abs() < 1e-12);

    let any = &card.rules[0];
    assert_eq!((any.hot_accesses, any.hot_pages, any.hot_judged), (1, 3, 3));
    // Kernel: A precise, B a burst; A and B promoted 2.5 s after their
    // first hot window (within the horizon), C never.
    assert_eq!(score(&any.policies[0]), (2, 1, 2, 1, Some(2500.0)));
    // Model: C precise, D never hot; C promoted 1.5 s after it was.
    assert_eq!(score(&any.policies[1]), (2, 1, 1, 0, Some(1500.0)));
    assert_eq!(any.policies[0].precision, Some(0.5));
    assert!((any.policies[1].recall.expect("hot pages") - 1.0 / 3.0).abs() < 1e-12);

    // No page reaches 30 accesses in a window: nothing is hot, every
    // judged promotion is imprecise and recall has no denominator.
    let busy = &card.rules[1];
    assert_eq!((busy.hot_pages, busy.hot_judged), (0, 0));
    assert_eq!(score(&busy.policies[0]), (2, 0, 0, 0, None));
    assert_eq!(busy.policies[0].recall, None);
}

/// Promotions and hot pages whose horizon the truth does not cover are
/// not judged, nor promotions before its first window.
#[test]
fn only_what_the_truth_covers_is_judged() {
    let mut p = Promotions::with_plan(plan(), Vec::new());
    let mut early = promoted(0, 1001, 5001);
    early.ts_ns = T0 - S;
    run(&mut p, &[early, promoted(18_500, 1002, 5002)]);
    let file = truth(20, &[(1, 5001, 5), (18, 1002, 5), (19, 5002, 5)]);
    let card = p
        .score(TruthReader::new(&file[..]).expect("truth"), &rules())
        .expect("score");
    let k = &card.rules[0].policies[0];
    assert_eq!(card.shares[0].promoted_pages, 2);
    assert_eq!(
        (k.judged, card.rules[0].hot_pages, card.rules[0].hot_judged),
        (0, 1, 0)
    );
    assert_eq!((k.precision, k.recall), (None, None));
}

/// The pages followed are bounded whatever the trace and truth hold: past
/// the bound, pages are counted and left out.
#[test]
fn pages_past_the_bound_are_counted_not_followed() {
    let mut p = Promotions::with_plan(plan(), Vec::new());
    p.max_pages = 2;
    run(
        &mut p,
        &[refused(1, 1001), refused(2, 1002), refused(3, 1003)],
    );
    let file = truth(4, &[(0, 1004, 3), (1, 1005, 3)]);
    let card = p
        .score(TruthReader::new(&file[..]).expect("truth"), &rules())
        .expect("score");
    assert_eq!((card.pages, card.untracked_pages), (2, 3));
    assert_eq!(card.slow_accesses, 6);
}

/// What a frame held before the trace began is another page's story: the
/// truth's windows before the trace's start are not read.
#[test]
fn the_truth_is_read_over_the_traces_span_only() {
    let mut p = Promotions::with_plan(plan(), Vec::new());
    p.started_ns = T0 + 5 * S;
    run(&mut p, &[promoted(6500, 1001, 5001)]);
    let file = truth(20, &[(1, 1001, 5), (5, 1001, 5), (7, 5001, 5)]);
    let card = p
        .score(TruthReader::new(&file[..]).expect("truth"), &rules())
        .expect("score");
    assert_eq!((card.windows, card.accesses), (15, 10));
    assert_eq!(
        score(&card.rules[0].policies[0]),
        (1, 1, 1, 0, Some(1500.0))
    );
}

/// A model that promotes what the kernel did, when it did, projects the
/// slow-tier share the kernel measured, move window included.
#[test]
fn a_model_promoting_as_the_kernel_did_projects_its_measured_share() {
    let mut p = Promotions::with_plan(plan(), vec![Box::new(Names(vec![1001]))]);
    let mut both = promoted(5500, 1001, 5001);
    both.outcome = Outcome::PromoteHot as u8;
    run(&mut p, &[both, refused(6000, 1002)]);
    let file = truth(
        20,
        &[
            (4, 1001, 7),
            (5, 1001, 3),
            (5, 5001, 4),
            (6, 5001, 9),
            (6, 1002, 2),
        ],
    );
    let card = p
        .score(TruthReader::new(&file[..]).expect("truth"), &rules())
        .expect("score");
    let shares: Vec<_> = card.shares.iter().map(|s| s.slow_access_share).collect();
    assert_eq!(shares, [Some(12.0 / 25.0), Some(12.0 / 25.0)]);
}

/// A page the kernel promoted on its first access has accesses only at its
/// new frame: in the window of the promotion it was still on the slow
/// tier, so it is hot there then (and recalled); from the next window on
/// it is not.
#[test]
fn a_page_promoted_on_its_first_access_was_hot_on_the_slow_tier() {
    let e = 1004;
    let mut p = Promotions::with_plan(plan(), Vec::new());
    run(&mut p, &[promoted(8500, e, 5003)]);
    let file = truth(20, &[(8, 5003, 20), (9, 5003, 20), (10, 5003, 20)]);
    let card = p
        .score(TruthReader::new(&file[..]).expect("truth"), &rules())
        .expect("score");
    let any = &card.rules[0];
    assert_eq!((any.hot_pages, any.hot_judged), (1, 1));
    // Precise (hot after), recalled, 500 ms from its first hot window.
    assert_eq!(score(&any.policies[0]), (1, 1, 1, 0, Some(500.0)));
    assert_eq!(card.slow_accesses, 0);
}

/// A promoted page reclaim demoted again leaves its DRAM frame: that
/// frame's later accesses are not the page's.
#[test]
fn a_demoted_page_leaves_its_dram_frame() {
    let mut p = Promotions::with_plan(plan(), Vec::new());
    run(&mut p, &[promoted(2500, 1001, 5001)]);
    let mut d = crate::decode::fixtures::demotion(T0 + 4 * S, 0, 0);
    d.src_pfn = 5001;
    d.dst_pfn = 1900;
    p.event(&Event::Demote(d)).expect("demotion");
    // Hot at 5001 in window 3 (the page's), and in 8 (another page's).
    let file = truth(20, &[(1, 1001, 5), (3, 5001, 5), (8, 5001, 5)]);
    let card = p
        .score(TruthReader::new(&file[..]).expect("truth"), &rules())
        .expect("score");
    assert_eq!(card.slow_page_accesses, 10);
    assert_eq!(
        score(&card.rules[0].policies[0]),
        (1, 1, 1, 0, Some(1500.0))
    );
}

/// DAMON's regions score as a truth file holding each of their pages
/// with the region's count: the same promotions, the same card.
#[test]
fn damon_regions_score_as_their_pages_would() {
    let (a, c) = (1001, 1003);
    let faults = [refused(1500, c), promoted(5500, a, 5001)];
    let new = || {
        let mut p = Promotions::with_plan(plan(), vec![Box::new(Names(vec![c]))]);
        run(&mut p, &faults);
        p
    };
    // (window, first frame, frames, count): slow frames with A and C, A's
    // DRAM frame after its move, and DRAM frames nobody promoted to.
    let regions: Vec<(u32, u64, u64, u32)> = (0..20)
        .flat_map(|w| {
            [
                (w, 1000, 8, if (3..=5).contains(&w) { 3 } else { 0 }),
                (w, 1500, 100, u32::from(w % 2 == 0)),
                (w, 5000, 4, if w >= 6 { 2 } else { 0 }),
                (w, 6000, 50, 1),
            ]
        })
        .collect();
    let spec = crate::damon::Spec {
        aggr_us: 1_000_000,
        ..crate::damon::Spec::over(vec![(0, 1 << 30)])
    };
    let mut damon = crate::damon::Collector::new(spec);
    for &(w, first, n, count) in &regions {
        let ts = T0 + (u64::from(w) + 1) * S;
        let ev = crate::decode::Event::Damon(numa_ebpf_common::DamonEvent {
            kind: numa_ebpf_common::EventKind::Damon as u32,
            ts_ns: ts,
            start: first * 4096,
            end: (first + n) * 4096,
            nr_accesses: count,
            ..Default::default()
        });
        damon.event(&ev).expect("event");
    }
    let pages: Vec<(u32, u32, u32)> = regions
        .iter()
        .filter(|r| r.3 > 0)
        .flat_map(|&(w, first, n, count)| (first..first + n).map(move |p| (w, p as u32, count)))
        .collect();
    let file = truth(20, &pages);
    let by_pages = new()
        .score(TruthReader::new(&file[..]).expect("truth"), &rules())
        .expect("score");
    let by_regions = new().score_damon(&damon, &rules()).expect("score");
    let key = |c: &Scorecard| {
        (
            (c.accesses, c.slow_page_accesses, c.slow_accesses, c.windows),
            c.shares
                .iter()
                .map(|s| (s.promoted_pages, s.slow_access_share))
                .collect::<Vec<_>>(),
            c.rules
                .iter()
                .map(|r| {
                    (
                        r.hot_pages,
                        r.policies.iter().map(score).collect::<Vec<_>>(),
                    )
                })
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(key(&by_regions), key(&by_pages));
    assert!(by_regions.damon.is_some() && by_pages.damon.is_none());
    assert!(by_regions.accesses > 0 && by_regions.rules[0].hot_pages >= 2);
}
