//! `relaylock`: the command-line companion of the library (crate `relaylock-cli`).
//!
//! - `relaylock run KEY -- COMMAND`: runs a command while holding a lock, a
//!   distributed flock(1) (`run.rs`);
//! - `relaylock status [KEY...]`: who holds a key, for how long, who is
//!   queued and since when (`status.rs`);
//! - `relaylock unlock KEY --token T`: releases a stuck hold as its holder
//!   would (`unlock.rs`);
//! - `relaylock bench` compares pub/sub waiting with spin polling on a real
//!   Redis server (`bench/`; `relaylock bench --help` explains each column);
//!   `relaylock report` prints saved results again.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod parse;
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
    /// Run a command while this process leads an election.
    Elect(run::ElectArgs),
    /// Who holds a key, for how long, who is queued and since when.
    Status(status::StatusArgs),
    /// Release a stuck lock (or a semaphore or read-write hold) by its token.
    Unlock(unlock::UnlockArgs),
    /// One load-generating process of `bench` (spawned by it).
    #[command(hide = true)]
    Worker(bench::worker::WorkerArgs),
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
        Command::Elect(args) => args.run.url = url,
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
            Command::Elect(args) => Ok(run::elect(args).await),
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
    use std::time::Duration;

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
    }
}
