//! The sweep plot: Redis commands, Redis CPU and p99 wait per acquisition
//! against the number of waiters (or of keys, for a keys sweep), one line
//! per strategy, log scales; one legend above the panels (never over the
//! data), and the run's length dashed in the p99 panel, which it caps.

use std::ops::Range;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::bench::row::{p99_capped, Row};

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// One panel: its caption and the figure it plots for a row.
struct Metric {
    name: &'static str,
    value: fn(&Row) -> f64,
    /// The p99 wait, which no run can see beyond its own length: that
    /// length is dashed across the panel.
    capped_by_run: bool,
}

impl Metric {
    fn caption(&self, run: &RunLength) -> String {
        match (self.capped_by_run, run.caps) {
            (true, true) => format!("{}; dashed: the run's length (caps it)", self.name),
            (true, false) => format!("{}; dashed: the run's length", self.name),
            _ => self.name.to_owned(),
        }
    }
}

/// The panels, left to right.
const METRICS: [Metric; 4] = [
    Metric {
        name: "Redis commands per acquisition",
        value: |r| r.redis_cmds_per_acq,
        capped_by_run: false,
    },
    Metric {
        name: "Redis CPU per acquisition (us)",
        value: |r| r.redis_cpu_us_per_acq,
        capped_by_run: false,
    },
    Metric {
        name: "acquisitions per Redis CPU-second",
        value: Row::capacity,
        capped_by_run: false,
    },
    Metric {
        name: "p99 wait (ms)",
        value: |r| r.wait_p99_ms,
        capped_by_run: true,
    },
];

/// What the sweep varies, which is the x axis: the keys or the processes
/// where the rows differ in them (keys first), otherwise the waiters.
#[derive(Clone, Copy)]
enum Axis {
    Keys,
    Processes,
    Waiters,
}

impl Axis {
    fn of(rows: &[Row]) -> Self {
        if rows.iter().any(|r| r.keys != rows[0].keys) {
            Axis::Keys
        } else if rows.iter().any(|r| r.processes != rows[0].processes) {
            Axis::Processes
        } else {
            Axis::Waiters
        }
    }

    fn x(self, r: &Row) -> f64 {
        match self {
            Axis::Keys => r.keys as f64,
            Axis::Processes => r.processes as f64,
            Axis::Waiters => r.workers as f64,
        }
    }

    /// The plot's title: what the sweep held fixed, from its first row.
    fn title(self, first: &Row) -> String {
        match self {
            Axis::Keys => format!(
                "relaylock bench: {} process(es), {} waiters each, hold {} ms",
                first.processes, first.workers, first.hold_ms
            ),
            Axis::Processes => format!(
                "relaylock bench: {} key(s), {} waiters per process, hold {} ms",
                first.keys, first.workers, first.hold_ms
            ),
            Axis::Waiters => format!(
                "relaylock bench: {} process(es), {} key(s), hold {} ms",
                first.processes, first.keys, first.hold_ms
            ),
        }
    }

    fn desc(self) -> &'static str {
        match self {
            Axis::Keys => "keys the waiters pick from",
            Axis::Processes => "processes (one client each)",
            Axis::Waiters => "waiters (tasks per process)",
        }
    }
}

/// What every panel shares: the rows, their strategies in order of first
/// appearance (which sets each one's colour), and the x axis with its span.
struct Frame<'a> {
    rows: &'a [Row],
    strategies: Vec<&'a str>,
    axis: Axis,
    /// The rows' x values, widened by a factor of 1.3 either way.
    x: Range<f64>,
}

impl<'a> Frame<'a> {
    fn new(rows: &'a [Row]) -> Self {
        let mut strategies: Vec<&str> = Vec::new();
        for r in rows {
            if !strategies.contains(&r.strategy.as_str()) {
                strategies.push(&r.strategy);
            }
        }
        let axis = Axis::of(rows);
        let (x_min, x_max) = rows.iter().fold((f64::MAX, f64::MIN), |(lo, hi), r| {
            (lo.min(axis.x(r)), hi.max(axis.x(r)))
        });
        Frame {
            rows,
            strategies,
            axis,
            x: x_min / 1.3..x_max * 1.3,
        }
    }
}

/// The longest wait a run can see is its own length: a p99 near it is
/// capped by the run, not measured.
struct RunLength {
    /// The longest run's length.
    ms: f64,
    /// Whether some row's p99 is capped by it.
    caps: bool,
}

impl RunLength {
    fn of(rows: &[Row]) -> Self {
        RunLength {
            ms: rows
                .iter()
                .map(|r| r.duration_s * 1e3)
                .fold(f64::MIN, f64::max),
            caps: rows.iter().any(p99_capped),
        }
    }
}

pub fn sweep(path: &Path, rows: &[Row]) -> Result<(), String> {
    let frame = Frame::new(rows);
    let root = SVGBackend::new(path, (2000, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(&frame.axis.title(&rows[0]), ("sans-serif", 22))
        .map_err(|e| e.to_string())?;
    // One legend for the four panels, in a strip of its own above them, so
    // that it covers none of their lines.
    let (legend, panels) = root.split_vertically(36);
    draw_legend(&legend, &frame.strategies).map_err(|e| e.to_string())?;
    let run = RunLength::of(rows);
    for (area, metric) in panels.split_evenly((1, 4)).iter().zip(&METRICS) {
        draw_panel(area, &frame, metric, &run)?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// One panel: each strategy's line of `metric` on log scales, and for the
/// p99 wait the run's length dashed. A panel with no positive finite value
/// stays empty.
fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    frame: &Frame<'_>,
    metric: &Metric,
    run: &RunLength,
) -> Result<(), String> {
    let value = metric.value;
    let values: Vec<f64> = frame
        .rows
        .iter()
        .map(value)
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    if values.is_empty() {
        return Ok(());
    }
    let y_min = values.iter().copied().fold(f64::MAX, f64::min) / 1.5;
    let mut y_max = values.iter().copied().fold(f64::MIN, f64::max) * 1.5;
    if metric.capped_by_run {
        y_max = y_max.max(run.ms * 1.5);
    }
    let mut chart = ChartBuilder::on(area)
        .caption(metric.caption(run), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(frame.x.clone().log_scale(), (y_min..y_max).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(frame.axis.desc())
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
        .map_err(|e| e.to_string())?;
    draw_lines(&mut chart, frame, value)?;
    if metric.capped_by_run {
        chart
            .draw_series(dashes(frame.x.start, frame.x.end, run.ms))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Each strategy's points of `value`, joined by a line, in its colour.
fn draw_lines(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<LogCoord<f64>, LogCoord<f64>>>,
    frame: &Frame<'_>,
    value: fn(&Row) -> f64,
) -> Result<(), String> {
    for (i, s) in frame.strategies.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = frame
            .rows
            .iter()
            .filter(|r| r.strategy == *s)
            .map(|r| (frame.axis.x(r), value(r)))
            .filter(|(_, y)| y.is_finite() && *y > 0.0)
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// One legend for every panel: each strategy's colour and name, in a row.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
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
