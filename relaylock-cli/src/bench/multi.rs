//! One acquisition of several keys in a bench worker (`--keys-per-lock`):
//! a random set of distinct keys, named in random order, taken by the
//! run's strategy: one relaylock multi-key lock (`pubsub`, `poll:<ms>`),
//! single relaylock locks one by one with a bounded wait, released and
//! started over when one runs out (`onebyone:<ms>`, Redisson's
//! `MultiLock`), or the bare lock's all-or-nothing script, polled
//! (`bare:<ms>`). Each key acquired is one record, so every per-acquisition
//! figure of the run is per key.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use relaylock::{Error, LockGuard, LockOptions, MultiGuard};
use tokio::sync::watch;

use crate::bench::stats::Record;
use crate::bench::strategy::Strategy;
use crate::bench::task::{now_ns, Rng, Shared, TaskResult};

/// What one acquisition holds.
enum Held {
    Multi(MultiGuard),
    Singles(Vec<LockGuard>),
    /// The bare lock: the Redis names and the token.
    Bare(Vec<String>, String),
}

/// One acquisition of a random set (or, `--single-share` of the time, one
/// key with a single-key lock), its critical section, its release.
pub(crate) async fn round(
    shared: &Shared,
    rng: &mut Rng,
    stop: &mut watch::Receiver<bool>,
    out: &mut TaskResult,
) {
    let keys = draw(shared, rng);
    let t_call = now_ns();
    let taken = tokio::select! {
        biased;
        _ = stop.changed() => return,
        r = take(shared, &keys, out) => r,
    };
    let held = match taken {
        Ok(held) => held,
        Err(e) => {
            out.error(e);
            tokio::time::sleep(Duration::from_millis(10)).await;
            return;
        }
    };
    let t_acq = now_ns();
    for &k in &keys {
        if shared.inside[k].fetch_add(1, Ordering::SeqCst) >= 1 {
            out.violations += 1;
        }
    }
    if !shared.hold.is_zero() {
        tokio::time::sleep(shared.hold).await;
    }
    for &k in &keys {
        shared.inside[k].fetch_sub(1, Ordering::SeqCst);
    }
    let t_rel = now_ns();
    let fences = fences(shared, &held);
    let records: Vec<Record> = keys
        .iter()
        .map(|&k| {
            let fence = fences.get(&k).copied().unwrap_or(t_acq);
            (k as u32, fence, t_call, t_acq, t_rel)
        })
        .collect();
    match release(shared, held).await {
        Ok(true) => {}
        Ok(false) | Err(Error::LockLost { .. }) => out.lost += 1,
        Err(e) => out.error(e),
    }
    out.acquired_keys(shared, records);
}

/// The keys of one acquisition: distinct, in a random order; one key for a
/// `--single-share` draw.
fn draw(shared: &Shared, rng: &mut Rng) -> Vec<usize> {
    let kpl = shared.keys_per_lock;
    let single = (rng.next() % 1_000_000) as f64 / 1e6 < shared.single_share;
    let n = if single {
        1
    } else {
        kpl.min + (rng.next() % (kpl.max - kpl.min + 1) as u64) as usize
    };
    // A partial Fisher-Yates shuffle: n distinct keys in a random order.
    let mut all: Vec<usize> = (0..shared.keys.len()).collect();
    for i in 0..n {
        let j = i + (rng.next() % (all.len() - i) as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(n);
    all
}

/// Take `keys` by the run's strategy.
async fn take(shared: &Shared, keys: &[usize], out: &mut TaskResult) -> Result<Held, Error> {
    let names: Vec<&str> = keys.iter().map(|&k| shared.keys[k].as_str()).collect();
    let client = &shared.client;
    match (shared.strategy, names.as_slice()) {
        (Strategy::Bare(_), _) => {
            let bare = shared.bare.as_ref().expect("bare:<ms> has its lock");
            let redis: Vec<String> = names.iter().map(|k| client.redis_key(k)).collect();
            let token = uuid::Uuid::new_v4().to_string();
            let token = bare.lock_all(&redis, token).await.map_err(Error::from)?;
            Ok(Held::Bare(redis, token))
        }
        (_, [one]) => Ok(Held::Singles(vec![client.lock(one).await?])),
        (Strategy::OneByOne(wait), _) => one_by_one(shared, &names, wait, out).await,
        _ => Ok(Held::Multi(client.lock_all(&names).await?)),
    }
}

/// Redisson's way: each lock in the caller's order with a bounded wait;
/// on a timeout, release them all and start over.
async fn one_by_one(
    shared: &Shared,
    names: &[&str],
    wait: Duration,
    out: &mut TaskResult,
) -> Result<Held, Error> {
    loop {
        let mut guards = Vec::with_capacity(names.len());
        let mut timed_out = false;
        for name in names {
            let options = LockOptions::default().wait(wait);
            match shared.client.lock_with(name, options).await {
                Ok(g) => guards.push(g),
                Err(Error::Timeout { .. }) => {
                    timed_out = true;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if !timed_out {
            return Ok(Held::Singles(guards));
        }
        out.restarts += 1;
        for g in guards {
            let _ = g.release().await;
        }
    }
}

/// Each key's fencing token, by key index (none for the bare lock: the
/// moment it was taken, the records' default, orders a key's holders the
/// same way).
fn fences(shared: &Shared, held: &Held) -> HashMap<usize, u64> {
    let index = |key: &str| shared.keys.iter().position(|k| k == key);
    let at = |key: &str| {
        // Keys are `k<i>` (see the worker's `connect`): read i back.
        key.strip_prefix('k')
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|&i| shared.keys.get(i).is_some_and(|k| k == key))
            .or_else(|| index(key))
    };
    match held {
        Held::Multi(g) => g
            .fencing_tokens()
            .filter_map(|(k, f)| Some((at(k)?, f)))
            .collect(),
        Held::Singles(gs) => gs
            .iter()
            .filter_map(|g| Some((at(g.key())?, g.fencing_token())))
            .collect(),
        Held::Bare(..) => HashMap::new(),
    }
}

/// Release what `held` holds: `Ok(false)` when a key was found lost.
async fn release(shared: &Shared, held: Held) -> Result<bool, Error> {
    match held {
        Held::Multi(g) => g.release().await.map(|()| true),
        Held::Singles(gs) => {
            let mut all = Ok(true);
            for g in gs {
                match g.release().await {
                    Ok(()) => {}
                    Err(e) if all.is_ok() => all = Err(e),
                    Err(_) => {}
                }
            }
            all
        }
        Held::Bare(names, token) => {
            let bare = shared.bare.as_ref().expect("bare:<ms> has its lock");
            bare.unlock_all(&names, &token).await.map_err(Error::from)
        }
    }
}
