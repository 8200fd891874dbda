//! One load-generating process of `relaylock bench` (the hidden `worker`
//! subcommand). It talks to the parent over stdio:
//!
//! * stdout `ready` once connected; stdin `go` starts the workers;
//! * stdout `tick <acquisitions>` four times a second;
//! * stdin `stop` (or EOF) stops them; the report goes to `--out` as JSON and
//!   stdout says `done`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use relaylock::{Error, LockClient};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::bench::bare::BareLock;
use crate::bench::stats::Record;
use crate::bench::strategy::{KeysPerLock, Primitive, Strategy};
use crate::bench::task::{now_ns, Rng, Shared, TaskResult};

#[derive(clap::Args, Debug, Clone)]
pub struct WorkerArgs {
    /// The global `--url` (the bench always passes it).
    #[arg(skip)]
    pub url: String,
    #[arg(long)]
    pub strategy: Strategy,
    #[arg(long, default_value = "mutex")]
    pub primitive: Primitive,
    #[arg(long)]
    pub workers: usize,
    #[arg(long)]
    pub keys: usize,
    #[arg(long)]
    pub hold_us: u64,
    #[arg(long)]
    pub lease_ms: u64,
    #[arg(long)]
    pub prefix: String,
    #[arg(long)]
    pub index: usize,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long)]
    pub prometheus: Option<SocketAddr>,
    #[arg(long, default_value = "1")]
    pub keys_per_lock: KeysPerLock,
    #[arg(long, default_value_t = 0.0)]
    pub single_share: f64,
}

/// What one process reports back.
#[derive(Serialize, Deserialize, Debug, Default)]
pub struct WorkerReport {
    /// Acquisitions per worker task.
    pub counts: Vec<u64>,
    pub records: Vec<Record>,
    /// `relaylock_acquire_attempts_total` as the library counted it.
    pub attempts: u64,
    /// More tasks of this process inside one key's critical section at once
    /// than the primitive allows.
    pub local_violations: u64,
    pub errors: u64,
    pub lost: u64,
    pub first_error: Option<String>,
    pub peak_rss_kib: u64,
    /// This process's CPU time (user + system, every thread) from `go` to
    /// `stop`, in µs.
    #[serde(default)]
    pub cpu_us: u64,
    /// `onebyone:<ms>`: sets released and started over.
    #[serde(default)]
    pub restarts: u64,
}

/// Buckets for the `*_seconds` histograms: 50 us to 30 s.
pub const BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
];

fn install_recorder(listen: Option<SocketAddr>) -> Result<PrometheusHandle, String> {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("seconds".into()), BUCKETS)
        .map_err(|e| e.to_string())?;
    match listen {
        None => builder.install_recorder().map_err(|e| e.to_string()),
        Some(addr) => {
            let (recorder, exporter) = builder
                .with_http_listener(addr)
                .build()
                .map_err(|e| format!("prometheus listener on {addr}: {e}"))?;
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).map_err(|e| e.to_string())?;
            tokio::spawn(exporter);
            Ok(handle)
        }
    }
}

/// Sum of every series of `name` in a Prometheus text rendering.
pub fn counter_total(rendered: &str, name: &str) -> u64 {
    rendered
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// This process's CPU time so far (user + system, every thread), in µs.
fn process_cpu_us() -> u64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else {
        return 0;
    };
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    us(usage.user_time()) + us(usage.system_time())
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

impl WorkerReport {
    /// Fold one task's result in; the first error kept is the first task's
    /// that had one.
    fn add(&mut self, r: TaskResult) {
        self.counts.push(r.count);
        self.records.extend(r.records);
        self.local_violations += r.violations;
        self.errors += r.errors;
        self.lost += r.lost;
        self.restarts += r.restarts;
        if self.first_error.is_none() {
            self.first_error = r.first_error;
        }
    }
}

async fn task(shared: Arc<Shared>, seed: u64, mut stop: watch::Receiver<bool>) -> TaskResult {
    let mut out = TaskResult::default();
    let mut rng = Rng(seed | 1);
    while !*stop.borrow() {
        if shared.keys_per_lock.is_multi() {
            crate::bench::multi::round(&shared, &mut rng, &mut stop, &mut out).await;
            continue;
        }
        let k = (rng.next() % shared.keys.len() as u64) as usize;
        let t_call = now_ns();
        if let Some(bare) = &shared.bare {
            bare_round(&shared, bare, k, t_call, &mut stop, &mut out).await;
            if *stop.borrow() {
                break;
            }
            continue;
        }
        let read = match shared.primitive {
            Primitive::RwLock(share) => (rng.next() % 1_000_000) as f64 / 1e6 < share,
            _ => false,
        };
        let result = tokio::select! {
            biased;
            _ = stop.changed() => break,
            r = take(&shared, k, read) => r,
        };
        let held = match result {
            Ok(h) => h,
            Err(e) => {
                out.error(e);
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let write = held.is_write();
        let (t_acq, t_rel) = if matches!(shared.primitive, Primitive::RwLock(_)) {
            hold_rw(&shared, k, write, &mut out).await
        } else {
            hold(&shared, k, &mut out).await
        };
        let fence = held.fencing_token();
        let k = if write {
            k as u32 | crate::bench::stats::WRITE_BIT
        } else {
            k as u32
        };
        match held.release().await {
            Ok(()) => {}
            Err(Error::LockLost { .. }) => out.lost += 1,
            Err(e) => {
                out.error(e);
            }
        }
        out.acquired(&shared, (k, fence, t_call, t_acq, t_rel));
    }
    out
}

/// A read-write lock's critical section of key `k`: a write inside with
/// anyone, or a read inside with a write, is a violation. `inside` counts
/// readers, `writers` writers.
async fn hold_rw(shared: &Shared, k: usize, write: bool, out: &mut TaskResult) -> (u64, u64) {
    let t_acq = now_ns();
    let (mine, other) = if write {
        (&shared.writers[k], &shared.inside[k])
    } else {
        (&shared.inside[k], &shared.writers[k])
    };
    let before = mine.fetch_add(1, Ordering::SeqCst);
    if other.load(Ordering::SeqCst) > 0 || (write && before > 0) {
        out.violations += 1;
    }
    if !shared.hold.is_zero() {
        tokio::time::sleep(shared.hold).await;
    }
    mine.fetch_sub(1, Ordering::SeqCst);
    (t_acq, now_ns())
}

/// A lock's guard, a semaphore's permit, or a read-write lock's guard.
enum Held {
    Lock(relaylock::LockGuard),
    Permit(relaylock::Permit),
    Read(relaylock::ReadGuard),
    Write(relaylock::WriteGuard),
}

impl Held {
    fn fencing_token(&self) -> u64 {
        match self {
            Held::Lock(g) => g.fencing_token(),
            Held::Permit(p) => p.fencing_token(),
            Held::Read(g) => g.fencing_token(),
            Held::Write(g) => g.fencing_token(),
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Held::Lock(g) => g.release().await,
            Held::Permit(p) => p.release().await,
            Held::Read(g) => g.release().await,
            Held::Write(g) => g.release().await,
        }
    }

    fn is_write(&self) -> bool {
        matches!(self, Held::Write(_))
    }
}

/// Take key `k`'s lock, one permit of its semaphore, or its read-write
/// lock for reading (`read`) or writing.
async fn take(shared: &Shared, k: usize, read: bool) -> Result<Held, Error> {
    match shared.primitive {
        Primitive::RwLock(_) => {
            let rw = shared.client.rw_lock(shared.keys[k].as_str());
            if read {
                rw.read().await.map(Held::Read)
            } else {
                rw.write().await.map(Held::Write)
            }
        }
        Primitive::Mutex => shared.client.lock(&shared.keys[k]).await.map(Held::Lock),
        Primitive::Semaphore(limit) => {
            let sem = shared.client.semaphore(shared.keys[k].as_str(), limit)?;
            sem.acquire().await.map(Held::Permit)
        }
    }
}

/// The critical section of key `k`: enter it (more holders inside than the
/// primitive allows is a violation), hold it, leave it. Returns when it was
/// entered and left.
async fn hold(shared: &Shared, k: usize, out: &mut TaskResult) -> (u64, u64) {
    let t_acq = now_ns();
    if shared.inside[k].fetch_add(1, Ordering::SeqCst) >= u64::from(shared.limit) {
        out.violations += 1;
    }
    if !shared.hold.is_zero() {
        tokio::time::sleep(shared.hold).await;
    }
    shared.inside[k].fetch_sub(1, Ordering::SeqCst);
    (t_acq, now_ns())
}

/// One acquisition of the bare lock on key `k`, recorded like a relaylock
/// one. It issues no fencing token: the record's token is the moment the
/// lock was taken, which orders a key's critical sections the same way.
async fn bare_round(
    shared: &Shared,
    bare: &BareLock,
    k: usize,
    t_call: u64,
    stop: &mut watch::Receiver<bool>,
    out: &mut TaskResult,
) {
    let name = shared.client.redis_key(&shared.keys[k]);
    let token = uuid::Uuid::new_v4().to_string();
    let taken = tokio::select! {
        biased;
        _ = stop.changed() => return,
        r = bare.lock(&name, token) => r,
    };
    let token = match taken {
        Ok(token) => token,
        Err(e) => {
            out.error(e);
            tokio::time::sleep(Duration::from_millis(10)).await;
            return;
        }
    };
    let (t_acq, t_rel) = hold(shared, k, out).await;
    match bare.unlock(&name, &token).await {
        Ok(true) => {}
        Ok(false) => out.lost += 1,
        Err(e) => {
            out.error(e);
        }
    }
    out.acquired(shared, (k as u32, t_acq, t_call, t_acq, t_rel));
}

pub async fn run(args: WorkerArgs) -> Result<(), String> {
    let metrics = install_recorder(args.prometheus)?;
    let shared = Arc::new(connect(&args).await?);

    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    println!("ready");
    match stdin.next_line().await {
        Ok(Some(line)) if line.trim() == "go" => {}
        other => return Err(format!("worker {}: expected go, got {other:?}", args.index)),
    }

    let cpu_at_go = process_cpu_us();
    let (stop_tx, stop_rx) = watch::channel(false);
    let tasks = spawn_tasks(&args, &shared, &stop_rx);
    let ticker = spawn_ticker(Arc::clone(&shared));
    // "stop", or the parent going away, ends the run.
    while let Ok(Some(line)) = stdin.next_line().await {
        if line.trim() == "stop" {
            break;
        }
    }
    let _ = stop_tx.send(true);
    let mut report = WorkerReport {
        cpu_us: process_cpu_us().saturating_sub(cpu_at_go),
        ..WorkerReport::default()
    };
    for t in tasks {
        report.add(t.await.map_err(|e| e.to_string())?);
    }
    ticker.abort();
    report.attempts = attempts(&shared, &metrics);
    report.peak_rss_kib = peak_rss_kib();
    let json = serde_json::to_vec(&report).map_err(|e| e.to_string())?;
    std::fs::write(&args.out, json).map_err(|e| format!("write {}: {e}", args.out.display()))?;
    println!("done");
    Ok(())
}

/// The client every task of this process shares (and, for `bare:<ms>` and
/// `floor:<ms>`, the baseline lock on its connection), with one slot per key.
async fn connect(args: &WorkerArgs) -> Result<Shared, String> {
    let client = LockClient::builder()
        .url(args.url.as_str())
        .prefix(args.prefix.as_str())
        .wait_strategy(args.strategy.wait_strategy())
        .default_lease(Duration::from_millis(args.lease_ms))
        .build()
        .await
        .map_err(|e| format!("worker {}: {e}", args.index))?;
    let bare = match args.strategy {
        Strategy::Bare(every) | Strategy::Floor(every) => Some(BareLock::new(
            client.fred_client().clone(),
            Duration::from_millis(args.lease_ms),
            every,
            matches!(args.strategy, Strategy::Floor(_)),
        )),
        Strategy::Lock(_) | Strategy::OneByOne(_) => None,
    };
    let keys = args.keys.max(1);
    Ok(Shared {
        bare,
        client,
        keys: (0..keys).map(|i| format!("k{i}")).collect(),
        inside: (0..keys).map(|_| AtomicU64::new(0)).collect(),
        writers: (0..keys).map(|_| AtomicU64::new(0)).collect(),
        limit: args.primitive.limit(),
        primitive: args.primitive,
        hold: Duration::from_micros(args.hold_us),
        total: AtomicU64::new(0),
        strategy: args.strategy,
        keys_per_lock: args.keys_per_lock,
        single_share: args.single_share,
    })
}

/// `--workers` tasks, each seeded from this process's index and its own.
fn spawn_tasks(
    args: &WorkerArgs,
    shared: &Arc<Shared>,
    stop: &watch::Receiver<bool>,
) -> Vec<JoinHandle<TaskResult>> {
    (0..args.workers)
        .map(|i| {
            let seed = (args.index as u64) << 32 | i as u64;
            tokio::spawn(task(
                Arc::clone(shared),
                seed.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                stop.clone(),
            ))
        })
        .collect()
}

/// Prints `tick <acquisitions>` four times a second until aborted, so the
/// bench's once-a-second progress is at most a quarter of a second old and
/// has a tick to read from its first report on.
fn spawn_ticker(shared: Arc<Shared>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(250));
        every.tick().await;
        loop {
            every.tick().await;
            println!("tick {}", shared.total.load(Ordering::Relaxed));
        }
    })
}

/// Acquire attempts: the bare lock counts its own; relaylock's are its
/// `relaylock_acquire_attempts_total` counter.
fn attempts(shared: &Shared, metrics: &PrometheusHandle) -> u64 {
    match &shared.bare {
        Some(bare) => bare.attempts.load(Ordering::Relaxed),
        None => counter_total(
            &metrics.render(),
            relaylock::metrics::ACQUIRE_ATTEMPTS_TOTAL,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_total_sums_labelled_series() {
        let text = "# TYPE relaylock_acquire_attempts_total counter\n\
                    relaylock_acquire_attempts_total 7\n\
                    relaylock_acquire_attempts_total{name=\"a\"} 3\n\
                    relaylock_acquire_attempts_total_other 100\n";
        assert_eq!(counter_total(text, "relaylock_acquire_attempts_total"), 10);
    }
}
