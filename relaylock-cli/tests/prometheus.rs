//! The dashboard, checked for real: a real Prometheus scrapes real lock
//! traffic (relaylock on a real redis-server, exported by
//! metrics-exporter-prometheus over HTTP), then every PromQL expression of
//! `docs/dashboards/relaylock-grafana.json` (each panel target and each
//! templating variable) runs through Prometheus's HTTP API and must return
//! data with the labels its aggregation leaves; and the alerting rules of
//! `docs/dashboards/relaylock-rules.yml` must load, evaluate with health
//! "ok", and the ones the traffic provokes must fire.
//!
//! Its own test binary: the global metrics recorder can be installed once
//! per process.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use relaylock::{Error, LockOptions, SemaphoreOptions};
use relaylock_testkit::prometheus::{Prometheus, Sample};
use relaylock_testkit::{free_port, preset, RedisServer};

const DASHBOARD: &str = include_str!("../../docs/dashboards/relaylock-grafana.json");
const RULES: &str = "../docs/dashboards/relaylock-rules.yml";

/// What Grafana puts in place of the dashboard's variables. `$name` and
/// `$primitive` are multi-value variables with "All" selected, whose
/// `allValue` is `.*`; `$__rate_interval` is what Grafana computes for a
/// 1 s scrape interval (4 × the scrape interval); `$__range` is a 1 minute
/// time range.
const VARIABLES: &[(&str, &str)] = &[
    ("name", ".*"),
    ("primitive", ".*"),
    ("__rate_interval", "4s"),
    ("__range", "1m"),
];

/// The lock names the traffic uses (each with `LockOptions::name`).
const NAMES: &[&str] = &["orders", "busy", "pool", "catalog", "leases", "replicated"];
/// The primitives the traffic uses.
const PRIMITIVES: &[&str] = &["mutex", "semaphore", "read", "write"];

/// What a sample's value must be.
#[derive(Clone, Copy, Debug)]
enum Want {
    /// Finite and above 0: the traffic is continuous, so every rate and
    /// quantile it feeds is.
    Positive,
    /// Finite and at least 0 (a gauge, or a split by label whose rarer
    /// values may have no events in the rate window).
    NonNegative,
}

/// One expected panel target: the panel's title, the target's
/// `legendFormat`, the labels every sample must have (exactly: the
/// aggregation's `by (...)` labels, none for a plain `sum`), what its values
/// must be, and label values that must show up, each with a value above 0.
struct Expected {
    title: &'static str,
    legend: &'static str,
    labels: &'static [&'static str],
    value: Want,
    present: &'static [(&'static str, &'static str)],
}

const fn plain(title: &'static str, legend: &'static str, value: Want) -> Expected {
    Expected {
        title,
        legend,
        labels: &[],
        value,
        present: &[],
    }
}

const WAIT: &str = "Acquire wait (acquired)";
const RATES: &str = "Acquisitions and releases per second";
const TIMEOUTS: &str = "Timeouts per second";
const LOST: &str =
    "Lost locks (renewal, extend or release found the lock gone, or its lease ran out)";
const ATTEMPTS: &str = "Acquire attempts per acquisition (Redis load per lock; 1.0 or less is ideal: a hand-over within a process needs none)";
const WAKEUPS: &str = "Wake-ups by cause";
const RENEWALS: &str = "Watchdog renewals per second by outcome (lost and error should stay at 0)";

/// Every target of the dashboard, and what it must return on the traffic.
const EXPECTED: &[Expected] = &[
    plain(WAIT, "p50", Want::Positive),
    plain(WAIT, "p99", Want::Positive),
    plain(WAIT, "p99.9", Want::Positive),
    plain(RATES, "acquired", Want::Positive),
    plain(RATES, "released", Want::Positive),
    plain(TIMEOUTS, "timeouts", Want::Positive),
    plain(TIMEOUTS, "errors", Want::Positive),
    plain(LOST, "lost in range", Want::Positive),
    plain(ATTEMPTS, "attempts / acquisition", Want::Positive),
    plain("Waiting tasks", "waiters", Want::NonNegative),
    Expected {
        title: WAKEUPS,
        legend: "{{cause}}",
        labels: &["cause"],
        value: Want::NonNegative,
        // Waiters of another client wake on the release message; a waiter of
        // the releasing client is handed the lock.
        present: &[("cause", "message"), ("cause", "handover")],
    },
    plain("Hold time", "p50", Want::Positive),
    plain("Hold time", "p99", Want::Positive),
    Expected {
        title: RENEWALS,
        legend: "{{outcome}}",
        labels: &["outcome"],
        value: Want::NonNegative,
        present: &[("outcome", "renewed")],
    },
];

/// Replace Grafana's `$var` and `${var}` as Grafana would; panics on a
/// variable it does not know, and when a `$` is left.
fn substitute(expr: &str) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 1..];
        let (braced, body) = match tail.strip_prefix('{') {
            Some(b) => (true, b),
            None => (false, tail),
        };
        let len = body
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(body.len());
        let var = &body[..len];
        let value = VARIABLES
            .iter()
            .find(|(n, _)| *n == var)
            .unwrap_or_else(|| panic!("unknown variable ${var} in {expr}"))
            .1;
        out.push_str(value);
        rest = &body[len..];
        if braced {
            rest = rest
                .strip_prefix('}')
                .unwrap_or_else(|| panic!("unclosed ${{{var} in {expr}"));
        }
    }
    out.push_str(rest);
    assert!(
        !out.contains('$'),
        "{expr} still has a $ after substitution: {out}"
    );
    out
}

/// The traffic: every series and label value the dashboard queries, made
/// continuously until `stop`, by real lock calls on `url`.
async fn traffic(url: String, stop: Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<()>> {
    let a = preset(&url).build().await.unwrap();
    let b = preset(&url).build().await.unwrap();
    // A 300 ms default lease, renewed by the watchdog every 100 ms.
    let renewing = preset(&url)
        .default_lease(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let mut tasks = Vec::new();
    let mut spawn = |f: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>| {
        tasks.push(tokio::spawn(f));
    };
    let running = move |stop: &Arc<AtomicBool>| !stop.load(Ordering::Relaxed);

    // A contended mutex: waiters of the releasing client and of another.
    for (i, client) in [&a, &a, &a, &b, &b].into_iter().enumerate() {
        let (client, stop) = (client.clone(), stop.clone());
        spawn(Box::pin(async move {
            while running(&stop) {
                let opts = LockOptions::default()
                    .name("orders")
                    .wait(Duration::from_secs(5));
                let g = client.lock_with("orders", opts).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5 + i as u64)).await;
                g.release().await.unwrap();
            }
        }));
    }
    // A mutex contended within one client only: a release hands it to a
    // waiting task of its own client.
    for i in 0..2 {
        let (client, stop) = (a.clone(), stop.clone());
        spawn(Box::pin(async move {
            while running(&stop) {
                let opts = LockOptions::default().name("orders");
                let g = client.lock_with("orders-local", opts).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5 + i)).await;
                g.release().await.unwrap();
            }
        }));
    }
    // A lock held 700 ms at a time with a renewed 300 ms lease, and a
    // caller whose 100 ms waits for it mostly run out.
    {
        let (client, halt) = (renewing.clone(), stop.clone());
        spawn(Box::pin(async move {
            while running(&halt) {
                let g = client
                    .lock_with("busy", LockOptions::default().name("busy"))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(700)).await;
                g.release().await.unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
        let (client, stop) = (b.clone(), stop.clone());
        spawn(Box::pin(async move {
            while running(&stop) {
                let opts = LockOptions::default()
                    .name("busy")
                    .wait(Duration::from_millis(100));
                match client.lock_with("busy", opts).await {
                    Ok(g) => g.release().await.unwrap(),
                    Err(Error::Timeout { .. }) => {}
                    Err(e) => panic!("busy: {e}"),
                }
            }
        }));
    }
    // A semaphore of 2 permits, 3 takers.
    for client in [&a, &b, &b] {
        let (sem, stop) = (client.semaphore("pool", 2).unwrap(), stop.clone());
        spawn(Box::pin(async move {
            while running(&stop) {
                let p = sem
                    .acquire_with(SemaphoreOptions::default().name("pool"))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
                p.release().await.unwrap();
            }
        }));
    }
    // A read-write lock: two readers, one writer.
    for (client, write) in [(&a, false), (&b, false), (&a, true)] {
        let (rw, stop) = (client.rw_lock("catalog"), stop.clone());
        spawn(Box::pin(async move {
            let opts = || LockOptions::default().name("catalog");
            while running(&stop) {
                if write {
                    let g = rw.write_with(opts()).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    g.release().await.unwrap();
                } else {
                    let g = rw.read_with(opts()).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    g.release().await.unwrap();
                }
            }
        }));
    }
    // Leases that lapse: a fixed 20 ms lease held 60 ms, found lost.
    {
        let (client, stop) = (a.clone(), stop.clone());
        spawn(Box::pin(async move {
            while running(&stop) {
                let opts = LockOptions::default()
                    .name("leases")
                    .lease(Duration::from_millis(20));
                let g = client.lock_with("leases", opts).await.unwrap();
                tokio::time::sleep(Duration::from_millis(60)).await;
                let r = g.release().await;
                assert!(
                    matches!(r, Err(Error::LockLost { .. })),
                    "lapsed lease: {r:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    // Lock calls that fail with an error: min_replicas on a server without
    // replicas (outcome="error", no fault injected).
    {
        let (client, stop) = (b.clone(), stop.clone());
        spawn(Box::pin(async move {
            while running(&stop) {
                let opts = LockOptions::default()
                    .name("replicated")
                    .min_replicas(1, Duration::from_millis(10));
                let r = client.lock_with("replicated", opts).await;
                assert!(
                    matches!(r, Err(Error::NotReplicated { .. })),
                    "min_replicas without replicas: {r:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    tasks
}

/// Install the Prometheus exporter as the global recorder, serving
/// `/metrics` on a free loopback port (in `rt`); returns its address.
fn install_exporter(rt: &tokio::runtime::Runtime) -> SocketAddr {
    let _in_rt = rt.enter();
    for _ in 0..10 {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let built = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Suffix("seconds".into()),
                &[
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                ],
            )
            .unwrap()
            .with_http_listener(addr)
            .build();
        match built {
            Ok((recorder, exporter)) => {
                metrics::set_global_recorder(recorder).expect("the only recorder");
                rt.spawn(exporter);
                return addr;
            }
            // Most likely the port was taken meanwhile: another one.
            Err(e) => eprintln!("exporter on {addr}: {e}"),
        }
    }
    panic!("no free port for the exporter after 10 tries");
}

fn show(samples: &[Sample]) -> String {
    samples
        .iter()
        .map(|s| {
            let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            format!("{{{}}} {:.4}", labels.join(","), s.value)
        })
        .collect::<Vec<_>>()
        .join("  ")
}

/// Check one target's samples against `e`: `Err` for what more traffic may
/// still fix (no samples yet, a value not yet above 0, a label value not yet
/// seen); panics on what it cannot (the wrong labels, a negative value).
fn check(e: &Expected, expr: &str, samples: &[Sample]) -> Result<(), String> {
    if samples.is_empty() {
        return Err("no samples".into());
    }
    let want: BTreeSet<&str> = e.labels.iter().copied().collect();
    // Labels the legend shows must be there.
    let mut legend = e.legend;
    while let Some(i) = legend.find("{{") {
        let end = legend[i..].find("}}").expect("closed {{") + i;
        let label = legend[i + 2..end].trim();
        assert!(
            want.contains(label),
            "{expr}: legend shows {label}, not expected"
        );
        legend = &legend[end + 2..];
    }
    for s in samples {
        let got: BTreeSet<&str> = s.labels.keys().map(String::as_str).collect();
        assert_eq!(got, want, "{expr}: the labels of {}", show(samples));
        assert!(
            s.labels.values().all(|v| !v.is_empty()),
            "{expr}: empty label in {}",
            show(samples)
        );
        // (NaN is not negative: retried below.)
        assert!(
            s.value.is_nan() || s.value >= 0.0,
            "{expr}: negative value in {}",
            show(samples)
        );
        match e.value {
            Want::Positive if !(s.value.is_finite() && s.value > 0.0) => {
                return Err(format!("not a value above 0: {}", show(samples)))
            }
            Want::NonNegative if !s.value.is_finite() => {
                return Err(format!("not finite: {}", show(samples)))
            }
            _ => {}
        }
    }
    for (label, value) in e.present {
        let seen = samples
            .iter()
            .any(|s| s.labels.get(*label).map(String::as_str) == Some(*value) && s.value > 0.0);
        if !seen {
            return Err(format!("no {label}={value:?} above 0: {}", show(samples)));
        }
    }
    Ok(())
}

/// `(title, legend, expr)` of every panel target of the dashboard.
fn targets(json: &serde_json::Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for panel in json["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("title");
        for t in panel["targets"].as_array().expect("targets") {
            out.push((
                title.to_owned(),
                t["legendFormat"].as_str().expect("legendFormat").to_owned(),
                t["expr"].as_str().expect("expr").to_owned(),
            ));
        }
    }
    out
}

/// The alert names of the rules file.
fn alert_names(rules: &str) -> BTreeSet<String> {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
        .map(|n| n.trim().to_owned())
        .collect()
}

/// Poll `f` until it returns `Ok` or `limit` passes; the last `Err`
/// otherwise, and how many tries it took.
fn until<T>(limit: Duration, mut f: impl FnMut() -> Result<T, String>) -> (Result<T, String>, u32) {
    let started = Instant::now();
    let mut tries = 0;
    loop {
        tries += 1;
        let r = f();
        if r.is_ok() || started.elapsed() > limit {
            return (r, tries);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn every_dashboard_query_and_rule_on_a_real_prometheus() {
    let started = Instant::now();
    let json: serde_json::Value = serde_json::from_str(DASHBOARD).expect("dashboard is valid JSON");
    let rules_file = Path::new(env!("CARGO_MANIFEST_DIR")).join(RULES);
    let alerts = alert_names(&std::fs::read_to_string(&rules_file).expect("rules file"));
    assert!(alerts.len() >= 5, "{alerts:?}");

    // The table above covers the dashboard's targets exactly.
    let targets = targets(&json);
    let listed: BTreeSet<(&str, &str)> = EXPECTED.iter().map(|e| (e.title, e.legend)).collect();
    let in_json: BTreeSet<(&str, &str)> = targets
        .iter()
        .map(|(t, l, _)| (t.as_str(), l.as_str()))
        .collect();
    assert_eq!(
        listed, in_json,
        "EXPECTED and the dashboard's targets differ"
    );
    assert_eq!(listed.len(), targets.len(), "two targets with one legend");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis = RedisServer::start();
    let exporter = install_exporter(&rt);
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = rt.block_on(traffic(redis.url(), stop.clone()));
    // A traffic task that ended before the stop panicked: show why.
    let traffic_ok = |tasks: &mut [tokio::task::JoinHandle<()>]| {
        if tasks.iter().any(|t| t.is_finished()) && !stop.load(Ordering::Relaxed) {
            for t in tasks.iter_mut().filter(|t| t.is_finished()) {
                if let Err(e) = rt.block_on(t) {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
    };

    let prom = Prometheus::start(&[exporter], Some(&rules_file));
    println!(
        "prometheus up at {} after {:.1?}, scraping {exporter}",
        prom.url(),
        started.elapsed()
    );
    // Enough scrapes for the 4 s rate window to hold several samples.
    prom.wait_scraped(4, Duration::from_secs(30));
    traffic_ok(&mut tasks);
    println!("4 scrapes after {:.1?}", started.elapsed());

    // Every panel target.
    for (title, legend, expr) in &targets {
        let e = EXPECTED
            .iter()
            .find(|e| e.title == title && e.legend == legend)
            .expect("listed");
        let query = substitute(expr);
        let (r, tries) = until(Duration::from_secs(15), || {
            traffic_ok(&mut tasks);
            let samples = prom.query(&query)?;
            check(e, &query, &samples).map(|()| samples)
        });
        let samples = r.unwrap_or_else(|err| panic!("{title} / {legend}: {query}: {err}"));
        println!("[{title} / {legend}] {query}\n    -> {}", show(&samples));
        if tries > 1 {
            println!("    ({tries} tries)");
        }
    }

    // Every query variable: label_values(<selector>, <label>), asked as
    // Grafana asks Prometheus (the label values API).
    let mut variables = 0;
    for var in json["templating"]["list"].as_array().expect("templating") {
        if var["type"] != "query" {
            continue;
        }
        variables += 1;
        let name = var["name"].as_str().expect("name");
        let query = var["query"].as_str().expect("query");
        let args = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable query {query} is not label_values(...)"));
        let (selector, label) = args
            .rsplit_once(',')
            .expect("label_values(selector, label)");
        let (selector, label) = (substitute(selector.trim()), label.trim());
        let used: &[&str] = match label {
            "name" => NAMES,
            "primitive" => PRIMITIVES,
            other => panic!("variable ${name} on label {other}: values unknown"),
        };
        let (r, _) = until(Duration::from_secs(10), || {
            let values = prom.label_values(&selector, label)?;
            match used.iter().find(|u| !values.iter().any(|v| v == *u)) {
                Some(missing) => Err(format!("{missing} missing from {values:?}")),
                None => Ok(values),
            }
        });
        let values = r.unwrap_or_else(|err| panic!("${name}: {query}: {err}"));
        println!("[${name}] {query}\n    -> {values:?}");
    }
    assert_eq!(variables, 2, "the $name and $primitive variables");

    // The rules file: every alert loaded, evaluated with health "ok", its
    // expression accepted as a query; the ones this traffic provokes fire.
    let (r, _) = until(Duration::from_secs(15), || {
        let rules = prom.rules()?;
        let loaded: BTreeSet<String> = rules
            .iter()
            .filter_map(|r| r["name"].as_str().map(str::to_owned))
            .collect();
        if loaded != alerts {
            return Err(format!("loaded {loaded:?}, the file has {alerts:?}"));
        }
        let state = |name: &str| {
            rules.iter().find(|r| r["name"] == name).expect("loaded")["state"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        for r in &rules {
            if r["health"] != "ok" {
                return Err(format!(
                    "{} has health {}: {}",
                    r["name"], r["health"], r["lastError"]
                ));
            }
        }
        // A lost lock alerts at once; acquire errors after 5 minutes.
        if state("RelaylockLockLost") != "firing" {
            return Err(format!(
                "RelaylockLockLost is {}",
                state("RelaylockLockLost")
            ));
        }
        if !["pending", "firing"].contains(&state("RelaylockAcquireErrors").as_str()) {
            return Err(format!(
                "RelaylockAcquireErrors is {}",
                state("RelaylockAcquireErrors")
            ));
        }
        Ok(rules)
    });
    let rules = r.unwrap_or_else(|e| panic!("{}: {e}\n{}", rules_file.display(), prom.log_tail()));
    for rule in &rules {
        let expr = rule["query"].as_str().expect("query");
        let samples = prom
            .query(expr)
            .unwrap_or_else(|e| panic!("rule {}: {e}", rule["name"]));
        let alerting: BTreeMap<String, String> = rule["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                (
                    a["labels"].to_string(),
                    a["state"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        println!(
            "[rule {}] health {}, {}, {} series now: {}",
            rule["name"].as_str().unwrap_or_default(),
            rule["health"],
            rule["state"],
            samples.len(),
            show(&samples)
        );
        for (labels, state) in alerting {
            println!("    {state}: {labels}");
        }
    }

    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let r = rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), t).await });
        r.expect("traffic stops within 10 s").expect("traffic task");
    }
    drop(prom);
    println!("done in {:.1?}", started.elapsed());
}
