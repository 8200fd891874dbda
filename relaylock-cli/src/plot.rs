//! The sweep plot: Redis commands, Redis CPU and p99 wait per acquisition
//! against the number of waiters (or of keys, for a keys sweep), one line
//! per strategy, log scales; one legend above the panels (never over the
//! data), and the run's length dashed in the p99 panel, which it caps.

use std::path::Path;

use plotters::prelude::*;

use crate::bench::Row;

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

type Metric = (&'static str, fn(&Row) -> f64);

pub fn sweep(path: &Path, rows: &[Row]) -> Result<(), String> {
    let metrics: [Metric; 4] = [
        ("Redis commands per acquisition", |r| r.redis_cmds_per_acq),
        ("Redis CPU per acquisition (us)", |r| r.redis_cpu_us_per_acq),
        ("acquisitions per Redis CPU-second", Row::capacity),
        ("p99 wait (ms)", |r| r.wait_p99_ms),
    ];
    let mut strategies: Vec<&str> = Vec::new();
    for r in rows {
        if !strategies.contains(&r.strategy.as_str()) {
            strategies.push(&r.strategy);
        }
    }
    // The x axis is what the sweep varies: the keys, the processes, or
    // (otherwise) the waiters.
    let by_keys = rows.iter().any(|r| r.keys != rows[0].keys);
    let by_processes = rows.iter().any(|r| r.processes != rows[0].processes);
    let x = |r: &Row| {
        if by_keys {
            r.keys as f64
        } else if by_processes {
            r.processes as f64
        } else {
            r.workers as f64
        }
    };
    let (x_min, x_max) = rows.iter().fold((f64::MAX, f64::MIN), |(lo, hi), r| {
        (lo.min(x(r)), hi.max(x(r)))
    });
    let (x_min, x_max) = (x_min / 1.3, x_max * 1.3);
    let err = |e: &dyn std::fmt::Display| e.to_string();

    let root = SVGBackend::new(path, (2000, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let title = if by_keys {
        format!(
            "relaylock bench: {} process(es), {} waiters each, hold {} ms",
            rows[0].processes, rows[0].workers, rows[0].hold_ms
        )
    } else if by_processes {
        format!(
            "relaylock bench: {} key(s), {} waiters per process, hold {} ms",
            rows[0].keys, rows[0].workers, rows[0].hold_ms
        )
    } else {
        format!(
            "relaylock bench: {} process(es), {} key(s), hold {} ms",
            rows[0].processes, rows[0].keys, rows[0].hold_ms
        )
    };
    let root = root
        .titled(&title, ("sans-serif", 22))
        .map_err(|e| err(&e))?;
    // One legend for the four panels, in a strip of its own above them:
    // inside a panel it covered the lines.
    let (legend, panels) = root.split_vertically(36);
    draw_legend(&legend, &strategies).map_err(|e| err(&e))?;
    // The longest wait a run can see is its own length: a p99 near it is
    // capped by the run, not measured.
    let run_ms = rows
        .iter()
        .map(|r| r.duration_s * 1e3)
        .fold(f64::MIN, f64::max);
    let capped = rows.iter().any(crate::bench::p99_capped);
    for (n, (area, (name, value))) in panels.split_evenly((1, 4)).iter().zip(metrics).enumerate() {
        let p99 = n == 3;
        let values: Vec<f64> = rows
            .iter()
            .map(value)
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        if values.is_empty() {
            continue;
        }
        let y_min = values.iter().copied().fold(f64::MAX, f64::min) / 1.5;
        let mut y_max = values.iter().copied().fold(f64::MIN, f64::max) * 1.5;
        if p99 {
            y_max = y_max.max(run_ms * 1.5);
        }
        let caption = match (p99, capped) {
            (true, true) => format!("{name}; dashed: the run's length (caps it)"),
            (true, false) => format!("{name}; dashed: the run's length"),
            _ => name.to_owned(),
        };
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(if by_keys {
                "keys the waiters pick from"
            } else if by_processes {
                "processes (one client each)"
            } else {
                "waiters (tasks per process)"
            })
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_labels(6)
            .y_label_formatter(&|y| {
                if *y >= 10.0 {
                    format!("{y:.0}")
                } else {
                    format!("{y:.2}")
                }
            })
            .draw()
            .map_err(|e| err(&e))?;
        for (i, s) in strategies.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.strategy == *s)
                .map(|r| (x(r), value(r)))
                .filter(|(_, y)| y.is_finite() && *y > 0.0)
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(|e| err(&e))?;
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| err(&e))?;
        }
        if p99 {
            chart
                .draw_series(dashes(x_min, x_max, run_ms))
                .map_err(|e| err(&e))?;
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// One legend for every panel: each strategy's colour and name, in a row.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    strategies: &[&str],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    for (i, s) in strategies.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let x0 = 60 + 190 * i as i32;
        area.draw(&PathElement::new(
            vec![(x0, 18), (x0 + 30, 18)],
            color.stroke_width(3),
        ))?;
        area.draw(&Text::new(
            s.to_string(),
            (x0 + 38, 10),
            ("sans-serif", 16).into_font(),
        ))?;
    }
    Ok(())
}

/// Dashes along `y` across a log-scaled x axis from `x_min` to `x_max`.
fn dashes(x_min: f64, x_max: f64, y: f64) -> impl Iterator<Item = PathElement<(f64, f64)>> {
    let steps = 40;
    let ratio = (x_max / x_min).powf(1.0 / f64::from(steps));
    (0..steps).step_by(2).map(move |i| {
        let a = x_min * ratio.powi(i);
        PathElement::new(vec![(a, y), (a * ratio, y)], BLACK.stroke_width(1))
    })
}
