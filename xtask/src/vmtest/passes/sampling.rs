//! One slow folio in 8 followed against every folio followed, over the same
//! faults: the sampled run's quantiles and agreement fractions must lie
//! within the error its own report states of the full run's, with no stamp
//! lost to eviction.
use std::path::Path;

use anyhow::{ensure, Context, Result};
use numa_core::model::log2::BucketCount;
use numa_core::model::shadow::ShadowReport;
use numa_core::model::totals::Report;
use numa_core::sampling::Sampling;

use crate::results::read_report;

/// Followed folios the sampled run must have stamped for its errors to
/// mean something (the region is 16384 pages: about 2048 at 1 in 8).
const MIN_FOLIOS: u64 = 1000;
const QUANTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

/// A report's sampling, which every live run states.
fn sampling<'a>(run: &str, r: &'a Report) -> Result<&'a Sampling> {
    r.sampling
        .as_ref()
        .with_context(|| format!("the {run} run's report has no sampling"))
}

pub(super) fn check(dir: &Path, full: &Report) -> Result<()> {
    let sampled: Report = read_report(dir, "sampled-stats.json")?;
    let sp = sampling("sampled", &sampled)?;
    let (rate, folios) = (sp.rate, sp.folios);
    let e = sampled.estimates.rank_error;
    println!(
        "    sampling: 1 in {rate} (coverage {:.4}), {folios} folios stamped, maps {} KiB of a {} KiB budget; rank error {e:.4}",
        sp.coverage,
        sp.map_bytes >> 10,
        sp.map_budget_bytes >> 10,
    );
    ensure!(rate == 8, "the budget for 1 in 8 gave 1 in {rate}");
    ensure!(
        sampling("full", full)?.rate == 1,
        "the full run did not follow every folio"
    );
    for (run, v) in [("full", full), ("sampled", &sampled)] {
        ensure!(v.evictions == 0, "{run} run: stamps evicted");
    }
    ensure!(
        folios >= MIN_FOLIOS,
        "{folios} folios stamped in the sampled run, fewer than {MIN_FOLIOS}"
    );
    let e_ = &sampled.estimates;
    check_quantiles("latency_ms", &full.latency_ms, &e_.latency_ms, e)?;
    check_quantiles("fault_delta", &full.fault_delta, &e_.fault_delta, e)?;
    check_agreement(dir)
}

/// Each sampled quantile lies between the full histogram's quantiles at
/// p - e and p + e.
fn check_quantiles(
    hist: &str,
    full: &[BucketCount],
    sampled: &std::collections::BTreeMap<std::borrow::Cow<'static, str>, Option<f64>>,
    e: f64,
) -> Result<()> {
    let rows: Vec<(f64, u64)> = full.iter().map(|r| (r.le, r.count)).collect();
    for (name, p) in QUANTILES {
        let v = sampled
            .get(name)
            .copied()
            .flatten()
            .with_context(|| format!("estimates.{hist}.{name} is not a number"))?;
        let lo = quantile(&rows, p - e).context("empty full histogram")?;
        let hi = quantile(&rows, p + e).context("empty full histogram")?;
        println!("    sampling: {hist} {name} {v} (full run's p-e..p+e: {lo}..{hi})");
        ensure!(
            lo <= v && v <= hi,
            "{hist} {name}: sampled {v} is outside the full run's {lo}..{hi} (rank error {e:.4})"
        );
    }
    Ok(())
}

/// The bucket bound at quantile `q` of `(le, count)` rows, as numatrace's
/// own histograms compute it.
fn quantile(rows: &[(f64, u64)], q: f64) -> Option<f64> {
    let total: u64 = rows.iter().map(|r| r.1).sum();
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    rows.iter().find_map(|&(le, c)| {
        seen += c;
        (seen >= rank).then_some(le)
    })
}

/// Each model's agreement with the kernel, sampled against full, within
/// the sampled report's stated error.
fn check_agreement(dir: &Path) -> Result<()> {
    let full: ShadowReport = read_report(dir, "full-replay.json")?;
    let sampled: ShadowReport = read_report(dir, "sampled-replay.json")?;
    let sp = sampled
        .sampling
        .as_ref()
        .context("no agreement errors in the sampled shadow report")?;
    let models = &sampled.models;
    ensure!(!models.is_empty(), "no models in the sampled shadow report");
    for (i, (m, &err)) in models.iter().zip(&sp.agreement_pct_error).enumerate() {
        let name = m.name.as_str();
        let other = full
            .models
            .iter()
            .find(|o| o.name == name)
            .with_context(|| format!("no {name} in the full shadow report"))?;
        let (s, fu) = (m.agreement_pct, other.agreement_pct);
        println!(
            "    sampling: {name} agreement {s:.2}% sampled, {fu:.2}% full, stated error {err:.2}"
        );
        ensure!(
            (s - fu).abs() <= err,
            "{name}: sampled agreement {s:.2}% is {:.2} points from the full run's {fu:.2}%, beyond the stated {err:.2}",
            (s - fu).abs()
        );
        let p = sp
            .projected_all
            .get(i)
            .with_context(|| format!("no projected_all for {name} in the sampled shadow report"))?;
        check_projected(p.estimate, p.error, name, other.projected.promote_pages)?;
    }
    Ok(())
}

/// The sampled run's promotions scaled to all folios, within their stated
/// error of the full run's.
fn check_projected(estimate: f64, error: f64, name: &str, full: u64) -> Result<()> {
    println!(
        "    sampling: {name} would promote {estimate:.0} +/- {error:.0} pages (sampled, scaled), {full} (full)"
    );
    ensure!(
        (estimate - full as f64).abs() <= error,
        "{name}: scaled projected promotions {estimate:.0} are more than the stated {error:.0} from the full run's {full}"
    );
    Ok(())
}
