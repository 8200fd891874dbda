//! The elections this client observes: one entry per observed election
//! channel (`<value>:obs`), shared by every receiver of the process, with
//! the wake-up of its one watching task. The subscriber task routes the
//! channel's messages here (`on_message`) and, after a reconnect, wakes
//! every watcher (`wake_all`): a message missed while the connection was
//! down costs one read.

use std::sync::Arc;
use std::time::SystemTime;

use dashmap::DashMap;
use tokio::sync::{watch, Notify};

/// Who leads an election, as [`Election::leader`](crate::Election::leader)
/// reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// What the leader proclaimed (empty until its first proclamation has
    /// reached Redis, a round trip after it was elected).
    pub value: String,
    /// Its term: the fencing token of its hold.
    pub fencing_token: u64,
    /// Since when it leads, by its client's clock.
    pub since: SystemTime,
}

/// One observed election: what its receivers see, and its watcher's
/// wake-up.
pub(crate) struct Observed {
    pub(crate) leader: watch::Sender<Option<Leader>>,
    /// A change message came (or a reconnect): read the leader again.
    pub(crate) changed: Notify,
}

/// Every observed election of a client, by channel.
#[derive(Default)]
pub(crate) struct Observers {
    channels: DashMap<String, Arc<Observed>>,
}

impl Observers {
    /// A receiver of `channel`'s leader, and the entry when it is new (the
    /// caller subscribes the channel and starts its watcher).
    pub(crate) fn join(
        &self,
        channel: &str,
    ) -> (watch::Receiver<Option<Leader>>, Option<Arc<Observed>>) {
        let entry = self.channels.entry(channel.to_owned());
        match entry {
            dashmap::Entry::Occupied(e) => (e.get().leader.subscribe(), None),
            dashmap::Entry::Vacant(e) => {
                let (leader, rx) = watch::channel(None);
                let observed = Arc::new(Observed {
                    leader,
                    changed: Notify::new(),
                });
                e.insert(Arc::clone(&observed));
                (rx, Some(observed))
            }
        }
    }

    /// Drop `channel`'s entry if nobody receives its leader any more (a
    /// receiver that joined meanwhile keeps it). Returns whether it went.
    pub(crate) fn leave_if_unobserved(&self, channel: &str) -> bool {
        self.channels
            .remove_if(channel, |_, o| o.leader.receiver_count() == 0)
            .is_some()
    }

    /// A message on `channel`: wake its watcher. `false` when the channel
    /// is not an observed one.
    pub(crate) fn on_message(&self, channel: &str) -> bool {
        match self.channels.get(channel) {
            Some(o) => {
                o.changed.notify_one();
                true
            }
            None => false,
        }
    }

    /// Whether `channel` is observed (a receiver joined since its watcher
    /// left, say).
    pub(crate) fn is_observed(&self, channel: &str) -> bool {
        self.channels.contains_key(channel)
    }

    /// Whether any election is observed (the subscriber's heartbeat then
    /// checks the connection).
    pub(crate) fn any(&self) -> bool {
        !self.channels.is_empty()
    }

    /// Drop `channel`'s entry if it is still `observed` (its watcher ended:
    /// shutdown, or its runtime went away), so its receivers see the
    /// sender gone.
    pub(crate) fn forget(&self, channel: &str, observed: &Arc<Observed>) {
        self.channels
            .remove_if(channel, |_, o| Arc::ptr_eq(o, observed));
    }

    /// Every observed channel (to subscribe again after a reconnect).
    pub(crate) fn channels(&self) -> Vec<String> {
        self.channels.iter().map(|e| e.key().clone()).collect()
    }

    /// Wake every watcher: messages may have been missed.
    pub(crate) fn wake_all(&self) {
        for e in self.channels.iter() {
            e.changed.notify_one();
        }
    }
}
