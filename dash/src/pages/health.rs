//! `/health`: the figures a person on call reads first, each with its label, unit and meaning,
//! green, amber or red against the thresholds of `crate::thresholds` (the alert rules' of
//! deploy/prometheus) and, when it is not green, what to do; then every column of jobq.health
//! and jobq's tables (jobq.table_stats).

use crate::db::{AppError, Db, Edition, Installed};
use crate::layout::{self, age, dur, num};
use crate::thresholds::{self, Check, Level, Unit};
use crate::App;
use axum::extract::State;
use maud::{html, Markup};
use serde::Serialize;
use std::sync::Arc;

/// A figure as read now.
pub struct Figure {
    pub check: &'static Check,
    pub value: f64,
    /// What it is about, when it names something: `queue` (the longest wait), `schedule` (the
    /// next due), `holder`, `pid`, `role` and `state` (the horizon's holder).
    pub about: Vec<(&'static str, String)>,
}

impl Figure {
    pub fn level(&self) -> Level {
        self.check.level(self.value)
    }

    pub fn about(&self, key: &str) -> Option<&str> {
        self.about.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str())
    }

    /// Its value as its unit says ("5 min", "12.0 %", "yes").
    pub fn shown(&self) -> String {
        shown(self.check, self.value)
    }
}

/// One of jobq's tables (jobq.table_stats).
#[derive(Serialize)]
pub struct Table {
    pub table: String,
    pub live_rows: i64,
    pub dead_rows: i64,
    pub dead_share: Option<f64>,
    pub approx_bytes: Option<i64>,
    pub last_vacuum_secs_ago: Option<f64>,
}

/// A database's health: the figures in the order of `thresholds::ALL`, every column of
/// jobq.health, jobq's tables, and which jobq it has (what to do differs by edition).
pub struct Health {
    pub jobq: Installed,
    pub figures: Vec<Figure>,
    pub columns: serde_json::Map<String, serde_json::Value>,
    pub tables: Vec<Table>,
}

impl Health {
    /// The worst level of its figures.
    pub fn level(&self) -> Level {
        self.figures.iter().map(Figure::level).max().unwrap_or(Level::Green)
    }
}

/// Reads the health of `db`. The longest wait leaves out paused queues when the role may read
/// jobq.pauses (as the alert JobqQueueBackingUp does, with jobq_queue_paused).
pub async fn read(db: &Db) -> Result<Health, AppError> {
    let access = db.access().await?;
    let client = db.client().await?;
    // Every column, whatever this version of jobq.health has, in its order.
    let health: Option<String> = client
        .query_one(
            "SELECT (SELECT row_to_json(h)::text FROM jobq.health h LIMIT 1)",
            &[],
        )
        .await?
        .get(0);
    let columns: serde_json::Map<String, serde_json::Value> = health
        .and_then(|h| serde_json::from_str(&h).ok())
        .unwrap_or_default();
    let tables: Vec<Table> = client
        .query(
            "SELECT table_name, live_rows, dead_rows, dead_share::float8, approx_bytes,
                    extract(epoch FROM now() - last_vacuum)::float8
               FROM jobq.table_stats ORDER BY table_name",
            &[],
        )
        .await?
        .iter()
        .map(|r| Table {
            table: r.get(0),
            live_rows: r.get(1),
            dead_rows: r.get(2),
            dead_share: r.get(3),
            approx_bytes: r.get(4),
            last_vacuum_secs_ago: r.get(5),
        })
        .collect();
    let unpaused = if access.pauses {
        "AND NOT EXISTS (SELECT 1 FROM jobq.pauses p WHERE p.queue = j.queue AND p.kind IS NULL)"
    } else {
        ""
    };
    let f = client
        .query_one(
            &format!(
                "SELECT extract(epoch FROM now() - h.last_pass_at)::float8, h.last_pass_error IS NOT NULL,
                        coalesce(extract(epoch FROM h.horizon_xact_age)::float8, 0), h.horizon_holder, h.horizon_pid::text,
                        h.horizon_role, h.horizon_state, coalesce(h.notify_queue_usage, 0),
                        extract(epoch FROM now() - o.run_at)::float8, o.queue,
                        (SELECT coalesce(sum(m.dead), 0)::bigint FROM jobq.queue_minutes m
                          WHERE m.minute >= date_trunc('minute', now()) - interval '10 minutes'),
                        (SELECT max(greatest(extract(epoch FROM now() - s.next_run_at), 0))::float8 FROM jobq.schedules s),
                        (SELECT s.name FROM jobq.schedules s ORDER BY s.next_run_at LIMIT 1)
                   FROM jobq.health h
                   -- The oldest due job (the jobs not yet finished only, never the history).
                   LEFT JOIN LATERAL (SELECT j.queue, j.run_at FROM jobq.live_jobs j
                                       WHERE j.state = 'ready' AND j.run_at <= now() {unpaused}
                                       ORDER BY j.run_at LIMIT 1) o ON true"
            ),
            &[],
        )
        .await?;
    // The worst dead-row share among the tables read above with more than DEAD_ROWS_MIN dead
    // rows: the alert's rule (thresholds.rs), without reading jobq.table_stats a second time.
    let dead_share = tables
        .iter()
        .filter(|t| t.dead_rows > thresholds::DEAD_ROWS_MIN)
        .filter_map(|t| t.dead_share)
        .fold(0.0, f64::max);
    let about = |pairs: &[(&'static str, usize)]| -> Vec<(&'static str, String)> {
        pairs.iter().filter_map(|(k, i)| f.get::<_, Option<String>>(*i).map(|v| (*k, v))).collect()
    };
    let figure = |check: &'static Check, value: f64, about: Vec<(&'static str, String)>| Figure { check, value, about };
    let figures = vec![
        figure(&thresholds::REAPER_PASS_AGE, f.get::<_, Option<f64>>(0).unwrap_or(f64::INFINITY), vec![]),
        figure(&thresholds::REAPER_PASS_FAILED, if f.get::<_, bool>(1) { 1.0 } else { 0.0 }, vec![]),
        figure(&thresholds::QUEUE_WAIT, f.get::<_, Option<f64>>(8).unwrap_or(0.0), about(&[("queue", 9)])),
        figure(&thresholds::JOBS_DYING, f.get::<_, i64>(10) as f64, vec![]),
        figure(&thresholds::SCHEDULE_LATENESS, f.get::<_, Option<f64>>(11).unwrap_or(0.0), about(&[("schedule", 12)])),
        figure(&thresholds::HORIZON_AGE, f.get(2), about(&[("holder", 3), ("pid", 4), ("role", 5), ("state", 6)])),
        figure(&thresholds::DEAD_ROWS, dead_share, vec![]),
        figure(&thresholds::NOTIFY_QUEUE, f.get(7), vec![]),
    ];
    Ok(Health { jobq: access.jobq, figures, columns, tables })
}

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

/// "amber above 1 min, red above 5 min", or "red when yes".
pub fn threshold(c: &Check) -> String {
    match c.unit {
        Unit::Flag => "red when yes".into(),
        _ => format!("amber above {}, red above {}", shown(c, c.amber), shown(c, c.red)),
    }
}

/// What a figure names, with links to the pages about it.
fn detail(app: &App, f: &Figure) -> Option<Markup> {
    // (The thresholds are constants: a figure's is known by its alert.)
    let is = |c: &Check| f.check.alert == c.alert;
    if is(&thresholds::QUEUE_WAIT) {
        f.about("queue").map(|q| html! { "Queue: " a href=(app.link(&format!("/queues/{}", layout::seg(q)))) { (layout::name(q)) } })
    } else if is(&thresholds::JOBS_DYING) {
        Some(html! { a href=(app.link("/jobs?state=dead")) { "Dead jobs" } })
    } else if is(&thresholds::SCHEDULE_LATENESS) {
        f.about("schedule").map(|n| html! { "Next due: " (layout::name(n)) })
    } else if is(&thresholds::HORIZON_AGE) {
        f.about("holder").map(|holder| html! {
            "Held by " (layout::name(holder))
            @if let Some(pid) = f.about("pid") { ", pid " (pid) }
            @if let Some(role) = f.about("role") { ", role " (layout::name(role)) }
            @if let Some(st) = f.about("state") { ", " (st) }
            @if let Some(pid) = f.about("pid") { ". To end it: " code { "SELECT pg_terminate_backend(" (pid) ");" } }
        })
    } else {
        None
    }
}

/// One figure: its badge, label, value, thresholds, meaning, and what to do unless green (for
/// the database's edition).
fn figure(app: &App, edition: Edition, f: &Figure) -> Markup {
    let (c, level) = (f.check, f.level());
    html! {
        tr.bad[level == Level::Red] .warn[level == Level::Amber] {
            td { span.badge.(level.class()) { (level.word()) } }
            th { (c.label) }
            td.n { (f.shown()) }
            td {
                (c.meaning)
                br; span.muted { (threshold(c)) " (alert " code { (c.alert) } ")" }
                @if let Some(d) = detail(app, f) { br; (d) }
                @if level != Level::Green { br; strong { "What to do: " } (c.what_to_do(edition)) }
            }
        }
    }
}

pub async fn page(State(app): State<Arc<App>>) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let h = read(&app.db).await?;
    let pass_age = h.figures[0].value;
    let sql = h.jobq.edition == Edition::Sql;
    let error = h.columns.get("last_pass_error").is_some_and(|v| !v.is_null());
    let trs: Vec<Markup> = h
        .tables
        .iter()
        .map(|t| {
            html! { tr.warn[t.dead_share.is_some_and(|s| s > thresholds::DEAD_ROWS.red)] {
                td { (t.table) }
                td.n { (num(t.live_rows)) } td.n { (num(t.dead_rows)) }
                td.n { (t.dead_share.map(|s| format!("{:.1} %", s * 100.0)).unwrap_or_else(|| "—".into())) }
                td.n { (t.approx_bytes.map(|b| format!("{} kB", num(b / 1024))).unwrap_or_default()) }
                td { (age(t.last_vacuum_secs_ago)) }
            } }
        })
        .collect();
    let body = html! {
        table.figures { tbody { @for f in &h.figures { (figure(&app, h.jobq.edition, f)) } } }
        p.muted { "The same as JSON: " a href=(app.link("/health.json")) { "health.json" } "; for a load balancer or an uptime check: " a href=(app.link("/healthz")) { "healthz" } " (200 when every figure is green, else 503)." }
        // The SQL edition has no background worker: pg_cron or the workers' heartbeats run its
        // passes, and its last pass is a table's row (kept across restarts).
        @if sql { h2 { "Passes" } } @else { h2 { "Background worker" } }
        p {
            @if sql { "Passes (" (h.jobq.label()) ": run by pg_cron or by the workers' heartbeats): " } @else { "Background worker: " }
            @match pass_age {
                a if a.is_infinite() && sql => { span.badge.warn { "no pass yet" } " (nothing runs them: SELECT jobq_schedule_passes() where pg_cron is installed, or workers that heartbeat)" },
                a if a.is_infinite() => { span.badge.warn { "no pass since the server started" } " (not preloaded, or this database is not served)" },
                a if error => { span.badge.bad { "last pass failed" } " " (age(Some(a))) },
                a => { span.badge.ok { "last pass " (age(Some(a))) } },
            }
        }
        details { summary { "Every column of jobq.health" }
        table.kv { tbody {
            @for (k, v) in &h.columns {
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
