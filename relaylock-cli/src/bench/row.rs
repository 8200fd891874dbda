//! [`Row`]: one run's results, as the report prints them and the JSON lines
//! save them; what the runner writes and the table and the plots read.

use serde::Serialize;

/// A figure that could not be computed (no acquisition, no RTT probe with
/// `--no-rtt`) is NaN, which JSON writes as `null`: read it back as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    use serde::Deserialize;
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// One line of the report.
#[derive(Serialize, serde::Deserialize, Debug, Clone)]
pub struct Row {
    pub strategy: String,
    pub workers: usize,
    pub processes: usize,
    pub keys: usize,
    pub hold_ms: f64,
    pub duration_s: f64,
    pub acquisitions: u64,
    pub acq_per_s: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub wait_p50_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub wait_p99_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub wait_max_ms: f64,
    pub handoff_p50_ms: Option<f64>,
    pub handoff_p99_ms: Option<f64>,
    #[serde(deserialize_with = "nan_if_null")]
    pub hold_p50_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub redis_requests_per_acq: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub redis_cmds_per_acq: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub redis_cpu_us_per_acq: f64,
    /// Redis's user CPU alone per acquisition (`used_cpu_user` from `INFO
    /// cpu`). `None` when a saved result lacks it.
    #[serde(default)]
    pub redis_user_us_per_acq: Option<f64>,
    /// Keys the run left in Redis at its end (records and tombstones kept
    /// for their retention, the clients' records): `DBSIZE` after minus
    /// before. `None` when a saved result lacks it.
    #[serde(default)]
    pub retained_keys: Option<u64>,
    /// Redis memory per retained key: `used_memory` after minus before,
    /// over [`retained_keys`](Self::retained_keys); `None` when nothing was
    /// retained.
    #[serde(default)]
    pub retained_bytes_per_key: Option<f64>,
    /// The worker processes' own CPU time (user + system, every thread) per
    /// acquisition, from `go` to `stop`. `None` when a saved result lacks it.
    #[serde(default)]
    pub client_cpu_us_per_acq: Option<f64>,
    #[serde(deserialize_with = "nan_if_null")]
    pub attempts_per_acq: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub jain_fairness: f64,
    pub violations: u64,
    #[serde(deserialize_with = "nan_if_null")]
    pub rtt_p50_ms: f64,
    pub handoff_p50_rtts: Option<f64>,
    pub peak_rss_mib: f64,
    pub errors: u64,
    /// `onebyone:<ms>`: sets released and started over after a lock's wait
    /// ran out (a deadlock broken, or a lost race). `None` otherwise.
    #[serde(default)]
    pub restarts: Option<u64>,
    pub lost: u64,
    pub first_error: Option<String>,
    pub redis_benchmark_evalsha_per_s: Option<f64>,
    pub pairs_vs_half_evalsha: Option<f64>,
}

impl Row {
    /// Capacity: acquisitions one Redis core serves per second of its CPU
    /// at this cost (1 / Redis CPU per acquisition).
    pub fn capacity(&self) -> f64 {
        1e6 / self.redis_cpu_us_per_acq
    }
}

/// Whether a row's p99 wait is capped by the run: within a tenth of its
/// length, where no longer wait could be seen.
pub fn p99_capped(r: &Row) -> bool {
    r.wait_p99_ms >= 0.9 * r.duration_s * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_row_with_nan_figures_reads_back() {
        let line = r#"{"strategy":"pubsub","workers":1,"processes":1,"keys":1,"hold_ms":0.0,"duration_s":1.0,"acquisitions":0,"acq_per_s":0.0,"wait_p50_ms":null,"wait_p99_ms":null,"wait_max_ms":null,"handoff_p50_ms":null,"handoff_p99_ms":null,"hold_p50_ms":null,"redis_requests_per_acq":null,"redis_cmds_per_acq":null,"redis_cpu_us_per_acq":null,"attempts_per_acq":null,"jain_fairness":null,"violations":0,"rtt_p50_ms":null,"handoff_p50_rtts":null,"peak_rss_mib":1.0,"errors":0,"lost":0,"first_error":null,"redis_benchmark_evalsha_per_s":null,"pairs_vs_half_evalsha":null}"#;
        let row: Row = serde_json::from_str(line).unwrap();
        assert!(row.rtt_p50_ms.is_nan() && row.redis_cpu_us_per_acq.is_nan());
        assert_eq!(row.client_cpu_us_per_acq, None);
    }
}
