//! What per-folio sampling does to a report: how the followed folios scale
//! back to all of them, and the error each estimate carries.
//!
//! Folios are followed by PFN hash, one in `rate` of the slow nodes'
//! frames, independently of what the workload does with them. A figure
//! that needs a folio's stamp (latency, fault delta, a model's verdict) is
//! then a cluster sample: each followed folio brings all of its faults. The
//! errors below take the folio as the unit (`folios` followed folios that
//! were stamped): a fraction's standard error is at most `sqrt(f(1-f)/n)`
//! however its faults correlate within a folio (Agresti-Coull adjusted, so
//! a sample all on one side still states an error), and a quantile's rank error
//! is the Dvoretzky-Kiefer-Wolfowitz bound over `n` folios. Both are stated
//! at three standard errors / 99.9%, and are 0 when every folio is followed.
use serde::{Deserialize, Serialize};

use crate::mapplan::MapPlan;

/// The confidence the stated errors hold at (DKW's alpha).
pub const ALPHA: f64 = 0.001;
/// Standard errors a fraction's stated error spans.
pub const SIGMAS: f64 = 3.0;

/// The budget, the rate and what was followed, as every report states them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// `--map-budget`: kernel memory all maps may take.
    pub map_budget_bytes: u64,
    /// The kernel's own figure for all maps after load (fdinfo memlock;
    /// 0 for a trace that does not carry it).
    pub map_bytes: u64,
    /// Of the estimate the plan made, the stamp array's bytes.
    pub stamp_bytes: u64,
    /// One slow-node folio in `rate` is followed.
    pub rate: u64,
    /// Followed PFNs over the slow nodes' PFNs.
    pub coverage: f64,
    pub slow_pfns: u64,
    pub followed_pfns: u64,
    /// Followed folios the scanner or a decision stamped so far: the units
    /// the errors count.
    pub folios: u64,
}

impl Sampling {
    pub fn new(plan: &MapPlan, map_bytes: u64, folios: u64) -> Sampling {
        Sampling {
            map_budget_bytes: plan.budget_bytes,
            map_bytes,
            stamp_bytes: plan.stamp_bytes(),
            rate: plan.rate(),
            coverage: plan.coverage(),
            slow_pfns: plan.slow_pfns(),
            followed_pfns: plan.followed_pfns(),
            folios,
        }
    }

    pub fn sampled(&self) -> bool {
        self.rate > 1
    }

    /// The error of a fraction `f` (0..=1) estimated over `n` sampled
    /// folios, in the same unit as `f`.
    pub fn fraction_error(&self, f: f64) -> f64 {
        if !self.sampled() {
            return 0.0;
        }
        // Agresti-Coull: a fraction seen as 0 or 1 in the sample still has
        // an error (the population's may be just off it).
        let n = self.folios as f64 + 4.0;
        let p = (f.clamp(0.0, 1.0) * self.folios as f64 + 2.0) / n;
        SIGMAS * (p * (1.0 - p) / n).sqrt()
    }

    /// The rank error of a quantile: the sampled p-quantile lies between
    /// the full population's (p - e) and (p + e) quantiles.
    pub fn rank_error(&self) -> f64 {
        if !self.sampled() {
            return 0.0;
        }
        ((2.0 / ALPHA).ln() / (2.0 * self.folios.max(1) as f64)).sqrt()
    }

    /// One line for a text report.
    pub fn describe(&self) -> String {
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        let gib = |pfns: u64| pfns as f64 * 4096.0 / f64::from(1 << 30);
        format!(
            "per-folio state: budget {:.1} MiB, maps {:.1} MiB (stamps {:.1} MiB); \
             following 1 folio in {} of {:.1} GiB slow memory (coverage {:.2}%, {} folios stamped)",
            mib(self.map_budget_bytes),
            mib(self.map_bytes),
            mib(self.stamp_bytes),
            self.rate,
            gib(self.slow_pfns),
            100.0 * self.coverage,
            self.folios
        )
    }
}

/// The shadow report's sampling: the plan, each model's agreement error
/// and its projected promotions scaled to every slow folio.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SampledShadow {
    #[serde(flatten)]
    pub sampling: Sampling,
    /// Per model (report order): the agreement percentage's error, in
    /// percentage points.
    pub agreement_pct_error: Vec<f64>,
    /// Per model (report order): its projected pages for all folios.
    pub projected_all: Vec<ScaledCount>,
}

/// A count over the followed folios scaled to all of them, with its error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ScaledCount {
    pub estimate: f64,
    /// Three standard errors. Each folio is followed with probability
    /// 1/rate, so a count `x = sum c_i` over the followed folios estimates
    /// `rate * x` with variance `rate * (rate - 1) * sum c_i^2`, taken as
    /// `rate * (rate - 1) * (x + 1) * per_folio` with `per_folio` the mean
    /// count a folio brings (the `+ 1`: a count of 0 in the sample does not
    /// make 0 certain).
    pub error: f64,
}

impl Sampling {
    /// `x`, counted over the followed folios (`per_folio` counts a folio on
    /// average, at least 1), scaled to all of them.
    pub fn scale(&self, x: u64, per_folio: f64) -> ScaledCount {
        let (r, x) = (self.rate.max(1) as f64, x as f64);
        ScaledCount {
            estimate: r * x,
            error: SIGMAS * (r * (r - 1.0) * (x + 1.0) * per_folio.max(1.0)).sqrt(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(rate: u64, folios: u64) -> Sampling {
        Sampling {
            rate,
            folios,
            ..Sampling::default()
        }
    }

    #[test]
    fn counts_scale_by_the_rate_with_their_error() {
        assert_eq!(
            sampled(1, 10).scale(500, 1.0),
            ScaledCount {
                estimate: 500.0,
                error: 0.0
            }
        );
        let s = sampled(8, 10).scale(200, 4.0);
        assert_eq!(s.estimate, 1600.0);
        assert!((s.error - 3.0 * (8.0f64 * 7.0 * 201.0 * 4.0).sqrt()).abs() < 1e-9);
        assert!(sampled(8, 10).scale(0, 1.0).error > 0.0);
    }

    #[test]
    fn following_every_folio_states_no_error() {
        let s = sampled(1, 10);
        assert_eq!((s.fraction_error(0.5), s.rank_error()), (0.0, 0.0));
    }

    #[test]
    fn errors_shrink_with_the_folios_followed() {
        let small = sampled(8, 2048);
        let large = sampled(8, 8 * 2048);
        assert!(small.fraction_error(0.5) > large.fraction_error(0.5));
        // 3 * sqrt(0.25 / 2052) and sqrt(ln(2000) / 4096).
        assert!((small.fraction_error(0.5) - 0.03311).abs() < 1e-4);
        assert!((small.rank_error() - 0.04307).abs() < 1e-4);
        // All agreeing in the sample still leaves room below 100%.
        let all = small.fraction_error(1.0);
        assert!(all > 0.001 && all < 0.003, "{all}");
    }
}
