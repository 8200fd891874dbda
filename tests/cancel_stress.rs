//! Cancellation stress: 3 clients x 8 tasks on ONE key start lock calls and
//! drop them at random points (after 0-3 ms on a tokio timer, after 0-300 µs
//! of yielding, or after a random number of polls), sometimes let them
//! complete, and end every critical section by `release()`, by dropping the
//! guard, or by a `release()` that is itself cancelled at a random point.
//! A second test does the same while the pub/sub connections are killed
//! every 700 ms; a third while the lock server's script cache is flushed
//! every 10-40 ms (as after a restart or a failover to a server without the
//! scripts: fred's `evalsha_with_reload` then answers NOSCRIPT with SCRIPT
//! LOAD and a second EVALSHA, so a script call has await points before it
//! reaches Redis, where a cancellation can land).
//!
//! What is checked, each time independently of the lock's own bookkeeping:
//!
//! * the *ledger* (a redis-server of its own, as in `tests/faults.rs`):
//!   no two holders inside at once, no stale fencing token;
//! * an *observer* that reads the lock key, its fencing counter and its
//!   queue hash in one script on the lock's server every ~2 ms: no
//!   uncancelled lock call saw the key free for longer than one (short)
//!   lease plus slack while it waited; a token whose `release()` returned is
//!   never seen afterwards; a dropped guard, a cancelled `release()` and a
//!   cancelled in-flight acquisition leave the key within a bound far below
//!   the lease; no client stays queued with no lock call of its own;
//! * afterwards, with the clients still alive: no queue hash, no subscribed
//!   channel, and no key under the prefix but void markers with a TTL (the
//!   side hash too expires).
//!
//! The load: 2.5 s, a 2 s quiet phase (no new call; waiting calls go on
//! waiting), 2.5 s. Contended and sparse segments alternate every 250 ms,
//! and each client in turn idles 700 ms in every 3 s.
//!
//! The run is randomized from a seed that is printed; set
//! `RELAYLOCK_STRESS_SEED` (decimal or 0x-hex) to replay its decisions (the
//! interleaving with Redis still varies). `RELAYLOCK_STRESS_SECS` sets the
//! load around the quiet phase (default 5 s per test). Run with
//! `--nocapture` to see what was measured.

use relaylock_testkit as support;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::CustomCommand;
use relaylock::{Error, LockClient, LockGuard, LockOptions};
use support::ledger::Ledger;
use support::{channels, eventually, keys, Admin, RedisServer};

/// The lease of clients 0 and 1 (renewed by the watchdog while held).
const LEASE: Duration = Duration::from_secs(1);
/// The lease of client 2. A waiter that saw one of its holders and then
/// sleeps until that lease ends, while the key is free after a later,
/// short-lease holder, shows up as a free stretch far above `LEASE + SLACK`.
/// Long enough to tell apart from `LEASE`, short enough that a lock nobody
/// released (left to expire) does not stall the whole run.
const LONG_LEASE: Duration = Duration::from_secs(4);
/// Side hash, queue and void markers expire this long after their last use.
const RETENTION: Duration = Duration::from_secs(1);
const LINGER: Duration = Duration::from_millis(20);
const CLIENTS: usize = 3;
const TASKS: usize = 8;
const KEY: &str = "k";
/// The wait of the uncancelled ("measured") calls: longer than `LONG_LEASE`,
/// so that a wait bounded by a long lease still ends in success and is
/// measured.
const WAIT: Duration = Duration::from_secs(5);
/// Share of lock calls run uncancelled with `WAIT`, in percent, in
/// contended and in sparse segments.
const MEASURED_PCT: u64 = 15;
const SPARSE_MEASURED_PCT: u64 = 5;
/// The load alternates contended segments (every task) and sparse ones (a
/// quarter of the tasks), each this long. In sparse segments the key is
/// often free, so cancelled calls acquire, and are cancelled in flight.
const SEGMENT: Duration = Duration::from_millis(250);
/// Each client in turn starts no lock call for `CLIENT_IDLE` in every
/// `CYCLE` (client `c` from `c` seconds into the cycle), while the others
/// go on: a client left in the queue with nobody waiting shows up then (see
/// `QUEUE_GRACE`), and releases reserve the lock for it in vain.
const CYCLE: Duration = Duration::from_secs(3);
const CLIENT_IDLE: Duration = Duration::from_millis(700);
/// Share of iterations followed by an idle pause of 0-100 ms, in percent.
const IDLE_PCT: u64 = 10;

/// Slack above one (short) lease for "no wait longer than one lease while
/// the key was free". The observer's figure is a LOWER bound of how long the
/// key was continuously free (from the reply of the first free sample to the
/// sending of the last one; a changed fencing counter proves an acquisition
/// in between), so sampling granularity cannot inflate it. A key goes free
/// either with a release message, or silently when a lease runs out (then
/// waiters that saw that holder wake at its end) or when a hand-over
/// reservation lapses. What a correct library may legitimately add: the
/// hand-over grace (50 ms) before a no-show reservation lapses, the probe
/// slice (50 ms), a reconnect (the first attempt 1 ms after the drop, plus
/// up to 10 ms of jitter) plus the resubscription round trips, and the scheduling of 3 x 25 tasks
/// and up to six redis-servers on 2 shared cores (single stalls of 100-150 ms were
/// seen). The worst seen against the fixed library was 65 ms. 500 ms covers
/// that and still catches a waiter asleep on an earlier holder's
/// `LONG_LEASE`.
const SLACK: Duration = Duration::from_millis(500);

/// How long a token may stay in the lock key after its guard was dropped,
/// its `release()` was cancelled, or its acquire call was cancelled in
/// flight (an orphan). The background release is one script round trip
/// (about a millisecond on loopback), started at once; the bound is
/// scheduling slack on a noisy machine, and half the short lease: a lock
/// nobody releases stays for the rest of its lease (at least ~660 ms after
/// the last watchdog renewal, a full lease for an orphan), so it is caught.
const BACKGROUND_BOUND: Duration = Duration::from_millis(500);

/// A quiet phase between the two halves of the load: no new lock call
/// starts, and calls still waiting keep waiting. Longer than `LEASE + SLACK`,
/// so a waiter left asleep on a stale estimate while the key is free shows
/// up (during the load, other clients' traffic would take the key first).
const QUIET: Duration = Duration::from_secs(2);

/// How long a client may stay in the key's queue with no lock call of its
/// own in progress. The last waiter to leave takes its client out of the
/// queue at once (one HDEL from a spawned task); the rest is scheduling
/// slack on a noisy machine. An entry nobody removes lives at least the
/// queue hash's TTL (>= `RETENTION`), so it is caught.
const QUEUE_GRACE: Duration = Duration::from_millis(500);

/// The load, in two halves around `QUIET`: `RELAYLOCK_STRESS_SECS` (default
/// 5 s) in total.
fn load_duration() -> Duration {
    std::env::var("RELAYLOCK_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(Duration::from_secs(5), Duration::from_secs_f64)
}

/// The base seed: `RELAYLOCK_STRESS_SEED`, or fresh from the clock.
fn base_seed() -> u64 {
    if let Ok(s) = std::env::var("RELAYLOCK_STRESS_SEED") {
        let s = s.trim();
        let parsed = match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        };
        return parsed.unwrap_or_else(|e| panic!("RELAYLOCK_STRESS_SEED={s}: {e}"));
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    nanos ^ (u64::from(std::process::id()) << 32)
}

/// xorshift64, seeded through splitmix64 (never zero).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

// ---------------------------------------------------------------------------
// Background releases that failed, as the library logs them (a WARN event
// with the lock's Redis name as `key`). Such a lock stays until its lease
// ends, as documented: under an injected fault (a script cache flushed
// twice within one reload) that is no bug. The event names no token, so
// each one excuses one lingering token whose background release started
// just before it (see `BACKGROUND_BOUND`).

/// (error, when logged) of each background release of a lock under
/// `prefix` that failed so far.
fn failed_releases(prefix: &str) -> Vec<(String, Instant)> {
    let start = format!("{prefix}:");
    support::warnings::recorded()
        .into_iter()
        .filter(|w| w.message.contains("background release failed") && w.key.starts_with(&start))
        .map(|w| (w.error, w.at))
        .collect()
}

// The ledger (the guarded resource, on a redis-server of its own) is the
// test kit's, as in tests/faults.rs; all critical sections write under one
// ledger key.
const LEDGER_KEY: &str = "k";

// ---------------------------------------------------------------------------
// The observer: samples the lock's value (protocol 2: head, queue, ring,
// void in one string) in one atomic read on the lock's server, as the three
// facts the checks below use.

const SAMPLE: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then return {'', '', ''} end
local head, queue = string.match(v, '^([^|]*)|([^|]*)|')
if not head then return {v, '', ''} end
local q = (string.gsub(queue, ',', ' '))
local kind = string.sub(head, 1, 1)
if kind == '-' then return {'', string.sub(head, 2), q} end
if kind == '~' then
  local c, f, keep = string.match(head, '^~([^:]*):(%d+):(%d+)$')
  if redis.call('PTTL', KEYS[1]) <= tonumber(keep) then
    return {'', f, q}
  end
  return {'~' .. c, f, q}
end
return {head, string.match(head, ':(%d+)$') or '', q}
"#;

struct Sample {
    sent: Instant,
    recv: Instant,
    /// The lock's head: `""` free (absent, a tombstone, a lapsed
    /// reservation), `"~<client>"` a hand-over reservation, else
    /// `"<token>:<fence>"`.
    value: String,
    /// The last fencing token issued, from the head (`""`: no value).
    fence: String,
    /// The ids of the clients in the key's queue, space-separated.
    queue: String,
}

impl Sample {
    fn free(&self) -> bool {
        self.value.is_empty()
    }

    fn token(&self) -> Option<&str> {
        if self.value.is_empty() || self.value.starts_with('~') {
            return None;
        }
        self.value.split(':').next()
    }
}

async fn observe(admin: Client, lock: String, stop: Arc<AtomicBool>) -> Vec<Sample> {
    let mut samples = Vec::with_capacity(8192);
    while !stop.load(Ordering::SeqCst) {
        let sent = Instant::now();
        // EVAL, not EVALSHA: the script cache may be flushed at any moment.
        let v: Vec<String> = admin
            .eval(SAMPLE, vec![&lock], ())
            .await
            .expect("observer sample");
        let recv = Instant::now();
        let mut v = v.into_iter();
        samples.push(Sample {
            sent,
            recv,
            value: v.next().unwrap_or_default(),
            fence: v.next().unwrap_or_default(),
            queue: v.next().unwrap_or_default(),
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    samples
}

/// Whether the key stayed free from sample `a` (free) to the next sample
/// `b`. An acquisition always sets the fence in the head to a new, higher
/// value, and every way for the key to become non-free again (a lock, a
/// reservation, which only a release of a lock makes) starts with one. So an
/// unchanged fence proves the key was free throughout, however long the
/// gap. A value that vanished (its retention ran out) proves it only over a
/// gap shorter than the value's shortest life (`RETENTION`).
fn stays_free(a: &Sample, b: &Sample) -> bool {
    if !b.free() {
        return false;
    }
    if b.fence.is_empty() {
        b.sent.saturating_duration_since(a.recv) < RETENTION / 2
    } else {
        b.fence == a.fence
    }
}

/// The longest stretch during which the key was provably free throughout,
/// over consecutive samples (a lower bound: from the reply of its first
/// sample to the sending of its last). With the index of the stretch's
/// first sample.
fn longest_free(samples: &[Sample]) -> (Duration, usize) {
    let mut best = (Duration::ZERO, 0);
    let mut start: Option<usize> = None;
    for (i, s) in samples.iter().enumerate() {
        if !s.free() {
            start = None;
            continue;
        }
        start = match start {
            Some(st) if stays_free(&samples[i - 1], s) => Some(st),
            _ => Some(i),
        };
        let st = start.unwrap();
        let d = s.sent.saturating_duration_since(samples[st].recv);
        if d > best.0 {
            best = (d, st);
        }
    }
    best
}

/// The samples taken entirely within `[from, to]`, and the index of the
/// first.
fn within(samples: &[Sample], from: Instant, to: Instant) -> (usize, &[Sample]) {
    let lo = samples.partition_point(|s| s.sent < from);
    let hi = samples.partition_point(|s| s.recv <= to);
    if lo >= hi {
        (lo, &[])
    } else {
        (lo, &samples[lo..hi])
    }
}

// ---------------------------------------------------------------------------
// Cancellation.

/// When to drop a future.
#[derive(Clone, Copy, Debug)]
enum Cancel {
    /// A tokio timer, uniform 0-3 ms (tokio rounds up to whole ms).
    Timer(Duration),
    /// Yield until this much time passed, uniform 0-300 µs.
    Spin(Duration),
    /// Yield this many times (1-15), each a scheduler turn with a re-poll.
    Yields(u32),
    /// Dropped before its first poll.
    Unpolled,
}

const CANCEL_KINDS: [&str; 4] = ["timer 0-3ms", "spin 0-300us", "yields 1-15", "unpolled"];

impl Cancel {
    fn pick(rng: &mut Rng) -> Cancel {
        match rng.below(31) {
            0..10 => Cancel::Timer(Duration::from_micros(rng.below(3001))),
            10..20 => Cancel::Spin(Duration::from_micros(rng.below(301))),
            20..30 => Cancel::Yields(1 + rng.below(15) as u32),
            _ => Cancel::Unpolled,
        }
    }

    fn kind(self) -> usize {
        match self {
            Cancel::Timer(_) => 0,
            Cancel::Spin(_) => 1,
            Cancel::Yields(_) => 2,
            Cancel::Unpolled => 3,
        }
    }

    async fn fire(self) {
        match self {
            Cancel::Timer(d) => tokio::time::sleep(d).await,
            Cancel::Spin(d) => {
                let until = Instant::now() + d;
                while Instant::now() < until {
                    tokio::task::yield_now().await;
                }
            }
            Cancel::Yields(k) => {
                for _ in 0..k {
                    tokio::task::yield_now().await;
                }
            }
            Cancel::Unpolled => {}
        }
    }
}

/// Run `fut` until it completes or `cancel` fires, then drop it. Returns its
/// output (`None`: dropped unfinished) and how many times it was polled.
async fn race<F: Future>(fut: F, cancel: Cancel) -> (Option<F::Output>, u32) {
    if let Cancel::Unpolled = cancel {
        drop(fut);
        return (None, 0);
    }
    let mut polls = 0u32;
    let out = {
        let mut fut = std::pin::pin!(fut);
        let counted = std::future::poll_fn(|cx| {
            polls += 1;
            fut.as_mut().poll(cx)
        });
        tokio::select! {
            biased;
            out = counted => Some(out),
            _ = cancel.fire() => None,
        }
    };
    (out, polls)
}

const POLL_BUCKETS: [&str; 7] = ["0", "1", "2", "3", "4-7", "8-15", "16+"];

fn poll_bucket(polls: u32) -> usize {
    match polls {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 3,
        4..=7 => 4,
        8..=15 => 5,
        _ => 6,
    }
}

const AGE_BUCKETS: [&str; 5] = ["<100us", "100-300us", "0.3-1ms", "1-3ms", ">=3ms"];

fn age_bucket(d: Duration) -> usize {
    match d.as_micros() {
        0..100 => 0,
        100..300 => 1,
        300..1000 => 2,
        1000..3000 => 3,
        _ => 4,
    }
}

// ---------------------------------------------------------------------------
// The load.

/// How a guard's life ended, and when (by the test's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// `release()` returned (Ok or LockLost): the token must never be seen
    /// in a sample sent afterwards.
    Released,
    /// Dropped: released in the background.
    Dropped,
    /// `release()` dropped unfinished.
    ReleaseCancelled,
    /// `release()` returned an error other than LockLost (a fault made its
    /// script fail): the lock may stay until its lease ends, as documented.
    ReleaseFailed,
}

/// An uncancelled lock call with `WAIT`.
struct Measured {
    client: usize,
    start: Instant,
    end: Instant,
    acquired: bool,
}

#[derive(Default)]
struct Report {
    /// Cancellable lock calls per cancel kind: [completed with a guard,
    /// timed out, failed, cancelled].
    calls: [[u64; 4]; 4],
    /// Cancelled lock futures by polls, and by age at the cancellation.
    cancel_polls: [u64; 7],
    cancel_age: [u64; 5],
    measured: Vec<Measured>,
    acquired: u64,
    /// Guard endings: released, dropped, release cancelled, release raced
    /// but completed.
    released: u64,
    dropped: u64,
    release_cancelled: u64,
    release_race_completed: u64,
    release_cancel_polls: [u64; 7],
    release_lost: u64,
    errors: Vec<String>,
    ends: Vec<(String, usize, End, Instant)>,
    /// Every lock call that was polled: (client, from, until dropped).
    in_progress: Vec<(usize, Instant, Instant)>,
}

impl Report {
    fn merge(&mut self, o: Report) {
        for (a, b) in self.calls.iter_mut().zip(o.calls) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        for (x, y) in self.cancel_polls.iter_mut().zip(o.cancel_polls) {
            *x += y;
        }
        for (x, y) in self.cancel_age.iter_mut().zip(o.cancel_age) {
            *x += y;
        }
        for (x, y) in self
            .release_cancel_polls
            .iter_mut()
            .zip(o.release_cancel_polls)
        {
            *x += y;
        }
        self.measured.extend(o.measured);
        self.acquired += o.acquired;
        self.released += o.released;
        self.dropped += o.dropped;
        self.release_cancelled += o.release_cancelled;
        self.release_race_completed += o.release_race_completed;
        self.release_lost += o.release_lost;
        self.errors.extend(o.errors);
        self.ends.extend(o.ends);
        self.in_progress.extend(o.in_progress);
    }
}

struct Ctx {
    clients: Vec<LockClient>,
    ledger: Arc<Ledger>,
    started: Instant,
    /// The quiet phase, and the end of the load.
    quiet: (Instant, Instant),
    load_end: Instant,
}

enum Phase {
    Contended,
    Sparse(Instant),
    Quiet(Instant),
    Done,
}

impl Ctx {
    /// Until when client `c` is idle, if it is.
    fn client_idle(&self, c: usize, now: Instant) -> Option<Instant> {
        let into = (now - self.started).as_nanos() % CYCLE.as_nanos();
        let from = (Duration::from_secs(1) * c as u32).as_nanos();
        (into >= from && into < from + CLIENT_IDLE.as_nanos())
            .then(|| now + Duration::from_nanos((from + CLIENT_IDLE.as_nanos() - into) as u64))
    }

    fn phase(&self, now: Instant) -> Phase {
        if now >= self.load_end {
            return Phase::Done;
        }
        if now >= self.quiet.0 && now < self.quiet.1 {
            return Phase::Quiet(self.quiet.1);
        }
        let n = (now - self.started).as_nanos() / SEGMENT.as_nanos();
        if n.is_multiple_of(2) {
            Phase::Contended
        } else {
            let mut end = (self.started + SEGMENT * (n as u32 + 1)).min(self.load_end);
            if now < self.quiet.0 {
                end = end.min(self.quiet.0);
            }
            Phase::Sparse(end)
        }
    }
}

/// Hold the lock briefly inside the ledger, then end the guard at random.
async fn critical(ctx: &Ctx, c: usize, g: LockGuard, rng: &mut Rng, r: &mut Report) {
    r.acquired += 1;
    let token = g.token().to_owned();
    let fence = g.fencing_token();
    ctx.ledger.write(LEDGER_KEY, fence, &token, true).await;
    // Mostly short; now and then long enough for waiters of every client to
    // pile up and learn the holder's lease.
    match rng.below(10) {
        0..3 => tokio::task::yield_now().await,
        3..6 => tokio::time::sleep(Duration::from_millis(1)).await,
        6..9 => tokio::time::sleep(Duration::from_millis(2)).await,
        _ => tokio::time::sleep(Duration::from_millis(5 + rng.below(26))).await,
    }
    ctx.ledger.write(LEDGER_KEY, fence, &token, false).await;
    ctx.ledger.leave(LEDGER_KEY, &token).await;
    let released = |token: String, outcome: relaylock::Result<()>, r: &mut Report| {
        let end = match outcome {
            Ok(()) => End::Released,
            Err(Error::LockLost { .. }) => {
                r.release_lost += 1;
                End::Released
            }
            Err(e) => {
                r.errors.push(format!("release: {e}"));
                End::ReleaseFailed
            }
        };
        r.ends.push((token, c, end, Instant::now()));
    };
    match rng.below(3) {
        0 => {
            let outcome = g.release().await;
            r.released += 1;
            released(token, outcome, r);
        }
        1 => {
            r.ends.push((token, c, End::Dropped, Instant::now()));
            drop(g);
            r.dropped += 1;
        }
        _ => {
            let (outcome, polls) = race(g.release(), Cancel::pick(rng)).await;
            match outcome {
                Some(outcome) => {
                    r.release_race_completed += 1;
                    released(token, outcome, r);
                }
                None => {
                    r.ends
                        .push((token, c, End::ReleaseCancelled, Instant::now()));
                    r.release_cancelled += 1;
                    r.release_cancel_polls[poll_bucket(polls)] += 1;
                }
            }
        }
    }
}

async fn task(ctx: Arc<Ctx>, c: usize, t: usize, mut rng: Rng) -> Report {
    let client = ctx.clients[c].clone();
    let mut r = Report::default();
    loop {
        let measured_pct = match ctx.phase(Instant::now()) {
            Phase::Done => break,
            Phase::Quiet(until) => {
                tokio::time::sleep_until(until.into()).await;
                continue;
            }
            Phase::Sparse(until) if !t.is_multiple_of(4) => {
                tokio::time::sleep_until(until.into()).await;
                continue;
            }
            Phase::Sparse(_) => SPARSE_MEASURED_PCT,
            Phase::Contended => MEASURED_PCT,
        };
        if let Some(until) = ctx.client_idle(c, Instant::now()) {
            tokio::time::sleep_until(until.min(ctx.load_end).into()).await;
            continue;
        }
        let guard = if rng.percent(measured_pct) {
            let start = Instant::now();
            let outcome = client
                .lock_with(KEY, LockOptions::default().wait(WAIT))
                .await;
            r.in_progress.push((c, start, Instant::now()));
            r.measured.push(Measured {
                client: c,
                start,
                end: Instant::now(),
                acquired: outcome.is_ok(),
            });
            match outcome {
                Ok(g) => Some(g),
                Err(Error::Timeout { .. }) => None,
                Err(e) => {
                    r.errors.push(format!("measured lock: {e}"));
                    None
                }
            }
        } else {
            let cancel = Cancel::pick(&mut rng);
            // A quarter of them also have a short deadline of their own, so
            // a timeout races the cancellation.
            let options = if rng.percent(25) {
                LockOptions::default().wait(Duration::from_micros(rng.below(3001)))
            } else {
                LockOptions::default()
            };
            let start = Instant::now();
            let (outcome, polls) = race(client.lock_with(KEY, options), cancel).await;
            if polls > 0 {
                r.in_progress.push((c, start, Instant::now()));
            }
            let counts = &mut r.calls[cancel.kind()];
            match outcome {
                Some(Ok(g)) => {
                    counts[0] += 1;
                    Some(g)
                }
                Some(Err(Error::Timeout { .. })) => {
                    counts[1] += 1;
                    None
                }
                Some(Err(e)) => {
                    counts[2] += 1;
                    r.errors.push(format!("lock: {e}"));
                    None
                }
                None => {
                    counts[3] += 1;
                    r.cancel_polls[poll_bucket(polls)] += 1;
                    r.cancel_age[age_bucket(start.elapsed())] += 1;
                    None
                }
            }
        };
        if let Some(g) = guard {
            critical(&ctx, c, g, &mut rng, &mut r).await;
        }
        // Idle now and then, so the number of active tasks (and with it the
        // contention) varies: the key is sometimes free, cancelled calls
        // then acquire (and are cancelled in flight), and clients whose
        // waiters all left are reserved for (no-shows).
        if rng.percent(IDLE_PCT) {
            tokio::time::sleep(Duration::from_millis(rng.below(100))).await;
        }
    }
    r
}

/// What is left under `prefix` that should not be: any key without a TTL;
/// any key but a void marker, the queue-times record or a free lock (a tombstone, or a lapsed
/// reservation) with nobody queued; and any subscribed channel.
async fn leftovers(admin: &Client, prefix: &str) -> Vec<String> {
    let pattern = format!("{prefix}:*");
    let mut bad = Vec::new();
    for k in keys(admin, &pattern).await {
        let pttl: i64 = admin.pttl(&k).await.unwrap();
        if pttl == -2 {
            continue; // expired meanwhile
        }
        // A void marker, the queue-times record (scripts::QUEUE_TIMES,
        // a hash with a TTL), or a live client's record (its name, for
        // operators, with a TTL) are fine.
        let fine = if k.contains(":void:")
            || k.ends_with(relaylock::__scripts::QUEUE_TIMES)
            || k.contains(":3:client:")
        {
            true
        } else {
            let v: Vec<String> = admin.eval(SAMPLE, vec![&k], ()).await.unwrap();
            v[0].is_empty() && v[2].is_empty()
        };
        if !fine || pttl < 0 {
            bad.push(format!("key {k} (pttl {pttl})"));
        }
    }
    // A live client's control channel (an operator's unlock) is fine.
    for ch in channels(admin, &pattern).await {
        if !ch.contains(":3:client:") {
            bad.push(format!("channel {ch}"));
        }
    }
    bad
}

fn hist(labels: &[&str], counts: &[u64]) -> String {
    labels
        .iter()
        .zip(counts)
        .map(|(l, n)| format!("{l}:{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What happens to the lock's server during the load.
#[derive(Clone, Copy, Default)]
struct Faults {
    /// `CLIENT KILL TYPE pubsub` every 700 ms.
    kill_pubsub: bool,
    /// `SCRIPT FLUSH` every 10-40 ms.
    flush_scripts: bool,
}

async fn script_flush(admin: &Client) {
    let _: Value = admin
        .custom(
            CustomCommand::new_static("SCRIPT", None, false),
            vec!["FLUSH"],
        )
        .await
        .unwrap();
}

async fn stress(name: &str, seed_mix: u64, faults: Faults) {
    support::warnings::install();
    let base = base_seed();
    let seed = base ^ seed_mix;
    let load = load_duration();
    println!("{name}: seed {seed:#x} (replay: RELAYLOCK_STRESS_SEED={base:#x}), load {load:?}");
    let server = RedisServer::start();
    let admin = server.admin().await;
    let ledger = Ledger::start().await;
    let prefix = format!("cs-{name}");
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let client = LockClient::builder()
            .url(server.url())
            .prefix(prefix.as_str())
            .default_lease(if c == 2 { LONG_LEASE } else { LEASE })
            .side_retention(RETENTION)
            .unsubscribe_linger(LINGER)
            .command_timeout(Duration::from_secs(1))
            .connect_timeout(Duration::from_secs(2))
            .build()
            .await
            .expect("connect");
        clients.push(client);
    }
    let lock_key = clients[0].redis_key(KEY);

    let stop = Arc::new(AtomicBool::new(false));
    let observer = tokio::spawn(observe(
        server.admin().await,
        lock_key.clone(),
        Arc::clone(&stop),
    ));
    let ids: Vec<String> = clients.iter().map(|c| c.client_id().to_owned()).collect();
    let started = Instant::now();
    let quiet_from = started + load / 2;
    let ctx = Arc::new(Ctx {
        clients,
        ledger,
        started,
        quiet: (quiet_from, quiet_from + QUIET),
        load_end: started + load + QUIET,
    });
    let killer = faults.kill_pubsub.then(|| {
        let (admin, until) = (admin.clone(), ctx.load_end);
        tokio::spawn(async move {
            let mut kills = 0u32;
            loop {
                tokio::time::sleep(Duration::from_millis(700)).await;
                if Instant::now() >= until {
                    return kills;
                }
                support::client_kill(&admin, &["TYPE", "pubsub"]).await;
                kills += 1;
            }
        })
    });
    let mut rng = Rng::new(seed);
    let flusher = faults.flush_scripts.then(|| {
        let (admin, until) = (admin.clone(), ctx.load_end);
        let mut rng = Rng::new(rng.next());
        tokio::spawn(async move {
            let mut flushes = 0u32;
            loop {
                tokio::time::sleep(Duration::from_millis(10 + rng.below(31))).await;
                if Instant::now() >= until {
                    return flushes;
                }
                script_flush(&admin).await;
                flushes += 1;
            }
        })
    });
    let handles: Vec<_> = (0..CLIENTS * TASKS)
        .map(|i| {
            tokio::spawn(task(
                Arc::clone(&ctx),
                i % CLIENTS,
                i / CLIENTS,
                Rng::new(rng.next()),
            ))
        })
        .collect();
    let all = futures::future::join_all(handles);
    let joined = tokio::time::timeout(load + QUIET + WAIT + Duration::from_secs(10), all)
        .await
        .expect("a task is stuck: a lock call with a 5 s wait, a ledger write or a release() did not return");
    let mut report = Report::default();
    for r in joined {
        report.merge(r.expect("task panicked"));
    }
    let drained = started.elapsed();
    let kills = match killer {
        Some(k) => Some(k.await.unwrap()),
        None => None,
    };
    let flushes = match flusher {
        Some(f) => Some(f.await.unwrap()),
        None => None,
    };
    let reloads = support::command_calls(&admin)
        .await
        .get("script|load")
        .copied()
        .unwrap_or(0);

    // Everything is released (or being released in the background): the
    // bookkeeping must go, with the clients still alive.
    let clean_started = Instant::now();
    let clean = eventually(LONG_LEASE + RETENTION + Duration::from_secs(3), || async {
        leftovers(&admin, &prefix).await.is_empty()
    })
    .await;
    let clean_after = clean_started.elapsed();
    let left = leftovers(&admin, &prefix).await;
    stop.store(true, Ordering::SeqCst);
    let samples = observer.await.unwrap();
    let totals = ctx.ledger.totals(&[LEDGER_KEY]).await;

    // --- Analysis of the observer's samples.
    let mut failures = Vec::new();
    let (free_any, _) = longest_free(&samples);
    // Free while a measured call waited.
    // (free, call, first sample of the stretch)
    let mut worst_wait: Option<(Duration, &Measured, usize)> = None;
    let mut over = 0;
    for m in &report.measured {
        let (lo, window) = within(&samples, m.start, m.end);
        let (d, i) = longest_free(window);
        if d >= LEASE + SLACK {
            over += 1;
        }
        if d > worst_wait.as_ref().map_or(Duration::ZERO, |w| w.0) {
            worst_wait = Some((d, m, lo + i));
        }
    }
    // Token lifetimes as the observer saw them: first reply, last sending.
    let mut seen: HashMap<&str, (Instant, Instant)> = HashMap::new();
    for s in &samples {
        if let Some(t) = s.token() {
            let e = seen.entry(t).or_insert((s.recv, s.sent));
            e.1 = s.sent;
        }
    }
    let ends: HashMap<&str, (End, Instant)> = report
        .ends
        .iter()
        .map(|(t, _, e, at)| (t.as_str(), (*e, *at)))
        .collect();
    let guards: HashSet<&str> = ends.keys().copied().collect();
    // The worst free stretch, with what held the key just before it.
    let worst_line = worst_wait.as_ref().map(|(d, m, i)| {
        let ms = |at: Instant| at.saturating_duration_since(started).as_millis();
        let before = samples[..*i].iter().rev().find(|s| !s.free());
        let holder = match before {
            None => "nothing".to_owned(),
            Some(s) => {
                let what = match s.token() {
                    Some(t) => match report.ends.iter().find(|e| e.0 == t) {
                        Some((_, c, end, at)) => {
                            format!("a guard of client {c} (ended {end:?} at {}ms)", ms(*at))
                        }
                        None => "an acquisition of a cancelled call".to_owned(),
                    },
                    None => {
                        let id = s.value.trim_start_matches('~');
                        match ids.iter().position(|x| x == id) {
                            Some(c) => format!("a reservation for client {c}"),
                            None => format!("a reservation for unknown client {id}"),
                        }
                    }
                };
                format!("{what}, last seen at {}ms", ms(s.sent))
            }
        };
        format!(
            "{d:?} (client {}, call {}ms..{}ms after start, {}; free from {}ms; before that the key held {holder})",
            m.client,
            ms(m.start),
            ms(m.end),
            if m.acquired { "acquired" } else { "timed out" },
            ms(samples[*i].recv),
        )
    });
    let mut seen_after_release = Vec::new();
    let mut linger = [Duration::ZERO; 2]; // dropped, release cancelled
    let mut lingered = Vec::new();
    let mut orphans = 0;
    let mut orphan_max = Duration::ZERO;
    let mut orphans_long = Vec::new();
    let mut reservations = (0u64, 0u64); // taken, lapsed
    for w in samples.windows(2) {
        if w[0].value.starts_with('~') && w[1].fence == w[0].fence {
            if w[1].free() {
                reservations.1 += 1;
            }
        } else if w[0].value.starts_with('~') && w[1].fence != w[0].fence {
            reservations.0 += 1;
        }
    }
    // Clients queued while no lock call of theirs was in progress.
    let mut calls: Vec<Vec<(Instant, Instant)>> = vec![Vec::new(); CLIENTS];
    for (c, from, until) in &report.in_progress {
        calls[*c].push((*from, *until));
    }
    // Sorted by start, with the latest end so far: "was a call in progress
    // at some point of [a, b]" is one binary search.
    let calls: Vec<Vec<(Instant, Instant)>> = calls
        .into_iter()
        .map(|mut v| {
            v.sort();
            let mut latest: Option<Instant> = None;
            for (_, until) in v.iter_mut() {
                latest = Some(latest.map_or(*until, |l| l.max(*until)));
                *until = latest.unwrap();
            }
            v
        })
        .collect();
    let busy = |c: usize, a: Instant, b: Instant| {
        let v = &calls[c];
        let i = v.partition_point(|(from, _)| *from <= b);
        i > 0 && v[i - 1].1 >= a
    };
    // New reservations (the release that made one ran after the previous
    // sample was sent) for a client with no lock call in progress since
    // 20 ms / 100 ms / QUEUE_GRACE before: reported, not checked.
    let mut reserved_idle = [0u64; 3];
    for w in samples.windows(2) {
        let Some(id) = w[1].value.strip_prefix('~') else {
            continue;
        };
        if w[0].value == w[1].value {
            continue;
        }
        let Some(c) = ids.iter().position(|x| x == id) else {
            continue;
        };
        for (n, d) in [
            Duration::from_millis(20),
            Duration::from_millis(100),
            QUEUE_GRACE,
        ]
        .into_iter()
        .enumerate()
        {
            let since = w[0].sent.checked_sub(d).unwrap_or(w[0].sent);
            if !busy(c, since, w[1].recv) {
                reserved_idle[n] += 1;
            }
        }
    }
    let mut queued_idle = Vec::new();
    let mut queued_idle_samples = 0;
    for s in &samples {
        for id in s.queue.split(' ').filter(|id| !id.is_empty()) {
            let Some(c) = ids.iter().position(|x| x == id) else {
                queued_idle.push(format!("unknown client {id} queued"));
                continue;
            };
            let since = s.sent.checked_sub(QUEUE_GRACE).unwrap_or(s.sent);
            if !busy(c, since, s.recv) {
                queued_idle_samples += 1;
                if queued_idle.len() < 3 {
                    queued_idle.push(format!(
                        "client {c} queued at {}ms with no lock call of its own since {}ms",
                        (s.sent - started).as_millis(),
                        calls[c]
                            .iter()
                            .filter(|(from, _)| *from <= s.recv)
                            .map(|(_, until)| (*until - started).as_millis())
                            .max()
                            .map_or("the start".to_owned(), |ms| format!("{ms}")),
                    ));
                }
            }
        }
    }
    // Tokens held past `BACKGROUND_BOUND` after their background release
    // should have started: (window start, is an orphan, description).
    let mut long: Vec<(Instant, bool, String)> = Vec::new();
    for (t, (first, last)) in &seen {
        match ends.get(t) {
            Some((End::Released, at)) if last > at => {
                seen_after_release.push(format!(
                    "{t} seen {:?} after release() returned",
                    *last - *at
                ));
            }
            Some((End::Released | End::ReleaseFailed, _)) => {}
            Some((kind, at)) => {
                let d = last.saturating_duration_since(*at);
                let slot = usize::from(*kind == End::ReleaseCancelled);
                linger[slot] = linger[slot].max(d);
                if d >= BACKGROUND_BOUND {
                    long.push((*at, false, format!("{t} ({kind:?}) still held {d:?} later")));
                }
            }
            None if !guards.contains(t) => {
                orphans += 1;
                let d = last.saturating_duration_since(*first);
                orphan_max = orphan_max.max(d);
                if d >= BACKGROUND_BOUND {
                    // Its call was dropped around the acquisition (the
                    // acquire was in flight).
                    let from = first.checked_sub(BACKGROUND_BOUND).unwrap_or(*first);
                    long.push((from, true, format!("{t} held at least {d:?}")));
                }
            }
            None => {}
        }
    }
    // A failed background release excuses one of them whose release started
    // within `BACKGROUND_BOUND` (orphans: twice that) before the failure was
    // logged. Windows in order of their end, each taking the earliest
    // unused failure in it: the most tokens excused.
    let failed_background = failed_releases(&prefix);
    let mut unused: Vec<Instant> = failed_background.iter().map(|(_, at)| *at).collect();
    unused.sort();
    let window_end =
        |from: Instant, orphan: bool| from + BACKGROUND_BOUND * if orphan { 2 } else { 1 };
    long.sort_by_key(|(from, orphan, _)| window_end(*from, *orphan));
    let mut excused = 0;
    for (from, orphan, what) in long {
        let to = window_end(from, orphan);
        if let Some(i) = unused.iter().position(|at| *at >= from && *at <= to) {
            unused.remove(i);
            excused += 1;
        } else if orphan {
            orphans_long.push(what);
        } else {
            lingered.push(what);
        }
    }

    let release_failed = ends
        .values()
        .filter(|(e, _)| *e == End::ReleaseFailed)
        .count();

    // --- What was measured.
    let cancelled: u64 = report.calls.iter().map(|c| c[3]).sum();
    let measured_ok = report.measured.iter().filter(|m| m.acquired).count();
    let intervals = samples
        .windows(2)
        .map(|w| w[1].sent - w[0].sent)
        .collect::<Vec<_>>();
    let mean_interval = intervals.iter().sum::<Duration>() / intervals.len().max(1) as u32;
    let max_interval = intervals.iter().max().copied().unwrap_or_default();
    println!(
        "{name}: {CLIENTS} clients x {TASKS} tasks on one key, leases {LEASE:?}/{LEASE:?}/{LONG_LEASE:?}, load {load:?} around {QUIET:?} quiet from {:?}, ended and drained after {drained:?}{}",
        quiet_from - started,
        kills.map_or(String::new(), |k| format!(", {k} pub/sub kills"))
            + &flushes.map_or(String::new(), |f| format!(
                ", {f} script cache flushes ({reloads} SCRIPT LOADs)"
            ))
    );
    for (k, label) in CANCEL_KINDS.iter().enumerate() {
        let c = report.calls[k];
        println!(
            "{name}:   cancellable lock calls, {label}: {} acquired, {} timed out, {} failed, {} cancelled",
            c[0], c[1], c[2], c[3]
        );
    }
    println!(
        "{name}:   {cancelled} lock futures cancelled; by polls {}; by age {}",
        hist(&POLL_BUCKETS, &report.cancel_polls),
        hist(&AGE_BUCKETS, &report.cancel_age)
    );
    println!(
        "{name}:   measured calls (wait {WAIT:?}): {} ({measured_ok} acquired)",
        report.measured.len()
    );
    println!(
        "{name}:   {} acquisitions: {} released, {} dropped, {} release() cancelled (by polls {}), {} raced release() completed; {} releases found the lock lost",
        report.acquired,
        report.released,
        report.dropped,
        report.release_cancelled,
        hist(&POLL_BUCKETS, &report.release_cancel_polls),
        report.release_race_completed,
        report.release_lost
    );
    println!("{name}:   ledger {totals:?}");
    println!(
        "{name}:   observer: {} samples, every {mean_interval:?} on average (longest gap {max_interval:?}); longest free stretch {free_any:?}; max free while a measured call waited {}; reservations taken {}, lapsed {}",
        samples.len(),
        worst_line.as_deref().unwrap_or("0s"),
        reservations.0,
        reservations.1
    );
    println!(
        "{name}:   tokens still held after: drop {:?}, cancelled release() {:?}; {orphans} orphan acquisitions of cancelled calls, longest held {orphan_max:?}; {} tokens seen after release() returned; {release_failed} release() calls and {} background releases failed{} ({excused} lingering tokens excused by them)",
        linger[0],
        linger[1],
        seen_after_release.len(),
        failed_background.len(),
        if failed_background.is_empty() {
            String::new()
        } else {
            let errors: HashSet<&str> = failed_background.iter().map(|(e, _)| e.as_str()).collect();
            format!(": {errors:?}")
        }
    );
    println!(
        "{name}:   samples showing a client queued with no lock call of its own for {QUEUE_GRACE:?}: {queued_idle_samples}; reservations for a client with no lock call for 20ms/100ms/{QUEUE_GRACE:?}: {reserved_idle:?}"
    );
    println!(
        "{name}:   clean {clean_after:?} after the load{}",
        if report.errors.is_empty() {
            String::new()
        } else {
            format!(
                "; {} errors, first: {:?}",
                report.errors.len(),
                &report.errors[..report.errors.len().min(5)]
            )
        }
    );

    // --- The checks.
    if totals.accepted == 0 || measured_ok == 0 {
        failures.push(format!(
            "nothing was exercised: ledger {totals:?}, {measured_ok} measured calls acquired"
        ));
    }
    if totals.overlaps != 0 {
        failures.push(format!("two holders overlapped: {totals:?}"));
    }
    if totals.stale != 0 {
        failures.push(format!("a stale fencing token was written: {totals:?}"));
    }
    if over > 0 {
        failures.push(format!(
            "{over} waiting lock calls saw the key free for >= {:?}; worst {}",
            LEASE + SLACK,
            worst_line.as_deref().unwrap_or_default()
        ));
    }
    if report.release_lost != 0 {
        failures.push(format!(
            "{} release() calls reported LockLost for a lock held a few ms",
            report.release_lost
        ));
    }
    if !seen_after_release.is_empty() {
        failures.push(format!(
            "{} tokens were still the lock after their release() returned: {:?}",
            seen_after_release.len(),
            &seen_after_release[..seen_after_release.len().min(3)]
        ));
    }
    if !lingered.is_empty() {
        failures.push(format!(
            "{} dropped guards / cancelled release() calls left the lock held >= {BACKGROUND_BOUND:?}: {:?}",
            lingered.len(),
            &lingered[..lingered.len().min(3)]
        ));
    }
    if !orphans_long.is_empty() {
        failures.push(format!(
            "{} acquisitions of cancelled lock calls held the lock >= {BACKGROUND_BOUND:?}: {:?}",
            orphans_long.len(),
            &orphans_long[..orphans_long.len().min(3)]
        ));
    }
    if queued_idle_samples > 0 {
        failures.push(format!(
            "{queued_idle_samples} samples showed a client in the queue with no lock call of its own for {QUEUE_GRACE:?}: {queued_idle:?}"
        ));
    }
    if !clean {
        failures.push(format!("left behind under {prefix}: {left:?}"));
    }
    assert!(
        failures.is_empty(),
        "{name} (seed {seed:#x}):\n  {}",
        failures.join("\n  ")
    );
}

/// Lock calls and releases cancelled at random points, on one key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_lock_and_release_calls_stay_safe_and_leave_nothing() {
    stress("plain", 0, Faults::default()).await;
}

/// The same while the pub/sub connections are killed every 700 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_with_pubsub_kills_stays_safe_and_leaves_nothing() {
    let faults = Faults {
        kill_pubsub: true,
        ..Faults::default()
    };
    stress("pubsub-kill", 0x5eed_0fc1_1e47_7100, faults).await;
}

/// The same while the lock server's script cache is flushed every 10-40 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_with_script_cache_flushes_stays_safe_and_leaves_nothing() {
    let faults = Faults {
        flush_scripts: true,
        ..Faults::default()
    };
    stress("script-flush", 0xf105_4000_0000_0000, faults).await;
}
