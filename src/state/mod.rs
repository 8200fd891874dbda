//! The in-process state that tasks race on, as pure data: no I/O, no
//! async, and no import from outside this folder (std, and loom's
//! primitives under `--cfg loom`, through [`sync`]).
//!
//! That rule is what lets `relaylock-loom` compile this folder on its own
//! and model-check every interleaving of the threads its models start:
//!
//! - [`sync`]: the one place that names the synchronisation primitives;
//! - [`limits`]: the bounds every argument is checked against;
//! - [`estimate`]: when the current holder's lease ends, as this process
//!   knows it;
//! - [`presence`]: the waiter counter and the handshake that keeps a
//!   release from missing a waiter that is joining;
//! - [`lease`]: a hold's lease record, which only moves forward;
//! - [`handoff`]: the hand-over from a release to a waiter of the same
//!   process;
//! - [`order`]: the global order of a multi-key lock's keys.

pub(crate) mod estimate;
pub(crate) mod handoff;
pub(crate) mod lease;
pub(crate) mod limits;
pub(crate) mod order;
pub(crate) mod presence;
pub(crate) mod sync;
