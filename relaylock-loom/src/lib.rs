//! loom models of relaylock's in-process state.
//!
//! The modules below are the library's own files (`src/sync.rs`,
//! `src/limits.rs`, `src/estimate.rs`, `src/presence.rs`, `src/lease.rs`,
//! `src/handoff.rs`),
//! compiled here on their own: with `--cfg loom`, `sync` swaps std's mutex,
//! atomics and fences for loom's, and the models in `models/` explore every
//! interleaving of the threads they start (bounded by
//! `LOOM_MAX_PREEMPTIONS`). Each model states the property it checks.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p relaylock-loom --release -- --nocapture
//! ```
#![allow(dead_code)]

#[path = "../../src/sync.rs"]
mod sync;

#[path = "../../src/limits.rs"]
mod limits;

#[path = "../../src/estimate.rs"]
mod estimate;

#[path = "../../src/presence.rs"]
mod presence;

#[path = "../../src/lease.rs"]
mod lease;

#[path = "../../src/handoff.rs"]
mod handoff;

#[cfg(all(test, loom))]
mod models;
