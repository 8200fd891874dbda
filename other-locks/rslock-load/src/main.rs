//! rslock under contention: `--workers` tokio tasks in one process take one
//! key in a loop (acquire, hold `--hold-ms`, release) for `--duration-s`, and
//! the program prints one JSON line (same fields as the other load programs
//! of this folder, see ../README.md).
//!
//! Waiting is rslock's own: `LockManager::acquire` loops over `lock`, which
//! tries `SET NX PX` up to `retry_count` (default 3) times with a random
//! sleep of 0..`retry_delay` (default 200 ms) between tries; the defaults are
//! left as they are.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rslock::LockManager;

struct Args {
    url: String,
    workers: usize,
    hold: Duration,
    duration: Duration,
    lease: Duration,
}

fn args() -> Args {
    let mut a = Args {
        url: "redis://127.0.0.1:6379".into(),
        workers: 256,
        hold: Duration::from_millis(1),
        duration: Duration::from_secs(6),
        lease: Duration::from_secs(10),
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let v = pair.get(1).map(String::as_str).unwrap_or("");
        let num = || v.parse::<f64>().expect("a number");
        match pair[0].as_str() {
            "--url" => a.url = v.into(),
            "--workers" => a.workers = num() as usize,
            "--hold-ms" => a.hold = Duration::from_secs_f64(num() / 1e3),
            "--duration-s" => a.duration = Duration::from_secs_f64(num()),
            "--lease-s" => a.lease = Duration::from_secs_f64(num()),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// What the workers share; read by main at the end of the timed phase.
struct Shared {
    counts: Vec<AtomicU64>,
    waits_ms: Mutex<Vec<f64>>,
    holds_ms: Mutex<Vec<f64>>,
    /// Workers inside the critical section: more than one is a violation.
    inside: AtomicU64,
    violations: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

async fn worker(i: usize, lm: LockManager, key: String, a: Arc<Args>, deadline: Instant, s: Arc<Shared>) {
    while Instant::now() < deadline {
        let t_call = Instant::now();
        let guard = match lm.acquire(key.as_str(), a.lease).await {
            Ok(g) => g,
            Err(e) => {
                s.errors.fetch_add(1, Ordering::Relaxed);
                s.first_error.lock().unwrap().get_or_insert_with(|| e.to_string());
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let t_acq = Instant::now();
        if s.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            s.violations.fetch_add(1, Ordering::Relaxed);
        }
        // Only acquisitions made within the timed phase count.
        if t_acq <= deadline {
            s.counts[i].fetch_add(1, Ordering::Relaxed);
            s.waits_ms.lock().unwrap().push((t_acq - t_call).as_secs_f64() * 1e3);
        }
        tokio::time::sleep(a.hold).await;
        s.inside.fetch_sub(1, Ordering::SeqCst);
        if t_acq <= deadline {
            s.holds_ms.lock().unwrap().push(t_acq.elapsed().as_secs_f64() * 1e3);
        }
        guard.release().await;
    }
}

/// `calls=` of every `cmdstat_*` line of INFO commandstats.
fn command_calls(info: &str) -> HashMap<String, u64> {
    info.lines()
        .filter_map(|l| {
            let (name, fields) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let n = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_owned(), n.parse().ok()?))
        })
        .collect()
}

fn info_field(info: &str, name: &str) -> f64 {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Nearest-rank percentile of an ascending slice (as relaylock-cli's bench/stats.rs).
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn jain(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64).powi(2)).sum();
    if squares == 0.0 {
        0.0
    } else {
        sum * sum / (counts.len() as f64 * squares)
    }
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

#[tokio::main]
async fn main() -> redis::RedisResult<()> {
    let a = Arc::new(args());
    let key = format!("rslock-load-{}", std::process::id());
    let lm = LockManager::new(vec![a.url.as_str()]);
    let mut admin = redis::Client::open(a.url.as_str())?
        .get_multiplexed_async_connection()
        .await?;

    // Warm-up outside the timed phase: connect and load the unlock script.
    lm.acquire(key.as_str(), a.lease).await.expect("warm-up lock").release().await;

    let s = Arc::new(Shared {
        counts: (0..a.workers).map(|_| AtomicU64::new(0)).collect(),
        waits_ms: Mutex::new(Vec::with_capacity(1 << 16)),
        holds_ms: Mutex::new(Vec::with_capacity(1 << 16)),
        inside: AtomicU64::new(0),
        violations: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        first_error: Mutex::new(None),
    });
    let cpu0: String = redis::cmd("INFO").arg("cpu").query_async(&mut admin).await?;
    let () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut admin).await?;
    let start = Instant::now();
    let deadline = start + a.duration;
    for i in 0..a.workers {
        tokio::spawn(worker(i, lm.clone(), key.clone(), Arc::clone(&a), deadline, Arc::clone(&s)));
    }
    tokio::time::sleep_until(deadline.into()).await;
    let commandstats: String = redis::cmd("INFO").arg("commandstats").query_async(&mut admin).await?;
    let cpu1: String = redis::cmd("INFO").arg("cpu").query_async(&mut admin).await?;
    let elapsed = start.elapsed().as_secs_f64();

    let calls: HashMap<String, u64> = command_calls(&commandstats)
        .into_iter()
        .filter(|(c, _)| !c.starts_with("info") && !c.starts_with("config"))
        .collect();
    // rslock sends SET NX and EVALSHA (EVAL / SCRIPT LOAD on NOSCRIPT) itself;
    // GET and DEL only run inside its unlock script.
    let requests: u64 = calls
        .iter()
        .filter(|(c, _)| matches!(c.as_str(), "set" | "evalsha" | "eval") || c.starts_with("script"))
        .map(|(_, n)| n)
        .sum();
    let commands: u64 = calls.values().sum();
    let cpu = |i: &str| info_field(i, "used_cpu_user") + info_field(i, "used_cpu_sys");
    let cpu_us = (cpu(&cpu1) - cpu(&cpu0)) * 1e6;

    let counts: Vec<u64> = s.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let mut waits = s.waits_ms.lock().unwrap().clone();
    waits.sort_by(f64::total_cmp);
    let mut holds = s.holds_ms.lock().unwrap().clone();
    holds.sort_by(f64::total_cmp);
    let acq = waits.len() as u64;
    let per_acq = |x: f64| if acq == 0 { f64::NAN } else { x / acq as f64 };
    let line = serde_json::json!({
        // The version pinned in Cargo.toml.
        "lock": "rslock 0.10.0 (Rust, tokio)",
        "strategy": "poll: SET NX, retry_count 3, sleep rand(0..200 ms) (defaults)",
        "workers": a.workers,
        "processes": 1,
        "keys": 1,
        "hold_ms": a.hold.as_secs_f64() * 1e3,
        "lease_s": a.lease.as_secs_f64(),
        "duration_s": elapsed,
        "acquisitions": acq,
        "acq_per_s": acq as f64 / elapsed,
        "wait_p50_ms": percentile(&waits, 50.0),
        "wait_p99_ms": percentile(&waits, 99.0),
        "wait_max_ms": percentile(&waits, 100.0),
        "hold_p50_ms": percentile(&holds, 50.0),
        "redis_requests_per_acq": per_acq(requests as f64),
        "redis_cmds_per_acq": per_acq(commands as f64),
        "redis_cpu_us_per_acq": per_acq(cpu_us),
        "jain_fairness": jain(&counts),
        "workers_with_acq": counts.iter().filter(|&&c| c > 0).count(),
        "violations": s.violations.load(Ordering::Relaxed),
        "errors": s.errors.load(Ordering::Relaxed),
        "first_error": s.first_error.lock().unwrap().clone(),
        "peak_rss_mib": peak_rss_mib(),
        "redis_calls": calls,
    });
    println!("{line}");
    // Workers still waiting are abandoned; the key expires with its lease.
    let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&key).query_async(&mut admin).await;
    std::process::exit(0);
}
