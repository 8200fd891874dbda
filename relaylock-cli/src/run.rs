//! `relaylock run`: a distributed flock(1).
//!
//! Takes the lock, runs the command as a child with the fencing token in its
//! environment, keeps the lock renewed (the library's watchdog) while the
//! command runs, releases it when the command exits, and exits with the
//! command's status. The exit statuses of its own (see [`exit`]) are
//! distinct from the usual ones of commands: a wait that timed out, a lock
//! lost while the command ran, Redis unreachable.
//!
//! When the lock is lost (the watchdog could not renew it, or the key was
//! taken away), the command gets SIGTERM, then SIGKILL `--kill-after`
//! later. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to `run` are passed on to
//! the command, and `run` goes on waiting for it. On Linux the command also
//! gets SIGKILL when `run` itself dies (`PR_SET_PDEATHSIG`): nothing renews
//! the lock any more, so the command must not go on.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use relaylock::{Error, LockClient, LockGuard, LockOptions};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Exit statuses of `relaylock run` itself (otherwise it exits with the
/// command's status, or 128 + N when the command was killed by signal N).
pub mod exit {
    /// The lock was not taken within `--wait` (`--wait 0`: it was held).
    /// `-E`/`--conflict-exit-code` changes it.
    pub const TIMEOUT: u8 = 75;
    /// The lock was lost while the command ran: the command was terminated
    /// (or, if it had just exited, the release found the lock gone).
    pub const LOST: u8 = 76;
    /// Redis could not be reached or refused a command (before the command
    /// ran, or an invalid argument).
    pub const REDIS: u8 = 69;
    /// The command was found but could not be run.
    pub const CANNOT_RUN: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
}

/// `relaylock run`.
#[derive(Args, Debug)]
#[command(after_help = "\
Exit status: the command's own; 128+N if the command was killed by signal N;
75 (or -E N) if the lock was not taken within --wait; 76 if the lock was lost
while the command ran (the command got SIGTERM, then SIGKILL after
--kill-after); 69 if Redis could not be reached or an argument was refused;
126 if the command could not be run, 127 if it was not found; 130/143 if run
got SIGINT/SIGTERM while waiting for the lock.

The command's environment has RELAYLOCK_FENCE (the fencing token: pass it to
what the command writes), RELAYLOCK_KEY (KEY) and RELAYLOCK_TOKEN (this
acquisition's token).")]
pub struct RunArgs {
    /// Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://).
    #[arg(long, env = "RELAYLOCK_URL", default_value = "redis://127.0.0.1:6379")]
    pub url: String,
    /// How long to wait for the lock: 0 tries once; without it, wait as
    /// long as it takes.
    #[arg(long, value_parser = parse_wait)]
    pub wait: Option<Duration>,
    /// The lease the watchdog keeps renewing while the command runs (a
    /// third of it between renewals): if `run` dies, the key frees within it.
    #[arg(long, value_parser = crate::parse_duration, default_value = "30s")]
    pub lease: Duration,
    /// Key prefix (the library's default: `relaylock`).
    #[arg(long)]
    pub prefix: Option<String>,
    /// After a lost lock's SIGTERM, how long the command has before SIGKILL.
    #[arg(long, value_parser = crate::parse_duration, default_value = "10s")]
    pub kill_after: Duration,
    /// Exit status when the lock was not taken within --wait.
    #[arg(short = 'E', long, default_value_t = exit::TIMEOUT)]
    pub conflict_exit_code: u8,
    /// The lock's name (the same KEY in every process that must not overlap).
    pub key: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<OsString>,
}

/// `--wait`: like every duration, and also `0` (a single try).
fn parse_wait(s: &str) -> Result<Duration, String> {
    if s.trim().trim_end_matches(['m', 's']).parse::<f64>() == Ok(0.0) {
        return Ok(Duration::ZERO);
    }
    crate::parse_duration(s)
}

/// What `run` does, as an exit status.
pub async fn run(args: RunArgs) -> u8 {
    match run_inner(args).await {
        Ok(code) => code,
        Err((code, message)) => {
            eprintln!("relaylock run: {message}");
            code
        }
    }
}

/// The signals passed on to the command.
const FORWARDED: [(SignalKind, i32); 4] = [
    (SignalKind::interrupt(), libc::SIGINT),
    (SignalKind::terminate(), libc::SIGTERM),
    (SignalKind::hangup(), libc::SIGHUP),
    (SignalKind::quit(), libc::SIGQUIT),
];

async fn run_inner(args: RunArgs) -> Result<u8, (u8, String)> {
    // Listen before anything else, so a signal during the wait is ours.
    let mut signals = Vec::new();
    for (kind, number) in FORWARDED {
        let s = signal(kind).map_err(|e| (exit::REDIS, format!("signal handler: {e}")))?;
        signals.push((s, number));
    }
    let mut builder = LockClient::builder()
        .url(&args.url)
        .default_lease(args.lease);
    if let Some(prefix) = &args.prefix {
        builder = builder.prefix(prefix);
    }
    let client = tokio::select! {
        c = builder.build() => c.map_err(|e| (exit::REDIS, format!("{}: {e}", args.url)))?,
        n = next_signal(&mut signals) => return Ok(128 + n as u8),
    };
    let mut options = LockOptions::default().name("run");
    if let Some(wait) = args.wait {
        options = options.wait(wait);
    }
    let guard = tokio::select! {
        g = client.lock_with(&args.key, options) => match g {
            Ok(g) => g,
            Err(Error::Timeout) => {
                let wait = args.wait.unwrap_or_default();
                let why = if wait.is_zero() {
                    "held (--wait 0)".to_owned()
                } else {
                    format!("not acquired within {wait:?}")
                };
                return Err((args.conflict_exit_code, format!("{}: {why}", args.key)));
            }
            Err(e) => return Err((exit::REDIS, format!("{}: {e}", args.key))),
        },
        // Dropping the lock call leaves nothing held (it is cancel-safe).
        n = next_signal(&mut signals) => return Ok(128 + n as u8),
    };
    let child = match spawn(&args, &guard) {
        Ok(child) => child,
        Err((code, message)) => {
            let _ = guard.release().await;
            return Err((code, message));
        }
    };
    supervise(child, guard, &args, &mut signals).await
}

/// The command, with the lock's identity in its environment.
fn spawn(args: &RunArgs, guard: &LockGuard) -> Result<Child, (u8, String)> {
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("RELAYLOCK_FENCE", guard.fencing_token().to_string())
        .env("RELAYLOCK_KEY", guard.key())
        .env("RELAYLOCK_TOKEN", guard.token());
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: between fork and exec only async-signal-safe calls:
        // prctl and getppid.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                // `run` died before the prctl: do not run unlocked.
                if libc::getppid() != parent {
                    libc::_exit(exit::LOST as i32);
                }
                Ok(())
            });
        }
    }
    command.spawn().map_err(|e| {
        let program = args.command[0].to_string_lossy();
        match e.kind() {
            std::io::ErrorKind::NotFound => (exit::NOT_FOUND, format!("{program}: not found")),
            _ => (exit::CANNOT_RUN, format!("{program}: {e}")),
        }
    })
}

/// Waits for the command while the lock is held; passes signals on; stops
/// the command when the lock is lost.
async fn supervise(
    mut child: Child,
    guard: LockGuard,
    args: &RunArgs,
    signals: &mut [(Signal, i32)],
) -> Result<u8, (u8, String)> {
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            n = next_signal(signals) => send(&child, n),
            () = guard.lost() => {
                eprintln!(
                    "relaylock run: {}: the lock was lost; stopping the command (SIGTERM, SIGKILL after {:?})",
                    args.key, args.kill_after
                );
                send(&child, libc::SIGTERM);
                if tokio::time::timeout(args.kill_after, child.wait()).await.is_err() {
                    send(&child, libc::SIGKILL);
                }
                let _ = child.wait().await;
                return Ok(exit::LOST);
            }
        }
    };
    let code = match status {
        Ok(status) => status_code(status),
        Err(e) => return Err((exit::CANNOT_RUN, format!("waiting for the command: {e}"))),
    };
    match guard.release().await {
        Ok(()) => Ok(code),
        Err(Error::LockLost) => Err((
            exit::LOST,
            format!(
                "{}: the lock was lost before the command ended (its status was {code})",
                args.key
            ),
        )),
        // The command ran under the lock; the key frees within its lease.
        Err(e) => {
            eprintln!("relaylock run: {}: release failed: {e}", args.key);
            Ok(code)
        }
    }
}

/// An exit status as a shell reports it.
fn status_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.wrapping_add(signal as u8),
        (None, None) => 1,
    }
}

fn send(child: &Child, signal: i32) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on our own child's pid; it has not been reaped
        // (`id()` is `None` once it has).
        unsafe {
            libc::kill(pid as libc::pid_t, signal);
        }
    }
}

/// The next of the forwarded signals to arrive (never, if none can).
async fn next_signal(signals: &mut [(Signal, i32)]) -> i32 {
    let waits = signals.iter_mut().map(|(s, n)| {
        let n = *n;
        Box::pin(async move {
            s.recv().await;
            n
        })
    });
    futures::future::select_all(waits).await.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits() {
        assert_eq!(parse_wait("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_wait("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_wait("0ms").unwrap(), Duration::ZERO);
        assert_eq!(parse_wait("2s").unwrap(), Duration::from_secs(2));
        assert!(parse_wait("-1").is_err());
        assert!(parse_wait("x").is_err());
    }

    #[test]
    fn statuses() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status_code(std::process::ExitStatus::from_raw(3 << 8)), 3);
        // Killed by SIGKILL (9): 137, as a shell says.
        assert_eq!(status_code(std::process::ExitStatus::from_raw(9)), 137);
    }
}
