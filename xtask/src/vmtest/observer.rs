//! Does the kernel behave under `stats --live` as it does bare? The
//! workload of [`crate::observer`] (the scanner's idle-gap cliff), after a
//! warm-up run whose figures are not used (a boot's first run is an
//! outlier), in two parts, each alternating bare runs and runs under
//! `stats --live` and starting and ending bare, with the kernel's own
//! vmstat deltas around each run. In an instruction-count boot the bare
//! runs of one part agree on every counter judged there to within a
//! fraction of [`BOUND_PCT`], so a run under numatrace that differs from a
//! bare run beside it by more than that is numatrace changing what the
//! kernel does. Every run is on vCPU 0, numatrace's reader with the
//! workload: on the other vCPU its instructions would pass on the
//! workload's clock too, which real CPUs do not do, and the kernel would
//! charge them to the workload's scanner 32-fold ([`crate::observer`]).
//!
//! - `cliff`: `hot_threshold_ms` 100, as the seeds ran it. Only hint
//!   faults are judged there: 65,536 in every bare run and every run
//!   under `--empty-programs` (6.1, 6.12, 7.2), a fraction of that when
//!   the scans of a chunk's visit are charged too much. PTE updates also count
//!   re-protected pages the kernel refused (bare runs spread up to 2.3%,
//!   `--empty-programs` ran 6.6% above them on 6.1's single vCPU), and
//!   whether a fault promotes depends on when the scan before it ran to
//!   within milliseconds (bare runs spread up to 12%).
//! - `promote`: `hot_threshold_ms` 10,000, above every fault's latency
//!   (4 s gaps): every hint fault promotes, bare runs agree on all three
//!   counters to within 0.05%, and all three are judged. The added
//!   migrations are task time on which the scanner runs, which keeps the
//!   scan ahead of the idle gap: this part does not show the cliff, the
//!   first does.
use std::path::Path;

use anyhow::{bail, Result};

use crate::kernels::Series;
use crate::observer::{deviation_pct, setup, workload, COUNTERS};
use crate::results::{entry, read_report};

/// The guest script: [`crate::observer::SETUP`], then the warm-up, then
/// each part of [`PARTS`] (`part NAME hot_threshold_ms TRACED_RUNS`).
/// Every run starts with numa_balancing switched to 1 and back to 2,
/// which resets the kernel's adaptive promotion threshold
/// (`reset_memory_tiering`): else the threshold the last part left holds
/// for up to a minute into the next (measured on 7.2: 37,861 promotions
/// in a bare run at 10,000 ms after the part at 100 ms, 65,525 in the
/// next).
pub(super) const SCRIPT: &str = concat!(
    setup!(),
    "W='",
    workload!(),
    "'\n",
    include_str!("observer.sh")
);

/// A part of the test: its runs' prefix, its `hot_threshold_ms`, its runs
/// under numatrace (each between two bare runs), the counters judged (the
/// others are printed).
struct Part {
    name: &'static str,
    hot_threshold_ms: u32,
    traced_runs: usize,
    judged: &'static [&'static str],
}

/// The cliff is a coin toss per run under a numatrace that delays the
/// scan (measured unpinned: 6 runs of 15 lost faults on 6.12, 5 of 13 on
/// 7.2), so that part has two runs under it on each kernel.
const PARTS: [Part; 2] = [
    Part {
        name: "cliff",
        hot_threshold_ms: 100,
        traced_runs: 2,
        judged: &["numa_hint_faults"],
    },
    Part {
        name: "promote",
        hot_threshold_ms: 10_000,
        traced_runs: 1,
        judged: &COUNTERS,
    },
];

/// The largest difference allowed between a run under numatrace and each
/// bare run beside it, and between consecutive bare runs, on a judged
/// counter.
const BOUND_PCT: f64 = 2.0;

/// Activity each bare run must show on each judged counter: half the
/// workload's 65,536 slow-node pages. Below that, a bound in percent says
/// little (and the scanner hardly reached the region).
const MIN_COUNT: u64 = 32_768;

/// A run's vmstat deltas, as the guest's `run` writes them.
type Deltas = std::collections::BTreeMap<String, u64>;

pub(super) fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    let mut problems = Vec::new();
    for part in &PARTS {
        let run =
            |r: String| -> Result<Deltas> { read_report(dir, &format!("{}_{r}.json", part.name)) };
        let bare: Vec<_> = (0..=part.traced_runs)
            .map(|i| run(format!("bare_{i}")))
            .collect::<Result<_>>()?;
        let traced: Vec<_> = (0..part.traced_runs)
            .map(|i| run(format!("traced_{i}")))
            .collect::<Result<_>>()?;
        for counter in COUNTERS {
            let of = |runs: &[Deltas]| -> Result<Vec<u64>> {
                runs.iter()
                    .map(|d| entry(d, "the vmstat deltas", counter))
                    .collect()
            };
            let found = judge(part, counter, &of(&bare)?, &of(&traced)?);
            if part.judged.contains(&counter) {
                problems.extend(found);
            } else {
                println!("      ({counter} is printed, not judged, at this threshold)");
            }
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("; "));
    }
    Ok(())
}

/// One counter of one part: `bare[i]`, `traced[i]`, `bare[i + 1]`, ...
/// Prints the figures; returns what is wrong with them.
fn judge(part: &Part, counter: &str, bare: &[u64], traced: &[u64]) -> Vec<String> {
    let dev = |a: u64, b: u64| deviation_pct(a as f64, b as f64);
    let mut line = format!(
        "    {} (hot_threshold_ms {}) {counter}: bare {}",
        part.name, part.hot_threshold_ms, bare[0]
    );
    let part = part.name;
    let mut problems = Vec::new();
    let least = bare.iter().copied().min().unwrap_or(0);
    if least < MIN_COUNT {
        problems.push(format!(
            "{part}: {counter} {least} in a bare run, under {MIN_COUNT}: the workload did too little to judge"
        ));
    }
    for (i, &t) in traced.iter().enumerate() {
        let (before, after) = (bare[i], bare[i + 1]);
        let (d0, d1, d_bare) = (dev(t, before), dev(t, after), dev(after, before));
        line.push_str(&format!(
            ", stats --live {t} ({d0:+.2}%, {d1:+.2}%), bare {after} ({d_bare:+.2}%)"
        ));
        if least >= MIN_COUNT && d_bare.abs() > BOUND_PCT {
            problems.push(format!(
                "{part}: {counter} {before} then {after} in consecutive bare runs ({d_bare:+.2}%, over {BOUND_PCT}%): the workload is not deterministic enough to judge"
            ));
        }
        if d0.abs().max(d1.abs()) > BOUND_PCT {
            problems.push(format!(
                "{part}: {counter} {t} under stats --live, {d0:+.2}% / {d1:+.2}% from the bare runs beside it ({before}, {after}; bound {BOUND_PCT}%)"
            ));
        }
    }
    println!("{line}");
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_runs_every_part_after_the_warm_up() {
        let warm_up = SCRIPT.find("fresh warmup").expect("a warm-up run");
        for p in &PARTS {
            let call = format!(
                "\npart {} {} {}\n",
                p.name, p.hot_threshold_ms, p.traced_runs
            );
            let at = SCRIPT.find(&call).expect(&call);
            assert!(warm_up < at, "{call}");
        }
        assert!(SCRIPT.contains(crate::observer::WORKLOAD));
    }

    #[test]
    fn judges_against_both_bare_neighbours_over_a_minimum() {
        let j = |bare: &[u64], traced: &[u64]| judge(&PARTS[0], "c", bare, traced);
        assert!(j(&[65_536, 65_536, 65_536], &[65_536, 65_536]).is_empty());
        assert!(j(&[65_536, 65_536], &[66_500]).is_empty());
        // The cliff: a traced run far under its bare neighbours, once.
        let cliff = j(&[65_536, 65_536, 65_536, 65_536], &[65_536, 40_962, 65_536]);
        assert_eq!(cliff.len(), 1);
        assert!(cliff[0].contains("40962 under stats --live"), "{cliff:?}");
        // Off from one neighbour only.
        assert_eq!(j(&[65_536, 66_300], &[67_500]).len(), 1);
        // Bare runs that disagree, or did too little, fail too.
        assert_eq!(j(&[60_000, 65_536], &[65_536]).len(), 2);
        let little = j(&[100, 100], &[100]);
        assert_eq!(little.len(), 1);
        assert!(little[0].contains("too little"), "{little:?}");
    }
}
