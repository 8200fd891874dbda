//! Whether a series of commands on one fred client all went to one
//! connection. fred reconnects on its own, and sends a command queued
//! meanwhile (or one it replays) on the new connection, which after a
//! failover leads to another server. Commands whose meaning depends on the
//! connection (`WAIT` counts the acknowledgements of its own connection's
//! offset) or on running after an earlier command (an exact `PEXPIRE` that
//! may still be on a dropped connection) check it with a [`Watch`], begun
//! before the first command and asked after the last reply.

use fred::clients::Client;
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface};
use fred::types::config::Server;
use fred::util::redis_keyslot;
use tokio::sync::broadcast::error::TryRecvError;
use tokio::sync::broadcast::Receiver;

/// Watch `client`'s connection for commands on `key` (in a cluster, the
/// connection of its slot's node) from now on. See [`Watch`].
pub(crate) fn same_connection(client: &Client, key: &str) -> Watch {
    let slot = client.is_clustered().then(|| redis_keyslot(key.as_bytes()));
    // Subscribed BEFORE anything is sent: fred announces a new connection
    // (`broadcast_reconnect`) before it writes any caller's command on it
    // (only its handshake goes first), so every connection a later command
    // could go to is announced to this receiver.
    let reconnects = client.reconnect_rx();
    let route = slot.and_then(|s| node_of(client, s));
    Watch {
        reconnects,
        slot,
        route,
    }
}

/// The cluster node fred routes `slot` to now.
fn node_of(client: &Client, slot: u16) -> Option<Server> {
    client
        .cached_cluster_state()
        .and_then(|state| state.get_server(slot).cloned())
}

/// Whether the commands of one series all went to one connection: fred
/// opened no new connection (for the slot's node, in a cluster) and routes
/// the slot to the same node as when the watch began.
pub(crate) struct Watch {
    reconnects: Receiver<Server>,
    slot: Option<u16>,
    route: Option<Server>,
}

impl Watch {
    /// In a cluster, the key's hash slot.
    pub(crate) fn slot(&self) -> Option<u16> {
        self.slot
    }

    /// In a cluster, the node the slot was routed to when the watch began
    /// (commands pinned to it cannot silently go elsewhere).
    pub(crate) fn node(&self) -> Option<&Server> {
        self.route.as_ref()
    }

    /// `true` when every command sent since the watch began went to the
    /// connection that was current then. Call it after the last reply: a
    /// command written on a newer connection was announced before it was
    /// written, so before its reply.
    pub(crate) fn unchanged(&mut self, client: &Client) -> bool {
        // In a cluster, only a new connection to the watched node counts;
        // anywhere else, any new connection does.
        let only = self.slot.and(self.route.as_ref());
        if !no_new_connection(&mut self.reconnects, only) {
            return false;
        }
        match self.slot {
            Some(slot) => self.route.is_some() && node_of(client, slot) == self.route,
            None => true,
        }
    }
}

/// Whether `reconnects` announced no new connection since it subscribed
/// (with `only`, none to that server). Missed announcements (`Lagged`) and
/// a replaced sender (`Closed`, after `QUIT`) count as a new connection.
fn no_new_connection(reconnects: &mut Receiver<Server>, only: Option<&Server>) -> bool {
    loop {
        match reconnects.try_recv() {
            Err(TryRecvError::Empty) => return true,
            Ok(server) => {
                if only.is_none_or(|watched| *watched == server) {
                    return false;
                }
            }
            Err(TryRecvError::Lagged(_) | TryRecvError::Closed) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::interfaces::ClientLike;
    use fred::interfaces::KeysInterface;
    use fred::types::config::{Config, ReconnectPolicy};
    use fred::types::Builder;
    use relaylock_testkit::RedisServer;

    fn server(port: u16) -> Server {
        Server::new("127.0.0.1", port)
    }

    /// The announcements a watch counts, without a server: none; any
    /// (single server, Sentinel); only the watched node's (cluster); and the
    /// unknowns (missed announcements, a replaced sender) as changes.
    #[test]
    fn which_announcements_count() {
        let (tx, _) = tokio::sync::broadcast::channel(4);
        let mut rx = tx.subscribe();
        assert!(no_new_connection(&mut rx, None), "nothing announced");

        tx.send(server(1)).unwrap();
        assert!(!no_new_connection(&mut rx, None), "any counts");

        let mut rx = tx.subscribe();
        tx.send(server(2)).unwrap();
        assert!(no_new_connection(&mut rx, Some(&server(1))), "another node");
        tx.send(server(2)).unwrap();
        tx.send(server(1)).unwrap();
        assert!(!no_new_connection(&mut rx, Some(&server(1))), "the node");

        let mut rx = tx.subscribe();
        for port in 2..8 {
            tx.send(server(port)).unwrap();
        }
        assert!(
            !no_new_connection(&mut rx, Some(&server(1))),
            "missed announcements may include the node's"
        );

        let mut rx = tx.subscribe();
        drop(tx);
        assert!(!no_new_connection(&mut rx, None), "a closed channel");
    }

    /// The watch against a real server: commands on one connection leave it
    /// unchanged; a reconnect after it began (here forced, in production a
    /// dropped connection or a failover) is seen, and one before it began
    /// is not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_watch_sees_a_reconnect_after_it_began() {
        let server = RedisServer::start();
        // Reconnecting as relaylock's own connections do.
        let client = Builder::from_config(Config::from_url(&server.url()).unwrap())
            .set_policy(ReconnectPolicy::new_constant(0, 10))
            .build()
            .unwrap();
        client.init().await.unwrap();

        let mut watch = same_connection(&client, "k");
        let _: () = client.set("k", "1", None, None, false).await.unwrap();
        let _: Option<String> = client.get("k").await.unwrap();
        assert!(watch.unchanged(&client), "nothing reconnected");

        let mut watch = same_connection(&client, "k");
        let _: () = client.set("k", "2", None, None, false).await.unwrap();
        client.force_reconnection().await.unwrap();
        let _: Option<String> = client.get("k").await.unwrap();
        assert!(!watch.unchanged(&client), "the reconnect must be seen");

        // Begun after the reconnect: that one is not counted.
        let mut watch = same_connection(&client, "k");
        let _: Option<String> = client.get("k").await.unwrap();
        assert!(watch.unchanged(&client));

        let _ = client.quit().await;
    }
}
