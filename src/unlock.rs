//! The operator's unlock ([`LockClient::unlock`](crate::LockClient::unlock),
//! `relaylock unlock`): free one hold by its token, through the same release
//! scripts its holder would have run.
//!
//! A stuck lock is one whose holder stopped without releasing it: a process
//! frozen, or a lease far longer than the work. Deleting the key by hand
//! would lose what the value keeps: the last fencing token (a later holder
//! could be issued a smaller one), the queue of waiting clients (nobody is
//! told, they sleep until their bound) and the record of releases. Running
//! the holder's own release instead keeps all three: the value becomes a
//! tombstone with the hold's fence (so the next fencing token is greater),
//! the first queued client is told (a reservation, as after any release),
//! and the holder, if it still runs, finds its lock lost.
//!
//! Two differences from the holder's own release. The fence does not join
//! the value's ring of released fences (`record` `'0'`), so the holder's
//! own later release reports the loss (`LockLost`) instead of taking it for
//! a replay of a release it made. And the releasing client is named by a
//! fresh id that no client has: the release scripts treat the releasing
//! client's queue entry as their caller's (drop it, leave its waiters to
//! it), so releasing as this client would strand its own waiters.
//!
//! The hold is looked up first with plain reads, for its fencing token: a
//! token that holds nothing changes nothing in Redis (a release without the
//! fence would void the token). Between the read and the release the hold
//! may end by itself; the lock's release script then finds the token gone
//! and writes nothing, a semaphore's hands permits freed meanwhile to
//! waiting clients, as any of its releases does.

use std::sync::Arc;

use fred::bytes_utils::Str;

use crate::calls::{ReleaseCall, Released};
use crate::error::Result;
use crate::hold_id::HoldId;
use crate::inner::ClientInner;
use crate::inspect::{Holder, Primitive};
use crate::scripts::{Kind, Names};

/// Release `token`'s hold of `key`'s `primitive`, as its holder would.
/// `Some(hold)`: it was held and is released now; `None`: the token held
/// nothing there (or its hold ended meanwhile).
pub(crate) async fn unlock(
    inner: &Arc<ClientInner>,
    primitive: Primitive,
    key: &str,
    token: &str,
) -> Result<Option<Holder>> {
    inner.check_key(key)?;
    let found = crate::inspect::with_client(inner, key).await?;
    let Some(hold) = found
        .states
        .into_iter()
        .filter(|s| s.primitive == primitive && !s.foreign)
        .flat_map(|s| s.holders)
        .find(|h| h.token == token)
    else {
        return Ok(None);
    };
    let fence = Some(hold.fencing_token);
    // A releaser no client is: see the module docs.
    let client = crate::token::new();
    let released = match primitive {
        Primitive::Mutex => {
            let hold = HoldId {
                names: inner.names(key),
                token: Str::from(token),
                fence,
                permits: 1,
            };
            let call = ReleaseCall {
                requeue: false,
                next: None,
                record: false,
            };
            inner.calls.release(&hold, &client, call).await?.0
        }
        Primitive::Semaphore | Primitive::RwLock => {
            let names = match primitive {
                Primitive::Semaphore => Names::semaphore(&inner.prefix, key),
                _ => Names::rw(&inner.prefix, key, Kind::Read),
            };
            let hold = HoldId {
                names,
                token: Str::from(token),
                fence,
                permits: 1,
            };
            inner
                .calls
                .sem_release(&hold, &client, None, false)
                .await?
                .0
        }
    };
    Ok(match released {
        Released::Freed | Released::HandedOver | Released::Granted(_) => {
            tell_holder(inner, token).await;
            Some(hold)
        }
        Released::Already | Released::NotOurs => None,
    })
}

/// Tell the client that held `token` (its id starts the token) on its
/// control channel, so that it checks that hold now and its `lost()` fires
/// within a few round trips, not at its next renewal (a third of its
/// lease). Best effort, within the command timeout: a client that does not
/// hear it (an older relaylock, a token of another form, a connection
/// down) learns at its next renewal or release, as before.
async fn tell_holder(inner: &ClientInner, token: &str) {
    use fred::interfaces::PubsubInterface;
    let Some(client) = crate::token::client_of(token) else {
        return;
    };
    let channel = crate::identity::control_channel(&inner.prefix, client);
    let message = format!("u:{token}");
    let redis = inner.calls.redis();
    let publish = async {
        if inner.registry.sharded() {
            redis.spublish::<i64, _, _>(channel, message).await
        } else {
            redis.publish::<i64, _, _>(channel, message).await
        }
    };
    match crate::error::with_timeout(inner.command_timeout, publish).await {
        Ok(0) => {
            tracing::debug!(%token, "relaylock: the holder's client does not listen (gone, or an older relaylock)")
        }
        Ok(_) => {}
        Err(e) => {
            tracing::debug!(error = %crate::error::readable(&e), "relaylock: could not tell the holder's client")
        }
    }
}
