//! Protocol 4's fast path against a real redis-server: which acquisition
//! takes it (a lock this client took free by the script on its current
//! connection), what it writes, and the fences it gives: above every
//! earlier one across the script, the fast path, a record that expired, a
//! reconnect and a restart.

use relaylock_testkit as support;

use std::time::Duration;

use fred::prelude::*;
use relaylock::LockClient;
use support::{Admin, RedisServer};

/// Runs `f` and says which way it took the lock: `"fast"` (a `MULTI`, no
/// script), `"script"` (the acquire script, no `MULTI`) or anything else
/// Redis saw, with what `f` returned.
async fn way<T, F: std::future::Future<Output = T>>(admin: &Client, f: F) -> (String, T) {
    let before = support::command_runs(admin).await;
    let out = f.await;
    let after = support::command_runs(admin).await;
    let (execs, scripts) = (
        support::delta(&before, &after, "exec"),
        support::delta(&before, &after, "evalsha"),
    );
    let way = match (execs, scripts) {
        (1, 0) => "fast".to_owned(),
        (0, 1) => "script".to_owned(),
        (e, s) => format!("{e} MULTI, {s} scripts"),
    };
    (way, out)
}

/// A lock's first acquisition on a client's connection is the script; the
/// next ones take the fast path, whose value is the token alone and whose
/// fences count up from the script's. A release of a fast-path hold deletes
/// the lock and keeps its fence in the record's ring.
#[tokio::test]
async fn the_first_acquisition_is_the_script_and_the_next_ones_are_fast() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::client(&server.url()).await;
    let key = lock.redis_key("k");
    let (first, g) = way(&admin, lock.lock("k")).await;
    let g = g.unwrap();
    assert_eq!(first, "script");
    let mut last = g.fencing_token();
    let value = support::lock_value(&admin, &key).await.unwrap();
    assert!(value.held_by(g.token(), last), "{value:?}");
    g.release().await.unwrap();
    for _ in 0..5 {
        let (how, g) = way(&admin, lock.lock("k")).await;
        let g = g.unwrap();
        assert_eq!(how, "fast");
        let value: String = admin.get(&key).await.unwrap();
        assert_eq!(value, g.token(), "a fast-path hold's value is its token");
        assert_eq!(g.fencing_token(), last + 1, "the counter plus one");
        last = g.fencing_token();
        g.release().await.unwrap();
        let gone: Option<String> = admin.get(&key).await.unwrap();
        assert_eq!(gone, None, "freed with nobody waiting: deleted");
        let record: std::collections::HashMap<String, String> =
            admin.hgetall(format!("{key}:f")).await.unwrap();
        let slot = char::from(b'A' + (last % 32) as u8).to_string();
        assert_eq!(
            record.get(&slot),
            Some(&last.to_string()),
            "the ring keeps {last}"
        );
        assert_eq!(record.get("f"), Some(&last.to_string()), "the counter");
    }
}

/// A record that expired (here deleted) leaves a marked lock's fast path
/// to a new counter: `SEED` gives it the server's clock, above every fence
/// of the record before.
#[tokio::test]
async fn a_new_record_is_seeded_above_the_old_fences() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::client(&server.url()).await;
    let key = lock.redis_key("k");
    let g = lock.lock("k").await.unwrap();
    let before = g.fencing_token();
    g.release().await.unwrap();
    let _: i64 = admin.del(format!("{key}:f")).await.unwrap();
    let (how, g) = way(&admin, lock.lock("k")).await;
    let g = g.unwrap();
    assert_eq!(how, "1 MULTI, 1 scripts", "the MULTI, then SEED");
    assert!(
        g.fencing_token() > before,
        "{} then {}",
        before,
        g.fencing_token()
    );
    let ttl: i64 = admin.pttl(format!("{key}:f")).await.unwrap();
    assert!(ttl > 0, "the seeded record has a TTL: {ttl}");
    g.release().await.unwrap();
}

/// After a reconnect (another server, for all the client knows: a
/// failover) the next acquisition is the script again, whose fence is at
/// least the server's clock: a counter left behind cannot give a fence
/// below one the client saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reconnect_the_first_acquisition_is_the_script() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::client(&server.url()).await;
    let key = lock.redis_key("k");
    lock.lock("k").await.unwrap().release().await.unwrap();
    let g = lock.lock("k").await.unwrap();
    let fast = g.fencing_token();
    g.release().await.unwrap();
    // A counter behind the fences issued, as a promoted replica may have.
    let _: () = admin.hset(format!("{key}:f"), ("f", 5)).await.unwrap();
    support::client_kill(&admin, &["TYPE", "normal", "SKIPME", "yes"]).await;
    let back = support::eventually(Duration::from_secs(5), || async {
        lock.is_locked("k").await.is_ok()
    })
    .await;
    assert!(back, "the client never reconnected");
    let (how, g) = way(&admin, lock.lock("k")).await;
    let g = g.unwrap();
    assert_eq!(how, "script");
    assert!(
        g.fencing_token() > fast,
        "{fast} then {}",
        g.fencing_token()
    );
    g.release().await.unwrap();
}

/// A lock the fast path found taken is contended: the next call's first
/// try is the script, which queues it in the same call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_found_taken_starts_with_the_script() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::client(&server.url()).await;
    let other = support::client(&server.url()).await;
    lock.lock("k").await.unwrap().release().await.unwrap();
    let held = other.lock("k").await.unwrap();
    let (how, taken) = way(&admin, lock.try_lock("k")).await;
    assert!(taken.unwrap().is_none());
    assert_eq!(
        how, "1 MULTI, 1 scripts",
        "the refused MULTI, then the script"
    );
    let (how, taken) = way(&admin, lock.try_lock("k")).await;
    assert!(taken.unwrap().is_none());
    assert_eq!(how, "script");
    held.release().await.unwrap();
    // Taken free by the script again: the next call is fast.
    lock.lock("k").await.unwrap().release().await.unwrap();
    let (how, g) = way(&admin, lock.lock("k")).await;
    assert_eq!(how, "fast");
    g.unwrap().release().await.unwrap();
}

/// Fences of one key keep increasing across every way of taking it: the
/// fast path, the script, a hand-over between clients, another client's
/// first acquisition, and a restart without persistence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_increase_across_every_way_of_taking_the_lock() {
    let mut server = RedisServer::start();
    let a = support::client(&server.url()).await;
    let b = support::client(&server.url()).await;
    let mut fences = Vec::new();
    for client in [&a, &a, &a, &b, &b, &a] {
        let g = client.lock("k").await.unwrap();
        fences.push(g.fencing_token());
        g.release().await.unwrap();
    }
    // A hand-over: b waits while a holds.
    let g = a.lock("k").await.unwrap();
    fences.push(g.fencing_token());
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let g = b.lock("k").await.unwrap();
            let fence = g.fencing_token();
            g.release().await.unwrap();
            fence
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    g.release().await.unwrap();
    fences.push(waiter.await.unwrap());
    server.restart();
    let c: LockClient = support::client(&server.url()).await;
    let g = c.lock("k").await.unwrap();
    fences.push(g.fencing_token());
    g.release().await.unwrap();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences must increase: {fences:?}"
    );
}
