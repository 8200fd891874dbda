//! The scripts' replies, read into types: the acquire loop, the release and
//! the watchdog never see a raw reply.

use std::time::Duration;

use crate::error::{Error, Result};

/// The acquire script's reply, checked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Taken, with this fencing token; with the remaining lease when the
    /// token already held the lock (a replay, or a hand-over found by a
    /// re-check: its lease started before this call).
    Acquired(u64, Option<Duration>),
    /// Held by another owner for about this long.
    Held(Duration),
}

/// Interpret the acquire script's reply. The remaining lease is
/// `default_lease` when Redis reports none (`-1`: a key without expiry, so
/// relaylock did not write it; `-2`: a void marker): re-check after that.
pub(crate) fn acquire_reply(reply: &[i64], default_lease: Duration) -> Result<AcquireReply> {
    match reply {
        [fence] if *fence > 0 => Ok(AcquireReply::Acquired(*fence as u64, None)),
        // The third element (`others`) is for clients that want it.
        [1, fence, 0 | 1, pttl] if *fence > 0 => Ok(AcquireReply::Acquired(
            *fence as u64,
            // No expiry cannot happen for a lock relaylock holds; treat it
            // as a lease that is all there.
            u64::try_from(*pttl).ok().map(Duration::from_millis),
        )),
        // Refused: `-3 - pttl`.
        [refused] if *refused < 0 => Ok(AcquireReply::Held(
            u64::try_from(-3 - *refused).map_or(default_lease, Duration::from_millis),
        )),
        other => Err(Error::UnexpectedReply(format!("acquire replied {other:?}"))),
    }
}

/// Interpret the semaphore acquire's reply, in the lock's terms: `{1,
/// fence, left}` taken, `{0, bound}` not admitted (re-check after `bound` ms, the
/// soonest expiry among the holds), `{0, -1}` the value is not relaylock's.
pub(crate) fn sem_acquire_reply(reply: &[i64], default_lease: Duration) -> Result<AcquireReply> {
    match reply {
        [0, -1] => Err(Error::UnexpectedReply(
            "the semaphore's value was not written by relaylock".into(),
        )),
        [1, fence, _, remaining, ..] if *fence > 0 => Ok(AcquireReply::Acquired(
            *fence as u64,
            u64::try_from(*remaining).ok().map(Duration::from_millis),
        )),
        [1, fence] | [1, fence, _] if *fence > 0 => Ok(AcquireReply::Acquired(*fence as u64, None)),
        [0, bound] => Ok(AcquireReply::Held(
            u64::try_from(*bound).map_or(default_lease, Duration::from_millis),
        )),
        other => Err(Error::UnexpectedReply(format!(
            "semaphore acquire replied {other:?}"
        ))),
    }
}

/// What a batched semaphore acquire gave each of the batch's tokens, in
/// order: its fence and the hold's remaining lease (a hold the token
/// already had may have started earlier), `None` when it was not admitted;
/// empty when the caller was not admitted.
fn sem_batch_fences(reply: &[i64]) -> Vec<Option<(u64, Duration)>> {
    let admitted = |fence: i64, remaining: i64| {
        (fence > 0).then(|| {
            let remaining = u64::try_from(remaining).unwrap_or(0);
            (fence as u64, Duration::from_millis(remaining))
        })
    };
    match reply {
        [1, _, _, _, rest @ ..] => rest.chunks_exact(2).map(|p| admitted(p[0], p[1])).collect(),
        _ => Vec::new(),
    }
}

/// Whether an admitted semaphore acquire left part of this client's
/// reservation reserved (`{1, fence, left}` with `left > 0`): another local
/// waiter may take it.
fn sem_reservation_left(reply: &[i64]) -> bool {
    matches!(reply, [1, _, left, ..] if *left > 0)
}

/// What one try (an [`ACQUIRE`](crate::scripts::ACQUIRE) or
/// [`SEM_ACQUIRE`](crate::scripts::SEM_ACQUIRE) call that Redis answered)
/// found: the acquire loop reads nothing else of the reply.
#[derive(Debug)]
pub(crate) enum TryReply {
    /// Taken, with this fencing token.
    Acquired {
        fence: u64,
        /// The hold's remaining lease when the token already held it (a
        /// replay, a hand-over found by a re-check, or a hold another
        /// reader's batch took for it): its lease started before this call.
        remaining: Option<Duration>,
        /// A semaphore: part of this client's reservation is left, for
        /// another local waiter to take.
        reservation_left: bool,
        /// A reader's batch: what each of the batch's tokens got, in the
        /// order sent (see [`sem_batch_fences`]).
        batch: Vec<Option<(u64, Duration)>>,
    },
    /// Held by another owner (or not admitted): re-check after about this
    /// long.
    Held(Duration),
    /// Redis answered something the scripts never return, or the
    /// semaphore's value is not relaylock's: the call's error. No token of
    /// a batch was admitted.
    Unusable(Error),
}

impl TryReply {
    /// The acquire script's reply ([`acquire_reply`]).
    pub(super) fn of_lock(reply: &[i64], default_lease: Duration) -> Self {
        match acquire_reply(reply, default_lease) {
            Ok(AcquireReply::Acquired(fence, remaining)) => TryReply::Acquired {
                fence,
                remaining,
                reservation_left: false,
                batch: Vec::new(),
            },
            Ok(AcquireReply::Held(bound)) => TryReply::Held(bound),
            Err(e) => TryReply::Unusable(e),
        }
    }

    /// The semaphore acquire's reply ([`sem_acquire_reply`]), with its
    /// batch and what is left of the reservation.
    pub(super) fn of_semaphore(reply: &[i64], default_lease: Duration) -> Self {
        match sem_acquire_reply(reply, default_lease) {
            Ok(AcquireReply::Acquired(fence, remaining)) => TryReply::Acquired {
                fence,
                remaining,
                reservation_left: sem_reservation_left(reply),
                batch: sem_batch_fences(reply),
            },
            Ok(AcquireReply::Held(bound)) => TryReply::Held(bound),
            Err(e) => TryReply::Unusable(e),
        }
    }

    /// What the batch's tokens got (empty unless acquired).
    pub(crate) fn batch(&self) -> &[Option<(u64, Duration)>] {
        match self {
            TryReply::Acquired { batch, .. } => batch,
            TryReply::Held(_) | TryReply::Unusable(_) => &[],
        }
    }
}

/// What the release script found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Released our lock: it is free now (no other client was queued; the
    /// caller wakes its own local waiters).
    Freed,
    /// Released our lock and reserved it for another queued client, which
    /// was told.
    HandedOver,
    /// Released our lock and gave it to the local waiter's token the call
    /// named (`next`), with this fencing token.
    Granted(u64),
    /// Our key was already released by an earlier (replayed) call.
    Already,
    /// The key no longer held our token.
    NotOurs,
}

/// Parse the release script's reply (one integer).
pub(crate) fn release_reply(reply: &[i64]) -> Result<Released> {
    Ok(match reply {
        [1] => Released::Freed,
        [3 | 5] => Released::HandedOver,
        [granted] if *granted < 0 => Released::Granted(granted.unsigned_abs()),
        [2] => Released::Already,
        [0] => Released::NotOurs,
        other => return Err(Error::UnexpectedReply(format!("release replied {other:?}"))),
    })
}

/// Parse the semaphore release's reply into the lock's terms, with how
/// many local waiters the caller wakes: `Freed` when the releaser's own
/// client got a reservation (wake 1, it takes it) or the permits are free
/// (wake up to the permits released, `u32::MAX` here); `HandedOver` when
/// clients ahead of it wait (wake none).
pub(crate) fn sem_release_reply(reply: &[i64]) -> Result<(Released, u32, bool)> {
    // How many local waiters `fits` asks for, and whether the releaser's
    // own client got a new reservation (the caller arms the grace timer).
    let wake = |fits: i64| match fits {
        1 => Some((1, true)),
        2 => Some((u32::MAX, false)),
        3 => Some((u32::MAX, true)),
        0 => Some((0, false)),
        _ => None,
    };
    let parsed = match reply {
        [1, told, fits] if *told >= 0 => wake(*fits).map(|(n, own)| {
            let released = if n == 0 {
                Released::HandedOver
            } else {
                Released::Freed
            };
            (released, n, own)
        }),
        // A replay: the first run's reply (and its wake-ups) was lost.
        [2, fits] => wake(*fits).map(|(_, own)| (Released::Already, u32::MAX, own)),
        [0, fits] => wake(*fits).map(|(n, own)| (Released::NotOurs, n, own)),
        _ => None,
    };
    parsed.ok_or_else(|| Error::UnexpectedReply(format!("semaphore release replied {reply:?}")))
}

/// A semaphore's permits, as [`SEM_PEEK`](crate::scripts::SEM_PEEK) sees
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SemUsage {
    /// Permits held or reserved (expired holds not counted).
    pub(crate) used: u64,
    /// Clients queued for permits.
    pub(crate) queued: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_replies_are_checked() {
        let lease = Duration::from_secs(30);
        assert_eq!(
            acquire_reply(&[7], lease).unwrap(),
            AcquireReply::Acquired(7, None)
        );
        assert_eq!(
            acquire_reply(&[1, 7, 0, 1500], lease).unwrap(),
            AcquireReply::Acquired(7, Some(Duration::from_millis(1500)))
        );
        // Refused: `-3 - pttl`.
        assert_eq!(
            acquire_reply(&[-253], lease).unwrap(),
            AcquireReply::Held(Duration::from_millis(250))
        );
        assert_eq!(
            acquire_reply(&[-3], lease).unwrap(),
            AcquireReply::Held(Duration::ZERO)
        );
        // No expiry (a foreign key) or a void marker: re-check after the lease.
        assert_eq!(
            acquire_reply(&[-2], lease).unwrap(),
            AcquireReply::Held(lease)
        );
        assert_eq!(
            acquire_reply(&[-1], lease).unwrap(),
            AcquireReply::Held(lease)
        );
        for bad in [
            &[][..],
            &[0],
            &[1, 0],
            &[1, 7],
            &[1, 7, 0],
            &[0, 250],
            &[1, 7, 2, 5],
            &[0, 1, 2],
        ] {
            assert!(acquire_reply(bad, lease).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn semaphore_acquire_replies_are_read_with_a_batch() {
        let lease = Duration::from_secs(30);
        // Admitted, 1 of the reservation left, a 10 s hold, two batch tokens.
        let reply = [1, 7, 1, 10_000, 8, 10_000, 0, 0];
        assert_eq!(
            sem_acquire_reply(&reply, lease).unwrap(),
            AcquireReply::Acquired(7, Some(Duration::from_secs(10)))
        );
        assert!(
            sem_reservation_left(&reply),
            "a reservation left is read with a batch too"
        );
        assert_eq!(
            sem_batch_fences(&reply),
            vec![Some((8, Duration::from_secs(10))), None]
        );
        assert!(!sem_reservation_left(&[1, 7, 0, 10_000, 8, 10_000]));
        assert!(sem_batch_fences(&[0, 50]).is_empty());
        assert_eq!(
            sem_acquire_reply(&[0, 50], lease).unwrap(),
            AcquireReply::Held(Duration::from_millis(50))
        );
        assert!(sem_acquire_reply(&[0, -1], lease).is_err());
    }

    #[test]
    fn try_replies_are_typed() {
        let lease = Duration::from_secs(30);
        let TryReply::Acquired {
            fence,
            remaining,
            reservation_left,
            batch,
        } = TryReply::of_lock(&[1, 7, 0, 1500], lease)
        else {
            panic!("taken");
        };
        assert_eq!(fence, 7);
        assert_eq!(remaining, Some(Duration::from_millis(1500)));
        assert!(!reservation_left && batch.is_empty());
        assert!(matches!(
            TryReply::of_lock(&[-253], lease),
            TryReply::Held(d) if d == Duration::from_millis(250)
        ));
        assert!(matches!(
            TryReply::of_lock(&[1, 0], lease),
            TryReply::Unusable(Error::UnexpectedReply(_))
        ));

        let reply = TryReply::of_semaphore(&[1, 7, 1, 10_000, 8, 4_000, 0, 0], lease);
        assert_eq!(
            reply.batch(),
            [Some((8, Duration::from_secs(4))), None].as_slice()
        );
        assert!(matches!(
            reply,
            TryReply::Acquired {
                fence: 7,
                remaining: Some(r),
                reservation_left: true,
                ..
            } if r == Duration::from_secs(10)
        ));
        let held = TryReply::of_semaphore(&[0, 50], lease);
        assert!(held.batch().is_empty());
        assert!(matches!(held, TryReply::Held(d) if d == Duration::from_millis(50)));
        // Not relaylock's value: unusable, and no batch token admitted.
        let foreign = TryReply::of_semaphore(&[0, -1], lease);
        assert!(foreign.batch().is_empty());
        assert!(matches!(foreign, TryReply::Unusable(_)));
    }

    #[test]
    fn release_replies_are_checked() {
        assert_eq!(release_reply(&[1]).unwrap(), Released::Freed);
        assert_eq!(release_reply(&[3]).unwrap(), Released::HandedOver);
        assert_eq!(release_reply(&[5]).unwrap(), Released::HandedOver);
        assert_eq!(release_reply(&[-9]).unwrap(), Released::Granted(9));
        assert_eq!(release_reply(&[2]).unwrap(), Released::Already);
        assert_eq!(release_reply(&[0]).unwrap(), Released::NotOurs);
        for bad in [&[][..], &[4], &[4, 9], &[1, 1], &[6], &[3, 1]] {
            assert!(release_reply(bad).is_err(), "{bad:?}");
        }
    }
}
