//! Where one waiter's wait loop (`LockCall::wait_queued`) stands between two
//! turns, and the transitions that move it: each wake-up of the loop is one
//! named transition, and every transition says what the next turn does
//! first.

use std::future::Future;
use std::pin::Pin;

use super::Subscription;
use crate::registry::PollerRole;

/// What the next turn of the wait loop does first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Turn {
    /// Sleep until the next wake-up.
    Sleep,
    /// Try once. `key_wake`: a wake-up from the key's shared `Notify` (a
    /// release message, or a wake-up passed on) brought this turn; it must
    /// reach some waiter's try, so a turn that does not try passes it on.
    Try { key_wake: bool },
}

impl Turn {
    /// The first turn after the first subscription's `outcome`: only the
    /// waiter that confirmed it tries at once (a release published before
    /// the confirmation reached nobody), or one that wins the `probe`
    /// claim when it was confirmed already; an unconfirmed key's poller
    /// re-checks instead.
    pub(super) fn after_subscribing(outcome: Subscription, probe: impl FnOnce() -> bool) -> Self {
        match outcome {
            Subscription::ConfirmedNow => Turn::Try { key_wake: false },
            Subscription::AlreadyConfirmed if probe() => Turn::Try { key_wake: false },
            Subscription::AlreadyConfirmed | Subscription::Unconfirmed => Turn::Sleep,
        }
    }
}

/// Whether a release of this client is handing the lock to this call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OfferClaim {
    /// No release claimed this call's offer (or the call has none).
    Open,
    /// A release's claim on this call's offer is in flight: only its
    /// outcome (or the deadline, or a reconnect) wakes the waiter; wake-ups
    /// of the key's `Notify` are left to the other waiters.
    Claimed,
}

/// A degraded key's subscription attempt, run by its poller beside the
/// polling (it may take a command timeout on a silent connection).
pub(super) type Resubscription<'a> = Pin<Box<dyn Future<Output = Subscription> + Send + 'a>>;

/// The key's subscription as the waiter last saw it, and the waiter's part
/// in polling the key while it is degraded. Read again at every sleep
/// ([`WaitState::saw_subscription`]).
enum Polling<'a> {
    /// Confirmed: a release message reaches this client.
    Confirmed,
    /// Not confirmed, and another local waiter polls: this one sleeps until
    /// the polling role is handed on (still bounded by the holder's lease,
    /// so a hand-over of the role that goes astray costs at most that).
    Degraded,
    /// Not confirmed, and this waiter polls, with its subscription attempt
    /// when one is running.
    Poller {
        /// Held, not read: dropping it hands the role on.
        _role: PollerRole,
        resubscribe: Option<Resubscription<'a>>,
    },
}

impl Polling<'_> {
    /// A degraded key's polling: this waiter's, with the `role`.
    fn degraded(role: Option<PollerRole>) -> Self {
        match role {
            Some(role) => Polling::Poller {
                _role: role,
                resubscribe: None,
            },
            None => Polling::Degraded,
        }
    }
}

/// One waiter's wait loop between two turns.
pub(super) struct WaitState<'a> {
    turn: Turn,
    claim: OfferClaim,
    polling: Polling<'a>,
}

impl<'a> WaitState<'a> {
    /// The state of a waiter that starts with the turn `first` (the key's
    /// polling is read at its first sleep).
    pub(super) fn new(first: Turn) -> Self {
        WaitState {
            turn: first,
            claim: OfferClaim::Open,
            polling: Polling::Confirmed,
        }
    }

    /// Start a turn: what it does first. Unless a wake-up says otherwise,
    /// the turn after it sleeps.
    pub(super) fn take_turn(&mut self) -> Turn {
        std::mem::replace(&mut self.turn, Turn::Sleep)
    }

    /// Whether the next turn tries.
    pub(super) fn tries(&self) -> bool {
        matches!(self.turn, Turn::Try { .. })
    }

    /// A release of this client claimed this call's offer while it was
    /// about to try: the claim's outcome wakes it.
    pub(super) fn claimed(&mut self) {
        self.claim = OfferClaim::Claimed;
    }

    /// Whether a wake-up of the key's `Notify` is this waiter's to take.
    pub(super) fn listens_to_key(&self) -> bool {
        self.claim == OfferClaim::Open
    }

    /// A wake-up of the key's `Notify` arrived (a release message, or one
    /// passed on): try, and pass it on if the try does not happen.
    pub(super) fn message_arrived(&mut self) {
        self.turn = Turn::Try { key_wake: true };
    }

    /// The claim on this call's offer ended in doubt (the release's outcome
    /// is unknown, or the lock is free): try; the acquire script finds a
    /// grant that did happen.
    pub(super) fn claim_rechecks(&mut self) {
        self.claim = OfferClaim::Open;
        self.turn = Turn::Try { key_wake: false };
    }

    /// The claim on this call's offer ended without news for it (the lock
    /// went to another client), or the wake-up was stale: sleep on, still
    /// claimed when a newer claim is `still_claimed`.
    pub(super) fn claim_ended(&mut self, still_claimed: bool) {
        self.claim = if still_claimed {
            OfferClaim::Claimed
        } else {
            OfferClaim::Open
        };
        self.turn = Turn::Sleep;
    }

    /// The subscriber reconnected (it subscribed every channel again
    /// first): a release message may have been lost, so try.
    pub(super) fn reconnected(&mut self) {
        self.turn = Turn::Try { key_wake: false };
    }

    /// The key's estimate moved earlier: sleep again, to the new bound.
    pub(super) fn estimate_moved(&mut self) {
        self.turn = Turn::Sleep;
    }

    /// The estimate expired (or the poll is due): try if this waiter won
    /// the claim to re-check (`won`), else sleep on and learn the outcome
    /// from the winner's try.
    pub(super) fn estimate_expired(&mut self, won: bool) {
        self.turn = if won {
            Turn::Try { key_wake: false }
        } else {
            Turn::Sleep
        };
    }

    /// What the key's subscription is now (`confirmed`), read before each
    /// sleep: confirmed, the waiter drops any polling role (handing it on)
    /// and its subscription attempt; degraded, a waiter without the role
    /// takes it if it is free (`take_role`).
    pub(super) fn saw_subscription(
        &mut self,
        confirmed: bool,
        take_role: impl FnOnce() -> Option<PollerRole>,
    ) {
        if confirmed {
            self.polling = Polling::Confirmed;
        } else if !self.polls() {
            self.polling = Polling::degraded(take_role());
        }
    }

    /// The key's polling role was handed on, and this waiter took it if it
    /// could (`role`): taken at once, so a waiter that leaves right after
    /// hands it on again. Sleep, to the poller's bound.
    pub(super) fn role_freed(&mut self, role: Option<PollerRole>) {
        self.polling = Polling::degraded(role);
        self.turn = Turn::Sleep;
    }

    /// Whether this waiter polls the degraded key.
    pub(super) fn polls(&self) -> bool {
        matches!(self.polling, Polling::Poller { .. })
    }

    /// Whether this waiter waits for the polling role of a degraded key.
    pub(super) fn awaits_role(&self) -> bool {
        matches!(self.polling, Polling::Degraded)
    }

    /// Whether the poller's subscription attempt is running.
    pub(super) fn resubscribing(&self) -> bool {
        matches!(
            self.polling,
            Polling::Poller {
                resubscribe: Some(_),
                ..
            }
        )
    }

    /// The poller starts a subscription attempt beside its polling.
    pub(super) fn resubscribe(&mut self, attempt: Resubscription<'a>) {
        if let Polling::Poller { resubscribe, .. } = &mut self.polling {
            *resubscribe = Some(attempt);
        }
    }

    /// The poller's subscription attempt, to await; never completes when
    /// none runs.
    pub(super) async fn resubscription(&mut self) -> Subscription {
        match &mut self.polling {
            Polling::Poller {
                resubscribe: Some(attempt),
                ..
            } => attempt.await,
            _ => std::future::pending().await,
        }
    }

    /// The poller's subscription attempt ended with `outcome`: try once if
    /// it confirmed the subscription (a release published before that
    /// reached nobody), else sleep.
    pub(super) fn resubscribed(&mut self, outcome: Subscription) {
        if let Polling::Poller { resubscribe, .. } = &mut self.polling {
            *resubscribe = None;
        }
        self.turn = if outcome == Subscription::ConfirmedNow {
            Turn::Try { key_wake: false }
        } else {
            Turn::Sleep
        };
    }
}
