//! The models. Each runs `loom::model` and prints how many interleavings it
//! explored.

mod claims;
mod handoff;
mod handshake;
mod lease;
mod multi_order;
mod queue;
mod subscription;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Run `f` under loom and print the number of interleavings explored.
fn explore(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    loom::model(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f();
    });
    println!(
        "loom model {name}: {} interleavings",
        runs.load(Ordering::Relaxed)
    );
}
