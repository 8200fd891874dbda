//! The ordering argument of multi-key locks (docs/design.md, "Multi-key
//! locks"), checked over every interleaving of small worlds. It needs no
//! threads: Redis runs each script call atomically, so a world is the keys'
//! holders and FIFO queues and how far each call has got, and a step is
//! one call's next script call.
//!
//! A call takes its keys in the order [`order`] gives (the library's own
//! function): a free key whose queue is empty, or whose queue this call
//! heads (the key is reserved for it), is taken; a busy key queues the call
//! at its back (the wait parks there, keeping the keys already taken); once
//! it has every key, it releases them all. A call of one key is a
//! single-key lock in the same queues.
//!
//! Checked, for 3 calls over 3 keys and over 4 keys, and 4 calls over 3
//! keys, with every assignment of key sets: no reachable world where a call is unfinished and no call
//! can move (no deadlock), and every call finishes in some run. The same
//! search with each call taking its keys in the order it named them finds
//! a deadlock: the check can fail.

use std::collections::{HashSet, VecDeque};

use crate::state::order::order;

/// Keys' holders and queues, and each call's progress (`at` keys taken;
/// `done` released).
#[derive(Clone, PartialEq, Eq, Hash)]
struct World {
    holder: Vec<Option<usize>>,
    queue: Vec<Vec<usize>>,
    at: Vec<usize>,
    done: Vec<bool>,
}

/// Every world one step of call `c` leads to from `w` (none: it cannot
/// move now).
fn step(w: &World, c: usize, keys: &[usize]) -> Option<World> {
    if w.done[c] {
        return None;
    }
    let mut n = w.clone();
    if w.at[c] == keys.len() {
        for &k in keys {
            assert_eq!(
                n.holder[k],
                Some(c),
                "a call released a key it did not hold"
            );
            n.holder[k] = None;
        }
        n.done[c] = true;
        return Some(n);
    }
    let k = keys[w.at[c]];
    let turn = w.queue[k].first().is_none_or(|&first| first == c);
    if w.holder[k].is_none() && turn {
        n.holder[k] = Some(c);
        n.queue[k].retain(|&q| q != c);
        n.at[c] += 1;
        return Some(n);
    }
    if !w.queue[k].contains(&c) {
        n.queue[k].push(c);
        return Some(n);
    }
    None
}

/// Search every interleaving of `calls` (each the keys in the order it
/// takes them) over `nkeys` keys: `Err` with a deadlocked world's progress
/// if one is reachable.
fn search(nkeys: usize, calls: &[Vec<usize>]) -> Result<usize, Vec<usize>> {
    let start = World {
        holder: vec![None; nkeys],
        queue: vec![Vec::new(); nkeys],
        at: vec![0; calls.len()],
        done: vec![false; calls.len()],
    };
    let mut seen = HashSet::from([start.clone()]);
    let mut todo = VecDeque::from([start]);
    let mut finished = false;
    while let Some(w) = todo.pop_front() {
        if w.done.iter().all(|&d| d) {
            finished = true;
            continue;
        }
        let mut moved = false;
        for (c, keys) in calls.iter().enumerate() {
            if let Some(n) = step(&w, c, keys) {
                moved = true;
                if seen.insert(n.clone()) {
                    todo.push_back(n);
                }
            }
        }
        if !moved {
            return Err(w.at);
        }
    }
    assert!(finished, "no run finishes every call");
    Ok(seen.len())
}

/// Every set of keys of `0..nkeys` (as bit masks 1..2^n).
fn sets(nkeys: usize) -> Vec<Vec<usize>> {
    (1..1usize << nkeys)
        .map(|m| (0..nkeys).filter(|k| m >> k & 1 == 1).collect())
        .collect()
}

/// Key `k`'s hash slot in the model: 0, 2, 1, 0 for keys 0 to 3, against
/// their names' order, so both parts of the order matter (key 3 goes
/// before key 2, key 2 before key 1).
fn slot(k: usize) -> u16 {
    ((2 * k) % 3) as u16
}

/// `set`, as a caller names it, in the global order.
fn ordered(set: &[usize]) -> Vec<usize> {
    let mut keyed: Vec<(u16, String, usize)> = set
        .iter()
        .map(|&k| (slot(k), format!("key{k}"), k))
        .collect();
    // A key named twice counts once.
    keyed.extend(set.first().map(|&k| (slot(k), format!("key{k}"), k)));
    order(&mut keyed);
    keyed.into_iter().map(|(_, _, k)| k).collect()
}

/// Every assignment of key sets to `ncalls` calls over `nkeys` keys, each
/// taken in the global order: no deadlock. Returns the worlds explored.
fn all_worlds(nkeys: usize, ncalls: usize) -> usize {
    let all = sets(nkeys);
    let mut total = 0;
    let mut pick = vec![0usize; ncalls];
    loop {
        // Each caller names its keys in an order of its own: reversed, or
        // rotated by the call's index; `order` must undo it.
        let calls: Vec<Vec<usize>> = pick
            .iter()
            .enumerate()
            .map(|(c, &i)| {
                let mut named = all[i].clone();
                if c % 2 == 1 {
                    named.reverse();
                } else {
                    let n = named.len();
                    named.rotate_left(c % n);
                }
                ordered(&named)
            })
            .collect();
        match search(nkeys, &calls) {
            Ok(n) => total += n,
            Err(at) => panic!("deadlock: calls {calls:?} stuck at {at:?}"),
        }
        let mut i = 0;
        loop {
            if i == ncalls {
                return total;
            }
            pick[i] += 1;
            if pick[i] < all.len() {
                break;
            }
            pick[i] = 0;
            i += 1;
        }
    }
}

#[test]
fn multi_key_calls_in_the_global_order_never_deadlock() {
    let three = all_worlds(3, 3);
    let four = all_worlds(4, 3);
    let more = all_worlds(3, 4);
    println!(
        "model multi-key order: no deadlock in {three} worlds (3 calls, 3 keys, 343 assignments), {four} (3 calls, 4 keys, 3,375) and {more} (4 calls, 3 keys, 2,401)"
    );
}

#[test]
fn the_callers_own_orders_can_deadlock() {
    // Two calls naming two keys in opposite orders: each takes its first
    // key, then queues behind the other.
    let stuck = search(2, &[vec![0, 1], vec![1, 0]]);
    assert!(stuck.is_err(), "the check cannot fail");
    // In the global order the same calls never deadlock.
    assert!(search(2, &[ordered(&[0, 1]), ordered(&[1, 0])]).is_ok());
    // The order is slot first, then name: key 3 (slot 0) before key 2
    // (slot 1) before key 1 (slot 2).
    assert_eq!(ordered(&[1, 2, 3, 0, 2]), vec![0, 3, 2, 1]);
}
