//! criterion benches against a real redis-server started for the run.
//!
//! One group, so the lock's costs read as multiples of the floor:
//! * `ping`, `evalsha_return_1`: a raw round trip through fred (the floor);
//! * `lock_release_uncontended`: lock + release of a free key (two scripts);
//! * `handoff_two_tasks`: from the holder starting its release to the
//!   return of the parked waiter's lock call.
//!
//! `cargo bench --bench lock`

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use fred::prelude::*;
use relaylock::LockClient;

use relaylock_testkit as redis_server;

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let server = redis_server::RedisServer::start();
    let (fred, lock, sha) = rt.block_on(async {
        let fred = Builder::from_config(Config::from_url(&server.url()).unwrap())
            .with_connection_config(|c| c.tcp.nodelay = Some(true))
            .build()
            .unwrap();
        fred.init().await.unwrap();
        let sha: String = fred.script_load("return 1").await.unwrap();
        let lock = LockClient::connect(&server.url()).await.unwrap();
        (fred, lock, sha)
    });

    let mut g = c.benchmark_group("round_trip");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    g.bench_function("ping", |b| {
        b.to_async(&rt)
            .iter(|| async { fred.ping::<String>(None).await.unwrap() })
    });
    g.bench_function("evalsha_return_1", |b| {
        b.to_async(&rt).iter(|| async {
            fred.evalsha::<i64, _, _, _>(sha.as_str(), Vec::<String>::new(), Vec::<String>::new())
                .await
                .unwrap()
        })
    });
    g.bench_function("lock_release_uncontended", |b| {
        b.to_async(&rt)
            .iter(|| async { lock.lock("free").await.unwrap().release().await.unwrap() })
    });
    g.bench_function("handoff_two_tasks", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let lock = lock.clone();
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let holder = lock.lock("handoff").await.unwrap();
                    let waiter = {
                        let lock = lock.clone();
                        tokio::spawn(async move {
                            let g = lock.lock("handoff").await.unwrap();
                            (Instant::now(), g)
                        })
                    };
                    // Let the waiter try, subscribe and park.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let start = Instant::now();
                    holder.release().await.unwrap();
                    let (acquired, g) = waiter.await.unwrap();
                    total += acquired - start;
                    g.release().await.unwrap();
                }
                total
            }
        })
    });
    g.finish();
    drop(lock);
    drop(server);
}

criterion_group!(lock, benches);
criterion_main!(lock);
