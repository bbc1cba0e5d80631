//! The scorecard as text: the slow tier's share of the accesses per
//! policy, then one table per hot rule.
use std::io::Write;

use numa_core::model::scorecard::{RuleScores, Scorecard};

/// A share as a percentage, or `-` without a denominator.
fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.1}%", v * 100.0))
}

pub fn write_human(c: &Scorecard, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "scorecard against the truth: {} windows of {:.0} ms over the trace's span (bounds within \
         {:.3} ms of the trace's clock), horizon {:.1} s; {} slow-tier pages followed (at most {}, \
         {} past that; one frame in {} of the trace's sample)",
        c.windows,
        c.window_ms,
        c.clock_err_ms,
        c.horizon_s,
        c.pages,
        c.max_pages,
        c.untracked_pages,
        c.sample_one_in
    )?;
    if let Some(d) = &c.damon {
        writeln!(out, "  {}", d.describe())?;
    }
    writeln!(
        out,
        "  slow-tier share: of all {} user accesses, and of the {} to pages that were on the slow tier",
        c.accesses, c.slow_page_accesses
    )?;
    writeln!(
        out,
        "  {:<34} {:>10} {:>10} {:>10}",
        "policy", "promoted", "of all", "of slow"
    )?;
    for s in &c.shares {
        let how = if s.measured { "measured" } else { "projected" };
        writeln!(
            out,
            "  {:<34} {:>10} {:>10} {:>10}  {how}",
            s.policy,
            s.promoted_pages,
            pct(s.slow_access_share),
            pct(s.slow_page_access_share)
        )?;
    }
    for r in &c.rules {
        write_rule(r, c.horizon_s, out)?;
    }
    writeln!(
        out,
        "  pages are 4 KiB frames; a model's promotion serves a page from DRAM from the next window on \
         (no room or rate limit assumed); a window is after a promotion when it starts at or after it"
    )
}

fn write_rule(r: &RuleScores, horizon_s: f64, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "  hot: {} or more accesses in a window; {} pages hot on the slow tier, {} of them judged \
         (hot first at least {horizon_s:.1} s before the truth's end)",
        r.hot_accesses, r.hot_pages, r.hot_judged
    )?;
    writeln!(
        out,
        "    {:<32} {:>8} {:>10} {:>8} {:>8} {:>16}",
        "policy", "judged", "precision", "recall", "bursts", "to promotion p50"
    )?;
    for p in &r.policies {
        let delay = p
            .to_promotion_p50_ms
            .map_or_else(|| "-".into(), |ms| format!("{:.2} s", ms / 1e3));
        writeln!(
            out,
            "    {:<32} {:>8} {:>10} {:>8} {:>8} {:>16}",
            p.policy,
            p.judged,
            pct(p.precision),
            pct(p.recall),
            p.bursts,
            delay
        )?;
    }
    Ok(())
}
