//! What a run showed: the observer's samples read against the tasks'
//! reports, the lines printed about it, and the checks.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::load::{hist, End, Measured, Report, AGE_BUCKETS, CANCEL_KINDS, POLL_BUCKETS};
use super::samples::{longest_free, within, Sample};
use super::{
    Run, BACKGROUND_BOUND, CLIENTS, LEASE, LONG_LEASE, QUEUE_GRACE, QUIET, SLACK, TASKS, WAIT,
};

// Background releases that failed, as the library logs them (a WARN event
// with the lock's Redis name as `key`). Such a lock stays until its lease
// ends, as documented: under an injected fault (a script cache flushed
// twice within one reload) that is no bug. The event names no token, so
// each one excuses one lingering token whose background release started
// just before it (see `BACKGROUND_BOUND`).

/// (error, when logged) of each background release of a lock under
/// `prefix` that failed so far.
fn failed_releases(prefix: &str) -> Vec<(String, Instant)> {
    let start = format!("{prefix}:");
    crate::warnings::recorded()
        .into_iter()
        .filter(|w| w.message.contains("background release failed") && w.key.starts_with(&start))
        .map(|w| (w.error, w.at))
        .collect()
}

/// What the samples and the reports show, as the checks and the printed
/// lines use it.
struct Analysis {
    /// The longest stretch the key was provably free.
    free_any: Duration,
    /// Measured calls that saw the key free for `LEASE + SLACK` or more.
    over: usize,
    /// The worst of those stretches, described.
    worst_line: Option<String>,
    measured_ok: usize,
    seen_after_release: Vec<String>,
    /// The longest a token stayed after its guard was dropped, and after
    /// its `release()` was cancelled.
    linger: [Duration; 2],
    lingered: Vec<String>,
    orphans: usize,
    orphan_max: Duration,
    orphans_long: Vec<String>,
    /// Reservations taken, and lapsed.
    reservations: (u64, u64),
    reserved_idle: [u64; 3],
    queued_idle: Vec<String>,
    queued_idle_samples: usize,
    failed_background: Vec<(String, Instant)>,
    excused: usize,
    release_failed: usize,
}

/// Analyses `run`, prints what was measured, and asserts every check.
pub(super) fn check(run: &Run<'_>) {
    let a = analyse(run);
    print_load(run);
    print_findings(run, &a);
    let failures = failures(run, &a);
    assert!(
        failures.is_empty(),
        "{} (seed {:#x}):\n  {}",
        run.name,
        run.seed,
        failures.join("\n  ")
    );
}

fn analyse(run: &Run<'_>) -> Analysis {
    let (samples, report) = (&run.samples, &run.report);
    let (free_any, _) = longest_free(samples);
    let (worst_wait, over) = free_while_waiting(samples, &report.measured);
    let seen = token_lifetimes(samples);
    let ends: HashMap<&str, (End, Instant)> = report
        .ends
        .iter()
        .map(|(t, _, e, at)| (t.as_str(), (*e, *at)))
        .collect();
    let guards: HashSet<&str> = ends.keys().copied().collect();
    let worst_line = worst_wait
        .as_ref()
        .map(|&(d, m, i)| describe_wait(run, d, m, i));
    let calls = Calls::of(report);
    let (queued_idle, queued_idle_samples) = queued_idle(run, &calls);
    let tokens = lingering(&seen, &ends, &guards);
    let failed_background = failed_releases(&run.prefix);
    let (excused, lingered, orphans_long) = excuse(tokens.long, &failed_background);
    let release_failed = ends
        .values()
        .filter(|(e, _)| *e == End::ReleaseFailed)
        .count();
    Analysis {
        free_any,
        over,
        worst_line,
        measured_ok: report.measured.iter().filter(|m| m.acquired).count(),
        seen_after_release: tokens.seen_after_release,
        linger: tokens.linger,
        lingered,
        orphans: tokens.orphans,
        orphan_max: tokens.orphan_max,
        orphans_long,
        reservations: reservations(samples),
        reserved_idle: reserved_idle(samples, &run.ids, &calls),
        queued_idle,
        queued_idle_samples,
        failed_background,
        excused,
        release_failed,
    }
}

/// The longest free stretch while a measured call waited: (free, call,
/// first sample of the stretch); and how many measured calls saw one of
/// `LEASE + SLACK` or more.
fn free_while_waiting<'a>(
    samples: &[Sample],
    measured: &'a [Measured],
) -> (Option<(Duration, &'a Measured, usize)>, usize) {
    let mut worst_wait: Option<(Duration, &Measured, usize)> = None;
    let mut over = 0;
    for m in measured {
        let (lo, window) = within(samples, m.start, m.end);
        let (d, i) = longest_free(window);
        if d >= LEASE + SLACK {
            over += 1;
        }
        if d > worst_wait.as_ref().map_or(Duration::ZERO, |w| w.0) {
            worst_wait = Some((d, m, lo + i));
        }
    }
    (worst_wait, over)
}

/// Token lifetimes as the observer saw them: first reply, last sending.
fn token_lifetimes(samples: &[Sample]) -> HashMap<&str, (Instant, Instant)> {
    let mut seen: HashMap<&str, (Instant, Instant)> = HashMap::new();
    for s in samples {
        if let Some(t) = s.token() {
            let e = seen.entry(t).or_insert((s.recv, s.sent));
            e.1 = s.sent;
        }
    }
    seen
}

/// The worst free stretch `d` while the measured call `m` waited, from
/// sample `i`, with what held the key just before it.
fn describe_wait(run: &Run<'_>, d: Duration, m: &Measured, i: usize) -> String {
    let (samples, started) = (&run.samples, run.started);
    let ms = |at: Instant| at.saturating_duration_since(started).as_millis();
    let before = samples[..i].iter().rev().find(|s| !s.free());
    let holder = match before {
        None => "nothing".to_owned(),
        Some(s) => {
            let what = match s.token() {
                Some(t) => match run.report.ends.iter().find(|e| e.0 == t) {
                    Some((_, c, end, at)) => {
                        format!("a guard of client {c} (ended {end:?} at {}ms)", ms(*at))
                    }
                    None => "an acquisition of a cancelled call".to_owned(),
                },
                None => {
                    let id = s.value.trim_start_matches('~');
                    match run.ids.iter().position(|x| x == id) {
                        Some(c) => format!("a reservation for client {c}"),
                        None => format!("a reservation for unknown client {id}"),
                    }
                }
            };
            format!("{what}, last seen at {}ms", ms(s.sent))
        }
    };
    format!(
        "{d:?} (client {}, call {}ms..{}ms after start, {}; free from {}ms; before that the key held {holder})",
        m.client,
        ms(m.start),
        ms(m.end),
        if m.acquired { "acquired" } else { "timed out" },
        ms(samples[i].recv),
    )
}

/// Hand-over reservations the samples saw taken, and lapsed.
fn reservations(samples: &[Sample]) -> (u64, u64) {
    let mut reservations = (0u64, 0u64); // taken, lapsed
    for w in samples.windows(2) {
        if w[0].value.starts_with('~') && w[1].fence == w[0].fence {
            if w[1].free() {
                reservations.1 += 1;
            }
        } else if w[0].value.starts_with('~') && w[1].fence != w[0].fence {
            reservations.0 += 1;
        }
    }
    reservations
}

/// The lock calls of each client: (start, latest end of the calls started
/// so far), sorted by start, so that "was a call in progress at some point
/// of [a, b]" is one binary search.
struct Calls(Vec<Vec<(Instant, Instant)>>);

impl Calls {
    fn of(report: &Report) -> Calls {
        let mut calls: Vec<Vec<(Instant, Instant)>> = vec![Vec::new(); CLIENTS];
        for (c, from, until) in &report.in_progress {
            calls[*c].push((*from, *until));
        }
        let calls: Vec<Vec<(Instant, Instant)>> = calls
            .into_iter()
            .map(|mut v| {
                v.sort();
                let mut latest: Option<Instant> = None;
                for (_, until) in v.iter_mut() {
                    latest = Some(latest.map_or(*until, |l| l.max(*until)));
                    *until = latest.unwrap();
                }
                v
            })
            .collect();
        Calls(calls)
    }

    /// Whether client `c` had a lock call in progress at some point of
    /// `[a, b]`.
    fn busy(&self, c: usize, a: Instant, b: Instant) -> bool {
        let v = &self.0[c];
        let i = v.partition_point(|(from, _)| *from <= b);
        i > 0 && v[i - 1].1 >= a
    }
}

/// New reservations (the release that made one ran after the previous
/// sample was sent) for a client with no lock call in progress since
/// 20 ms / 100 ms / QUEUE_GRACE before: reported, not checked.
fn reserved_idle(samples: &[Sample], ids: &[String], calls: &Calls) -> [u64; 3] {
    let mut reserved_idle = [0u64; 3];
    for w in samples.windows(2) {
        let Some(id) = w[1].value.strip_prefix('~') else {
            continue;
        };
        if w[0].value == w[1].value {
            continue;
        }
        let Some(c) = ids.iter().position(|x| x == id) else {
            continue;
        };
        for (n, d) in [
            Duration::from_millis(20),
            Duration::from_millis(100),
            QUEUE_GRACE,
        ]
        .into_iter()
        .enumerate()
        {
            let since = w[0].sent.checked_sub(d).unwrap_or(w[0].sent);
            if !calls.busy(c, since, w[1].recv) {
                reserved_idle[n] += 1;
            }
        }
    }
    reserved_idle
}

/// Clients queued while no lock call of theirs was in progress: the first
/// few described, and the number of samples that showed one.
fn queued_idle(run: &Run<'_>, calls: &Calls) -> (Vec<String>, usize) {
    let mut queued_idle = Vec::new();
    let mut queued_idle_samples = 0;
    for s in &run.samples {
        for id in s.queue.split(' ').filter(|id| !id.is_empty()) {
            let Some(c) = run.ids.iter().position(|x| x == id) else {
                queued_idle.push(format!("unknown client {id} queued"));
                continue;
            };
            let since = s.sent.checked_sub(QUEUE_GRACE).unwrap_or(s.sent);
            if !calls.busy(c, since, s.recv) {
                queued_idle_samples += 1;
                if queued_idle.len() < 3 {
                    queued_idle.push(format!(
                        "client {c} queued at {}ms with no lock call of its own since {}ms",
                        (s.sent - run.started).as_millis(),
                        calls.0[c]
                            .iter()
                            .filter(|(from, _)| *from <= s.recv)
                            .map(|(_, until)| (*until - run.started).as_millis())
                            .max()
                            .map_or("the start".to_owned(), |ms| format!("{ms}")),
                    ));
                }
            }
        }
    }
    (queued_idle, queued_idle_samples)
}

/// How long tokens stayed in the key after their guard ended.
struct Lingering {
    seen_after_release: Vec<String>,
    /// Dropped, release cancelled.
    linger: [Duration; 2],
    orphans: usize,
    orphan_max: Duration,
    /// Tokens held past `BACKGROUND_BOUND` after their background release
    /// should have started: (window start, is an orphan, description).
    long: Vec<(Instant, bool, String)>,
}

/// Reads the tokens `seen` in the samples against how their guards ended
/// (`ends`; a token without a guard is an orphan: its call was dropped
/// around the acquisition).
fn lingering(
    seen: &HashMap<&str, (Instant, Instant)>,
    ends: &HashMap<&str, (End, Instant)>,
    guards: &HashSet<&str>,
) -> Lingering {
    let mut seen_after_release = Vec::new();
    let mut linger = [Duration::ZERO; 2]; // dropped, release cancelled
    let mut orphans = 0;
    let mut orphan_max = Duration::ZERO;
    let mut long: Vec<(Instant, bool, String)> = Vec::new();
    for (t, (first, last)) in seen {
        match ends.get(t) {
            Some((End::Released, at)) if last > at => {
                seen_after_release.push(format!(
                    "{t} seen {:?} after release() returned",
                    *last - *at
                ));
            }
            Some((End::Released | End::ReleaseFailed, _)) => {}
            Some((kind, at)) => {
                let d = last.saturating_duration_since(*at);
                let slot = usize::from(*kind == End::ReleaseCancelled);
                linger[slot] = linger[slot].max(d);
                if d >= BACKGROUND_BOUND {
                    long.push((*at, false, format!("{t} ({kind:?}) still held {d:?} later")));
                }
            }
            None if !guards.contains(t) => {
                orphans += 1;
                let d = last.saturating_duration_since(*first);
                orphan_max = orphan_max.max(d);
                if d >= BACKGROUND_BOUND {
                    // Its call was dropped around the acquisition (the
                    // acquire was in flight).
                    let from = first.checked_sub(BACKGROUND_BOUND).unwrap_or(*first);
                    long.push((from, true, format!("{t} held at least {d:?}")));
                }
            }
            None => {}
        }
    }
    Lingering {
        seen_after_release,
        linger,
        orphans,
        orphan_max,
        long,
    }
}

/// A failed background release excuses one of the `long` tokens whose
/// release started within `BACKGROUND_BOUND` (orphans: twice that) before
/// the failure was logged. Windows in order of their end, each taking the
/// earliest unused failure in it: the most tokens excused. Returns how many
/// were excused, and the others: guards' tokens, and orphans.
fn excuse(
    mut long: Vec<(Instant, bool, String)>,
    failed_background: &[(String, Instant)],
) -> (usize, Vec<String>, Vec<String>) {
    let mut unused: Vec<Instant> = failed_background.iter().map(|(_, at)| *at).collect();
    unused.sort();
    let window_end =
        |from: Instant, orphan: bool| from + BACKGROUND_BOUND * if orphan { 2 } else { 1 };
    long.sort_by_key(|(from, orphan, _)| window_end(*from, *orphan));
    let (mut excused, mut lingered, mut orphans_long) = (0, Vec::new(), Vec::new());
    for (from, orphan, what) in long {
        let to = window_end(from, orphan);
        if let Some(i) = unused.iter().position(|at| *at >= from && *at <= to) {
            unused.remove(i);
            excused += 1;
        } else if orphan {
            orphans_long.push(what);
        } else {
            lingered.push(what);
        }
    }
    (excused, lingered, orphans_long)
}

/// What the load was and what the tasks did.
fn print_load(run: &Run<'_>) {
    let (name, report) = (run.name, &run.report);
    let cancelled: u64 = report.calls.iter().map(|c| c[3]).sum();
    let measured_ok = report.measured.iter().filter(|m| m.acquired).count();
    println!(
        "{name}: {CLIENTS} clients x {TASKS} tasks on one key, leases {LEASE:?}/{LEASE:?}/{LONG_LEASE:?}, load {:?} around {QUIET:?} quiet from {:?}, ended and drained after {:?}{}",
        run.load,
        run.quiet_from - run.started,
        run.drained,
        run.kills.map_or(String::new(), |k| format!(", {k} pub/sub kills"))
            + &run.flushes.map_or(String::new(), |f| format!(
                ", {f} script cache flushes ({} SCRIPT LOADs)",
                run.reloads
            ))
    );
    for (k, label) in CANCEL_KINDS.iter().enumerate() {
        let c = report.calls[k];
        println!(
            "{name}:   cancellable lock calls, {label}: {} acquired, {} timed out, {} failed, {} cancelled",
            c[0], c[1], c[2], c[3]
        );
    }
    println!(
        "{name}:   {cancelled} lock futures cancelled; by polls {}; by age {}",
        hist(&POLL_BUCKETS, &report.cancel_polls),
        hist(&AGE_BUCKETS, &report.cancel_age)
    );
    println!(
        "{name}:   measured calls (wait {WAIT:?}): {} ({measured_ok} acquired)",
        report.measured.len()
    );
    println!(
        "{name}:   {} acquisitions: {} released, {} dropped, {} release() cancelled (by polls {}), {} raced release() completed; {} releases found the lock lost",
        report.acquired,
        report.released,
        report.dropped,
        report.release_cancelled,
        hist(&POLL_BUCKETS, &report.release_cancel_polls),
        report.release_race_completed,
        report.release_lost
    );
    println!("{name}:   ledger {:?}", run.totals);
}

/// What the observer saw, and what the checks read from it.
fn print_findings(run: &Run<'_>, a: &Analysis) {
    let (name, samples, report) = (run.name, &run.samples, &run.report);
    let intervals = samples
        .windows(2)
        .map(|w| w[1].sent - w[0].sent)
        .collect::<Vec<_>>();
    let mean_interval = intervals.iter().sum::<Duration>() / intervals.len().max(1) as u32;
    let max_interval = intervals.iter().max().copied().unwrap_or_default();
    println!(
        "{name}:   observer: {} samples, every {mean_interval:?} on average (longest gap {max_interval:?}); longest free stretch {:?}; max free while a measured call waited {}; reservations taken {}, lapsed {}",
        samples.len(),
        a.free_any,
        a.worst_line.as_deref().unwrap_or("0s"),
        a.reservations.0,
        a.reservations.1
    );
    println!(
        "{name}:   tokens still held after: drop {:?}, cancelled release() {:?}; {} orphan acquisitions of cancelled calls, longest held {:?}; {} tokens seen after release() returned; {} release() calls and {} background releases failed{} ({} lingering tokens excused by them)",
        a.linger[0],
        a.linger[1],
        a.orphans,
        a.orphan_max,
        a.seen_after_release.len(),
        a.release_failed,
        a.failed_background.len(),
        if a.failed_background.is_empty() {
            String::new()
        } else {
            let errors: HashSet<&str> =
                a.failed_background.iter().map(|(e, _)| e.as_str()).collect();
            format!(": {errors:?}")
        },
        a.excused
    );
    println!(
        "{name}:   samples showing a client queued with no lock call of its own for {QUEUE_GRACE:?}: {}; reservations for a client with no lock call for 20ms/100ms/{QUEUE_GRACE:?}: {:?}",
        a.queued_idle_samples, a.reserved_idle
    );
    println!(
        "{name}:   clean {:?} after the load{}",
        run.clean_after,
        if report.errors.is_empty() {
            String::new()
        } else {
            format!(
                "; {} errors, first: {:?}",
                report.errors.len(),
                &report.errors[..report.errors.len().min(5)]
            )
        }
    );
}

/// Every check that failed, described.
fn failures(run: &Run<'_>, a: &Analysis) -> Vec<String> {
    let (totals, report) = (&run.totals, &run.report);
    let mut failures = Vec::new();
    if totals.accepted == 0 || a.measured_ok == 0 {
        failures.push(format!(
            "nothing was exercised: ledger {totals:?}, {} measured calls acquired",
            a.measured_ok
        ));
    }
    if totals.overlaps != 0 {
        failures.push(format!("two holders overlapped: {totals:?}"));
    }
    if totals.stale != 0 {
        failures.push(format!("a stale fencing token was written: {totals:?}"));
    }
    if a.over > 0 {
        failures.push(format!(
            "{} waiting lock calls saw the key free for >= {:?}; worst {}",
            a.over,
            LEASE + SLACK,
            a.worst_line.as_deref().unwrap_or_default()
        ));
    }
    if report.release_lost != 0 {
        failures.push(format!(
            "{} release() calls reported LockLost for a lock held a few ms",
            report.release_lost
        ));
    }
    if !a.seen_after_release.is_empty() {
        failures.push(format!(
            "{} tokens were still the lock after their release() returned: {:?}",
            a.seen_after_release.len(),
            &a.seen_after_release[..a.seen_after_release.len().min(3)]
        ));
    }
    if !a.lingered.is_empty() {
        failures.push(format!(
            "{} dropped guards / cancelled release() calls left the lock held >= {BACKGROUND_BOUND:?}: {:?}",
            a.lingered.len(),
            &a.lingered[..a.lingered.len().min(3)]
        ));
    }
    if !a.orphans_long.is_empty() {
        failures.push(format!(
            "{} acquisitions of cancelled lock calls held the lock >= {BACKGROUND_BOUND:?}: {:?}",
            a.orphans_long.len(),
            &a.orphans_long[..a.orphans_long.len().min(3)]
        ));
    }
    if a.queued_idle_samples > 0 {
        failures.push(format!(
            "{} samples showed a client in the queue with no lock call of its own for {QUEUE_GRACE:?}: {:?}",
            a.queued_idle_samples, a.queued_idle
        ));
    }
    if !run.clean {
        failures.push(format!("left behind under {}: {:?}", run.prefix, run.left));
    }
    failures
}
