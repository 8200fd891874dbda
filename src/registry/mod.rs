//! Key -> local waiters, and the reference-counted subscription of each key's
//! release channel.
//!
//! # Guarantees
//!
//! * A channel is subscribed (and the subscription confirmed by Redis) before
//!   any waiter relies on it: [`Waiter::ensure_subscribed`] returns only after
//!   a `PING` sent behind the `SUBSCRIBE` on the same connection came back.
//! * The first waiter of a key subscribes, the last one to leave unsubscribes
//!   (after [`linger`](crate::LockClientBuilder::unsubscribe_linger), so a
//!   key in steady use is not resubscribed on every hand-over).
//! * The race of the last waiter leaving while a new one arrives leaks nothing
//!   and strands nobody: see [`Registry::linger_then_unsubscribe`]. At most
//!   one clean-up task runs per key, however often its last waiter leaves.
//! * What the waiters of a key know of its holder is shared ([`Estimate`]):
//!   the CURRENT holder's lease end, as the newest observation says (a try's
//!   `PTTL`, a `t:<lease>` message, a local acquisition), so no waiter
//!   sleeps past it on an earlier holder's longer lease.
//! * A release message wakes ONE local waiter ([`Notify::notify_one`], which
//!   stores a permit when nobody is parked yet, so a message arriving between a
//!   failed try and the wait is not lost). A reconnect or a lagged message
//!   stream wakes EVERY waiter of every key ([`Registry::wake_all`]).

mod releasing;
mod subscription;
mod waiter;

pub(crate) use releasing::Releasing;
pub(crate) use waiter::{NotSubscribed, PollerRole, Waiter};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use fred::bytes_utils::Str;
use fred::clients::SubscriberClient;
use fred::types::config::Server;
use rapidhash::fast::RandomState;
use tokio::sync::futures::Notified;
use tokio::sync::{Mutex, Notify};

use crate::calls::Calls;
use crate::scripts::{Kind, Names, HANDOFF_GRACE_MS};
use crate::state::estimate::Estimate;
use crate::state::handoff::{Claim, Inbox, Wake};
use crate::state::presence::Presence;
use crate::state::sync;
use tokio_util::task::TaskTracker;

/// `d` from now, saturating where the clock cannot represent it (a
/// deadline in a drop path or a background task must never panic).
fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}

/// The local waiters of one key.
#[derive(Debug)]
pub(crate) struct KeyWaiters {
    /// One permit per release message; waiters queue on it in FIFO order.
    pub(crate) notify: Notify,
    /// The waiter count, the confirmation flag, the queue flags, and the
    /// handshakes between them (see [`Presence`]).
    presence: Presence,
    /// Whether SUBSCRIBE was sent (and not undone) on the subscriber connection.
    /// Every SUBSCRIBE/UNSUBSCRIBE of this channel happens under this mutex,
    /// so they reach Redis in the order the registry decided them.
    subscribed: Mutex<bool>,
    /// Counts the SUBSCRIBEs and UNSUBSCRIBEs of this channel (changed only
    /// under `subscribed`): a resubscription confirms a channel only if no
    /// other one came after its own (see [`Registry::resubscribe_all`]).
    subscription_changes: AtomicU64,
    /// What this client knows of the holder's lease (see [`Estimate`]).
    estimate: sync::Mutex<Estimate>,
    /// Woken (`notify_waiters`) when the next re-check moves EARLIER, or the
    /// channel's subscription was confirmed after a failure, so sleepers
    /// recompute how long (and in which mode) they wait.
    estimate_moved: Notify,
    /// Counts the messages of this key's channel, so a grace timer can tell
    /// whether anything was announced after it started.
    announcements: AtomicU64,
    /// While the subscription cannot be confirmed, ONE local waiter holds
    /// this role and polls; the others sleep until it is handed on.
    poller: AtomicBool,
    /// Notified (one permit) when the polling role is free again.
    poller_freed: Notify,
    /// When the lingering subscription may end; `Some` while the one
    /// clean-up task of this entry runs (see [`Registry::linger_then_unsubscribe`]).
    linger_until: std::sync::Mutex<Option<Instant>>,
    /// Redis Cluster: the node the subscription was last confirmed on.
    node: std::sync::Mutex<Option<Server>>,
    /// Local waiters a release of this client may hand the lock to directly.
    inbox: Arc<Inbox<Notify>>,
    /// A semaphore's local waiters: what each needs, `(permits, limit)`,
    /// one entry per registered waiter that said (a few per key; the
    /// largest goes into the queue entry, see [`KeyWaiters::max_need`]).
    needs: std::sync::Mutex<Vec<(u32, u32)>>,
}

/// What a message on a lock's channel announces.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Announcement<'a> {
    /// Released; free for whoever tries (`r:`), or anything unrecognised.
    Free,
    /// Released and reserved for this client (`r:<client>`).
    ReservedFor(&'a str),
    /// A semaphore's release reserved permits for its own client (`o:<client>`),
    /// which woke its waiter itself; other clients stay queued behind it.
    Kept(&'a str),
    /// A reservation was taken; the new lease lasts this long (`t:<ms>`).
    Taken(Duration),
}

impl Wake for Notify {
    fn wake(&self) {
        self.notify_one();
    }
}

impl<'a> Announcement<'a> {
    pub(crate) fn parse(payload: &'a str) -> Self {
        if let Some(client) = payload.strip_prefix("r:") {
            if !client.is_empty() {
                return Announcement::ReservedFor(client);
            }
        } else if let Some(client) = payload.strip_prefix("o:").filter(|c| !c.is_empty()) {
            return Announcement::Kept(client);
        } else if let Some(ms) = payload.strip_prefix("t:").and_then(|ms| ms.parse().ok()) {
            return Announcement::Taken(Duration::from_millis(ms));
        }
        Announcement::Free
    }
}

impl KeyWaiters {
    fn estimate(&self) -> sync::MutexGuard<'_, Estimate> {
        sync::lock(&self.estimate)
    }

    fn new() -> Self {
        KeyWaiters {
            notify: Notify::new(),
            presence: Presence::new(),
            subscribed: Mutex::new(false),
            subscription_changes: AtomicU64::new(0),
            estimate: sync::Mutex::new(Estimate::default()),
            estimate_moved: Notify::new(),
            announcements: AtomicU64::new(0),
            poller: AtomicBool::new(false),
            poller_freed: Notify::new(),
            linger_until: std::sync::Mutex::new(None),
            node: std::sync::Mutex::new(None),
            inbox: Arc::new(Inbox::default()),
            needs: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Wake one local waiter if any waits (a permit for nobody would cost
    /// the next newcomer a try).
    fn wake_one_if_waiting(&self) {
        if self.presence.count() > 0 {
            self.notify.notify_one();
        }
    }

    fn needs(&self) -> std::sync::MutexGuard<'_, Vec<(u32, u32)>> {
        self.needs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What this client's queue entry asks for, with its limit: the largest
    /// need among the semaphore waiters registered now, or for a
    /// read-write lock's readers (`kind` Read, all needing 1) their number,
    /// so a write's release reserves for all of them at once, ahead of a
    /// writer that queued after them (the largest need alone would let one
    /// reader per client in per write). `None` when none said.
    fn want(&self, kind: Kind) -> Option<(u32, u32)> {
        let needs = self.needs();
        let largest = needs.iter().copied().max()?;
        if kind == Kind::Read {
            let total = needs.iter().map(|(n, _)| u64::from(*n)).sum::<u64>();
            let limit = largest.1;
            return Some((u32::try_from(total).unwrap_or(limit).min(limit), limit));
        }
        Some(largest)
    }

    fn linger_until(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.linger_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record an observation of the holder's lease (see
    /// [`Estimate::observe`]); wake sleepers when the next re-check moved
    /// earlier.
    fn observe(&self, seen: Instant, lease: Duration, own: bool) {
        let moved_earlier = self.estimate().observe(seen, lease, own);
        if moved_earlier {
            self.estimate_moved.notify_waiters();
        }
    }
}

/// The registry of one [`LockClient`](crate::LockClient).
#[derive(Debug)]
pub(crate) struct Registry {
    map: DashMap<Str, Arc<KeyWaiters>, RandomState>,
    /// Woken with `notify_waiters` on a reconnect or a lag: every waiter
    /// re-checks.
    wake_all: Notify,
    subscriber: SubscriberClient,
    /// The script calls, to leave a lock's (or semaphore's) queue.
    calls: Calls,
    /// This client's id in the locks' queues.
    client_id: Str,
    /// Its id as a read-write lock's writer, `<client_id>.w` (made once:
    /// every try and message of a writer compares with it).
    writer_id: Str,
    /// `:<client_id>`: a lock's messages for this client come on its
    /// channel with this suffix (protocol 3, see [`Registry::wire`]).
    wire_suffix: String,
    linger: Duration,
    /// Bound of every command relaylock sends on the subscriber connection,
    /// whatever the fred client's own settings.
    command_timeout: Duration,
    /// Reconnects of the subscriber connection seen so far.
    reconnects: AtomicU64,
    /// Sharded pub/sub (SSUBSCRIBE/SPUBLISH): Redis Cluster on Redis 7+.
    sharded: bool,
    /// The client is gone: clean-up tasks stop retrying.
    closed: AtomicBool,
    /// The client's tasks that a shutdown waits for: queue leaves here.
    background: TaskTracker,
}

impl Registry {
    pub(crate) fn new(
        subscriber: SubscriberClient,
        calls: Calls,
        client_id: String,
        linger: Duration,
        command_timeout: Duration,
        sharded: bool,
        background: TaskTracker,
    ) -> Self {
        Registry {
            map: DashMap::default(),
            wake_all: Notify::new(),
            subscriber,
            calls,
            writer_id: Str::from(format!("{client_id}.w")),
            wire_suffix: format!(":{client_id}"),
            client_id: Str::from(client_id),
            linger,
            command_timeout,
            reconnects: AtomicU64::new(0),
            sharded,
            closed: AtomicBool::new(false),
            background,
        }
    }

    /// This client's id in the locks' queues.
    pub(crate) fn client_id(&self) -> &Str {
        &self.client_id
    }

    /// Whether this client uses sharded pub/sub (`SPUBLISH`, `SSUBSCRIBE`).
    pub(crate) fn sharded(&self) -> bool {
        self.sharded
    }

    /// This client's id in the queue of a primitive of `kind`: a read-write
    /// lock's writers queue as `<id>.w`, apart from its readers (`<id>`), so
    /// each role keeps its own place and its own wake-ups.
    pub(crate) fn role_id(&self, kind: Kind) -> &Str {
        match kind {
            Kind::Write => &self.writer_id,
            _ => &self.client_id,
        }
    }

    /// Whether any channel is subscribed or being subscribed (entries live
    /// while they have waiters, and for the linger after the last one left).
    pub(crate) fn has_channels(&self) -> bool {
        !self.map.is_empty()
    }

    /// Register a task for `channel` (before its first try). It stays
    /// registered until the returned [`Waiter`] is dropped. The flag is true
    /// when other local tasks were already registered: the newcomer should
    /// queue behind them instead of trying first.
    pub(crate) fn join(self: &Arc<Self>, channel: &Str) -> (Waiter, bool) {
        // The channel's name is shared (`Names`): the map's key and the
        // waiter's copy cost no allocation.
        let (entry, before) = {
            let e = self
                .map
                .entry(channel.clone())
                .or_insert_with(|| Arc::new(KeyWaiters::new()));
            let before = e.presence.join();
            (Arc::clone(&e), before)
        };
        let waiter = Waiter::new(Arc::clone(self), channel.clone(), entry);
        (waiter, before)
    }

    /// A future that completes at the next [`wake_all`](Self::wake_all). It
    /// sees every `wake_all` that happens after this call, even before it is
    /// first polled.
    pub(crate) fn reconnected(&self) -> Notified<'_> {
        self.wake_all.notified()
    }

    /// A message arrived on `channel`.
    ///
    /// * A release free for all, or reserved for this client, wakes one local
    ///   waiter (or stores a permit for the next one).
    /// * A release reserved for another client wakes nobody now. One timer
    ///   wakes one local waiter when the grace period ends, unless another
    ///   message came meanwhile (normally `t:`, the reservation was taken):
    ///   that waiter probes in case the other client never came.
    /// * A taken reservation moves the key's expiry estimate to the new lease.
    /// * A semaphore's permits come back silently when a reservation lapses
    ///   unused, so there every reservation, this client's own included,
    ///   arms the grace timer; a local acquisition also counts as news (see
    ///   [`Waiter::note_taken`]), so a busy semaphore arms timers that never
    ///   fire.
    pub(crate) fn on_message(&self, channel: &str, payload: &str) {
        let channel = self.unwire(channel);
        let Some(e) = self.map.get(channel) else {
            return;
        };
        let generation = e.announcements.fetch_add(1, SeqCst) + 1;
        let kind = Names::kind_of_channel(channel);
        let semaphore = kind.counted();
        let me = self.role_id(kind);
        match Announcement::parse(payload) {
            Announcement::Free => e.notify.notify_one(),
            Announcement::ReservedFor(c) if c == &**me => {
                e.notify.notify_one();
                if semaphore {
                    probe_after_grace(e.value(), generation);
                }
            }
            // Our own release woke the waiter that takes it (and armed the
            // timer).
            Announcement::Kept(c) if c == &**me => {}
            // A reservation for another client (also one its own release
            // made) that may lapse unused: probe after the grace.
            Announcement::ReservedFor(_) | Announcement::Kept(_) => {
                probe_after_grace(e.value(), generation);
            }
            Announcement::Taken(lease) => e.observe(Instant::now(), lease, false),
        }
    }

    /// A release of this client reserved semaphore permits for this client,
    /// or handed a lock to another client with this one its stand-by (no
    /// message tells it): arm the grace timer, as a message would.
    fn reserved_here(&self, channel: &str) {
        if let Some(e) = self.map.get(channel) {
            let generation = e.announcements.fetch_add(1, SeqCst) + 1;
            probe_after_grace(e.value(), generation);
        }
    }

    /// Claim up to `max` open offers of `channel`'s local waiters (a
    /// read-write lock's readers that one reader's acquire takes permits
    /// for, see `crate::state::handoff`).
    pub(crate) fn claim_many(&self, channel: &str, max: usize) -> Vec<Claim<Notify>> {
        let Some(entry) = self.map.get(channel) else {
            return Vec::new();
        };
        let mut claims = Vec::new();
        while claims.len() < max {
            match Inbox::claim(&entry.inbox) {
                Some(c) => claims.push(c),
                None => break,
            }
        }
        claims
    }

    /// Wake up to `n` local waiters of `channel`, no more than are
    /// registered (one lookup; a semaphore's release may free many permits).
    fn wake_up_to(&self, channel: &str, n: usize) {
        if let Some(e) = self.map.get(channel) {
            for _ in 0..n.min(e.presence.count()) {
                e.notify.notify_one();
            }
        }
    }

    /// Wake one local waiter of `channel` if any waits (a permit for nobody
    /// would cost the next newcomer a try).
    pub(crate) fn wake_one_if_waiting(&self, channel: &str) {
        if let Some(e) = self.map.get(channel) {
            e.wake_one_if_waiting();
        }
    }

    /// Wake every waiter of every key to re-check.
    pub(crate) fn wake_all(&self) {
        self.wake_all.notify_waiters();
    }

    /// The client is going away: clean-up tasks stop retrying.
    pub(crate) fn close(&self) {
        self.closed.store(true, SeqCst);
    }

    /// A release script of this client is about to be sent for `channel`.
    /// When local tasks still wait for the key, returns a [`Requeue`]: the
    /// script should queue this client again, and the returned value must
    /// live until the script's outcome is known (or abandoned). `None`: no
    /// local waiter, do not queue again.
    ///
    /// While a requeue is in flight, the last local waiter to leave does not
    /// take the client out of the queue (its `LEAVE` could run before the
    /// release script, which queues it again, leaving a client queued with
    /// nobody waiting); the
    /// [`Requeue`] does it when dropped if nobody waits by then.
    fn requeue(self: &Arc<Self>, channel: &str) -> Option<Requeue> {
        let entry = Arc::clone(self.map.get(channel)?.value());
        if !entry.presence.begin_requeue() {
            // The last waiter may have left between the two lines above and
            // seen our count: the queue clean-up is ours then.
            self.leave_queue_if_idle(channel, &entry);
            return None;
        }
        Some(Requeue {
            registry: Arc::clone(self),
            channel: channel.to_owned(),
            entry,
        })
    }

    /// Take this client out of the lock's queue if a try or a release
    /// queued it and no local task waits any more. Runs in the background.
    fn leave_queue_if_idle(self: &Arc<Self>, channel: &str, entry: &Arc<KeyWaiters>) {
        // Dekker with `Waiter::drop` and `Requeue::drop`: each lowers its
        // counter, then reads the other's (SeqCst), so the last of them to
        // finish sees both at zero.
        if !entry.presence.take_queue_leave() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let registry = Arc::clone(self);
        let entry = Arc::clone(entry);
        let names = Names::of_channel(channel);
        let background = self.background.clone();
        let leave = async move {
            let role = registry.role_id(names.kind);
            let idle = || entry.presence.count() == 0;
            // The whole call, a reload after `NOSCRIPT` included, within
            // one command timeout, whatever the fred client's own settings.
            let leave = registry.calls.leave(&names, role, idle);
            let left = tokio::time::timeout(registry.command_timeout, leave)
                .await
                .unwrap_or_else(|_| Err(crate::error::timed_out().into()));
            if let Err(e) = left {
                tracing::debug!(error = %e, "relaylock: could not leave the queue; the next hand-over skips this client");
            }
            // A waiter that arrived meanwhile may have queued before the LEAVE
            // ran and been taken out with it: wake one to try (and queue) again.
            entry.wake_one_if_waiting();
        };
        background.spawn_on(leave, &handle);
    }

    /// The last local waiter of `entry` left: leave the queue at once, and
    /// end the subscription after the linger.
    fn last_waiter_left(self: &Arc<Self>, channel: &str, entry: &Arc<KeyWaiters>) {
        self.leave_queue_if_idle(channel, entry);
        let start = {
            let mut until = entry.linger_until();
            let first = until.is_none();
            *until = Some(after(self.linger));
            first
        };
        if !start {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(
                    Arc::clone(self).linger_then_unsubscribe(channel.to_owned(), Arc::clone(entry)),
                );
            }
            Err(_) => {
                *entry.linger_until() = None;
                tracing::debug!(
                    "relaylock: no runtime to unsubscribe on; the subscription ends with the client"
                );
            }
        }
    }
}

/// Wake one local waiter of `entry` when the hand-over grace has passed,
/// unless anything was announced (or, for a semaphore, taken locally) since
/// `generation`: a reservation nobody took has lapsed by then, and the
/// waiter's try hands its permits on.
fn probe_after_grace(entry: &Arc<KeyWaiters>, generation: u64) {
    let entry = Arc::clone(entry);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(HANDOFF_GRACE_MS + 1)).await;
        if entry.announcements.load(SeqCst) == generation {
            entry.notify.notify_one();
        }
    });
}

/// A release script in flight that may queue this client again (see
/// [`Registry::requeue`]). Dropping it marks the client queued, and takes
/// it out of the queue again when no local task waits any more.
#[derive(Debug)]
pub(crate) struct Requeue {
    registry: Arc<Registry>,
    channel: String,
    entry: Arc<KeyWaiters>,
}

impl Requeue {
    /// The largest number of permits a local waiter of this semaphore
    /// needs now, with its limit (`None` before any waiter said: the
    /// release then does not queue the client again, and that waiter's own
    /// try does).
    pub(crate) fn need(&self) -> Option<(u32, u32)> {
        self.entry.want(Names::kind_of_channel(&self.channel))
    }
}

impl Drop for Requeue {
    fn drop(&mut self) {
        self.entry.presence.end_requeue();
        self.registry
            .leave_queue_if_idle(&self.channel, &self.entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::pin::pin;
    use std::task::{Context, Poll};

    /// A registry on fred clients that never connect: the in-process paths
    /// (join, wake-ups, hand-ons, the grace timer, the polling role) do no
    /// I/O, so they run here without Redis, on tokio's paused clock.
    fn offline_registry() -> Arc<Registry> {
        let builder = fred::types::Builder::default_centralized();
        Arc::new(Registry::new(
            builder.build_subscriber_client().unwrap(),
            Calls::new(
                builder.build().unwrap(),
                crate::scripts::Scripts::new(),
                Duration::from_secs(1),
                crate::scripts::SIDE_RETENTION_MS,
                "PUBLISH",
            ),
            "me".into(),
            Duration::from_millis(50),
            Duration::from_secs(1),
            false,
            TaskTracker::new(),
        ))
    }

    fn ready<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> bool {
        let waker = std::task::Waker::noop();
        matches!(f.poll(&mut Context::from_waker(waker)), Poll::Ready(_))
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_wakes_one_waiter_in_order_and_a_dropped_wakeup_is_passed_on() {
        let r = offline_registry();
        let (a, queued_a) = r.join(&Str::from("ch"));
        let (b, queued_b) = r.join(&Str::from("ch"));
        let (c, _) = r.join(&Str::from("ch"));
        assert!(!queued_a && queued_b);
        let mut na = pin!(a.notified());
        let mut nb = Box::pin(b.notified());
        let mut nc = pin!(c.notified());
        assert!(!ready(na.as_mut()) && !ready(nb.as_mut()) && !ready(nc.as_mut()));
        r.on_message("ch", "r:");
        // One release, one wake-up: the first to wait.
        assert!(ready(na.as_mut()));
        assert!(!ready(nb.as_mut()) && !ready(nc.as_mut()));
        // A release reserved for this client wakes one too; if the woken
        // waiter is cancelled before it runs, the wake-up passes on.
        r.on_message("ch", "r:me");
        drop(nb);
        assert!(ready(nc.as_mut()));
        // A waiter leaving during its try hands the re-check on: with nobody
        // waiting, the permit is kept for the next one to wait.
        a.pass_on();
        assert!(ready(pin!(b.notified())));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reservation_for_another_client_wakes_one_waiter_after_the_grace_unless_taken() {
        let r = offline_registry();
        let (a, _) = r.join(&Str::from("ch"));
        let mut na = pin!(a.notified());
        assert!(!ready(na.as_mut()));
        // Reserved for another client, which takes it (`t:`) in time.
        r.on_message("ch", "r:other");
        tokio::time::sleep(Duration::from_millis(10)).await;
        r.on_message("ch", "t:1000");
        tokio::time::sleep(Duration::from_millis(HANDOFF_GRACE_MS * 2)).await;
        assert!(
            !ready(na.as_mut()),
            "woken although the reservation was taken"
        );
        // Reserved for another client that never comes: after the grace,
        // one waiter probes.
        r.on_message("ch", "r:other");
        tokio::time::sleep(Duration::from_millis(HANDOFF_GRACE_MS - 5)).await;
        assert!(!ready(na.as_mut()));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(ready(na.as_mut()), "nobody probed the lapsed reservation");
    }

    #[tokio::test(start_paused = true)]
    async fn the_polling_role_is_held_once_and_handed_on() {
        let r = offline_registry();
        let (a, _) = r.join(&Str::from("ch"));
        let (b, _) = r.join(&Str::from("ch"));
        let role = a.take_poller_role().expect("free");
        assert!(b.take_poller_role().is_none());
        let mut freed = pin!(b.poller_freed());
        assert!(!ready(freed.as_mut()));
        drop(role);
        assert!(ready(freed.as_mut()), "the role's release woke nobody");
        assert!(b.take_poller_role().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_current_lease_wakes_sleepers_once() {
        let r = offline_registry();
        let (a, _) = r.join(&Str::from("ch"));
        // Observations in the past, so the message below is the newest.
        let t0 = Instant::now() - Duration::from_millis(5);
        a.note_pttl(t0, Duration::from_secs(10));
        let mut moved = pin!(a.estimate_moved());
        assert!(!ready(moved.as_mut()));
        // The same lease seen again (jitter): nobody is woken.
        a.note_pttl(t0 + Duration::from_micros(300), Duration::from_secs(10));
        assert!(!ready(moved.as_mut()));
        // Another client took over with a 1 s lease.
        r.on_message("ch", "t:1000");
        assert!(ready(moved.as_mut()));
        assert!(a.until_due().unwrap() <= Duration::from_millis(1001));
    }

    #[test]
    fn announcements() {
        assert_eq!(Announcement::parse("r:"), Announcement::Free);
        assert_eq!(
            Announcement::parse("r:abc"),
            Announcement::ReservedFor("abc")
        );
        assert_eq!(
            Announcement::parse("t:30000"),
            Announcement::Taken(Duration::from_secs(30))
        );
        assert_eq!(Announcement::parse("o:abc"), Announcement::Kept("abc"));
        assert_eq!(Announcement::parse("o:"), Announcement::Free);
        assert_eq!(Announcement::parse("t:x"), Announcement::Free);
        assert_eq!(Announcement::parse("1795238504002345"), Announcement::Free);
        assert_eq!(Announcement::parse(""), Announcement::Free);
    }
}
