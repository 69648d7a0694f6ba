//! `/health`: the figures a person on call reads first, each with its label, unit and meaning,
//! green, amber or red against the thresholds of `crate::thresholds` (the alert rules' of
//! deploy/prometheus) and, when it is not green, what to do; then every column of jobq.health
//! and jobq's tables (jobq.table_stats).

use crate::db::AppError;
use crate::layout::{self, age, dur, num};
use crate::thresholds::{self, Check, Level, Unit};
use crate::App;
use axum::extract::State;
use maud::{html, Markup};
use std::sync::Arc;

/// A figure's value as its unit says.
fn shown(c: &Check, v: f64) -> String {
    match c.unit {
        _ if v.is_infinite() => "never".into(),
        Unit::Seconds => dur(v),
        Unit::Ratio => format!("{:.1} %", v * 100.0),
        Unit::Jobs => num(v as i64),
        Unit::Flag => if v > 0.5 { "yes" } else { "no" }.into(),
    }
}

fn threshold(c: &Check) -> String {
    match c.unit {
        Unit::Flag => "red when yes".into(),
        _ => format!("amber above {}, red above {}", shown(c, c.amber), shown(c, c.red)),
    }
}

/// One figure: its badge, label, value, thresholds, meaning, and what to do unless green.
fn figure(c: &Check, v: f64, detail: Option<Markup>) -> Markup {
    let level = c.level(v);
    html! {
        tr.bad[level == Level::Red] .warn[level == Level::Amber] {
            td { span.badge.(level.class()) { (level.word()) } }
            th { (c.label) }
            td.n { (shown(c, v)) }
            td {
                (c.meaning)
                br; span.muted { (threshold(c)) " (alert " code { (c.alert) } ")" }
                @if let Some(d) = &detail { br; (d) }
                @if level != Level::Green { br; strong { "What to do: " } (c.when_red) }
            }
        }
    }
}

pub async fn page(State(app): State<Arc<App>>) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let client = app.db.client().await?;
    // Every column, whatever this version of jobq.health has, in its order.
    let health: Option<String> = client
        .query_one(
            "SELECT (SELECT row_to_json(h)::text FROM jobq.health h LIMIT 1)",
            &[],
        )
        .await?
        .get(0);
    let health: serde_json::Map<String, serde_json::Value> = health
        .and_then(|h| serde_json::from_str(&h).ok())
        .unwrap_or_default();
    let tables = client
        .query(
            "SELECT table_name, live_rows, dead_rows, dead_share::float8, approx_bytes,
                    extract(epoch FROM now() - last_vacuum)::float8
               FROM jobq.table_stats ORDER BY table_name",
            &[],
        )
        .await?;
    let f = client
        .query_one(
            "SELECT extract(epoch FROM now() - h.last_pass_at)::float8, h.last_pass_error IS NOT NULL,
                    coalesce(extract(epoch FROM h.horizon_xact_age)::float8, 0), h.horizon_holder, h.horizon_pid,
                    h.horizon_role, h.horizon_state, coalesce(h.notify_queue_usage, 0),
                    extract(epoch FROM now() - o.run_at)::float8, o.queue,
                    (SELECT coalesce(sum(m.dead), 0)::bigint FROM jobq.queue_minutes m
                      WHERE m.minute >= date_trunc('minute', now()) - interval '10 minutes'),
                    (SELECT max(greatest(extract(epoch FROM now() - s.next_run_at), 0))::float8 FROM jobq.schedules s),
                    (SELECT s.name FROM jobq.schedules s ORDER BY s.next_run_at LIMIT 1)
               FROM jobq.health h
               -- The oldest due job (the jobs not yet finished only, never the history).
               LEFT JOIN LATERAL (SELECT j.queue, j.run_at FROM jobq.live_jobs j
                                   WHERE j.state = 'ready' AND j.run_at <= now()
                                   ORDER BY j.run_at LIMIT 1) o ON true",
            &[],
        )
        .await?;
    // The worst dead-row share among the tables read above with more than DEAD_ROWS_MIN dead
    // rows: the alert's rule (thresholds.rs), without reading jobq.table_stats a second time.
    let dead_share = tables
        .iter()
        .filter(|r| r.get::<_, i64>(2) > thresholds::DEAD_ROWS_MIN)
        .filter_map(|r| r.get::<_, Option<f64>>(3))
        .fold(0.0, f64::max);
    let pass_age: Option<f64> = f.get(0);
    let horizon_pid: Option<i32> = f.get(4);
    let worst_queue: Option<String> = f.get(9);
    let figures = [
        figure(&thresholds::REAPER_PASS_AGE, pass_age.unwrap_or(f64::INFINITY), None),
        figure(&thresholds::REAPER_PASS_FAILED, if f.get::<_, bool>(1) { 1.0 } else { 0.0 }, None),
        figure(
            &thresholds::QUEUE_WAIT,
            f.get::<_, Option<f64>>(8).unwrap_or(0.0),
            worst_queue.map(|q| html! { "Queue: " a href=(app.link(&format!("/queues/{}", layout::seg(&q)))) { (layout::name(&q)) } }),
        ),
        figure(&thresholds::JOBS_DYING, f.get::<_, i64>(10) as f64, Some(html! { a href=(app.link("/jobs?state=dead")) { "Dead jobs" } })),
        figure(
            &thresholds::SCHEDULE_LATENESS,
            f.get::<_, Option<f64>>(11).unwrap_or(0.0),
            f.get::<_, Option<String>>(12).map(|n| html! { "Next due: " (layout::name(&n)) }),
        ),
        figure(
            &thresholds::HORIZON_AGE,
            f.get(2),
            f.get::<_, Option<String>>(3).map(|holder| html! {
                "Held by " (layout::name(&holder))
                @if let Some(pid) = horizon_pid { ", pid " (pid) }
                @if let Some(role) = f.get::<_, Option<String>>(5) { ", role " (layout::name(&role)) }
                @if let Some(st) = f.get::<_, Option<String>>(6) { ", " (st) }
                @if let Some(pid) = horizon_pid { ". To end it: " code { "SELECT pg_terminate_backend(" (pid) ");" } }
            }),
        ),
        figure(&thresholds::DEAD_ROWS, dead_share, None),
        figure(&thresholds::NOTIFY_QUEUE, f.get(7), None),
    ];
    let error = health.get("last_pass_error").is_some_and(|v| !v.is_null());
    let trs: Vec<Markup> = tables
        .iter()
        .map(|r| {
            let share: Option<f64> = r.get(3);
            html! { tr.warn[share.is_some_and(|s| s > thresholds::DEAD_ROWS.red)] {
                td { (r.get::<_, String>(0)) }
                td.n { (num(r.get(1))) } td.n { (num(r.get(2))) }
                td.n { (share.map(|s| format!("{:.1} %", s * 100.0)).unwrap_or_else(|| "—".into())) }
                td.n { (r.get::<_, Option<i64>>(4).map(|b| format!("{} kB", num(b / 1024))).unwrap_or_default()) }
                td { (age(r.get(5))) }
            } }
        })
        .collect();
    let body = html! {
        table.figures { tbody { @for fig in &figures { (fig) } } }
        h2 { "Background worker" }
        p {
            "Background worker: "
            @match pass_age {
                None => { span.badge.warn { "no pass since the server started" } " (not preloaded, or this database is not served)" },
                Some(a) if error => { span.badge.bad { "last pass failed" } " " (age(Some(a))) },
                Some(a) => { span.badge.ok { "last pass " (age(Some(a))) } },
            }
        }
        details { summary { "Every column of jobq.health" }
        table.kv { tbody {
            @for (k, v) in &health {
                tr.bad[k == "last_pass_error" && !v.is_null()] {
                    th { (k) }
                    td { @match v { serde_json::Value::Null => { span.muted { "—" } }, serde_json::Value::String(s) => { (s) }, v => { (v.to_string()) } } }
                }
            }
        } } }
        h2 { "jobq's tables" }
        (super::table(&["table", "#live rows", "#dead rows", "#dead share", "#size", "last vacuum"], trs, "No statistics yet."))
    };
    Ok(layout::page(&app, Some(&access), "/health", "Health", body))
}
