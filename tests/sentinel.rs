//! relaylock behind Redis Sentinel: a real failover (`SENTINEL FAILOVER`)
//! of a primary with one replica, watched by three real `redis-sentinel`
//! processes, while two clients (connected with a `redis-sentinel://` URL)
//! contend for one lock.
//!
//! Every critical section writes its fencing token to a guarded resource, the
//! *ledger*, on a redis-server of its own that the failover does not touch
//! (the idea of tests/faults.rs): it counts overlaps (a holder entering while
//! another is inside) and stale tokens (not above the last one accepted),
//! and keeps the accepted tokens in order.
//!
//! What a `SENTINEL FAILOVER` does, as these tests measure it (Redis 7.0):
//! the sentinel promotes the replica within about a second, but leaves the
//! old primary a writable primary until it reconfigures it as a replica of
//! the new one, about 8-10 s later (Sentinel waits 4 publish periods of
//! 2 s before correcting a server's role). Only then does it close that
//! server's client connections, and only then do fred's connections, which
//! ask the sentinels for the primary when they (re)connect, move. So:
//!
//! * *promoted*: every sentinel reports the new primary and its `ROLE` says
//!   master;
//! * *demoted*: the old primary's `ROLE` says it replicates the new one.
//!
//! Each test prints what it measured (`--nocapture`).

use relaylock_testkit as support;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::CustomCommand;
use relaylock::{Error, LockClient, LockGuard, LockOptions};
use support::ledger::{Ledger, Totals};
use support::sentinel::Sentinels;
use support::{command_calls, delta, eventually, numsub, spawn_waiter, Admin};

/// The clients' default lease (renewed by the watchdog).
const LEASE: Duration = Duration::from_secs(2);

/// `WAIT` timeout of the `min_replicas(1, ..)` acquisitions (at most half
/// the lease).
const REPLICA_WAIT: Duration = Duration::from_millis(250);

/// How long one critical section holds the lock.
const HOLD: Duration = Duration::from_millis(20);

/// What a wait may take beyond one lease once the failover completed (the
/// old primary is demoted and its clients disconnected):
/// * fred reconnects (1 ms doubling backoff plus up to 10 ms of jitter), asks a sentinel
///   for the primary and checks its `ROLE`: well under 0.5 s on loopback;
/// * a `min_replicas` acquisition is only acknowledged once the demoted
///   server finished its full resync from the new primary
///   (`repl-diskless-sync-delay 0`): measured below as "resync";
/// * the waiters queued ahead (12 tasks, 20 ms critical sections plus a
///   `WAIT` round trip each: about 0.5 s);
/// * scheduling on a shared 2-core machine running 2 servers, 3 sentinels,
///   the ledger and this test.
const SLACK: Duration = Duration::from_secs(2);

const CLIENTS: usize = 2;
const TASKS: usize = 6;
const KEY: &str = "k";

/// A client as the tests use it: a 2 s lease, 1 s command timeout.
async fn lock_client(url: &str, prefix: &str) -> LockClient {
    support::preset(url)
        .prefix(prefix)
        .default_lease(LEASE)
        .command_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect through the sentinels")
}

/// Inside a critical section; leaving takes the writer out of the ledger
/// (in the background when the section's future is dropped because the lock
/// was lost).
struct Inside {
    ledger: Arc<Ledger>,
    writer: String,
}

impl Drop for Inside {
    fn drop(&mut self) {
        if self.writer.is_empty() {
            return;
        }
        let (ledger, writer) = (Arc::clone(&self.ledger), std::mem::take(&mut self.writer));
        tokio::spawn(async move { ledger.leave(KEY, &writer).await });
    }
}

/// One critical section: enter and write the fencing token, hold, write
/// again (a stale holder's second write would be rejected), leave. Noted in
/// `record.sections` for the report of a failed safety check.
async fn critical(ledger: &Arc<Ledger>, g: &LockGuard, client: usize, record: &Record) {
    let mut inside = Inside {
        ledger: Arc::clone(ledger),
        writer: g.token().to_owned(),
    };
    let index = {
        let mut sections = record.sections.lock().unwrap();
        sections.push(Section {
            client,
            fence: g.fencing_token(),
            entered: Instant::now(),
            first: None,
            second: None,
            left: None,
        });
        sections.len() - 1
    };
    let first = ledger.write(KEY, g.fencing_token(), g.token(), true).await;
    record.sections.lock().unwrap()[index].first = Some(first);
    tokio::time::sleep(HOLD).await;
    let second = ledger.write(KEY, g.fencing_token(), g.token(), false).await;
    ledger.leave(KEY, g.token()).await;
    inside.writer.clear();
    let mut sections = record.sections.lock().unwrap();
    sections[index].second = Some(second);
    sections[index].left = Some(Instant::now());
}

/// One critical section as its holder saw it: `first` and `second` say
/// whether the ledger accepted its writes (`None`: not answered); `left` is
/// `None` for a section cut short (its future dropped when the lock was
/// lost).
#[derive(Clone, Copy, Debug)]
struct Section {
    client: usize,
    fence: u64,
    entered: Instant,
    first: Option<bool>,
    second: Option<bool>,
    left: Option<Instant>,
}

/// One acquisition: when its caller started waiting (retries included) and
/// when it had the lock.
#[derive(Clone, Copy, Debug)]
struct Acquisition {
    client: usize,
    started: Instant,
    acquired: Instant,
}

#[derive(Default)]
struct Record {
    acquisitions: Mutex<Vec<Acquisition>>,
    sections: Mutex<Vec<Section>>,
    /// Errors retried, by kind.
    errors: Mutex<BTreeMap<String, u64>>,
    lost: Mutex<u64>,
    /// Failed calls and lost locks in order: when, which client, what.
    events: Mutex<Vec<(Instant, usize, String)>>,
}

fn kind(e: &Error) -> String {
    match e {
        Error::NotReplicated { acked, required } => format!("NotReplicated({acked}/{required})"),
        Error::Redis(e) => format!("Redis({:?})", e.kind()),
        other => format!("{other:?}"),
    }
}

/// Lock, run a critical section, repeat until `stop`; a failed call is
/// retried after 20 ms, as a caller would (the wait goes on).
async fn worker(
    lock: LockClient,
    client: usize,
    options: LockOptions,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
    record: Arc<Record>,
) {
    while !stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        loop {
            let outcome = lock
                .with_lock(KEY, options.clone(), async |g| {
                    record.acquisitions.lock().unwrap().push(Acquisition {
                        client,
                        started,
                        acquired: Instant::now(),
                    });
                    critical(&ledger, g, client, &record).await
                })
                .await;
            match outcome {
                Ok(()) => break,
                Err(Error::LockLost { .. }) => {
                    *record.lost.lock().unwrap() += 1;
                    let event = (Instant::now(), client, "LockLost".to_owned());
                    record.events.lock().unwrap().push(event);
                    break;
                }
                Err(e) => {
                    *record.errors.lock().unwrap().entry(kind(&e)).or_default() += 1;
                    let event = (Instant::now(), client, format!("{}: {e}", kind(&e)));
                    record.events.lock().unwrap().push(event);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
}

/// For a failed safety check: every critical section that another one
/// entered before it was left, with its neighbours and the failed calls
/// around it, in ms from `origin`.
fn overlap_report(
    sections: &[Section],
    events: &[(Instant, usize, String)],
    origin: Instant,
    marks: &[(&str, Instant)],
) -> String {
    let at = |t: Instant| {
        if t >= origin {
            format!("{:+.1}", (t - origin).as_secs_f64() * 1000.0)
        } else {
            format!("-{:.1}", (origin - t).as_secs_f64() * 1000.0)
        }
    };
    let mut sorted = sections.to_vec();
    sorted.sort_by_key(|s| s.entered);
    let mut out = String::from("times in ms from SENTINEL FAILOVER; ");
    for (name, t) in marks {
        out += &format!("{name} {}; ", at(*t));
    }
    for (i, s) in sorted.iter().enumerate() {
        let Some(next) = sorted.get(i + 1) else { break };
        if s.left.is_some_and(|left| left <= next.entered) {
            continue;
        }
        let (from, to) = (s.entered, next.left.unwrap_or(next.entered));
        out += "\noverlap:";
        for n in &sorted[i.saturating_sub(2)..(i + 4).min(sorted.len())] {
            out += &format!(
                "\n  client {} fence {} entered {} left {} first write {:?} second {:?}",
                n.client,
                n.fence,
                at(n.entered),
                n.left.map_or("never".to_owned(), at),
                n.first,
                n.second
            );
        }
        let near =
            |t: Instant| t + Duration::from_secs(3) >= from && t <= to + Duration::from_secs(3);
        for (t, client, what) in events.iter().filter(|e| near(e.0)) {
            out += &format!("\n  event {} client {client}: {what}", at(*t));
        }
        for w in support::warnings::recorded().iter().filter(|w| near(w.at)) {
            out += &format!(
                "\n  warning {}: {} {} {} {}",
                at(w.at),
                w.message,
                w.key,
                w.error,
                w.fields
            );
        }
    }
    out
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// A failover while 2 clients x 6 tasks contend for one lock taken with
/// `min_replicas(1, ..)`: no overlap, no stale token, tokens strictly
/// increase; after the failover the locks live on the new primary, every
/// wait ends within a lease (plus slack) of the old primary's demotion, and
/// both subscribers listen on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_keeps_replicated_locks_safe_and_moves_every_client() {
    // relaylock's warnings, for the report of a failed safety check.
    support::warnings::install();
    let setup = Sentinels::start();
    let (old_port, new_port) = (setup.initial_primary.port, setup.initial_replica.port);
    let url = setup.url();
    let ledger = Ledger::start().await;
    let prefix = "failover";
    let clients = [
        lock_client(&url, prefix).await,
        lock_client(&url, prefix).await,
    ];
    // The replica about to be promoted may evict. No client is
    // built after the promotion: only the running clients, following the
    // primary there, can say so.
    may_evict(&setup.initial_replica).await;
    let channel = format!("{}:ch", clients[0].redis_key(KEY));
    let options = LockOptions::default().min_replicas(1, REPLICA_WAIT);

    let stop = Arc::new(AtomicBool::new(false));
    let record = Arc::new(Record::default());
    let workers = spawn_workers(&clients, &options, &ledger, &stop, &record);

    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_the_clients_found_the_initial_primary(&setup).await;
    let f = fail_over(&setup).await;

    // Both clients' subscribers listen on the new primary again.
    let resubscribed = eventually(LEASE + SLACK, || async {
        numsub(&f.new, &channel).await == CLIENTS as i64
    })
    .await;
    let resubscribed_at = Instant::now();
    assert!(
        resubscribed,
        "PUBSUB NUMSUB {channel} on the new primary: {}",
        numsub(&f.new, &channel).await
    );
    let synced = setup.wait_synced(old_port, Duration::from_secs(10)).await;

    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let stopped = Instant::now();
    let all = futures::future::join_all(workers);
    assert!(
        tokio::time::timeout(LEASE + SLACK + Duration::from_secs(5), all)
            .await
            .is_ok(),
        "a worker is stuck"
    );

    let woke = probe_wake_up(&clients, &f.new).await;
    let o = Observed {
        new_after: command_calls(&f.new).await,
        old_after: command_calls(&f.old).await,
        t: ledger.totals(&[KEY]).await,
        tokens: ledger.tokens(KEY).await,
        acquisitions: record.acquisitions.lock().unwrap().clone(),
        errors: record.errors.lock().unwrap().clone(),
        lost: *record.lost.lock().unwrap(),
        woke,
        synced,
        resubscribed_at,
        stopped,
    };
    let c = Counts::of(&o.acquisitions, &f);
    print_failover(&f, &o, &c);
    assert_safe_and_refused_on_the_old_primary(&f, &o, &record);
    assert_every_client_moved_to_the_new_primary(&f, &o, &c, old_port, new_port);
}

/// Sets a memory limit and an evicting policy on `server`.
async fn may_evict(server: &support::RedisServer) {
    let replica_admin = server.admin().await;
    for (name, value) in [("maxmemory", "200mb"), ("maxmemory-policy", "volatile-lru")] {
        let _: () = replica_admin
            .custom(
                CustomCommand::new_static("CONFIG", None, false),
                vec!["SET", name, value],
            )
            .await
            .unwrap();
    }
}

/// [`TASKS`] workers per client, each taking the lock with `options` until
/// `stop`.
fn spawn_workers(
    clients: &[LockClient],
    options: &LockOptions,
    ledger: &Arc<Ledger>,
    stop: &Arc<AtomicBool>,
    record: &Arc<Record>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut workers = Vec::new();
    for (c, lock) in clients.iter().enumerate() {
        for _ in 0..TASKS {
            workers.push(tokio::spawn(worker(
                lock.clone(),
                c,
                options.clone(),
                Arc::clone(ledger),
                Arc::clone(stop),
                Arc::clone(record),
            )));
        }
    }
    workers
}

/// The clients found the initial primary through the sentinels: it ran
/// their scripts and their `WAIT`s.
async fn assert_the_clients_found_the_initial_primary(setup: &Sentinels) {
    let old = setup.initial_primary.admin().await;
    let calls = command_calls(&old).await;
    assert!(calls.get("evalsha").copied().unwrap_or(0) > 0, "{calls:?}");
    assert!(calls.get("wait").copied().unwrap_or(0) > 0, "{calls:?}");
    let _ = old.quit().await;
}

/// A `SENTINEL FAILOVER` as it happened: when it was sent, when the replica
/// was promoted, when the old primary was demoted (after the last check
/// that saw it undemoted, and by the first that saw it demoted), with an
/// admin connection to each server and its command counts from then on.
struct Failover {
    sent: Instant,
    promoted: Instant,
    demoted_not_before: Instant,
    demoted: Instant,
    new: Client,
    new_before: HashMap<String, u64>,
    old: Client,
    old_before: HashMap<String, u64>,
}

/// Fails the primary over to its replica and waits until it is promoted,
/// and the old primary demoted.
async fn fail_over(setup: &Sentinels) -> Failover {
    let sent = setup.failover().await;
    let promoted = setup.wait_promoted(Duration::from_secs(20)).await;
    let new = setup.initial_replica.admin().await;
    let new_before = command_calls(&new).await;
    let (demoted_not_before, demoted) = setup.wait_demoted_between(Duration::from_secs(30)).await;
    let old = setup.initial_primary.admin().await;
    let old_before = command_calls(&old).await;
    Failover {
        sent,
        promoted,
        demoted_not_before,
        demoted,
        new,
        new_before,
        old,
        old_before,
    }
}

/// A waiter of one client, blocked by a holder of the other (a fixed 10 s
/// lease, no watchdog), is woken by the release message on the new
/// primary, not by the lease running out: how long after the release.
async fn probe_wake_up(clients: &[LockClient], new: &Client) -> Duration {
    let holder = clients[0]
        .lock_with(
            "probe",
            LockOptions::default().lease(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    let waiter = spawn_waiter(&clients[1], "probe");
    let probe_channel = format!("{}:ch", clients[1].redis_key("probe"));
    assert!(
        eventually(Duration::from_secs(5), || async {
            numsub(new, &probe_channel).await >= 1
        })
        .await,
        "the waiter never subscribed on the new primary"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the probe waiter is stuck")
        .unwrap()
        - released
}

/// What the run recorded, after the workers stopped.
struct Observed {
    new_after: HashMap<String, u64>,
    old_after: HashMap<String, u64>,
    t: Totals,
    tokens: Vec<u64>,
    acquisitions: Vec<Acquisition>,
    errors: BTreeMap<String, u64>,
    lost: u64,
    /// How long after its release the probe's waiter woke.
    woke: Duration,
    synced: Instant,
    resubscribed_at: Instant,
    stopped: Instant,
}

/// The acquisitions by phase of the failover, and how long waits lasted
/// past it.
struct Counts {
    before: usize,
    promoting: usize,
    during: usize,
    after: usize,
    worst_after_demotion: Duration,
    worst_after_promotion: Duration,
    first_after: Option<Duration>,
    per_client: Vec<usize>,
}

impl Counts {
    fn of(acquisitions: &[Acquisition], f: &Failover) -> Counts {
        let (sent, promoted, demoted) = (f.sent, f.promoted, f.demoted);
        let before = acquisitions.iter().filter(|a| a.acquired < sent).count();
        let promoting = acquisitions
            .iter()
            .filter(|a| a.acquired >= sent && a.acquired < promoted)
            .count();
        let during = acquisitions
            .iter()
            .filter(|a| a.acquired >= promoted && a.acquired < demoted)
            .count();
        let after = acquisitions
            .iter()
            .filter(|a| a.acquired >= demoted)
            .count();
        // How long each wait lasted past the completed failover (or past its
        // own start, for waits that began later).
        let past = |a: &Acquisition, from: Instant| {
            a.acquired.saturating_duration_since(a.started.max(from))
        };
        let worst_after_demotion = acquisitions
            .iter()
            .map(|a| past(a, demoted))
            .max()
            .unwrap_or_default();
        let worst_after_promotion = acquisitions
            .iter()
            .map(|a| past(a, promoted))
            .max()
            .unwrap_or_default();
        let first_after = acquisitions
            .iter()
            .filter(|a| a.acquired >= demoted)
            .map(|a| a.acquired - demoted)
            .min();
        let per_client: Vec<usize> = (0..CLIENTS)
            .map(|c| {
                acquisitions
                    .iter()
                    .filter(|a| a.client == c && a.acquired >= demoted)
                    .count()
            })
            .collect();
        Counts {
            before,
            promoting,
            during,
            after,
            worst_after_demotion,
            worst_after_promotion,
            first_after,
            per_client,
        }
    }
}

/// What the failover test measured.
fn print_failover(f: &Failover, o: &Observed, c: &Counts) {
    let (sent, promoted, demoted) = (f.sent, f.promoted, f.demoted);
    let Counts {
        before,
        promoting,
        during,
        after,
        per_client,
        ..
    } = c;
    let (errors, lost, t) = (&o.errors, o.lost, &o.t);
    println!(
        "sentinel failover: promoted {} after SENTINEL FAILOVER, old primary demoted {} after that, resynced {} after demotion; \
         acquisitions {before} before SENTINEL FAILOVER, {promoting} until the promotion, {during} between the promotion and the demotion, {after} after the demotion ({per_client:?} per client; first {:?} after the demotion); \
         longest wait past the promotion {}, past the demotion {} (bound {}); both subscribers on the new primary {} after the demotion; \
         probe waiter woken {} after the release; errors retried {errors:?}; lost while held {lost}; \
         new primary: evalsha {}, wait {} since the promotion; old primary: evalsha {} since the demotion; ledger {t:?}; \
         workers stopped {} after the demotion",
        ms(promoted - sent),
        ms(demoted - promoted),
        ms(o.synced.saturating_duration_since(demoted)),
        c.first_after.map(ms),
        ms(c.worst_after_promotion),
        ms(c.worst_after_demotion),
        ms(LEASE + SLACK),
        ms(o.resubscribed_at - demoted),
        ms(o.woke),
        delta(&f.new_before, &o.new_after, "evalsha"),
        delta(&f.new_before, &o.new_after, "wait"),
        delta(&f.old_before, &o.old_after, "evalsha"),
        ms(o.stopped - demoted),
    );
}

/// (a) Safety: no overlap, no stale token, accepted tokens increase; and no
/// acquisition on the old primary once it lost its replica.
fn assert_safe_and_refused_on_the_old_primary(f: &Failover, o: &Observed, record: &Record) {
    let (sent, promoted, demoted) = (f.sent, f.promoted, f.demoted);
    let (t, tokens, acquisitions, errors) = (&o.t, &o.tokens, &o.acquisitions, &o.errors);
    if t.overlaps > 0 || t.stale > 0 {
        let sections = record.sections.lock().unwrap().clone();
        let events = record.events.lock().unwrap().clone();
        println!(
            "{}",
            overlap_report(
                &sections,
                &events,
                sent,
                &[("promoted", promoted), ("demoted", demoted)]
            )
        );
    }
    // (a) Safety: no overlap, no stale token, accepted tokens increase.
    assert!(t.accepted > 0, "nothing was written");
    assert_eq!(t.overlaps, 0, "two holders overlapped: {t:?}");
    assert_eq!(t.stale, 0, "a stale token was written: {t:?}");
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens did not strictly increase: {tokens:?}"
    );
    // While the old primary is still writable but has no replica left, no
    // `min_replicas` acquisition succeeds there: every one is refused with
    // NotReplicated. (An acquisition acknowledged just before the promotion
    // may be recorded just after it was observed: 1 s of grace for that.)
    // The window ends where the demotion may have happened: at the last
    // check that still saw the old primary undemoted. After it, a client
    // that fred reconnected at once (the first attempt comes 1 ms after the
    // drop) can be acknowledged by the new primary, whose replica the
    // demoted server becomes within milliseconds; the check that sees the
    // demotion comes up to a poll (20 ms) plus scheduling later.
    let in_window: Vec<String> = acquisitions
        .iter()
        .filter(|a| {
            a.acquired >= promoted + Duration::from_secs(1) && a.acquired < f.demoted_not_before
        })
        .map(|a| {
            format!(
                "client {} started {} ms and acquired {} ms after the promotion",
                a.client,
                a.started.saturating_duration_since(promoted).as_millis(),
                (a.acquired - promoted).as_millis()
            )
        })
        .collect();
    assert!(
        in_window.is_empty(),
        "acquired on the old primary after the promotion: {in_window:?}; events {:?}",
        record
            .events
            .lock()
            .unwrap()
            .iter()
            .map(|(at, c, what)| format!(
                "{} ms client {c}: {what}",
                at.saturating_duration_since(promoted).as_millis()
            ))
            .collect::<Vec<_>>()
    );
    assert!(
        errors.keys().any(|k| k.starts_with("NotReplicated")),
        "{errors:?}"
    );
}

/// (b) to (e): the locks, the waits, the release messages and the eviction
/// check all follow the new primary.
fn assert_every_client_moved_to_the_new_primary(
    f: &Failover,
    o: &Observed,
    c: &Counts,
    old_port: u16,
    new_port: u16,
) {
    let (before, per_client, worst_after_demotion, woke) =
        (c.before, &c.per_client, c.worst_after_demotion, o.woke);
    let (new_before, new_after, old_before, old_after) =
        (&f.new_before, &o.new_after, &f.old_before, &o.old_after);
    // (b) Locks were taken before the failover and, after it, on the new
    // primary only: the old one is its replica and got no relaylock call.
    assert!(before > 0, "no acquisition before the failover");
    assert!(
        per_client.iter().all(|n| *n > 0),
        "a client acquired nothing after the failover: {per_client:?}"
    );
    assert!(delta(new_before, new_after, "evalsha") > 0);
    assert!(delta(new_before, new_after, "wait") > 0);
    assert_eq!(delta(old_before, old_after, "evalsha"), 0);
    let r = support::sentinel::role(old_port);
    assert_eq!(
        (r.first().map(String::as_str), r.get(2)),
        (Some("slave"), Some(&new_port.to_string())),
        "old primary's ROLE: {r:?}"
    );
    // (c) No waiter stuck: every wait ends within a lease plus slack of the
    // demotion (from which on the clients can only reach the new primary).
    assert!(
        worst_after_demotion <= LEASE + SLACK,
        "a wait lasted {} past the demotion",
        ms(worst_after_demotion)
    );
    // (d) The release message reached the other client's waiter through
    // the new primary: well under the lease, and far under the probe's 10 s.
    assert!(
        woke < Duration::from_secs(1),
        "woken {} after the release",
        ms(woke)
    );
    // (e) The clients read the new primary's eviction policy when they
    // followed it there, and warned (once in the process).
    let promoted = format!("127.0.0.1:{new_port}");
    let warned = support::warnings::recorded()
        .into_iter()
        .filter(|w| w.message.contains(&promoted) && w.message.contains("volatile-lru"))
        .count();
    assert_eq!(warned, 1, "the promoted primary may evict: one warning");
}

/// What a lock taken WITHOUT `min_replicas` can lose in a failover, made
/// deterministic: after the promotion, a client still connected to the old
/// primary (which stays writable until the sentinels demote it) takes a
/// lock there. The new primary never sees it, so a client connecting now
/// takes the same lock: two holders at once. The fencing tokens still order
/// them (the newer holder's token, from the new primary's `TIME`, is higher),
/// so a fenced resource rejects the old holder once the new one wrote; and
/// the old holder learns of the loss once the demotion moves its client to
/// the new primary. The same acquisition with `min_replicas(1, ..)` fails
/// with `NotReplicated` instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_min_replicas_a_failover_can_lose_a_lock() {
    let setup = Sentinels::start();
    let url = setup.url();
    let ledger = Ledger::start().await;
    let prefix = "lossy";
    let old_client = lock_client(&url, prefix).await;
    let replicated = LockOptions::default().min_replicas(1, REPLICA_WAIT);
    // With the replica in place, min_replicas acquisitions succeed (and the
    // client opens its replica connections, on the initial primary).
    old_client
        .lock_with(KEY, replicated.clone())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let sent = setup.failover().await;
    let promoted = setup.wait_promoted(Duration::from_secs(20)).await;

    // With min_replicas: the old primary has no replica left, so the
    // acquisition is refused (and released).
    assert_not_replicated(&old_client, replicated).await;
    // Without: taken on the old primary, and nowhere else.
    let old_guard = old_client.lock(KEY).await.unwrap();
    let taken_on_old = Instant::now();
    let new_client = lock_client(&url, prefix).await;
    let new_guard = new_client
        .try_lock(KEY)
        .await
        .unwrap()
        .expect("the new primary has no trace of the old primary's lock");
    assert!(
        old_guard.is_held() && new_guard.is_held(),
        "two holders at once"
    );
    assert!(
        new_guard.fencing_token() > old_guard.fencing_token(),
        "{} then {}",
        old_guard.fencing_token(),
        new_guard.fencing_token()
    );
    let t = assert_fencing_rejects_the_old_holder(&ledger, &old_guard, &new_guard).await;

    // The old holder learns of the loss after the demotion.
    let demoted = setup.wait_demoted(Duration::from_secs(30)).await;
    let held_until_demotion = old_guard.is_held();
    tokio::time::timeout(LEASE + SLACK, old_guard.lost())
        .await
        .expect("the old holder never learned its lock was lost");
    let noticed = demoted.elapsed();
    println!(
        "lock without min_replicas: promoted {} after SENTINEL FAILOVER; a lock taken on the old primary {} after the promotion was taken again on the new primary; \
         tokens {} (old primary) < {} (new primary); ledger {t:?}; old primary demoted {} after the promotion; \
         the old holder {} held until then and learned of the loss {} after the demotion",
        ms(promoted - sent),
        ms(taken_on_old - promoted),
        old_guard.fencing_token(),
        new_guard.fencing_token(),
        ms(demoted - promoted),
        if held_until_demotion { "still believed it" } else { "no longer" },
        ms(noticed),
    );
    assert!(matches!(
        old_guard.release().await,
        Err(Error::LockLost { .. })
    ));
    new_guard.release().await.unwrap();
}

/// An acquisition of `client` with `replicated` (`min_replicas(1, ..)`) fails
/// with `NotReplicated`, nothing acknowledged.
async fn assert_not_replicated(client: &LockClient, replicated: LockOptions) {
    match client.lock_with(KEY, replicated).await {
        Err(Error::NotReplicated {
            acked: 0,
            required: 1,
        }) => {}
        other => panic!("expected NotReplicated {{ acked: 0, required: 1 }}, got {other:?}"),
    }
}

/// Two holders at once, the old one's token lower: the resource sees the
/// overlap; fencing rejects the older holder once the newer one wrote.
/// Returns what the ledger counted.
async fn assert_fencing_rejects_the_old_holder(
    ledger: &Ledger,
    old_guard: &LockGuard,
    new_guard: &LockGuard,
) -> Totals {
    assert!(
        ledger
            .write(KEY, new_guard.fencing_token(), new_guard.token(), true)
            .await
    );
    let old_accepted = ledger
        .write(KEY, old_guard.fencing_token(), old_guard.token(), true)
        .await;
    let t = ledger.totals(&[KEY]).await;
    assert!(!old_accepted, "the fenced resource accepted the old holder");
    assert_eq!((t.overlaps, t.stale), (1, 1), "{t:?}");
    t
}
