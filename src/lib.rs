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

mod acquire;
mod client;
mod error;
mod guard;
pub mod metrics;
mod options;
mod registry;
pub mod scripts;
mod subscriber;
mod watchdog;

pub use client::{LockClient, LockClientBuilder};
pub use error::{Error, Result};
pub use guard::LockGuard;
pub use options::{LockOptions, WaitStrategy, MAX_KEY_LEN, MAX_LEASE, MAX_PREFIX_LEN};
