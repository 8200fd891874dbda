//! The last waiter of a key leaves, its clean-up unsubscribes, and a
//! newcomer joins, all at once. The registry's rules, with the real
//! `Presence` handshake:
//!
//! * a newcomer joins under the map's lock (so never on a removed entry),
//!   then, if the channel is not confirmed, subscribes under the entry's
//!   subscription mutex;
//! * the clean-up, under the subscription mutex, unconfirms only when nobody
//!   is registered, unsubscribes, and removes the entry from the map under
//!   the map's lock only if still nobody is registered.
//!
//! Checked: the newcomer ends on an entry that is in the map and subscribed
//! (no waiter relies on a removed entry or a dropped subscription), and a
//! removed entry is unsubscribed (no subscription leaks).

use loom::sync::{Arc, Mutex};
use loom::thread;

use super::explore;
use crate::state::presence::Presence;

struct Entry {
    presence: Presence,
    /// The subscription mutex's flag: SUBSCRIBE sent and not undone.
    subscribed: Mutex<bool>,
}

fn subscribed_entry() -> Arc<Entry> {
    let e = Entry {
        presence: Presence::new(),
        subscribed: Mutex::new(true),
    };
    e.presence.join(); // the waiter that will leave
    e.presence.set_confirmed(true);
    Arc::new(e)
}

/// What a waiter does after joining: make sure the channel is subscribed.
fn ensure_subscribed(e: &Entry) {
    if e.presence.is_confirmed() {
        return;
    }
    let mut sub = e.subscribed.lock().unwrap();
    if !e.presence.is_confirmed() {
        *sub = true;
        e.presence.set_confirmed(true);
    }
}

#[test]
fn join_cleanup_and_last_drop() {
    explore("join vs clean-up vs last drop", || {
        let first = subscribed_entry();
        // The map: the key's current entry, if any.
        let map: Arc<Mutex<Option<Arc<Entry>>>> = Arc::new(Mutex::new(Some(Arc::clone(&first))));

        let leaving = {
            let first = Arc::clone(&first);
            thread::spawn(move || {
                first.presence.leave(false);
            })
        };
        let cleanup = {
            let (first, map) = (Arc::clone(&first), Arc::clone(&map));
            thread::spawn(move || {
                let mut sub = first.subscribed.lock().unwrap();
                if !first.presence.unconfirm_if_idle() {
                    return;
                }
                *sub = false; // UNSUBSCRIBE
                let mut m = map.lock().unwrap();
                if m.as_ref()
                    .is_some_and(|e| Arc::ptr_eq(e, &first) && e.presence.is_unused())
                {
                    *m = None;
                }
                drop(m);
                drop(sub);
            })
        };
        let newcomer = {
            let map = Arc::clone(&map);
            thread::spawn(move || {
                let entry = {
                    let mut m = map.lock().unwrap();
                    let e = m
                        .get_or_insert_with(|| {
                            Arc::new(Entry {
                                presence: Presence::new(),
                                subscribed: Mutex::new(false),
                            })
                        })
                        .clone();
                    e.presence.join();
                    e
                };
                ensure_subscribed(&entry);
                entry
            })
        };
        leaving.join().unwrap();
        cleanup.join().unwrap();
        let mine = newcomer.join().unwrap();

        let current = map.lock().unwrap().clone();
        let current = current.expect("the newcomer's entry is in the map");
        assert!(
            Arc::ptr_eq(&current, &mine),
            "the newcomer waits on a removed entry"
        );
        assert!(
            *mine.subscribed.lock().unwrap(),
            "the newcomer's channel is not subscribed"
        );
        assert!(mine.presence.is_confirmed());
        if !Arc::ptr_eq(&mine, &first) {
            assert!(
                !*first.subscribed.lock().unwrap(),
                "a removed entry stayed subscribed"
            );
        }
    });
}
