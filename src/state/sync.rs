//! The synchronisation primitives of relaylock's in-process state (the
//! estimate, the waiter counters, the lease record), behind one name: the
//! loom models in `relaylock-loom` compile the same modules with
//! `--cfg loom`, which swaps in loom's.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};

/// Lock `m`, recovering from poisoning: no code holds these locks across a
/// point that could leave the state inconsistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
