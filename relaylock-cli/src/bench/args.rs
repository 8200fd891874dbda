//! The load test's command lines: `relaylock bench`'s flags and sweeps,
//! `relaylock report`'s, and the legend of the table both print.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::bench::strategy::{KeysPerLock, Primitive, Strategy};
use crate::parse::parse_duration;

/// What each column of the bench's table means: `relaylock bench --help`
/// and `relaylock report --help` print it.
pub const LEGEND: &str = "\
Columns (the default table; --wide adds the ones marked +):
  strategy      pubsub: relaylock; poll:<ms>: relaylock polling every <ms>;
                bare:<ms>: SET NX PX retried every <ms>, no fencing, no queue;
                floor:<ms>: the cheapest fenced lock, retried every <ms>;
                onebyone:<ms>: (--keys-per-lock) single locks one by one,
                each waiting <ms>, all released and retried on a timeout;
                `xN` after it: N keys per acquisition (figures per key)
  workers       lock-taking tasks per process       procs  worker processes
  acq/s         acquisitions per second, all processes together
  wait_p50_ms   median time from asking for the lock to holding it
  wait_p99_ms   99th percentile of it; marked * when near the run's length
                (waits were cut by the end of the run: run longer)
  redis_cmd/acq Redis commands per acquisition (INFO commandstats; scripts'
                inner commands included)
  redis_us/acq  Redis CPU per acquisition, microseconds (INFO cpu)
  fairness      Jain's index of acquisitions per worker: 1 is perfectly fair
  violations    times two holders were inside at once (must be 0)
 +acq           acquisitions in the run
 +handoff50/99 ms from a release to the next holder (p50, p99)
 +req/acq       requests (script calls, transactions, SET, ...) Redis ran per
                acquisition
 +user_us       Redis user CPU per acquisition, microseconds (INFO cpu)
 +acq/cpu_s     acquisitions one Redis core serves per second of CPU
 +cli_us        client CPU per acquisition, microseconds (worker processes)
 +att/acq       acquire attempts per acquisition (1.0: no wasted try)
 +rtt50         median PING round trip while the run went on, ms
 +rss_MiB       peak resident memory of a worker process
 +left          keys the run left in Redis (DBSIZE after minus before: records
                and tombstones kept for their retention, client records)
 +B/left        Redis memory per key left (used_memory after minus before)
 +restarts      (onebyone) sets released and started over after a timeout";

#[derive(clap::Args, Debug, Clone)]
#[command(after_help = LEGEND)]
pub struct BenchArgs {
    /// Every column (see below), not the default ten.
    #[arg(long)]
    pub wide: bool,
    /// `pubsub`, `poll:<ms>`, `bare:<ms>` or `floor:<ms>`; repeat to compare
    /// strategies side by side.
    #[arg(long = "strategy", default_values = ["pubsub", "poll:10"])]
    pub strategies: Vec<Strategy>,
    /// What the workers take per key: `mutex`, `semaphore:<limit>` (one
    /// permit per acquisition; violations then count more holders inside
    /// than the limit), or `rwlock:<read share>` (each acquisition a read
    /// with that probability, else a write; violations count a write inside
    /// with anyone, or a read with a write).
    #[arg(long, default_value = "mutex")]
    pub primitive: Primitive,
    /// Lock-taking tasks per process.
    #[arg(long, default_value_t = 64)]
    pub workers: usize,
    /// Worker processes, each with its own LockClient.
    #[arg(long, default_value_t = 1)]
    pub processes: usize,
    /// Keys the workers pick from at random.
    #[arg(long, default_value_t = 1)]
    pub keys: usize,
    /// Keys each acquisition takes together: `N`, or `A-B` (a count drawn
    /// in the range each time), distinct keys drawn at random and named in
    /// random order. Above 1, `pubsub` and `poll:<ms>` take one multi-key
    /// lock, `onebyone:<ms>` single locks one by one (Redisson's way), and
    /// `bare:<ms>` sets all its keys or none in one script, polling. Every
    /// per-acquisition figure is then per key acquired.
    #[arg(long, default_value = "1")]
    pub keys_per_lock: KeysPerLock,
    /// With `--keys-per-lock`: the share of acquisitions (0 to 1) that take
    /// one key with a single-key lock instead, on the same keys.
    #[arg(long, default_value_t = 0.0)]
    pub single_share: f64,
    /// How long each critical section holds the lock, in ms (0: release at once).
    #[arg(long = "hold-ms", default_value_t = 1.0)]
    pub hold_ms: f64,
    /// How long each strategy runs (e.g. 10s, 500ms).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// The lease of every lock.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub lease: Duration,
    /// The global `--url`: use that Redis instead of starting one. Only
    /// names under a `relaylock-bench-<pid>` prefix are touched (and
    /// deleted at the end); other clients' traffic counts in the
    /// per-acquisition Redis figures. (`RELAYLOCK_URL` is not read here.)
    #[arg(skip)]
    pub url: Option<String>,
    /// One JSON object per strategy run on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Run the scenario for each value: `workers=8,64,256,1024` (tasks per
    /// process) or `keys=1,16,256,10000` (keys the workers pick from).
    #[arg(long, value_parser = parse_sweep)]
    pub sweep: Option<Sweep>,
    /// Write an SVG plot of the sweep here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Expose the library's metrics in Prometheus format while it runs
    /// (worker process i listens on this port + i).
    #[arg(long)]
    pub prometheus: Option<SocketAddr>,
    /// Also measure `redis-benchmark`'s EVALSHA rate on the same server and
    /// report lock+release pairs per second against half of it.
    #[arg(long)]
    pub redis_benchmark: bool,
    /// Do not measure the PING round trip. Its PINGs (one every 5 ms) cost
    /// Redis CPU that the per-acquisition CPU figure cannot leave out; use
    /// this when that figure is compared with a load that sends no PINGs.
    /// The rtt columns are then empty.
    #[arg(long)]
    pub no_rtt: bool,
}

/// What a sweep varies, and over which values.
#[derive(Clone, Debug, PartialEq)]
pub enum Sweep {
    /// Tasks per process.
    Workers(Vec<usize>),
    /// Keys the workers pick from.
    Keys(Vec<usize>),
    /// Worker processes, each with its own client.
    Processes(Vec<usize>),
}

fn parse_sweep(s: &str) -> Result<Sweep, String> {
    let (kind, values): (fn(Vec<usize>) -> Sweep, _) = if let Some(v) = s.strip_prefix("workers=") {
        (Sweep::Workers, v)
    } else if let Some(v) = s.strip_prefix("keys=") {
        (Sweep::Keys, v)
    } else if let Some(v) = s.strip_prefix("processes=") {
        (Sweep::Processes, v)
    } else {
        return Err(
            "a sweep is over workers, keys or processes: workers=8,64,256, keys=1,16,256 or processes=1,4,12"
                .into(),
        );
    };
    let v: Vec<usize> = values
        .split(',')
        .map(|x| x.trim().parse::<usize>().map_err(|e| format!("{x:?}: {e}")))
        .collect::<Result<_, _>>()?;
    if v.is_empty() || v.contains(&0) {
        return Err("sweep values must be positive".into());
    }
    Ok(kind(v))
}

/// `relaylock report FILE`: render saved `--json` output again.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = LEGEND)]
pub struct ReportArgs {
    /// Every column, not the default ten.
    #[arg(long)]
    pub wide: bool,
    /// A file of `relaylock bench --json` lines.
    pub file: PathBuf,
    /// A markdown table instead of the terminal table.
    #[arg(long)]
    pub markdown: bool,
    /// Draw the sweep plot from these results.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_values() {
        assert_eq!(
            parse_sweep("workers=8,64").unwrap(),
            Sweep::Workers(vec![8, 64])
        );
        assert_eq!(
            parse_sweep("keys=1,10000").unwrap(),
            Sweep::Keys(vec![1, 10000])
        );
        assert_eq!(
            parse_sweep("processes=1,4,12").unwrap(),
            Sweep::Processes(vec![1, 4, 12])
        );
        assert!(parse_sweep("processes=0").is_err());
        assert!(parse_sweep("hold=8").is_err());
        assert!(parse_sweep("keys=0").is_err());
        assert!(parse_sweep("workers=0").is_err());
        assert!(parse_sweep("workers=").is_err());
    }
}
