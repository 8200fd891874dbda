//! The two `Presence` handshakes alone, with no other lock around them (the
//! other models add mutexes of their own, which order the accesses and so
//! hide what the `SeqCst` fences are for).
//!
//! Checked: a newcomer that relies on the confirmation (it read it as
//! confirmed after registering) is never one the clean-up overlooked (the
//! clean-up unconfirmed it and saw nobody); and of the last waiter leaving
//! and a requeueing release ending, exactly one takes the client out of the
//! queue.

use loom::sync::Arc;
use loom::thread;

use super::explore;
use crate::state::presence::Presence;

#[test]
fn confirmation_handshake() {
    explore("join vs unconfirm, bare", || {
        let p = Arc::new(Presence::new());
        p.set_confirmed(true);
        let newcomer = {
            let p = Arc::clone(&p);
            thread::spawn(move || {
                p.join();
                p.is_confirmed()
            })
        };
        let unsubscribed = p.unconfirm_if_idle();
        let relied = newcomer.join().unwrap();
        assert!(
            !(relied && unsubscribed),
            "the newcomer relies on a channel the clean-up unsubscribes"
        );
    });
}

#[test]
fn queue_handshake() {
    explore("last waiter vs requeue end, bare", || {
        let p = Arc::new(Presence::new());
        p.join();
        assert!(p.begin_requeue());
        let waiter = {
            let p = Arc::clone(&p);
            thread::spawn(move || p.leave(false) && p.take_queue_leave())
        };
        p.end_requeue();
        let release_took = p.take_queue_leave();
        let waiter_took = waiter.join().unwrap();
        assert_eq!(
            u8::from(release_took) + u8::from(waiter_took),
            1,
            "the client must leave the queue exactly once"
        );
    });
}
