//! [`RwLock`], [`ReadGuard`] and [`WriteGuard`]: a read-write lock shared by
//! every client of a Redis deployment, on the semaphore's machinery.
//!
//! A read-write lock is a semaphore of [`RW_WRITE`](crate::scripts::RW_WRITE) permits whose callers
//! all give that limit: a read takes one permit, a write takes all of them.
//! So a write is admitted only while nothing is held, and a read only while
//! no write is. Everything else is the semaphore's:
//!
//! * **Writer-preferring, by FIFO.** Clients queue in Redis in arrival
//!   order, and nobody is admitted past a queued client that does not fit:
//!   once a writer is queued, new readers queue behind it, so a writer waits
//!   only for the reads that hold when it queues: until they are released,
//!   or, for a reader that died, until its lease ends (a live reader renewed
//!   by the watchdog holds as long as it keeps its guard).
//! * **Readers that queued behind a write get in when it ends, before any
//!   writer that queued after them**: a client's readers queue as one entry
//!   asking for as many permits as it has waiting readers, and the write's
//!   release reserves for every reader client at the queue's head, up to
//!   the next queued writer, with one message per client, and one acquire
//!   call per client's batch: the reader the message wakes takes permits
//!   for its client's other waiting readers in the same call (their offers,
//!   as a lock's waiters offer for a direct hand-over). (A reader that
//!   arrives while its client's entry is queued rides on that entry's
//!   place.)
//! * **A read hold's cost does not grow with the other readers**: each hold
//!   is a member of a sorted set scored by its expiry (`ZADD`/`ZREM`,
//!   O(log n)); no release scans the others.
//! * **Expiry by the server clock**: a crashed reader's or writer's hold ends
//!   with its lease.
//! * A client's readers and writers queue apart (its writers as
//!   `<client id>.w`, on the channel `...:rw:w:ch`), so a local writer keeps
//!   its own place among the clients and is never served from a readers'
//!   reservation.
//!
//! The fencing token of a hold is greater than every earlier hold's of the
//! same key, reads and writes alike: a resource that remembers the highest
//! token of a WRITE it accepted can reject an overtaken writer; concurrent
//! readers share the lock legitimately.

use std::fmt;
use std::sync::Arc;

use crate::acquire::{self, Want};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::guard::{run_holding, Held, LockGuard};
use crate::inner::ClientInner;
use crate::options::LockOptions;
use crate::scripts::{Kind, Names};

/// A read-write lock. Made by [`LockClient::rw_lock`](crate::LockClient::rw_lock);
/// cheap to clone.
///
/// ```no_run
/// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
/// let rw = client.rw_lock("cache:users");
/// {
///     let r = rw.read().await?; // many readers at once
///     // ... read the cache entry ...
///     r.release().await?;
/// }
/// let w = rw.write().await?; // alone; new readers wait behind it
/// // ... rebuild the entry, passing w.fencing_token() to the store ...
/// w.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    inner: Arc<ClientInner>,
    key: String,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl RwLock {
    pub(crate) fn new(inner: Arc<ClientInner>, key: String) -> Self {
        RwLock { inner, key }
    }

    /// The key, as given.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The Redis name of the lock's value (`<prefix>:4:{<key>}:rw`); its
    /// holds live in `...:rw:h` and `...:rw:t`.
    pub fn redis_key(&self) -> String {
        Names::rw(&self.inner.prefix, &self.key, Kind::Read)
            .lock
            .to_string()
    }

    /// Take a read lock, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`read_with`](Self::read_with).
    ///
    /// # Cancel safety
    ///
    /// As [`read_with`](Self::read_with).
    pub async fn read(&self) -> Result<ReadGuard> {
        self.read_with(LockOptions::default()).await
    }

    /// Take a read lock with options (wait limit, lease, watchdog, metrics
    /// name, replicas).
    ///
    /// # Errors
    ///
    /// * [`Error::InvalidArgument`] for a bad key or lease, before anything
    ///   is sent;
    /// * [`Error::Timeout`] when the wait limit passes first, or
    ///   [`Error::Unavailable`] when it passes while Redis cannot be reached
    ///   (the wait is a deadline for the whole call, commands in flight
    ///   included);
    /// * [`Error::Redis`] for a connection error or a command timeout, and
    ///   [`Error::UnexpectedReply`] when the name holds something relaylock
    ///   did not write; with [`LockOptions::min_replicas`], as
    ///   [`LockClient::lock_with`](crate::LockClient::lock_with).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`Semaphore::acquire_with`](crate::Semaphore::acquire_with):
    /// dropping the future leaves no hold and no waiter behind. A
    /// reservation a release made for it that it never took is freed when
    /// its client leaves the queue, or lapses after 50 ms.
    pub async fn read_with(&self, options: LockOptions) -> Result<ReadGuard> {
        let guard = Box::pin(acquire::lock(&self.inner, &self.key, &options, Want::READ)).await?;
        Ok(ReadGuard { guard })
    }

    /// One attempt at a read lock, never waits: `Ok(None)` while a write is
    /// held or a client is queued.
    ///
    /// # Errors
    ///
    /// As [`read_with`](Self::read_with), without [`Error::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: an acquire in flight is released in the background.
    pub async fn try_read(&self) -> Result<Option<ReadGuard>> {
        self.try_read_with(LockOptions::default()).await
    }

    /// [`try_read`](Self::try_read) with options (lease, watchdog, metrics
    /// name, replicas; the wait limit is ignored).
    ///
    /// # Errors
    ///
    /// As [`try_read`](Self::try_read).
    ///
    /// # Cancel safety
    ///
    /// As [`try_read`](Self::try_read).
    pub async fn try_read_with(&self, options: LockOptions) -> Result<Option<ReadGuard>> {
        let guard = Box::pin(acquire::try_lock(
            &self.inner,
            &self.key,
            &options,
            Want::READ,
        ))
        .await?;
        Ok(guard.map(|guard| ReadGuard { guard }))
    }

    /// Take the write lock, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`write_with`](Self::write_with).
    ///
    /// # Cancel safety
    ///
    /// As [`write_with`](Self::write_with).
    pub async fn write(&self) -> Result<WriteGuard> {
        self.write_with(LockOptions::default()).await
    }

    /// Take the write lock with options. Once this call is queued, readers
    /// that arrive after it wait behind it.
    ///
    /// # Errors
    ///
    /// As [`read_with`](Self::read_with).
    ///
    /// # Cancel safety
    ///
    /// As [`read_with`](Self::read_with).
    pub async fn write_with(&self, options: LockOptions) -> Result<WriteGuard> {
        let guard = Box::pin(acquire::lock(&self.inner, &self.key, &options, Want::WRITE)).await?;
        Ok(WriteGuard { guard })
    }

    /// One attempt at the write lock, never waits: `Ok(None)` while anything
    /// is held or a client is queued.
    ///
    /// # Errors
    ///
    /// As [`read_with`](Self::read_with), without [`Error::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: an acquire in flight is released in the background.
    pub async fn try_write(&self) -> Result<Option<WriteGuard>> {
        self.try_write_with(LockOptions::default()).await
    }

    /// [`try_write`](Self::try_write) with options (lease, watchdog, metrics
    /// name, replicas; the wait limit is ignored).
    ///
    /// # Errors
    ///
    /// As [`try_write`](Self::try_write).
    ///
    /// # Cancel safety
    ///
    /// As [`try_write`](Self::try_write).
    pub async fn try_write_with(&self, options: LockOptions) -> Result<Option<WriteGuard>> {
        let guard = Box::pin(acquire::try_lock(
            &self.inner,
            &self.key,
            &options,
            Want::WRITE,
        ))
        .await?;
        Ok(guard.map(|guard| WriteGuard { guard }))
    }

    /// Run `work` under a read lock (taken with `options`), then release it;
    /// if the hold is found lost while `work` runs, the closure's future is
    /// dropped and the call fails with [`Error::LockLost`].
    ///
    /// # Errors
    ///
    /// Those of [`read_with`](Self::read_with) and [`ReadGuard::release`],
    /// and [`Error::LockLost`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockClient::with_lock`](crate::LockClient::with_lock).
    pub async fn with_read<F, T>(&self, options: LockOptions, work: F) -> Result<T>
    where
        F: AsyncFnOnce(&ReadGuard) -> T,
    {
        run_holding(self.read_with(options).await?, work).await
    }

    /// Run `work` under the write lock, as [`with_read`](Self::with_read).
    ///
    /// # Errors
    ///
    /// Those of [`write_with`](Self::write_with) and
    /// [`WriteGuard::release`], and [`Error::LockLost`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockClient::with_lock`](crate::LockClient::with_lock).
    pub async fn with_write<F, T>(&self, options: LockOptions, work: F) -> Result<T>
    where
        F: AsyncFnOnce(&WriteGuard) -> T,
    {
        run_holding(self.write_with(options).await?, work).await
    }
}

/// A held read lock: behaves as a [`LockGuard`] does (token, fencing token,
/// watchdog renewal without a lease, `lost`, release in the background on
/// drop).
#[must_use = "dropping a read guard releases it (in the background)"]
pub struct ReadGuard {
    guard: LockGuard,
}

/// The held write lock: behaves as a [`LockGuard`] does.
#[must_use = "dropping a write guard releases it (in the background)"]
pub struct WriteGuard {
    guard: LockGuard,
}

impl fmt::Debug for ReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadGuard")
            .field("key", &self.guard.key())
            .field("fencing_token", &self.guard.fencing_token())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for WriteGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteGuard")
            .field("key", &self.guard.key())
            .field("fencing_token", &self.guard.fencing_token())
            .finish_non_exhaustive()
    }
}

impl Held for ReadGuard {
    fn lock_guard(&self) -> &LockGuard {
        &self.guard
    }

    fn into_lock_guard(self) -> LockGuard {
        self.guard
    }
}

impl ReadGuard {
    crate::guard::delegate_hold!("read lock's permits", "read hold");

    /// Release the read lock; the last reader's release hands the lock to a
    /// queued writer.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the hold had expired; [`Error::Redis`] for
    /// a connection error or a command timeout (the hold then ends with its
    /// lease).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes releases in the background.
    pub async fn release(self) -> Result<()> {
        self.guard.release().await
    }
}

impl Held for WriteGuard {
    fn lock_guard(&self) -> &LockGuard {
        &self.guard
    }

    fn into_lock_guard(self) -> LockGuard {
        self.guard
    }
}

impl WriteGuard {
    crate::guard::delegate_hold!("write lock's permits", "write hold");

    /// Release the write lock: the readers queued at the head get in
    /// together, or the next queued writer.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the hold had expired (another holder may
    /// have run concurrently); [`Error::Redis`] for a connection error or a
    /// command timeout (the hold then ends with its lease).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes releases in the background.
    pub async fn release(self) -> Result<()> {
        self.guard.release().await
    }
}
