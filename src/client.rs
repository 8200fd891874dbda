//! [`LockClient`]: the public entry points. Everything it does is delegated
//! down: to the acquire loop for `lock`/`try_lock`, to the script calls for
//! `is_locked`; it owns nothing but a handle on the shared state.

use std::fmt;
use std::sync::Arc;

use fred::clients::Client;

use crate::acquire::{self, Want};
use crate::builder::LockClientBuilder;
use crate::election::Election;
use crate::error::{Error, Result};
use crate::guard::{lost_while_working, run_holding, until_lost, LockGuard};
use crate::inner::ClientInner;
use crate::multi::MultiGuard;
use crate::options::LockOptions;
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;

/// A handle to relaylock on one Redis deployment.
///
/// Cheap to clone: clones share one command connection, one subscriber
/// connection, one waiter registry and one subscriber task. Dropping the last
/// clone (and the last guard) stops the subscriber task and closes the
/// connections relaylock opened.
///
/// ```no_run
/// # async fn demo() -> relaylock::Result<()> {
/// use std::time::Duration;
/// use relaylock::{LockClient, LockOptions};
///
/// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.lock("orders:42").await?;
/// // ... the critical section; pass guard.fencing_token() to the resource ...
/// guard.release().await?;
///
/// let opts = LockOptions::default().wait(Duration::from_secs(2));
/// match client.lock_with("orders:42", opts).await {
///     Ok(guard) => guard.release().await?,
///     Err(relaylock::Error::Timeout { .. }) => { /* busy */ }
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<ClientInner>,
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("prefix", &self.inner.prefix)
            .field("default_lease", &self.inner.default_lease)
            .field("strategy", &self.inner.strategy)
            .finish_non_exhaustive()
    }
}

impl LockClient {
    /// Connect to the Redis at `url` (`redis://[user:password@]host:port[/db]`)
    /// with every other setting at its default. See [`builder`](Self::builder).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a malformed URL;
    /// [`Error::ConnectTimeout`] when the server cannot be reached within the
    /// connect timeout (5 s by default), [`Error::Connect`] when the
    /// connection fails before it (refused, TLS, authentication); see
    /// [`LockClientBuilder::build`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockClientBuilder::build`].
    pub async fn connect(url: &str) -> Result<LockClient> {
        LockClient::builder().url(url).build().await
    }

    /// A builder with every setting at its default.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }

    /// Release everything this client holds and stop it: for a graceful
    /// exit, so that no lock of this process stays held for its lease after
    /// the process is gone.
    ///
    /// It stops the watchdog; releases every lock, permit, read and write
    /// that a guard of this client still holds (live guards as well as
    /// dropped ones whose background release is in flight); ends every lock
    /// call waiting on any clone with [`Error::Shutdown`] and takes this
    /// client out of every queue; waits for all of that, each release
    /// bounded by the command timeout; then stops the subscriber and closes
    /// the connections relaylock opened (a client passed in with
    /// [`fred_client`](crate::LockClientBuilder::fred_client) stays open).
    ///
    /// From the moment it begins, every call on any clone fails with
    /// [`Error::Shutdown`]: `lock`, `try_lock`, `is_locked`, `inspect`, the
    /// semaphore and read-write calls, and a guard's `extend`. A guard whose
    /// hold the shutdown released fires its [`lost`](crate::LockGuard::lost)
    /// signal (without counting a loss), and its `release` returns
    /// `Err(Error::Shutdown)`.
    ///
    /// Idempotent: a second call (on any clone) after the first completed
    /// returns `Ok(())` at once; calls made while one runs wait for it and
    /// then return `Ok(())` (the errors are the running call's to report).
    /// A `with_lock` (or `with_permit`, `with_read`, `with_write`) whose
    /// hold the shutdown released fails with `Error::Shutdown`.
    ///
    /// ```no_run
    /// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
    /// // ... serve until the process is asked to stop ...
    /// client.shutdown().await?; // every key this process held is free now
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The first error of a release it made ([`Error::Redis`] for a
    /// connection error or a command timeout; that hold then expires with its
    /// lease), or [`Error::Redis`] with a timeout when the background work
    /// did not end within four command timeouts (a lock call whose future is
    /// kept but never polled holds it up). The client is shut down either
    /// way.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the client refusing every call (the
    /// shutdown began), and the releases it started run to their end in the
    /// background; the subscriber and the connections are then stopped only
    /// when the last clone is dropped, or by calling `shutdown` again.
    pub async fn shutdown(&self) -> Result<()> {
        crate::shutdown::shutdown(&self.inner).await
    }

    /// Take the lock on `key`, waiting as long as it takes. Uses the client's
    /// default lease, renewed by the watchdog while the guard lives. Same as
    /// [`lock_with`](Self::lock_with) with default options.
    ///
    /// Locks are not reentrant: a task (or any task of any clone) that holds
    /// the lock on `key` and calls `lock(key)` again waits for its own guard
    /// to be released, like a second `tokio::sync::Mutex::lock` in the same
    /// task. Pass the guard down instead of locking again.
    ///
    /// # Errors
    ///
    /// As [`lock_with`](Self::lock_with).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`lock_with`](Self::lock_with): dropping the future
    /// at any await point leaves no lock held and no waiter registered.
    pub async fn lock(&self, key: &str) -> Result<LockGuard> {
        self.lock_with(key, LockOptions::default()).await
    }

    /// Take the lock on `key` with the given options: a wait limit (then
    /// [`Error::Timeout`] when it runs out), a lease, a metrics name.
    ///
    /// ```no_run
    /// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
    /// use std::time::Duration;
    /// use relaylock::{Error, LockOptions};
    ///
    /// let opts = LockOptions::default().wait(Duration::from_secs(2)).name("orders");
    /// match client.lock_with("orders:42", opts).await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(Error::Timeout { .. }) => { /* busy: try later */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// * [`Error::InvalidArgument`] for an empty or over-long key, or a lease
    ///   out of range, before anything is sent;
    /// * [`Error::Timeout`] when the wait limit passes first, or
    ///   [`Error::Unavailable`] when it passes while Redis cannot be reached
    ///   (the wait is a deadline for the whole call, commands in flight
    ///   included);
    /// * [`Error::NotReplicated`] when fewer replicas than
    ///   [`LockOptions::min_replicas`] asked for acknowledged in time, or
    ///   (with 0 acknowledged) when the acknowledgement could not be
    ///   attributed to this lock: the connection changed before `WAIT`, or
    ///   the server it reached did not hold this acquisition. The lock was
    ///   released (or, if even that failed, expires with its lease);
    /// * [`Error::Redis`] for a connection error or a command timeout, and
    ///   [`Error::UnexpectedReply`] when the key holds something relaylock
    ///   did not write. A waiter does not retry errors: retry the call;
    /// * [`Error::Shutdown`] once [`shutdown`](Self::shutdown) began (a wait
    ///   in progress ends with it).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe. Dropping the future at any await point leaves no lock
    /// held and no waiter registered: a wake-up it had received is passed to
    /// the next local waiter, and an acquire script in flight (which may have
    /// taken the lock without the reply reaching us) is followed by a release
    /// of its token in the background. The same holds when the future is
    /// unwound by a panic (in a `metrics` recorder, say): a lock it had
    /// taken but not yet handed over as a guard is released.
    pub async fn lock_with(&self, key: &str, options: LockOptions) -> Result<LockGuard> {
        // Boxed: the wait loop's state machine is large (several kB in a
        // debug build), and a caller's own future stays small with it on the
        // heap. One allocation per call, next to at least one round trip.
        Box::pin(acquire::lock(&self.inner, key, &options, Want::LOCK)).await
    }

    /// Run `work` under the lock on `key`: take the lock (with `options`),
    /// run the closure, release the lock, and return the closure's value.
    ///
    /// If the lock is found lost while `work` runs (see
    /// [`LockGuard::lost`]), the closure's future is dropped at its next
    /// await point and the call fails with [`Error::LockLost`]. It also fails
    /// with `LockLost` when the release finds the lease already ran out,
    /// because another owner may then have run concurrently; the closure's
    /// value is lost with it, so make its effects safe to repeat (or fence
    /// them with [`LockGuard::fencing_token`]).
    ///
    /// ```no_run
    /// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
    /// use relaylock::LockOptions;
    ///
    /// let total = client
    ///     .with_lock("ledger", LockOptions::default(), async |guard| {
    ///         // ... the critical section; guard.fencing_token() fences writes ...
    ///         guard.fencing_token() % 10
    ///     })
    ///     .await?;
    /// # let _ = total; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`lock_with`](Self::lock_with) while taking the lock, those
    /// of [`LockGuard::release`] after the closure, and
    /// [`Error::LockLost`] when the lock was found lost while the closure ran.
    ///
    /// # Cancel safety
    ///
    /// Dropped while waiting: as [`lock_with`](Self::lock_with). Dropped
    /// while the closure runs: the closure's future is dropped with it and
    /// the lock is released in the background. Dropped while releasing: the
    /// release completes in the background.
    pub async fn with_lock<F, T>(&self, key: &str, options: LockOptions, work: F) -> Result<T>
    where
        F: AsyncFnOnce(&LockGuard) -> T,
    {
        let guard = self.lock_with(key, options).await?;
        run_holding(guard, work).await
    }

    /// Take the locks on every key of `keys` together: a multi-key lock.
    /// The same as [`lock_all_with`](Self::lock_all_with) with the default
    /// options.
    ///
    /// # Errors
    ///
    /// As [`lock_all_with`](Self::lock_all_with).
    ///
    /// # Cancel safety
    ///
    /// As [`lock_all_with`](Self::lock_all_with).
    pub async fn lock_all<I, K>(&self, keys: I) -> Result<MultiGuard>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
    {
        self.lock_all_with(keys, LockOptions::default()).await
    }

    /// Take the locks on every key of `keys` together, with `options` (one
    /// wait for the whole set, one lease for every key, one metrics name).
    ///
    /// Deadlock-free whatever order callers give the keys in: they are
    /// deduplicated and taken in one order every client uses (hash slot,
    /// then key). While no key is busy it costs one request per slot group
    /// (one on a single server, whatever the number of keys), and one to
    /// release. On a busy key the call waits in that key's FIFO queue as a
    /// [`lock`](Self::lock) of it would, keeping the keys it already holds
    /// (safe, as every caller takes keys in the same order), woken by the
    /// release message sent to it alone. Each key is an ordinary lock: a
    /// single-key `lock` of one of them waits for the multi-key hold, and
    /// the reverse. (The order covers the keys of one call: a task that
    /// already holds another lock while it waits here is outside it, as
    /// with nested single locks.)
    ///
    /// ```no_run
    /// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
    /// use std::time::Duration;
    /// use relaylock::LockOptions;
    ///
    /// let seats = ["show:9:seat:14", "show:9:seat:15", "show:9:seat:16"];
    /// let opts = LockOptions::default().wait(Duration::from_secs(2));
    /// let guard = client.lock_all_with(seats, opts).await?;
    /// for (seat, fence) in guard.fencing_tokens() {
    ///     // ... book `seat`, fenced by `fence` ...
    /// #   let _ = (seat, fence);
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// * [`Error::InvalidArgument`] for no key, more than
    ///   [`MAX_KEYS`](crate::MAX_KEYS), a key a single lock would refuse, a
    ///   lease out of range, or [`LockOptions::min_replicas`] (not available
    ///   for a multi-key lock), before anything is sent;
    /// * [`Error::Timeout`] (naming the key waited for) when the wait limit
    ///   passes first, or [`Error::Unavailable`] when it passes while Redis
    ///   cannot be reached;
    /// * [`Error::Redis`], [`Error::UnexpectedReply`] and [`Error::Shutdown`]
    ///   as for [`lock_with`](Self::lock_with).
    ///
    /// On any error no key is left held: those taken are released (in the
    /// background).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe. Dropping the future at any await point leaves no key
    /// held and no queue entry: the keys taken are released in the
    /// background, a script call in flight is followed by a release of its
    /// token on each of its keys, and a wait on a busy key ends as a
    /// dropped [`lock_with`](Self::lock_with) does.
    pub async fn lock_all_with<I, K>(&self, keys: I, options: LockOptions) -> Result<MultiGuard>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
    {
        let set = acquire::KeySet::new(&self.inner, keys)?;
        let held = Box::pin(acquire::lock_all(&self.inner, set, &options, true)).await?;
        held.ok_or_else(|| Error::UnexpectedReply("a waiting multi-key call gave up".into()))
    }

    /// One attempt at every key of `keys`, never waiting: `Ok(None)` (and no
    /// key held) when any of them is busy.
    ///
    /// # Errors
    ///
    /// As [`lock_all_with`](Self::lock_all_with), without
    /// [`Error::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// As [`lock_all_with`](Self::lock_all_with).
    pub async fn try_lock_all<I, K>(&self, keys: I) -> Result<Option<MultiGuard>>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
    {
        self.try_lock_all_with(keys, LockOptions::default()).await
    }

    /// [`try_lock_all`](Self::try_lock_all) with `options` (the wait is
    /// ignored).
    ///
    /// # Errors
    ///
    /// As [`try_lock_all`](Self::try_lock_all).
    ///
    /// # Cancel safety
    ///
    /// As [`lock_all_with`](Self::lock_all_with).
    pub async fn try_lock_all_with<I, K>(
        &self,
        keys: I,
        options: LockOptions,
    ) -> Result<Option<MultiGuard>>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
    {
        let set = acquire::KeySet::new(&self.inner, keys)?;
        Box::pin(acquire::lock_all(&self.inner, set, &options, false)).await
    }

    /// Run `work` holding every key of `keys`: take them (with `options`),
    /// run the closure, release them, and return the closure's value.
    ///
    /// If any key is found lost while `work` runs, the closure's future is
    /// dropped at its next await point and the call fails with
    /// [`Error::LockLost`]; so it does when the release finds a key lost.
    ///
    /// ```no_run
    /// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
    /// use relaylock::LockOptions;
    ///
    /// let moved = client
    ///     .with_lock_all(["account:7", "account:3"], LockOptions::default(), async |guard| {
    ///         // ... both accounts are ours ...
    ///         guard.fencing_token("account:3").is_some()
    ///     })
    ///     .await?;
    /// # let _ = moved; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`lock_all_with`](Self::lock_all_with), of
    /// [`MultiGuard::release`], and [`Error::LockLost`].
    ///
    /// # Cancel safety
    ///
    /// Dropped while waiting: as [`lock_all_with`](Self::lock_all_with).
    /// Dropped while the closure runs: the closure's future is dropped with
    /// it and every key is released in the background.
    pub async fn with_lock_all<I, K, F, T>(
        &self,
        keys: I,
        options: LockOptions,
        work: F,
    ) -> Result<T>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
        F: AsyncFnOnce(&MultiGuard) -> T,
    {
        let held = self.lock_all_with(keys, options).await?;
        match until_lost(held.lost(), work(&held)).await {
            Some(value) => held.release().await.map(|()| value),
            None => {
                let key = held.lost_key().unwrap_or_default();
                Err(lost_while_working(&self.inner, &key))
            }
        }
    }

    /// One attempt, never waits: `Ok(None)` when another owner holds the lock.
    ///
    /// It takes only a free lock. While other clients queue for the key,
    /// each release reserves it for the client that waited longest (fair
    /// hand-over), so `try_lock` does not succeed until the queue is empty.
    ///
    /// # Errors
    ///
    /// As [`lock_with`](Self::lock_with), without [`Error::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: an acquire script in flight when the future is dropped is
    /// followed by a release of its token in the background.
    pub async fn try_lock(&self, key: &str) -> Result<Option<LockGuard>> {
        self.try_lock_with(key, LockOptions::default()).await
    }

    /// [`try_lock`](Self::try_lock) with options (its wait limit is ignored).
    ///
    /// # Errors
    ///
    /// As [`try_lock`](Self::try_lock).
    ///
    /// # Cancel safety
    ///
    /// As [`try_lock`](Self::try_lock).
    pub async fn try_lock_with(
        &self,
        key: &str,
        options: LockOptions,
    ) -> Result<Option<LockGuard>> {
        Box::pin(acquire::try_lock(&self.inner, key, &options, Want::LOCK)).await
    }

    /// Whether anybody holds the lock on `key` right now (one small script).
    /// A
    /// lock reserved for the next client during a hand-over (at most 50 ms)
    /// counts as locked. The answer can be stale by the time it arrives; use
    /// it for display only.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key; [`Error::Redis`] for a
    /// connection error or when the command timeout passes.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn is_locked(&self, key: &str) -> Result<bool> {
        self.inner.check_key(key)?;
        self.inner.calls.peek(&self.inner.names(key)).await
    }

    /// The election named `name` (see [`Election`]): one leader at a time
    /// among the clients that campaign, each term fenced. Nothing is sent
    /// until it is used. Its lock is the key `election:<name>`.
    pub fn election(&self, name: &str) -> Election {
        Election::new(Arc::clone(&self.inner), name)
    }

    /// A counting semaphore named `key`, admitting at most `limit` permits
    /// held at once (see [`Semaphore`]). Nothing is sent until it is used.
    /// Every caller gives the limit; a caller is admitted by its own limit
    /// (so a stale deploy with a smaller limit throttles only itself).
    ///
    /// Not reentrant: permits are counted per acquisition, not per task, so
    /// a task that holds all the permits and asks for one more waits for its
    /// own release.
    ///
    /// ```no_run
    /// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
    /// let sem = client.semaphore("payments", 8)?;
    /// let permit = sem.acquire().await?;
    /// println!("{} permits left", sem.available().await?);
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a limit of 0 (no caller could ever be
    /// admitted). The key is checked when the semaphore is used.
    pub fn semaphore(&self, key: impl Into<String>, limit: u32) -> Result<Semaphore> {
        if limit == 0 {
            return Err(Error::InvalidArgument(
                "a semaphore's limit must be at least 1".into(),
            ));
        }
        Ok(Semaphore::new(Arc::clone(&self.inner), key.into(), limit))
    }

    /// A read-write lock named `key` (see [`RwLock`]): many readers or one
    /// writer, writer-preferring. Nothing is sent until it is used.
    ///
    /// Not reentrant, as `tokio::sync::RwLock`: a task holding a read that
    /// asks for the write (or, with a writer queued, for a second read)
    /// waits for itself. Release the read before taking the write.
    ///
    /// ```no_run
    /// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
    /// let rw = client.rw_lock("cache:users");
    /// let r = rw.read().await?;
    /// r.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn rw_lock(&self, key: impl Into<String>) -> RwLock {
        RwLock::new(Arc::clone(&self.inner), key.into())
    }

    /// The Redis name of the lock on `key` (`<prefix>:4:{<key>}`, where `3`
    /// is the protocol version), for inspection with other tools. Its value
    /// is described in docs/design.md, "Redis names".
    pub fn redis_key(&self, key: &str) -> String {
        self.inner.names(key).lock.to_string()
    }

    /// What relaylock keeps in Redis under `key`, for operators: the lock,
    /// semaphore and read-write lock of that name that exist, each with its
    /// holders and their remaining leases, reservations, the queue of waiting
    /// clients (with how long each has waited) and its channels'
    /// subscribers. Plain read commands only (no script); see
    /// [`inspect`](crate::inspect).
    ///
    /// ```no_run
    /// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
    /// for state in client.inspect("orders:42").await?.states {
    ///     for h in &state.holders {
    ///         println!("{} held by {} (fence {}), {:?} left", state.primitive, h.token, h.fencing_token, h.remaining);
    ///     }
    ///     println!("{} clients queued", state.queue.len());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a key the
    /// lock calls would refuse; [`Error::Redis`](crate::Error::Redis) when a
    /// read fails (for example an ACL that lacks one of the commands);
    /// [`Error::UnexpectedReply`](crate::Error::UnexpectedReply) for a `TIME`
    /// reply that is not one.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn inspect(&self, key: &str) -> Result<crate::inspect::Inspection> {
        crate::inspect::with_client(&self.inner, key).await
    }

    /// For operators: release the hold `token` of `key`'s lock, semaphore
    /// or read-write lock (`primitive`), as its holder's release would: a
    /// stuck lock, whose holder stopped without releasing it. The next
    /// fencing token is still greater than every earlier one, and the
    /// first queued client (this one's too) is told at once. A holder that
    /// still runs finds its hold lost: its guard's
    /// [`lost`](crate::LockGuard::lost) fires when its watchdog next renews,
    /// and its own `release` (or `with_lock`) fails with
    /// [`Error::LockLost`]. Returns the hold it released, or `None` when
    /// `token` holds nothing there (a value relaylock did not write holds no
    /// token). The tokens held are in [`inspect`](Self::inspect) and
    /// `relaylock status`; `relaylock unlock` calls this.
    ///
    /// ```no_run
    /// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
    /// for state in client.inspect("orders:42").await?.states {
    ///     for h in state.holders {
    ///         if let Some(freed) = client.unlock(state.primitive, "orders:42", &h.token).await? {
    ///             println!("released {} (fencing token {})", freed.token, freed.fencing_token);
    ///         }
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a key the lock calls would refuse;
    /// [`Error::Redis`] when a read or the release fails (the hold is then
    /// as it was, or released: look again with `inspect`).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before the release is sent, it changed nothing;
    /// dropped after, the release runs to its end in Redis (the same as a
    /// completed call). A release whose reply was lost and that fred sent
    /// again reports `None` the second time, though the first released it.
    pub async fn unlock(
        &self,
        primitive: crate::inspect::Primitive,
        key: &str,
        token: &str,
    ) -> Result<Option<crate::inspect::Holder>> {
        crate::unlock::unlock(&self.inner, primitive, key, token).await
    }

    /// This client's name, as set with
    /// [`LockClientBuilder::name`](crate::LockClientBuilder::name) (default
    /// `<host>:<pid>`): what operators see beside its holds.
    pub fn name(&self) -> &str {
        &self.inner.identity.name
    }

    /// This client's id: how it appears in the queue of clients waiting for
    /// a lock (the queue field of the lock's value, see docs/design.md,
    /// "Redis names") and in hand-over messages.
    pub fn client_id(&self) -> &str {
        self.inner.registry.client_id()
    }

    /// The prefix of every Redis name this client creates.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The fred client relaylock sends its commands on.
    pub fn fred_client(&self) -> &Client {
        self.inner.calls.redis()
    }
}

impl LockClientBuilder {
    /// Check the settings, connect both connections, load the scripts and
    /// start the subscriber and watchdog tasks.
    ///
    /// # Errors
    ///
    /// * [`Error::InvalidArgument`] for a setting out of its range, a
    ///   malformed URL, or conflicting connection sources (`url`,
    ///   `fred_config`, `fred_client`);
    /// * [`Error::ConnectTimeout`] when a connection is not up within the
    ///   connect timeout, or [`Error::Connect`] with the connection error;
    /// * [`Error::Redis`] when the scripts cannot be loaded (an ACL without
    ///   `SCRIPT LOAD`, a server error).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes leaves no relaylock task
    /// running, and the connections it opened are closed in the background
    /// (with no tokio runtime left, fred's own tasks end with it). A
    /// `fred_client` passed in stays as it was (connected, if this call
    /// connected it).
    pub async fn build(self) -> Result<LockClient> {
        let inner = self.connect_client().await?;
        Ok(LockClient { inner })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// A client that holds one lock at a time (the map is empty whenever
    /// the task plans) does not wake the task for each lock: a lock with
    /// the default lease is due no earlier than the task's longest sleep.
    /// A shorter lease does wake it, and is renewed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_lock_at_a_time_does_not_wake_the_task_each_time() {
        let server = relaylock_testkit::RedisServer::start();
        let client = LockClient::connect(&server.url()).await.unwrap();
        let dog = Arc::clone(&client.inner.watchdog);
        // The first lock wakes it (it planned for an empty map at start).
        client.lock("w").await.unwrap().release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before = dog.plans();
        for i in 0..200 {
            let guard = client.lock(&format!("w{i}")).await.unwrap();
            tokio::task::yield_now().await;
            guard.release().await.unwrap();
            tokio::task::yield_now().await;
        }
        let woken = dog.plans() - before;
        assert!(woken <= 5, "200 locks woke the watchdog {woken} times");
        // A lease shorter than the task's sleep wakes it, and is renewed.
        let options = LockOptions::default()
            .lease(Duration::from_millis(300))
            .watchdog(true);
        let guard = client.lock_with("short", options).await.unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(guard.is_held(), "the short lease was not renewed");
        guard.release().await.unwrap();
    }
}
