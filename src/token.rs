//! Tokens. A lock token is `<client>-<16 hex digits>`: the acquiring
//! client's id (16 hex digits, `LockClient::client_id`)
//! and 64 random bits, so an operator can tell which client holds a lock
//! (`relaylock status`, `inspect`) and an unlock can tell that
//! client at once, at no Redis call and three bytes fewer than a UUID.
//! Nonces (a subscription's PING, an unlock's own id) are random UUIDs.
//!
//! The random bits come from a per-thread generator that the operating
//! system seeds once per thread, so an acquisition costs no system call
//! (`Uuid::new_v4` asks the OS for every token). The generator is
//! SplitMix64: 2^64 outputs per thread before it repeats, each thread
//! starting at a random point. Tokens only have to be unique per
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

/// A lock token's length in bytes: a client id, `-`, 16 hex digits.
pub(crate) const LEN: usize = 33;

/// A client id's length: 16 hex digits.
pub(crate) const CLIENT_LEN: usize = 16;

/// A new nonce: a random UUID (version 4), hyphenated, lower case.
pub(crate) fn new() -> Str {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&next().to_le_bytes());
    bytes[8..].copy_from_slice(&next().to_le_bytes());
    let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid();
    let mut encoded = uuid::Uuid::encode_buffer();
    Str::from(uuid.hyphenated().encode_lower(&mut encoded).to_owned())
}

/// Append a new lock token of `client` to `buf`: `<client>-<16 hex>`.
pub(crate) fn push(buf: &mut String, client: &str) {
    use std::fmt::Write as _;
    buf.push_str(client);
    let _ = write!(buf, "-{:016x}", next());
}

/// The id of the client that made lock token `token`; `None` for a token
/// of another form (a UUID, from a relaylock before client ids in tokens).
pub fn client_of(token: &str) -> Option<&str> {
    let (client, random) = token.split_once('-')?;
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    (client.len() == CLIENT_LEN && random.len() == 16 && hex(client) && hex(random))
        .then_some(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_their_client_and_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let mut t = String::new();
            push(&mut t, "0123456789abcdef");
            assert_eq!(t.len(), LEN);
            assert_eq!(client_of(&t), Some("0123456789abcdef"));
            assert!(seen.insert(t));
        }
        // Another thread starts elsewhere.
        let other = std::thread::spawn(|| {
            let mut t = String::new();
            push(&mut t, "0123456789abcdef");
            t
        })
        .join()
        .unwrap();
        assert!(!seen.contains(&other));
        let nonce = new();
        assert_eq!(uuid::Uuid::parse_str(&nonce).unwrap().get_version_num(), 4);
        assert_eq!(client_of(&nonce), None);
        assert_eq!(client_of("0123456789abcdef-xyz"), None);
    }
}
