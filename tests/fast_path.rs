//! Protocol 4's fast path against a real redis-server: an uncontended
//! acquisition is the acquire script's first command, `SET NX PX` on the
//! free lock, whose value is then the token alone, with its fence from the
//! lock's record; and the fences it gives: above every earlier one across
//! the fast path, the script's other paths, a record that expired, a
//! counter left behind (as a promoted replica may have it) and a restart.

use relaylock_testkit as support;

use std::time::Duration;

use fred::prelude::*;
use relaylock::LockClient;
use support::{Admin, RedisServer};

/// An uncontended acquisition is one script call whose value is the token
/// alone; its fence is the record's counter (at least the server's clock);
/// its release deletes the lock and keeps the fence in the ring slot of the
/// fence's remainder mod 32, and the record keeps a TTL.
#[tokio::test]
async fn an_uncontended_acquisition_is_the_token_alone_and_its_release_deletes_it() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::client(&server.url()).await;
    let key = lock.redis_key("k");
    let mut last = 0;
    for _ in 0..5 {
        let before = support::command_runs(&admin).await;
        let g = lock.lock("k").await.unwrap();
        let after = support::command_runs(&admin).await;
        assert_eq!(support::delta(&before, &after, "evalsha"), 1, "one call");
        let value: String = admin.get(&key).await.unwrap();
        assert_eq!(value, g.token(), "a fast-path hold's value is its token");
        assert!(
            g.fencing_token() > last,
            "{last} then {}",
            g.fencing_token()
        );
        last = g.fencing_token();
        assert_eq!(
            support::lock_record(&admin, &key).await.get("f"),
            Some(&last.to_string())
        );
        g.release().await.unwrap();
        let gone: Option<String> = admin.get(&key).await.unwrap();
        assert_eq!(gone, None, "freed with nobody waiting: deleted");
        let slot = char::from(b'A' + (last % 32) as u8).to_string();
        assert_eq!(
            support::lock_record(&admin, &key).await.get(&slot),
            Some(&last.to_string()),
            "the ring keeps {last}"
        );
        let ttl: i64 = admin.pttl(format!("{key}:f")).await.unwrap();
        assert!(ttl > 0, "the record has a TTL: {ttl}");
    }
}

/// A record that expired (here deleted), or a counter left behind (as a
/// promoted replica may have it): the next fence comes from the server's
/// clock, above every fence before.
#[tokio::test]
async fn a_new_or_lagging_record_gives_a_fence_from_the_clock() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::client(&server.url()).await;
    let key = lock.redis_key("k");
    let g = lock.lock("k").await.unwrap();
    let before = g.fencing_token();
    g.release().await.unwrap();
    let _: i64 = admin.del(format!("{key}:f")).await.unwrap();
    let g = lock.lock("k").await.unwrap();
    assert!(
        g.fencing_token() > before,
        "{before} then {}",
        g.fencing_token()
    );
    let before = g.fencing_token();
    g.release().await.unwrap();
    let _: () = admin.hset(format!("{key}:f"), ("f", 5)).await.unwrap();
    let g = lock.lock("k").await.unwrap();
    assert!(
        g.fencing_token() > before,
        "{before} then {}",
        g.fencing_token()
    );
    g.release().await.unwrap();
}

/// A release's fence takes the next ring slot whatever came between: a
/// script's fence (the clock) is raised to the counter plus one's
/// remainder mod 32, so 32 releases in a row fill the 32 slots.
#[tokio::test]
async fn consecutive_releases_fill_the_ring_in_turn() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::client(&server.url()).await;
    let key = lock.redis_key("k");
    let mut fences = Vec::new();
    for i in 0..32 {
        let g = lock.lock("k").await.unwrap();
        fences.push(g.fencing_token());
        g.release().await.unwrap();
        if i % 5 == 0 {
            // Time passes: the next fence comes from the clock.
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }
    let ring = support::lock_record(&admin, &key).await;
    for f in &fences {
        let slot = char::from(b'A' + (f % 32) as u8).to_string();
        assert_eq!(ring.get(&slot), Some(&f.to_string()), "{fences:?}");
    }
}

/// Fences of one key keep increasing across every way of taking it: the
/// fast path, a hand-over between clients, another client, and a restart
/// without persistence.
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
