//! One acquisition of several keys in a bench worker (`--keys-per-lock`):
//! a random set of distinct keys, named in random order, taken by the
//! run's strategy: one relaylock multi-key lock (`pubsub`, `poll:<ms>`),
//! single relaylock locks one by one with a bounded wait, released and
//! started over when one runs out (`onebyone:<ms>`, Redisson's
//! `MultiLock`), or the bare lock's all-or-nothing script, polled
//! (`bare:<ms>`). Each key acquired is one record, so every per-acquisition
//! figure of the run is per key.

use std::sync::atomic::Ordering;
use std::time::Duration;

use relaylock::{Error, LockGuard, LockOptions, MultiGuard};
use tokio::sync::watch;

use crate::bench::stats::Record;
use crate::bench::strategy::Strategy;
use crate::bench::worker::{now_ns, Rng, Shared, TaskResult};

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
    let records: Vec<Record> = keys
        .iter()
        .map(|&k| {
            (
                k as u32,
                fence(shared, &held, k, t_acq),
                t_call,
                t_acq,
                t_rel,
            )
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
    let mut keys: Vec<usize> = Vec::with_capacity(n);
    while keys.len() < n {
        let k = (rng.next() % shared.keys.len() as u64) as usize;
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
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

/// Key `k`'s fencing token (the bare lock has none: the moment it was
/// taken orders a key's holders the same way).
fn fence(shared: &Shared, held: &Held, k: usize, t_acq: u64) -> u64 {
    let key = shared.keys[k].as_str();
    match held {
        Held::Multi(g) => g.fencing_token(key).unwrap_or(0),
        Held::Singles(gs) => gs
            .iter()
            .find(|g| g.key() == key)
            .map_or(0, LockGuard::fencing_token),
        Held::Bare(..) => t_acq,
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
