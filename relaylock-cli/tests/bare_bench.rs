//! `relaylock bench --strategy bare:<ms>`, the seeds' lock as a baseline,
//! next to relaylock on a redis-server the bench starts itself.

mod common;

#[test]
fn the_bare_baseline_runs_beside_relaylock() {
    let (rows, stdout) = common::bench(&[
        "--strategy",
        "pubsub",
        "--strategy",
        "bare:5",
        "--workers",
        "8",
        "--keys",
        "2",
        "--duration",
        "1s",
    ]);
    assert_eq!(rows.len(), 2, "{stdout}");
    for row in &rows {
        println!("{row}");
        assert!(row["acquisitions"].as_u64().unwrap() > 0, "{row}");
        assert_eq!(row["violations"].as_u64(), Some(0), "{row}");
        assert!(row["redis_cmds_per_acq"].as_f64().unwrap() > 0.0, "{row}");
    }
    assert_eq!(rows[1]["strategy"], "bare:5");
    // The bare lock issues at least one SET per acquisition, and its
    // requests are its SETs plus one release script call.
    let attempts = rows[1]["attempts_per_acq"].as_f64().unwrap();
    let requests = rows[1]["redis_requests_per_acq"].as_f64().unwrap();
    assert!(attempts >= 1.0, "{attempts}");
    assert!(
        (requests - attempts - 1.0).abs() < 0.1,
        "{requests} requests for {attempts} attempts"
    );
}
