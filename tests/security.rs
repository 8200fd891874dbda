//! Secured connections against real redis-server: a least-privilege ACL
//! user (the one docs/security.md documents) works end to end.

use relaylock_testkit as support;

use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::CustomCommand;
use relaylock::{LockClient, LockOptions};
use support::{Admin, RedisServer};

/// The ACL docs/security.md documents for a relaylock user of prefix `relaylock`
/// (keys `~relaylock:*`, channels `&relaylock:*`, and only the commands
/// relaylock sends or its scripts call).
const ACL: &[&str] = &[
    "resetkeys",
    "~relaylock:*",
    "resetchannels",
    "&relaylock:*",
    "-@all",
    "+evalsha",
    "+script|load",
    "+subscribe",
    "+unsubscribe",
    "+ssubscribe",
    "+sunsubscribe",
    "+ping",
    "+exists",
    "+info",
    "+client|id",
    "+cluster|slots",
    "+wait",
    "+get",
    "+set",
    "+time",
    "+pexpire",
    "+pttl",
    "+publish",
    "+spublish",
    // A value that vanished under its holder: the clients to tell
    // (`scripts::WAKE`).
    "+pubsub|channels",
    "+pubsub|shardchannels",
    // `shutdown()` deletes the client's record (its name, for operators).
    "+del",
    // A lock's record: its fence counter and its ring.
    "+hget",
    "+hgetall",
    // The queue times (`relaylock status`), and the record.
    "+hset",
    "+hlen",
    "+hkeys",
    "+hdel",
    // The semaphore's scripts.
    "+zadd",
    "+zrange",
    "+zrangebyscore",
    "+zremrangebyscore",
    "+zrem",
    "+zscore",
    "+hmget",
];

/// Two clients of a user with exactly the documented ACL: the eviction
/// check, contention woken by release messages, renewals, `with_lock`, a
/// semaphore with its reservation messages, and a vanished value's wake-up
/// all work; a key outside the prefix is denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_acl_user_works_end_to_end() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let mut args = vec!["SETUSER", "relay", "on", ">s3cret"];
    args.extend_from_slice(ACL);
    let _: () = admin
        .custom(CustomCommand::new_static("ACL", None, false), args)
        .await
        .unwrap();
    let url = format!("redis://relay:s3cret@127.0.0.1:{}", server.port);
    let client = || {
        LockClient::builder()
            .url(url.clone())
            .default_lease(Duration::from_millis(600))
            .build()
    };
    let (a, b) = (client().await.unwrap(), client().await.unwrap());
    // No CONFIG: the eviction policy is read from INFO memory.
    let memory = relaylock::eviction::read_all(a.fred_client()).await;
    assert!(
        matches!(&memory[0].read, relaylock::eviction::Read::Read { from_config: false, policy, .. } if policy == "noeviction"),
        "{memory:?}"
    );

    // Contention between two clients: the waiter is woken by the release
    // message (not its lease), so SUBSCRIBE and PUBLISH are allowed.
    let g = a.lock("k").await.unwrap();
    let waiter = support::spawn_waiter(&b, "k");
    // Held across several leases: the watchdog's renewals are allowed.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(g.is_held());
    let released = Instant::now();
    g.release().await.unwrap();
    let woke = waiter.await.unwrap() - released;
    assert!(woke < Duration::from_millis(300), "woken after {woke:?}");
    let v = a
        .with_lock("j", LockOptions::default(), async |g| g.fencing_token())
        .await
        .unwrap();
    assert!(v > 0);
    assert!(!a.is_locked("k").await.unwrap());

    multi_key_across(&a, &b).await;
    election_across(&a, &b).await;
    semaphore_across(&a, &b).await;

    // A value that vanishes under its holder (DEL, as an eviction would):
    // the holder's release lists the waiting clients (PUBSUB CHANNELS) and
    // tells them; the waiter does not sleep out the 6 s lease it saw.
    let g = a
        .lock_with("v", LockOptions::default().lease(Duration::from_secs(6)))
        .await
        .unwrap();
    let waiter = support::spawn_waiter(&b, "v");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _: i64 = admin.del(a.redis_key("v")).await.unwrap();
    let released = Instant::now();
    assert!(matches!(
        g.release().await,
        Err(relaylock::Error::LockLost { .. })
    ));
    let woke = waiter.await.unwrap() - released;
    assert!(woke < Duration::from_secs(1), "woken after {woke:?}");

    // And the ACL really is that narrow: nothing outside the prefix.
    let plain = Builder::from_config(Config::from_url(&url).unwrap())
        .build()
        .unwrap();
    plain.init().await.unwrap();
    let denied: Result<Option<String>, _> = plain.get("other:key").await;
    assert!(denied.is_err(), "{denied:?}");
}

/// A semaphore across the two clients: admission, the reservation
/// message to the waiting client, renewal, the read-only peek.
async fn semaphore_across(a: &LockClient, b: &LockClient) {
    let p = a.semaphore("s", 1).unwrap().acquire().await.unwrap();
    let waiter = {
        let sem = b.semaphore("s", 1).unwrap();
        tokio::spawn(async move {
            let p = sem.acquire().await.unwrap();
            let at = Instant::now();
            p.release().await.unwrap();
            at
        })
    };
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(p.is_held());
    assert_eq!(a.semaphore("s", 1).unwrap().available().await.unwrap(), 0);
    let released = Instant::now();
    p.release().await.unwrap();
    let woke = waiter.await.unwrap() - released;
    assert!(woke < Duration::from_millis(300), "woken after {woke:?}");
}

/// A wrong password is a clear error, quickly, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_a_clear_error() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let _: () = admin
        .custom(
            CustomCommand::new_static("ACL", None, false),
            vec!["SETUSER", "relay", "on", ">right", "~*", "&*", "+@all"],
        )
        .await
        .unwrap();
    let started = Instant::now();
    let r = LockClient::builder()
        .url(format!("redis://relay:wrong@127.0.0.1:{}", server.port))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await;
    let e = r.expect_err("a wrong password connected");
    println!("wrong password: {e} after {:?}", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        e.to_string().to_lowercase().contains("pass")
            || e.to_string().to_lowercase().contains("auth"),
        "{e}"
    );
}

#[cfg(feature = "tls")]
mod tls {
    use std::time::{Duration, Instant};

    use relaylock::{Error, LockClient};

    use super::support::tls::Certs;

    /// `rediss://` against a TLS-enabled redis-server and a throwaway CA:
    /// locks and hand-overs work; a wrong CA and a plain-text client are
    /// clear errors within the connect timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rediss_with_a_private_ca() {
        let certs = Certs::generate();
        let (_server, port) = certs.server();
        let url = format!("rediss://127.0.0.1:{port}");
        let client = || {
            LockClient::builder()
                .url(url.clone())
                .tls_root_certificates_pem(certs.ca.clone())
                .build()
        };
        let (a, b) = (client().await.unwrap(), client().await.unwrap());
        let g = a.lock("k").await.unwrap();
        let waiter = super::support::spawn_waiter(&b, "k");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = Instant::now();
        g.release().await.unwrap();
        let woke = waiter.await.unwrap() - released;
        println!("tls: the waiter acquired {woke:?} after the release");
        assert!(woke < Duration::from_millis(300), "{woke:?}");

        // The wrong CA: a clear error, not a hang.
        let started = Instant::now();
        let wrong = LockClient::builder()
            .url(url.clone())
            .tls_root_certificates_pem(certs.other_ca.clone())
            .connect_timeout(Duration::from_secs(2))
            .build()
            .await
            .expect_err("connected with the wrong CA");
        println!("wrong CA: {wrong} after {:?}", started.elapsed());
        assert!(started.elapsed() < Duration::from_secs(3));

        // Not PEM at all: refused before connecting.
        let bad = LockClient::builder()
            .url(url.clone())
            .tls_root_certificates_pem(b"not a certificate".to_vec())
            .build()
            .await;
        assert!(matches!(bad, Err(Error::InvalidArgument(_))), "{bad:?}");
    }
}

/// A multi-key lock with one key busy (a wait, then the rest of the set):
/// the same commands as a lock's.
async fn multi_key_across(a: &LockClient, b: &LockClient) {
    let single = b.lock("m2").await.unwrap();
    let set = {
        let a = a.clone();
        tokio::spawn(async move { a.lock_all(["m1", "m2", "m3"]).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    single.release().await.unwrap();
    let set = set.await.unwrap();
    assert_eq!(set.len(), 3);
    set.release().await.unwrap();
}

/// An election: a campaign, its proclamation, an observer, a resignation
/// and the next leader: the same commands as a lock's, and the election's
/// channel under the ACL's channel pattern.
async fn election_across(a: &LockClient, b: &LockClient) {
    let mut seen = b.election("acl").observe();
    let l = a.election("acl").campaign("a").await.unwrap();
    let leader = b.election("acl").leader().await.unwrap().unwrap();
    assert_eq!(leader.value, "a");
    let next = {
        let b = b.clone();
        tokio::spawn(async move { b.election("acl").campaign("b").await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    l.resign().await.unwrap();
    let lb = next.await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            if seen
                .borrow_and_update()
                .as_ref()
                .is_some_and(|l| l.value == "b")
            {
                break;
            }
            seen.changed().await.unwrap();
        }
    })
    .await;
    assert!(heard.is_ok(), "the observer heard the new leader");
    lb.resign().await.unwrap();
}
