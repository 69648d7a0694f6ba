//! `/`: every queue's depth (jobq.queue_depths) and throughput charts, failing and stuck
//! queues highlighted; `/fragments/overview`: the same table and charts alone, polled by the
//! page every 5 s.

use crate::charts::{self, Counters, DAY, HOUR};
use crate::db::AppError;
use crate::layout::{self, name, num, seg};
use crate::App;
use axum::extract::State;
use maud::{html, Markup, PreEscaped};
use std::collections::BTreeSet;
use std::sync::Arc;

/// A queue is stuck when its oldest due job has waited longer than this.
pub const STUCK_AFTER_SECS: f64 = 300.0;

pub struct QueueRow {
    pub queue: String,
    pub ready: i64,
    pub scheduled: i64,
    pub executing: i64,
    pub dead: i64,
    pub oldest_ready_secs: Option<f64>,
}

/// Depths from jobq.queue_depths: the live jobs and the dead ones only, never the rest of the
/// history (jobq.queue_stats, same columns, counts the whole history).
pub async fn queue_depths(
    client: &deadpool_postgres::Client,
    queue: Option<&str>,
) -> Result<Vec<QueueRow>, AppError> {
    let rows = client
        .query(
            "SELECT queue, ready, scheduled, executing, dead, extract(epoch FROM oldest_ready_age)::float8
               FROM jobq.queue_depths WHERE $1::text IS NULL OR queue = $1 ORDER BY queue",
            &[&queue],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| QueueRow {
            queue: r.get(0),
            ready: r.get(1),
            scheduled: r.get(2),
            executing: r.get(3),
            dead: r.get(4),
            oldest_ready_secs: r.get(5),
        })
        .collect())
}

/// queue_depths, or nothing and a warning when it ran out of time (it counts the dead jobs,
/// which a queue can pile up by the million), so that the rest of the page (charts from the
/// counters) still shows.
pub async fn queue_depths_or_warning(
    client: &deadpool_postgres::Client,
    queue: Option<&str>,
) -> Result<(Vec<QueueRow>, Option<Markup>), AppError> {
    match queue_depths(client, queue).await {
        Ok(rows) => Ok((rows, None)),
        Err(e) if e.sqlstate() == Some("57014") => Ok((
            Vec::new(),
            Some(
                html! { p.msg.bad { "jobq.queue_depths took longer than --query-timeout (it counts the dead jobs): queue depths are not shown." } },
            ),
        )),
        Err(e) => Err(e),
    }
}

pub async fn page(State(app): State<Arc<App>>) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let live = fragment_markup(&app).await?;
    let url = serde_json::to_string(&app.link("/fragments/overview")).unwrap_or_default();
    let body = html! {
        div #live { (live) }
        p.muted { "Updates every 5 s. Failing: dead jobs, or failures in the last hour. Stuck: a due job waiting over 5 min." }
        script { (PreEscaped(format!(
            "setInterval(function(){{fetch({url},{{credentials:'same-origin'}}).then(function(r){{return r.ok?r.text():null}})\
             .then(function(h){{if(h!==null)document.getElementById('live').innerHTML=h}}).catch(function(){{}})}},5000);"
        ))) }
    };
    Ok(layout::page(&app, Some(&access), "/", "Overview", body))
}

pub async fn fragment(State(app): State<Arc<App>>) -> Result<Markup, AppError> {
    fragment_markup(&app).await
}

async fn fragment_markup(app: &App) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let client = app.db.client().await?;
    let (stats, warning) = queue_depths_or_warning(&client, None).await?;
    let hour = charts::load(&client, &access, HOUR, None).await?;
    let day = charts::load(&client, &access, DAY, None).await?;
    let mut queues: BTreeSet<String> = stats.iter().map(|s| s.queue.clone()).collect();
    queues.extend(hour.queues());
    queues.extend(day.queues());
    let failed_last_hour = |q: &str| hour.of(q).iter().map(|b| b.failed + b.dead).sum::<i64>();
    let rows: Vec<Markup> = queues
        .iter()
        .map(|q| {
            let s = stats.iter().find(|s| &s.queue == q);
            let failing = s.is_some_and(|s| s.dead > 0) || failed_last_hour(q) > 0;
            let stuck = s.and_then(|s| s.oldest_ready_secs).is_some_and(|a| a > STUCK_AFTER_SECS);
            let completed: i64 = hour.of(q).iter().map(|b| b.completed).sum();
            html! {
                tr.bad[failing] .warn[stuck && !failing] {
                    td { a href=(app.link(&format!("/queues/{}", seg(q)))) { (name(q)) } }
                    td.n { (num(s.map_or(0, |s| s.ready))) }
                    td.n { (num(s.map_or(0, |s| s.scheduled))) }
                    td.n { (num(s.map_or(0, |s| s.executing))) }
                    td.n { a href=(app.link(&format!("/jobs?queue={}&state=dead", seg(q)))) { (num(s.map_or(0, |s| s.dead))) } }
                    td { (s.and_then(|s| s.oldest_ready_secs).map(layout::dur).unwrap_or_else(|| "—".into())) }
                    td.n { @if matches!(hour, Counters::Loaded { .. }) { (num(completed)) } @else { "—" } }
                    td.n { @if matches!(hour, Counters::Loaded { .. }) { (num(failed_last_hour(q))) } @else { "—" } }
                    td {
                        @if failing { span.badge.bad { "failing" } " " }
                        @if stuck { span.badge.warn { "stuck" } }
                        @if !failing && !stuck { span.badge.ok { "ok" } }
                    }
                }
            }
        })
        .collect();
    Ok(html! {
        h2 { "Queues" }
        @if let Some(w) = warning { (w) }
        (super::table(&["queue", "#ready", "#scheduled", "#executing", "#dead", "oldest ready", "#completed (1 h)", "#failed (1 h)", "status"], rows, "No queue has a job yet."))
        @for q in &queues {
            h2 { "Queue " a href=(app.link(&format!("/queues/{}", seg(q)))) { (name(q)) } }
            div.charts { (charts::queue_charts(&hour, q)) (charts::queue_charts(&day, q)) }
        }
        @if queues.is_empty() {
            div.charts { (charts::queue_charts(&hour, "")) }
        }
    })
}
