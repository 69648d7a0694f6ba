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
        (line_chart(&format!("jobs per {} ({})", dur(step), window.label), start, now, left, &through, |v| num(v.round() as i64)))
        (line_chart(&format!("wait and run time ({})", window.label), start, now, left, &latency, |v| dur(v / 1000.0)))
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

/// Lines of `series` over [start, end] (seconds since the epoch), y from 0 to a round maximum.
pub fn line_chart(
    title: &str,
    start: f64,
    end: f64,
    left_label: &str,
    series: &[Series],
    fmt_y: impl Fn(f64) -> String,
) -> Markup {
    let max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max);
    if series.iter().all(|s| s.points.iter().all(|p| p.1 == 0.0)) {
        return empty_chart(title, "no activity");
    }
    let ymax = nice_max(max);
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let span = (end - start).max(1.0);
    let x = |t: f64| LEFT + ((t - start) / span).clamp(0.0, 1.0) * pw;
    let y = |v: f64| TOP + (1.0 - v / ymax) * ph;
    html! {
        div.chart {
            div.t { (title) }
            svg width=(W) height=(H) viewBox={"0 0 " (W) " " (H)} role="img" {
                @for frac in [0.0, 0.5, 1.0] {
                    line x1=(LEFT) x2=(W - RIGHT) y1=(y(ymax * frac)) y2=(y(ymax * frac)) stroke="#e5e7eb" {}
                    text x=(LEFT - 4.0) y=(y(ymax * frac) + 4.0) text-anchor="end" font-size="10" fill="#6b7280" { (fmt_y(ymax * frac)) }
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
        let svg = line_chart("t", 0.0, 60.0, "−60 min", &s, |v| v.to_string()).into_string();
        assert!(svg.contains("<svg") && svg.contains("<polyline"), "{svg}");
        let none = [Series {
            name: "completed",
            color: "#000",
            points: vec![(0.0, 0.0)],
        }];
        assert!(line_chart("t", 0.0, 60.0, "x", &none, |v| v.to_string())
            .into_string()
            .contains("no activity"));
    }
}
