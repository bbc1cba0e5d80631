//! VM test of per-folio demotion: with `demotion_enabled` and DRAM filled
//! past its watermarks while slow-tier chunks are promoted, every folio
//! reclaim demotes is one record (from reclaim's allocation callback),
//! and their count by reclaimer equals the kernel's `pgdemote_*`; the
//! records survive a trace (`record`, then `stats` and `dump` of it).
//! With demotion disabled, none is reported.
use std::path::Path;

use anyhow::{ensure, Context, Result};

use crate::kernels::Series;
use crate::results::{equal_but_missed, read_report, text};
use numa_core::model::totals::Report;

pub(super) const SCRIPT: &str = include_str!("demotion.sh");

/// Below this many demoted pages the run says little: the workload is
/// shaped to demote tens of thousands.
const MIN_DEMOTED: u64 = 2_000;

const PGDEMOTE: [(&str, &str); 3] = [
    ("kswapd", "pgdemote_kswapd"),
    ("direct", "pgdemote_direct"),
    ("khugepaged", "pgdemote_khugepaged"),
];

fn vmstat_demoted(r: &Report) -> u64 {
    PGDEMOTE
        .iter()
        .map(|(_, k)| r.vmstat_delta.get(*k).copied().unwrap_or(0))
        .sum()
}

pub(super) fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    let on: Report = read_report(dir, "on.json")?;
    let d = &on.demotions;
    let kernel = vmstat_demoted(&on);
    eprintln!(
        "demotion: {} folios, {} pages ({:?}, {} without room, {} of unknown size) vs vmstat {kernel} ({:?}); drops {}, missed {}",
        d.folios,
        d.pages,
        d.by_reclaimer,
        d.alloc_failed,
        d.size_unknown,
        on.vmstat_delta
            .iter()
            .filter(|(k, _)| k.starts_with("pgdemote"))
            .collect::<Vec<_>>(),
        on.drops,
        on.runs_missed
    );
    ensure!(
        kernel >= MIN_DEMOTED,
        "the kernel demoted {kernel} pages, fewer than the {MIN_DEMOTED} this test needs"
    );
    ensure!(
        d.size_unknown == 0,
        "{} demoted folios of unknown size",
        d.size_unknown
    );
    equal_but_missed(
        "demoted pages vs vmstat pgdemote_*",
        d.pages + on.drops,
        kernel,
        on.runs_missed,
    )?;
    for (ours, theirs) in PGDEMOTE {
        let n = d.by_reclaimer.get(ours).copied().unwrap_or(0);
        let k = on.vmstat_delta.get(theirs).copied().unwrap_or(0);
        ensure!(
            on.runs_missed > 0 || on.drops > 0 || n == k,
            "{ours} demotions: numatrace {n}, vmstat {theirs} {k}"
        );
    }
    ensure!(
        d.by_nodes
            .iter()
            .all(|p| p.src == Some(0) && p.dst == Some(1)),
        "demotions between other nodes than DRAM (0) to slow (1): {:?}",
        d.by_nodes
    );
    let dumped: u64 = text(dir, "on.dumped")?
        .trim()
        .parse()
        .context("on.dumped: not a count")?;
    ensure!(
        dumped == d.folios + d.alloc_failed,
        "dump has {dumped} demotion records, stats counted {} (+{} without room)",
        d.folios,
        d.alloc_failed
    );
    let off: Report = read_report(dir, "off.json")?;
    ensure!(
        off.demotions.folios == 0 && vmstat_demoted(&off) == 0,
        "demotion disabled, yet numatrace saw {} demotions and vmstat {}",
        off.demotions.folios,
        vmstat_demoted(&off)
    );
    ensure!(
        off.hint_faults > 0,
        "the run without demotion took no hint faults: it proves nothing"
    );
    Ok(())
}
