//! Tokens. A lock token is `<client>-<16 hex digits>`: the acquiring
//! client's id (16 hex digits, `LockClient::client_id`), then 64 bits: the
//! milliseconds since 2020 by the client's clock when the call began (42
//! bits) and a per-process sequence number (22 bits). So an operator can
//! tell which client holds a lock and since when (`relaylock status`,
//! `inspect`: protocol 4's fast path keeps nothing else in Redis), and an
//! unlock can tell that client at once, at no Redis call and three bytes
//! fewer than a UUID. Nonces (a subscription's PING, an unlock's own id)
//! are random UUIDs.
//!
//! Tokens only have to be unique per acquisition (they are not secrets:
//! anyone who can read the lock's value can read its token): the client id
//! is random per client, and one process would have to make 4,194,304
//! tokens in one millisecond for the sequence to repeat within it.
//!
//! The nonces' random bits come from a per-thread generator that the
//! operating system seeds once per thread (SplitMix64), so a nonce costs no
//! system call.

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

/// 2020-01-01 in ms since the Unix epoch: where a token's clock starts.
const TOKEN_EPOCH_MS: u64 = 1_577_836_800_000;

/// The per-process sequence in the low 22 bits of a token.
static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Append a new lock token of `client` to `buf`: `<client>-<16 hex>`.
pub(crate) fn push(buf: &mut String, client: &str) {
    use std::fmt::Write as _;
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
        .saturating_sub(TOKEN_EPOCH_MS);
    let seq = SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & 0x3F_FFFF;
    buf.push_str(client);
    let _ = write!(buf, "-{:016x}", (ms << 22) | seq);
}

/// When a lock token of this form was made, by its client's clock (the
/// start of the call that took it); `None` for a token of another form.
pub fn made_at(token: &str) -> Option<std::time::SystemTime> {
    client_of(token)?;
    let (_, bits) = token.split_once('-')?;
    let ms = u64::from_str_radix(bits, 16).ok()? >> 22;
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_millis(TOKEN_EPOCH_MS + ms))
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
