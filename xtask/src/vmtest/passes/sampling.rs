//! One slow folio in 8 followed against every folio followed, over the same
//! faults: the sampled run's quantiles and agreement fractions must lie
//! within the error its own report states of the full run's, with no stamp
//! lost to eviction.
use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use crate::results::{f, read_json, u};

/// Followed folios the sampled run must have stamped for its errors to
/// mean something (the region is 16384 pages: about 2048 at 1 in 8).
const MIN_FOLIOS: u64 = 1000;
const QUANTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

pub fn check(dir: &Path, full: &Value) -> Result<()> {
    let sampled = read_json(dir, "sampled-stats.json")?;
    let rate = u(&sampled, &["sampling", "rate"])?;
    let folios = u(&sampled, &["sampling", "folios"])?;
    let e = f(&sampled, &["estimates", "rank_error"])?;
    println!(
        "    sampling: 1 in {rate} (coverage {:.4}), {folios} folios stamped, maps {} KiB of a {} KiB budget; rank error {e:.4}",
        f(&sampled, &["sampling", "coverage"])?,
        u(&sampled, &["sampling", "map_bytes"])? >> 10,
        u(&sampled, &["sampling", "map_budget_bytes"])? >> 10,
    );
    ensure!(rate == 8, "the budget for 1 in 8 gave 1 in {rate}");
    ensure!(
        u(full, &["sampling", "rate"])? == 1,
        "the full run did not follow every folio"
    );
    for (run, v) in [("full", full), ("sampled", &sampled)] {
        ensure!(u(v, &["evictions"])? == 0, "{run} run: stamps evicted");
    }
    ensure!(
        folios >= MIN_FOLIOS,
        "{folios} folios stamped in the sampled run, fewer than {MIN_FOLIOS}"
    );
    for hist in ["latency_ms", "fault_delta"] {
        check_quantiles(full, &sampled, hist, e)?;
    }
    check_agreement(dir)
}

/// Each sampled quantile lies between the full histogram's quantiles at
/// p - e and p + e.
fn check_quantiles(full: &Value, sampled: &Value, hist: &str, e: f64) -> Result<()> {
    let rows: Vec<(f64, u64)> = full[hist]
        .as_array()
        .with_context(|| format!("no {hist} histogram in the full run"))?
        .iter()
        .map(|r| Ok((f(r, &["le"])?, u(r, &["count"])?)))
        .collect::<Result<_>>()?;
    for (name, p) in QUANTILES {
        let v = f(sampled, &["estimates", hist, name])?;
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
    let full = read_json(dir, "full-replay.json")?;
    let sampled = read_json(dir, "sampled-replay.json")?;
    let errors = sampled["sampling"]["agreement_pct_error"]
        .as_array()
        .context("no agreement errors in the sampled shadow report")?;
    let models = sampled["models"].as_array().context("no models")?;
    ensure!(!models.is_empty(), "no models in the sampled shadow report");
    for (i, (m, err)) in models.iter().zip(errors).enumerate() {
        let name = m["name"].as_str().context("a model without a name")?;
        let other = full["models"]
            .as_array()
            .and_then(|ms| ms.iter().find(|o| o["name"] == name))
            .with_context(|| format!("no {name} in the full shadow report"))?;
        let (s, fu) = (f(m, &["agreement_pct"])?, f(other, &["agreement_pct"])?);
        let err = err.as_f64().context("an agreement error is not a number")?;
        println!(
            "    sampling: {name} agreement {s:.2}% sampled, {fu:.2}% full, stated error {err:.2}"
        );
        ensure!(
            (s - fu).abs() <= err,
            "{name}: sampled agreement {s:.2}% is {:.2} points from the full run's {fu:.2}%, beyond the stated {err:.2}",
            (s - fu).abs()
        );
        check_projected(
            &sampled,
            i,
            name,
            u(other, &["projected", "promote_pages"])?,
        )?;
    }
    Ok(())
}

/// The sampled run's promotions scaled to all folios, within their stated
/// error of the full run's.
fn check_projected(sampled: &Value, i: usize, name: &str, full: u64) -> Result<()> {
    let p = &sampled["sampling"]["projected_all"][i];
    let (estimate, error) = (f(p, &["estimate"])?, f(p, &["error"])?);
    println!(
        "    sampling: {name} would promote {estimate:.0} +/- {error:.0} pages (sampled, scaled), {full} (full)"
    );
    ensure!(
        (estimate - full as f64).abs() <= error,
        "{name}: scaled projected promotions {estimate:.0} are more than the stated {error:.0} from the full run's {full}"
    );
    Ok(())
}
