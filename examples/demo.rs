//! A minimal contention demo: N tasks fight over one key, holding it 1 ms,
//! first with pub/sub waiting, then with 10 ms spin polling. Prints
//! acquisitions per second and the acquire script calls Redis executed per
//! acquisition (from `INFO commandstats`).
//!
//! ```text
//! cargo run --release --example demo -- redis://127.0.0.1:6379 64 3
//! ```
//! Arguments: URL, tasks (64), seconds per strategy (3). Touches only names
//! under the `relaylock-demo` prefix. The full load test is `relaylock bench`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::InfoKind;
use relaylock::{LockClient, WaitStrategy};

async fn evalsha_calls(admin: &Client) -> u64 {
    let info: String = admin.info(Some(InfoKind::CommandStats)).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let tasks: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let secs: u64 = args.next().map_or(Ok(3), |a| a.parse())?;

    let admin = Builder::from_config(Config::from_url(&url)?).build()?;
    admin.init().await?;
    println!("{tasks} tasks, one key, hold 1 ms, {secs} s per strategy, {url}");
    println!(
        "{:<10} {:>12} {:>10} {:>16}",
        "strategy", "acquisitions", "acq/s", "scripts/acq"
    );
    for strategy in [
        WaitStrategy::PubSub,
        WaitStrategy::Poll(Duration::from_millis(10)),
    ] {
        let client = LockClient::builder()
            .url(url.as_str())
            .prefix("relaylock-demo")
            .wait_strategy(strategy)
            .build()
            .await?;
        let stop = Arc::new(AtomicBool::new(false));
        let acquisitions = Arc::new(AtomicU64::new(0));
        let before = evalsha_calls(&admin).await;
        let start = Instant::now();
        let mut handles = Vec::new();
        for _ in 0..tasks {
            let (client, stop, acquisitions) = (client.clone(), stop.clone(), acquisitions.clone());
            handles.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let guard = client.lock("demo").await.expect("lock");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    guard.release().await.expect("release");
                    acquisitions.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs(secs)).await;
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.await?;
        }
        let elapsed = start.elapsed().as_secs_f64();
        let n = acquisitions.load(Ordering::Relaxed);
        // Each acquisition is released once; the other EVALSHAs are acquire attempts
        // (a release that hands the lock to a local waiter is the only call of that hand-over).
        let scripts = evalsha_calls(&admin).await - before;
        let name = match strategy {
            WaitStrategy::PubSub => "pubsub".to_string(),
            WaitStrategy::Poll(d) => format!("poll:{}", d.as_millis()),
        };
        println!(
            "{name:<10} {n:>12} {:>10.0} {:>16.3}",
            n as f64 / elapsed,
            // Signed: a release still in flight at the end is not counted
            // yet, so with direct hand-overs (no acquire calls) the
            // difference can be slightly negative.
            ((scripts as f64 - n as f64) / n as f64).max(0.0)
        );
    }
    Ok(())
}
