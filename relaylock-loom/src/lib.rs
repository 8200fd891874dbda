//! loom models of relaylock's in-process state.
//!
//! The module below is the library's own folder `src/state/` (the
//! waiter counters, the holder estimate, the lease record, the hand-over),
//! compiled here on its own: with `--cfg loom`, `sync` swaps std's mutex,
//! atomics and fences for loom's, and the models in `models/` explore every
//! interleaving of the threads they start (bounded by
//! `LOOM_MAX_PREEMPTIONS`). Each model states the property it checks.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p relaylock-loom --release -- --nocapture
//! ```
#![allow(dead_code)]

#[path = "../../src/state/mod.rs"]
mod state;

#[cfg(all(test, loom))]
mod models;
