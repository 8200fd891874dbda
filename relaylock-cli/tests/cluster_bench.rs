//! The load test against a real Redis Cluster.

use relaylock_testkit::cluster::RedisCluster;

/// The load test runs against the cluster (`relaylock bench --url
/// redis-cluster://...`), summing server statistics over every primary.
#[test]
fn the_load_test_runs_against_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_relaylock"))
        .args([
            "bench",
            "--url",
            &cluster.url(),
            "--workers",
            "16",
            "--keys",
            "4",
        ])
        .args(["--duration", "2s", "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row: serde_json::Value = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .expect("a JSON row");
    println!("cluster bench: {row}");
    assert!(row["acquisitions"].as_u64().unwrap() > 0);
    assert_eq!(row["violations"].as_u64(), Some(0));
    // Server statistics came from the cluster's primaries.
    assert!(row["redis_requests_per_acq"].as_f64().unwrap() > 0.0);
}
