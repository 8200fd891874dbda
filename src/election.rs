//! [`Election`]: one leader among the candidates of a fleet, on the lock's
//! machinery.
//!
//! # Implementation details
//!
//! An election named `N` is the lock on the key `election:N`. A candidate
//! campaigns by taking that lock (FIFO among candidates, woken by the
//! release message, renewed by the watchdog whatever the options say); the
//! lock's fencing token is the leader's term, strictly greater than every
//! earlier term. Once it holds the lock, the leader writes its value and
//! the moment it began leading into the lock's record (`PROCLAIM`: only
//! while the lock holds its token), where [`Election::leader`] reads them
//! with the lock's value at one instant (`LEADER`). A record's value that
//! belongs to another token (an earlier leader's) is not reported.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::bytes_utils::Str;
use fred::types::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::acquire::{self, Want};
use crate::calls::{observe_channel, ELECTION_PREFIX};
use crate::error::{Error, Result};
use crate::guard::{lost_while_working, until_lost, LockGuard};
use crate::inner::ClientInner;
use crate::observers::{Leader, Observed};
use crate::options::LockOptions;

/// The longest value a candidate may proclaim, in bytes.
pub const MAX_LEADER_VALUE: usize = 64 * 1024;

/// An election among the clients of a deployment: at most one leader at a
/// time, each term fenced. Made by
/// [`LockClient::election`](crate::LockClient::election); cheap to clone.
///
/// ```no_run
/// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
/// let election = client.election("scheduler");
/// let leadership = election.campaign("pod-7").await?; // waits its turn
/// let term = leadership.fencing_token();
/// // ... run the scheduler, fencing its writes with `term` ...
/// leadership.resign().await?;
/// # let _ = term; Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    inner: Arc<ClientInner>,
    name: String,
    key: String,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// This client's leadership of an election: a held lock, renewed by the
/// watchdog. Dropping it resigns in the background.
#[must_use = "dropping a leadership resigns it (in the background)"]
pub struct Leadership {
    /// `None` once resigned.
    guard: Option<LockGuard>,
    inner: Arc<ClientInner>,
    since: SystemTime,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.guard().key())
            .field("term", &self.guard().fencing_token())
            .finish_non_exhaustive()
    }
}

impl Election {
    pub(crate) fn new(inner: Arc<ClientInner>, name: &str) -> Self {
        Election {
            inner,
            name: name.to_owned(),
            key: format!("{ELECTION_PREFIX}{name}"),
        }
    }

    /// The election's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key of the lock the election is (`election:<name>`): do not lock
    /// it yourself.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Campaign with the default options: wait, first come first served
    /// among the candidates, until this client leads.
    ///
    /// # Errors
    ///
    /// As [`campaign_with`](Self::campaign_with).
    ///
    /// # Cancel safety
    ///
    /// As [`campaign_with`](Self::campaign_with).
    pub async fn campaign(&self, value: &str) -> Result<Leadership> {
        self.campaign_with(value, LockOptions::default()).await
    }

    /// Campaign: take the election's lock with `options` (its wait bounds
    /// the campaign; the watchdog renews a leadership whatever the options
    /// say, so a leader leads until it resigns or is lost), then proclaim
    /// `value`.
    ///
    /// # Errors
    ///
    /// Those of [`LockClient::lock_with`](crate::LockClient::lock_with), and [`Error::InvalidArgument`] for
    /// a value over [`MAX_LEADER_VALUE`]; [`Error::LockLost`] when the
    /// leadership was lost before its value could be written.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped while waiting, it leaves no queue entry; dropped
    /// after it was elected, the leadership is resigned in the background.
    pub async fn campaign_with(&self, value: &str, options: LockOptions) -> Result<Leadership> {
        check_value(value)?;
        let options = options.watchdog(true);
        let taken = acquire::lock(&self.inner, &self.key, &options, Want::LOCK);
        let guard = Box::pin(taken).await?;
        self.elected(guard, value).await
    }

    /// One attempt: `Ok(None)` when another candidate leads (or candidates
    /// queue: they are served first).
    ///
    /// # Errors
    ///
    /// As [`campaign_with`](Self::campaign_with), without
    /// [`Error::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// As [`campaign_with`](Self::campaign_with).
    pub async fn try_campaign(&self, value: &str) -> Result<Option<Leadership>> {
        check_value(value)?;
        let options = LockOptions::default().watchdog(true);
        let tried = acquire::try_lock(&self.inner, &self.key, &options, Want::LOCK);
        match Box::pin(tried).await? {
            Some(guard) => self.elected(guard, value).await.map(Some),
            None => Ok(None),
        }
    }

    /// The lock is this client's: proclaim `value` and hand the leadership
    /// over (a guard dropped on the way resigns).
    async fn elected(&self, guard: LockGuard, value: &str) -> Result<Leadership> {
        let leadership = Leadership {
            inner: Arc::clone(&self.inner),
            since: SystemTime::now(),
            guard: Some(guard),
        };
        leadership.proclaim(value).await?;
        Ok(leadership)
    }

    /// Who leads now, read from Redis (one request): `None` when nobody
    /// does (no candidate holds the lock, or a hand-over between two is in
    /// progress).
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] for a connection error or a command timeout. (A
    /// value relaylock did not write in the election's key counts as held by
    /// another owner, as for a lock: a leader with an empty value.)
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.read().await?.0)
    }

    /// Who leads, and the leader's lease (how often an observer reads
    /// again while nothing is heard).
    async fn read(&self) -> Result<(Option<Leader>, Option<Duration>)> {
        let names = self.inner.names(&self.key);
        let reply = self.inner.calls.leader(&names).await?;
        let lease = reply
            .get(5)
            .and_then(|v| v.as_string()?.parse::<u64>().ok())
            .map(Duration::from_millis);
        Ok((read_leader(&reply), lease))
    }

    /// Who leads, as it changes: the receiver's value is the leader (or
    /// `None`: nobody leads), updated when the leader is elected, proclaims,
    /// resigns, or is lost or expires. A change announced by a message
    /// (an election, a proclamation, a resignation) arrives within a few
    /// round trips; one nobody announces (a leader that died and whose
    /// lease ran out) by the next read, at most one lease later. Every
    /// receiver of the process shares one subscription and one reader,
    /// which reads once when it starts, once per message, after a
    /// reconnect, and once per lease while nothing is heard; it stops when
    /// the last receiver is dropped, or at the client's shutdown. Called
    /// outside a tokio runtime, the receiver stays `None`.
    ///
    /// The watch keeps the latest value: a receiver that looks less often
    /// than the leadership changes sees the latest leader, not every one.
    pub fn observe(&self) -> watch::Receiver<Option<Leader>> {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // Nothing could read: a receiver whose sender is gone.
            return watch::channel(None).1;
        };
        let names = self.inner.names(&self.key);
        let channel = observe_channel(&names);
        let (rx, new) = self.inner.observers.join(&channel);
        if let Some(observed) = new {
            handle.spawn(watch_leader(self.clone(), channel, observed));
        }
        rx
    }

    /// Run `work` while this client leads: campaign (with `options`), run
    /// the closure, then resign, and return the closure's value. If the
    /// leadership is found lost while `work` runs, the closure's future is
    /// dropped at its next await point and the call fails with
    /// [`Error::LockLost`]; leadership is given up only after the closure
    /// has returned or been dropped, and nothing runs for a client that
    /// never led.
    ///
    /// # Errors
    ///
    /// Those of [`campaign_with`](Self::campaign_with) and
    /// [`Leadership::resign`], and [`Error::LockLost`].
    ///
    /// # Cancel safety
    ///
    /// Dropped while campaigning: as [`campaign_with`](Self::campaign_with).
    /// Dropped while the closure runs: the closure's future is dropped with
    /// it, then the leadership is resigned in the background.
    pub async fn with_leadership<F, T>(
        &self,
        value: &str,
        options: LockOptions,
        work: F,
    ) -> Result<T>
    where
        F: AsyncFnOnce(&Leadership) -> T,
    {
        let leadership = self.campaign_with(value, options).await?;
        match until_lost(leadership.lost(), work(&leadership)).await {
            Some(value) => leadership.resign().await.map(|()| value),
            None => Err(lost_while_working(&self.inner, &self.key)),
        }
    }
}

impl Leadership {
    /// The term: the fencing token of this leadership, strictly greater
    /// than every earlier term of the election. Pass it with every write
    /// the leader makes, so a store can refuse a deposed leader's.
    pub fn fencing_token(&self) -> u64 {
        self.guard().fencing_token()
    }

    /// The guard, until the leadership is resigned (only `resign` and the
    /// drop take it, consuming the leadership).
    fn guard(&self) -> &LockGuard {
        self.guard
            .as_ref()
            .expect("a leadership has its guard until it is resigned")
    }

    /// Since when this client leads, by its clock.
    pub fn since(&self) -> SystemTime {
        self.since
    }

    /// The key of the election's lock (`election:<name>`).
    pub fn election(&self) -> &str {
        self.guard().key()
    }

    /// The token of this leadership (its client's id first), as
    /// `relaylock status` shows the holder of the election's lock.
    pub fn token(&self) -> &str {
        self.guard().token()
    }

    /// Whether this client still leads, by its knowledge: not found lost,
    /// and the lease confirmed last has not run out (as
    /// [`LockGuard::is_held`]).
    pub fn is_leader(&self) -> bool {
        self.guard().is_held()
    }

    /// Completes when the leadership is known lost, before another
    /// candidate can be elected while leases hold (as [`LockGuard::lost`]),
    /// or when it is resigned.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future changes nothing.
    pub async fn lost(&self) {
        self.guard().lost().await
    }

    /// A token cancelled when [`lost`](Self::lost) completes: hand it to
    /// the tasks that must stop when this client no longer leads.
    pub fn lost_token(&self) -> CancellationToken {
        self.guard().lost_token()
    }

    /// Proclaim a new value: what [`Election::leader`] reports from now on.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when this client no longer leads (nothing is
    /// written); [`Error::InvalidArgument`] for a value over
    /// [`MAX_LEADER_VALUE`]; [`Error::Redis`] for a connection error or a
    /// command timeout (safe to retry).
    ///
    /// # Cancel safety
    ///
    /// The value may or may not be written when the future is dropped;
    /// proclaiming again is harmless.
    pub async fn proclaim(&self, value: &str) -> Result<()> {
        check_value(value)?;
        let since = self
            .since
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis() as u64;
        let guard = self.guard();
        let names = self.inner.names(guard.key());
        let token = Str::from(guard.token());
        let lease_ms = guard.lease().as_millis() as u64;
        let written = self
            .inner
            .calls
            .proclaim(&names, &token, value, since, lease_ms)
            .await?;
        if written {
            return Ok(());
        }
        Err(Error::LockLost {
            key: guard.key().to_owned(),
        })
    }

    /// Resign: release the election's lock, so the candidate queued first
    /// is elected.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`]: [`Error::LockLost`] when the leadership
    /// had been lost already.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future resigns in the background, as dropping the
    /// leadership does.
    pub async fn resign(mut self) -> Result<()> {
        let guard = self.guard.take().expect("a leadership is resigned once");
        give_up(&self.inner, guard).await
    }
}

/// Release a leadership's lock, then tell the election's observers (a
/// candidate elected next announces itself too; a failed announcement
/// costs them one lease at most).
async fn give_up(inner: &ClientInner, guard: LockGuard) -> Result<()> {
    let names = inner.names(guard.key());
    let released = guard.release().await;
    let _ = inner.calls.announce(&names).await;
    released
}

impl Drop for Leadership {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        // Resign in the background, then announce it; without a runtime
        // the guard's own drop says what happens.
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            drop(guard);
            return;
        };
        let inner = Arc::clone(&self.inner);
        let background = inner.background.clone();
        background.spawn_on(
            async move {
                let _ = give_up(&inner, guard).await;
            },
            &handle,
        );
    }
}

/// One election's reader for the observers of this process: read, publish
/// a change to the receivers, wait for a message, a reconnect's wake-up or
/// the leader's lease; stop when no receiver is left.
async fn watch_leader(election: Election, channel: String, observed: Arc<Observed>) {
    let inner = Arc::clone(&election.inner);
    // However the reader ends (shutdown, its runtime gone), its entry goes
    // with it: the receivers see the sender gone, and a later `observe`
    // starts a new reader.
    let _entry = Forget {
        inner: Arc::clone(&inner),
        channel: channel.clone(),
        observed: Arc::clone(&observed),
    };
    let (subscriber, sharded, limit) = (
        inner.tasks.subscriber.clone(),
        inner.registry.sharded(),
        inner.command_timeout,
    );
    // Subscribed before the first read: no change falls between the two.
    let _ = crate::subscriber::observe_channel(&subscriber, sharded, &channel, limit).await;
    loop {
        let period = match election.read().await {
            Ok((leader, lease)) => {
                observed.leader.send_if_modified(|seen| {
                    let changed = *seen != leader;
                    *seen = leader;
                    changed
                });
                lease.unwrap_or(inner.default_lease)
            }
            // Read again soon: a reconnect wakes it too.
            Err(_) => limit.min(Duration::from_secs(1)),
        };
        tokio::select! {
            () = observed.changed.notified() => {}
            () = tokio::time::sleep(period) => {}
            () = inner.closing.cancelled() => return,
            () = observed.leader.closed() => {
                if inner.observers.leave_if_unobserved(&channel) {
                    let _ = crate::subscriber::unobserve_channel(&subscriber, sharded, &channel, limit).await;
                    // A new reader may have subscribed before this
                    // UNSUBSCRIBE went: subscribe again, and have it read.
                    if inner.observers.is_observed(&channel) {
                        let _ = crate::subscriber::observe_channel(&subscriber, sharded, &channel, limit).await;
                        inner.observers.on_message(&channel);
                    }
                    return;
                }
            }
        }
    }
}

/// Drops a reader's entry when the reader ends (see `watch_leader`).
struct Forget {
    inner: Arc<ClientInner>,
    channel: String,
    observed: Arc<Observed>,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.inner.observers.forget(&self.channel, &self.observed);
    }
}

/// A value a candidate may proclaim.
fn check_value(value: &str) -> Result<()> {
    if value.len() > MAX_LEADER_VALUE {
        return Err(Error::InvalidArgument(format!(
            "an election's value is {} bytes, the limit is {MAX_LEADER_VALUE}",
            value.len()
        )));
    }
    Ok(())
}

/// The leader in `LEADER`'s reply `{value, f, ev, et, es}`.
fn read_leader(reply: &[Value]) -> Option<Leader> {
    let text = |i: usize| reply.get(i).and_then(|v| v.as_string());
    let value = text(0)?;
    let head = value.split('|').next().unwrap_or_default();
    if head.is_empty() || head.starts_with('-') || head.starts_with('~') {
        return None;
    }
    let (token, fence) = match head.split_once(':') {
        Some((token, fence)) => (token, fence.parse::<u64>().ok()),
        None => (head, None),
    };
    let fencing_token = fence.or_else(|| text(1)?.parse().ok()).unwrap_or(0);
    let ours = text(3).is_some_and(|t| t == token);
    let since = ours
        .then(|| text(4)?.parse::<u64>().ok())
        .flatten()
        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
        .or_else(|| crate::token::made_at(token))
        .unwrap_or(UNIX_EPOCH);
    Some(Leader {
        value: if ours {
            text(2).unwrap_or_default()
        } else {
            String::new()
        },
        fencing_token,
        since,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(items: &[Option<&str>]) -> Vec<Value> {
        items
            .iter()
            .map(|i| i.map_or(Value::Null, |s| Value::String(Str::from(s.to_owned()))))
            .collect()
    }

    #[test]
    fn the_leader_is_read_from_the_lock_and_its_record() {
        let t = "0123456789abcdef-0000000000000001";
        // A fast-path hold: the fence is the record's counter; the value
        // is the record's when it belongs to this token.
        let r = reply(&[Some(t), Some("77"), Some("pod-7"), Some(t), Some("1000")]);
        assert_eq!(
            read_leader(&r),
            Some(Leader {
                value: "pod-7".into(),
                fencing_token: 77,
                since: UNIX_EPOCH + Duration::from_millis(1000),
            })
        );
        // A hold with its fence in the value, queued candidates; the
        // record's value is an earlier leader's: not reported.
        let held = format!("{t}:90|abc|");
        let r = reply(&[
            Some(&held),
            Some("90"),
            Some("old"),
            Some("other"),
            Some("5"),
        ]);
        let l = read_leader(&r).unwrap();
        assert_eq!((l.value.as_str(), l.fencing_token), ("", 90));
        // Nobody leads: absent, a tombstone, a hand-over.
        for v in [None, Some("-90||"), Some("~abc:90:60000|")] {
            assert_eq!(
                read_leader(&reply(&[v, Some("90"), None, None, None])),
                None
            );
        }
    }
}
