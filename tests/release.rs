//! Releases, against a real redis-server: a dropped guard is released in
//! the background and a cancelled `release()` still releases; the release
//! ring recognises a replayed release (the ring's rule, and a hot key's 30
//! releases) and reports a fence it never released as a loss; `shutdown()`
//! releases every hold of a client at once, also when its process exits.

use relaylock_testkit as support;

use std::time::{Duration, Instant};

use fred::prelude::*;
use relaylock::{
    Error, LockClient, LockGuard, LockOptions, Permit, ReadGuard, SemaphoreOptions, WriteGuard,
};
use support::{eventually, poll_once_and_drop, until_free, Admin, RedisServer};

async fn client(server: &RedisServer) -> LockClient {
    support::client(&server.url()).await
}

/// A dropped guard is released in the background: the next caller gets the
/// lock within 2 s, not after the lease.
#[tokio::test]
async fn dropped_guard_is_released_in_the_background() {
    let server = RedisServer::start();
    let lock = client(&server).await;
    {
        let _g = lock.lock("k").await.unwrap();
    }
    let start = Instant::now();
    let g = lock
        .lock_with("k", LockOptions::default().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(2));
    g.release().await.unwrap();
}

/// `release()` dropped after its first poll, when the script must first be
/// reloaded (after `SCRIPT FLUSH`, or on a promoted replica): the lock must
/// still be released, not left for its whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_release_still_releases() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let owner = client(&server).await;
    let key = owner.redis_key("k");
    for round in 0..3 {
        let g = owner.lock("k").await.unwrap();
        support::script_flush(&admin).await;
        poll_once_and_drop(g.release()).await;
        let gone = eventually(Duration::from_secs(2), || async {
            !support::taken(&admin, &key).await
        })
        .await;
        assert!(
            gone,
            "round {round}: the lock stayed held after a cancelled release"
        );
    }
}

/// RELEASE's arguments for `token`'s hold with `fence`, by client `me`, as
/// relaylock's lean release sends them (no `next`, no requeue).
fn release_args(token: String, fence: String, channel: String) -> Vec<String> {
    vec![
        token,
        fence,
        channel,
        relaylock::__scripts::SIDE_RETENTION_MS.to_string(),
        "me".into(),
        relaylock::__scripts::HANDOFF_GRACE_MS.to_string(),
        "PUBLISH".into(),
        "0".into(),
    ]
}

/// The release script recognises its own replay (fred resends a command
/// whose reply was lost) and does not report a false loss.
#[tokio::test]
async fn replayed_release_is_not_a_false_loss() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = client(&server).await;
    let key = lock.redis_key("k");
    let channel = format!("{key}:ch");
    let g = lock.lock("k").await.unwrap();
    let (token, fence) = (g.token().to_owned(), g.fencing_token().to_string());
    std::mem::forget(g);
    let release = |fence: String| {
        let (admin, key, channel, token) =
            (admin.clone(), key.clone(), channel.clone(), token.clone());
        async move {
            let keys = vec![
                key.clone(),
                format!("{key}:void:{token}"),
                format!("{key}:void"),
            ];
            let args = release_args(token, fence, channel);
            admin
                .eval::<i64, _, _, _>(relaylock::__scripts::RELEASE, keys, args)
                .await
                .unwrap()
        }
    };
    assert_eq!(release(fence.clone()).await, 1, "first release");
    // Others take and release the lock 10 times before the replay arrives.
    for _ in 0..10 {
        lock.lock("k").await.unwrap().release().await.unwrap();
    }
    assert_eq!(
        release(fence.clone()).await,
        2,
        "replay recognised as already released"
    );
    assert_eq!(
        release("1".into()).await,
        0,
        "a fence never released is a loss"
    );
}

/// A hot key's ring (protocol 4: 32 slots of the lock's record, written in
/// turn) holds 30 releases or more, so a release replayed 30 releases later is
/// still recognised; and a fence just older than the ring reaches is a
/// loss, not a replay.
#[tokio::test]
async fn a_hot_keys_ring_holds_30_releases() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = client(&server).await;
    let key = lock.redis_key("k");
    let mut fences = Vec::new();
    for _ in 0..60 {
        let g = lock.lock("k").await.unwrap();
        fences.push(g.fencing_token());
        g.release().await.unwrap();
    }
    let ring = ring_of(&admin, &key).await;
    let kept = fences
        .iter()
        .rev()
        .take_while(|f| ring.contains(&f.to_string()))
        .count();
    println!("{kept} releases in a ring of {} slots", ring.len());
    assert!(ring.len() <= relaylock::__scripts::LOCK_RING_SLOTS);
    assert!(kept >= 30, "only {kept} releases kept");
    let release = |fence: u64| {
        let (admin, key) = (admin.clone(), key.clone());
        async move {
            let args = release_args("gone".into(), fence.to_string(), format!("{key}:ch"));
            admin
                .eval::<i64, _, _, _>(relaylock::__scripts::RELEASE, vec![key], args)
                .await
                .unwrap()
        }
    };
    // Every fence the ring holds is recognised, the next older one is not.
    for (i, &fence) in fences.iter().rev().enumerate() {
        let want = if i < kept { 2 } else { 0 };
        assert_eq!(
            release(fence).await,
            want,
            "the fence released {i} releases ago"
        );
    }
}

/// The released fences in the ring of the lock named `key`: its record's
/// fields but `f` (its fence counter).
async fn ring_of(admin: &Client, key: &str) -> Vec<String> {
    support::lock_record(admin, key)
        .await
        .into_iter()
        .filter(|(field, _)| field != "f")
        .map(|(_, fence)| fence)
        .collect()
}

/// A token of relaylock's shape (`<client>-<16 hex>`): a value that is a
/// token alone is a fast-path hold only if it has that shape.
const TOK: &str = "0123456789abcdef-00000000000000aa";

/// Each way a release ends a hold writes the value protocol 4 says, and
/// keeps the fence in the ring of the record `<lock>:f`: a fast-path hold (the token alone) or a script's
/// (`<token>:<fence>|queue|void`), freed (the name deleted, or a tombstone
/// while a `void` field lives), reserved for a queued client, or given to
/// a local waiter (`next`, with a fence from the record's counter).
#[tokio::test]
async fn every_release_writes_its_value_and_its_ring_slot() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let key = "p:4:{ring}";
    let record = format!("{key}:f");
    let mut rng = support::Lcg(0x9e37_79b9_7f4a_7c15);
    for case in 0..120 {
        let _: () = admin.del(vec![key, record.as_str()]).await.unwrap();
        let counter = 1_800_000_000_000_000 + rng.below(1 << 40);
        let fence = counter - rng.below(5);
        let _: () = admin.hset(&record, ("f", counter)).await.unwrap();
        let fast = case % 2 == 0;
        let void = if case % 3 == 0 { "99999999999999" } else { "" };
        // A fast-path hold has no queue and no `void` field.
        let way = if fast {
            [0, 2][case / 2 % 2]
        } else {
            case / 2 % 3
        };
        let void = if fast { "" } else { void };
        let queue = if way == 1 { "a,cc" } else { "" };
        let value = if fast {
            TOK.to_string()
        } else {
            format!("{TOK}:{fence}|{queue}|{void}")
        };
        let _: () = admin
            .set(key, value, Some(Expiration::PX(30_000)), None, false)
            .await
            .unwrap();
        let mut args = release_args(TOK.into(), fence.to_string(), format!("{key}:ch"));
        if way == 2 {
            args.extend(["nx".into(), "30000".into(), "0".into()]);
        }
        let keys = vec![
            key.to_string(),
            format!("{key}:void:{TOK}"),
            format!("{key}:void"),
            format!("{key}:void:nx"),
        ];
        let reply: i64 = admin
            .eval(relaylock::__scripts::RELEASE, keys, args)
            .await
            .unwrap();
        let value: Option<String> = admin.get(key).await.unwrap();
        let retention = relaylock::__scripts::SIDE_RETENTION_MS;
        let want = match way {
            0 if void.is_empty() => None,
            0 => Some(format!("-{fence}||{void}")),
            1 => Some(format!("~a:{fence}:{retention}|cc|{void}")),
            _ => Some(format!("nx:{}||{void}", -reply)),
        };
        match way {
            2 => assert_eq!(-reply as u64, counter + 1, "case {case}: `next`'s fence"),
            _ => assert_eq!(reply, [1, 3][way], "case {case}: the reply"),
        }
        assert_eq!(value, want, "case {case}");
        let ring = ring_of(&admin, key).await;
        assert!(
            ring.contains(&fence.to_string()),
            "case {case}: the ring {ring:?}"
        );
    }
}

/// `shutdown()` releases every hold (live guards, dropped guards, permits,
/// reads, writes), takes the client out of every queue, and refuses every
/// later call on every clone; it is idempotent.
#[tokio::test]
async fn shutdown_releases_everything_and_refuses_later_calls() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let client = support::client(&server.url()).await;
    let other = support::client(&server.url()).await;

    let Holds {
        live,
        fixed,
        permits,
        read,
        write,
    } = take_every_hold(&client).await;
    // A waiter of this client, queued behind another client's hold.
    let blocker = other.lock("queued").await.unwrap();
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { client.lock("queued").await.map(drop) })
    };
    support::until_queued(&admin, &client, "queued").await;
    let lost = live.lost_token();
    // A critical section in progress: ended by the shutdown, not a loss.
    let section = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .with_lock("section", LockOptions::default(), async |_| {
                    tokio::time::sleep(Duration::from_secs(30)).await
                })
                .await
        })
    };
    let started = support::eventually(Duration::from_secs(5), || async {
        other.is_locked("section").await.unwrap()
    });
    assert!(started.await);

    let started = Instant::now();
    client.clone().shutdown().await.unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");

    assert_every_hold_free(&other).await;
    // The waiter got the typed error and the client left the queue.
    let waited = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(waited, Err(Error::Shutdown)), "{waited:?}");
    let ended = tokio::time::timeout(Duration::from_secs(2), section)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(ended, Err(Error::Shutdown)), "{ended:?}");
    assert!(!other.is_locked("section").await.unwrap());
    let name = client.redis_key("queued");
    assert!(!support::is_queued(&admin, &name, client.client_id()).await);
    blocker.release().await.unwrap();

    // The guards learn it; every later call fails with a typed error.
    assert!(lost.is_cancelled() && !live.is_held());
    assert!(matches!(live.release().await, Err(Error::Shutdown)));
    assert!(matches!(
        fixed.extend(Duration::from_secs(1)).await,
        Err(Error::Shutdown)
    ));
    drop((fixed, permits, read, write));
    let again = client.clone();
    assert_every_call_refused(&again).await;
    // Idempotent.
    client.shutdown().await.unwrap();
    again.shutdown().await.unwrap();
    assert!(other.try_lock("x").await.unwrap().is_some());
}

/// A hold of every kind, taken by one client: a live guard, a fixed lease,
/// two of a semaphore's three permits, a read and a write (and a guard
/// dropped at once, on "dropped").
struct Holds {
    live: LockGuard,
    fixed: LockGuard,
    permits: Permit,
    read: ReadGuard,
    write: WriteGuard,
}

/// Takes [`Holds`] with `client`.
async fn take_every_hold(client: &LockClient) -> Holds {
    let live = client.lock("live").await.unwrap();
    let fixed = client
        .lock_with(
            "fixed",
            LockOptions::default().lease(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    drop(client.lock("dropped").await.unwrap());
    let permits = client
        .semaphore("sem", 3)
        .unwrap()
        .acquire_with(SemaphoreOptions::default().permits(2))
        .await
        .unwrap();
    let read = client.rw_lock("rw-r").read().await.unwrap();
    let write = client.rw_lock("rw-w").write().await.unwrap();
    Holds {
        live,
        fixed,
        permits,
        read,
        write,
    }
}

/// Every hold of [`take_every_hold`] is free for `other`.
async fn assert_every_hold_free(other: &LockClient) {
    // Everything is free at once.
    for key in ["live", "fixed", "dropped"] {
        assert!(!other.is_locked(key).await.unwrap(), "{key} still held");
    }
    assert_eq!(
        other
            .semaphore("sem", 3)
            .unwrap()
            .available()
            .await
            .unwrap(),
        3
    );
    other
        .rw_lock("rw-r")
        .try_write()
        .await
        .unwrap()
        .expect("read freed")
        .release()
        .await
        .unwrap();
    other
        .rw_lock("rw-w")
        .try_read()
        .await
        .unwrap()
        .expect("write freed")
        .release()
        .await
        .unwrap();
}

/// Every call of a client that was shut down fails with `Shutdown`.
async fn assert_every_call_refused(again: &LockClient) {
    assert!(matches!(again.lock("x").await, Err(Error::Shutdown)));
    assert!(matches!(again.try_lock("x").await, Err(Error::Shutdown)));
    assert!(matches!(again.is_locked("x").await, Err(Error::Shutdown)));
    assert!(matches!(
        again.semaphore("s", 1).unwrap().acquire().await,
        Err(Error::Shutdown)
    ));
    assert!(matches!(
        again.rw_lock("r").read().await,
        Err(Error::Shutdown)
    ));
}

/// The child process of `a_process_that_shuts_down_leaves_its_keys_free`:
/// takes a lock, drops its guard, optionally shuts the client down, and
/// exits.
#[tokio::test]
#[ignore = "run by a_process_that_shuts_down_leaves_its_keys_free as a child process"]
async fn child_drops_a_guard_and_exits() {
    let url = std::env::var("RELAYLOCK_CHILD_URL").expect("RELAYLOCK_CHILD_URL");
    let client = LockClient::connect(&url).await.unwrap();
    drop(client.lock("exiting").await.unwrap());
    drop(client.lock("exiting-2").await.unwrap());
    if std::env::var("RELAYLOCK_CHILD_SHUTDOWN").is_ok() {
        client.shutdown().await.unwrap();
    }
    std::process::exit(0);
}

/// How long after the child process exits its keys are free, with and
/// without `shutdown()` before the exit.
#[tokio::test]
async fn a_process_that_shuts_down_leaves_its_keys_free() {
    let server = RedisServer::start();
    let other = support::client(&server.url()).await;
    let run_child = |shutdown: bool| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--ignored", "--exact", "child_drops_a_guard_and_exits"])
            .env("RELAYLOCK_CHILD_URL", server.url())
            .stdout(std::process::Stdio::null());
        if shutdown {
            cmd.env("RELAYLOCK_CHILD_SHUTDOWN", "1");
        }
        let status = cmd.status().unwrap();
        assert!(status.success());
    };
    run_child(true);
    for key in ["exiting", "exiting-2"] {
        let free = until_free(&other, key, Duration::from_secs(5)).await;
        eprintln!("with shutdown: {key} free {free:?} after the child exited");
        assert!(
            free.is_some_and(|at| at < Duration::from_millis(100)),
            "{free:?}"
        );
    }
}
