//! A token bucket in bytes: the promoter's `--rate-limit`. Pure: time is
//! an argument (ns of CLOCK_MONOTONIC), so tests drive it.

/// Refills at `rate` bytes/s up to `burst` bytes; `rate == 0` is unlimited.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: u64,
    burst: u64,
    tokens: f64,
    last_ns: Option<u64>,
}

impl TokenBucket {
    /// Starts full. `burst` is at least one page, else nothing could ever pass.
    pub fn new(rate_bytes_per_s: u64, burst_bytes: u64) -> Self {
        let burst = burst_bytes.max(4096);
        TokenBucket {
            rate: rate_bytes_per_s,
            burst,
            tokens: burst as f64,
            last_ns: None,
        }
    }

    /// The bucket for a rate: a burst of 100 ms of it (one batch at the
    /// default `--batch-ms 20` never needs more).
    pub fn for_rate(rate_bytes_per_s: u64) -> Self {
        Self::new(rate_bytes_per_s, rate_bytes_per_s / 10)
    }

    pub fn unlimited(&self) -> bool {
        self.rate == 0
    }

    fn refill(&mut self, now_ns: u64) {
        if let Some(last) = self.last_ns {
            let dt = now_ns.saturating_sub(last) as f64 / 1e9;
            self.tokens = (self.tokens + dt * self.rate as f64).min(self.burst as f64);
        }
        self.last_ns = Some(now_ns.max(self.last_ns.unwrap_or(0)));
    }

    /// Bytes that may pass now (`u64::MAX` when unlimited).
    pub fn available(&mut self, now_ns: u64) -> u64 {
        if self.unlimited() {
            return u64::MAX;
        }
        self.refill(now_ns);
        self.tokens.max(0.0) as u64
    }

    /// Spends `bytes`. Callers size batches to what is available; only a
    /// folio larger than the burst, taken when the bucket is full, spends
    /// more, and the debt delays what follows, so the long-run rate holds.
    pub fn take(&mut self, now_ns: u64, bytes: u64) {
        if self.unlimited() {
            return;
        }
        self.refill(now_ns);
        self.tokens -= bytes as f64;
    }

    /// Nanoseconds until `bytes` (capped at the burst) are available.
    pub fn wait_ns(&mut self, now_ns: u64, bytes: u64) -> u64 {
        if self.unlimited() {
            return 0;
        }
        self.refill(now_ns);
        let want = bytes.min(self.burst) as f64;
        if self.tokens >= want {
            0
        } else {
            ((want - self.tokens) / self.rate as f64 * 1e9).ceil() as u64
        }
    }
}

/// The least a `--rate-limit` may be (one page per second): below it, a
/// rate would round to nothing.
pub const MIN_RATE: u64 = 4096;
/// The most a `--rate-limit` may be (above any memory bandwidth).
pub const MAX_RATE: u64 = 1 << 40;

/// Parses `256MiB/s`, `1GB/s`, `500M`, `4096` (bytes/s), `0` or
/// `unlimited` (0). The `/s` is optional; K/M/G/T are binary, KB/MB/GB/TB
/// decimal. Any number that parses: see [`parse_rate_limit`] for the range.
pub fn parse_rate(s: &str) -> Option<u64> {
    parse_rate_f64(s).map(|v| v as u64)
}

fn parse_rate_f64(s: &str) -> Option<f64> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("none") {
        return Some(0.0);
    }
    parse_bytes_f64(t.strip_suffix("/s").unwrap_or(t))
}

/// `--rate-limit`: 0 (unlimited), or [`MIN_RATE`] to [`MAX_RATE`] bytes/s.
pub fn parse_rate_limit(s: &str) -> Result<u64, String> {
    let range = "use 4KiB/s to 1TiB/s (like 256MiB/s), or 0 for unlimited";
    match parse_rate_f64(s) {
        Some(0.0) => Ok(0),
        Some(v) if (MIN_RATE as f64..=MAX_RATE as f64).contains(&v) => Ok(v as u64),
        Some(v) => Err(format!("{v} bytes/s is out of range: {range}")),
        None => Err(format!("not a rate: {range}")),
    }
}

/// `200MiB`, `1G`, `64KB`, `4096`.
pub fn parse_bytes(s: &str) -> Option<u64> {
    parse_bytes_f64(s).map(|v| v as u64)
}

/// [`parse_bytes`] before rounding to whole bytes.
pub fn parse_bytes_f64(s: &str) -> Option<f64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().ok()?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "p" | "pib" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "pb" => 1e15,
        _ => return None,
    };
    let bytes = v * mult;
    (bytes.is_finite() && bytes >= 0.0).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn starts_full_and_refills_at_rate() {
        let mut b = TokenBucket::new(1 << 20, 1 << 18);
        assert_eq!(b.available(0), 1 << 18);
        b.take(0, 1 << 18);
        assert_eq!(b.available(0), 0);
        // 100 ms at 1 MiB/s = 104857 bytes.
        assert_eq!(b.available(100 * MS), 104_857);
        // Never above the burst.
        assert_eq!(b.available(10_000 * MS), 1 << 18);
    }

    #[test]
    fn wait_is_the_time_to_refill() {
        let mut b = TokenBucket::new(4096 * 1000, 4096);
        b.take(0, 4096);
        // 1000 pages/s: one page in 1 ms.
        assert_eq!(b.wait_ns(0, 4096), MS);
        assert_eq!(b.wait_ns(MS, 4096), 0);
        // Asking for more than the burst waits for a full burst only.
        assert_eq!(b.wait_ns(MS, 1 << 30), 0);
    }

    #[test]
    fn long_run_stays_under_rate_plus_burst() {
        let rate = 10 << 20;
        let mut b = TokenBucket::for_rate(rate);
        let mut moved = 0u64;
        let mut t = 0u64;
        while t < 5_000 * MS {
            let n = b.available(t).min(64 * 4096) / 4096 * 4096;
            b.take(t, n);
            moved += n;
            t += MS;
        }
        let limit = rate * 5 + rate / 10;
        assert!(moved <= limit, "{moved} > {limit}");
        assert!(moved >= rate * 5 * 95 / 100, "{moved} too low");
    }

    #[test]
    fn unlimited_and_clock_going_back() {
        let mut b = TokenBucket::for_rate(0);
        assert_eq!(b.available(0), u64::MAX);
        assert_eq!(b.wait_ns(0, 1 << 40), 0);
        let mut b = TokenBucket::new(1000, 4096);
        b.take(10 * MS, 4096);
        assert_eq!(b.available(5 * MS), 0);
    }

    #[test]
    fn rates_parse() {
        assert_eq!(parse_rate("256MiB/s"), Some(256 << 20));
        assert_eq!(parse_rate("1GB/s"), Some(1_000_000_000));
        assert_eq!(parse_rate("512k"), Some(512 << 10));
        assert_eq!(parse_rate("0"), Some(0));
        assert_eq!(parse_rate("unlimited"), Some(0));
        assert_eq!(parse_rate("1.5G"), Some(3 << 29));
        assert_eq!(parse_rate("fast"), None);
        assert_eq!(parse_rate("-1M"), None);
        assert_eq!(parse_rate("1TiB/s"), Some(1 << 40));
    }

    #[test]
    fn rate_limits_are_zero_or_in_range() {
        assert_eq!(parse_rate_limit("256MiB/s"), Ok(256 << 20));
        assert_eq!(parse_rate_limit("0"), Ok(0));
        assert_eq!(parse_rate_limit("unlimited"), Ok(0));
        assert_eq!(parse_rate_limit("4KiB/s"), Ok(4096));
        assert_eq!(parse_rate_limit("1TiB/s"), Ok(1 << 40));
        for bad in [
            "0.5", "4095", "1.1TiB/s", "1e10", "NaN", "inf", "-1", "fast",
        ] {
            let e = parse_rate_limit(bad).expect_err(bad);
            assert!(e.contains("4KiB/s to 1TiB/s"), "{bad}: {e}");
        }
    }
}
