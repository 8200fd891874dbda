//! Lock tokens: random version-4 UUIDs, drawn from a per-thread generator
//! that the operating system seeds once per thread, so an acquisition costs
//! no system call (`Uuid::new_v4` asks the OS for every token).
//!
//! The generator is SplitMix64: 2^64 outputs per thread before it repeats,
//! each thread starting at a random point. Tokens only have to be unique per
//! acquisition (they are not secrets: anyone who can read the lock's value
//! can read its token).

use std::cell::Cell;

use fred::bytes_utils::Str;

thread_local! {
    static STATE: Cell<u64> = Cell::new(uuid::Uuid::new_v4().as_u64_pair().0);
}

fn next() -> u64 {
    STATE.with(|s| {
        let x = s.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        s.set(x);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    })
}

/// A token's length in bytes.
pub(crate) const LEN: usize = uuid::fmt::Hyphenated::LENGTH;

/// A new token: a random UUID (version 4), hyphenated, lower case.
pub(crate) fn new() -> Str {
    let mut token = String::with_capacity(LEN);
    push(&mut token);
    Str::from(token)
}

/// Append a new token to `buf` (see [`new`]).
pub(crate) fn push(buf: &mut String) {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&next().to_le_bytes());
    bytes[8..].copy_from_slice(&next().to_le_bytes());
    let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid();
    let mut encoded = uuid::Uuid::encode_buffer();
    buf.push_str(uuid.hyphenated().encode_lower(&mut encoded));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_v4_uuids_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let t = new();
            let u = uuid::Uuid::parse_str(&t).unwrap();
            assert_eq!(u.get_version_num(), 4);
            assert_eq!(t.len(), 36);
            assert!(seen.insert(t));
        }
        // Another thread starts elsewhere.
        let other = std::thread::spawn(new).join().unwrap();
        assert!(!seen.contains(&other));
    }
}
