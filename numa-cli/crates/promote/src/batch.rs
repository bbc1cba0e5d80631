//! Batch sizing: each move_pages(2) call should take about `--batch-ms`, so
//! that a stop request waits at most that long and the rate limit and the
//! free floor are re-checked often, while calls stay large enough that
//! their fixed cost is amortised.
//!
//! A call of n pages costs about `fixed + n * per_page` (the fixed part is
//! the kernel's per-call work: lru_cache_disable's RCU grace period and
//! per-CPU drain). Both are learnt from the calls by a least-squares fit
//! with exponential forgetting, and the next call takes the pages that fill
//! the budget: `(target - fixed) / per_page`. Until two different sizes
//! have been seen (or when the fit is unusable) the cost per page is the
//! plain average `ns / n`, whose fixed point also fills the budget. The
//! size grows at most [`MAX_GROWTH`]x per call, so one cheap batch (pages
//! already in place) cannot cause a huge one.

/// The first call's size, before any measurement.
pub const INITIAL_PAGES: usize = 64;
/// Never more per call (256 MiB of 4 KiB pages).
pub const MAX_PAGES: usize = 65536;
/// Growth per call at most.
pub const MAX_GROWTH: usize = 4;
/// Weight of older calls in the fit (per call).
const FORGET: f64 = 0.8;

#[derive(Debug, Clone)]
pub struct BatchSizer {
    target_ns: u64,
    /// Exponentially weighted sums of 1, n, n^2, t, n*t.
    w: f64,
    sn: f64,
    snn: f64,
    st: f64,
    snt: f64,
    /// The average cost per page (fallback model), ns.
    ns_per_page: Option<f64>,
    last: usize,
}

impl BatchSizer {
    pub fn new(target_ms: f64) -> Self {
        BatchSizer {
            target_ns: (target_ms.max(0.01) * 1e6) as u64,
            w: 0.0,
            sn: 0.0,
            snn: 0.0,
            st: 0.0,
            snt: 0.0,
            ns_per_page: None,
            last: INITIAL_PAGES / 2,
        }
    }

    /// `(fixed ns per call, ns per page)` from the fit, when it is usable:
    /// sizes varied enough, a positive cost per page, a fixed part no
    /// larger than the average call.
    pub fn model(&self) -> Option<(f64, f64)> {
        if self.w <= 0.0 {
            return None;
        }
        let var = self.w * self.snn - self.sn * self.sn;
        // Relative spread of the sizes: below ~1% the slope is noise.
        if var <= 1e-4 * self.w * self.snn {
            return None;
        }
        let c = (self.w * self.snt - self.sn * self.st) / var;
        let f = (self.st - c * self.sn) / self.w;
        let mean_t = self.st / self.w;
        (c.is_finite() && c > 0.0 && f.is_finite() && f <= mean_t).then_some((f.max(0.0), c))
    }

    /// Pages for the next call.
    pub fn pages(&self) -> usize {
        let Some(avg) = self.ns_per_page else {
            return INITIAL_PAGES;
        };
        let target = self.target_ns as f64;
        let fit = match self.model() {
            // Half the budget at least goes to pages, even when the fixed
            // cost alone is near the budget.
            Some((f, c)) => (target - f).max(target / 2.0) / c,
            None => target / avg.max(1.0),
        };
        (fit.round() as usize)
            .clamp(1, MAX_PAGES)
            .min(self.last.saturating_mul(MAX_GROWTH).max(1))
    }

    /// A call of `pages` took `ns`.
    pub fn observe(&mut self, pages: usize, ns: u64) {
        if pages == 0 {
            return;
        }
        let (n, t) = (pages as f64, ns as f64);
        self.w = FORGET * self.w + 1.0;
        self.sn = FORGET * self.sn + n;
        self.snn = FORGET * self.snn + n * n;
        self.st = FORGET * self.st + t;
        self.snt = FORGET * self.snt + n * t;
        let c = t / n;
        self.ns_per_page = Some(match self.ns_per_page {
            None => c,
            Some(old) => 0.7 * old + 0.3 * c,
        });
        self.last = pages;
    }

    /// The learnt cost per page: the fit's slope, else the average.
    pub fn ns_per_page(&self) -> Option<f64> {
        self.model().map(|(_, c)| c).or(self.ns_per_page)
    }

    /// The learnt fixed cost per call, when the fit is usable.
    pub fn fixed_ns(&self) -> Option<f64> {
        self.model().map(|(f, _)| f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_small_then_fits_the_target() {
        let mut s = BatchSizer::new(20.0);
        assert_eq!(s.pages(), INITIAL_PAGES);
        // 10 us per page: 2000 pages fit 20 ms, growth caps at 4x.
        s.observe(64, 640_000);
        assert_eq!(s.pages(), 256);
        let mut n = s.pages();
        for _ in 0..10 {
            s.observe(n, n as u64 * 10_000);
            n = s.pages();
        }
        assert_eq!(n, 2000);
        assert_eq!(s.fixed_ns().map(|f| f.round()), Some(0.0));
    }

    #[test]
    fn a_fixed_cost_per_call_is_learnt_and_the_budget_filled() {
        // 5 ms per call plus 10 us per page: 1500 pages make 20 ms.
        let cost = |n: usize| 5_000_000 + n as u64 * 10_000;
        let mut s = BatchSizer::new(20.0);
        let mut n = s.pages();
        let mut sizes = Vec::new();
        for _ in 0..12 {
            s.observe(n, cost(n));
            n = s.pages();
            sizes.push(n);
        }
        assert_eq!(n, 1500, "{sizes:?}");
        let (f, c) = s.model().expect("fit");
        assert!((f - 5e6).abs() < 1e3 && (c - 1e4).abs() < 1.0, "{f} {c}");
        // Within three calls: 64, then the average's 227, then 4x, then the fit.
        assert_eq!(&sizes[..3], &[227, 908, 1500], "{sizes:?}");
        // A fixed cost above the budget: half the budget goes to pages.
        let mut s = BatchSizer::new(20.0);
        for n in [100, 400, 1000, 1000] {
            s.observe(n, 30_000_000 + n as u64 * 10_000);
        }
        assert_eq!(s.pages(), 1000);
    }

    #[test]
    fn shrinks_at_once_when_calls_get_slow() {
        let mut s = BatchSizer::new(20.0);
        s.observe(1000, 10_000_000);
        // Now 1 ms per page: the size follows at once.
        s.observe(1000, 1_000_000_000);
        assert!(s.pages() < 100, "{}", s.pages());
        // Extremely slow: still at least one page.
        s.observe(1, 10_000_000_000);
        s.observe(1, 10_000_000_000);
        assert_eq!(s.pages(), 1);
    }

    #[test]
    fn capped_and_zero_safe() {
        let mut s = BatchSizer::new(20.0);
        s.observe(0, 5);
        assert_eq!(s.pages(), INITIAL_PAGES);
        for _ in 0..40 {
            let n = s.pages();
            s.observe(n, 0);
        }
        assert_eq!(s.pages(), MAX_PAGES);
    }
}
