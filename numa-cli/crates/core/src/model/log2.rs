//! Log2 histograms with exactly the in-kernel bucket layout
//! (`numa_ebpf_common::log2_bucket`): bucket `b` counts `2^(b-1) < v <= 2^b`.
use numa_ebpf_common::HIST_BUCKETS;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log2Hist {
    pub buckets: [u64; HIST_BUCKETS],
    pub sum: u64,
    pub count: u64,
}

impl Default for Log2Hist {
    fn default() -> Self {
        Log2Hist {
            buckets: [0; HIST_BUCKETS],
            sum: 0,
            count: 0,
        }
    }
}

/// [`numa_ebpf_common::log2_bucket`] with a count-leading-zeros instruction (the BPF side
/// has none, hence its loop): `ceil(log2 v)`, at most the last bucket.
#[inline]
pub fn bucket(v: u64) -> usize {
    if v <= 1 {
        0
    } else {
        ((64 - (v - 1).leading_zeros()) as usize).min(HIST_BUCKETS - 1)
    }
}

/// Upper bound of bucket `b`, in the recorded unit.
pub fn upper_bound(b: usize) -> u64 {
    1u64 << b.min(63)
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct BucketCount {
    /// Upper bound (inclusive) in the output unit.
    pub le: f64,
    pub count: u64,
}

impl Log2Hist {
    #[inline]
    pub fn add(&mut self, v: u64) {
        self.add_n(v, 1);
    }

    /// `n` values of `v` (a sampled value standing for `n`).
    #[inline]
    pub fn add_n(&mut self, v: u64, n: u64) {
        self.buckets[bucket(v)] += n;
        self.sum = self.sum.saturating_add(v.saturating_mul(n));
        self.count += n;
    }

    pub fn merge(&mut self, other: &Log2Hist) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        self.sum = self.sum.saturating_add(other.sum);
        self.count += other.count;
    }

    /// Non-empty buckets with their upper bound divided by `unit`
    /// (1e6 to print ns as ms), from the first to the last non-zero bucket.
    pub fn rows(&self, unit: f64) -> Vec<BucketCount> {
        let first = self.buckets.iter().position(|c| *c > 0);
        let last = self.buckets.iter().rposition(|c| *c > 0);
        match (first, last) {
            (Some(f), Some(l)) => (f..=l)
                .map(|b| BucketCount {
                    le: upper_bound(b) as f64 / unit,
                    count: self.buckets[b],
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Value at quantile `q` (0..=1), as the upper bound of its bucket.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(upper_bound(b));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use numa_ebpf_common::log2_bucket;

    use super::*;

    #[test]
    fn bounds_and_rows() {
        let mut h = Log2Hist::default();
        for v in [0, 1, 2, 3, 4, 1000] {
            h.add(v);
        }
        // 0,1 -> b0; 2 -> b1; 3,4 -> b2; 1000 -> b10 (512 < 1000 <= 1024)
        assert_eq!(h.buckets[0], 2);
        assert_eq!(h.buckets[1], 1);
        assert_eq!(h.buckets[2], 2);
        assert_eq!(h.buckets[10], 1);
        let rows = h.rows(1.0);
        assert_eq!(rows.first().map(|r| r.le), Some(1.0));
        assert_eq!(rows.last().map(|r| (r.le, r.count)), Some((1024.0, 1)));
        assert_eq!(rows.len(), 11);
        assert_eq!(h.count, 6);
        assert_eq!(h.sum, 1010);
    }

    #[test]
    fn fast_bucket_is_the_kernel_bucket() {
        let mut vs: Vec<u64> = (0..5000).collect();
        for b in 0..64 {
            let p = 1u64 << b;
            vs.extend([p - 1, p, p + 1, p.wrapping_mul(3) / 2]);
        }
        vs.extend([u64::MAX, u64::MAX - 1, (1 << 63) + 1]);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            vs.push(x >> (x % 64));
        }
        for v in vs {
            assert_eq!(bucket(v), log2_bucket(v), "v = {v}");
        }
    }

    #[test]
    fn quantiles_are_bucket_upper_bounds() {
        let mut h = Log2Hist::default();
        for v in 1..=100u64 {
            h.add(v);
        }
        assert_eq!(h.quantile(0.5), Some(64));
        assert_eq!(h.quantile(1.0), Some(128));
        assert_eq!(Log2Hist::default().quantile(0.5), None);
    }
}
