//! `relaylock`: the command-line companion of the library (crate `relaylock-cli`).
//!
//! - `relaylock run KEY -- COMMAND`: runs a command while holding a lock, a
//!   distributed flock(1) (`run.rs`);
//! - `relaylock status [KEY...]`: who holds a key, for how long, who is
//!   queued and since when (`status.rs`);
//! - `relaylock unlock KEY --token T`: releases a stuck hold as its holder
//!   would (`unlock.rs`);
//! - `relaylock bench` compares pub/sub waiting with spin polling on a real
//!   Redis server; see `relaylock bench --help` and docs/benchmarks.md;
//!   `relaylock report` prints saved results again.

use std::fmt;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use clap::{Parser, Subcommand};
use relaylock::WaitStrategy;

mod bench;
mod redis_server;
mod run;
mod status;
mod unlock;

#[derive(Parser)]
#[command(
    name = "relaylock",
    version,
    about = "Distributed locks on Redis: run a command under a lock, inspect locks, load test"
)]
struct Cli {
    /// Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://),
    /// before or after the subcommand. run, status and unlock default to
    /// RELAYLOCK_URL, else redis://127.0.0.1:6379; bench starts a
    /// redis-server of its own without it.
    #[arg(long, global = true)]
    url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compare wait strategies under contention on a real Redis server.
    Bench(bench::BenchArgs),
    /// Print saved `bench --json` results again (as a table or markdown).
    Report(bench::ReportArgs),
    /// Run a command while holding a lock: a distributed flock(1).
    Run(run::RunArgs),
    /// Who holds a key, for how long, who is queued and since when.
    Status(status::StatusArgs),
    /// Release a stuck lock (or a semaphore or read-write hold) by its token.
    Unlock(unlock::UnlockArgs),
    /// One load-generating process of `bench` (spawned by it).
    #[command(hide = true)]
    Worker(bench::worker::WorkerArgs),
}

/// A strategy as written on the command line: relaylock with pub/sub
/// waiting (`pubsub`) or with polling (`poll:<ms>`), or the bare lock a user
/// would write instead (`bare:<ms>`, see [`bench::bare`]), or the cheapest fenced
/// lock, the floor of a script-based protocol (`floor:<ms>`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Strategy {
    /// relaylock, waiting this way.
    Lock(WaitStrategy),
    /// The seeds' algorithm: `SET NX PX`, retried every interval; release
    /// by compare-and-delete. No fencing, no queue, no waiting machinery.
    Bare(Duration),
    /// The cheapest lock that keeps relaylock's fencing guarantee: one
    /// script each way (`GET`, `TIME`, `SET`; `GET`, `SET`), retried every
    /// interval. No queue, no hand-over, no replay record (see [`bench::bare`]).
    Floor(Duration),
}

impl Strategy {
    /// How the relaylock client of a worker waits (a bare worker's client
    /// only provides the connection).
    pub fn wait_strategy(self) -> WaitStrategy {
        match self {
            Strategy::Lock(w) => w,
            Strategy::Bare(_) | Strategy::Floor(_) => WaitStrategy::PubSub,
        }
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "pubsub" {
            return Ok(Strategy::Lock(WaitStrategy::PubSub));
        }
        let (kind, ms) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: expected pubsub, poll:<ms>, bare:<ms> or floor:<ms>"))?;
        let every = match ms.parse::<u64>() {
            Ok(ms) if (1..=3_600_000).contains(&ms) => Duration::from_millis(ms),
            _ => return Err(format!("{s:?}: the retry interval is 1 to 3600000 ms")),
        };
        match kind {
            "poll" => Ok(Strategy::Lock(WaitStrategy::Poll(every))),
            "bare" => Ok(Strategy::Bare(every)),
            "floor" => Ok(Strategy::Floor(every)),
            _ => Err(format!(
                "{s:?}: expected pubsub, poll:<ms>, bare:<ms> or floor:<ms>"
            )),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Lock(WaitStrategy::Poll(d)) => write!(f, "poll:{}", d.as_millis()),
            Strategy::Bare(d) => write!(f, "bare:{}", d.as_millis()),
            Strategy::Floor(d) => write!(f, "floor:{}", d.as_millis()),
            Strategy::Lock(_) => f.write_str("pubsub"),
        }
    }
}

/// What the bench's workers take: `mutex` (a lock per key),
/// `semaphore:<limit>` (a semaphore of that many permits per key, one permit
/// per acquisition) or `rwlock:<read share>` (a read-write lock per key; each
/// acquisition is a read with that probability, else a write).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Primitive {
    #[default]
    Mutex,
    Semaphore(u32),
    RwLock(f64),
}

impl Primitive {
    /// How many holders may be inside one key's critical section at once.
    pub fn limit(self) -> u32 {
        match self {
            Primitive::Mutex | Primitive::RwLock(_) => 1,
            Primitive::Semaphore(n) => n,
        }
    }
}

impl FromStr for Primitive {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            None if s == "mutex" => Ok(Primitive::Mutex),
            Some(("semaphore", n)) => match n.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(Primitive::Semaphore(n)),
                _ => Err(format!("{s:?}: the limit is a whole number of at least 1")),
            },
            Some(("rwlock", share)) => match share.parse::<f64>() {
                Ok(x) if (0.0..=1.0).contains(&x) => Ok(Primitive::RwLock(x)),
                _ => Err(format!("{s:?}: the read share is between 0 and 1")),
            },
            _ => Err(format!(
                "{s:?}: expected mutex, semaphore:<limit> or rwlock:<read share>"
            )),
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Primitive::Mutex => f.write_str("mutex"),
            Primitive::Semaphore(n) => write!(f, "semaphore:{n}"),
            Primitive::RwLock(x) => write!(f, "rwlock:{x}"),
        }
    }
}

/// A lock, semaphore or read-write lock name as the command line gives
/// it: refused by clap (exit status 2, like any other bad argument) when
/// the library would refuse it, before anything connects.
pub fn key(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the key is empty".into());
    }
    if s.len() > relaylock::MAX_KEY_LEN {
        return Err(format!(
            "the key is {} bytes, the limit is {}",
            s.len(),
            relaylock::MAX_KEY_LEN
        ));
    }
    Ok(s.to_owned())
}

/// A duration as `humantime` reads it (`250ms`, `10s`, `2m`, `1h`,
/// `1h 30m`), or a plain number of seconds (`10`, `0.5`); between 1 ms and
/// 24 h.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let d = match s.parse::<f64>() {
        Ok(secs) => Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s:?}: must be between 1 ms and 24 h"))?,
        Err(_) => humantime::parse_duration(s)
            .map_err(|e| format!("{s:?}: {e} (e.g. 500ms, 10s, 2m, 1h)"))?,
    };
    if !(Duration::from_millis(1)..=Duration::from_secs(86_400)).contains(&d) {
        return Err(format!("{s:?}: must be between 1 ms and 24 h"));
    }
    Ok(d)
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    let url = cli
        .url
        .clone()
        .or_else(|| std::env::var("RELAYLOCK_URL").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    match &mut cli.command {
        Command::Run(args) => args.url = url,
        Command::Status(args) => args.url = url,
        Command::Unlock(args) => args.url = url,
        Command::Bench(args) => args.url = cli.url.clone(),
        Command::Worker(args) => args.url = url,
        Command::Report(_) => {}
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Bench(args) => bench::run(args).await.map(|()| 0),
            Command::Report(args) => bench::report(args).map(|()| 0),
            Command::Worker(args) => bench::worker::run(args).await.map(|()| 0),
            // Exit statuses of its own, documented in `relaylock run --help`.
            Command::Run(args) => Ok(run::run(args).await),
            Command::Status(args) => Ok(status::run(args).await),
            Command::Unlock(args) => Ok(unlock::run(args).await),
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "relaylock",
            "bench",
            "--strategy",
            "pubsub",
            "--strategy",
            "poll:100",
            "--sweep",
            "workers=8,64",
            "--duration",
            "2s",
            "--hold-ms",
            "0",
            "--json",
        ])
        .unwrap();
        let Command::Bench(args) = cli.command else {
            panic!("not bench")
        };
        assert_eq!(args.strategies.len(), 2);
        assert_eq!(args.sweep.unwrap(), bench::Sweep::Workers(vec![8, 64]));
        assert_eq!(args.duration, Duration::from_secs(2));
        assert!(Cli::try_parse_from(["relaylock", "bench", "--strategy", "spin"]).is_err());
        assert_eq!("mutex".parse::<Primitive>().unwrap(), Primitive::Mutex);
        assert_eq!(
            "semaphore:8".parse::<Primitive>().unwrap(),
            Primitive::Semaphore(8)
        );
        assert_eq!(Primitive::Semaphore(8).to_string(), "semaphore:8");
        assert_eq!(
            "rwlock:0.9".parse::<Primitive>().unwrap(),
            Primitive::RwLock(0.9)
        );
        assert_eq!(Primitive::RwLock(0.9).to_string(), "rwlock:0.9");
        for bad in [
            "semaphore:0",
            "semaphore:",
            "semaphore:x",
            "rwlock:1.5",
            "rwlock:",
            "",
        ] {
            assert!(bad.parse::<Primitive>().is_err(), "{bad}");
        }
    }

    #[test]
    fn strategies() {
        assert_eq!(
            "pubsub".parse::<Strategy>().unwrap(),
            Strategy::Lock(WaitStrategy::PubSub)
        );
        assert_eq!(
            "poll:10".parse::<Strategy>().unwrap(),
            Strategy::Lock(WaitStrategy::Poll(Duration::from_millis(10)))
        );
        assert_eq!(
            "poll:10".parse::<Strategy>().unwrap().to_string(),
            "poll:10"
        );
        assert_eq!(
            "bare:10".parse::<Strategy>().unwrap(),
            Strategy::Bare(Duration::from_millis(10))
        );
        assert_eq!(
            "bare:10".parse::<Strategy>().unwrap().to_string(),
            "bare:10"
        );
        assert_eq!(
            "floor:10".parse::<Strategy>().unwrap(),
            Strategy::Floor(Duration::from_millis(10))
        );
        assert_eq!(
            "floor:10".parse::<Strategy>().unwrap().to_string(),
            "floor:10"
        );
        for bad in [
            "", "poll", "poll:0", "poll:x", "spin", "bare", "bare:0", "floor", "floor:0", "spin:10",
        ] {
            assert!(bad.parse::<Strategy>().is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        for bad in ["", "0s", "25h", "x", "-1s", "100d", "500us", "NaN", "inf"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
