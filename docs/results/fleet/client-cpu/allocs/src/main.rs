//! Allocations (count and bytes, by size class) per uncontended lock +
//! release, one task on a current-thread runtime, 20,000 acquisitions over
//! 1,000 keys after a warm-up round. `ALLOCS_STRATEGY=floor` runs the
//! bench's fenced floor (`floor:10`, relaylock-cli/src/bare.rs: one script
//! each way, on relaylock's fred client as in the bench) instead of
//! relaylock, to price what relaylock's client does beyond the cheapest
//! fenced lock; `ALLOCS_STRATEGY=bare` the bench's bare lock (`bare:10`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[allow(dead_code)]
#[path = "../../../../../../relaylock-cli/src/bare.rs"]
mod bare;

struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
static CLASSES: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
/// Allocations above glibc's per-thread cache (1,032 B), by exact size: the
/// ones that take the arena's lock. Open addressing on the size.
static LARGE: [(AtomicU64, AtomicU64); 64] = [const { (AtomicU64::new(0), AtomicU64::new(0)) }; 64];

fn count_large(size: usize) {
    let size = size as u64;
    for i in 0..LARGE.len() {
        let slot = &LARGE[(size as usize + i) % LARGE.len()];
        match slot
            .0
            .compare_exchange(0, size, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => {}
            Err(s) if s == size => {}
            Err(_) => continue,
        }
        slot.1.fetch_add(1, Ordering::Relaxed);
        return;
    }
}

fn count(size: usize) {
    if ON.load(Ordering::Relaxed) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(size as u64, Ordering::Relaxed);
        let class = size.max(1).next_power_of_two().trailing_zeros() as usize;
        CLASSES[class].fetch_add(1, Ordering::Relaxed);
        if size > 1032 {
            count_large(size);
        }
    }
}

// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size());
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count(n);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static A: Counting = Counting;

/// The lock under test: relaylock, or the bench's fenced floor.
enum Lock {
    Relaylock(relaylock::LockClient),
    /// The floor or the bare lock, and the relaylock client whose fred
    /// client it uses.
    Baseline {
        lock: bare::BareLock,
        _client: relaylock::LockClient,
    },
}

impl Lock {
    async fn connect(url: &str) -> Lock {
        let client = relaylock::LockClient::connect(url).await.expect("connect");
        let fenced = match std::env::var("ALLOCS_STRATEGY").as_deref() {
            Ok("floor") => true,
            Ok("bare") => false,
            _ => return Lock::Relaylock(client),
        };
        // As the bench does: the floor (or the bare lock) on relaylock's own
        // fred client, with its command timeout.
        let redis = client.fred_client().clone();
        let ms = Duration::from_millis(10);
        let lock = bare::BareLock::new(redis, Duration::from_secs(30), ms, fenced);
        Lock::Baseline {
            lock,
            _client: client,
        }
    }

    async fn cycle(&self, key: &str, i: u64) {
        match self {
            Lock::Relaylock(c) => c.lock(key).await.unwrap().release().await.unwrap(),
            Lock::Baseline { lock: f, .. } => {
                // The bench's floor worker makes a fresh token per acquisition.
                let token = f.lock(key, format!("t{i}")).await.unwrap();
                assert!(f.unlock(key, &token).await.unwrap());
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let url = std::env::args()
        .nth(1)
        .expect("usage: relaylock-allocs redis://host:port [count]");
    let lock = Lock::connect(&url).await;
    let keys: Vec<String> = (0..1000).map(|i| format!("allocs:{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        lock.cycle(k, i as u64).await;
    }
    // Acquisitions to count (default 20,000); `instructions.sh` runs two
    // counts under callgrind and takes the difference.
    let n: u64 = std::env::args()
        .nth(2)
        .map_or(20_000, |n| n.parse().expect("a count"));
    ON.store(true, Ordering::Relaxed);
    for i in 0..n {
        lock.cycle(&keys[(i % 1000) as usize], i).await;
    }
    ON.store(false, Ordering::Relaxed);
    let per = |v: u64| v as f64 / n as f64;
    println!(
        "allocations per acquisition: {:.2}, bytes {:.0}",
        per(ALLOCS.load(Ordering::Relaxed)),
        per(BYTES.load(Ordering::Relaxed))
    );
    for (i, c) in CLASSES.iter().enumerate() {
        let c = c.load(Ordering::Relaxed);
        if per(c) >= 0.01 {
            println!("  <= {:5} B: {:.2}", 1u64 << i, per(c));
        }
    }
    let mut large: Vec<(u64, u64)> = LARGE
        .iter()
        .map(|(s, c)| (s.load(Ordering::Relaxed), c.load(Ordering::Relaxed)))
        .filter(|&(s, c)| s > 0 && per(c) >= 0.01)
        .collect();
    large.sort_unstable();
    for (s, c) in large {
        println!(
            "  exactly {s:5} B (over glibc's 1,032 B cache): {:.2}",
            per(c)
        );
    }
}
