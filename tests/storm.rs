//! A waiter storm, in a test binary of its own so that the process's memory
//! is this scenario's alone: 5,000 tasks arrive at once on 10 held keys and
//! leave by timeout and by cancellation in random order. No subscription
//! leaked, no waiter stranded, memory back near its baseline.

use relaylock_testkit as support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relaylock::{Error, LockClient, LockOptions};
use support::{channels, eventually, keys, Admin, RedisServer};

extern "C" {
    /// glibc: return freed heap memory to the OS. Memory still allocated
    /// (a leak) cannot be returned, so RSS after a trim measures what the
    /// storm left allocated, not what the allocator caches.
    fn malloc_trim(pad: usize) -> i32;
}

/// The global allocator, counting the bytes allocated and not yet freed:
/// what the storm leaves allocated, exactly, whatever the allocator keeps
/// cached or fragmented (RSS after a trim varies by 1-5 MiB from run to run
/// on the same code: too much for a tight bound).
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded to `System` unchanged; the counter only
// records the sizes of the calls that succeeded.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap bytes allocated and not freed, in KiB.
fn live_kib() -> i64 {
    LIVE.load(Ordering::Relaxed) / 1024
}

/// Resident set size of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// 5,000 waiters arrive at once on 10 held keys and leave by timeout and by
/// cancellation in random order: no subscription leaked, no waiter stranded,
/// memory back near its baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_storm_leaves_nothing_behind() {
    const WAITERS: usize = 5000;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let prefix = "storm";
    let client = || {
        LockClient::builder()
            .url(server.url())
            .prefix(prefix)
            .side_retention(Duration::from_secs(1))
            .unsubscribe_linger(Duration::from_millis(50))
            .build()
    };
    let holder = client().await.unwrap();
    let waiter = client().await.unwrap();
    let names: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    let mut held = Vec::new();
    for k in names.iter() {
        held.push(holder.lock(k).await.unwrap());
    }
    // The baseline: the clients connected, the runtime warm, one waiter
    // round trip done.
    let _ = waiter
        .lock_with(
            &names[0],
            LockOptions::default().wait(Duration::from_millis(50)),
        )
        .await;
    // Past the 50 ms unsubscribe linger, so the warm-up waiter's entry is
    // gone here as it is at the end.
    tokio::time::sleep(Duration::from_millis(200)).await;
    unsafe { malloc_trim(0) };
    let baseline = rss_kib();
    let live_baseline = live_kib();
    let started = Instant::now();
    let tasks = spawn_storm(&waiter, &names, WAITERS);
    let (timeouts, cancelled, peak) = leave_in_order(tasks, started).await;
    let left = started.elapsed();
    let pattern = format!("{prefix}:4:{{*");
    assert_nothing_subscribed_or_queued(&admin, prefix).await;
    // Nobody is stranded: a fresh waiter gets each key as soon as it is free.
    for g in held {
        g.release().await.unwrap();
    }
    for k in names.iter() {
        let g = waiter
            .lock_with(k, LockOptions::default().wait(Duration::from_secs(2)))
            .await
            .unwrap();
        g.release().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    unsafe { malloc_trim(0) };
    let after = rss_kib();
    let live_after = live_kib();
    println!(
        "storm: {WAITERS} waiters on 10 keys ({timeouts} timed out, {cancelled} cancelled) left within {left:?}; heap allocated {live_baseline} KiB before, {live_after} KiB after; RSS baseline {} KiB, peak {} KiB, after {} KiB",
        baseline,
        peak.load(Ordering::SeqCst),
        after
    );
    // What 5,000 waiters leave behind, if anything of each stayed: 1 KiB
    // each is 5 MiB. The bound lets the runtime and fred keep their buffers.
    assert!(
        live_after <= live_baseline + 512,
        "heap did not come back: {live_baseline} -> {live_after} KiB allocated"
    );
    drop((holder, waiter));
    // The locks' records (fence counters and rings) stay, each with a TTL.
    let left = || async {
        let mut left = Vec::new();
        for k in keys(&admin, &pattern).await {
            let ttl: i64 = fred::interfaces::KeysInterface::pttl(&admin, &k)
                .await
                .unwrap();
            if !(k.ends_with("}:f") && ttl > 0) {
                left.push(k);
            }
        }
        left
    };
    let clean = eventually(Duration::from_secs(5), || async { left().await.is_empty() }).await;
    assert!(clean, "left behind: {:?}", left().await);
}

/// A storm waiter: its task, whether it leaves by its deadline (else it is
/// cancelled), and when it leaves.
type StormWaiter = (
    tokio::task::JoinHandle<relaylock::Result<relaylock::LockGuard>>,
    bool,
    Duration,
);

/// `waiters` tasks of `waiter` on `names` (in turn), each leaving after
/// 50 ms to 1.5 s, by its deadline or cancelled: half and half, at random.
fn spawn_storm(waiter: &LockClient, names: &[String], waiters: usize) -> Vec<StormWaiter> {
    // A small deterministic generator: the test is reproducible.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let key = names[i % names.len()].clone();
        let leave_after = Duration::from_millis(50 + next() % 1450);
        let by_timeout = next() % 2 == 0;
        let w = waiter.clone();
        let task = tokio::spawn(async move {
            let opts = if by_timeout {
                LockOptions::default().wait(leave_after)
            } else {
                LockOptions::default()
            };
            w.lock_with(&key, opts).await
        });
        tasks.push((task, by_timeout, leave_after));
    }
    tasks
}

/// Waits for each storm waiter to leave, in the order they leave (a
/// deadline's `Timeout`, or the cancellation at its time after `started`).
/// Returns how many timed out and were cancelled, and the RSS peak in KiB.
async fn leave_in_order(tasks: Vec<StormWaiter>, started: Instant) -> (u64, u64, Arc<AtomicU64>) {
    let peak = std::sync::Arc::new(AtomicU64::new(rss_kib()));
    let mut timeouts = 0;
    let mut cancelled = 0;
    let mut order: Vec<_> = tasks.into_iter().collect();
    order.sort_by_key(|(_, _, after)| *after);
    for (task, by_timeout, after) in order {
        if by_timeout {
            let r = tokio::time::timeout(after + Duration::from_secs(5), task)
                .await
                .expect("a waiter with a deadline is stuck")
                .unwrap();
            assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
            timeouts += 1;
        } else {
            tokio::time::sleep_until((started + after).into()).await;
            task.abort();
            assert!(task.await.unwrap_err().is_cancelled());
            cancelled += 1;
        }
        peak.fetch_max(rss_kib(), Ordering::SeqCst);
    }
    (timeouts, cancelled, peak)
}

/// Every subscription under `prefix` goes (after the 50 ms linger), and
/// every queue entry.
async fn assert_nothing_subscribed_or_queued(admin: &fred::clients::Client, prefix: &str) {
    // (Each client's control channel stays while it lives.)
    let pattern = format!("{prefix}:4:{{*");
    let unsubscribed = eventually(Duration::from_secs(3), || async {
        channels(admin, &pattern).await.is_empty()
    })
    .await;
    assert!(
        unsubscribed,
        "leaked: {:?}",
        channels(admin, &pattern).await
    );
    let queued = || async {
        let mut left = Vec::new();
        for k in keys(admin, &format!("{prefix}:*")).await {
            if let Some(v) = support::lock_value(admin, &k).await {
                if !v.queue.is_empty() {
                    left.push((k, v.queue));
                }
            }
        }
        left
    };
    let queues = eventually(Duration::from_secs(3), || async {
        queued().await.is_empty()
    })
    .await;
    assert!(queues, "queue entries left: {:?}", queued().await);
}
