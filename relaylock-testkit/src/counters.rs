//! relaylock's counters as a test reads them: a process-wide debugging
//! recorder, installed by the first read, so a test binary that uses this
//! module has it as its only recorder. Tests in parallel keep their counts
//! apart by giving their locks names of their own ([`named`]).

use std::sync::OnceLock;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use relaylock::{metrics as names, LockClient, LockOptions};

/// The value of counter `name` with exactly the labels `labels` (plus
/// `primitive="mutex"` unless they name another primitive: every series
/// carries one).
pub fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    let snapshotter = SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("install the test recorder");
        snapshotter
    });
    let mut want: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if !want.iter().any(|(k, _)| k == "primitive") {
        want.push(("primitive".into(), "mutex".into()));
    }
    want.sort();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        let mut have: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        have.sort();
        if key.name() == name && have == want {
            if let DebugValue::Counter(c) = value {
                return c;
            }
        }
    }
    0
}

/// Renewals of the locks named `name` that ended in `outcome` (`renewed`,
/// `lost`, `error`).
pub fn renewals(name: &str, outcome: &str) -> u64 {
    counter(
        names::RENEWALS_TOTAL,
        &[("name", name), ("outcome", outcome)],
    )
}

/// Losses of the locks named `name`.
pub fn lost(name: &str) -> u64 {
    counter(names::LOST_TOTAL, &[("name", name)])
}

/// Options whose metrics carry the label `name`.
pub fn named(name: &'static str) -> LockOptions {
    LockOptions::default().name(name)
}

/// A client of `url` whose watchdog locks have `lease` (renewed every
/// `lease / 3`), built after the recorder is installed, so that its metrics
/// are recorded.
pub async fn watched_client(url: &str, lease: Duration) -> LockClient {
    // Install the recorder before the first metric is recorded.
    counter("", &[]);
    crate::preset(url)
        .default_lease(lease)
        .build()
        .await
        .expect("connect")
}
