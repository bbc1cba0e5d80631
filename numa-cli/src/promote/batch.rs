//! Batch sizing: each move_pages(2) call should take about `--batch-ms`, so
//! that a stop request waits at most that long and the rate limit and the
//! free floor are re-checked often, while calls stay large enough that
//! their fixed cost is amortised. The cost per page is learnt from the
//! calls (an exponential moving average); the size grows at most 2x per
//! call so one cheap batch (pages already in place) cannot cause a huge one.

/// The first call's size, before any measurement.
pub const INITIAL_PAGES: usize = 64;
/// Never more per call (256 MiB of 4 KiB pages).
pub const MAX_PAGES: usize = 65536;

#[derive(Debug, Clone)]
pub struct BatchSizer {
    target_ns: u64,
    ns_per_page: Option<f64>,
    last: usize,
}

impl BatchSizer {
    pub fn new(target_ms: f64) -> Self {
        BatchSizer {
            target_ns: (target_ms.max(0.01) * 1e6) as u64,
            ns_per_page: None,
            last: INITIAL_PAGES / 2,
        }
    }

    /// Pages for the next call.
    pub fn pages(&self) -> usize {
        match self.ns_per_page {
            None => INITIAL_PAGES,
            Some(c) => {
                let fit = (self.target_ns as f64 / c.max(1.0)) as usize;
                fit.clamp(1, MAX_PAGES)
                    .min(self.last.saturating_mul(2).max(1))
            }
        }
    }

    /// A call of `pages` took `ns`.
    pub fn observe(&mut self, pages: usize, ns: u64) {
        if pages == 0 {
            return;
        }
        let c = ns as f64 / pages as f64;
        self.ns_per_page = Some(match self.ns_per_page {
            None => c,
            Some(old) => 0.7 * old + 0.3 * c,
        });
        self.last = pages;
    }

    pub fn ns_per_page(&self) -> Option<f64> {
        self.ns_per_page
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_small_then_fits_the_target() {
        let mut s = BatchSizer::new(20.0);
        assert_eq!(s.pages(), INITIAL_PAGES);
        // 10 us per page: 2000 pages fit 20 ms, growth caps at 2x.
        s.observe(64, 640_000);
        assert_eq!(s.pages(), 128);
        let mut n = s.pages();
        for _ in 0..10 {
            s.observe(n, n as u64 * 10_000);
            n = s.pages();
        }
        assert_eq!(n, 2000);
    }

    #[test]
    fn shrinks_at_once_when_calls_get_slow() {
        let mut s = BatchSizer::new(20.0);
        s.observe(1000, 10_000_000);
        // Now 1 ms per page: the average moves towards it, the size follows.
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
