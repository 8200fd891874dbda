//! Lock calls cancelled at any point leave nothing held and nothing queued.
//!
//! The stress runs ([`relaylock_testkit::stress`]): 3 clients x 8 tasks on
//! one key drop lock calls and releases at random points, plainly, while the
//! pub/sub connections are killed, and while the script cache is flushed.
//! An independent ledger and an observer of the lock's value judge safety
//! (one holder at a time, no stale token), liveness (no waiter asleep while
//! the key is free) and clean-up (no token, queue entry, key or channel left
//! behind). Each run prints its seed; `RELAYLOCK_STRESS_SEED` replays it.

use relaylock_testkit as support;

use support::stress::{stress, Faults};

/// Lock calls and releases cancelled at random points, on one key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_lock_and_release_calls_stay_safe_and_leave_nothing() {
    stress("plain", 0, Faults::default()).await;
}

/// The same while the pub/sub connections are killed every 700 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_with_pubsub_kills_stays_safe_and_leaves_nothing() {
    let faults = Faults {
        kill_pubsub: true,
        ..Faults::default()
    };
    stress("pubsub-kill", 0x5eed_0fc1_1e47_7100, faults).await;
}

/// The same while the lock server's script cache is flushed every 10-40 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_with_script_cache_flushes_stays_safe_and_leaves_nothing() {
    let faults = Faults {
        flush_scripts: true,
        ..Faults::default()
    };
    stress("script-flush", 0xf105_4000_0000_0000, faults).await;
}
