//! The load test against a real Redis Cluster.

use relaylock_testkit::cluster::RedisCluster;

mod common;

/// The load test runs against the cluster (`relaylock bench --url
/// redis-cluster://...`), summing server statistics over every primary.
#[test]
fn the_load_test_runs_against_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let url = cluster.url();
    let (rows, stdout) = common::bench(&[
        "--url",
        &url,
        "--workers",
        "16",
        "--keys",
        "4",
        "--duration",
        "2s",
    ]);
    let row = rows
        .first()
        .unwrap_or_else(|| panic!("a JSON row: {stdout}"));
    println!("cluster bench: {row}");
    assert!(row["acquisitions"].as_u64().unwrap() > 0);
    assert_eq!(row["violations"].as_u64(), Some(0));
    // Server statistics came from the cluster's primaries.
    assert!(row["redis_requests_per_acq"].as_f64().unwrap() > 0.0);
}
