//! How `relaylock bench` and `relaylock report` print rows: the terminal
//! table (ten columns, or every one) and the markdown table.

use crate::bench::row::{p99_capped, Row};

/// A CPU figure in µs with one decimal, or `-` where it was not measured.
fn fmt_us(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3}"))
}

/// The table's header, its first column `w` wide.
fn print_header(w: usize, wide: bool) {
    if wide {
        println!(
            "{:<w$} {:>7} {:>5} {:>8} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9} {:>13} {:>12} {:>8} {:>9} {:>8} {:>9} {:>8} {:>8} {:>10} {:>7} {:>8} {:>7}",
            "strategy", "workers", "procs", "acq", "acq/s", "wait_p50_ms", "wait_p99_ms", "handoff50", "handoff99", "req/acq",
            "redis_cmd/acq", "redis_us/acq", "user_us", "acq/cpu_s", "cli_us", "att/acq", "rtt50", "fairness", "violations", "rss_MiB",
            "left", "B/left"
        );
    } else {
        println!(
            "{:<w$} {:>7} {:>5} {:>9} {:>11} {:>11} {:>13} {:>12} {:>8} {:>10}",
            "strategy",
            "workers",
            "procs",
            "acq/s",
            "wait_p50_ms",
            "wait_p99_ms",
            "redis_cmd/acq",
            "redis_us/acq",
            "fairness",
            "violations"
        );
    }
}

/// The table: ten columns, or every one with `wide` (see [`LEGEND`]).
pub fn print_table(rows: &[Row], wide: bool) {
    // The strategy column fits the longest name (`onebyone:10 x2-8`).
    let w = rows
        .iter()
        .map(|r| r.strategy.len())
        .max()
        .unwrap_or(0)
        .max(9);
    let p99 = |r: &Row| {
        format!(
            "{:.3}{}",
            r.wait_p99_ms,
            if p99_capped(r) { "*" } else { "" }
        )
    };
    print_header(w, wide);
    for r in rows {
        if wide {
            println!(
                "{:<w$} {:>7} {:>5} {:>8} {:>9.0} {:>11.3} {:>11} {:>9} {:>9} {:>9.3} {:>13.3} {:>12.2} {:>8} {:>9.0} {:>8} {:>9.3} {:>8.3} {:>8.3} {:>10} {:>7.1} {:>8} {:>7}",
                r.strategy, r.workers, r.processes, r.acquisitions, r.acq_per_s, r.wait_p50_ms, p99(r),
                fmt_opt(r.handoff_p50_ms), fmt_opt(r.handoff_p99_ms), r.redis_requests_per_acq,
                r.redis_cmds_per_acq, r.redis_cpu_us_per_acq, fmt_us(r.redis_user_us_per_acq), r.capacity(),
                fmt_us(r.client_cpu_us_per_acq), r.attempts_per_acq, r.rtt_p50_ms,
                r.jain_fairness, r.violations, r.peak_rss_mib,
                r.retained_keys.map_or("-".into(), |k| k.to_string()),
                r.retained_bytes_per_key.map_or("-".into(), |b| format!("{b:.0}"))
            );
        } else {
            println!(
                "{:<w$} {:>7} {:>5} {:>9.0} {:>11.3} {:>11} {:>13.3} {:>12.2} {:>8.3} {:>10}",
                r.strategy,
                r.workers,
                r.processes,
                r.acq_per_s,
                r.wait_p50_ms,
                p99(r),
                r.redis_cmds_per_acq,
                r.redis_cpu_us_per_acq,
                r.jain_fairness,
                r.violations
            );
        }
        if let (Some(rate), Some(ratio)) =
            (r.redis_benchmark_evalsha_per_s, r.pairs_vs_half_evalsha)
        {
            println!("          redis-benchmark EVALSHA {rate:.0}/s; lock+release pairs / (EVALSHA/2) = {ratio:.3}");
        }
        if r.errors > 0 || r.lost > 0 {
            println!(
                "          errors {} lost {} first error: {}",
                r.errors,
                r.lost,
                r.first_error.as_deref().unwrap_or("-")
            );
        }
    }
    for r in rows {
        if let Some(n) = r.restarts {
            println!(
                "          {}: {n} restarts (sets released and taken again after a wait ran out)",
                r.strategy
            );
        }
    }
    if rows.iter().any(p99_capped) {
        println!(
            "* a p99 near the run's length: waits were cut by the end of the run (run longer)"
        );
    }
    if !wide {
        println!("(relaylock bench --help explains each column; --wide shows twelve more)");
    }
}

/// The report as a markdown table. Rows measured with Redis's user CPU and
/// the memory a run leaves add three columns (saved results from before
/// print as they did).
pub fn print_markdown(rows: &[Row]) {
    let more = rows.iter().any(|r| r.redis_user_us_per_acq.is_some());
    let (head, rule) = if more {
        (
            " Redis user CPU us/acq | keys left | B per key left |",
            "---:|---:|---:|",
        )
    } else {
        ("", "")
    };
    println!(
        "| strategy | waiters | processes | keys | acq/s | wait p50 ms | wait p99 ms | handoff p50 ms | handoff p99 ms | rtt p50 ms | requests/acq | cmds/acq | Redis CPU us/acq | acq per Redis CPU-s | client CPU us/acq | attempts/acq | Jain | violations | peak RSS MiB |{head}"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|{rule}");
    for r in rows {
        let extra = if more {
            format!(
                " {} | {} | {} |",
                fmt_us(r.redis_user_us_per_acq),
                r.retained_keys.map_or("-".into(), |k| k.to_string()),
                r.retained_bytes_per_key
                    .map_or("-".into(), |b| format!("{b:.0}"))
            )
        } else {
            String::new()
        };
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {} | {} | {:.3} | {:.2} | {:.1} | {:.1} | {:.0} | {} | {:.3} | {:.3} | {} | {:.1} |{extra}",
            r.strategy, r.workers, r.processes, r.keys, r.acq_per_s, r.wait_p50_ms, r.wait_p99_ms,
            fmt_opt(r.handoff_p50_ms), fmt_opt(r.handoff_p99_ms), r.rtt_p50_ms,
            r.redis_requests_per_acq, r.redis_cmds_per_acq, r.redis_cpu_us_per_acq,
            r.capacity(), fmt_us(r.client_cpu_us_per_acq),
            r.attempts_per_acq, r.jain_fairness, r.violations, r.peak_rss_mib
        );
    }
}
