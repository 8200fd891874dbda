//! Racing waiters claim the probe (the holder's lease ran out) and the poll
//! of a degraded key on the real `Estimate`, under its mutex.
//!
//! Checked: exactly one of N racers wins a due probe, and exactly one wins a
//! due poll; nobody wins before the slice passed.

use std::time::{Duration, Instant};

use loom::sync::{Arc, Mutex};
use loom::thread;

use super::explore;
use crate::state::estimate::Estimate;

const RACERS: usize = 3;

#[test]
fn one_probe_and_one_poll_per_slice() {
    explore("probe and poll claims, 3 racers", || {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut e = Estimate::default();
        e.observe(t0, ms(10), true);
        let e = Arc::new(Mutex::new(e));
        let due = t0 + ms(20);
        let racers: Vec<_> = (0..RACERS)
            .map(|_| {
                let e = Arc::clone(&e);
                thread::spawn(move || {
                    let probe = e.lock().unwrap().claim_probe(due, ms(50));
                    let poll = e.lock().unwrap().claim_poll(due, ms(25));
                    (probe, poll)
                })
            })
            .collect();
        let wins: Vec<(bool, bool)> = racers.into_iter().map(|r| r.join().unwrap()).collect();
        assert_eq!(
            wins.iter().filter(|w| w.0).count(),
            1,
            "probe winners: {wins:?}"
        );
        assert_eq!(
            wins.iter().filter(|w| w.1).count(),
            1,
            "poll winners: {wins:?}"
        );
        let mut e = e.lock().unwrap();
        assert!(!e.claim_probe(due + ms(49), ms(50)));
        assert!(!e.claim_poll(due + ms(24), ms(25)));
    });
}
