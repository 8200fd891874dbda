//! The multi-key acquisition: every key of a set, in one global order, one
//! script call per slot group while nothing is busy.
//!
//! # Guarantees
//!
//! * Deadlock-free whatever order callers give: the keys are deduplicated
//!   and taken in one order that every client uses (hash slot, then key).
//!   A call waits only for a key after every key it holds, so no cycle of
//!   calls each waiting for a key another holds can form (docs/design.md,
//!   "Multi-key locks", has the argument).
//! * One request per slot group when nothing is busy: [`ACQUIRE_ALL`]
//!   takes every key of the group in order, or those up to the first busy
//!   one. On a busy key the call waits as a single lock call does ([`park`]:
//!   queued in the key's FIFO queue, woken by the targeted message, bounded
//!   by the holder's lease), keeping the keys it already has, then goes on
//!   with the rest of the group in one call.
//! * One deadline for the whole set: each call and each wait gets what is
//!   left of it.
//! * Cancellation: the keys taken are held by the [`MultiGuard`] being
//!   filled, which releases them when dropped; a script call in flight when
//!   the future is dropped is followed by a release of its token on each of
//!   its keys in the background (which also voids the token there, should
//!   the call reach Redis later); a wait dropped leaves no queue entry.
//!
//! [`ACQUIRE_ALL`]: crate::scripts::ACQUIRE_ALL

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::bytes_utils::Str;
use fred::interfaces::ClientLike;
use fred::util::redis_keyslot;
use metrics::SharedString;

use super::guards::OnDrop;
use super::{lease_began, park};
use crate::calls::TakenRun;
use crate::error::{Error, Result};
use crate::guard::{Acquired, LockGuard};
use crate::hold_id::HoldId;
use crate::inner::ClientInner;
use crate::metrics::{self as m, Outcome};
use crate::multi::{spawn_release, MultiGuard, Report, MAX_KEYS};
use crate::options::{validate_lease, LockOptions};
use crate::release::release_in_background;
use crate::scripts::{Kind, Names};
use crate::state::order::{groups, order};

/// The keys of one multi-key call: checked, deduplicated, in the global
/// order (hash slot, then key), with their slot groups.
pub(crate) struct KeySet {
    keys: Vec<String>,
    names: Vec<Names>,
    /// Each key's hash slot.
    slots: Vec<u16>,
    groups: Vec<Range<usize>>,
}

impl KeySet {
    /// Check and order `keys`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for no key, more than [`MAX_KEYS`], or a
    /// key a lock call would refuse; [`Error::Shutdown`] once the client is
    /// shut down.
    pub(crate) fn new<I, K>(inner: &ClientInner, keys: I) -> Result<KeySet>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
    {
        inner.check_open()?;
        let mut all: Vec<(u16, String, Names)> = Vec::new();
        for key in keys {
            if all.len() == MAX_KEYS {
                return Err(Error::InvalidArgument(format!(
                    "a multi-key lock takes at most {MAX_KEYS} keys"
                )));
            }
            let key = key.as_ref();
            inner.check_key(key)?;
            let names = Names::new(&inner.prefix, key);
            all.push((redis_keyslot(names.lock.as_bytes()), key.to_owned(), names));
        }
        if all.is_empty() {
            return Err(Error::InvalidArgument(
                "a multi-key lock needs at least one key".into(),
            ));
        }
        order(&mut all);
        let slots: Vec<u16> = all.iter().map(|(slot, _, _)| *slot).collect();
        let groups = groups(&slots, inner.calls.redis().is_clustered());
        let (keys, names) = all.into_iter().map(|(_, k, n)| (k, n)).unzip();
        Ok(KeySet {
            keys,
            names,
            slots,
            groups,
        })
    }
}

/// What every key of one call is taken with.
struct Terms<'a> {
    token: Str,
    lease: Duration,
    lease_ms: u64,
    renew: bool,
    name: Option<&'a SharedString>,
    started: Instant,
    deadline: Option<Instant>,
}

/// Take every key of `set` (`wait`: waiting for busy ones, else `None`
/// when one is busy), as `options` say. Records the call's metrics.
///
/// # Cancel safety
///
/// See the module's guarantees: dropped, it leaves no key held and no
/// queue entry.
pub(crate) async fn lock_all(
    inner: &Arc<ClientInner>,
    set: KeySet,
    options: &LockOptions,
    wait: bool,
) -> Result<Option<MultiGuard>> {
    // A shutdown ends the call and waits for what it releases (see `lock`).
    let _busy = inner.background.token();
    let started = Instant::now();
    let outcome = tokio::select! {
        biased;
        _ = inner.closing.cancelled() => Err(Error::Shutdown),
        outcome = take_all(inner, &set, options, wait, started) => outcome,
    };
    let name = options.name.as_ref();
    let kind = match &outcome {
        Ok(Some(held)) => {
            m::multi_keys(name, held.len());
            Outcome::Acquired
        }
        Ok(None) => return outcome,
        Err(Error::Timeout { .. } | Error::Unavailable { .. }) => Outcome::Timeout,
        Err(_) => Outcome::Error,
    };
    m::finished(name, Kind::Multi, kind, started.elapsed());
    outcome
}

/// The body of [`lock_all`]: group by group, each in runs of free keys
/// with a wait on each busy one between them.
async fn take_all(
    inner: &Arc<ClientInner>,
    set: &KeySet,
    options: &LockOptions,
    wait: bool,
    started: Instant,
) -> Result<Option<MultiGuard>> {
    if options.replicas.is_some() {
        return Err(Error::InvalidArgument(
            "min_replicas is not available for a multi-key lock".into(),
        ));
    }
    let lease = options.lease.unwrap_or(inner.default_lease);
    let terms = Terms {
        token: new_token(inner.registry.client_id()),
        lease,
        lease_ms: validate_lease(lease)?,
        renew: options.watchdog.unwrap_or(options.lease.is_none()),
        name: options.name.as_ref(),
        started,
        // A try (`wait` false) ignores the options' wait: each of its
        // calls is bounded by the command timeout.
        deadline: options
            .wait
            .filter(|_| wait)
            .and_then(|w| started.checked_add(w)),
    };
    let mut held = MultiGuard::new(Arc::clone(inner), options.name.clone());
    let mut waited = false;
    // Every error below ends the call: a run is never tried again with the
    // same token (ACQUIRE_ALL's void check, once per call on its first key,
    // relies on it: see `take_run`'s clean-up).
    for group in &set.groups {
        let mut at = group.start;
        loop {
            at = take_run(inner, set, at..group.end, &terms, &mut held)
                .await
                .map_err(|e| at_deadline(inner, &terms, &set.keys[at], e))?;
            if at == group.end {
                break;
            }
            if !wait {
                // Given back before the answer, so that the caller's next
                // try finds them free.
                let _ = held.release().await;
                return Ok(None);
            }
            let remaining = terms
                .deadline
                .map(|d| d.saturating_duration_since(Instant::now()));
            if remaining.is_some_and(|r| r.is_zero()) {
                return Err(timed_out(inner, &terms, &set.keys[at]));
            }
            let mut parked = options.clone();
            if let Some(r) = remaining {
                parked = parked.wait(r);
            }
            let names = set.names[at].clone();
            let guard = park(inner, &set.keys[at], names, terms.token.clone(), &parked).await?;
            held.push(guard, set.slots[at]);
            waited = true;
            at += 1;
            if at == group.end {
                break;
            }
        }
    }
    // A fixed lease (no watchdog) runs from when its key was taken: one
    // that ran out while a later key was awaited makes the set incomplete.
    if let Some(key) = held.lost_key() {
        return Err(Error::LockLost { key });
    }
    // After a wait, a fixed lease (no watchdog) is given in full to every
    // key again: the set's lease counts from when it was complete.
    if waited && !terms.renew {
        held.extend(terms.lease).await?;
    }
    held.acquired();
    Ok(Some(held))
}

/// One [`ACQUIRE_ALL`](crate::scripts::ACQUIRE_ALL) call for the keys
/// `run` of `set`: the guards of the keys it took go into `held`. Returns
/// the index of the first key not taken (`run.end` when all were).
async fn take_run(
    inner: &Arc<ClientInner>,
    set: &KeySet,
    run: Range<usize>,
    terms: &Terms<'_>,
    held: &mut MultiGuard,
) -> Result<usize> {
    let names: Vec<&Names> = set.names[run.clone()].iter().collect();
    m::attempt(terms.name, Kind::Multi);
    // An answer we never learn (future dropped, reply lost, timeout) may
    // have taken any of the keys: release the token on each of them (and
    // void it there, should the call reach Redis later), one call per slot
    // group.
    let orphan = OnDrop(Some(|| {
        let holds = names.iter().map(|n| {
            let hold = HoldId {
                names: (*n).clone(),
                token: terms.token.clone(),
                fence: None,
                permits: 1,
            };
            (hold, None)
        });
        let _ = spawn_release(inner, holds.collect(), Report::default());
    }));
    // `wait(0)`: one call, bounded by the command timeout.
    let within = terms
        .deadline
        .filter(|d| *d > terms.started)
        .map(|d| d.saturating_duration_since(Instant::now()));
    let sent = Instant::now();
    let call = inner
        .calls
        .acquire_all(&names, &terms.token, terms.lease_ms, within);
    let TakenRun { taken, .. } = Box::pin(call).await?;
    orphan.disarm();
    let mut at = run.start;
    let mut fences = taken.into_iter();
    for (fence, left) in fences.by_ref() {
        let acquired = Acquired {
            key: set.names[at].key_in(&set.keys[at]),
            id: HoldId::held(set.names[at].clone(), terms.token.clone(), fence, 1),
            name: terms.name.cloned(),
            sent: left.map_or(sent, |l| lease_began(sent, terms.lease, l)),
            lease: terms.lease,
            renew: terms.renew,
        };
        at += 1;
        match LockGuard::new(Arc::clone(inner), acquired) {
            Ok(guard) => held.push(guard, set.slots[at - 1]),
            Err(e) => {
                // The shutdown began: it released that key; release the
                // rest of the run too.
                for (fence, _) in fences {
                    let hold = HoldId::held(set.names[at].clone(), terms.token.clone(), fence, 1);
                    release_in_background(Arc::clone(inner), hold, None);
                    at += 1;
                }
                return Err(e);
            }
        }
    }
    Ok(at)
}

/// A new token for one multi-key call, the same on every key.
fn new_token(client: &str) -> Str {
    let mut buf = String::with_capacity(crate::token::LEN);
    crate::token::push(&mut buf, client);
    Str::from(buf)
}

/// A call that ran out at the deadline is the deadline's error.
fn at_deadline(inner: &ClientInner, terms: &Terms<'_>, key: &str, e: Error) -> Error {
    match e {
        Error::Redis(e)
            if *e.kind() == fred::error::ErrorKind::Timeout
                && terms.deadline.is_some_and(|d| Instant::now() >= d) =>
        {
            timed_out(inner, terms, key)
        }
        other => other,
    }
}

/// The deadline passed while `key` was not taken: [`Error::Unavailable`]
/// when the command connection is down, else [`Error::Timeout`].
fn timed_out(inner: &ClientInner, terms: &Terms<'_>, key: &str) -> Error {
    let redis = inner.calls.redis();
    if redis.is_connected() {
        return Error::Timeout {
            key: key.to_owned(),
        };
    }
    Error::Unavailable {
        key: key.to_owned(),
        server: crate::error::servers(&redis.client_config()),
        waited: terms.started.elapsed(),
    }
}
