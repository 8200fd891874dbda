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
        relaylock::__scripts::LOCK_RING_CHARS.to_string(),
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

/// A hot key's ring (protocol 3: differences, not whole fences) holds 30
/// releases or more, so a release replayed 30 releases later is still
/// recognised; and a fence just older than the ring reaches is a loss, not
/// a replay.
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
    let value: String = admin.get(&key).await.unwrap();
    let ring = value.split('|').nth(2).unwrap().to_owned();
    let kept = ring.split(' ').count();
    println!(
        "{kept} releases in a ring of {} characters: {ring}",
        ring.len()
    );
    assert!(ring.len() <= relaylock::__scripts::LOCK_RING_CHARS);
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

/// The release prepends its fence to the ring and cuts the ring to the
/// newest fences that fit in `ring_chars`, at a fence boundary. Protocol 3
/// writes the ring as the newest fence, then each older one as its
/// difference to the one before (`r1 d2 d3 ...`, `r2 = r1 - d2`): a hot
/// key's fences are close, so the ring is a third as long. This checks the
/// script against the rule written plainly (prepend `fence` and
/// `fence - r1` in place of `r1`, or start over at `fence` when it is not
/// newer; then keep what comes before the last space in the first
/// `ring_chars + 1` characters), on rings of numbers of every length from 1
/// to 16 digits, empty to over-full, several limits, and each of the three
/// values a release writes.
#[tokio::test]
async fn the_release_ring_keeps_the_newest_fences_that_fit() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    // A small deterministic generator: the cases are the same on every run.
    let mut rng = support::Lcg(0x9e37_79b9_7f4a_7c15);
    let key = "p:3:{ring}";
    for case in 0..600 {
        let c = RingCase::draw(case, &mut rng);
        let reply = release_ring_case(&admin, key, case, &c).await;
        let RingCase {
            fence,
            ring,
            cap,
            way,
            void,
            ..
        } = c;
        let ring = ring_expected(&fence, &ring, cap);
        let want = match way {
            0 => format!("-{fence}||{ring}|{void}"),
            1 => format!(
                "~a b:{fence}:{}|cc|{ring}|{void}",
                relaylock::__scripts::SIDE_RETENTION_MS
            ),
            _ => format!("nx:{}||{ring}|{void}", -reply[0]),
        };
        // Freed, reserved for another client, given to `next` (`-fence'`).
        match way {
            2 => assert!(reply[0] < 0, "case {case}: the reply {reply:?}"),
            _ => assert_eq!(reply, [[1], [3]][way], "case {case}: the reply"),
        }
        let value: String = admin.get(key).await.unwrap();
        assert_eq!(value, want, "case {case}: fence {fence}, cap {cap}");
    }
}

/// The ring a release writes, by the rule written plainly: `fence`, then
/// `fence - r1` in place of the ring's newest fence `r1`, then the rest; or
/// `fence` alone when it is not newer than `r1`.
fn ring_prepended(fence: &str, ring: &str) -> String {
    let (r1, older) = ring.split_once(' ').unwrap_or((ring, ""));
    let (f, r1): (u64, Option<u64>) = (fence.parse().unwrap(), r1.parse().ok());
    match r1 {
        Some(r1) if f > r1 && older.is_empty() => format!("{fence} {}", f - r1),
        Some(r1) if f > r1 => format!("{fence} {} {older}", f - r1),
        _ => fence.to_string(),
    }
}

/// [`ring_prepended`] cut to the newest fences that fit in `cap`
/// characters: what comes before the last space in its first `cap + 1`.
fn ring_expected(fence: &str, ring: &str, cap: usize) -> String {
    let ring = ring_prepended(fence, ring);
    if ring.len() <= cap {
        return ring;
    }
    let head = &ring[..(cap + 1).min(ring.len())];
    match head.rfind(' ') {
        Some(i) => head[..i].to_string(),
        None => fence.to_string(),
    }
}

/// A number of `len` digits drawn from `first`.
fn ring_digits(len: u64, first: u64) -> String {
    // At most 8.99e15: Lua's doubles are exact below 2^53 (9.007e15),
    // and fences (µs since the epoch) are about 1.8e15.
    let mut s = (first % 8 + 1).to_string();
    for i in 1..len {
        s.push(char::from(b'0' + ((first + i * 7) % 10) as u8));
    }
    s
}

/// The length of a fence in a ring: mostly 16 digits (server
/// microseconds), some of any length (the differences of a real ring are
/// shorter).
fn ring_fence_len(rng: &mut support::Lcg) -> u64 {
    if rng.below(4) == 0 {
        1 + rng.below(16)
    } else {
        16
    }
}

/// One case of [`the_release_ring_keeps_the_newest_fences_that_fit`]: the
/// ring of the lock's value, the fence its release frees, the ring's limit,
/// and the way the release writes the value.
struct RingCase {
    fence: String,
    ring: String,
    cap: usize,
    /// A tombstone (0), a reservation for a queued client (1), the lock
    /// given to a local waiter (2).
    way: usize,
    /// The value's `void` field.
    void: &'static str,
    /// The value's queue.
    queue: &'static str,
}

impl RingCase {
    /// Case number `case`, drawn from `rng`.
    fn draw(case: usize, rng: &mut support::Lcg) -> RingCase {
        let caps = [
            1,
            5,
            16,
            17,
            18,
            33,
            34,
            35,
            100,
            relaylock::__scripts::LOCK_RING_CHARS,
        ];
        let entries = rng.below(45);
        let ring: Vec<String> = (0..entries)
            .map(|_| {
                let l = ring_fence_len(rng);
                ring_digits(l, rng.below(1_000))
            })
            .collect();
        let ring = ring.join(" ");
        // Mostly newer than the ring's newest fence, by up to 16 digits;
        // else any (older: the ring starts over).
        let newest: Option<u64> = ring.split(' ').next().and_then(|r| r.parse().ok());
        let fence = match newest {
            Some(r1) if rng.below(4) != 0 => {
                let d: u64 = ring_digits(1 + rng.below(15), rng.below(1_000))
                    .parse()
                    .unwrap();
                (r1 + d).min(8_999_999_999_999_999).max(r1 + 1).to_string()
            }
            _ => {
                let l = ring_fence_len(rng);
                ring_digits(l, rng.below(1_000))
            }
        };
        // The limit: a fixed one, one either side of the prepended ring's
        // length or exactly it, or any.
        let full = ring_prepended(&fence, &ring).len();
        let cap = match case % 5 {
            0 => caps[case / 5 % caps.len()],
            1 => full.saturating_sub(1).max(1),
            2 => full,
            3 => full + 1,
            _ => 1 + rng.below(600) as usize,
        };
        // Each way a release writes the ring: a tombstone, a reservation
        // for a queued client (whose id here holds a space, so that a cut
        // that looked outside the ring would show), the lock given to a
        // local waiter; with and without a `void` field.
        let way = case / 3 % 3;
        let void = if case.is_multiple_of(2) {
            ""
        } else {
            "99999999999999"
        };
        let queue = if way == 1 { "a b,cc" } else { "" };
        RingCase {
            fence,
            ring,
            cap,
            way,
            void,
            queue,
        }
    }
}

/// Writes the value of case `c` (number `case`) to the lock `key` and
/// releases it with RELEASE; returns the reply.
async fn release_ring_case(admin: &Client, key: &str, case: usize, c: &RingCase) -> Vec<i64> {
    let RingCase {
        fence,
        ring,
        cap,
        way,
        void,
        queue,
    } = c;
    let _: () = admin
        .set(
            key,
            format!("tok:{fence}|{queue}|{ring}|{void}"),
            None,
            None,
            false,
        )
        .await
        .unwrap();
    let mut args: Vec<String> = vec![
        "tok".into(),
        fence.clone(),
        format!("{key}:ch"),
        relaylock::__scripts::SIDE_RETENTION_MS.to_string(),
        cap.to_string(),
        "me".into(),
        relaylock::__scripts::HANDOFF_GRACE_MS.to_string(),
        "PUBLISH".into(),
        "0".into(),
    ];
    if *way == 2 {
        args.extend(["nx".into(), "30000".into(), "0".into()]);
    }
    // A release that knows its fence and names no `next` may send the
    // lock's name alone (relaylock does); half the cases do.
    let keys = if *way != 2 && (case / 2).is_multiple_of(2) {
        vec![key.to_string()]
    } else {
        vec![
            key.to_string(),
            format!("{key}:void:tok"),
            format!("{key}:void"),
            format!("{key}:void:nx"),
        ]
    };
    admin
        .eval(relaylock::__scripts::RELEASE, keys, args)
        .await
        .unwrap()
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
