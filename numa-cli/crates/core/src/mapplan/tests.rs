use super::*;

/// `/proc/zoneinfo` of a one-node VM (start_pfn follows the per-CPU
/// stats; empty zones have no start_pfn line).
const ONE_NODE: &str = include_str!("zoneinfo-1node.txt");

fn zone(node: u32, name: &str, spanned: u64, start_pfn: Option<u64>) -> String {
    let mut s = format!(
        "Node {node}, zone {name:>8}\n  pages free     0\n        min      0\n        \
         spanned  {spanned}\n        present  {spanned}\n        managed  {spanned}\n        \
         protection: (0, 0, 0, 0, 0)\n"
    );
    if let Some(p) = start_pfn {
        s += &format!("    cpu: 0\n              count:    0\n  start_pfn:           {p}\n");
    }
    s
}

/// Two nodes: node 0 as on the real host, node 1 memory-only with a single
/// Movable zone.
fn two_nodes() -> String {
    [
        zone(0, "DMA", 4095, Some(1)),
        zone(0, "DMA32", 1_044_480, Some(4096)),
        zone(0, "Normal", 5_505_024, Some(1_048_576)),
        zone(0, "Movable", 0, None),
        zone(0, "Device", 0, None),
        zone(1, "DMA", 0, Some(0)),
        zone(1, "DMA32", 0, Some(0)),
        zone(1, "Normal", 0, Some(4_194_304)),
        zone(1, "Movable", 262_144, Some(4_194_304)),
        zone(1, "Device", 0, None),
    ]
    .concat()
}

fn span(node: u32, start: u64, end: u64) -> PfnSpan {
    PfnSpan { node, start, end }
}

#[test]
fn zoneinfo_of_a_real_host() {
    assert_eq!(
        parse_zoneinfo(ONE_NODE),
        [span(0, 1, 1_048_576 + 5_505_024)]
    );
}

#[test]
fn zoneinfo_with_a_memory_only_node() {
    assert_eq!(
        parse_zoneinfo(&two_nodes()),
        [span(0, 1, 6_553_600), span(1, 4_194_304, 4_456_448)]
    );
}

#[test]
fn zoneinfo_garbage_is_skipped() {
    assert!(parse_zoneinfo("").is_empty());
    assert!(parse_zoneinfo("\u{0}\nNode\nNode x, zone\nspanned 5\nstart_pfn: 3\n").is_empty());
    let text = format!(
        "Node 7, zone Normal\n spanned lots\n start_pfn: 10\n spanned 20\nNode ?, zone DMA\n \
         spanned 99\n start_pfn: 0\n{}",
        zone(3, "Normal", 5, Some(u64::MAX - 1))
    );
    assert_eq!(
        parse_zoneinfo(&text),
        [span(3, u64::MAX - 1, u64::MAX), span(7, 10, 30)]
    );
}

#[test]
fn slow_spans_leave_out_the_top_tier_and_merge_touching_ones() {
    let all = [
        span(0, 0, 100),
        span(2, 300, 400),
        span(1, 100, 200),
        span(3, 350, 500),
        span(4, 600, 600),
        span(64, 700, 800),
    ];
    assert_eq!(
        slow_spans(&all, 0b1),
        [span(1, 100, 200), span(2, 300, 500), span(64, 700, 800)]
    );
    assert_eq!(
        slow_spans(&all, 0),
        [span(0, 0, 200), span(2, 300, 500), span(64, 700, 800)]
    );
    assert_eq!(slow_spans(&all, u64::MAX), [span(64, 700, 800)]);
    assert!(slow_spans(&[], 0).is_empty());
}

#[test]
fn more_than_max_spans_merge_across_the_smallest_gaps() {
    // Gaps: 10, 50, 5, 30, 20.
    let all = [
        span(5, 0, 10),
        span(4, 20, 30),
        span(3, 80, 90),
        span(2, 95, 100),
        span(1, 130, 140),
        span(0, 160, 170),
    ];
    let got = slow_spans(&all, 0);
    assert_eq!(
        got,
        [
            span(4, 0, 30),
            span(2, 80, 100),
            span(1, 130, 140),
            span(0, 160, 170)
        ]
    );
    assert_eq!(got.len(), MAX_SPANS);
}

const MIB: u64 = 1 << 20;

#[test]
fn choose_follows_every_page_when_it_fits() {
    let spans = vec![span(1, 1000, 2000), span(2, 5000, 5500)];
    let p = MapPlan::choose(10 * MIB, MIB, 16, spans).unwrap();
    assert_eq!((p.shift, p.rate(), p.slots), (0, 1, 1500));
    assert_eq!(p.slow_pfns(), 1500);
    assert_eq!(p.followed_pfns(), 1500);
    assert_eq!(p.coverage(), 1.0);
    assert_eq!(p.stamp_bytes(), 1500 * 16);
    assert_eq!(p.total_bytes(), MIB + 1500 * 16);
    assert_eq!(p.span_bases(), [0, 1000, 1500, 1500]);
    assert_eq!(p.span_starts(), [1000, 5000, 0, 0]);
    assert_eq!(p.span_ends(), [2000, 5500, 0, 0]);
    assert_eq!(p.slot_of(999), None);
    assert_eq!(p.slot_of(1000), Some(0));
    assert_eq!(p.slot_of(5499), Some(1499));
    assert_eq!(p.slot_of(5500), None);
}

#[test]
fn choose_takes_the_densest_rate_that_fits() {
    let len = 1_000_003u64;
    let spans = vec![span(1, 4_194_304, 4_194_304 + len)];
    let (fixed, slot) = (24 * MIB, 8);
    let budget = fixed + len.div_ceil(8) * slot;
    let p = MapPlan::choose(budget, fixed, slot, spans.clone()).unwrap();
    assert_eq!((p.rate(), p.slots), (8, len.div_ceil(8)));
    assert_eq!(p.total_bytes(), budget);
    assert_eq!(p.followed_pfns(), len.div_ceil(8));
    assert!((p.coverage() - 0.125).abs() < 1e-6);
    let p = MapPlan::choose(budget - 1, fixed, slot, spans).unwrap();
    assert_eq!((p.rate(), p.slots), (16, len.div_ceil(16)));
}

#[test]
fn choose_with_no_slow_memory_makes_one_unused_slot() {
    let p = MapPlan::choose(2 * MIB, MIB, 64, Vec::new()).unwrap();
    assert_eq!((p.shift, p.slots), (0, 1));
    assert_eq!(p.followed_pfns(), 0);
    assert_eq!(p.coverage(), 1.0);
    assert_eq!(p.span_bases(), [1; MAX_SPANS]);
    assert_eq!(p.span_ends(), [0; MAX_SPANS]);
    assert_eq!(p.slot_of(0), None);
}

#[test]
fn choose_keeps_the_slots_a_bpf_array_can_hold() {
    // 2^40 PFNs: rate 256 would fit the budget but needs 2^32 slots.
    let spans = vec![span(1, 0, 1 << 40)];
    let p = MapPlan::choose(u64::MAX, 0, 1, spans).unwrap();
    assert_eq!(p.shift, 9);
    assert!(p.slots <= u64::from(u32::MAX));
}

#[test]
fn a_budget_below_the_other_maps_says_how_much_is_needed() {
    let spans = vec![span(1, 0, 1 << 24)];
    let e = MapPlan::choose(16 * MIB, 24 * MIB, 8, spans).unwrap_err();
    assert_eq!(
        e,
        PlanError::BelowFixed {
            budget: 16 * MIB,
            fixed: 24 * MIB,
            need: 24 * MIB + 8
        }
    );
    assert_eq!(
        e.to_string(),
        "--map-budget 16.0 MiB is below the 24.0 MiB the other maps need (ring buffer, \
         counters, per-process tables); raise --map-budget to at least 24.0 MiB or lower \
         --ring-mb"
    );
}

#[test]
fn a_budget_too_small_at_the_sparsest_rate_says_how_much_is_needed() {
    // 2^40 PFNs need 2^16 slots of 64 B (4 MiB) even at the sparsest rate.
    let spans = vec![span(1, 0, 1 << 40)];
    let e = MapPlan::choose(26 * MIB, 24 * MIB, 64, spans).unwrap_err();
    assert_eq!(
        e,
        PlanError::TooSmall {
            budget: 26 * MIB,
            fixed: 24 * MIB,
            need: 28 * MIB
        }
    );
    assert_eq!(
        e.to_string(),
        "--map-budget 26.0 MiB cannot hold the folio map even following one page in 16777216: \
         the other maps need 24.0 MiB and the folio map 4.0 MiB; raise --map-budget to at \
         least 28.0 MiB or lower --ring-mb"
    );
}

#[test]
fn human_bytes_has_binary_units() {
    assert_eq!(human_bytes(0), "0 B");
    assert_eq!(human_bytes(1023), "1023 B");
    assert_eq!(human_bytes(1536), "1.5 KiB");
    assert_eq!(human_bytes(24 * MIB), "24.0 MiB");
    assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    assert_eq!(human_bytes(2048 << 40), "2048.0 TiB");
}

#[test]
fn one_page_per_aligned_block_is_followed() {
    for shift in 1..=6u32 {
        let rate = 1u64 << shift;
        for block in 0..4096u64 {
            let n = (block * rate..(block + 1) * rate)
                .filter(|&off| followed(off, shift))
                .count();
            assert_eq!(n, 1, "shift {shift} block {block}");
        }
    }
    assert!((0..100).all(|off| followed(off, 0)));
}

#[test]
fn the_followed_offset_is_spread_evenly_over_the_block() {
    let (shift, blocks) = (3u32, 1u64 << 16);
    let mut counts = [0u64; 8];
    for block in 0..blocks {
        let off = (0..8).find(|&o| followed((block << shift) + o, shift));
        counts[off.expect("one offset per block") as usize] += 1;
    }
    let expected = blocks / 8;
    for (o, &c) in counts.iter().enumerate() {
        assert!(
            c > expected / 2 && c < expected * 3 / 2,
            "offset {o}: {c} of {expected} expected"
        );
    }
}

#[test]
fn huge_pages_are_followed_at_the_rate() {
    let pages = 1u64 << 16;
    let n = (0..pages).filter(|&i| followed(i * 512, 3)).count() as f64;
    let expected = pages as f64 / 8.0;
    assert!(
        (n - expected).abs() < expected * 0.2,
        "{n} of {pages} huge pages followed"
    );
}

#[test]
fn slot_of_maps_followed_pages_onto_distinct_slots() {
    // Whole blocks only: a span's last partial block may pick a PFN past
    // its end, leaving that slot without a page.
    let spans = vec![span(1, 1000, 1516), span(3, 4096, 4200)];
    let p = MapPlan::choose(400 * 8, 0, 8, spans).unwrap();
    assert_eq!(p.shift, 1);
    let mut seen = vec![false; p.slots as usize];
    for pfn in 0..5000 {
        if let Some(slot) = p.slot_of(pfn) {
            assert!(!std::mem::replace(&mut seen[slot as usize], true));
        }
    }
    assert!(seen.iter().all(|&s| s), "every slot has its page");
}

#[test]
fn followed_in_a_range_are_the_pfns_slot_of_follows() {
    for budget in [400 * 8, 100 * 8, 4000 * 8] {
        let spans = vec![span(1, 1000, 1516), span(3, 4096, 4200)];
        let p = MapPlan::choose(budget, 0, 8, spans).unwrap();
        for (a, b) in [(0, 5000), (1003, 1100), (1500, 4100), (4199, 4200), (9, 10)] {
            let (slow, followed) = p.followed_in(a, b);
            let want: Vec<u64> = (a..b).filter(|&pfn| p.slot_of(pfn).is_some()).collect();
            assert_eq!(followed, want, "shift {} range {a}..{b}", p.shift);
            let slow_want =
                (a..b).filter(|pfn| p.spans.iter().any(|s| (s.start..s.end).contains(pfn)));
            assert_eq!(slow, slow_want.count() as u64);
        }
    }
}
