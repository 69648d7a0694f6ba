//! Throughput and latency charts: the counters read from `jobq.throughput(since, step)`, drawn
//! server-side as inline SVG polylines. When the function is not installed (or fails), a chart
//! says so instead of failing its page.

use crate::db::{Access, AppError};
use crate::layout::{dur, num};
use maud::{html, Markup};
use std::collections::BTreeMap;

/// One row of `jobq.throughput`: one queue, one step-sized bucket with activity.
#[derive(Clone, Debug)]
pub struct Bucket {
    pub queue: String,
    /// Start of the bucket, seconds since the epoch.
    pub t: f64,
    pub enqueued: i64,
    pub started: i64,
    pub completed: i64,
    pub failed: i64,
    pub dead: i64,
    pub wait_p50_ms: Option<f64>,
    pub wait_p95_ms: Option<f64>,
    pub run_p50_ms: Option<f64>,
    pub run_p95_ms: Option<f64>,
}

/// A time window of the charts: the last `secs` seconds in buckets of `step` seconds.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub label: &'static str,
    pub secs: f64,
    pub step: f64,
}

pub const HOUR: Window = Window {
    label: "last hour, per minute",
    secs: 3600.0,
    step: 60.0,
};
pub const DAY: Window = Window {
    label: "last day, per 15 minutes",
    secs: 86_400.0,
    step: 900.0,
};

/// The counters of one window, per queue.
pub enum Counters {
    /// jobq.throughput is not installed, or this role may not execute it.
    Missing,
    /// It failed (message shown in place of the charts).
    Failed(String),
    Loaded {
        now: f64,
        window: Window,
        by_queue: BTreeMap<String, Vec<Bucket>>,
    },
}

impl Counters {
    pub fn of(&self, queue: &str) -> &[Bucket] {
        match self {
            Counters::Loaded { by_queue, .. } => {
                by_queue.get(queue).map(|v| v.as_slice()).unwrap_or(&[])
            }
            _ => &[],
        }
    }

    /// Queues that had activity in the window.
    pub fn queues(&self) -> Vec<String> {
        match self {
            Counters::Loaded { by_queue, .. } => by_queue.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }
}

/// Reads the counters of `window` (of one queue, or all). Never fails the page: an error of
/// the function itself becomes `Counters::Failed`; only a lost connection is an error.
pub async fn load(
    client: &deadpool_postgres::Client,
    access: &Access,
    window: Window,
    queue: Option<&str>,
) -> Result<Counters, AppError> {
    if !access.counters {
        return Ok(Counters::Missing);
    }
    let now: f64 = client
        .query_one("SELECT extract(epoch FROM now())::float8", &[])
        .await?
        .get(0);
    let sql = "SELECT queue, extract(epoch FROM bucket)::float8, enqueued, started, completed, failed, dead,
                      wait_p50_ms, wait_p95_ms, run_p50_ms, run_p95_ms
                 FROM jobq.throughput(to_timestamp($1::float8), make_interval(secs => $2::float8))
                WHERE $3::text IS NULL OR queue = $3
                ORDER BY queue, bucket";
    let since = now - window.secs;
    match client.query(sql, &[&since, &window.step, &queue]).await {
        Ok(rows) => {
            let mut by_queue: BTreeMap<String, Vec<Bucket>> = BTreeMap::new();
            for r in rows {
                let b = Bucket {
                    queue: r.get(0),
                    t: r.get(1),
                    enqueued: r.get(2),
                    started: r.get(3),
                    completed: r.get(4),
                    failed: r.get(5),
                    dead: r.get(6),
                    wait_p50_ms: r.get(7),
                    wait_p95_ms: r.get(8),
                    run_p50_ms: r.get(9),
                    run_p95_ms: r.get(10),
                };
                by_queue.entry(b.queue.clone()).or_default().push(b);
            }
            Ok(Counters::Loaded {
                now,
                window,
                by_queue,
            })
        }
        Err(e) if e.as_db_error().is_some() => Ok(Counters::Failed(
            e.as_db_error()
                .map(|d| d.message().to_string())
                .unwrap_or_default(),
        )),
        Err(e) => Err(e.into()),
    }
}

/// The two charts of one queue in one window: jobs per step, and wait/run time percentiles.
pub fn queue_charts(c: &Counters, queue: &str) -> Markup {
    let (now, window) = match c {
        Counters::Loaded { now, window, .. } => (*now, *window),
        Counters::Missing => {
            return html! { (empty_chart("throughput", "no data: jobq.throughput is not installed in this database")) }
        }
        Counters::Failed(m) => {
            return html! { (empty_chart("throughput", &format!("no data: jobq.throughput failed: {m}"))) }
        }
    };
    let b = c.of(queue);
    let (start, step) = (now - window.secs, window.step);
    let counts = |f: fn(&Bucket) -> i64| zero_filled(b, start, now, step, |x| f(x) as f64);
    let values = |f: fn(&Bucket) -> Option<f64>| {
        b.iter()
            .filter_map(|x| f(x).map(|v| (x.t, v)))
            .collect::<Vec<_>>()
    };
    let through = [
        Series {
            name: "enqueued",
            color: "#6366f1",
            points: counts(|x| x.enqueued),
        },
        Series {
            name: "completed",
            color: "#10b981",
            points: counts(|x| x.completed),
        },
        Series {
            name: "failed",
            color: "#f59e0b",
            points: counts(|x| x.failed),
        },
        Series {
            name: "dead",
            color: "#dc2626",
            points: counts(|x| x.dead),
        },
    ];
    let latency = [
        Series {
            name: "wait p50",
            color: "#93c5fd",
            points: values(|x| x.wait_p50_ms),
        },
        Series {
            name: "wait p95",
            color: "#2563eb",
            points: values(|x| x.wait_p95_ms),
        },
        Series {
            name: "run p50",
            color: "#86efac",
            points: values(|x| x.run_p50_ms),
        },
        Series {
            name: "run p95",
            color: "#059669",
            points: values(|x| x.run_p95_ms),
        },
    ];
    let left = if window.secs >= 86_400.0 {
        "−24 h"
    } else {
        "−60 min"
    };
    html! {
        (line_chart(&format!("jobs per {} ({})", dur(step), window.label), start, now, left, &through, Axis::Count))
        (line_chart(&format!("wait and run time ({})", window.label), start, now, left, &latency, Axis::Millis))
    }
}

pub struct Series {
    pub name: &'static str,
    pub color: &'static str,
    pub points: Vec<(f64, f64)>,
}

/// Counts per bucket with the empty buckets in between drawn as zero (the function returns
/// only buckets with activity).
pub fn zero_filled(
    b: &[Bucket],
    start: f64,
    end: f64,
    step: f64,
    f: impl Fn(&Bucket) -> f64,
) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut prev = start - step;
    for x in b {
        if x.t - prev > 1.5 * step {
            if prev + step >= start {
                out.push((prev + step, 0.0));
            } else {
                out.push((start, 0.0));
            }
            out.push((x.t - step, 0.0));
        }
        out.push((x.t, f(x)));
        prev = x.t;
    }
    if end - prev > 1.5 * step {
        out.push(((prev + step).max(start), 0.0));
        out.push((end, 0.0));
    }
    out
}

const W: f64 = 440.0;
const H: f64 = 150.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 8.0;
const BOTTOM: f64 = 18.0;

/// A chart frame with a message instead of lines.
pub fn empty_chart(title: &str, message: &str) -> Markup {
    html! {
        div.chart {
            div.t { (title) }
            svg width=(W) height=(H) viewBox={"0 0 " (W) " " (H)} role="img" {
                rect x=(LEFT) y=(TOP) width=(W - LEFT - RIGHT) height=(H - TOP - BOTTOM) fill="#fafafa" stroke="#e5e7eb" {}
                text x=((W + LEFT) / 2.0) y=(H / 2.0) text-anchor="middle" font-size="12" fill="#6b7280" { (message) }
            }
        }
    }
}

/// Lines of `series` over [start, end] (seconds since the epoch), y from 0 to a round maximum
/// of `axis` (see `ticks`).
pub fn line_chart(
    title: &str,
    start: f64,
    end: f64,
    left_label: &str,
    series: &[Series],
    axis: Axis,
) -> Markup {
    let max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max);
    if series.iter().all(|s| s.points.iter().all(|p| p.1 == 0.0)) {
        return empty_chart(title, "no activity");
    }
    let ticks = ticks(axis, max);
    let ymax = ticks[2].0;
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let span = (end - start).max(1.0);
    let x = |t: f64| LEFT + ((t - start) / span).clamp(0.0, 1.0) * pw;
    let y = |v: f64| TOP + (1.0 - v / ymax) * ph;
    html! {
        div.chart {
            div.t { (title) }
            svg width=(W) height=(H) viewBox={"0 0 " (W) " " (H)} role="img" {
                @for (v, label) in &ticks {
                    line x1=(LEFT) x2=(W - RIGHT) y1=(y(*v)) y2=(y(*v)) stroke="#e5e7eb" {}
                    text x=(LEFT - 4.0) y=(y(*v) + 4.0) text-anchor="end" font-size="10" fill="#6b7280" { (label) }
                }
                text x=(LEFT) y=(H - 4.0) font-size="10" fill="#6b7280" { (left_label) }
                text x=(W - RIGHT) y=(H - 4.0) text-anchor="end" font-size="10" fill="#6b7280" { "now" }
                @for s in series {
                    @if s.points.len() == 1 {
                        circle cx=(fmt1(x(s.points[0].0))) cy=(fmt1(y(s.points[0].1))) r="2.5" fill=(s.color) { title { (s.name) } }
                    } @else if !s.points.is_empty() {
                        polyline fill="none" stroke=(s.color) stroke-width="1.5"
                            points=(s.points.iter().map(|&(t, v)| format!("{},{}", fmt1(x(t)), fmt1(y(v)))).collect::<Vec<_>>().join(" ")) {
                            title { (s.name) }
                        }
                    }
                }
            }
            div.legend {
                @for s in series { span { i style={"background:" (s.color)} {} (s.name) } }
            }
        }
    }
}

fn fmt1(v: f64) -> String {
    format!("{v:.1}")
}

/// What a chart's values are: it decides the axis's top and how its ticks are written.
#[derive(Clone, Copy, Debug)]
pub enum Axis {
    /// Jobs per step: whole numbers.
    Count,
    /// Durations in milliseconds, written in µs, ms, s, min, h or d.
    Millis,
}

/// The units of a duration axis: name, size in ms, and the tops an axis in it may have (each
/// top's half is exact in the unit too: 2.5 s, 0.5 h). Below a microsecond and from a day on,
/// the tops are 1, 2 or 5 times a power of ten.
const DURATION_UNITS: &[(&str, f64, &[f64])] = &[
    (
        "µs",
        0.001,
        &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0],
    ),
    (
        "ms",
        1.0,
        &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0],
    ),
    ("s", 1000.0, &[1.0, 2.0, 5.0, 10.0, 20.0, 30.0]),
    ("min", 60_000.0, &[1.0, 2.0, 5.0, 10.0, 20.0, 30.0]),
    ("h", 3_600_000.0, &[1.0, 2.0, 3.0, 6.0, 12.0]),
];
const DAY_MS: f64 = 86_400_000.0;

/// The ticks of an axis whose values reach `max`: 0, half the top and the top, as (value,
/// label). The top is round in the unit of the labels, so that every label is exact (0.25 ms,
/// 2.5 s) and the three are distinct.
pub fn ticks(axis: Axis, max: f64) -> [(f64, String); 3] {
    let (top, unit, size) = match axis {
        Axis::Count => (count_top(max), "", 1.0),
        Axis::Millis => duration_top(max),
    };
    [0.0, 0.5, 1.0].map(|f| {
        let v = top * f;
        let label = match axis {
            Axis::Count => num(v.round() as i64),
            Axis::Millis => format!("{} {unit}", decimals(v / size)),
        };
        (v, label)
    })
}

/// The top of a count axis: 2, 4, or 10, 20 or 50 times a power of ten, whose half is a
/// whole number too.
fn count_top(max: f64) -> f64 {
    if max <= 2.0 || !max.is_finite() {
        2.0
    } else if max <= 4.0 {
        4.0
    } else {
        nice_max(max).max(10.0)
    }
}

/// The top of a duration axis (ms) at or above `max`: (top in ms, unit, unit in ms).
fn duration_top(max: f64) -> (f64, &'static str, f64) {
    let (us, us_size, _) = DURATION_UNITS[0];
    if max.is_nan() || max <= us_size {
        return (nice_max(max / us_size) * us_size, us, us_size);
    }
    for (unit, size, tops) in DURATION_UNITS {
        if let Some(t) = tops.iter().find(|t| *t * size >= max) {
            return (t * size, unit, *size);
        }
    }
    (nice_max(max / DAY_MS) * DAY_MS, "d", DAY_MS)
}

/// `v` with the decimals it needs, at most 6: "0.25", "2.5", "100".
fn decimals(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.into()
    }
}

/// The smallest 1, 2 or 5 times a power of ten at or above `m` (1 for nothing).
pub fn nice_max(m: f64) -> f64 {
    if m <= 0.0 || !m.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(m.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|k| k * p)
        .find(|v| *v >= m)
        .unwrap_or(10.0 * p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(t: f64, completed: i64) -> Bucket {
        Bucket {
            queue: "q".into(),
            t,
            enqueued: 0,
            started: 0,
            completed,
            failed: 0,
            dead: 0,
            wait_p50_ms: None,
            wait_p95_ms: None,
            run_p50_ms: None,
            run_p95_ms: None,
        }
    }

    #[test]
    fn gaps_are_zero() {
        let b = [bucket(600.0, 5), bucket(660.0, 7), bucket(900.0, 1)];
        let p = zero_filled(&b, 0.0, 1200.0, 60.0, |x| x.completed as f64);
        assert_eq!(
            p,
            vec![
                (0.0, 0.0),
                (540.0, 0.0),
                (600.0, 5.0),
                (660.0, 7.0),
                (720.0, 0.0),
                (840.0, 0.0),
                (900.0, 1.0),
                (960.0, 0.0),
                (1200.0, 0.0)
            ]
        );
    }

    #[test]
    fn round_maxima() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(3.0), 5.0);
        assert_eq!(nice_max(10.0), 10.0);
        assert_eq!(nice_max(1234.0), 2000.0);
    }

    #[test]
    fn draws_a_polyline_or_says_why_not() {
        let s = [Series {
            name: "completed",
            color: "#000",
            points: vec![(0.0, 1.0), (60.0, 3.0)],
        }];
        let svg = line_chart("t", 0.0, 60.0, "−60 min", &s, Axis::Count).into_string();
        assert!(svg.contains("<svg") && svg.contains("<polyline"), "{svg}");
        // The axis of durations: ticks at 0, 2.5 and 5 s for values up to 2.3 s.
        let s = [Series {
            name: "run p95",
            color: "#000",
            points: vec![(0.0, 900.0), (60.0, 2300.0)],
        }];
        let svg = line_chart("t", 0.0, 60.0, "x", &s, Axis::Millis).into_string();
        for label in [">0 s<", ">2.5 s<", ">5 s<"] {
            assert!(svg.contains(label), "{label}: {svg}");
        }
        let none = [Series {
            name: "completed",
            color: "#000",
            points: vec![(0.0, 0.0)],
        }];
        assert!(line_chart("t", 0.0, 60.0, "x", &none, Axis::Count)
            .into_string()
            .contains("no activity"));
    }

    /// A tick's label read back in milliseconds (a count as it is).
    fn value_of(label: &str) -> f64 {
        let (n, unit) = label.split_once(' ').unwrap_or((label, ""));
        let n: f64 = n.replace(',', "").parse().unwrap();
        n * match unit {
            "" => 1.0,
            "µs" => 0.001,
            "ms" => 1.0,
            "s" => 1000.0,
            "min" => 60_000.0,
            "h" => 3_600_000.0,
            "d" => DAY_MS,
            u => panic!("unknown unit {u:?} in {label:?}"),
        }
    }

    /// The labels of `ticks(axis, max)`, checked: distinct, each one exactly its tick's value,
    /// the top at or above `max`.
    fn labels(axis: Axis, max: f64) -> Vec<String> {
        let t = ticks(axis, max);
        for (v, label) in &t {
            let back = value_of(label);
            assert!(
                (back - v).abs() <= 1e-9 * v.abs(),
                "{axis:?} up to {max}: {label:?} is {back}, the tick {v}"
            );
        }
        assert!(t[2].0 >= max, "{axis:?}: the top {} under {max}", t[2].0);
        let l: Vec<String> = t.into_iter().map(|x| x.1).collect();
        assert!(
            l[0] != l[1] && l[1] != l[2] && l[0] != l[2],
            "{axis:?} up to {max}: {l:?}"
        );
        l
    }

    #[test]
    fn tick_labels_are_exact_and_distinct() {
        let ms: &[(f64, [&str; 3])] = &[
            (0.0004, ["0 µs", "0.25 µs", "0.5 µs"]),
            (0.0015, ["0 µs", "1 µs", "2 µs"]),
            (0.18, ["0 µs", "100 µs", "200 µs"]),
            (0.3, ["0 µs", "250 µs", "500 µs"]),
            (0.75, ["0 ms", "0.5 ms", "1 ms"]),
            (1.5, ["0 ms", "1 ms", "2 ms"]),
            (3.0, ["0 ms", "2.5 ms", "5 ms"]),
            (37.0, ["0 ms", "25 ms", "50 ms"]),
            (999.0, ["0 s", "0.5 s", "1 s"]),
            (2_500.0, ["0 s", "2.5 s", "5 s"]),
            (25_000.0, ["0 s", "15 s", "30 s"]),
            (45_000.0, ["0 min", "0.5 min", "1 min"]),
            (100_000.0, ["0 min", "1 min", "2 min"]),
            (240_000.0, ["0 min", "2.5 min", "5 min"]),
            (45.0 * 60_000.0, ["0 h", "0.5 h", "1 h"]),
            (2.5 * 3_600_000.0, ["0 h", "1.5 h", "3 h"]),
            (30.0 * 3_600_000.0, ["0 d", "1 d", "2 d"]),
            (4.0 * DAY_MS, ["0 d", "2.5 d", "5 d"]),
        ];
        for (max, want) in ms {
            assert_eq!(labels(Axis::Millis, *max), want, "durations up to {max} ms");
        }
        let counts: &[(f64, [&str; 3])] = &[
            (0.0, ["0", "1", "2"]),
            (1.0, ["0", "1", "2"]),
            (3.0, ["0", "2", "4"]),
            (5.0, ["0", "5", "10"]),
            (40.0, ["0", "25", "50"]),
            (1_234.0, ["0", "1,000", "2,000"]),
            (7_654_321.0, ["0", "5,000,000", "10,000,000"]),
        ];
        for (max, want) in counts {
            assert_eq!(labels(Axis::Count, *max), want, "counts up to {max}");
        }
    }

    #[test]
    fn tick_labels_hold_on_every_scale() {
        // From a tenth of a microsecond to a year, and counts from 0 to 10^12, at 7 points a
        // decade.
        let mut max = 1e-4;
        while max < 365.0 * DAY_MS {
            labels(Axis::Millis, max);
            max *= 1.39;
        }
        let mut max: f64 = 0.5;
        while max < 1e12 {
            labels(Axis::Count, max.round());
            max *= 1.39;
        }
    }
}
