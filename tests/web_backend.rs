//! `examples/web_backend.rs` end to end: two instances of the service, as two
//! OS processes (this test binary run again in a child role, each with its
//! own lock client and its own Prometheus recorder) on one real
//! redis-server, take a few hundred concurrent HTTP requests updating the
//! same order. No update may be lost, the fences the store accepted must
//! strictly increase, and each instance's `/metrics` must count exactly the
//! acquisitions it served in the wait-time histogram.

#[path = "../examples/web_backend.rs"]
#[allow(dead_code)]
mod web_backend;

use std::collections::BTreeMap;
use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use relaylock::LockClient;
use relaylock_testkit::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use web_backend::{AppState, OrderStore};

/// Set in a child process: the Redis URL it serves with.
const CHILD_ENV: &str = "RELAYLOCK_WEB_BACKEND_CHILD_URL";
const TEST_NAME: &str = "two_processes_serve_concurrent_updates_of_one_order";
const INSTANCES: usize = 2;
const REQUESTS: usize = 300;
const ORDER: u64 = 42;
/// Generous: every request must get the lock.
const LOCK_WAIT: Duration = Duration::from_secs(30);
const WORK: Duration = Duration::from_millis(2);
const HTTP_TIMEOUT: Duration = Duration::from_secs(45);

/// Two instances, as two processes, serve a few hundred concurrent updates
/// of one order: none is lost, the fences the store accepted strictly
/// increase, and each instance's `/metrics` counts the acquisitions it
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_serve_concurrent_updates_of_one_order() {
    if let Ok(url) = std::env::var(CHILD_ENV) {
        serve_as_child(&url).await;
        return;
    }
    let started = Instant::now();
    let server = RedisServer::start();
    let instances: Vec<Instance> = (0..INSTANCES)
        .map(|_| Instance::spawn(&server.url()))
        .collect();
    let mut addrs = Vec::new();
    for instance in &instances {
        addrs.push(instance.addr().await);
    }

    assert_bad_input_is_answered(&addrs).await;

    let storm = Instant::now();
    let (served, mut updates, failures, mut latencies) = update_storm(&addrs).await;
    let storm_time = storm.elapsed();
    assert!(
        failures.is_empty(),
        "{} of {REQUESTS} requests failed, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );

    assert_no_update_lost(&mut updates);
    let (first_fence, last_fence) = (updates[0].1, updates[REQUESTS - 1].1);
    let (status, body) = http(addrs[1], "GET", &format!("/orders/{ORDER}"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let order: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(order["items"], REQUESTS as u64, "final order: {body}");
    assert_eq!(order["fence"], last_fence, "final order: {body}");

    let pages = metrics_pages(&addrs, &served).await;

    // Stop: closing a child's stdin shuts its server down gracefully.
    for instance in instances {
        instance.stop().await;
    }

    latencies.sort_unstable();
    println!(
        "{INSTANCES} processes, {REQUESTS} concurrent POST /orders/{ORDER}/items \
         (lock wait bound {LOCK_WAIT:?}, work {WORK:?} under the lock)"
    );
    println!(
        "served (200) per instance: {served:?}; failed: {}; final order: {body}",
        failures.len()
    );
    println!("fences {first_fence}..={last_fence}, strictly increasing over {REQUESTS} updates");
    println!(
        "storm {:.2} s ({:.0} updates/s), latency p50 {:.1} ms, max {:.1} ms; test wall time {:.2} s",
        storm_time.as_secs_f64(),
        REQUESTS as f64 / storm_time.as_secs_f64(),
        latencies[latencies.len() / 2].as_secs_f64() * 1e3,
        latencies[latencies.len() - 1].as_secs_f64() * 1e3,
        started.elapsed().as_secs_f64()
    );
    println!("instance 0 /metrics, the wait histogram:");
    for line in pages[0].lines().filter(|l| {
        l.starts_with(relaylock::metrics::ACQUIRE_WAIT_SECONDS)
            && l.contains(r#"outcome="acquired""#)
    }) {
        println!("  {line}");
    }
    drop(server);
}

/// Bad input is answered, not a crash; an order never written is a 404.
async fn assert_bad_input_is_answered(addrs: &[SocketAddr]) {
    let (status, body) = http(addrs[0], "POST", "/orders/abc/items").await.unwrap();
    assert_eq!(status, 400, "{body}");
    let (status, body) = http(addrs[1], "GET", "/orders/-1").await.unwrap();
    assert_eq!(status, 400, "{body}");
    let (status, body) = http(addrs[1], "GET", &format!("/orders/{ORDER}"))
        .await
        .unwrap();
    assert_eq!(status, 404, "{body}");
}

/// What the storm's 200s said: the requests each instance served, the
/// (items, fence) of each 200, the requests that failed (instance, answer),
/// and every request's latency.
type Answers = (
    [usize; INSTANCES],
    Vec<(u64, u64)>,
    Vec<(usize, Result<(u16, String), String>)>,
    Vec<Duration>,
);

/// REQUESTS concurrent updates of one order, alternating instances.
async fn update_storm(addrs: &[SocketAddr]) -> Answers {
    let requests: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let instance = i % INSTANCES;
            let addr = addrs[instance];
            tokio::spawn(async move {
                let at = Instant::now();
                let answer = http(addr, "POST", &format!("/orders/{ORDER}/items")).await;
                (instance, answer, at.elapsed())
            })
        })
        .collect();
    let mut served = [0usize; INSTANCES];
    let mut updates = Vec::new(); // (items, fence) of each 200
    let mut failures = Vec::new();
    let mut latencies = Vec::new();
    for request in requests {
        let (instance, answer, took) = request.await.unwrap();
        latencies.push(took);
        match answer {
            Ok((200, body)) => {
                let order: serde_json::Value = serde_json::from_str(&body)
                    .unwrap_or_else(|e| panic!("a 200 body that is not JSON ({e}): {body}"));
                assert_eq!(order["id"], ORDER, "{body}");
                let items = order["items"].as_u64().expect("items");
                let fence = order["fence"].as_u64().expect("fence");
                updates.push((items, fence));
                served[instance] += 1;
            }
            other => failures.push((instance, other)),
        }
    }
    (served, updates, failures, latencies)
}

/// No update lost: the 200s saw the counts 1..=N, each once, and in the
/// order of those counts the accepted fences strictly increase.
fn assert_no_update_lost(updates: &mut [(u64, u64)]) {
    updates.sort_unstable();
    let counts: Vec<u64> = updates.iter().map(|u| u.0).collect();
    assert_eq!(
        counts,
        (1..=REQUESTS as u64).collect::<Vec<_>>(),
        "updates lost or applied twice"
    );
    for w in updates.windows(2) {
        assert!(
            w[0].1 < w[1].1,
            "fences not strictly increasing: item {} with fence {}, item {} with fence {}",
            w[0].0,
            w[0].1,
            w[1].0,
            w[1].1
        );
    }
}

/// Each instance's `/metrics` page, whose histogram counts exactly the
/// acquisitions it `served`.
async fn metrics_pages(addrs: &[SocketAddr], served: &[usize; INSTANCES]) -> Vec<String> {
    let mut pages = Vec::new();
    for (instance, addr) in addrs.iter().enumerate() {
        let (status, page) = http(*addr, "GET", "/metrics").await.unwrap();
        assert_eq!(status, 200, "{page}");
        check_wait_histogram(&page, served[instance] as f64)
            .unwrap_or_else(|e| panic!("instance {instance}: {e}\n{page}"));
        pages.push(page);
    }
    pages
}

/// The child role: serve the example's app on a free port, say where, and
/// stop when the parent closes our stdin (also when the parent dies).
async fn serve_as_child(url: &str) {
    let metrics = web_backend::install_metrics().unwrap();
    let state = AppState {
        locks: LockClient::connect(url).await.unwrap(),
        store: OrderStore::connect(url).await.unwrap(),
        metrics,
        lock_wait: LOCK_WAIT,
        work: WORK,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("LISTENING {}", listener.local_addr().unwrap());
    let (closed, stdin_closed) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        let _ = closed.send(());
    });
    web_backend::serve(listener, state, async {
        let _ = stdin_closed.await;
    })
    .await
    .unwrap();
}

/// A child process serving the app; killed on drop.
struct Instance {
    child: Child,
    stdin: Option<ChildStdin>,
    listening: Option<std::sync::mpsc::Receiver<SocketAddr>>,
}

impl Instance {
    fn spawn(url: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn a service process");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // Find the LISTENING line (libtest may have written "test <name> ..."
        // before it on the same line), then keep draining so the child
        // never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Some((_, addr)) = line.split_once("LISTENING ") {
                    let _ = tx.send(addr.parse().expect("a socket address"));
                }
            }
        });
        Instance {
            child,
            stdin,
            listening: Some(rx),
        }
    }

    /// Where the child listens, once it says so.
    async fn addr(&self) -> SocketAddr {
        let rx = self.listening.as_ref().unwrap();
        let started = Instant::now();
        loop {
            match rx.try_recv() {
                Ok(addr) => return addr,
                Err(std::sync::mpsc::TryRecvError::Empty)
                    if started.elapsed() < Duration::from_secs(20) =>
                {
                    tokio::time::sleep(Duration::from_millis(10)).await
                }
                Err(e) => panic!("the service process did not report its address: {e:?}"),
            }
        }
    }

    /// Close its stdin and expect a clean exit within a few seconds.
    async fn stop(mut self) {
        drop(self.stdin.take());
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the service process failed: {status}");
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the service process did not stop within 10 s of its stdin closing"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`):
/// the status and the body.
async fn http(addr: SocketAddr, method: &str, path: &str) -> Result<(u16, String), String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(HTTP_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("{method} {path}: no answer within {HTTP_TIMEOUT:?}"))?
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let text = String::from_utf8(raw).map_err(|e| format!("{method} {path}: {e}"))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{method} {path}: no header end in {text:?}"))?;
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Err(format!("{method} {path}: unexpected chunked body"));
    }
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{method} {path}: bad status line in {head:?}"))?;
    Ok((status, body.to_owned()))
}

/// One sample line of a Prometheus text page: name, labels, value.
fn samples(page: &str) -> Vec<(&str, BTreeMap<&str, &str>, f64)> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|kv| !kv.is_empty())
                .filter_map(|kv| {
                    let (k, v) = kv.split_once("=\"")?;
                    Some((k, v.trim_end_matches('"')))
                })
                .collect();
            Some((name, labels, value))
        })
        .collect()
}

/// The `relaylock_acquire_wait_seconds` histogram of the `orders` mutex,
/// outcome `acquired`: buckets (not a summary), cumulative, `+Inf` equal to
/// `_count`, and `_count` equal to `served`. And `relaylock_acquired_total`
/// agrees.
fn check_wait_histogram(page: &str, served: f64) -> Result<(), String> {
    let wait = relaylock::metrics::ACQUIRE_WAIT_SECONDS;
    let ours = |labels: &BTreeMap<&str, &str>| {
        labels.get("name") == Some(&"orders")
            && labels.get("primitive") == Some(&"mutex")
            && labels.get("outcome") == Some(&"acquired")
    };
    let all = samples(page);
    let series = |suffix: &str| {
        let name = format!("{wait}{suffix}");
        all.iter()
            .filter(|(n, labels, _)| *n == name && ours(labels))
            .map(|(_, labels, v)| (labels.get("le").copied(), *v))
            .collect::<Vec<_>>()
    };
    let buckets = series("_bucket");
    let count = series("_count");
    let sum = series("_sum");
    if buckets.len() < 2 {
        return Err(format!("no {wait}_bucket lines for outcome=\"acquired\""));
    }
    let [(_, count)] = count[..] else {
        return Err(format!("expected one {wait}_count, got {count:?}"));
    };
    let [(_, sum)] = sum[..] else {
        return Err(format!("expected one {wait}_sum, got {sum:?}"));
    };
    if count != served {
        return Err(format!(
            "{wait}_count {count}, but this instance served {served} updates"
        ));
    }
    if !(sum.is_finite() && sum > 0.0) {
        return Err(format!("{wait}_sum {sum}"));
    }
    let mut previous = 0.0;
    for (le, v) in &buckets {
        let le = le.ok_or("a bucket without le")?;
        if *v < previous {
            return Err(format!(
                "bucket le={le} {v} below the one before ({previous})"
            ));
        }
        previous = *v;
    }
    match buckets.last() {
        Some((Some("+Inf"), v)) if *v == count => {}
        other => return Err(format!("last bucket {other:?}, expected +Inf = {count}")),
    }
    let acquired: Vec<f64> = all
        .iter()
        .filter(|(n, labels, _)| {
            *n == relaylock::metrics::ACQUIRED_TOTAL && labels.get("name") == Some(&"orders")
        })
        .map(|s| s.2)
        .collect();
    if acquired != [served] {
        return Err(format!(
            "{} {acquired:?}, expected [{served}]",
            relaylock::metrics::ACQUIRED_TOTAL
        ));
    }
    Ok(())
}
