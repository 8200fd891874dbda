//! The load: the tasks' lock calls, each cancelled at a random point or run
//! to the end, their critical sections in the ledger, and what each task
//! reports.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use relaylock::{Error, LockClient, LockGuard, LockOptions};

use super::random::Rng;
use super::{
    CLIENT_IDLE, CYCLE, IDLE_PCT, KEY, LEDGER_KEY, MEASURED_PCT, SEGMENT, SPARSE_MEASURED_PCT, WAIT,
};
use crate::ledger::Ledger;

/// When to drop a future.
#[derive(Clone, Copy, Debug)]
pub(super) enum Cancel {
    /// A tokio timer, uniform 0-3 ms (tokio rounds up to whole ms).
    Timer(Duration),
    /// Yield until this much time passed, uniform 0-300 µs.
    Spin(Duration),
    /// Yield this many times (1-15), each a scheduler turn with a re-poll.
    Yields(u32),
    /// Dropped before its first poll.
    Unpolled,
}

pub(super) const CANCEL_KINDS: [&str; 4] =
    ["timer 0-3ms", "spin 0-300us", "yields 1-15", "unpolled"];

impl Cancel {
    pub(super) fn pick(rng: &mut Rng) -> Cancel {
        match rng.below(31) {
            0..10 => Cancel::Timer(Duration::from_micros(rng.below(3001))),
            10..20 => Cancel::Spin(Duration::from_micros(rng.below(301))),
            20..30 => Cancel::Yields(1 + rng.below(15) as u32),
            _ => Cancel::Unpolled,
        }
    }

    pub(super) fn kind(self) -> usize {
        match self {
            Cancel::Timer(_) => 0,
            Cancel::Spin(_) => 1,
            Cancel::Yields(_) => 2,
            Cancel::Unpolled => 3,
        }
    }

    pub(super) async fn fire(self) {
        match self {
            Cancel::Timer(d) => tokio::time::sleep(d).await,
            Cancel::Spin(d) => {
                let until = Instant::now() + d;
                while Instant::now() < until {
                    tokio::task::yield_now().await;
                }
            }
            Cancel::Yields(k) => {
                for _ in 0..k {
                    tokio::task::yield_now().await;
                }
            }
            Cancel::Unpolled => {}
        }
    }
}

/// Run `fut` until it completes or `cancel` fires, then drop it. Returns its
/// output (`None`: dropped unfinished) and how many times it was polled.
pub(super) async fn race<F: Future>(fut: F, cancel: Cancel) -> (Option<F::Output>, u32) {
    if let Cancel::Unpolled = cancel {
        drop(fut);
        return (None, 0);
    }
    let mut polls = 0u32;
    let out = {
        let mut fut = std::pin::pin!(fut);
        let counted = std::future::poll_fn(|cx| {
            polls += 1;
            fut.as_mut().poll(cx)
        });
        tokio::select! {
            biased;
            out = counted => Some(out),
            _ = cancel.fire() => None,
        }
    };
    (out, polls)
}

pub(super) const POLL_BUCKETS: [&str; 7] = ["0", "1", "2", "3", "4-7", "8-15", "16+"];

pub(super) fn poll_bucket(polls: u32) -> usize {
    match polls {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 3,
        4..=7 => 4,
        8..=15 => 5,
        _ => 6,
    }
}

pub(super) const AGE_BUCKETS: [&str; 5] = ["<100us", "100-300us", "0.3-1ms", "1-3ms", ">=3ms"];

pub(super) fn age_bucket(d: Duration) -> usize {
    match d.as_micros() {
        0..100 => 0,
        100..300 => 1,
        300..1000 => 2,
        1000..3000 => 3,
        _ => 4,
    }
}

pub(super) fn hist(labels: &[&str], counts: &[u64]) -> String {
    labels
        .iter()
        .zip(counts)
        .map(|(l, n)| format!("{l}:{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// How a guard's life ended, and when (by the test's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    /// `release()` returned (Ok or LockLost): the token must never be seen
    /// in a sample sent afterwards.
    Released,
    /// Dropped: released in the background.
    Dropped,
    /// `release()` dropped unfinished.
    ReleaseCancelled,
    /// `release()` returned an error other than LockLost (a fault made its
    /// script fail): the lock may stay until its lease ends, as documented.
    ReleaseFailed,
}

/// An uncancelled lock call with `WAIT`.
pub(super) struct Measured {
    pub(super) client: usize,
    pub(super) start: Instant,
    pub(super) end: Instant,
    pub(super) acquired: bool,
}

#[derive(Default)]
pub(super) struct Report {
    /// Cancellable lock calls per cancel kind: [completed with a guard,
    /// timed out, failed, cancelled].
    pub(super) calls: [[u64; 4]; 4],
    /// Cancelled lock futures by polls, and by age at the cancellation.
    pub(super) cancel_polls: [u64; 7],
    pub(super) cancel_age: [u64; 5],
    pub(super) measured: Vec<Measured>,
    pub(super) acquired: u64,
    /// Guard endings: released, dropped, release cancelled, release raced
    /// but completed.
    pub(super) released: u64,
    pub(super) dropped: u64,
    pub(super) release_cancelled: u64,
    pub(super) release_race_completed: u64,
    pub(super) release_cancel_polls: [u64; 7],
    pub(super) release_lost: u64,
    pub(super) errors: Vec<String>,
    pub(super) ends: Vec<(String, usize, End, Instant)>,
    /// Every lock call that was polled: (client, from, until dropped).
    pub(super) in_progress: Vec<(usize, Instant, Instant)>,
}

impl Report {
    pub(super) fn merge(&mut self, o: Report) {
        for (a, b) in self.calls.iter_mut().zip(o.calls) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        for (x, y) in self.cancel_polls.iter_mut().zip(o.cancel_polls) {
            *x += y;
        }
        for (x, y) in self.cancel_age.iter_mut().zip(o.cancel_age) {
            *x += y;
        }
        for (x, y) in self
            .release_cancel_polls
            .iter_mut()
            .zip(o.release_cancel_polls)
        {
            *x += y;
        }
        self.measured.extend(o.measured);
        self.acquired += o.acquired;
        self.released += o.released;
        self.dropped += o.dropped;
        self.release_cancelled += o.release_cancelled;
        self.release_race_completed += o.release_race_completed;
        self.release_lost += o.release_lost;
        self.errors.extend(o.errors);
        self.ends.extend(o.ends);
        self.in_progress.extend(o.in_progress);
    }
}

pub(super) struct Ctx {
    pub(super) clients: Vec<LockClient>,
    pub(super) ledger: Arc<Ledger>,
    pub(super) started: Instant,
    /// The quiet phase, and the end of the load.
    pub(super) quiet: (Instant, Instant),
    pub(super) load_end: Instant,
}

pub(super) enum Phase {
    Contended,
    Sparse(Instant),
    Quiet(Instant),
    Done,
}

impl Ctx {
    /// Until when client `c` is idle, if it is.
    pub(super) fn client_idle(&self, c: usize, now: Instant) -> Option<Instant> {
        let into = (now - self.started).as_nanos() % CYCLE.as_nanos();
        let from = (Duration::from_secs(1) * c as u32).as_nanos();
        (into >= from && into < from + CLIENT_IDLE.as_nanos())
            .then(|| now + Duration::from_nanos((from + CLIENT_IDLE.as_nanos() - into) as u64))
    }

    pub(super) fn phase(&self, now: Instant) -> Phase {
        if now >= self.load_end {
            return Phase::Done;
        }
        if now >= self.quiet.0 && now < self.quiet.1 {
            return Phase::Quiet(self.quiet.1);
        }
        let n = (now - self.started).as_nanos() / SEGMENT.as_nanos();
        if n.is_multiple_of(2) {
            Phase::Contended
        } else {
            let mut end = (self.started + SEGMENT * (n as u32 + 1)).min(self.load_end);
            if now < self.quiet.0 {
                end = end.min(self.quiet.0);
            }
            Phase::Sparse(end)
        }
    }
}

/// Hold the lock briefly inside the ledger, then end the guard at random.
pub(super) async fn critical(ctx: &Ctx, c: usize, g: LockGuard, rng: &mut Rng, r: &mut Report) {
    r.acquired += 1;
    let token = g.token().to_owned();
    let fence = g.fencing_token();
    ctx.ledger.write(LEDGER_KEY, fence, &token, true).await;
    // Mostly short; now and then long enough for waiters of every client to
    // pile up and learn the holder's lease.
    match rng.below(10) {
        0..3 => tokio::task::yield_now().await,
        3..6 => tokio::time::sleep(Duration::from_millis(1)).await,
        6..9 => tokio::time::sleep(Duration::from_millis(2)).await,
        _ => tokio::time::sleep(Duration::from_millis(5 + rng.below(26))).await,
    }
    ctx.ledger.write(LEDGER_KEY, fence, &token, false).await;
    ctx.ledger.leave(LEDGER_KEY, &token).await;
    let released = |token: String, outcome: relaylock::Result<()>, r: &mut Report| {
        let end = match outcome {
            Ok(()) => End::Released,
            Err(Error::LockLost { .. }) => {
                r.release_lost += 1;
                End::Released
            }
            Err(e) => {
                r.errors.push(format!("release: {e}"));
                End::ReleaseFailed
            }
        };
        r.ends.push((token, c, end, Instant::now()));
    };
    match rng.below(3) {
        0 => {
            let outcome = g.release().await;
            r.released += 1;
            released(token, outcome, r);
        }
        1 => {
            r.ends.push((token, c, End::Dropped, Instant::now()));
            drop(g);
            r.dropped += 1;
        }
        _ => {
            let (outcome, polls) = race(g.release(), Cancel::pick(rng)).await;
            match outcome {
                Some(outcome) => {
                    r.release_race_completed += 1;
                    released(token, outcome, r);
                }
                None => {
                    r.ends
                        .push((token, c, End::ReleaseCancelled, Instant::now()));
                    r.release_cancelled += 1;
                    r.release_cancel_polls[poll_bucket(polls)] += 1;
                }
            }
        }
    }
}

/// A task of client `c`: lock calls, measured or cancellable, each
/// acquisition a critical section, until the load ends; pauses in the quiet
/// phase, in sparse segments (all but task `t` multiple of 4) and while its
/// client idles.
pub(super) async fn task(ctx: Arc<Ctx>, c: usize, t: usize, mut rng: Rng) -> Report {
    let client = ctx.clients[c].clone();
    let mut r = Report::default();
    loop {
        let measured_pct = match ctx.phase(Instant::now()) {
            Phase::Done => break,
            Phase::Quiet(until) => {
                tokio::time::sleep_until(until.into()).await;
                continue;
            }
            Phase::Sparse(until) if !t.is_multiple_of(4) => {
                tokio::time::sleep_until(until.into()).await;
                continue;
            }
            Phase::Sparse(_) => SPARSE_MEASURED_PCT,
            Phase::Contended => MEASURED_PCT,
        };
        if let Some(until) = ctx.client_idle(c, Instant::now()) {
            tokio::time::sleep_until(until.min(ctx.load_end).into()).await;
            continue;
        }
        let guard = if rng.percent(measured_pct) {
            measured_call(&client, c, &mut r).await
        } else {
            cancellable_call(&client, c, &mut rng, &mut r).await
        };
        if let Some(g) = guard {
            critical(&ctx, c, g, &mut rng, &mut r).await;
        }
        // Idle now and then, so the number of active tasks (and with it the
        // contention) varies: the key is sometimes free, cancelled calls
        // then acquire (and are cancelled in flight), and clients whose
        // waiters all left are reserved for (no-shows).
        if rng.percent(IDLE_PCT) {
            tokio::time::sleep(Duration::from_millis(rng.below(100))).await;
        }
    }
    r
}

/// An uncancelled lock call of client `c` with `WAIT`, noted in `r` as
/// measured.
async fn measured_call(client: &LockClient, c: usize, r: &mut Report) -> Option<LockGuard> {
    let start = Instant::now();
    let outcome = client
        .lock_with(KEY, LockOptions::default().wait(WAIT))
        .await;
    r.in_progress.push((c, start, Instant::now()));
    r.measured.push(Measured {
        client: c,
        start,
        end: Instant::now(),
        acquired: outcome.is_ok(),
    });
    match outcome {
        Ok(g) => Some(g),
        Err(Error::Timeout { .. }) => None,
        Err(e) => {
            r.errors.push(format!("measured lock: {e}"));
            None
        }
    }
}

/// A lock call of client `c` dropped when a [`Cancel`] picked at random
/// fires (unless it completes first), counted in `r` by how it ended.
async fn cancellable_call(
    client: &LockClient,
    c: usize,
    rng: &mut Rng,
    r: &mut Report,
) -> Option<LockGuard> {
    let cancel = Cancel::pick(rng);
    // A quarter of them also have a short deadline of their own, so
    // a timeout races the cancellation.
    let options = if rng.percent(25) {
        LockOptions::default().wait(Duration::from_micros(rng.below(3001)))
    } else {
        LockOptions::default()
    };
    let start = Instant::now();
    let (outcome, polls) = race(client.lock_with(KEY, options), cancel).await;
    if polls > 0 {
        r.in_progress.push((c, start, Instant::now()));
    }
    let counts = &mut r.calls[cancel.kind()];
    match outcome {
        Some(Ok(g)) => {
            counts[0] += 1;
            Some(g)
        }
        Some(Err(Error::Timeout { .. })) => {
            counts[1] += 1;
            None
        }
        Some(Err(e)) => {
            counts[2] += 1;
            r.errors.push(format!("lock: {e}"));
            None
        }
        None => {
            counts[3] += 1;
            r.cancel_polls[poll_bucket(polls)] += 1;
            r.cancel_age[age_bucket(start.elapsed())] += 1;
            None
        }
    }
}
