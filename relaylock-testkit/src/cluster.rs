//! A throwaway Redis Cluster on free loopback ports: `primaries` primaries,
//! each with `replicas` replicas, joined with `redis-cli --cluster create`,
//! stopped on drop. Only `std` is used.
#![allow(dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};

use super::RedisServer;

pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Start and join the cluster; panics (with the install hint when
    /// redis-server or redis-cli is missing) if it does not come up in 30 s.
    pub fn start(primaries: usize, replicas: usize) -> Self {
        let total = primaries * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                RedisServer::try_start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "2000",
                    "--enable-debug-command",
                    "yes",
                ])
                .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| {
                panic!("could not run redis-cli (apt-get install -y redis-server): {e}")
            });
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes };
        let started = Instant::now();
        while !cluster.ready() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the cluster did not become ready in 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// Every node says `cluster_state:ok` and knows every other node.
    pub fn ready(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.info_has_cluster("cluster_state:ok")
                && n.info_has_cluster(&format!("cluster_known_nodes:{}", self.nodes.len()))
        })
    }

    /// The replica of the primary listening on `owner`: the node whose
    /// `INFO replication` names that port as its master.
    pub fn replica_of(&self, owner: u16) -> Option<&RedisServer> {
        self.nodes
            .iter()
            .find(|n| n.info_has("replication", &format!("master_port:{owner}")))
    }

    /// `redis-cluster://` URL naming every node.
    pub fn url(&self) -> String {
        let first = &self.nodes[0];
        let rest: Vec<String> = self.nodes[1..]
            .iter()
            .map(|n| format!("node=127.0.0.1:{}", n.port))
            .collect();
        format!(
            "redis-cluster://127.0.0.1:{}?{}",
            first.port,
            rest.join("&")
        )
    }
}
