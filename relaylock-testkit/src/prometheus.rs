//! A throwaway Prometheus server on a free loopback port, scraping the
//! targets it is given every second and evaluating a rules file, killed on
//! drop.
//!
//! The config and the TSDB live in a temp dir removed on drop; Prometheus's
//! own log goes to a file there, and [`Prometheus::log_tail`] shows its end
//! when something goes wrong. The HTTP API is reached with `ureq`, a
//! blocking HTTP client.
//!
//! Starting and querying are blocking: call them from a plain thread (or
//! `spawn_blocking`), not from inside an async task.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::free_port;

/// The error when the binary is missing: names the install command.
pub const PROMETHEUS_INSTALL_HINT: &str = "prometheus not found on PATH. Install it with \
`apt-get install -y prometheus` (Debian/Ubuntu) or your system's package manager.";

/// How often Prometheus scrapes the targets and evaluates the rules.
pub const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);

/// The `job` label Prometheus gives the scraped targets.
pub const JOB: &str = "relaylock";

/// How long [`Prometheus::start`] waits for `/-/ready`.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// How long one HTTP request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A `prometheus` process with its own config and storage, killed on drop.
pub struct Prometheus {
    child: Option<Child>,
    /// The port of its web UI and HTTP API (on 127.0.0.1).
    pub port: u16,
    dir: PathBuf,
}

/// The config file: scrape `targets` every [`SCRAPE_INTERVAL`] under job
/// [`JOB`], and evaluate `rules` (if any) as often.
fn config(targets: &[SocketAddr], rules: Option<&Path>) -> String {
    let secs = SCRAPE_INTERVAL.as_secs().max(1);
    let mut c = String::new();
    writeln!(c, "global:").unwrap();
    writeln!(c, "  scrape_interval: {secs}s").unwrap();
    writeln!(c, "  scrape_timeout: {secs}s").unwrap();
    writeln!(c, "  evaluation_interval: {secs}s").unwrap();
    if let Some(rules) = rules {
        writeln!(c, "rule_files:").unwrap();
        // A JSON string is a valid YAML double-quoted scalar.
        writeln!(c, "  - {}", Value::from(rules.display().to_string())).unwrap();
    }
    writeln!(c, "scrape_configs:").unwrap();
    writeln!(c, "  - job_name: {JOB}").unwrap();
    writeln!(c, "    static_configs:").unwrap();
    writeln!(c, "      - targets:").unwrap();
    for t in targets {
        writeln!(c, "          - \"{t}\"").unwrap();
    }
    c
}

/// `GET url?params` (the parameters percent-encoded by ureq): the status
/// code and the body, whatever the status.
fn http_get(url: &str, params: &[(&str, &str)]) -> Result<(u16, String), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(REQUEST_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .get(url)
        .query_pairs(params.iter().copied())
        .call()
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("read the answer to GET {url}: {e}"))?;
    Ok((status, body))
}

/// The result of an instant query: one sample per series.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The series' labels (`__name__` included when the expression kept it).
    pub labels: std::collections::BTreeMap<String, String>,
    /// The value (`NaN` when Prometheus answered `"NaN"`).
    pub value: f64,
}

impl Prometheus {
    /// Start Prometheus on a free port, scraping `targets` (each a
    /// `host:port` serving `/metrics`) every [`SCRAPE_INTERVAL`], and
    /// loading `rules` (a rules file) when given; wait (at most 30 s) until
    /// `/-/ready` answers 200. Panics with the install command when
    /// `prometheus` is missing, and with the end of its log when it does not
    /// come up.
    pub fn start(targets: &[SocketAddr], rules: Option<&Path>) -> Self {
        let rules = rules.map(|r| {
            std::fs::canonicalize(r).unwrap_or_else(|e| panic!("rules file {}: {e}", r.display()))
        });
        for _ in 0..10 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "relaylock-prometheus-{port}-{}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("data"))
                .unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
            let config_file = dir.join("prometheus.yml");
            std::fs::write(&config_file, config(targets, rules.as_deref()))
                .unwrap_or_else(|e| panic!("write {}: {e}", config_file.display()));
            let log = std::fs::File::create(dir.join("prometheus.log"))
                .unwrap_or_else(|e| panic!("create the log in {}: {e}", dir.display()));
            let child = Command::new("prometheus")
                .arg(format!("--config.file={}", config_file.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| {
                    let _ = std::fs::remove_dir_all(&dir);
                    match e.kind() {
                        std::io::ErrorKind::NotFound => panic!("{PROMETHEUS_INSTALL_HINT}"),
                        _ => panic!("could not run prometheus: {e}"),
                    }
                });
            // From here on, drop kills it and removes the dir.
            let mut p = Prometheus {
                child: Some(child),
                port,
                dir,
            };
            let started = Instant::now();
            loop {
                if matches!(
                    http_get(&format!("http://127.0.0.1:{port}/-/ready"), &[]),
                    Ok((200, _))
                ) {
                    return p;
                }
                let exited = p.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                if let Some(status) = exited {
                    let log = p.log_tail();
                    if log.contains("address already in use") {
                        break; // another port
                    }
                    panic!("prometheus exited ({status}) before it was ready:\n{log}");
                }
                assert!(
                    started.elapsed() < READY_WITHIN,
                    "prometheus was not ready within {READY_WITHIN:?} on port {port}:\n{}",
                    p.log_tail()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("could not start prometheus on a free port after 10 tries");
    }

    /// The base URL of its web UI and HTTP API.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The last 40 lines of Prometheus's own log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `GET /api/v1/<endpoint>?<params>` (each value percent-encoded):
    /// the `data` of a `"status": "success"` answer, or the error.
    pub fn api(&self, endpoint: &str, params: &[(&str, &str)]) -> Result<Value, String> {
        let path = format!("{}/api/v1/{endpoint}", self.url());
        let (status, body) = http_get(&path, params)?;
        let json: Value = serde_json::from_str(&body)
            .map_err(|e| format!("GET {path}: {status}, not JSON ({e}): {body}"))?;
        if status != 200 || json["status"] != "success" {
            return Err(format!(
                "GET {path}: {status} {}: {}",
                json["errorType"], json["error"]
            ));
        }
        Ok(json["data"].clone())
    }

    /// Run the PromQL `expr` as an instant query at the current time
    /// (`/api/v1/query`): the samples of a vector result, or one unlabelled
    /// sample for a scalar. An error for a query Prometheus rejects or a
    /// result of another type.
    pub fn query(&self, expr: &str) -> Result<Vec<Sample>, String> {
        let data = self.api("query", &[("query", expr)])?;
        let value = |v: &Value| -> Result<f64, String> {
            v[1].as_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("{expr}: bad sample value {v}"))
        };
        match data["resultType"].as_str() {
            Some("vector") => data["result"]
                .as_array()
                .ok_or_else(|| format!("{expr}: no result in {data}"))?
                .iter()
                .map(|s| {
                    let labels = s["metric"]
                        .as_object()
                        .ok_or_else(|| format!("{expr}: no metric in {s}"))?
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                        .collect();
                    Ok(Sample {
                        labels,
                        value: value(&s["value"])?,
                    })
                })
                .collect(),
            Some("scalar") => Ok(vec![Sample {
                labels: Default::default(),
                value: value(&data["result"])?,
            }]),
            other => Err(format!("{expr}: result type {other:?}, not a vector")),
        }
    }

    /// The values of `label` over the series matching `selector`, as
    /// Grafana's `label_values(<selector>, <label>)` asks for them
    /// (`/api/v1/label/<label>/values?match[]=<selector>`).
    pub fn label_values(&self, selector: &str, label: &str) -> Result<Vec<String>, String> {
        let data = self.api(&format!("label/{label}/values"), &[("match[]", selector)])?;
        data.as_array()
            .ok_or_else(|| format!("label values of {label}: {data}"))?
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("label value {v}"))
            })
            .collect()
    }

    /// Every rule loaded from the rules files (`/api/v1/rules`), each as
    /// Prometheus describes it (`name`, `query`, `health`, `lastError`,
    /// `state`, ...).
    pub fn rules(&self) -> Result<Vec<Value>, String> {
        let data = self.api("rules", &[])?;
        let mut rules = Vec::new();
        for group in data["groups"].as_array().into_iter().flatten() {
            rules.extend(group["rules"].as_array().into_iter().flatten().cloned());
        }
        Ok(rules)
    }

    /// Wait (at most `limit`) until Prometheus has scraped every target
    /// successfully at least `scrapes` times in the last minute. Panics
    /// with the targets' state and the log otherwise.
    pub fn wait_scraped(&self, scrapes: u32, limit: Duration) {
        let expr = format!("min(sum_over_time(up{{job=\"{JOB}\"}}[1m]))");
        let started = Instant::now();
        loop {
            let seen = self
                .query(&expr)
                .ok()
                .and_then(|s| s.first().map(|s| s.value));
            if seen.is_some_and(|n| n >= f64::from(scrapes)) {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "not {scrapes} successful scrapes within {limit:?} ({expr} = {seen:?}); targets: {}\n{}",
                self.api("targets", &[]).unwrap_or_else(|e| e.into()),
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
