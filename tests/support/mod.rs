//! Test support: a real `redis-server` on a free loopback port, stopped on drop,
//! and helpers to read what the server saw.
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::{CustomCommand, InfoKind};

const INSTALL_HINT: &str = "redis-server is not on PATH. The tests need a real server: \
install it with `apt-get install -y redis-server` (or run .ci/run, which does).";

/// A `redis-server` process owned by a test.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .unwrap()
        .port()
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

impl RedisServer {
    /// Start a server with no persistence on a free port.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Start a server with extra command-line arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        for _ in 0..10 {
            let port = free_port();
            if let Some(server) = Self::try_start(port, extra) {
                return server;
            }
        }
        panic!("could not start redis-server on a free port after 10 tries");
    }

    fn try_start(port: u16, extra: &[&str]) -> Option<Self> {
        let dir =
            std::env::temp_dir().join(format!("relaylock-test-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Self::spawn(port, &dir, extra)?;
        Some(RedisServer {
            child: Some(child),
            port,
            dir,
        })
    }

    fn spawn(port: u16, dir: &std::path::Path, extra: &[&str]) -> Option<Child> {
        let mut child = match Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--dir", dir.to_str().unwrap(), "--loglevel", "warning"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!("{INSTALL_HINT}"),
            Err(e) => panic!("could not run redis-server: {e}"),
        };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if ping(port) {
                // Drain its output so a chatty server never blocks on a full pipe.
                if let Some(out) = child.stdout.take() {
                    std::thread::spawn(move || for _ in BufReader::new(out).lines() {});
                }
                return Some(child);
            }
            if let Ok(Some(_)) = child.try_wait() {
                return None; // port taken between probing and binding: try another
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        panic!("redis-server did not answer PING within 10 s on port {port}");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kill the server (SIGKILL: no persistence, nothing saved).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kill and start again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        let started = Instant::now();
        loop {
            if let Some(c) = Self::spawn(self.port, &self.dir, &[]) {
                self.child = Some(c);
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "restart on port {} failed",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A plain fred client for inspecting the server.
    pub async fn admin(&self) -> Client {
        let client = Builder::from_config(Config::from_url(&self.url()).unwrap())
            .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(10))
            .build()
            .unwrap();
        client.init().await.expect("admin connection");
        client
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `INFO commandstats` as command name -> calls.
pub async fn command_calls(admin: &Client) -> HashMap<String, u64> {
    let info: String = admin.info(Some(InfoKind::CommandStats)).await.unwrap();
    let mut calls = HashMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        for field in fields.split(',') {
            if let Some(n) = field.strip_prefix("calls=") {
                calls.insert(name.to_owned(), n.parse().unwrap());
            }
        }
    }
    calls
}

/// Calls of `cmd` between two snapshots of [`command_calls`].
pub fn delta(before: &HashMap<String, u64>, after: &HashMap<String, u64>, cmd: &str) -> u64 {
    after.get(cmd).copied().unwrap_or(0) - before.get(cmd).copied().unwrap_or(0)
}

/// Subscribers of one channel, from `PUBSUB NUMSUB`.
pub async fn numsub(admin: &Client, channel: &str) -> i64 {
    let v: Vec<Value> = admin
        .custom(
            CustomCommand::new_static("PUBSUB", None, false),
            vec!["NUMSUB", channel],
        )
        .await
        .unwrap();
    v[1].as_i64().unwrap()
}

/// Channels with at least one subscriber whose name matches `pattern`.
pub async fn channels(admin: &Client, pattern: &str) -> Vec<String> {
    admin
        .custom(
            CustomCommand::new_static("PUBSUB", None, false),
            vec!["CHANNELS", pattern],
        )
        .await
        .unwrap()
}

/// Keys matching `pattern` (tests only: KEYS is O(n)).
pub async fn keys(admin: &Client, pattern: &str) -> Vec<String> {
    admin
        .custom(
            CustomCommand::new_static("KEYS", None, false),
            vec![pattern],
        )
        .await
        .unwrap()
}

/// Poll `check` until it returns true or `limit` passes; returns whether it did.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
