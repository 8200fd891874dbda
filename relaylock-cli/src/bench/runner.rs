//! The runner of `relaylock bench`: one run of a strategy spawns the
//! worker processes, releases them at once, reads what Redis did from
//! `INFO commandstats` and `INFO cpu`, probes the PING round trip meanwhile,
//! and reduces the workers' records to one [`Row`].

use std::collections::HashMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::scan::Scanner;
use fred::types::InfoKind;
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::task::JoinHandle;

use crate::bench::args::{BenchArgs, Sweep};
use crate::bench::row::Row;
use crate::bench::stats::{
    handoffs, jain, over_limit, percentile, rw_violations, Handoffs, Record,
};
use crate::bench::strategy::{Primitive, Strategy};
use crate::bench::worker::WorkerReport;

struct ServerStats {
    calls: HashMap<String, u64>,
    /// User and system CPU, seconds.
    cpu_s: f64,
    /// User CPU alone, seconds.
    cpu_user_s: f64,
    /// `used_memory`, bytes.
    memory: f64,
    /// Keys in the database (`DBSIZE`).
    keys: u64,
}

/// The server's command counts and CPU time; in Redis Cluster, summed over
/// every primary.
async fn server_stats(admin: &Client) -> Result<ServerStats, String> {
    if !admin.is_clustered() {
        return node_stats(admin).await;
    }
    let primaries = admin
        .cached_cluster_state()
        .ok_or("no cluster state")?
        .unique_primary_nodes();
    let mut total = ServerStats {
        calls: HashMap::new(),
        cpu_s: 0.0,
        cpu_user_s: 0.0,
        memory: 0.0,
        keys: 0,
    };
    for node in primaries {
        let s = node_stats(&admin.with_cluster_node(node)).await?;
        for (cmd, n) in s.calls {
            *total.calls.entry(cmd).or_default() += n;
        }
        total.cpu_s += s.cpu_s;
        total.cpu_user_s += s.cpu_user_s;
        total.memory += s.memory;
        total.keys += s.keys;
    }
    Ok(total)
}

async fn node_stats<C: ServerInterface>(admin: &C) -> Result<ServerStats, String> {
    let commands: String = admin
        .info(Some(InfoKind::CommandStats))
        .await
        .map_err(|e| e.to_string())?;
    let cpu: String = admin
        .info(Some(InfoKind::Cpu))
        .await
        .map_err(|e| e.to_string())?;
    let memory: String = admin
        .info(Some(InfoKind::Memory))
        .await
        .map_err(|e| e.to_string())?;
    let keys: u64 = admin.dbsize().await.map_err(|e| e.to_string())?;
    let mut calls = HashMap::new();
    for line in commands.lines() {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|r| r.split_once(':'))
        else {
            continue;
        };
        if let Some(n) = fields.split(',').find_map(|f| f.strip_prefix("calls=")) {
            calls.insert(name.to_owned(), n.parse().unwrap_or(0));
        }
    }
    let field = |info: &str, name: &str| -> f64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    Ok(ServerStats {
        calls,
        cpu_s: field(&cpu, "used_cpu_sys") + field(&cpu, "used_cpu_user"),
        cpu_user_s: field(&cpu, "used_cpu_user"),
        memory: field(&memory, "used_memory"),
        keys,
    })
}

fn delta(before: &ServerStats, after: &ServerStats, pick: impl Fn(&str) -> bool) -> u64 {
    after
        .calls
        .iter()
        .filter(|(k, _)| pick(k))
        .map(|(k, v)| v.saturating_sub(before.calls.get(k).copied().unwrap_or(0)))
        .sum()
}

/// Commands a lock client of `strategy` sends itself (scripts, transactions
/// and pub/sub management; and for the bare lock of one key its `SET NX`,
/// as its release script runs no SET: a `multi` bare lock sets its keys
/// inside its script), as opposed to commands run inside scripts
/// or queued in a `MULTI` (whose `EXEC` is the request).
fn is_request(strategy: Strategy, multi: bool, cmd: &str) -> bool {
    matches!(
        cmd,
        "evalsha"
            | "eval"
            | "exec"
            | "subscribe"
            | "unsubscribe"
            | "ssubscribe"
            | "sunsubscribe"
            | "ping"
    ) || cmd.starts_with("script")
        || (matches!(strategy, Strategy::Bare(_)) && !multi && cmd == "set")
}

pub(super) struct Scenario {
    strategy: Strategy,
    workers: usize,
    keys: usize,
    processes: usize,
}

pub(super) async fn admin_client(url: &str) -> Result<Client, String> {
    let client = Builder::from_config(Config::from_url(url).map_err(|e| e.to_string())?)
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    tokio::time::timeout(Duration::from_secs(5), client.init())
        .await
        .map_err(|_| format!("could not connect to {url} within 5 s"))?
        .map_err(|e| e.to_string())?;
    Ok(client)
}

impl Scenario {
    /// How the progress line names the run.
    fn label(&self) -> String {
        format!(
            "{} workers={} processes={}",
            self.strategy, self.workers, self.processes
        )
    }
}

/// Run one strategy at one worker count.
pub(super) async fn run_one(
    args: &BenchArgs,
    url: &str,
    admin: &Client,
    sc: &Scenario,
    run: usize,
) -> Result<Row, String> {
    let space = RunSpace::create(run)?;
    let workers = Workers::start(args, url, sc, &space).await?;
    let measured = drive(args, url, admin, &sc.label(), workers).await?;
    let reports = space.read_reports(sc.processes)?;
    space.remove(admin).await;
    Ok(summarize(args, sc, measured, reports))
}

/// One run's namespace: the prefix its workers' names take in Redis, and
/// the directory they write their reports to.
struct RunSpace {
    prefix: String,
    dir: PathBuf,
}

impl RunSpace {
    fn create(run: usize) -> Result<Self, String> {
        let prefix = format!("relaylock-bench-{}-{run}", std::process::id());
        let dir = std::env::temp_dir().join(&prefix);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        Ok(RunSpace { prefix, dir })
    }

    /// Where worker process `i` writes its report.
    fn report_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("worker-{i}.json"))
    }

    /// The reports of worker processes `0..processes`, in that order.
    fn read_reports(&self, processes: usize) -> Result<Vec<WorkerReport>, String> {
        let mut reports = Vec::new();
        for i in 0..processes {
            let path = self.report_path(i);
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            reports
                .push(serde_json::from_slice::<WorkerReport>(&bytes).map_err(|e| e.to_string())?);
        }
        Ok(reports)
    }

    /// Remove the reports' directory and every name under the prefix.
    async fn remove(self, admin: &Client) {
        let _ = std::fs::remove_dir_all(&self.dir);
        delete_prefix(admin, &self.prefix).await;
    }
}

/// The command line of worker process `i`.
fn worker_command(
    exe: &Path,
    args: &BenchArgs,
    url: &str,
    sc: &Scenario,
    space: &RunSpace,
    i: usize,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("worker")
        .args(["--url", url, "--strategy", &sc.strategy.to_string()])
        .args(["--primitive", &args.primitive.to_string()])
        .args([
            "--workers",
            &sc.workers.to_string(),
            "--keys",
            &sc.keys.to_string(),
        ])
        .args([
            "--hold-us",
            &((args.hold_ms * 1000.0).round() as u64).to_string(),
        ])
        .args(["--lease-ms", &args.lease.as_millis().to_string()])
        .args(["--keys-per-lock", &args.keys_per_lock.to_string()])
        .args(["--single-share", &args.single_share.to_string()])
        .args(["--prefix", &space.prefix, "--index", &i.to_string()])
        .arg("--out")
        .arg(space.report_path(i))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    if let Some(addr) = args.prometheus {
        let addr = SocketAddr::new(addr.ip(), addr.port() + i as u16);
        cmd.args(["--prometheus", &addr.to_string()]);
    }
    cmd
}

/// The worker processes of one run, each connected; dropping this kills
/// those still running.
struct Workers {
    children: Vec<Child>,
    stdins: Vec<ChildStdin>,
    /// Each process's latest `tick`: its acquisitions so far.
    ticks: Arc<Vec<AtomicU64>>,
    /// One per process, reading its stdout: true once it said `done`.
    readers: Vec<JoinHandle<bool>>,
}

impl Workers {
    /// Spawn the processes, wait for every one to say `ready`, then forward
    /// their ticks.
    async fn start(
        args: &BenchArgs,
        url: &str,
        sc: &Scenario,
        space: &RunSpace,
    ) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut children = Vec::new();
        for i in 0..sc.processes {
            let mut cmd = worker_command(&exe, args, url, sc, space, i);
            children.push(cmd.spawn().map_err(|e| format!("spawn worker: {e}"))?);
        }
        let ticks: Arc<Vec<AtomicU64>> =
            Arc::new((0..sc.processes).map(|_| AtomicU64::new(0)).collect());
        let mut stdins = Vec::new();
        let mut readers = Vec::new();
        for (i, child) in children.iter_mut().enumerate() {
            stdins.push(child.stdin.take().expect("piped stdin"));
            let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
            match tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await {
                Ok(Ok(Some(l))) if l == "ready" => {}
                other => return Err(format!("worker {i} did not start: {other:?}")),
            }
            let ticks = Arc::clone(&ticks);
            readers.push(tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(n) = line.strip_prefix("tick ") {
                        ticks[i].store(n.parse().unwrap_or(0), Ordering::Relaxed);
                    } else if line == "done" {
                        return true;
                    }
                }
                false
            }));
        }
        Ok(Workers {
            children,
            stdins,
            ticks,
            readers,
        })
    }

    /// Release every process's tasks at once.
    async fn go(&mut self) -> Result<(), String> {
        for s in &mut self.stdins {
            s.write_all(b"go\n").await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Tell every process to stop; one that has gone already is no error.
    async fn stop(&mut self) {
        for s in &mut self.stdins {
            let _ = s.write_all(b"stop\n").await;
        }
    }

    /// Wait until every process has said `done`: its report is written.
    async fn reported(&mut self) -> Result<(), String> {
        for r in std::mem::take(&mut self.readers) {
            if !r.await.unwrap_or(false) {
                return Err("a worker ended without a report".into());
            }
        }
        Ok(())
    }

    /// Wait for every process to exit.
    async fn exited(self) {
        for mut c in self.children {
            let _ = c.wait().await;
        }
    }
}

/// What the parent measured over one run.
struct Measured {
    /// Seconds from `go` to `stop`.
    elapsed: f64,
    before: ServerStats,
    after: ServerStats,
    /// PING round trips during the run, ms, in the order they were taken.
    rtts: Vec<f64>,
}

/// Release the workers for `--duration` with the server's counters read on
/// either side, the PING round trip probed meanwhile and the progress
/// shown; then stop them and wait for their reports.
async fn drive(
    args: &BenchArgs,
    url: &str,
    admin: &Client,
    label: &str,
    mut workers: Workers,
) -> Result<Measured, String> {
    // The RTT floor: PING through fred on its own connection, during the run.
    let pinger = admin_client(url).await?;
    let before = server_stats(admin).await?;
    workers.go().await?;
    let start = Instant::now();
    let stop_at = start + args.duration;
    let rtt_task = probe_rtt(pinger, stop_at, !args.no_rtt);
    show_progress(label, start, args.duration, &workers.ticks).await;
    workers.stop().await;
    let elapsed = start.elapsed().as_secs_f64();
    workers.reported().await?;
    let after = server_stats(admin).await?;
    let rtts = rtt_task.await.map_err(|e| e.to_string())?;
    workers.exited().await;
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
    Ok(Measured {
        elapsed,
        before,
        after,
        rtts,
    })
}

/// PING through `pinger` every 5 ms until `stop_at` (not at all unless
/// `probe`), then quit it: the round trips, in ms.
fn probe_rtt(pinger: Client, stop_at: Instant, probe: bool) -> JoinHandle<Vec<f64>> {
    tokio::spawn(async move {
        let mut rtts = Vec::new();
        while probe && Instant::now() < stop_at {
            let t = Instant::now();
            if pinger.ping::<String>(None).await.is_ok() {
                rtts.push(t.elapsed().as_secs_f64() * 1e3);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = pinger.quit().await;
        rtts
    })
}

/// Once a second until `duration` after `start`, the acquisitions so far.
/// On a terminal only, in place: a log or a pipe gets no progress.
async fn show_progress(label: &str, start: Instant, duration: Duration, ticks: &[AtomicU64]) {
    let stop_at = start + duration;
    let mut next_report = start + Duration::from_secs(1);
    while Instant::now() < stop_at {
        tokio::time::sleep_until(next_report.min(stop_at).into()).await;
        let n: u64 = ticks.iter().map(|t| t.load(Ordering::Relaxed)).sum();
        let secs = start.elapsed().as_secs_f64();
        let line = format!(
            "[{label}] {secs:>4.1}/{:.0} s  {n} acquisitions",
            duration.as_secs_f64()
        );
        if std::io::stderr().is_terminal() {
            eprint!("\r{line}   ");
        }
        next_report += Duration::from_secs(1);
    }
}

/// What Redis did for the lock clients in one run: the admin's INFO calls
/// and the pinger's PINGs are not lock traffic and are left out.
struct RedisCost {
    /// Requests the clients sent (see [`is_request`]).
    requests: u64,
    /// Every command Redis ran, scripts' inner ones included.
    commands: u64,
    /// Redis CPU time, µs (its PINGs' and INFO calls' share included).
    cpu_us: f64,
    /// Of which user CPU, µs.
    user_us: f64,
    /// Keys the run left in Redis, and the memory they hold (bytes, from
    /// `used_memory`).
    retained: (u64, f64),
}

impl RedisCost {
    fn of(strategy: Strategy, multi: bool, m: &Measured) -> Self {
        let pings = m.rtts.len() as u64;
        RedisCost {
            requests: delta(&m.before, &m.after, |c| is_request(strategy, multi, c))
                .saturating_sub(pings),
            commands: delta(&m.before, &m.after, |c| c != "info").saturating_sub(pings),
            cpu_us: (m.after.cpu_s - m.before.cpu_s) * 1e6,
            user_us: (m.after.cpu_user_s - m.before.cpu_user_s) * 1e6,
            retained: (
                m.after.keys.saturating_sub(m.before.keys),
                m.after.memory - m.before.memory,
            ),
        }
    }
}

/// The workers' critical sections reduced: waits, holds and hand-overs in
/// ms, each ascending, and the overlaps among them that broke the primitive.
struct Timings {
    waits: Vec<f64>,
    holds: Vec<f64>,
    handoffs: Vec<f64>,
    violations: u64,
}

impl Timings {
    fn of(primitive: Primitive, records: &mut [Record]) -> Self {
        let mut waits: Vec<f64> = records.iter().map(|r| (r.3 - r.2) as f64 / 1e6).collect();
        waits.sort_by(f64::total_cmp);
        let mut holds: Vec<f64> = records.iter().map(|r| (r.4 - r.3) as f64 / 1e6).collect();
        holds.sort_by(f64::total_cmp);
        // A lock's holders of one key follow each other (hand-over gaps); a
        // semaphore's overlap up to the limit, so only the excess is counted.
        let h = match primitive {
            Primitive::Mutex => handoffs(records),
            Primitive::Semaphore(limit) => Handoffs {
                handoff_ms: Vec::new(),
                violations: over_limit(records, limit),
            },
            Primitive::RwLock(_) => Handoffs {
                handoff_ms: Vec::new(),
                violations: rw_violations(records),
            },
        };
        let mut handoffs = h.handoff_ms;
        handoffs.sort_by(f64::total_cmp);
        Timings {
            waits,
            holds,
            handoffs,
            violations: h.violations,
        }
    }
}

/// One run's row, from the workers' reports and what the parent measured.
fn summarize(
    args: &BenchArgs,
    sc: &Scenario,
    measured: Measured,
    mut reports: Vec<WorkerReport>,
) -> Row {
    let mut records: Vec<Record> = reports
        .iter_mut()
        .flat_map(|r| std::mem::take(&mut r.records))
        .collect();
    let counts: Vec<u64> = reports
        .iter()
        .flat_map(|r| r.counts.iter().copied())
        .collect();
    let acquisitions = records.len() as u64;
    let per_acq = |x: f64| {
        if acquisitions == 0 {
            f64::NAN
        } else {
            x / acquisitions as f64
        }
    };
    let t = Timings::of(args.primitive, &mut records);
    let redis = RedisCost::of(sc.strategy, args.keys_per_lock.is_multi(), &measured);
    let mut rtts = measured.rtts;
    rtts.sort_by(f64::total_cmp);
    let rtt_p50 = percentile(&rtts, 50.0).unwrap_or(f64::NAN);
    let handoff_p50 = percentile(&t.handoffs, 50.0);
    let elapsed = measured.elapsed;
    Row {
        strategy: match (args.primitive, args.keys_per_lock) {
            (Primitive::Mutex, kpl) if kpl.is_multi() => format!("{} x{kpl}", sc.strategy),
            (Primitive::Mutex, _) => sc.strategy.to_string(),
            (p, _) => format!("{} {p}", sc.strategy),
        },
        workers: sc.workers,
        processes: sc.processes,
        keys: sc.keys,
        hold_ms: args.hold_ms,
        duration_s: elapsed,
        acquisitions,
        acq_per_s: acquisitions as f64 / elapsed,
        wait_p50_ms: percentile(&t.waits, 50.0).unwrap_or(f64::NAN),
        wait_p99_ms: percentile(&t.waits, 99.0).unwrap_or(f64::NAN),
        wait_max_ms: percentile(&t.waits, 100.0).unwrap_or(f64::NAN),
        handoff_p50_ms: handoff_p50,
        handoff_p99_ms: percentile(&t.handoffs, 99.0),
        hold_p50_ms: percentile(&t.holds, 50.0).unwrap_or(f64::NAN),
        redis_requests_per_acq: per_acq(redis.requests as f64),
        redis_cmds_per_acq: per_acq(redis.commands as f64),
        redis_cpu_us_per_acq: per_acq(redis.cpu_us),
        redis_user_us_per_acq: Some(per_acq(redis.user_us)),
        retained_keys: Some(redis.retained.0),
        retained_bytes_per_key: (redis.retained.0 > 0)
            .then(|| redis.retained.1 / redis.retained.0 as f64),
        client_cpu_us_per_acq: Some(per_acq(reports.iter().map(|r| r.cpu_us).sum::<u64>() as f64)),
        attempts_per_acq: per_acq(reports.iter().map(|r| r.attempts).sum::<u64>() as f64),
        jain_fairness: jain(&counts),
        violations: t.violations + reports.iter().map(|r| r.local_violations).sum::<u64>(),
        rtt_p50_ms: rtt_p50,
        handoff_p50_rtts: handoff_p50.map(|h| h / rtt_p50),
        peak_rss_mib: reports.iter().map(|r| r.peak_rss_kib).max().unwrap_or(0) as f64 / 1024.0,
        errors: reports.iter().map(|r| r.errors).sum(),
        restarts: matches!(sc.strategy, Strategy::OneByOne(_))
            .then(|| reports.iter().map(|r| r.restarts).sum()),
        lost: reports.iter().map(|r| r.lost).sum(),
        first_error: reports.iter().find_map(|r| r.first_error.clone()),
        redis_benchmark_evalsha_per_s: None,
        pairs_vs_half_evalsha: None,
    }
}

/// Delete every name under `prefix` (the bench's own namespace).
async fn delete_prefix(admin: &Client, prefix: &str) {
    if admin.is_clustered() {
        // Keys of different slots cannot go in one DEL: one by one.
        let mut scan = admin.scan_cluster(format!("{prefix}:*"), Some(1000), None);
        while let Some(Ok(mut page)) = scan.next().await {
            for key in page.take_results().unwrap_or_default() {
                let _: Result<i64, _> = admin.del(key).await;
            }
        }
        return;
    }
    let mut scan = admin.scan(format!("{prefix}:*"), Some(1000), None);
    while let Some(Ok(mut page)) = scan.next().await {
        if let Some(keys) = page.take_results() {
            if !keys.is_empty() {
                let _: Result<i64, _> = admin.del(keys).await;
            }
        }
    }
}

/// `redis-benchmark`'s EVALSHA rate for a script returning 1 (50 clients).
async fn redis_benchmark(admin: &Client, host: &str, port: u16) -> Result<f64, String> {
    let sha: String = admin
        .script_load("return 1")
        .await
        .map_err(|e| e.to_string())?;
    let out = tokio::process::Command::new("redis-benchmark")
        .args(["-h", host, "-p", &port.to_string(), "-c", "50", "-n", "300000", "-q"])
        .args(["evalsha", &sha, "0"])
        .output()
        .await
        .map_err(|e| format!("redis-benchmark: {e} (it comes with redis-server: apt-get install -y redis-server)"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "evalsha ...: 123456.79 requests per second, p50=0.191 msec"
    text.rsplit(": ")
        .find_map(|part| part.split_whitespace().next()?.parse::<f64>().ok())
        .ok_or_else(|| format!("unexpected redis-benchmark output: {text}"))
}

fn host_port(url: &str) -> Option<(String, u16)> {
    let rest = url.split_once("://")?.1;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let hostport = rest.split(['/', '?']).next()?;
    let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "6379"));
    Some((host.to_owned(), port.parse().ok()?))
}

/// Every run, in order: each strategy at each point of the sweep (or at
/// the one point the flags give).
pub(super) fn scenarios(args: &BenchArgs) -> Vec<Scenario> {
    let (w, k, p) = (args.workers, args.keys, args.processes);
    let at = |workers: usize, keys: usize, processes: usize| {
        args.strategies.iter().map(move |&strategy| Scenario {
            strategy,
            workers,
            keys,
            processes,
        })
    };
    match &args.sweep {
        None => at(w, k, p).collect(),
        Some(Sweep::Workers(ws)) => ws.iter().flat_map(|&w| at(w, k, p)).collect(),
        Some(Sweep::Keys(ks)) => ks.iter().flat_map(|&k| at(w, k, p)).collect(),
        Some(Sweep::Processes(ps)) => ps.iter().flat_map(|&p| at(w, k, p)).collect(),
    }
}

/// `--redis-benchmark`: measure the server's EVALSHA rate and set the row's
/// lock+release pairs against half of it. One server only, not a cluster.
pub(super) async fn compare_with_redis_benchmark(
    url: &str,
    admin: &Client,
    row: &mut Row,
) -> Result<(), String> {
    if admin.is_clustered() {
        return Err(
            "--redis-benchmark measures one server; it is not supported with a cluster URL".into(),
        );
    }
    let (host, port) = host_port(url).ok_or("cannot read host and port from the URL")?;
    let rate = redis_benchmark(admin, &host, port).await?;
    row.redis_benchmark_evalsha_per_s = Some(rate);
    row.pairs_vs_half_evalsha = Some(row.acq_per_s / (rate / 2.0));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port() {
        assert_eq!(
            host_port("redis://127.0.0.1:7000"),
            Some(("127.0.0.1".into(), 7000))
        );
        assert_eq!(host_port("redis://u:p@h:1/0"), Some(("h".into(), 1)));
        assert_eq!(host_port("redis://h"), Some(("h".into(), 6379)));
    }
}
