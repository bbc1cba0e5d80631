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
