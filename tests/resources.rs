//! What a client costs its own process: CPU while a key cannot be
//! subscribed, memory under churn. Each test measures this process, so the
//! tests of this binary run one at a time.
//!
//! CPU and memory are read from `/proc/self`; the tests print what they
//! measured (`--nocapture`).

use relaylock_testkit as support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::InfoKind;
use relaylock::{LockClient, LockOptions};
use support::{Admin, RedisServer};

/// The tests of this binary measure the whole process: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// CPU time this process used so far (user + system), from `/proc/self/stat`
/// in clock ticks of 10 ms (`CLK_TCK` is 100 on Linux).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    // The fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// This process's resident memory in KiB (`VmRSS` of `/proc/self/status`).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// `INFO commandstats` as command -> (calls, rejected_calls).
async fn command_stats(admin: &Client) -> HashMap<String, (u64, u64)> {
    let info: String = admin.info(Some(InfoKind::CommandStats)).await.unwrap();
    let mut stats = HashMap::new();
    for line in info.lines() {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|r| r.split_once(':'))
        else {
            continue;
        };
        let field = |key: &str| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(key))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        stats.insert(name.to_owned(), (field("calls="), field("rejected_calls=")));
    }
    stats
}

fn attempts(
    before: &HashMap<String, (u64, u64)>,
    after: &HashMap<String, (u64, u64)>,
    cmd: &str,
) -> u64 {
    let (c0, r0) = before.get(cmd).copied().unwrap_or_default();
    let (c1, r1) = after.get(cmd).copied().unwrap_or_default();
    (c1 + r1) - (c0 + r0)
}

/// What `n` waiters of one key cost while the client may not subscribe to
/// its channel (an ACL without channel permissions): CPU of this process,
/// SUBSCRIBE attempts and script calls at the server, over 2 s.
async fn degraded_cost(
    server: &RedisServer,
    admin: &Client,
    limited: &LockClient,
    n: usize,
) -> (Duration, u64, u64) {
    let waiters: Vec<_> = (0..n)
        .map(|_| {
            let limited = limited.clone();
            tokio::spawn(async move {
                limited
                    .lock_with("k", LockOptions::default().wait(Duration::from_secs(30)))
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cpu0, stats0) = (cpu_time(), command_stats(admin).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (cpu1, stats1) = (cpu_time(), command_stats(admin).await);
    for w in &waiters {
        w.abort();
    }
    for w in waiters {
        let r = w.await;
        assert!(
            r.is_err(),
            "a waiter finished while the key was held: {r:?}"
        );
    }
    let _ = server;
    (
        cpu1 - cpu0,
        attempts(&stats0, &stats1, "subscribe"),
        attempts(&stats0, &stats1, "evalsha"),
    )
}

/// While a key's channel cannot be subscribed, ONE waiter polls and the
/// others sleep: the client's CPU and its commands do not grow with the
/// number of waiters, and it tries to subscribe at most once a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_key_costs_the_same_whatever_its_number_of_waiters() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let holder_client = LockClient::builder()
        .url(server.url())
        .default_lease(Duration::from_millis(900))
        .build()
        .await
        .unwrap();
    let limited = support::channel_denied_client(&admin, &server).await;
    // Held throughout, renewed by the watchdog.
    let holder = holder_client.lock("k").await.unwrap();
    let (cpu_few, subs_few, calls_few) = degraded_cost(&server, &admin, &limited, 10).await;
    let (cpu_many, subs_many, calls_many) = degraded_cost(&server, &admin, &limited, 200).await;
    println!(
        "degraded, 2 s: 10 waiters: {cpu_few:?} CPU, {subs_few} SUBSCRIBE, {calls_few} EVALSHA; \
         200 waiters: {cpu_many:?} CPU, {subs_many} SUBSCRIBE, {calls_many} EVALSHA"
    );
    assert!(holder.is_held());
    // One attempt per key per second (2 s, and one may straddle the edge).
    assert!(
        subs_few <= 3,
        "{subs_few} SUBSCRIBE attempts in 2 s (10 waiters)"
    );
    assert!(
        subs_many <= 3,
        "{subs_many} SUBSCRIBE attempts in 2 s (200 waiters)"
    );
    // One poll every 25 ms (80 in 2 s) plus the holder's renewals: the
    // same for 10 and 200 waiters.
    assert!(
        calls_many <= calls_few + 20,
        "script calls grew with the waiters: {calls_few} -> {calls_many}"
    );
    // CPU, in 10 ms ticks: 20 times the waiters may cost at most a little
    // more, never 20 times as much.
    assert!(
        cpu_many <= cpu_few * 2 + Duration::from_millis(150),
        "CPU grew with the waiters: {cpu_few:?} -> {cpu_many:?}"
    );
    holder.release().await.unwrap();
}

/// 64 tasks lock 256 keys at random (hold 1 ms) for 4 s on one client whose
/// subscriptions linger 5 s. Memory is bounded by the keys with lingering
/// subscriptions, not by the rate of waiters leaving times the linger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lingering_subscriptions_cost_memory_per_key_not_per_departure() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = RedisServer::start();
    let client = LockClient::builder()
        .url(server.url())
        .unsubscribe_linger(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let before = rss_kib();
    let stop = Arc::new(AtomicBool::new(false));
    let acquired = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64u64)
        .map(|i| {
            let (client, stop, acquired) = (client.clone(), stop.clone(), acquired.clone());
            tokio::spawn(async move {
                // xorshift, seeded per task
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (i + 1);
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let key = format!("churn:{}", x % 256);
                    let g = client.lock(&key).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    g.release().await.unwrap();
                    acquired.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut samples = Vec::new();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        samples.push(rss_kib());
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let after = rss_kib();
    let n = acquired.load(Ordering::Relaxed);
    println!(
        "churn: {n} acquisitions in 4 s; RSS {before} KiB before, each second {samples:?} KiB, {after} KiB after"
    );
    let peak = samples.iter().copied().max().unwrap().max(after);
    assert!(
        peak < 40 * 1024,
        "RSS reached {peak} KiB (started at {before} KiB) with a 5 s linger"
    );
    // Flat: within the linger (5 s), memory kept per departure would keep
    // growing from one second to the next.
    let growth = samples[3].saturating_sub(samples[0]);
    assert!(
        growth < 4 * 1024,
        "RSS grew {growth} KiB from the first to the fourth second: {samples:?}"
    );
}
