//! Runs `relaylock bench` for the CLI's tests.

/// `relaylock bench <args> --json`: asserts it succeeded and returns its
/// JSON rows, in order, and its whole standard output (for messages).
#[allow(dead_code)] // not every test binary that includes this module runs bench
pub fn bench(args: &[&str]) -> (Vec<serde_json::Value>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_relaylock"))
        .arg("bench")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (rows, stdout)
}

/// `relaylock <args>`, run to its end: its exit status (-1 when a signal
/// ended it), standard output and standard error.
#[allow(dead_code)] // not every test binary that includes this module runs the CLI this way
pub async fn relaylock(args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_relaylock"))
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
