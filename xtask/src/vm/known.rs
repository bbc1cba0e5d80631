//! The truth scenario: `numatrace workload known` (steady chunks, burst
//! chunks, a rare page, an untouched mapping) recorded under the truth
//! plugin. The plugin's accesses are checked against the workload's own
//! log of its visits, and every policy is scored on the shape.
//!
//! What the shape implies, stated before the run (the checks in
//! [`expect`]); an access is a load or a store, and a visit bumps
//! [`ACCESSES`] random pages of its chunk, a load and a store each:
//! - at least 99% of the slow tier's accesses after placement are at a
//!   chunk's frames in a window one of its visits overlaps;
//! - the untouched mapping takes no access and no hint fault, so no policy
//!   can promote a page of it;
//! - under one access a window, every page of the chunks is hot on the
//!   slow tier at some point (a steady visit bumps as many pages as its
//!   chunk has, so every page within a few visits; a burst bumps each
//!   hundreds of times);
//! - under [`BUSY`] accesses a window only the burst chunks are hot: a
//!   steady page takes one bump a visit on average and 16 in one window
//!   about once in 10^13;
//! - the kernel's promotions: a steady page is visited again within
//!   [`REVISIT_MS`], at least four times within the horizon after a
//!   promotion, each visit missing a page with probability e^-1, so at
//!   least 95% of the steady pages it promotes are accessed at their new
//!   frame within the horizon (e^-4 = 1.8% missed); 98% of the burst pages
//!   it promotes a second or more before their burst's end are (the
//!   visits go on back to back); those promoted later are the burst
//!   promotions the shape sets up;
//! - fault-count, whose default threshold is far above the hint faults
//!   this workload takes, promotes at every hint fault: it recalls no
//!   fewer hot pages than the kernel, no later; two-touch, which waits for
//!   a page's second hint fault, promotes no more pages than fault-count.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use numa_core::truth::{TruthReader, Window};
use numa_core::workload::{FrameRun, KnownLog, Part};

use crate::host::Setup;
use crate::kernels::Kernel;
use crate::vm::truth::{faults, node_pfns, replay, PluginRun};

mod damon;

/// Accesses per chunk visit: as many as a chunk's pages.
const ACCESSES: u64 = 1024;
const REVISIT_MS: u64 = 2000;
/// The run's length in seconds: four bursts of 3 s, one every 6 s, and
/// the rare page touched every 20 s.
const DURATION_S: u64 = 36;
/// Truth windows, and the scorecard's horizon.
const WINDOW_MS: u64 = 500;
const HORIZON_S: u64 = 10;
const HORIZON_NS: u64 = HORIZON_S * 1_000_000_000;
/// The scorecard's hot rules: one access a window, and [`BUSY`].
const HOT_RULES: &str = "1,32";
const BUSY: u64 = 32;
/// Pages of other processes on the slow node that may be hot (the root
/// file system's pages there).
const OTHER_PAGES: u64 = 64;

/// DAMON's fewest regions over the guest's 3 GiB: about 10 MiB each, a
/// few of the scenario's 4 MiB chunks.
const DAMON_MIN_REGIONS: u32 = 300;
/// The DAMON scorecard's hot rules: samples that found a page's region
/// accessed in one 100 ms aggregation (of 20).
const DAMON_HOT_RULES: &str = "1,4";

/// DRAM filled to below the kernel's free-space shortcut (1 GiB free on
/// the 2 GiB node), so that it promotes on its hot threshold.
fn script() -> String {
    format!(
        "echo 2 > /proc/sys/kernel/numa_balancing
echo 0 > /sys/kernel/mm/numa/demotion_enabled
echo 1000 > /sys/kernel/debug/sched/numa_balancing/hot_threshold_ms
cat /sys/devices/system/memory/block_size_bytes > /results/block_size
ls -d /sys/devices/system/node/node1/memory[0-9]* | sed 's/.*memory//' > /results/node1-blocks
numatrace record --truth damon --damon-min-regions {DAMON_MIN_REGIONS} -o /results/k.trace -- \
numatrace workload known --dram-mb 1200 \
--chunk-mb 4 --steady-chunks 4 --revisit-ms {REVISIT_MS} --burst-chunks 4 --burst-ms 3000 \
--burst-every-ms 6000 --rare-s 20 --cold-mb 16 --accesses {ACCESSES} --duration {DURATION_S} \
--log /results/known.json"
    )
}

/// Boots `kernel` with the plugin on the scenario and checks it; returns
/// what it found, the scorecard's table among it.
pub(crate) fn scenario(kernel: &Kernel, numatrace: &Path, setup: &mut Setup) -> Result<String> {
    let exits = kernel.series == crate::kernels::Series::V7;
    let script = format!(
        "{}\n{}\n{}\n{}",
        damon::STOP_DAMON_STAT,
        script(),
        damon::RECORD_END,
        if exits { damon::EXITS } else { "" }
    );
    let run = PluginRun {
        name: "known",
        script: &script,
        window_ms: WINDOW_MS,
        timeout: Duration::from_secs(360),
    };
    let (out, file, _) = run.boot(kernel, numatrace, setup)?;
    let slow = node_pfns(&out)?;
    let log: KnownLog = crate::results::read_report(&out, "known.json")?;
    let truth = Sorted::of(&log, &file, &slow)?;
    let trace = out.join("k.trace");
    let faults = Faults::of(numatrace, &trace, &log)?;
    let after = AfterPromotion::of(&log, &file, &faults)?;
    let card = scorecard(numatrace, &file, &trace, HOT_RULES)?;
    let agreement = damon::Agreement::of(&trace, &file, &slow, log.placed_ns)?;
    let damon_card = scorecard(numatrace, Path::new("from-trace"), &trace, DAMON_HOT_RULES)?;
    let said = format!(
        "{}; {after:?}\n{}\n{}\nthe scorecard on DAMON's sample:\n{}",
        truth.said(&log),
        table(&card),
        agreement.said(),
        table(&damon_card)
    );
    expect(&log, &truth, &faults, &after, &card).with_context(|| said.clone())?;
    damon::expect(&agreement, &card, &damon_card).with_context(|| said.clone())?;
    damon::expect_exits(&out, exits).with_context(|| said.clone())?;
    Ok(said)
}

/// The slow tier's true accesses from the workload's placement on,
/// sorted by where they fell.
#[derive(Debug, Default, PartialEq)]
struct Sorted {
    /// At every slow frame.
    total: u64,
    /// At a frame of the chunks or the rare page, in a window a visit of
    /// its part overlaps.
    in_visits: u64,
    /// At such a frame, no visit of its part near.
    outside: u64,
    /// At a frame of the untouched mapping.
    cold: u64,
    /// Pages of the untouched mapping accessed.
    cold_pages: u64,
}

impl Sorted {
    fn of(log: &KnownLog, truth: &Path, slow: &Range<u32>) -> Result<Sorted> {
        let owners = Owners::of(log);
        let visits = visits_by_part(log);
        let mut s = Sorted::default();
        let mut cold_pages = std::collections::BTreeSet::new();
        let mut r = TruthReader::new(fs::File::open(truth)?)?;
        while let Some(c) = r.next_count()? {
            let w = r.windows[c.window as usize];
            if !slow.contains(&c.pfn) || w.start_ns < log.placed_ns + w.clock_err_ns {
                continue;
            }
            let n = c.accesses();
            s.total += n;
            match owners.of_pfn(u64::from(c.pfn)) {
                Some(Owner::Cold(page)) => {
                    s.cold += n;
                    cold_pages.insert(page);
                }
                Some(Owner::Visited(page)) => {
                    let near = log
                        .part_of(page)
                        .and_then(|p| visits.get(&p))
                        .is_some_and(|v| overlaps(v, &w));
                    if near {
                        s.in_visits += n;
                    } else {
                        s.outside += n;
                    }
                }
                None => {}
            }
        }
        s.cold_pages = cold_pages.len() as u64;
        Ok(s)
    }

    fn said(&self, log: &KnownLog) -> String {
        format!(
            "{} visits logged, {} accesses made; slow tier after placement: {} accesses, {} ({:.3}%) \
             at the chunks' frames in a window of a visit of theirs, {} at their frames outside one, \
             {} at the untouched mapping's frames, {} at other frames",
            log.visits.len(),
            log.accesses,
            self.total,
            self.in_visits,
            100.0 * self.in_visits as f64 / self.total.max(1) as f64,
            self.outside,
            self.cold,
            self.total - self.in_visits - self.outside - self.cold
        )
    }
}

/// Whether a visit in `visits` (sorted by start) overlaps window `w`,
/// widened by its clock error.
fn overlaps(visits: &[(u64, u64)], w: &Window) -> bool {
    let (lo, hi) = (
        w.start_ns.saturating_sub(w.clock_err_ns),
        w.end_ns + w.clock_err_ns,
    );
    let before_end = visits.partition_point(|&(start, _)| start < hi);
    visits[..before_end].iter().any(|&(_, end)| end >= lo)
}

/// Each part's visits, `(start_ns, end_ns)` sorted by start.
fn visits_by_part(log: &KnownLog) -> BTreeMap<Part, Vec<(u64, u64)>> {
    let mut m: BTreeMap<Part, Vec<(u64, u64)>> = BTreeMap::new();
    for v in &log.visits {
        m.entry(v.part).or_default().push((v.start_ns, v.end_ns));
    }
    m.values_mut().for_each(|v| v.sort_unstable());
    m
}

/// Whose a slow frame was as placed: a page of the visited mapping or of
/// the untouched one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Owner {
    Visited(u64),
    Cold(u64),
}

/// The workload's frame runs, sorted by frame.
struct Owners(Vec<(FrameRun, bool)>);

impl Owners {
    fn of(log: &KnownLog) -> Owners {
        let mut v: Vec<(FrameRun, bool)> = log
            .slow_frames
            .iter()
            .map(|r| (*r, false))
            .chain(log.cold_frames.iter().map(|r| (*r, true)))
            .collect();
        v.sort_unstable_by_key(|(r, _)| r.pfn);
        Owners(v)
    }

    fn of_pfn(&self, pfn: u64) -> Option<Owner> {
        let i = self
            .0
            .partition_point(|(r, _)| r.pfn <= pfn)
            .checked_sub(1)?;
        let (r, cold) = self.0[i];
        let page = r.first_page + (pfn - r.pfn);
        (pfn < r.pfn + r.pages).then_some(if cold {
            Owner::Cold(page)
        } else {
            Owner::Visited(page)
        })
    }
}

/// The workload's hint faults in the trace: those in the untouched
/// mapping, and the kernel's promotions of its visited pages.
#[derive(Debug, Default)]
struct Faults {
    in_cold: u64,
    /// (page of the visited mapping, when, new frame).
    promoted: Vec<(u64, u64, u64)>,
}

impl Faults {
    fn of(numatrace: &Path, trace: &Path, log: &KnownLog) -> Result<Faults> {
        let Some(cold) = log.cold_vma else {
            bail!("the scenario asks for an untouched mapping; the log has none");
        };
        let mut f = Faults::default();
        for r in faults(numatrace, trace)? {
            if r["pid"].as_u64() != Some(u64::from(log.pid)) {
                continue;
            }
            let Some(addr) = r["addr"]
                .as_str()
                .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
            else {
                bail!("a fault without its address: {r}");
            };
            let u = |k: &str| r[k].as_u64().unwrap_or(0);
            if (cold[0]..cold[1]).contains(&addr) {
                f.in_cold += 1;
            } else if (log.slow_vma[0]..log.slow_vma[1]).contains(&addr)
                && u("migrate_ok") != 0
                && u("dst_pfn") != 0
            {
                let page = (addr - log.slow_vma[0]) / 4096;
                f.promoted.push((page, u("ts_ns"), u("dst_pfn")));
            }
        }
        Ok(f)
    }
}

/// What became of the kernel's promotions, by part of the shape: whether
/// the truth has the page accessed at its new frame in a window starting
/// within the horizon after the promotion.
/// Promotions the workload's end comes before the horizon's are left
/// out.
#[derive(Debug, Default)]
struct AfterPromotion {
    steady: u64,
    steady_hit: u64,
    /// Burst pages promoted two windows or more before their burst's end,
    /// and the others.
    burst_early: u64,
    burst_early_hit: u64,
    burst_late: u64,
}

impl AfterPromotion {
    fn of(log: &KnownLog, truth: &Path, faults: &Faults) -> Result<AfterPromotion> {
        let mut at_frame: HashMap<u64, Vec<u32>> = faults
            .promoted
            .iter()
            .map(|&(_, _, dst)| (dst, Vec::new()))
            .collect();
        let mut r = TruthReader::new(fs::File::open(truth)?)?;
        while let Some(c) = r.next_count()? {
            if let Some(w) = at_frame.get_mut(&u64::from(c.pfn)) {
                w.push(c.window);
            }
        }
        let visits = visits_by_part(log);
        let mut a = AfterPromotion::default();
        for &(page, at, dst) in &faults.promoted {
            if at + HORIZON_NS > log.end_ns {
                continue;
            }
            let hit = at_frame.get(&dst).is_some_and(|ws| {
                ws.iter().any(|&w| {
                    let start = r.windows[w as usize].start_ns;
                    start >= at && start - at < HORIZON_NS
                })
            });
            match log.part_of(page) {
                Some(Part::Steady(_)) => {
                    a.steady += 1;
                    a.steady_hit += u64::from(hit);
                }
                Some(part @ Part::Burst(_)) => {
                    let end = visits.get(&part).and_then(|v| v.last()).map_or(0, |v| v.1);
                    if at + 2 * WINDOW_MS * 1_000_000 <= end {
                        a.burst_early += 1;
                        a.burst_early_hit += u64::from(hit);
                    } else {
                        a.burst_late += 1;
                    }
                }
                Some(Part::Rare) | None => {}
            }
        }
        Ok(a)
    }
}
/// The models the scorecard judges beside the kernel.
const MODELS: [&str; 4] = [
    "kernel-time",
    "fault-count",
    "fault-count:stamp=latest",
    "two-touch",
];

/// `numatrace replay --truth --json` on the scenario's trace: its
/// scorecard.
fn scorecard(
    numatrace: &Path,
    truth: &Path,
    trace: &Path,
    hot_rules: &str,
) -> Result<serde_json::Value> {
    let horizon = HORIZON_S.to_string();
    let v = replay(numatrace, trace, truth, (&horizon, hot_rules), &MODELS)?;
    Ok(v["scorecard"].clone())
}

/// The scorecard as a table: a row per hot rule and policy.
fn table(card: &serde_json::Value) -> String {
    let mut t = String::from(
        "| hot rule | policy | promoted pages | judged | precision | recall | bursts | first hot to promotion p50 (ms) | slow-tier access share |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    let empty = Vec::new();
    let shares = card["shares"].as_array().unwrap_or(&empty);
    for rule in card["rules"].as_array().unwrap_or(&empty) {
        for (i, p) in rule["policies"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .enumerate()
        {
            let share = &shares.get(i).map_or(serde_json::Value::Null, |s| s.clone());
            let pct = |v: &serde_json::Value| {
                v.as_f64()
                    .map_or("-".into(), |x| format!("{:.1}%", 100.0 * x))
            };
            t += &format!(
                "| >= {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                rule["hot_accesses"],
                p["policy"].as_str().unwrap_or("?"),
                share["promoted_pages"],
                p["judged"],
                pct(&p["precision"]),
                pct(&p["recall"]),
                p["bursts"],
                p["to_promotion_p50_ms"]
                    .as_f64()
                    .map_or("-".into(), |x| format!("{x:.0}")),
                pct(&share["slow_access_share"]),
            );
        }
    }
    t
}

/// The checks the module's doc states, on the run's figures.
fn expect(
    log: &KnownLog,
    truth: &Sorted,
    faults: &Faults,
    after: &AfterPromotion,
    card: &serde_json::Value,
) -> Result<()> {
    ensure!(
        log.visits_not_logged == 0 && truth.total >= 50_000,
        "{} visits past the log's bound, {} accesses on the slow tier: the checks need every \
         visit logged and 50,000 accesses",
        log.visits_not_logged,
        truth.total
    );
    ensure!(
        truth.in_visits * 100 >= truth.total * 99,
        "{} of {} slow-tier accesses in a visit's window: 99% needed",
        truth.in_visits,
        truth.total
    );
    ensure!(
        truth.cold == 0 && faults.in_cold == 0,
        "the untouched mapping: {} accesses on {} pages, {} hint faults",
        truth.cold,
        truth.cold_pages,
        faults.in_cold
    );
    let u = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
    let chunk_pages = (log.steady_chunks + log.burst_chunks) * log.chunk_pages;
    let burst_pages = log.burst_chunks * log.chunk_pages;
    let (any, busy) = (&card["rules"][0], &card["rules"][1]);
    let hot = u(any, "hot_pages");
    ensure!(
        hot * 10 >= chunk_pages * 9 && hot <= chunk_pages + 1 + OTHER_PAGES,
        "{hot} pages hot on the slow tier under one access a window; the chunks have {chunk_pages}"
    );
    let busy_hot = u(busy, "hot_pages");
    ensure!(
        busy_hot * 10 >= burst_pages * 9 && busy_hot * 10 <= burst_pages * 11 + OTHER_PAGES * 10,
        "{busy_hot} pages hot under {BUSY} accesses a window; the burst chunks have {burst_pages}, \
         and nothing else should be"
    );
    ensure!(
        after.steady >= 500
            && after.steady_hit * 100 >= after.steady * 95
            && after.burst_early_hit * 100 >= after.burst_early * 98,
        "the kernel's promotions hit again at their new frame within {HORIZON_S} s: {} of {} steady \
         pages, {} of {} burst pages promoted before their burst's last second; 500 steady \
         promotions, 95% of them and 98% of the burst pages needed",
        after.steady_hit,
        after.steady,
        after.burst_early_hit,
        after.burst_early
    );
    let policies = any["policies"].as_array().map_or(&[][..], Vec::as_slice);
    let by_name = |prefix: &str| {
        policies
            .iter()
            .find(|p| p["policy"].as_str().is_some_and(|n| n.starts_with(prefix)))
    };
    let (Some(kernel), Some(fault_count), Some(two_touch)) = (
        by_name("kernel"),
        by_name("fault-count"),
        by_name("two-touch"),
    ) else {
        bail!("the scorecard lacks the kernel, fault-count or two-touch: {card}");
    };
    let p50 = |p: &serde_json::Value| p["to_promotion_p50_ms"].as_f64().unwrap_or(f64::INFINITY);
    ensure!(
        u(fault_count, "recalled") >= u(kernel, "recalled")
            && p50(fault_count) <= p50(kernel)
            && u(two_touch, "judged") <= u(fault_count, "judged"),
        "fault-count promotes at every hint fault here, two-touch at a page's second: fault-count \
         should recall no fewer pages than the kernel, sooner, and two-touch promote no more than \
         fault-count"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use numa_core::workload::Visit;

    fn w(start_ns: u64, end_ns: u64) -> Window {
        Window {
            start_ns,
            end_ns,
            clock_err_ns: 10,
        }
    }

    #[test]
    fn a_visit_overlaps_a_window_widened_by_its_clock_error() {
        let v = [(100, 200), (1000, 1100)];
        assert!(overlaps(&v, &w(150, 160)));
        assert!(overlaps(&v, &w(205, 300)), "within the clock error after");
        assert!(overlaps(&v, &w(300, 995)), "within the clock error before");
        assert!(!overlaps(&v, &w(300, 900)));
        assert!(!overlaps(&v, &w(1200, 1300)));
    }

    #[test]
    fn a_frame_is_owned_by_the_page_placed_on_it() {
        let run = |first_page, pfn, pages| FrameRun {
            first_page,
            pfn,
            pages,
        };
        let log = KnownLog {
            chunk_pages: 2,
            steady_chunks: 1,
            burst_chunks: 1,
            rare_page: Some(4),
            slow_frames: vec![run(0, 500, 3), run(3, 100, 2)],
            cold_frames: vec![run(0, 300, 2)],
            visits: vec![Visit {
                part: Part::Burst(1),
                start_ns: 0,
                end_ns: 5,
            }],
            ..KnownLog::default()
        };
        let o = Owners::of(&log);
        assert_eq!(o.of_pfn(501), Some(Owner::Visited(1)));
        assert_eq!(o.of_pfn(101), Some(Owner::Visited(4)));
        assert_eq!(o.of_pfn(301), Some(Owner::Cold(1)));
        assert_eq!(o.of_pfn(302), None);
        assert_eq!(o.of_pfn(99), None);
        assert_eq!(visits_by_part(&log)[&Part::Burst(1)], vec![(0, 5)]);
    }
}
