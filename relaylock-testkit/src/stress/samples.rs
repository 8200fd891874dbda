//! The observer: samples the lock's value (its head and queue) and its
//! record's fence counter in one atomic read on the lock's server, as the
//! three facts the checks use; and what is left under the prefix after a
//! run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;

use super::RETENTION;
use crate::{channels, keys};

pub(super) const SAMPLE: &str = r#"
local v = redis.call('GET', KEYS[1])
local f = redis.call('HGET', KEYS[1] .. ':f', 'f') or ''
if not v then return {'', f, ''} end
local head, queue = string.match(v, '^([^|]*)|([^|]*)|')
if not head then return {v, f, ''} end
local q = (string.gsub(queue, ',', ' '))
local kind = string.sub(head, 1, 1)
if kind == '-' then return {'', f, q} end
if kind == '~' then
  local c, keep = string.match(head, '^~([^:]*):%d+:(%d+)$')
  if redis.call('PTTL', KEYS[1]) <= tonumber(keep) then
    return {'', f, q}
  end
  return {'~' .. c, f, q}
end
return {head, f, q}
"#;

pub(super) struct Sample {
    pub(super) sent: Instant,
    pub(super) recv: Instant,
    /// The lock's head: `""` free (absent, a tombstone, a lapsed
    /// reservation), `"~<client>"` a hand-over reservation, else
    /// `"<token>:<fence>"` or a fast-path hold's `"<token>"`.
    pub(super) value: String,
    /// The record's fence counter (`""`: no record): every acquisition, and
    /// every refused fast-path try, increments it.
    pub(super) fence: String,
    /// The ids of the clients in the key's queue, space-separated.
    pub(super) queue: String,
}

impl Sample {
    pub(super) fn free(&self) -> bool {
        self.value.is_empty()
    }

    pub(super) fn token(&self) -> Option<&str> {
        if self.value.is_empty() || self.value.starts_with('~') {
            return None;
        }
        self.value.split(':').next()
    }
}

pub(super) async fn observe(admin: Client, lock: String, stop: Arc<AtomicBool>) -> Vec<Sample> {
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
/// `b`. An acquisition always increments the record's fence counter, and
/// every way for the key to become non-free again (a lock, a reservation,
/// which only a release of a lock makes) starts with one. So an unchanged
/// counter proves the key was free throughout, however long the gap. A
/// record that vanished (its retention ran out) proves it only over a gap
/// shorter than the record's shortest life (`RETENTION`).
pub(super) fn stays_free(a: &Sample, b: &Sample) -> bool {
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
pub(super) fn longest_free(samples: &[Sample]) -> (Duration, usize) {
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
pub(super) fn within(samples: &[Sample], from: Instant, to: Instant) -> (usize, &[Sample]) {
    let lo = samples.partition_point(|s| s.sent < from);
    let hi = samples.partition_point(|s| s.recv <= to);
    if lo >= hi {
        (lo, &[])
    } else {
        (lo, &samples[lo..hi])
    }
}

/// What is left under `prefix` that should not be: any key without a TTL;
/// any key but a void marker, the queue-times record or a free lock (a tombstone, or a lapsed
/// reservation) with nobody queued; and any subscribed channel.
pub(super) async fn leftovers(admin: &Client, prefix: &str) -> Vec<String> {
    let pattern = format!("{prefix}:*");
    let mut bad = Vec::new();
    for k in keys(admin, &pattern).await {
        let pttl: i64 = admin.pttl(&k).await.unwrap();
        if pttl == -2 {
            continue; // expired meanwhile
        }
        // A void marker, the lock's record (its fence counter and ring),
        // the queue-times record (scripts::QUEUE_TIMES, a hash with a TTL),
        // or a live client's record (its name, for
        // operators, with a TTL) are fine.
        let fine = if k.contains(":void:")
            || k.ends_with("}:f")
            || k.ends_with(relaylock::__scripts::QUEUE_TIMES)
            || k.contains(":4:client:")
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
        if !ch.contains(":4:client:") {
            bad.push(format!("channel {ch}"));
        }
    }
    bad
}
