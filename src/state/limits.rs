//! The limits every argument is checked against (dependency-free, so the
//! loom models can compile the modules that use them).

use std::time::Duration;

/// Longest accepted lock key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// Longest accepted lease (one day). A longer lease is almost always a unit
/// mistake, and a crashed holder would block everyone that long.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);
/// Longest accepted prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 128;
