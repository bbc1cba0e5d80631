//! Soak: `export`, `shadow`, `promote --all` and `stats` attached together
//! for `SOAK_S` seconds (90 in the test suite; `cargo xtask soak
//! --minutes M` for longer) under a workload with process churn (a new
//! hot-chunks process every few seconds) and `top --once` run back to
//! back. Every 5 s the guest samples each long-running numatrace's RSS,
//! CPU ticks and open fds, the exporter's series count and the promoter's
//! queue depth and scan-index size. The host fails on growth past the
//! bounds below over the second half of the run (start-up long settled;
//! the scan index once ten minutes of processes have been forgotten), on a
//! non-zero exit, and on hint-fault counts that differ from vmstat's; an
//! oops, WARN or BUG in the guest log fails the test through the runner.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{ensure, Context, Result};

use crate::kernels::Series;
use crate::results::{faults_match_vmstat, read_report, text};

pub(crate) const SCRIPT: &str = include_str!("soak.sh");

/// RSS may grow this much over the second half of the run.
const RSS_GROWTH_KB: u64 = 16 << 10;
/// Open fds may grow this much (a scrape or a state-file read in flight).
const FD_GROWTH: u64 = 4;
/// The promoter holds a pidfd per process it served until it finds the
/// process gone, at most this many (its `MAX_PIDFDS`); under churn its fds
/// move within that cap.
const PROMOTER_PIDFDS: u64 = 256;
/// Exporter series may grow this much: per-process series are capped by
/// `--per-process 5`, so growth beyond a handful of new label values is a
/// leak.
const SERIES_GROWTH: u64 = 64;
/// How long after its last activity the scan index forgets a process
/// (numatrace's `GONE_AFTER_NS`), seconds.
const FORGET_S: u64 = 600;

/// One sample of one process: (seconds, RSS KiB, CPU ticks, open fds).
type Sample = (u64, u64, u64, u64);

/// The guest script of a soak of `seconds`, run in `/results/soak`.
pub(crate) fn script(seconds: u64) -> String {
    format!(
        "mkdir -p /results/soak && cd /results/soak && RESULTS=/results/soak SOAK_S={seconds} sh -c {}",
        crate::vm::shell_quote(SCRIPT)
    )
}

pub(crate) fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    for name in ["export", "shadow", "promote", "stats"] {
        let rc = text(dir, &format!("{name}.rc"))?;
        ensure!(rc.trim() == "0", "{name} exited with {}", rc.trim());
    }
    ensure!(
        !dir.join("top.failed").exists(),
        "top --once failed at (unix s) {}",
        text(dir, "top.failed")?.trim()
    );
    let listing = text(dir, "loaded.err")?;
    ensure!(
        listing.trim().is_empty(),
        "doctor --loaded failed while others attached and detached: {}",
        listing.trim()
    );
    let seconds: u64 = text(dir, "soak_seconds")?
        .trim()
        .parse()
        .context("soak_seconds")?;
    let churned: u64 = text(dir, "churned")?.trim().parse().context("churned")?;
    ensure!(
        churned >= 3,
        "only {churned} churn processes ran: no churn was tested"
    );
    let samples = parse_samples(&text(dir, "samples.txt")?)?;
    println!("    {seconds} s, {churned} churn processes");
    for (name, s) in &samples {
        check_growth(name, s, seconds)?;
    }
    let rows = parse_global(&text(dir, "global.txt")?);
    check_global(&rows)?;
    check_scan_index(&rows, seconds)?;
    check_counts(dir)
}

/// Per process name, its samples in time order.
fn parse_samples(text: &str) -> Result<BTreeMap<String, Vec<Sample>>> {
    let mut out: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| -> Result<u64> {
            f.get(i)
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("bad sample line {line:?}"))
        };
        let name = f.get(1).context("sample without a name")?;
        out.entry((*name).to_owned())
            .or_default()
            .push((n(0)?, n(2)?, n(3)?, n(4)?));
    }
    ensure!(
        out.len() == 4,
        "samples for {} processes, want 4",
        out.len()
    );
    Ok(out)
}

/// The sample half-way through the run, and the last: growth over the
/// second half, when start-up (four attaches at once, slow under TCG) is
/// long over.
fn half_and_last<T: Copy>(v: &[T]) -> Option<(T, T)> {
    Some((*v.get(v.len() / 2)?, *v.last()?))
}

fn check_growth(name: &str, s: &[Sample], seconds: u64) -> Result<()> {
    ensure!(s.len() >= 8, "{name}: {} samples, want 8 or more", s.len());
    let ((_, rss_q, _, fds_q), (t_end, rss_end, cpu_end, fds_end)) =
        half_and_last(s).context("no samples")?;
    let cpu_pct = cpu_end as f64 / t_end.max(1) as f64; // ticks are 1/100 s
    println!(
        "    {name}: RSS {} -> {rss_q} -> {rss_end} KiB, fds {fds_q} -> {fds_end}, CPU {cpu_pct:.1}% over {seconds} s",
        s[0].1
    );
    ensure!(
        rss_end <= rss_q + RSS_GROWTH_KB,
        "{name}: RSS grew from {rss_q} to {rss_end} KiB (bound +{RSS_GROWTH_KB} KiB)"
    );
    let fd_bound = FD_GROWTH + if name == "pro" { PROMOTER_PIDFDS } else { 0 };
    ensure!(
        fds_end <= fds_q + fd_bound,
        "{name}: open fds grew from {fds_q} to {fds_end} (bound +{fd_bound})"
    );
    Ok(())
}

/// One sample of the whole run: (seconds, exporter series, promoter
/// queue depth, scan-index entries, scan-index processes).
type Global = (u64, u64, u64, u64, u64);

fn parse_global(text: &str) -> Vec<Global> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            (f.len() == 5).then(|| (f[0], f[1], f[2], f[3], f[4]))
        })
        .collect()
}

/// The exporter's series count and the promoter's queue depth.
fn check_global(rows: &[Global]) -> Result<()> {
    let rows: Vec<(u64, u64)> = rows.iter().map(|r| (r.1, r.2)).collect();
    let queue_max = rows.iter().map(|r| r.1).max().unwrap_or(0);
    // From the exporter's first answer on.
    let serving: Vec<(u64, u64)> = rows.into_iter().skip_while(|r| r.0 == 0).collect();
    let ((series_q, _), (series_end, _)) =
        half_and_last(&serving).context("the exporter never answered a scrape")?;
    println!(
        "    exporter series {series_q} -> {series_end}; promoter queue depth at most {queue_max}"
    );
    ensure!(
        series_end <= series_q + SERIES_GROWTH,
        "exporter series grew from {series_q} to {series_end} (bound +{SERIES_GROWTH})"
    );
    Ok(())
}

/// The promoter's index of scan passes forgets a process ten minutes after
/// its last scan or fault ([`FORGET_S`]): under steady churn it stops
/// growing once a whole window of processes has been forgotten. Runs
/// shorter than two windows are only reported.
fn check_scan_index(rows: &[Global], seconds: u64) -> Result<()> {
    let (_, _, _, entries_end, procs_end) = *rows.last().context("no global samples")?;
    let procs_max = rows.iter().map(|r| r.4).max().unwrap_or(0);
    println!(
        "    scan index: {entries_end} entries (chunks and passes) of {procs_end} processes at the end, at most {procs_max} processes"
    );
    ensure!(
        procs_end > 0,
        "the promoter's scan index is empty: it saw no scan pass"
    );
    let settled = rows.iter().find(|r| r.0 >= FORGET_S + 60);
    match settled {
        Some(&(t, _, _, entries_t, _)) if seconds >= 2 * FORGET_S => {
            let bound = entries_t + entries_t / 2 + 2048;
            println!("    scan index after {t} s: {entries_t} chunks; at the end {entries_end} (bound {bound})");
            ensure!(
                entries_end <= bound,
                "the scan index grew from {entries_t} chunks at {t} s to {entries_end} (bound {bound}): it does not forget exited processes"
            );
        }
        _ => println!(
            "    scan index growth not judged: the run is shorter than two ten-minute windows"
        ),
    }
    Ok(())
}

/// `stats`, attached the whole time beside the others, counted every hint
/// fault vmstat counted.
fn check_counts(dir: &Path) -> Result<()> {
    let c = faults_match_vmstat(&read_report(dir, "stats.json")?)?;
    println!(
        "    stats: {} hint faults recorded, {} decisions, vmstat {}, {} drops, {} probe runs missed",
        c.records, c.decisions, c.vmstat, c.drops, c.missed
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_past_the_bounds_fails() {
        let flat: Vec<Sample> = (0..12).map(|i| (i * 5, 20_000, i * 10, 12)).collect();
        check_growth("export", &flat, 60).expect("flat");
        let mut leak = flat.clone();
        leak.last_mut().expect("samples").1 = 20_000 + RSS_GROWTH_KB + 1;
        assert!(check_growth("export", &leak, 60).is_err());
        let mut fds = flat;
        fds.last_mut().expect("samples").3 = 12 + FD_GROWTH + 1;
        assert!(check_growth("export", &fds, 60).is_err());
        check_growth("pro", &fds, 60).expect("the promoter's pidfds");
        let g = |t: &str| parse_global(t);
        check_global(&g("0 100 0 0 0\n5 120 3 0 0\n10 120 0 0 0\n15 130 0 0 0\n"))
            .expect("bounded");
        assert!(
            check_global(&g("0 100 0 0 0\n5 120 3 0 0\n10 120 0 0 0\n15 900 0 0 0\n")).is_err()
        );
    }

    #[test]
    fn a_scan_index_that_keeps_every_process_fails() {
        // 30 minutes, one churn process every 5 s (360 in all).
        let rows = |per_proc: u64, procs: &dyn Fn(u64) -> u64| -> Vec<Global> {
            (0..=360)
                .map(|i| (i * 5, 100, 0, procs(i * 5) * per_proc, procs(i * 5)))
                .collect()
        };
        let forgets = rows(20, &|t| t.min(FORGET_S) / 5 + 10);
        check_scan_index(&forgets, 1800).expect("bounded by the window");
        let keeps = rows(20, &|t| t / 5 + 10);
        assert!(check_scan_index(&keeps, 1800).is_err());
        // A short run: reported, growth not judged.
        check_scan_index(&keeps[..37], 180).expect("3 minutes");
        assert!(check_scan_index(&rows(20, &|_| 0)[..37], 180).is_err());
    }
}
