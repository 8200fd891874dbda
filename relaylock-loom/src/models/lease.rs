//! A shortening `extend` races a watchdog renewal, on the real
//! `LeaseRecord`. Redis is modelled as one connection: commands run in the
//! order they were sent; `extend` sets the lease exactly, a renewal only
//! lengthens it (grow-only). The guard's side follows `LockGuard::extend`:
//! measure `sent`, lower the record (`extending`), send; then either the
//! reply arrives (`extend_ended` from the wrapper's drop, then
//! `extended`), or the future is dropped right after sending
//! (`extend_ended` only; the command still runs later). The watchdog's
//! side follows a round: read the record, measure `sent`, send, await the
//! reply, `renewed`. Logical time: one tick per step.
//!
//! Checked: at every step (each command Redis runs, each change of the
//! record), the recorded lease never ends later than the real one (`sent +
//! lease` of the record <= Redis's expiry); and `set_lost` is first exactly
//! once.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use loom::sync::{Arc, Mutex};
use loom::thread;

use super::explore;
use crate::state::lease::LeaseRecord;

const INITIAL: u64 = 3_000;
const SHORT: u64 = 200;

#[derive(Clone, Copy)]
enum Cmd {
    Extend(u64),
    Renew(u64),
}

struct Redis {
    t0: Instant,
    /// Logical clock, in ms since `t0`.
    clock: u64,
    queue: VecDeque<(usize, Cmd)>,
    next_id: usize,
    done: Vec<usize>,
    /// When the key expires, in ms since `t0`.
    expires: u64,
    /// A command sent on a connection fred replaced: it runs whenever the
    /// network delivers it, before or after commands sent later.
    stray: Option<Cmd>,
}

impl Redis {
    fn tick(&mut self) -> Instant {
        self.clock += 1;
        self.t0 + Duration::from_millis(self.clock)
    }

    fn send(&mut self, cmd: Cmd) -> usize {
        self.next_id += 1;
        self.queue.push_back((self.next_id, cmd));
        self.next_id
    }

    /// The invariant at this instant: the record ends no later than Redis's
    /// expiry.
    fn check(&self, record: &LeaseRecord) {
        let s = record.snapshot();
        let real = self.t0 + Duration::from_millis(self.expires);
        assert!(
            s.sent + s.lease <= real,
            "the record says {:?} past t0, Redis {} ms",
            s.sent + s.lease - self.t0,
            self.expires
        );
    }

    /// The network delivers the stray command, if one is on its way.
    fn deliver_stray(&mut self, record: &LeaseRecord) {
        if let Some(cmd) = self.stray.take() {
            self.clock += 1;
            let now = self.clock;
            match cmd {
                Cmd::Extend(ms) => self.expires = now + ms,
                Cmd::Renew(ms) => self.expires = self.expires.max(now + ms),
            }
            self.check(record);
        }
    }

    /// Run the queue until command `id` ran (all of it with `None`),
    /// checking the invariant after each command.
    fn run_until(&mut self, id: Option<usize>, record: &LeaseRecord) {
        while !id.is_some_and(|id| self.done.contains(&id)) {
            let Some((next, cmd)) = self.queue.pop_front() else {
                return;
            };
            self.clock += 1;
            let now = self.clock;
            match cmd {
                Cmd::Extend(ms) => self.expires = now + ms,
                Cmd::Renew(ms) => self.expires = self.expires.max(now + ms),
            }
            self.done.push(next);
            self.check(record);
        }
    }
}

/// A lock acquired now with the initial lease: its record, and Redis.
fn start() -> (Arc<LeaseRecord>, Arc<Mutex<Redis>>) {
    let t0 = Instant::now();
    let record = Arc::new(LeaseRecord::new(t0, Duration::from_millis(INITIAL)));
    let redis = Arc::new(Mutex::new(Redis {
        t0,
        clock: 0,
        queue: VecDeque::new(),
        next_id: 0,
        done: Vec::new(),
        expires: INITIAL,
        stray: None,
    }));
    (record, redis)
}

type Shared = (Arc<LeaseRecord>, Arc<Mutex<Redis>>);

/// Run `f` on a thread of its own with clones of the record and Redis.
fn spawn(
    (record, redis): (&Arc<LeaseRecord>, &Arc<Mutex<Redis>>),
    f: impl FnOnce(Shared) + Send + 'static,
) -> thread::JoinHandle<()> {
    let shared = (Arc::clone(record), Arc::clone(redis));
    thread::spawn(move || f(shared))
}

/// An `extend(lease)` as `LockGuard::extend` runs it: lower the record,
/// send, and (`completes`) await the reply and apply it; otherwise the
/// future is dropped right after sending and the command runs later.
fn extend((record, redis): Shared, lease: u64, completes: bool) {
    let ms = Duration::from_millis;
    let sent = redis.lock().unwrap().tick();
    let generation = record.extending(sent, ms(lease));
    let id = redis.lock().unwrap().send(Cmd::Extend(lease));
    if completes {
        redis.lock().unwrap().run_until(Some(id), &record);
        let at = redis.lock().unwrap().tick();
        record.extend_ended(generation, at, None);
        record.extended(generation, sent, ms(lease));
    } else {
        let at = redis.lock().unwrap().tick();
        record.extend_ended(generation, at, None);
    }
    redis.lock().unwrap().check(&record);
}

/// A shortening `extend` whose command went out on a connection fred then
/// replaced: it is handed to the network (`Redis::stray`), and the guard
/// reports it as stray.
fn stray_extend_sent(record: &LeaseRecord, redis: &Mutex<Redis>) {
    let sent = redis.lock().unwrap().tick();
    let generation = record.extending(sent, Duration::from_millis(SHORT));
    redis.lock().unwrap().stray = Some(Cmd::Extend(SHORT));
    let at = redis.lock().unwrap().tick();
    record.extend_ended(generation, at, Some(Duration::from_millis(SHORT)));
}

/// One watchdog round: read the record, send a grow-only renewal, await
/// its reply, `renewed`.
fn renewal_round(record: &LeaseRecord, redis: &Mutex<Redis>) {
    let planned = record.snapshot();
    let sent = redis.lock().unwrap().tick();
    let renew_ms = planned.renew_with.as_millis() as u64;
    let id = redis.lock().unwrap().send(Cmd::Renew(renew_ms));
    redis.lock().unwrap().run_until(Some(id), record);
    record.renewed(planned.generation, sent, planned.renew_with);
    redis.lock().unwrap().check(record);
}

/// The end of a model: the stray copy, if still on its way, and every
/// queued command run, the record still ends no later than Redis.
fn finish(threads: Vec<thread::JoinHandle<()>>, record: &LeaseRecord, redis: &Mutex<Redis>) {
    for t in threads {
        t.join().unwrap();
    }
    let mut redis = redis.lock().unwrap();
    redis.deliver_stray(record);
    redis.run_until(None, record);
    redis.check(record);
}

fn model(extend_completes: bool) {
    let (record, redis) = start();
    let shared = (&record, &redis);
    let threads = vec![
        spawn(shared, move |s| extend(s, SHORT, extend_completes)),
        spawn(shared, |(record, redis)| renewal_round(&record, &redis)),
    ];
    finish(threads, &record, &redis);
}

/// Two `extend` calls of one guard overlap (a shorter and a longer one);
/// each is queued when its thread gets to it, so the older may run last
/// (as after a NOSCRIPT reload).
fn two_extends() {
    let (record, redis) = start();
    let threads = [SHORT, 5_000]
        .into_iter()
        .map(|lease| spawn((&record, &redis), move |s| extend(s, lease, true)))
        .collect();
    finish(threads, &record, &redis);
}

/// A shortening `extend` whose command went out on a connection fred then
/// replaced (its reply never came, or came from a replay on the new
/// connection): the old copy may run at any time, also after the renewals
/// that follow on the new connection (found in review). The guard reports
/// it as stray (`extend_ended` with its lease); two renewal rounds run
/// meanwhile, and the network delivers the copy whenever loom lets it (or
/// at the end).
fn stray_extend() {
    let (record, redis) = start();
    let shared = (&record, &redis);
    let threads = vec![
        spawn(shared, |(record, redis)| {
            stray_extend_sent(&record, &redis);
            redis.lock().unwrap().check(&record);
        }),
        spawn(shared, |(record, redis)| {
            for _ in 0..2 {
                renewal_round(&record, &redis);
            }
        }),
        spawn(shared, |(record, redis)| {
            redis.lock().unwrap().deliver_stray(&record)
        }),
    ];
    finish(threads, &record, &redis);
}

/// A stray shortening `extend` (as in [`stray_extend`]), then a clean,
/// longer `extend` of the same guard racing a renewal round, while the
/// network delivers the stray copy at any moment: the longer extend's
/// confirmation must not count past the stray lease.
fn stray_then_longer_extend() {
    let (record, redis) = start();
    stray_extend_sent(&record, &redis);
    let shared = (&record, &redis);
    let threads = vec![
        spawn(shared, |s| extend(s, 5_000, true)),
        spawn(shared, |(record, redis)| renewal_round(&record, &redis)),
        spawn(shared, |(record, redis)| {
            redis.lock().unwrap().deliver_stray(&record)
        }),
    ];
    finish(threads, &record, &redis);
}

#[test]
fn a_stray_extend_then_a_longer_one_vs_a_renewal() {
    explore(
        "stray extend, then a longer extend vs renewal",
        stray_then_longer_extend,
    );
}

#[test]
fn a_stray_shortening_extend_vs_renewals() {
    explore(
        "extend (stray copy on a replaced connection) vs renewals",
        stray_extend,
    );
}

#[test]
fn two_overlapping_extends() {
    explore("two overlapping extends", two_extends);
}

#[test]
fn a_completed_shortening_extend_vs_a_renewal() {
    explore("extend (completed) vs renewal", || model(true));
}

#[test]
fn an_abandoned_shortening_extend_vs_a_renewal() {
    explore("extend (abandoned after sending) vs renewal", || {
        model(false)
    });
}

#[test]
fn a_loss_is_first_once() {
    explore("mark lost from two sides", || {
        let record = Arc::new(LeaseRecord::new(Instant::now(), Duration::from_secs(1)));
        let firsts: Vec<_> = (0..2)
            .map(|_| {
                let record = Arc::clone(&record);
                thread::spawn(move || record.set_lost())
            })
            .collect();
        let n = firsts
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|f| *f)
            .count();
        assert_eq!(n, 1);
        assert!(record.is_lost());
    });
}
