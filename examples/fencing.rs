//! Fencing tokens against a paused holder.
//!
//! No lock service can stop a holder that pauses (GC, swap, SIGSTOP) past its
//! lease between checking its lock and writing: when it resumes, another
//! owner may already have written. The resource closes that hole by
//! remembering the highest fencing token it accepted and rejecting lower
//! ones. This example runs the scenario against a real Redis:
//!
//! 1. Holder A takes the lock with a fixed 300 ms lease and "pauses".
//! 2. Holder B, waiting meanwhile, gets the lock when A's lease runs out, and
//!    writes with its (higher) token.
//! 3. A resumes and writes with its old token: the store rejects it. A's
//!    guard already knew (`is_held()` is false, `lost()` has fired).
//!
//! ```text
//! cargo run --example fencing -- redis://127.0.0.1:6379
//! ```
//! Touches only names under a `relaylock-fencing-<pid>` prefix and deletes
//! them afterwards.

use std::error::Error;
use std::time::Duration;

use fred::prelude::*;
use fred::types::scripts::Script;
use relaylock::{LockClient, LockOptions};

type BoxError = Box<dyn Error + Send + Sync>;

/// The resource: a hash `{token, value}` that accepts a write only with a
/// token higher than the last one it accepted. Replies 1 accepted, 0 stale.
/// (Tokens are about 1.8e15: exact in Lua's doubles, which hold 2^53.)
const FENCED_WRITE: &str = r#"
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) <= last then return 0 end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return 1
"#;

/// What happened.
#[derive(Debug)]
pub struct Report {
    /// A's fencing token.
    pub a_token: u64,
    /// B's fencing token.
    pub b_token: u64,
    /// Whether the store accepted B's write.
    pub b_accepted: bool,
    /// Whether the store accepted A's late write (it must not).
    pub a_accepted: bool,
    /// Whether A's guard knew its lock was lost when it resumed.
    pub a_knew: bool,
    /// The value the store ends with.
    pub stored: String,
}

async fn write(store: &Client, key: &str, token: u64, value: &str) -> Result<bool, BoxError> {
    let script = Script::from_lua(FENCED_WRITE);
    let accepted: i64 = script
        .evalsha_with_reload(store, vec![key], vec![token.to_string(), value.to_owned()])
        .await?;
    Ok(accepted == 1)
}

/// Run the scenario against the Redis at `url`.
pub async fn run(url: &str) -> Result<Report, BoxError> {
    let prefix = format!("relaylock-fencing-{}", std::process::id());
    let connect = || {
        LockClient::builder()
            .url(url)
            .prefix(prefix.clone())
            .build()
    };
    let (a, b) = (connect().await?, connect().await?);
    let store = Builder::from_config(Config::from_url(url)?).build()?;
    store.init().await?;
    let key = format!("{prefix}:store");

    // A takes the lock with a fixed lease and checks it holds it...
    let a_guard = a
        .lock_with(
            "account",
            LockOptions::default().lease(Duration::from_millis(300)),
        )
        .await?;
    assert!(a_guard.is_held());
    let a_token = a_guard.fencing_token();

    // ...while B waits for it, and writes as soon as it has it.
    let (b_wrote, b_done) = tokio::sync::oneshot::channel();
    let b_task = {
        let (store, key) = (store.clone(), key.clone());
        tokio::spawn(async move {
            let opts = LockOptions::default().wait(Duration::from_secs(10));
            let g = b.lock_with("account", opts).await?;
            let b_token = g.fencing_token();
            let accepted = write(&store, &key, b_token, "written by B").await?;
            let _ = b_wrote.send(());
            g.release().await?;
            Ok::<_, BoxError>((b_token, accepted))
        })
    };

    // A "pauses" until B has written: its lease ran out long ago.
    tokio::time::timeout(Duration::from_secs(10), b_done).await??;
    let a_knew = !a_guard.is_held();
    let a_accepted = write(&store, &key, a_token, "written by A, late").await?;
    let (b_token, b_accepted) = b_task.await??;
    // A's release finds another owner's era: LockLost.
    assert!(matches!(
        a_guard.release().await,
        Err(relaylock::Error::LockLost { .. })
    ));

    let stored: String = store.hget(&key, "value").await?;
    // The store, and the lock's value (relaylock keeps a released lock's
    // tombstone for a minute; this example cleans up at once).
    let names = vec![key, a.redis_key("account")];
    let _: i64 = store.del(names).await?;
    let _ = store.quit().await;
    Ok(Report {
        a_token,
        b_token,
        b_accepted,
        a_accepted,
        a_knew,
        stored,
    })
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let r = run(&url).await?;
    println!("A: fencing token {}, paused past its lease", r.a_token);
    println!(
        "B: fencing token {}, write {}",
        r.b_token,
        if r.b_accepted { "accepted" } else { "REJECTED" }
    );
    println!(
        "A resumes (its guard knew the lock was lost: {}), writes with token {}: {}",
        r.a_knew,
        r.a_token,
        if r.a_accepted {
            "ACCEPTED (stale!)"
        } else {
            "rejected as stale"
        }
    );
    println!("store holds: {:?}", r.stored);
    Ok(())
}
