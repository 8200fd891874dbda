//! A wait is a deadline, whatever Redis does: `wait(d)` ends the call at
//! `d` with `Timeout`, or `Unavailable` naming the server when it could not
//! be reached, leaving nothing behind. Every call is bounded by the command
//! timeout, also on a fred client without a timeout of its own (a frozen
//! server gives an error, not a hang); the connect timeout is a deadline
//! for `build()`, and its error names the server.

use relaylock_testkit as support;

use std::time::{Duration, Instant};

use relaylock::{Error, LockClient, LockOptions};
use support::RedisServer;

/// Redis stopped (killed): a 2 s wait ends at 2 s, not at the 5 s command
/// timeout, with `Unavailable` naming the server and the key (not fred's
/// `Request timed out.` at the command timeout).
#[tokio::test]
async fn a_wait_ends_at_its_deadline_when_redis_is_down() {
    let mut server = RedisServer::start();
    let client = support::preset(&server.url())
        .command_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let held = client.lock("down:held").await.unwrap();
    server.kill();
    let started = Instant::now();
    let r = client
        .lock_with(
            "down:other",
            LockOptions::default().wait(Duration::from_secs(2)),
        )
        .await;
    let took = started.elapsed();
    println!(
        "wait(2 s) with Redis down: {took:?}: {:?}",
        r.as_ref().err()
    );
    match r {
        Err(Error::Unavailable {
            key,
            server: s,
            waited,
        }) => {
            assert_eq!(key, "down:other");
            assert_eq!(s, format!("127.0.0.1:{}", server.port));
            assert!(waited >= Duration::from_secs(2), "{waited:?}");
        }
        other => panic!("expected Unavailable, got {:?}", other.map(|_| ())),
    }
    assert!(
        took < Duration::from_millis(2500),
        "took {took:?}: the wait is not a deadline"
    );
    drop(held);
}

/// A server that answers nothing (paused: the connection stays up): the
/// wait ends at its deadline with `Unavailable` (its try got no answer),
/// and that try, bounded by the deadline, never runs later: the lock is
/// free once the server runs again.
#[tokio::test]
async fn a_wait_ends_at_its_deadline_when_redis_is_silent() {
    let server = RedisServer::start();
    let client = support::preset(&server.url())
        .command_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    client.lock("warm").await.unwrap().release().await.unwrap();
    server.pause();
    let started = Instant::now();
    let r = client
        .lock_with(
            "silent",
            LockOptions::default().wait(Duration::from_millis(1500)),
        )
        .await;
    let took = started.elapsed();
    server.resume();
    println!(
        "wait(1.5 s) with Redis paused: {took:?}: {:?}",
        r.as_ref().err()
    );
    assert!(
        matches!(&r, Err(Error::Unavailable { key, .. }) if key == "silent"),
        "{:?}",
        r.map(|_| ())
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // The try the deadline cut off may have taken the lock once the server
    // ran again: it is released, and the key is free within a moment.
    let free = support::eventually(Duration::from_secs(3), || async {
        !client.is_locked("silent").await.unwrap_or(true)
    })
    .await;
    assert!(free, "the abandoned try left the lock held");
}

/// A listener that accepts and never answers: `build()` gives up at the
/// connect timeout (closing the connection adds nothing to it), and the
/// error names the server.
#[tokio::test]
async fn the_connect_timeout_is_a_deadline_and_names_the_server() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accept and hold every connection, answering nothing.
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let started = Instant::now();
    let r = relaylock::LockClient::builder()
        .url(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await;
    let took = started.elapsed();
    println!("connect_timeout(1 s) against a silent listener: {took:?}");
    match r {
        Err(e @ Error::ConnectTimeout { .. }) => {
            assert_eq!(
                e.to_string(),
                format!("could not connect to Redis at 127.0.0.1:{port} within 1s")
            );
        }
        other => panic!("expected ConnectTimeout, got {:?}", other.map(|_| ())),
    }
    assert!(took < Duration::from_millis(1300), "took {took:?}");
    silent.abort();
}

/// A try cut off by the deadline while Redis is down is never written
/// later: Redis comes back (restarted on its port) after the background
/// release of that try ran out of time, and the key stays free. A try whose
/// future is merely dropped stays in fred's queue and could run on the
/// reconnect, with nobody left to release it; so the tries are bounded by
/// fred's own per-command timeout at the deadline. The test checks the
/// outcome, whatever fred does with dropped commands.
#[tokio::test]
async fn a_try_cut_off_by_the_deadline_never_runs_later() {
    let mut server = RedisServer::start();
    let client = support::preset(&server.url())
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    client.lock("warm").await.unwrap().release().await.unwrap();
    server.kill();
    let r = client
        .lock_with(
            "later",
            LockOptions::default().wait(Duration::from_millis(500)),
        )
        .await;
    assert!(
        matches!(r, Err(Error::Unavailable { .. })),
        "{:?}",
        r.map(|_| ())
    );
    // Back only after the background release of that try ran out of its
    // own command timeout (it cannot clean up after a try that runs late).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    server.restart();
    let back = support::eventually(Duration::from_secs(10), || async {
        client.is_locked("warm").await.is_ok()
    })
    .await;
    assert!(back, "the client never reconnected");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !client.is_locked("later").await.unwrap(),
        "the try cut off at the deadline ran after the reconnect and took the lock"
    );
}

/// A forged unlock notice (anyone who may publish on the control channel)
/// costs one check and never a false loss: only Redis's answer marks a
/// hold lost.
#[tokio::test]
async fn a_forged_unlock_notice_changes_nothing() {
    use relaylock::fred::interfaces::PubsubInterface;
    use support::Admin;
    let server = RedisServer::start();
    let client = support::preset(&server.url()).build().await.unwrap();
    let guard = client.lock("kept").await.unwrap();
    let admin = server.admin().await;
    let channel = format!("relaylock:4:client:{}:ch", client.client_id());
    let heard: i64 = admin
        .publish(channel, format!("u:{}", guard.token()))
        .await
        .unwrap();
    assert_eq!(heard, 1, "the client listens on its control channel");
    let lost = tokio::time::timeout(Duration::from_millis(500), guard.lost()).await;
    assert!(lost.is_err(), "a forged notice made the hold lost");
    assert!(guard.is_held());
    guard.release().await.unwrap();
}

/// A closed port: `build()` fails within the connect timeout, with a
/// connection error (not `InvalidArgument`).
#[tokio::test]
async fn unreachable_server_fails_within_the_connect_timeout() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let start = Instant::now();
    let r = LockClient::builder()
        .url(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await;
    let took = start.elapsed();
    assert!(r.is_err(), "connected to a closed port");
    assert!(!matches!(r, Err(Error::InvalidArgument(_))));
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

/// With a fred client that has no command timeout of its own, relaylock's
/// calls are still bounded: a frozen Redis (SIGSTOP) gives an error, not a hang.
#[tokio::test]
async fn frozen_redis_gives_an_error_not_a_hang() {
    let server = RedisServer::start();
    let lock = support::client_on_untimed_fred(&server.url(), Duration::from_millis(500)).await;
    let pid = server.pid().unwrap().to_string();
    let stop = std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap();
    assert!(stop.success());
    let start = Instant::now();
    let r = lock.lock("k").await;
    let took = start.elapsed();
    let cont = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap();
    assert!(cont.success());
    assert!(matches!(r, Err(Error::Redis(_))), "{r:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    // And it recovers once Redis runs again.
    let g = lock
        .lock_with("k", LockOptions::default().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    g.release().await.unwrap();
}

/// `is_locked` is bounded by the command timeout too, with a fred client
/// that has no timeout of its own.
#[tokio::test]
async fn is_locked_on_a_frozen_server_fails_within_the_command_timeout() {
    let server = RedisServer::start();
    let lock = support::client_on_untimed_fred(&server.url(), Duration::from_millis(500)).await;
    server.pause();
    let start = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(4), lock.is_locked("k")).await;
    let took = start.elapsed();
    server.resume();
    let r = r.unwrap_or_else(|_| panic!("is_locked still pending after {took:?}"));
    assert!(matches!(r, Err(Error::Redis(_))), "{r:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}
