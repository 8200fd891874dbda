//! `min_replicas`: an acquisition is reported only once enough replicas
//! acknowledged it, with `WAIT` on a connection of the replica pool
//! ([`pool`]).
//!
//! `WAIT` counts the replicas that acknowledged the writes of ITS
//! connection, and it blocks that connection. So it runs on a connection of
//! the replica pool, checked out for this call alone, after a write on that
//! same connection: a renewal of this acquisition's exact head (which also
//! proves that server has it). Replication is one ordered stream per
//! primary, and that renewal is sent after the acquire's reply arrived, so a
//! replica that acknowledged it has the lock too. If fred opened a new
//! connection between the renewal and `WAIT` (a reconnect, a failover), the
//! count may be another server's: the check then fails with
//! `NotReplicated` (0 acknowledged), see [`pool`] and `crate::conn_watch`.

mod pool;

use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::ClientLike;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand};

use crate::calls::Calls;
use crate::error::{Error, Result};
use crate::scripts::Names;

pub(crate) use pool::Replicas;

/// The acquisition a `min_replicas` check confirms: exactly this hold
/// (token AND fence), with the lease it was taken for.
pub(crate) struct Acquisition<'a> {
    pub(crate) names: &'a Names,
    pub(crate) token: &'a str,
    /// Permits it holds (1 for a lock).
    pub(crate) permits: u32,
    pub(crate) fence: u64,
    pub(crate) lease_ms: u64,
}

/// Wait until `required` replicas acknowledged `acquisition`, `WAIT`ing at
/// most `timeout_ms` (and the command timeout on top, for the round trip).
///
/// Fails with [`Error::NotReplicated`] when fewer acknowledged, when this
/// server does not have exactly this acquisition, or when the connection
/// changed between the write and `WAIT`; with the command's error when a
/// call failed. It releases nothing: the hold stays the caller's.
pub(crate) async fn acknowledged(
    replicas: &Arc<Replicas>,
    calls: &Calls,
    acquisition: Acquisition<'_>,
    (required, timeout_ms): (u32, u64),
    command_timeout: Duration,
) -> Result<()> {
    let checkout = replicas.checkout().await?;
    let conn = checkout.client();
    let names = acquisition.names;
    // WAIT counts only if it runs on the connection that made the write
    // (see `pool`): watched from before the write (in a cluster, the
    // connection of the lock's node, which the renewal below goes to).
    let mut watch = checkout.watch(&names.lock);
    // The write WAIT waits for: it always writes, matches this
    // acquisition's exact head (token AND fence: fred may have replayed the
    // acquire on another server, where the token holds with another fence)
    // and never shortens the lease. Not there: this server does not have
    // the lock the caller would get, so nothing here can be confirmed.
    let renewed = calls
        .confirm_lease(
            conn,
            names,
            acquisition.token,
            (acquisition.permits, acquisition.fence),
            acquisition.lease_ms,
        )
        .await?;
    if renewed != [1] {
        return Err(Error::NotReplicated { acked: 0, required });
    }
    // WAIT may legitimately take its whole timeout: bound it by that plus
    // the command timeout, not by the command timeout alone. One attempt
    // only: a WAIT that fred replayed on a new connection would cover none
    // of this connection's writes. (That does not keep a WAIT that was
    // queued, not yet written, off a new connection: the watch does.) In a
    // cluster, to the node the watch recorded for the slot, not by the slot:
    // with that node's connection gone, fred would route a keyless command
    // to any other primary, unannounced; pinned, it fails to route instead.
    let limit = Duration::from_millis(timeout_ms) + command_timeout;
    let options = Options {
        timeout: Some(limit),
        max_attempts: Some(1),
        cluster_node: watch.node().cloned(),
        cluster_hash: watch.slot().map(ClusterHash::Custom),
        ..Default::default()
    };
    let conn = conn.with_options(&options);
    let wait = conn.custom::<i64, _>(
        CustomCommand::new_static("WAIT", None, true),
        vec![i64::from(required), timeout_ms as i64],
    );
    let acked = crate::error::with_timeout(limit + Duration::from_millis(100), wait).await?;
    if !watch.unchanged(checkout.client()) {
        // The count may be of another server's replication stream: it says
        // nothing of this lock.
        tracing::warn!(key = %names.lock, acked,
            "relaylock: the connection changed between the lock's write and WAIT; its replication is unknown");
        return Err(Error::NotReplicated { acked: 0, required });
    }
    match acked {
        n if n >= i64::from(required) => Ok(()),
        n => Err(Error::NotReplicated {
            acked: u32::try_from(n.max(0)).unwrap_or(0),
            required,
        }),
    }
}
