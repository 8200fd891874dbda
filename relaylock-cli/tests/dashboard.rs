//! The shipped Grafana dashboard parses, and every series it queries is one
//! relaylock emits (checked against a real Prometheus exporter's rendering
//! of real lock traffic).

use std::collections::BTreeSet;

const DASHBOARD: &str = include_str!("../../docs/dashboards/relaylock-grafana.json");

/// Every `relaylock_*` series name in the dashboard's queries.
fn queried_series() -> BTreeSet<String> {
    let json: serde_json::Value = serde_json::from_str(DASHBOARD).expect("dashboard is valid JSON");
    let panels = json["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    let mut series = BTreeSet::new();
    for panel in panels {
        assert!(
            panel["title"].as_str().is_some_and(|t| !t.is_empty()),
            "panel without title"
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            let mut rest = expr;
            while let Some(i) = rest.find("relaylock_") {
                let tail = &rest[i..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                series.insert(tail[..end].to_string());
                rest = &tail[end..];
            }
        }
    }
    series
}

fn base_name(series: &str) -> &str {
    ["_bucket", "_count", "_sum"]
        .iter()
        .find_map(|s| series.strip_suffix(s))
        .filter(|b| b.ends_with("_seconds"))
        .unwrap_or(series)
}

#[test]
fn dashboard_queries_only_emitted_metrics() {
    let series = queried_series();
    for s in &series {
        assert!(
            relaylock::metrics::ALL.contains(&base_name(s)),
            "dashboard queries {s}, which relaylock never emits"
        );
    }
    // The health signals the dashboard exists for are all on it.
    for needed in [
        relaylock::metrics::ACQUIRE_WAIT_SECONDS,
        relaylock::metrics::ACQUIRED_TOTAL,
        relaylock::metrics::TIMEOUTS_TOTAL,
        relaylock::metrics::LOST_TOTAL,
        relaylock::metrics::ACQUIRE_ATTEMPTS_TOTAL,
        relaylock::metrics::WAITERS,
        relaylock::metrics::RENEWALS_TOTAL,
    ] {
        assert!(
            series.iter().any(|s| base_name(s) == needed),
            "dashboard lacks {needed}"
        );
    }
}

/// docs/dashboards/README.md has one row per panel (its exact title) and
/// one per alert of the rules file.
#[test]
fn readme_lists_every_panel_and_alert() {
    let readme = include_str!("../../docs/dashboards/README.md");
    let rules = include_str!("../../docs/dashboards/relaylock-rules.yml");
    let json: serde_json::Value = serde_json::from_str(DASHBOARD).expect("dashboard is valid JSON");
    let rows: Vec<&str> = readme.lines().filter(|l| l.starts_with("| ")).collect();
    for panel in json["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("title");
        assert!(
            rows.iter().any(|r| r.starts_with(&format!("| {title} |"))),
            "docs/dashboards/README.md has no row for the panel {title:?}"
        );
    }
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
        .map(str::trim)
        .collect();
    assert!(!alerts.is_empty());
    for alert in alerts {
        assert!(
            rows.iter()
                .any(|r| r.starts_with(&format!("| `{alert}` |"))),
            "docs/dashboards/README.md has no row for the alert {alert}"
        );
    }
}

mod rendered {
    use std::time::Duration;

    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    use relaylock::{Error, LockClient, LockOptions};

    use relaylock_testkit as redis_server;

    /// Real traffic through the Prometheus exporter: every queried series shows up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_queried_series_is_rendered() {
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("seconds".into()), &[0.001, 0.01, 0.1, 1.0])
            .unwrap()
            .install_recorder()
            .unwrap();
        let server = redis_server::RedisServer::start();
        let lock = LockClient::connect(&server.url()).await.unwrap();
        let opts = || LockOptions::default().name("orders");
        let g = lock.lock_with("a", opts()).await.unwrap();
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move {
                lock.lock_with("a", LockOptions::default().name("orders"))
                    .await
            })
        };
        let r = lock
            .lock_with("a", opts().wait(Duration::from_millis(300)))
            .await;
        assert!(matches!(r, Err(Error::Timeout { .. })));
        g.release().await.unwrap();
        waiter.await.unwrap().unwrap().release().await.unwrap();
        let short = lock
            .lock_with("b", opts().lease(Duration::from_millis(30)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert!(matches!(short.release().await, Err(Error::LockLost { .. })));
        // Watchdog renewals: a lease of 300 ms is renewed every 100 ms.
        let renewing = LockClient::builder()
            .url(server.url())
            .default_lease(Duration::from_millis(300))
            .build()
            .await
            .unwrap();
        let g = renewing.lock_with("c", opts()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(350)).await;
        g.release().await.unwrap();

        let text = handle.render();
        for s in super::queried_series() {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&format!("{s}{{")) || l.starts_with(&format!("{s} "))),
                "{s} is not in the exporter's output:\n{text}"
            );
        }
    }
}
