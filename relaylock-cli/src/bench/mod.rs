//! The load test: `relaylock bench` (pub/sub waiting against spin polling on
//! a real Redis) and `relaylock report` (saved results printed again).
//!
//! This file holds the two entry points and the Redis a bench runs against.
//! The rest, each importing only the files below it:
//!
//! - `args.rs`: the command lines and the table's legend;
//! - `runner.rs`: one run: the worker processes, the server's counters, the
//!   reduction of the workers' records to a [`Row`];
//! - `report.rs`: the terminal and markdown tables;
//! - `plot.rs`: the sweep plot (SVG);
//! - `worker.rs`: one load-generating process (the hidden `worker`
//!   subcommand);
//! - `bare.rs`: the bare lock and the fenced floor the workers can take
//!   instead of relaylock;
//! - `strategy.rs`: the strategies and primitives as the command line writes
//!   them;
//! - `stats.rs`: percentiles, fairness, hand-overs, violations;
//! - `row.rs`: one run's results.

mod args;
mod bare;
mod multi;
mod plot;
mod report;
mod row;
mod runner;
mod stats;
mod strategy;
mod task;
pub mod worker;

pub use args::{BenchArgs, ReportArgs, Sweep};

use fred::interfaces::ClientLike;

use crate::bench::report::{print_markdown, print_table};
use crate::bench::row::Row;
use crate::bench::runner::{admin_client, compare_with_redis_benchmark, run_one, scenarios};
use crate::bench::strategy::{Primitive, Strategy};
use crate::redis_server::RedisServer;

/// `relaylock report FILE`: the saved rows as a table (or markdown), and
/// the sweep plot with `--plot`.
pub fn report(args: ReportArgs) -> Result<(), String> {
    let text =
        std::fs::read_to_string(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let rows: Vec<Row> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| format!("{}: {e}", args.file.display())))
        .collect::<Result<_, _>>()?;
    if args.markdown {
        print_markdown(&rows);
    } else {
        print_table(&rows, args.wide);
    }
    if let Some(path) = &args.plot {
        crate::bench::plot::sweep(path, &rows)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// `relaylock bench`: every scenario in turn against the target Redis, the
/// rows printed (or written as JSON lines) and plotted; an error when a run
/// saw a violation.
pub async fn run(args: BenchArgs) -> Result<(), String> {
    check(&args)?;
    let target = Target::start(&args)?;
    let admin = admin_client(&target.url).await?;
    if matches!(&args.sweep, Some(Sweep::Keys(k)) if k.contains(&0)) {
        return Err("--sweep keys= values must be positive".into());
    }
    let mut rows = Vec::new();
    for (i, scenario) in scenarios(&args).iter().enumerate() {
        let mut row = run_one(&args, &target.url, &admin, scenario, i + 1).await?;
        if args.redis_benchmark {
            compare_with_redis_benchmark(&target.url, &admin, &mut row).await?;
        }
        if args.json {
            println!(
                "{}",
                serde_json::to_string(&row).map_err(|e| e.to_string())?
            );
        }
        rows.push(row);
    }
    if !args.json {
        print_table(&rows, args.wide);
    }
    if let Some(path) = &args.plot {
        crate::bench::plot::sweep(path, &rows)?;
        eprintln!("wrote {}", path.display());
    }
    let _ = admin.quit().await;
    if rows.iter().any(|r| r.violations > 0) {
        return Err(format!(
            "{} violated: see the violations column",
            broken_guarantee(args.primitive)
        ));
    }
    Ok(())
}

/// The flags' values and combinations that no run can use.
fn check(args: &BenchArgs) -> Result<(), String> {
    if args.workers == 0 || args.processes == 0 || args.keys == 0 {
        return Err("--workers, --processes and --keys must be positive".into());
    }
    if !(0.0..=60_000.0).contains(&args.hold_ms) {
        return Err("--hold-ms must be between 0 and 60000".into());
    }
    if args.plot.is_some() && args.sweep.is_none() {
        return Err("--plot needs --sweep".into());
    }
    check_multi(args)?;
    if args.primitive != Primitive::Mutex
        && args
            .strategies
            .iter()
            .any(|s| matches!(s, Strategy::Bare(_) | Strategy::Floor(_)))
    {
        return Err(
            "bare:<ms> and floor:<ms> are locks: they run only with --primitive mutex".into(),
        );
    }
    Ok(())
}

/// `--keys-per-lock`, `--single-share` and the strategies that go with
/// them.
fn check_multi(args: &BenchArgs) -> Result<(), String> {
    let kpl = args.keys_per_lock;
    let onebyone = args
        .strategies
        .iter()
        .any(|s| matches!(s, Strategy::OneByOne(_)));
    if !kpl.is_multi() {
        if onebyone {
            return Err("onebyone:<ms> takes sets: it needs --keys-per-lock above 1".into());
        }
        return Ok(());
    }
    if kpl.max > args.keys {
        return Err(format!(
            "--keys-per-lock {kpl} needs at least {} --keys",
            kpl.max
        ));
    }
    if !(0.0..=1.0).contains(&args.single_share) {
        return Err("--single-share is between 0 and 1".into());
    }
    if args.primitive != Primitive::Mutex
        || args
            .strategies
            .iter()
            .any(|s| matches!(s, Strategy::Floor(_)))
    {
        return Err("--keys-per-lock runs with --primitive mutex and pubsub, poll:<ms>, onebyone:<ms> or bare:<ms>".into());
    }
    Ok(())
}

/// The Redis the bench runs against: the `--url` given, or a redis-server
/// of its own, stopped when this is dropped.
struct Target {
    url: String,
    _server: Option<RedisServer>,
}

impl Target {
    fn start(args: &BenchArgs) -> Result<Self, String> {
        Ok(match &args.url {
            Some(url) => Target {
                url: url.clone(),
                _server: None,
            },
            None => {
                let server = RedisServer::try_start(&[])?;
                let url = server.url();
                eprintln!("started redis-server on {url} (stopped at the end)");
                Target {
                    url,
                    _server: Some(server),
                }
            }
        })
    }
}

/// What a violation broke, for the primitive the workers took.
fn broken_guarantee(primitive: Primitive) -> String {
    match primitive {
        Primitive::Mutex => "mutual exclusion".to_owned(),
        Primitive::RwLock(_) => "the read-write lock's exclusion".to_owned(),
        p => format!("the {p} limit"),
    }
}
