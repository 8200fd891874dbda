//! A scheduler that runs on one instance of a fleet: every instance serves
//! HTTP (axum) and campaigns in the election `scheduler`; only the leader
//! runs the periodic job, each run fenced by its term; every instance can
//! say who leads (`GET /leader`, from `Election::observe`, no Redis call per
//! request).
//!
//! | route | what |
//! |-------|------|
//! | `GET /leader` | `{"leader":"host:pid","term":...}` or `{"leader":null}` |
//! | `GET /health` | `ok` |
//!
//! Run two or three (each prints where it listens), against your Redis:
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 LISTEN_ADDR=127.0.0.1:3001 cargo run --example leader_scheduler
//! REDIS_URL=redis://127.0.0.1:6379 LISTEN_ADDR=127.0.0.1:3002 cargo run --example leader_scheduler
//! curl http://127.0.0.1:3002/leader
//! ```
//!
//! Stop the leader (Ctrl-C: it resigns, and the next instance leads at
//! once; `kill -9`: the next leads within the lease). Settings, all
//! optional: `REDIS_URL`, `LISTEN_ADDR` (default `127.0.0.1:3000`; port 0
//! picks one), `JOB_EVERY_MS` (default 1000), `EXIT_AFTER_MS` (stop after
//! that long, for a demo run).

use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use relaylock::{Election, Leader, LockClient, LockOptions};
use tokio::sync::watch;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let addr = std::env::var("LISTEN_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let every = Duration::from_millis(env_ms("JOB_EVERY_MS").unwrap_or(1000));
    let client = LockClient::connect(&url).await?;
    let election = client.election("scheduler");
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let me = format!("{}", listener.local_addr()?);
    println!("listening on http://{me}");
    let app = Router::new()
        .route("/leader", get(leader))
        .route("/health", get(|| async { "ok" }))
        // One receiver for the whole process: one subscription, one reader.
        .with_state(election.observe());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let scheduler = tokio::spawn(schedule(election, me, every));
    match env_ms("EXIT_AFTER_MS") {
        Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        None => tokio::signal::ctrl_c().await?,
    }
    // Resign (the next instance leads at once), then stop.
    scheduler.abort();
    client.shutdown().await?;
    server.abort();
    Ok(())
}

/// Campaign for ever; while leading, run the job every `every`, each run
/// fenced by the term. `with_leadership` stops the loop when leadership is
/// lost, and resigns only once it has stopped.
async fn schedule(election: Election, me: String, every: Duration) {
    loop {
        let led = election
            .with_leadership(&me, LockOptions::default(), async |leadership| {
                let term = leadership.fencing_token();
                println!("{me}: leading, term {term}");
                loop {
                    // The job: pass `term` to what it writes, so a store can
                    // refuse a deposed leader's late write.
                    println!("{me}: job run (term {term})");
                    tokio::time::sleep(every).await;
                }
            })
            .await;
        if let Err(e) = led {
            eprintln!("{me}: leadership ended: {e}; campaigning again");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `GET /leader`: who leads, as this instance's observer last saw it (no
/// Redis call per request).
async fn leader(State(seen): State<watch::Receiver<Option<Leader>>>) -> String {
    let seen = seen.borrow().clone();
    match seen {
        Some(l) => format!("{{\"leader\":{:?},\"term\":{}}}", l.value, l.fencing_token),
        None => "{\"leader\":null}".to_owned(),
    }
}

fn env_ms(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}
