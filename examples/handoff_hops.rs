//! Where the microseconds of one hand-over go, hop by hop.
//!
//! A holder and a parked waiter on one key, in one process, against a
//! redis-server this example starts: first both in one client (no message:
//! the release itself gives the lock to the waiter's token, and the
//! releasing client hands the waiter its fencing token when the release's
//! reply arrives), then in two clients (the release message, then the
//! waiter's acquire). The library emits `trace` events under
//! the target `relaylock::hop` at each internal hop; a tracing layer stamps
//! them, and the example prints the median of each hop over many hand-overs,
//! next to the PING round trip measured the same way.
//!
//! ```text
//! cargo run --release --example handoff_hops -- 2000
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::prelude::*;
use relaylock::LockClient;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

use relaylock_testkit as redis_server;

type Stamps = Arc<Mutex<Vec<(&'static str, Instant)>>>;

/// Stamps every `relaylock::hop` event with the time it was emitted.
struct HopLayer(Stamps);

struct HopName(Option<&'static str>);

impl Visit for HopName {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "hop" {
            self.0 = [
                "message_received",
                "waiter_woken",
                "acquire_reply",
                "handed_over",
            ]
            .into_iter()
            .find(|h| *h == value);
        }
    }
    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> Layer<S> for HopLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let now = Instant::now();
        if event.metadata().target() == "relaylock::hop" {
            let mut name = HopName(None);
            event.record(&mut name);
            if let Some(n) = name.0 {
                self.0.lock().unwrap().push((n, now));
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Hand the lock over `rounds` times from a holder of `holder` to a parked
/// waiter of `waiter` (the same client: woken by the releasing client;
/// another client: by the release message), and print the median of each
/// hop.
async fn measure(
    title: &str,
    holder: &LockClient,
    waiter: &LockClient,
    rounds: usize,
    stamps: &Stamps,
) {
    let fred = holder.fred_client().clone();
    let (mut release_rtt, mut ping, mut total) = (vec![], vec![], vec![]);
    // Between clients: release -> message -> waiter running -> acquire
    // reply -> returned.
    let (mut to_message, mut to_woken, mut to_reply, mut to_return) =
        (vec![], vec![], vec![], vec![]);
    // Within one client: release -> the waiter runs holding the lock ->
    // returned.
    let (mut to_handed, mut handed_to_return) = (vec![], vec![]);
    for _ in 0..rounds {
        let held = holder.lock("hops").await.unwrap();
        let parked = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                let g = waiter.lock("hops").await.unwrap();
                (Instant::now(), g)
            })
        };
        tokio::time::sleep(Duration::from_millis(2)).await; // the waiter tries, subscribes, parks
        let p = Instant::now();
        let _: String = fred.ping(None).await.unwrap();
        ping.push(p.elapsed().as_secs_f64() * 1e6);
        stamps.lock().unwrap().clear();

        let t0 = Instant::now();
        held.release().await.unwrap();
        let t_released = Instant::now();
        let (t_end, g) = parked.await.unwrap();
        let s = std::mem::take(&mut *stamps.lock().unwrap());
        let at = |name: &str| s.iter().find(|(n, _)| *n == name).map(|(_, t)| *t);
        let us = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e6;
        if let Some(h) = at("handed_over") {
            release_rtt.push(us(t0, t_released));
            to_handed.push(us(t0, h));
            handed_to_return.push(us(h, t_end));
            total.push(us(t0, t_end));
        } else if let (Some(m), Some(w), Some(r)) = (
            at("message_received"),
            at("waiter_woken"),
            at("acquire_reply"),
        ) {
            release_rtt.push(us(t0, t_released));
            to_message.push(us(t0, m));
            to_woken.push(us(m, w));
            to_reply.push(us(w, r));
            to_return.push(us(r, t_end));
            total.push(us(t0, t_end));
        }
        g.release().await.unwrap();
    }
    println!(
        "{title}: {} hand-overs, medians in microseconds",
        total.len()
    );
    let line = |name: &str, v: Vec<f64>| {
        if !v.is_empty() {
            println!("  {name:<50}{:>8.1}", median(v))
        }
    };
    line("PING round trip through fred (the floor)", ping);
    line("release script round trip (holder's view)", release_rtt);
    line(
        "1. release sent -> message at the subscriber task",
        to_message,
    );
    line("2. message -> waiter task running", to_woken);
    line("3. waiter running -> acquire reply received", to_reply);
    line(
        "4. acquire reply -> lock() returns to the caller",
        to_return,
    );
    line(
        "1. release sent -> waiter running, holding the lock",
        to_handed,
    );
    line(
        "2. waiter running -> lock() returns to the caller",
        handed_to_return,
    );
    line("hand-over, release sent -> lock() returned", total);
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(2000, |a| a.parse().expect("rounds"));
    let stamps: Stamps = Arc::default();
    let subscriber = tracing_subscriber::registry().with(HopLayer(stamps.clone()).with_filter(
        tracing_subscriber::filter::filter_fn(|m| m.target() == "relaylock::hop"),
    ));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let server = redis_server::RedisServer::try_start(&[]).unwrap_or_else(|e| panic!("{e}"));
    let one = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    measure(
        "one client (the release gives the lock to the waiter)",
        &one,
        &one,
        rounds,
        &stamps,
    )
    .await;
    measure(
        "two clients (release message)",
        &one,
        &other,
        rounds,
        &stamps,
    )
    .await;
}
