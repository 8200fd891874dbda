//! `relaylock run`: a distributed flock(1).
//!
//! Takes the lock (several keys: a multi-key lock, all of them or none,
//! deadlock-free whatever order other callers name them in), runs the command as a child with the fencing token in its
//! environment, keeps the lock renewed (the library's watchdog) while the
//! command runs, releases it when the command exits, and exits with the
//! command's status. The exit statuses of its own (see [`exit`]) are
//! distinct from the usual ones of commands: a wait that timed out, a lock
//! lost while the command ran, Redis unreachable.
//!
//! The command runs in a process group of its own, so that it and every
//! process it starts are signalled together: when the lock is lost (the
//! watchdog could not renew it, or the key was taken away), the group gets
//! SIGTERM, then SIGKILL `--kill-after` later. SIGINT, SIGTERM, SIGHUP and
//! SIGQUIT sent to `run` are passed on to the group (a signal `run` inherited
//! as ignored stays ignored, for the command too, as under nohup), and `run`
//! goes on waiting for the command. When standard input is a terminal, the
//! command's group becomes the terminal's foreground group while it runs,
//! so it reads the terminal and Ctrl-C reaches it once, directly. On Linux
//! the command itself also gets SIGKILL when `run` dies
//! (`PR_SET_PDEATHSIG`): nothing renews the lock any more. That covers the
//! command's own process only; a shell wrapper should `exec` its last
//! command.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use nix::libc;
use nix::sys::signal::{killpg, raise, Signal as Sig};
use nix::unistd::{getpgrp, tcgetpgrp, Pid};
use relaylock::{Error, Leadership, LockClient, LockGuard, LockOptions, MultiGuard};
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
126 if the command could not be run, 127 if it was not found. A signal to run
while it waits for the lock ends it by that signal (a shell shows 130 for
SIGINT, 143 for SIGTERM); nothing ran, and nothing is left held.

The command's environment has RELAYLOCK_FENCE (the fencing token: pass it to
what the command writes), RELAYLOCK_KEY (KEY) and RELAYLOCK_TOKEN (this
acquisition's token). With several keys (one multi-key lock: all are taken
together, in one order every caller uses, so callers naming them in other
orders never deadlock), RELAYLOCK_FENCES holds each key's fencing token as
`key=fence` pairs separated by spaces (also set for one key), and
RELAYLOCK_FENCE and RELAYLOCK_KEY are those of the first key taken.")]
pub struct RunArgs {
    /// The Redis URL: the global `--url` (before or after the subcommand),
    /// else `RELAYLOCK_URL`, else `redis://127.0.0.1:6379`.
    #[arg(skip)]
    pub url: String,
    /// How long to wait for the lock: 0 tries once; without it, wait as
    /// long as it takes.
    #[arg(short = 'w', long, value_parser = parse_wait, conflicts_with = "nonblock")]
    pub wait: Option<Duration>,
    /// Do not wait: fail at once (exit status 75, or -E) if the lock is
    /// held, as flock -n does. The same as `--wait 0`.
    #[arg(short = 'n', long)]
    pub nonblock: bool,
    /// The lease the watchdog keeps renewing while the command runs (a
    /// third of it between renewals): if `run` dies, the key frees within it.
    #[arg(long, value_parser = crate::parse::parse_duration, default_value = "30s")]
    pub lease: Duration,
    /// Key prefix (the library's default: `relaylock`).
    #[arg(long, env = "RELAYLOCK_PREFIX")]
    pub prefix: Option<String>,
    /// After a lost lock's SIGTERM, how long the command has before SIGKILL.
    #[arg(long, value_parser = crate::parse::parse_duration, default_value = "10s")]
    pub kill_after: Duration,
    /// Exit status when the lock was not taken within --wait.
    #[arg(short = 'E', long, default_value_t = exit::TIMEOUT)]
    pub conflict_exit_code: u8,
    /// The lock's name (the same KEY in every process that must not
    /// overlap); several keys take them all together (a multi-key lock).
    #[arg(value_name = "KEY", required = true, num_args = 1.., value_parser = crate::parse::key)]
    pub keys: Vec<String>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<OsString>,
    /// `relaylock elect`: campaign in the election named by the one key,
    /// with this value, instead of taking a lock.
    #[arg(skip)]
    pub election: Option<String>,
}

/// `relaylock elect`: run a command while this process leads an election.
#[derive(Args, Debug)]
#[command(after_help = "\
Runs COMMAND once this process is elected (candidates are served first come,
first served), stops it (SIGTERM, then SIGKILL after --kill-after) if the
leadership is lost, and resigns when it exits. RELAYLOCK_FENCE is the term:
greater than every earlier leader's. The exit statuses are run's (75: not
elected within --wait).")]
pub struct ElectArgs {
    /// The value the leader proclaims (what `relaylock status` and the
    /// observers show); default: this host's name and process id.
    #[arg(long)]
    pub value: Option<String>,
    /// The election's NAME (one), then run's options and `-- COMMAND`.
    #[command(flatten)]
    pub run: RunArgs,
}

/// What `elect` does, as an exit status.
pub async fn elect(args: ElectArgs) -> u8 {
    let ElectArgs { value, mut run } = args;
    if run.keys.len() != 1 {
        eprintln!("relaylock elect: give one election name");
        return exit::REDIS;
    }
    let value = value.unwrap_or_else(|| {
        let host = nix::unistd::gethostname().unwrap_or_default();
        format!("{}:{}", host.to_string_lossy(), std::process::id())
    });
    run.election = Some(value);
    self::run(run).await
}

/// `--wait`: like every duration, and also `0` (a single try).
fn parse_wait(s: &str) -> Result<Duration, String> {
    if matches!(s.trim(), "0" | "0s" | "0ms" | "0m") {
        return Ok(Duration::ZERO);
    }
    crate::parse::parse_duration(s)
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

/// Whether `signal` is ignored in this process (inherited: nohup, a
/// shell's background job).
fn ignored(signal: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the disposition
    // into a zeroed struct of the right type.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Ends `run` by `signal`'s default action, so that its parent sees it
/// killed by the signal, as if `run` had not caught it (a shell loop stops
/// on Ctrl-C; a shell shows 128 + N).
fn die_by(signal: i32) -> u8 {
    // SAFETY: restores the default action of a signal this process
    // handles (no handler of ours is left installed for it to race with).
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
    }
    // Every forwarded signal's default action ends the process.
    if let Ok(signal) = Sig::try_from(signal) {
        let _ = raise(signal);
    }
    128u8.wrapping_add(signal as u8)
}

/// Time for the background clean-up of an abandoned lock call (the queue
/// leave, the release of an acquisition in flight) to reach Redis before
/// the process exits.
const CLEAN_UP: Duration = Duration::from_millis(300);

async fn run_inner(args: RunArgs) -> Result<u8, (u8, String)> {
    // Listen before anything else, so a signal during the wait is ours;
    // not to signals inherited as ignored (they stay ignored for the
    // command: tokio's handler would reset them at exec).
    let mut signals = Vec::new();
    for (kind, number) in FORWARDED {
        if ignored(number) {
            continue;
        }
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
        c = builder.build() => c.map_err(|e| (exit::REDIS, format!("{}: {e}", crate::status::redacted(&args.url))))?,
        n = next_signal(&mut signals) => return Ok(die_by(n)),
    };
    let mut options = LockOptions::default().name("run");
    let wait = if args.nonblock {
        Some(Duration::ZERO)
    } else {
        args.wait
    };
    if let Some(wait) = wait {
        options = options.wait(wait);
    }
    let named = args.keys.join(" ");
    let guard = tokio::select! {
        g = Held::take(&client, &args, options) => match g {
            Ok(g) => g,
            Err(Error::Timeout { .. }) => {
                let wait = wait.unwrap_or_default();
                let why = if wait.is_zero() {
                    "held (--nonblock or --wait 0)".to_owned()
                } else {
                    format!("not acquired within {wait:?}")
                };
                return Err((args.conflict_exit_code, format!("{named}: {why}")));
            }
            Err(e) => return Err((exit::REDIS, format!("{named}: {e}"))),
        },
        // Dropping the lock call leaves nothing held (it is cancel-safe):
        // its clean-up runs in the background, given a moment to finish.
        n = next_signal(&mut signals) => {
            tokio::time::sleep(CLEAN_UP).await;
            return Ok(die_by(n));
        }
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

/// What `run` holds: one key's lock, several keys' multi-key lock, or (for
/// `elect`) an election's leadership.
enum Held {
    One(LockGuard),
    Many(MultiGuard),
    Lead(Leadership),
}

impl Held {
    /// Take `keys` (one: a lock; several: a multi-key lock).
    async fn take(
        client: &LockClient,
        args: &RunArgs,
        options: LockOptions,
    ) -> relaylock::Result<Held> {
        match (&args.election, args.keys.as_slice()) {
            (Some(value), [name, ..]) => {
                let election = client.election(name);
                election.campaign_with(value, options).await.map(Held::Lead)
            }
            (_, [key]) => client.lock_with(key, options).await.map(Held::One),
            (_, keys) => client.lock_all_with(keys, options).await.map(Held::Many),
        }
    }

    /// Each key with its fencing token, in the order taken.
    fn fences(&self) -> Vec<(&str, u64)> {
        match self {
            Held::One(g) => vec![(g.key(), g.fencing_token())],
            Held::Many(g) => g.fencing_tokens().collect(),
            // The election's name (its lock is `election:<name>`).
            Held::Lead(l) => {
                let name = l.election();
                vec![(
                    name.strip_prefix("election:").unwrap_or(name),
                    l.fencing_token(),
                )]
            }
        }
    }

    fn token(&self) -> &str {
        match self {
            Held::One(g) => g.token(),
            Held::Many(g) => g.token(),
            Held::Lead(l) => l.token(),
        }
    }

    async fn lost(&self) {
        match self {
            Held::One(g) => g.lost().await,
            Held::Many(g) => g.lost().await,
            Held::Lead(l) => l.lost().await,
        }
    }

    async fn release(self) -> relaylock::Result<()> {
        match self {
            Held::One(g) => g.release().await,
            Held::Many(g) => g.release().await,
            Held::Lead(l) => l.resign().await,
        }
    }
}

/// `RELAYLOCK_FENCES`: `key=fence` pairs separated by spaces.
fn fences_env(fences: &[(&str, u64)]) -> String {
    let pairs: Vec<String> = fences.iter().map(|(k, f)| format!("{k}={f}")).collect();
    pairs.join(" ")
}

/// The command, with the lock's identity in its environment, in its own
/// process group, given the terminal if `run` has it.
fn spawn(args: &RunArgs, guard: &Held) -> Result<(Child, Terminal), (u8, String)> {
    let mut command = Command::new(&args.command[0]);
    let fences = guard.fences();
    let (key, fence) = fences.first().copied().unwrap_or(("", 0));
    command
        .args(&args.command[1..])
        .env("RELAYLOCK_FENCE", fence.to_string())
        .env("RELAYLOCK_KEY", key)
        .env("RELAYLOCK_FENCES", fences_env(&fences))
        .env("RELAYLOCK_TOKEN", guard.token());
    // Its own process group (see the module docs).
    command.process_group(0);
    let terminal = foreground_terminal();
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: between fork and exec only async-signal-safe calls: signal,
    // tcsetpgrp, getpid, prctl, getppid, _exit (nix's prctl and getppid are
    // the bare system calls; std's stdin handle, which may allocate, is not
    // used here).
    unsafe {
        command.pre_exec(move || {
            if terminal {
                // Take the terminal before exec, so the command never reads
                // it from the background (SIGTTIN). Its group is not the
                // foreground one yet: ignore SIGTTOU for the call.
                let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpid());
                libc::signal(libc::SIGTTOU, old);
            }
            #[cfg(target_os = "linux")]
            {
                nix::sys::prctl::set_pdeathsig(Sig::SIGKILL)?;
                // `run` died before the prctl: do not run unlocked.
                if nix::unistd::getppid().as_raw() != parent {
                    libc::_exit(exit::LOST as i32);
                }
            }
            let _ = parent;
            Ok(())
        });
    }
    // Dropped (the terminal given back) on failure too: the child may have
    // taken the terminal before its exec failed.
    let restore = Terminal(terminal);
    let child = command.spawn().map_err(|e| {
        let program = args.command[0].to_string_lossy();
        match e.kind() {
            std::io::ErrorKind::NotFound => (exit::NOT_FOUND, format!("{program}: not found")),
            _ => (exit::CANNOT_RUN, format!("{program}: {e}")),
        }
    })?;
    // The terminal goes back to `run` when the Terminal is dropped.
    Ok((child, restore))
}

/// Standard input is a terminal whose foreground group is ours: the command
/// gets it while it runs.
fn foreground_terminal() -> bool {
    use std::io::IsTerminal;
    let stdin = std::io::stdin();
    stdin.is_terminal() && tcgetpgrp(&stdin).is_ok_and(|group| group == getpgrp())
}

/// Gives the terminal back to `run`'s group once the command is done, if
/// the command had it.
struct Terminal(bool);

impl Drop for Terminal {
    fn drop(&mut self) {
        if self.0 {
            // SAFETY: tcsetpgrp to our own group, from the background (the
            // command's group had the terminal): SIGTTOU ignored around it.
            unsafe {
                let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpgrp());
                libc::signal(libc::SIGTTOU, old);
            }
        }
    }
}

/// Waits for the command while the lock is held; passes signals on; stops
/// the command when the lock is lost.
async fn supervise(
    (mut child, _terminal): (Child, Terminal),
    guard: Held,
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
                    args.keys.join(" "), args.kill_after
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
        Err(Error::LockLost { .. }) => Err((
            exit::LOST,
            format!(
                "{}: the lock was lost before the command ended (its status was {code})",
                args.keys.join(" ")
            ),
        )),
        // The command ran under the lock; the key frees within its lease.
        Err(e) => {
            eprintln!(
                "relaylock run: {}: release failed: {e}",
                args.keys.join(" ")
            );
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

/// `signal` to the command's process group: the command and what it
/// started.
fn send(child: &Child, signal: i32) {
    // The group our own child leads: the child has not been reaped (`id()`
    // is `None` once it has), so the group id is not reused.
    if let (Some(pid), Ok(signal)) = (child.id(), Sig::try_from(signal)) {
        let _ = killpg(Pid::from_raw(pid as i32), signal);
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
        assert!(parse_wait("0sm").is_err());
        assert!(parse_wait("x").is_err());
    }

    #[test]
    fn fences_are_key_equals_fence_pairs() {
        assert_eq!(fences_env(&[("a", 3), ("b:1", 17)]), "a=3 b:1=17");
        assert_eq!(fences_env(&[("only", 9)]), "only=9");
    }

    #[test]
    fn statuses() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status_code(std::process::ExitStatus::from_raw(3 << 8)), 3);
        // Killed by SIGKILL (9): 137, as a shell says.
        assert_eq!(status_code(std::process::ExitStatus::from_raw(9)), 137);
    }
}
