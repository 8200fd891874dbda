//! What `relaylock bench` shows a person (issue 36): ten columns that
//! `--help` explains (nineteen with `--wide`), no progress lines when its
//! output is not a terminal, and a plot whose one legend stands outside the
//! panels and whose p99 panel shows the run's length, which caps it.

use std::process::Command;

fn bench(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_relaylock"))
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    (stdout, stderr)
}

#[test]
fn the_table_is_explained_and_quiet_off_a_terminal() {
    let (help, _) = bench(&["--help"]);
    for column in [
        "acq/s",
        "wait_p50_ms",
        "wait_p99_ms",
        "redis_cmd/acq",
        "redis_us/acq",
        "fairness",
        "violations",
        "+att/acq",
        "+cli_us",
        "+user_us",
        "+left",
        "+B/left",
    ] {
        assert!(help.contains(column), "--help does not explain {column}");
    }
    let quick = [
        "--duration",
        "1500ms",
        "--workers",
        "4",
        "--strategy",
        "pubsub",
    ];
    let (out, err) = bench(&quick);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header.len(), 10, "{out}");
    assert!(out.contains("--help explains each column"), "{out}");
    assert!(!err.contains("acquisitions"), "progress into a pipe: {err}");
    let mut wide = quick.to_vec();
    wide.push("--wide");
    let (out, _) = bench(&wide);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header.len(), 22, "{out}");
}

#[test]
fn the_plot_keeps_its_legend_off_the_data_and_marks_the_run_length() {
    let dir = std::env::temp_dir().join(format!("relaylock-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("sweep.svg");
    let (out, _) = bench(&[
        "--sweep",
        "workers=2,8",
        "--duration",
        "1s",
        "--strategy",
        "pubsub",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let plot = std::fs::read_to_string(&svg).unwrap();
    // One legend entry per strategy (it was drawn in each of the four
    // panels), and the p99 panel says what the dashes are.
    let labels = plot.lines().filter(|l| l.trim() == "pubsub").count();
    assert_eq!(labels, 1, "{out}");
    assert!(plot.contains("run&apos;s length"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
