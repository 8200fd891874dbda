//! The run's random source: the seed (fresh, or replayed from
//! `RELAYLOCK_STRESS_SEED`), the generator, and the load's length.

use std::time::Duration;

/// The load, in two halves around `QUIET`: `RELAYLOCK_STRESS_SECS` (default
/// 5 s) in total.
pub(super) fn load_duration() -> Duration {
    std::env::var("RELAYLOCK_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(Duration::from_secs(5), Duration::from_secs_f64)
}

/// The base seed: `RELAYLOCK_STRESS_SEED`, or fresh from the clock.
pub(super) fn base_seed() -> u64 {
    if let Ok(s) = std::env::var("RELAYLOCK_STRESS_SEED") {
        let s = s.trim();
        let parsed = match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        };
        return parsed.unwrap_or_else(|e| panic!("RELAYLOCK_STRESS_SEED={s}: {e}"));
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    nanos ^ (u64::from(std::process::id()) << 32)
}

/// xorshift64, seeded through splitmix64 (never zero).
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `0..n`.
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(super) fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}
