//! What a bench worker's tasks share and count: the process's client and
//! keys ([`Shared`]), one task's results ([`TaskResult`]), the key choice
//! ([`Rng`]) and the clock of the records ([`now_ns`]). `worker` runs the
//! tasks; `multi` is one acquisition of several keys.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use relaylock::LockClient;

use crate::bench::bare::BareLock;
use crate::bench::stats::Record;
use crate::bench::strategy::{KeysPerLock, Primitive, Strategy};

/// Now, in ns since the epoch: the records' clock.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// xorshift64*: key choice without a dependency.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[derive(Default)]
pub(crate) struct TaskResult {
    pub(crate) count: u64,
    pub(crate) records: Vec<Record>,
    pub(crate) violations: u64,
    pub(crate) errors: u64,
    pub(crate) lost: u64,
    pub(crate) restarts: u64,
    pub(crate) first_error: Option<String>,
}

impl TaskResult {
    /// Count an error, keeping the first one's text.
    pub(crate) fn error(&mut self, e: impl std::fmt::Display) {
        self.errors += 1;
        self.first_error.get_or_insert_with(|| e.to_string());
    }

    /// Count one acquisition and its record.
    pub(crate) fn acquired(&mut self, shared: &Shared, record: Record) {
        self.records.push(record);
        self.count += 1;
        shared.total.fetch_add(1, Ordering::Relaxed);
    }

    /// Count one acquisition of several keys: a record per key (the
    /// figures are per key acquired).
    pub(crate) fn acquired_keys(&mut self, shared: &Shared, records: Vec<Record>) {
        let n = records.len() as u64;
        self.records.extend(records);
        self.count += n;
        shared.total.fetch_add(n, Ordering::Relaxed);
    }
}

pub(crate) struct Shared {
    pub(crate) client: LockClient,
    /// `Some` for `bare:<ms>`: the baseline lock, on the client's connection.
    pub(crate) bare: Option<BareLock>,
    pub(crate) keys: Vec<String>,
    /// Tasks inside each key's critical section now (a read-write lock's
    /// readers).
    pub(crate) inside: Vec<AtomicU64>,
    /// A read-write lock's writers inside each key now.
    pub(crate) writers: Vec<AtomicU64>,
    /// How many may be (1 for a lock).
    pub(crate) limit: u32,
    pub(crate) primitive: Primitive,
    pub(crate) hold: Duration,
    pub(crate) total: AtomicU64,
    pub(crate) strategy: Strategy,
    pub(crate) keys_per_lock: KeysPerLock,
    pub(crate) single_share: f64,
}
