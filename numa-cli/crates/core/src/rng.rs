//! xorshift64*: a deterministic, fast generator, good enough for access
//! patterns (`workload`) and for random test and benchmark streams.

pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0, which xorshift never leaves, becomes 1).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The splitmix64 finalizer: distinct inputs give unrelated outputs (seeds
/// for streams, uniform hashes of keys).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
