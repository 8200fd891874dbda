//! [`supervise`]: runs a client's background task (the subscriber, the
//! watchdog) again when it panics. A panic can come from code relaylock
//! calls but does not own (the `metrics` recorder, a `tracing` layer); a
//! watchdog that stopped would let every renewed lock expire under its
//! guard, and a subscriber that stopped would leave every waiter to its
//! lease-bound re-checks.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;

/// Aborts the task when dropped: the supervisor's own abort reaches the
/// task it runs.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Spawn the task `start(0)` returns and, each time a run panics, log it
/// and spawn `start(n)`, with `n` the number of panics so far, after a
/// pause that doubles from 20 ms to 1.28 s (a recorder that panics on
/// every message must not turn each into a restart storm). Ends when a
/// run returns; aborting the returned handle aborts the run too.
///
/// `start(0)` is called before this returns, so what it sets up
/// synchronously (a subscription to a broadcast stream, say) misses
/// nothing sent after `supervise` returned.
pub(crate) fn supervise<F, Fut>(what: &'static str, mut start: F) -> JoinHandle<()>
where
    F: FnMut(u64) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut next = start(0);
    tokio::spawn(async move {
        let mut panics = 0;
        loop {
            let mut run = AbortOnDrop(tokio::spawn(next));
            match (&mut run.0).await {
                Err(e) if e.is_panic() => {
                    panics += 1;
                    tracing::error!(
                        task = what,
                        panics,
                        "relaylock: a background task panicked; running it again"
                    );
                    tokio::time::sleep(Duration::from_millis(10 << panics.min(7))).await;
                    next = start(panics);
                }
                _ => return,
            }
        }
    })
}
