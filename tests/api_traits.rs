//! Compile-time guarantees of the public API: the client, guards, builder,
//! options and errors cross threads, and so do the futures of every public
//! async fn (they can be spawned on a multi-threaded runtime).

use std::time::Duration;

use relaylock::{Error, LockClient, LockClientBuilder, LockGuard, LockOptions};

fn send_sync<T: Send + Sync>() {}
fn send<T: Send>(_: &T) {}

/// The client, guards, builder, options and errors are `Send + Sync`.
#[test]
fn public_types_are_send_and_sync() {
    send_sync::<LockClient>();
    send_sync::<LockGuard>();
    send_sync::<LockClientBuilder>();
    send_sync::<LockOptions>();
    send_sync::<Error>();
}

/// Never called: it only has to compile.
#[allow(dead_code)]
fn public_futures_are_send(client: &LockClient, guard: LockGuard) {
    send(&client.lock("k"));
    send(&client.lock_with("k", LockOptions::default()));
    send(&client.try_lock("k"));
    send(&client.is_locked("k"));
    send(&client.with_lock("k", LockOptions::default(), async |g| g.fencing_token()));
    send(&guard.lost());
    send(&guard.extend(Duration::from_secs(1)));
    send(&guard.release());
    send(&LockClient::connect("redis://127.0.0.1:6379"));
    send(&LockClient::builder().build());
}

/// The futures a caller holds stay small (the wait loop is boxed inside),
/// so many of them fit in a task's or a test thread's stack.
#[tokio::test]
async fn lock_futures_are_small() {
    // Created, measured and dropped unpolled: nothing is sent.
    fn sizes(client: &LockClient) -> [usize; 3] {
        [
            std::mem::size_of_val(&client.lock("k")),
            std::mem::size_of_val(&client.lock_with("k", LockOptions::default())),
            std::mem::size_of_val(&client.try_lock("k")),
        ]
    }
    let server = relaylock_testkit::RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let [lock, lock_with, try_lock] = sizes(&client);
    println!("future sizes: lock {lock} B, lock_with {lock_with} B, try_lock {try_lock} B");
    for size in [lock, lock_with, try_lock] {
        assert!(size <= 1024, "a lock future of {size} bytes");
    }
}
