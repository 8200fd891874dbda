//! A server that may evict relaylock's values is found at `build()`, warned
//! about or refused (`on_evicting_server`); a value that vanishes without a
//! reconnect (eviction, `FLUSHALL`) wakes the waiters of every client.

use std::time::{Duration, Instant};

use relaylock::eviction::{self, Read};
use relaylock::fred::interfaces::ClientLike;
use relaylock::fred::types::CustomCommand;
use relaylock::{Error, LockOptions, OnEvictingServer};
use relaylock_testkit::{acl_user, preset, spawn_waiter, warnings, Admin, RedisServer, PASSWORD};

fn server(maxmemory: &str, policy: &str) -> RedisServer {
    RedisServer::try_start(&["--maxmemory", maxmemory, "--maxmemory-policy", policy])
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The warnings logged about `server` (its `host:port` in the text).
fn warned_about(server: &RedisServer) -> Vec<String> {
    let name = format!("127.0.0.1:{}", server.port);
    warnings::recorded()
        .into_iter()
        .filter(|w| w.message.contains(&name))
        .map(|w| w.message)
        .collect()
}

/// A server with a memory limit and an evicting policy: `build()` warns once
/// per server, naming the policy and `noeviction`, or, under `Refuse`,
/// fails with `EvictingServer` naming the server, policy and limit.
#[tokio::test]
async fn an_evicting_policy_is_warned_about_once_or_refused() {
    warnings::install();
    for policy in ["volatile-lru", "allkeys-lru", "volatile-ttl"] {
        let server = server("3mb", policy);
        let a = preset(&server.url()).build().await.expect("Warn builds");
        let b = preset(&server.url()).build().await.expect("Warn builds");
        let said = warned_about(&server);
        assert_eq!(said.len(), 1, "{policy}: one warning per server: {said:?}");
        assert!(said[0].contains(policy), "names the policy: {}", said[0]);
        assert!(said[0].contains("noeviction"), "says the fix: {}", said[0]);
        match preset(&server.url())
            .on_evicting_server(OnEvictingServer::Refuse)
            .build()
            .await
        {
            Err(Error::EvictingServer {
                server: s,
                policy: p,
                maxmemory,
            }) => {
                assert_eq!(s, format!("127.0.0.1:{}", server.port));
                assert_eq!(p, policy);
                assert_eq!(maxmemory, 3 * 1024 * 1024);
            }
            other => panic!("{policy}: Refuse must refuse, got {:?}", other.map(|_| ())),
        }
        drop((a, b));
    }
}

/// A limit with `noeviction`, or an evicting policy without a limit: the
/// server never deletes a key, so `build()` neither warns nor refuses.
#[tokio::test]
async fn a_server_that_never_evicts_is_not_warned_about() {
    warnings::install();
    // A limit with noeviction (writes fail instead), and a policy with no
    // limit: neither ever deletes a key.
    for (maxmemory, policy) in [("3mb", "noeviction"), ("0", "allkeys-lru")] {
        let server = server(maxmemory, policy);
        let client = preset(&server.url())
            .on_evicting_server(OnEvictingServer::Refuse)
            .build()
            .await
            .unwrap_or_else(|e| panic!("{maxmemory} {policy}: {e}"));
        let read = eviction::read_all(&server.admin().await).await;
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].may_evict(), Some(false), "{}", read[0]);
        assert!(warned_about(&server).is_empty(), "{maxmemory} {policy}");
        let _held = client.lock("k").await.unwrap();
    }
}

/// An ACL user without `CONFIG` is read through `INFO memory`; one without
/// either is reported as unknown, and refused under `Refuse`.
#[tokio::test]
async fn an_acl_user_without_config_is_read_from_info() {
    warnings::install();
    let server = server("3mb", "volatile-lru");
    let admin = server.admin().await;
    acl_user(&admin, "noconfig", &["~*", "&*", "+@all", "-config"]).await;
    acl_user(&admin, "blind", &["~*", "&*", "+@all", "-config", "-info"]).await;
    let url = |user: &str| format!("redis://{user}:{PASSWORD}@127.0.0.1:{}", server.port);

    let noconfig = preset(&url("noconfig")).build().await.unwrap();
    let read = eviction::read_all(noconfig.fred_client()).await;
    match &read[0].read {
        Read::Read {
            policy,
            from_config,
            maxmemory,
        } => {
            assert_eq!(policy, "volatile-lru");
            assert_eq!(*maxmemory, 3 * 1024 * 1024);
            assert!(!from_config, "CONFIG is refused: read from INFO");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(warned_about(&server).len(), 1);
    assert!(matches!(
        preset(&url("noconfig"))
            .on_evicting_server(OnEvictingServer::Refuse)
            .build()
            .await,
        Err(Error::EvictingServer { .. })
    ));

    match preset(&url("blind"))
        .on_evicting_server(OnEvictingServer::Refuse)
        .build()
        .await
    {
        Err(Error::EvictionUnknown { server: s, reason }) => {
            assert_eq!(s, format!("127.0.0.1:{}", server.port));
            assert!(reason.contains("NOPERM"), "{reason}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    // Warn builds, and says it could not tell.
    let _blind = preset(&url("blind")).build().await.unwrap();
    assert!(
        warned_about(&server)
            .iter()
            .any(|w| w.contains("could not read")),
        "{:?}",
        warned_about(&server)
    );
}

/// A server the client connects to anew (here the same one, reconfigured,
/// after its connection was killed; a Sentinel failover or a restart alike)
/// is read again, and warned about when it may evict now.
#[tokio::test]
async fn a_server_connected_to_anew_is_read_again() {
    warnings::install();
    let server = server("3mb", "noeviction");
    let client = preset(&server.url()).build().await.unwrap();
    assert!(warned_about(&server).is_empty());
    let admin = server.admin().await;
    let _: () = admin
        .custom(
            CustomCommand::new_static("CONFIG", None, false),
            vec!["SET", "maxmemory-policy", "allkeys-lfu"],
        )
        .await
        .unwrap();
    relaylock_testkit::client_kill(&admin, &["TYPE", "normal", "SKIPME", "yes"]).await;
    let said = relaylock_testkit::eventually(Duration::from_secs(5), || async {
        let _ = client.is_locked("k").await;
        !warned_about(&server).is_empty()
    })
    .await;
    assert!(said, "no warning after the reconnect");
    assert!(warned_about(&server)[0].contains("allkeys-lfu"));
}

/// The value vanishes under a holder (`FLUSHALL`, as an
/// eviction would). The holder's release finds it gone and tells every
/// client, so another client's queued waiter takes the lock in a few
/// milliseconds instead of sleeping until the lease it last saw ends.
#[tokio::test]
async fn a_vanished_value_wakes_the_waiters_of_every_client() {
    let server = RedisServer::start();
    let (_holder, other, guard) = two_clients_one_holding(&server, "gone").await;
    let waiter = spawn_waiter(&other, "gone");
    // The waiter is queued (its try saw a 6 s lease).
    tokio::time::sleep(Duration::from_millis(300)).await;
    flushall(&server).await;
    let released = Instant::now();
    assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
    let took = waiter.await.unwrap();
    let after = took.duration_since(released);
    eprintln!("the other client's waiter took the lock {after:?} after the release");
    assert!(
        after < Duration::from_secs(1),
        "took {after:?}: it slept on the lease instead of being woken"
    );
}

/// Two clients of `server`; the first holds `key` for a fixed 6 s lease
/// (no watchdog: only its release can find a loss).
async fn two_clients_one_holding(
    server: &RedisServer,
    key: &str,
) -> (
    relaylock::LockClient,
    relaylock::LockClient,
    relaylock::LockGuard,
) {
    let holder = preset(&server.url()).build().await.unwrap();
    let other = preset(&server.url()).build().await.unwrap();
    let guard = holder
        .lock_with(key, LockOptions::default().lease(Duration::from_secs(6)))
        .await
        .unwrap();
    (holder, other, guard)
}

async fn flushall(server: &RedisServer) {
    let admin = server.admin().await;
    let _: () = admin
        .custom(
            CustomCommand::new_static("FLUSHALL", None, false),
            Vec::<String>::new(),
        )
        .await
        .unwrap();
}

/// The same with the holder's own waiter: it takes the lock first (its
/// client serves it), and the other client's waiter, told by the release,
/// queues behind it and is served by its release, not by a lease.
#[tokio::test]
async fn a_vanished_value_with_local_waiters_still_serves_every_client() {
    let server = RedisServer::start();
    let wait = LockOptions::default().wait(Duration::from_secs(20));
    let (holder, other, guard) = two_clients_one_holding(&server, "gone2").await;
    let spawn = |c: relaylock::LockClient| {
        let wait = wait.clone();
        tokio::spawn(async move {
            let g = c.lock_with("gone2", wait).await.unwrap();
            let at = Instant::now();
            tokio::time::sleep(Duration::from_millis(50)).await;
            g.release().await.unwrap();
            at
        })
    };
    let local = spawn(holder.clone());
    let remote = spawn(other.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    flushall(&server).await;
    let released = Instant::now();
    assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
    let (local, remote) = (local.await.unwrap(), remote.await.unwrap());
    let last = local.max(remote).duration_since(released);
    eprintln!("both waiters served within {last:?} of the release");
    assert!(
        last < Duration::from_secs(2),
        "{last:?}: one slept on the lease"
    );
}

/// A holder that never releases: its watchdog's renewal (a third of the
/// lease) finds the value gone before the lease ends, and tells the other
/// clients, whose waiters would otherwise sleep until that lease's end.
#[tokio::test]
async fn a_renewal_that_finds_the_value_gone_wakes_the_other_clients() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(6);
    let holder = preset(&server.url())
        .default_lease(lease)
        .build()
        .await
        .unwrap();
    let other = preset(&server.url()).build().await.unwrap();
    let guard = holder.lock("gone3").await.unwrap();
    let started = Instant::now();
    let waiter = spawn_waiter(&other, "gone3");
    tokio::time::sleep(Duration::from_millis(300)).await;
    flushall(&server).await;
    let took = waiter.await.unwrap().duration_since(started);
    eprintln!("the other client took the lock {took:?} after the hold began (lease {lease:?})");
    assert!(!guard.is_held(), "the renewal found the loss");
    assert!(
        took < lease / 3 + Duration::from_secs(1),
        "{took:?}: the waiter slept on the lease"
    );
}

/// A semaphore's holds vanish the same way: the holder's release tells
/// every client on the semaphore's shared channel.
#[tokio::test]
async fn a_vanished_semaphore_wakes_the_waiters_of_every_client() {
    let server = RedisServer::start();
    let holder = preset(&server.url()).build().await.unwrap();
    let other = preset(&server.url()).build().await.unwrap();
    let lease = relaylock::SemaphoreOptions::default().lease(Duration::from_secs(6));
    let permit = holder
        .semaphore("sgone", 1)
        .unwrap()
        .acquire_with(lease.clone())
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let sem = other.semaphore("sgone", 1).unwrap();
        async move {
            let p = sem
                .acquire_with(relaylock::SemaphoreOptions::default().wait(Duration::from_secs(20)))
                .await
                .unwrap();
            let at = Instant::now();
            p.release().await.unwrap();
            at
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    flushall(&server).await;
    let released = Instant::now();
    assert!(matches!(
        permit.release().await,
        Err(Error::LockLost { .. })
    ));
    let after = waiter.await.unwrap().duration_since(released);
    eprintln!("the other client's waiter took the permit {after:?} after the release");
    assert!(
        after < Duration::from_secs(1),
        "{after:?}: it slept on the lease"
    );
}

/// Calls of `PUBSUB <sub>` so far (`cmdstat_pubsub|channels`).
async fn pubsub_calls(server: &RedisServer, sub: &str) -> u64 {
    let calls = relaylock_testkit::command_calls(&server.admin().await).await;
    calls.get(&format!("pubsub|{sub}")).copied().unwrap_or(0)
}

/// The loss is told once: the watchdog finds it first (its renewal), and
/// the holder's later release, which finds it too, does not list the
/// server's channels again.
#[tokio::test]
async fn a_loss_found_twice_is_told_once() {
    let server = RedisServer::start();
    let holder = preset(&server.url())
        .default_lease(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    let guard = holder.lock("twice").await.unwrap();
    flushall(&server).await;
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the renewal finds the loss");
    assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(pubsub_calls(&server, "channels").await, 1);
}

/// An operator's unlock is not a vanished value: the holder's release finds
/// its own fence in the tombstone (the unlock's release told the queue),
/// tells nobody, and logs no "vanished" warning.
#[tokio::test]
async fn an_operators_unlock_is_not_taken_for_an_eviction() {
    warnings::install();
    let server = RedisServer::start();
    let (holder, operator, guard) = two_clients_one_holding(&server, "unlocked").await;
    let released = operator
        .unlock(
            relaylock::inspect::Primitive::Mutex,
            "unlocked",
            guard.token(),
        )
        .await
        .unwrap();
    assert!(released.is_some());
    assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let key = holder.redis_key("unlocked");
    let vanished: Vec<_> = warnings::recorded()
        .into_iter()
        .filter(|w| w.key.contains(&key) && w.message.contains("vanished"))
        .collect();
    assert!(vanished.is_empty(), "{vanished:?}");
    assert_eq!(pubsub_calls(&server, "channels").await, 0);
}
