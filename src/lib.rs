//! # relaylock
//!
//! Distributed locks on Redis for high-contention async Rust services.
//!
//! * **Correct**: one atomic `SET NX PX` per acquisition (in a script, so a
//!   replay after a lost reply is recognised), release only by the token
//!   holder, and a fencing token per acquisition that strictly increases per
//!   key, also across a Redis restart.
//! * **Cheap for Redis**: waiters do not poll. They park on an in-process
//!   registry; one subscriber connection per client hears the release and
//!   wakes ONE local waiter, which retries. About one acquire script call per
//!   acquisition, however many tasks wait.
//! * **Never hangs**: pub/sub is at-most-once, so every wait is also bounded by
//!   the holder's remaining lease, and a subscriber reconnect wakes every
//!   waiter to re-check.
//! * **A holder knows when its lock is lost**: a lock taken without an
//!   explicit lease is renewed by one watchdog task per client (one script
//!   call per round for every due lock), and
//!   [`LockGuard::lost`] fires when a renewal finds the key gone or replaced,
//!   or when Redis stays unreachable until the lease would run out.
//!   [`LockClient::with_lock`] stops the critical section when it does.
//! * **A semaphore on the same machinery**: [`LockClient::semaphore`] gives
//!   a counting [`Semaphore`] (at most N holders across every process),
//!   whose permits expire by the Redis clock, are handed to waiting
//!   processes in FIFO order, and wake one waiter per freed permit; and
//!   [`LockClient::rw_lock`] a writer-preferring [`RwLock`] built on it.
//! * **Observable**: wait time, attempts, timeouts, lost locks through the
//!   [`metrics`](https://docs.rs/metrics) facade; see [`metrics`](mod@crate::metrics) for the names.
//!
//! ```no_run
//! use std::time::Duration;
//! use relaylock::{LockClient, LockOptions};
//!
//! # async fn demo() -> relaylock::Result<()> {
//! let client = LockClient::connect("redis://127.0.0.1:6379").await?;
//! let guard = client
//!     .lock_with("orders:42", LockOptions::default().wait(Duration::from_secs(2)))
//!     .await?;
//! println!("fencing token {}", guard.fencing_token());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! The algorithm and its safety argument are in `docs/design.md`.

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod builder;
mod calls;
mod client;
mod conn_watch;
mod election;
mod error;
pub mod eviction;
mod guard;
mod hold_id;
mod holds;
mod identity;
mod inner;
pub mod inspect;
pub mod metrics;
mod multi;
mod observers;
mod options;
mod registry;
mod release;
mod replicas;
mod rwlock;
mod scripts;
mod semaphore;
mod shutdown;
mod state;
mod subscriber;
mod supervise;
mod token;
mod unlock;
mod watchdog;

/// The Redis client relaylock is built on, re-exported so that
/// [`Error::Redis`]'s `fred::error::Error`, a
/// [`fred_client`](LockClientBuilder::fred_client) or a
/// [`fred_config`](LockClientBuilder::fred_config) need no separate
/// dependency (and no version to keep in step).
pub use fred;

pub use builder::{reconnect_policy, LockClientBuilder};
pub use client::LockClient;
pub use election::{Election, Leadership, MAX_LEADER_VALUE};
pub use error::{Error, Result};
pub use eviction::OnEvictingServer;
pub use guard::LockGuard;
pub use multi::{MultiGuard, MAX_KEYS};
pub use observers::Leader;
pub use options::{
    LockOptions, SemaphoreOptions, WaitStrategy, MAX_KEY_LEN, MAX_LEASE, MAX_PREFIX_LEN,
};
pub use rwlock::{ReadGuard, RwLock, WriteGuard};
pub use scripts::PROTOCOL;
pub use semaphore::{Permit, Semaphore};

// Every Rust snippet of the README and the docs is compiled (and the ones
// that need no server run) as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/usage.md")]
struct UsageDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/dashboards/README.md")]
struct DashboardsDoctests;

/// The Lua scripts and their constants, for the integration tests that
/// replay or forge script calls. Not part of the API: the protocol is
/// documented in docs/design.md, and its scripts in `src/scripts/` (one
/// `.lua` file each, its contract on its constant in `src/scripts/mod.rs`).
#[doc(hidden)]
pub mod __scripts {
    pub use crate::scripts::{
        ACQUIRE, ACQUIRE_ALL, HANDOFF_GRACE_MS, LEAVE, LOCK_RING_SLOTS, QUEUE_TIMES, RELEASE,
        RELEASE_ALL, RELEASE_RING, RENEW, RENEW_BATCH, RING_CHARS, RW_WRITE, SEM_ACQUIRE,
        SEM_LEAVE, SEM_PEEK, SEM_RELEASE, SEM_RENEW, SIDE_RETENTION_MS,
    };
}

/// Entry points for the fuzz targets in `fuzz/` and their stable-toolchain
/// replay in the tests. Not part of the API.
#[doc(hidden)]
pub mod __fuzz {
    use std::time::{Duration, Instant};

    use crate::options::{validate_key, validate_lease, validate_prefix, validate_url_scheme};
    use crate::registry::Announcement;
    use crate::scripts::Names;
    use crate::state::estimate::expiry_after;
    use crate::{MAX_KEY_LEN, MAX_LEASE, MAX_PREFIX_LEN};

    /// Everything relaylock reads from untrusted input, fed from one byte
    /// string: argument checks (key, lease, prefix, URL), fred's URL parsing,
    /// the Redis names built from a key, release-channel messages and the
    /// acquire script's reply. Panics only when an invariant breaks.
    pub fn inputs(data: &[u8]) {
        let (head, rest) = data.split_at(data.len().min(16));
        let mut word = [0u8; 8];
        word[..head.len().min(8)].copy_from_slice(&head[..head.len().min(8)]);
        let ms = u64::from_le_bytes(word);
        let mut word = [0u8; 8];
        let tail = head.get(8..).unwrap_or(&[]);
        word[..tail.len()].copy_from_slice(tail);
        let nanos = u64::from_le_bytes(word);

        // Leases, in whole ms and in nanoseconds.
        let lease = Duration::from_millis(ms);
        match validate_lease(lease) {
            Ok(v) => assert!(v == ms && lease <= MAX_LEASE && ms >= 1),
            Err(_) => assert!(ms == 0 || lease > MAX_LEASE),
        }
        let fine = Duration::from_nanos(nanos);
        assert_eq!(
            validate_lease(fine).is_ok(),
            fine >= Duration::from_millis(1) && fine <= MAX_LEASE
        );

        let text = String::from_utf8_lossy(rest);
        let mut fields = text.split('\n');
        let key = fields.next().unwrap_or_default();
        let url = fields.next().unwrap_or_default();
        let prefix = fields.next().unwrap_or_default();
        let message = fields.next().unwrap_or_default();

        assert_eq!(
            validate_key(key).is_ok(),
            !key.is_empty() && key.len() <= MAX_KEY_LEN
        );
        if validate_url_scheme(url).is_ok() {
            let _ = fred::types::config::Config::from_url(url);
        }
        if validate_prefix(prefix).is_ok() {
            assert!(prefix.len() <= MAX_PREFIX_LEN && !prefix.contains(['{', '}']));
            let names = Names::new(prefix, key);
            assert!(names.lock.starts_with(prefix));
            assert_eq!(Names::lock_of_channel(&names.channel), names.lock);
            assert!(names.void("t").starts_with(&*names.lock));
        }

        let now = Instant::now();
        match Announcement::parse(message) {
            Announcement::Taken(lease) => {
                assert!(expiry_after(now, lease) <= now + MAX_LEASE);
            }
            Announcement::ReservedFor(client) | Announcement::Kept(client) => {
                assert!(!client.is_empty())
            }
            Announcement::Free => {}
        }
        let reply: Vec<i64> = rest
            .chunks(8)
            .take(3)
            .map(|c| {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                i64::from_le_bytes(w)
            })
            .collect();
        if let Ok(crate::calls::AcquireReply::Acquired(fence, _)) =
            crate::calls::acquire_reply(&reply, Duration::from_secs(30))
        {
            assert!(fence > 0);
        }
    }
}
