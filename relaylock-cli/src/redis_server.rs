//! A throwaway `redis-server` on a free loopback port, stopped on drop.
//!
//! `relaylock bench` starts one when given no `--url`; the test kit
//! (relaylock-testkit, unpublished) includes this file with `#[path]` for
//! every test's server. Only `std` is used.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The error when the binary is missing: names the install command.
pub const INSTALL_HINT: &str = "redis-server is not on PATH. Install it with \
`apt-get install -y redis-server` (Debian/Ubuntu) or your system's package manager.";

/// The variable that names another server binary to start instead of
/// `redis-server` (a Valkey `valkey-server`, say: `.ci/run` runs the lock
/// tests against Valkey this way). It must take redis-server's options.
pub const SERVER_VAR: &str = "RELAYLOCK_SERVER";

/// The server binary: `$RELAYLOCK_SERVER`, or `redis-server` from `PATH`.
pub fn server_binary() -> std::ffi::OsString {
    std::env::var_os(SERVER_VAR).unwrap_or_else(|| "redis-server".into())
}

/// A `redis-server` process with no persistence, killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .expect("local address")
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

enum Spawn {
    Up(Child),
    /// Exited at once: most likely the port was taken.
    Exited,
}

fn spawn(port: u16, dir: &Path, extra: &[&str]) -> Result<Spawn, String> {
    let binary = server_binary();
    let mut child = Command::new(&binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound if std::env::var_os(SERVER_VAR).is_some() => format!(
                "{SERVER_VAR}={} does not exist (.ci/deps valkey installs Valkey's)",
                binary.to_string_lossy()
            ),
            std::io::ErrorKind::NotFound => INSTALL_HINT.to_string(),
            _ => format!("could not run {}: {e}", binary.to_string_lossy()),
        })?;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if ping(port) {
            // Drain its output so a chatty server never blocks on a full pipe.
            if let Some(out) = child.stdout.take() {
                std::thread::spawn(move || for _ in BufReader::new(out).lines() {});
            }
            return Ok(Spawn::Up(child));
        }
        if let Ok(Some(_)) = child.try_wait() {
            return Ok(Spawn::Exited);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(format!(
        "redis-server did not answer PING within 10 s on port {port}"
    ))
}

impl RedisServer {
    /// Start a server with no persistence on a free port; panics with the
    /// install command when redis-server is missing (for tests).
    pub fn start() -> Self {
        Self::try_start(&[]).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start a server with extra command-line arguments.
    pub fn try_start(extra: &[&str]) -> Result<Self, String> {
        for _ in 0..10 {
            let port = free_port();
            let dir =
                std::env::temp_dir().join(format!("relaylock-redis-{port}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
            match spawn(port, &dir, extra)? {
                Spawn::Up(child) => {
                    return Ok(RedisServer {
                        child: Some(child),
                        port,
                        dir,
                    })
                }
                Spawn::Exited => continue,
            }
        }
        Err("could not start redis-server on a free port after 10 tries".into())
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Start a replica of `primary` (`--replicaof`), and wait until its
    /// link to the primary is up (at most 10 s).
    pub fn start_replica_of(primary: &RedisServer) -> Self {
        Self::start_replica_of_with(primary, &[])
    }

    /// [`start_replica_of`](Self::start_replica_of) with extra command-line
    /// arguments.
    pub fn start_replica_of_with(primary: &RedisServer, extra: &[&str]) -> Self {
        let port = primary.port.to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &port];
        args.extend_from_slice(extra);
        let replica = Self::try_start(&args).unwrap_or_else(|e| panic!("{e}"));
        let started = Instant::now();
        while !replica.info_has("replication", "master_link_status:up") {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "replica on port {} did not sync with its primary",
                replica.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        replica
    }

    /// Whether `CLUSTER INFO` has a line equal to `line`.
    pub fn info_has_cluster(&self, line: &str) -> bool {
        self.bulk_has("CLUSTER INFO", line)
    }

    /// Whether `INFO <section>` has a line equal to `line`.
    pub fn info_has(&self, section: &str, line: &str) -> bool {
        self.bulk_has(&format!("INFO {section}"), line)
    }

    /// Whether the bulk-string reply to an inline command has a line equal
    /// to `line`.
    fn bulk_has(&self, command: &str, line: &str) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        if s.write_all(format!("{command}\r\n").as_bytes()).is_err() {
            return false;
        }
        // A bulk reply: "$<len>\r\n<body>\r\n".
        let mut reader = BufReader::new(s);
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() {
            return false;
        }
        let Ok(len) = header.trim_start_matches('$').trim().parse::<usize>() else {
            return false;
        };
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return false;
        }
        String::from_utf8_lossy(&body).lines().any(|l| l == line)
    }

    /// Freeze the server process (SIGSTOP): it accepts no command until
    /// [`resume`](Self::resume), while its connections stay open.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Let a paused server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.pid().expect("server is running").to_string();
        let status = Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {sig} {pid} failed");
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
            if let Spawn::Up(c) = spawn(self.port, &self.dir, &[]).unwrap_or_else(|e| panic!("{e}"))
            {
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
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
