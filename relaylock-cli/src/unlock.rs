//! `relaylock unlock KEY --token T`: releases a stuck hold as its holder
//! would ([`relaylock::LockClient::unlock`]): the next fencing token is still
//! greater than every earlier one, the first waiting client is told at once,
//! and the holder, if it still runs, finds its hold lost. Without `--token`
//! it refuses, unless `--force` (then every hold of KEY is released).

use std::time::Duration;

use clap::{Args, ValueEnum};
use relaylock::inspect::Primitive;
use relaylock::{Error, LockClient};

/// Exit status when nothing was released: the token held nothing there, or
/// with `--force` nothing was held.
pub const NOTHING: u8 = 1;
/// Exit status for a refused invocation: neither `--token` nor `--force`.
pub const USAGE: u8 = 2;

/// `relaylock unlock`.
#[derive(Args, Debug)]
#[command(after_help = "\
Find the token with `relaylock status KEY` (or `status --held`). The hold is
released through relaylock's own release script, never deleted: the next
fencing token stays greater than every earlier one, and waiting clients are
woken at once. Needs what a LockClient needs (EVALSHA, SCRIPT LOAD, SUBSCRIBE
and the read commands of status).

Exit status: 0 if a hold was released; 1 if nothing was (the token holds
nothing there: released meanwhile, expired, or mistyped); 2 without --token
or --force, or for an argument refused (a bad key); 69 if Redis could not be
reached or refused a command (holds already released are printed before the
error); 77 if the ACL user lacks a command.")]
pub struct UnlockArgs {
    /// The Redis URL: the global `--url` (before or after the subcommand),
    /// else `RELAYLOCK_URL`, else `redis://127.0.0.1:6379`.
    #[arg(skip)]
    pub url: String,
    /// Key prefix (the library's default).
    #[arg(long, env = "RELAYLOCK_PREFIX", default_value = "relaylock")]
    pub prefix: String,
    /// The hold to release: its token, as `relaylock status` shows it.
    #[arg(long)]
    pub token: Option<String>,
    /// Without --token: release every hold of KEY (of --kind, if given).
    #[arg(long, conflicts_with = "token")]
    pub force: bool,
    /// How long the released lock's record (its last fencing token, its
    /// released fences) stays in Redis: the applications' `side_retention`,
    /// if they changed it from the default.
    #[arg(long, value_parser = crate::parse::parse_duration, default_value = "60s")]
    pub side_retention: Duration,
    /// Only this primitive of KEY (a lock, a semaphore and a read-write lock
    /// may share a name); by default, whichever the token holds.
    #[arg(long, value_enum)]
    pub kind: Option<Kind>,
    /// The lock, semaphore or read-write lock name.
    #[arg(value_parser = crate::parse::key)]
    pub key: String,
}

/// `--kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// A lock (`LockClient::lock`).
    Mutex,
    /// A semaphore (`LockClient::semaphore`).
    Semaphore,
    /// A read-write lock (`LockClient::rw_lock`): a read or the write.
    Rwlock,
}

impl Kind {
    fn primitive(self) -> Primitive {
        match self {
            Kind::Mutex => Primitive::Mutex,
            Kind::Semaphore => Primitive::Semaphore,
            Kind::Rwlock => Primitive::RwLock,
        }
    }
}

/// What `unlock` does, as an exit status.
pub async fn run(args: UnlockArgs) -> u8 {
    if args.token.is_none() && !args.force {
        eprintln!(
            "relaylock unlock: {}: give the hold's --token (see `relaylock status {}`), \
             or --force to release every hold of it",
            args.key, args.key
        );
        return USAGE;
    }
    let client = match LockClient::builder()
        .url(&args.url)
        .prefix(&args.prefix)
        .side_retention(args.side_retention)
        .build()
        .await
    {
        Ok(c) => c,
        Err(e) => return fail(&args.url, &e),
    };
    let outcome = unlock(&client, &args).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), client.shutdown()).await;
    match outcome {
        Ok(true) => 0,
        Ok(false) => NOTHING,
        Err(e) => fail(&args.url, &e),
    }
}

/// Release what `args` names, printing each hold as it is released (so an
/// error part way through `--force` leaves the ones already released on
/// the screen); whether anything was released.
async fn unlock(client: &LockClient, args: &UnlockArgs) -> Result<bool, Error> {
    let found = client.inspect(&args.key).await?;
    let mut targets = Vec::new();
    for state in &found.states {
        if args.kind.is_some_and(|k| k.primitive() != state.primitive) {
            continue;
        }
        for h in &state.holders {
            if args.token.as_ref().is_none_or(|t| *t == h.token) {
                targets.push((state.primitive, h.token.clone()));
            }
        }
    }
    let mut released = false;
    for (primitive, token) in targets {
        match client.unlock(primitive, &args.key, &token).await? {
            Some(h) => {
                released = true;
                println!(
                    "released {primitive} {}: token {}, fencing token {}, {} of its lease left",
                    args.key,
                    h.token,
                    h.fencing_token,
                    crate::status::human(h.remaining)
                );
            }
            None => println!(
                "{primitive} {}: token {token} held nothing any more when released",
                args.key
            ),
        }
    }
    if !released {
        let what = match &args.token {
            Some(t) => format!("token {t} holds nothing"),
            None => "nothing is held".to_owned(),
        };
        println!("{}: {what}; nothing changed", args.key);
    }
    Ok(released)
}

fn fail(url: &str, e: &Error) -> u8 {
    let url = crate::status::redacted(url);
    let text = e.to_string();
    if let Error::InvalidArgument(_) = e {
        eprintln!("relaylock unlock: {e}");
        USAGE
    } else if text.contains("NOPERM") {
        eprintln!("relaylock unlock: permission denied on {url}: {text}");
        crate::status::NO_PERMISSION
    } else {
        eprintln!("relaylock unlock: {url}: {e}");
        crate::status::REDIS
    }
}
