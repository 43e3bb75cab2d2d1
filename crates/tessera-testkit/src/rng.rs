//! A tiny deterministic random number generator (SplitMix64).
//!
//! The harness must produce the same data for a case on every run and every
//! machine, so that a failure reproduces; it must also not depend on the
//! order cases run in. Each case seeds its own generator from a hash of its
//! name ([`seed_from_name`]) and each leaf from that seed and its id.
//! SplitMix64 is small, fast and passes BigCrush, which is plenty for test data.

/// SplitMix64 (Steele, Lea and Flood, 2014).
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator started at `seed`.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform f32 in `[lo, hi)` (rounded to f32, so it may equal `hi` only
    /// through rounding of a range whose width is not representable).
    pub fn uniform_f32(&mut self, lo: f32, hi: f32) -> f32 {
        let (lo, hi) = (f64::from(lo), f64::from(hi));
        (lo + (hi - lo) * self.next_f64()) as f32
    }

    /// Uniform integer in `0..n` (0 when `n == 0`). The bias of the modulo is
    /// below 2^-40 for the small `n` tests use.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// Uniform integer in `lo..=hi` (`lo` if `hi < lo`).
    pub fn int_in(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = (hi as i128 - lo as i128 + 1) as u128;
        let r = u128::from(self.next_u64()) % span;
        (lo as i128 + r as i128) as i64
    }

    /// Fisher-Yates shuffle of `v`.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// A 64-bit seed from a name (FNV-1a), so a case's data depends only on its name.
pub fn seed_from_name(name: &str) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let x = a.uniform_f32(-1.0, 1.0);
            b.uniform_f32(-1.0, 1.0);
            assert!((-1.0..=1.0).contains(&x));
            let i = a.int_in(-3, 5);
            b.int_in(-3, 5);
            assert!((-3..=5).contains(&i));
        }
        assert_ne!(seed_from_name("ADD(a)"), seed_from_name("ADD(b)"));
    }

    #[test]
    fn uniform_mean_and_shuffle_is_a_permutation() {
        let mut r = Rng::new(7);
        let n = 20_000;
        let mean: f64 = (0..n).map(|_| r.next_f64()).sum::<f64>() / n as f64;
        // Standard error of the mean of U(0,1) over 20k draws is ~0.002.
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
        let mut v: Vec<usize> = (0..50).collect();
        r.shuffle(&mut v);
        let mut s = v.clone();
        s.sort_unstable();
        assert_eq!(s, (0..50).collect::<Vec<_>>());
        assert_ne!(v, s, "a shuffle of 50 elements left them in order");
    }
}
