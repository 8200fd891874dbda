//! A release that queues its client again (local waiters left) races the
//! last local waiter leaving. The registry's rules, with the real
//! `Presence` handshake: the release registers before sending (`requeue`),
//! the script's `HSET` runs, then it ends its registration and takes the
//! client out of the queue if nobody waits by then; the last waiter takes
//! the client out only when no such release is in flight. Redis runs the
//! commands in the order they happen here (one connection).
//!
//! Checked: once nobody waits and every release finished, the client is not
//! in the queue (no ghost that a hand-over would idle on).

use loom::sync::{Arc, Mutex};
use loom::thread;

use super::explore;
use crate::state::presence::Presence;

#[test]
fn requeue_vs_last_waiter() {
    explore("requeue vs the last waiter", || {
        let p = Arc::new(Presence::new());
        p.join();
        p.mark_queued(); // the waiter's try queued the client
                         // The client's field in the queue hash.
        let redis_queued = Arc::new(Mutex::new(true));

        let release = {
            let (p, q) = (Arc::clone(&p), Arc::clone(&redis_queued));
            thread::spawn(move || {
                if p.begin_requeue() {
                    *q.lock().unwrap() = true; // the script's HSET
                    p.end_requeue();
                }
                if p.take_queue_leave() {
                    *q.lock().unwrap() = false; // HDEL
                }
            })
        };
        let waiter = {
            let (p, q) = (Arc::clone(&p), Arc::clone(&redis_queued));
            thread::spawn(move || {
                if p.leave(false) && p.take_queue_leave() {
                    *q.lock().unwrap() = false; // HDEL
                }
            })
        };
        release.join().unwrap();
        waiter.join().unwrap();
        assert_eq!(p.count(), 0);
        assert!(!*redis_queued.lock().unwrap(), "queued with nobody waiting");
    });
}

/// A try by the only local waiter takes the lock, and the script takes the
/// client out of the queue with it; the waiter then forgets that the client
/// was queued (`unqueue_if_alone`), so that its departure sends no `LEAVE`
/// that would find nothing to do. Meanwhile a newcomer joins, and its try
/// (run by Redis before or after the take) queues the client, then leaves.
/// Redis runs the commands in the order they happen here.
///
/// Checked: once both left, the client is not in the queue (a newcomer's
/// queueing is never forgotten).
#[test]
fn a_take_by_the_only_waiter_vs_a_newcomer() {
    explore("take by the only waiter vs a newcomer", || {
        let p = Arc::new(Presence::new());
        p.join();
        p.mark_queued(); // the waiter's first try was refused and queued the client
        let redis_queued = Arc::new(Mutex::new(true));

        let taker = {
            let (p, q) = (Arc::clone(&p), Arc::clone(&redis_queued));
            thread::spawn(move || {
                let before = p.marks(); // read before its next try is sent
                *q.lock().unwrap() = false; // the try takes the lock: out of the queue
                p.unqueue_if_alone(before); // its reply
                if p.leave(false) && p.take_queue_leave() {
                    *q.lock().unwrap() = false; // LEAVE
                }
            })
        };
        let newcomer = {
            let (p, q) = (Arc::clone(&p), Arc::clone(&redis_queued));
            thread::spawn(move || {
                p.join();
                *q.lock().unwrap() = true; // its try is refused and queues the client
                p.mark_queued(); // its reply
                if p.leave(false) && p.take_queue_leave() {
                    *q.lock().unwrap() = false; // LEAVE
                }
            })
        };
        taker.join().unwrap();
        newcomer.join().unwrap();
        assert_eq!(p.count(), 0);
        assert!(!*redis_queued.lock().unwrap(), "queued with nobody waiting");
    });
}

/// The same take, when a newcomer's try was abandoned in flight (its task
/// dropped before the reply): Redis may run that try at any time, even after
/// the take, so its mark must not be forgotten by the take; only a `LEAVE`
/// may (found in review).
///
/// Checked: a `LEAVE` is sent once both left.
#[test]
fn a_take_after_an_abandoned_try_still_leaves() {
    explore("take after an abandoned try", || {
        let p = Arc::new(Presence::new());
        p.join();
        p.mark_queued(); // the taker's first try was refused and queued the client
        p.join(); // a newcomer, whose try is in flight
        let leaves = Arc::new(Mutex::new(0));
        let newcomer = {
            let (p, l) = (Arc::clone(&p), Arc::clone(&leaves));
            thread::spawn(move || {
                // Dropped with its try in flight.
                if p.leave(true) && p.take_queue_leave() {
                    *l.lock().unwrap() += 1;
                }
            })
        };
        let taker = {
            let (p, l) = (Arc::clone(&p), Arc::clone(&leaves));
            thread::spawn(move || {
                let before = p.marks(); // before its next try is sent
                p.unqueue_if_alone(before); // the try took the lock
                if p.leave(false) && p.take_queue_leave() {
                    *l.lock().unwrap() += 1;
                }
            })
        };
        newcomer.join().unwrap();
        taker.join().unwrap();
        assert_eq!(p.count(), 0);
        assert_eq!(
            *leaves.lock().unwrap(),
            1,
            "an abandoned try was forgotten without a LEAVE"
        );
    });
}
