//! The global order of a multi-key lock's keys, which every client uses:
//! by hash slot, then by key (bytes), duplicates removed; and the slot
//! groups, the runs of one slot that one script call takes (all the keys at
//! once when the server is not a cluster). Pure, so the ordering argument's
//! model (`relaylock-loom`, "multi-key order") runs on this very code.

use std::ops::Range;

/// Sort `keys` (each with its hash slot and what the caller keeps with it)
/// into the global order, and drop repeated keys.
pub(crate) fn order<T>(keys: &mut Vec<(u16, String, T)>) {
    keys.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    keys.dedup_by(|a, b| a.1 == b.1);
}

/// Runs of equal slots in `slots` (in the global order), or everything in
/// one run when not `clustered`.
pub(crate) fn groups(slots: &[u16], clustered: bool) -> Vec<Range<usize>> {
    if slots.is_empty() {
        return Vec::new();
    }
    if !clustered {
        return std::iter::once(0..slots.len()).collect();
    }
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=slots.len() {
        if i == slots.len() || slots[i] != slots[start] {
            out.push(start..i);
            start = i;
        }
    }
    out
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_slot_then_key_and_repeat_once() {
        let mut keys = vec![
            (9, "b".to_owned(), ()),
            (2, "z".to_owned(), ()),
            (9, "a".to_owned(), ()),
            (2, "z".to_owned(), ()),
        ];
        order(&mut keys);
        let got: Vec<(u16, &str)> = keys.iter().map(|(s, k, ())| (*s, k.as_str())).collect();
        assert_eq!(got, [(2, "z"), (9, "a"), (9, "b")]);
    }

    #[test]
    fn slot_groups_are_runs_of_one_slot_in_a_cluster_only() {
        assert_eq!(groups(&[], true), Vec::<Range<usize>>::new());
        assert_eq!(groups(&[3, 3, 9, 12, 12], true), vec![0..2, 2..3, 3..5]);
        assert_eq!(
            groups(&[3, 3, 9, 12, 12], false),
            std::iter::once(0..5).collect::<Vec<_>>()
        );
        assert_eq!(
            groups(&[7], true),
            std::iter::once(0..1).collect::<Vec<_>>()
        );
    }
}
