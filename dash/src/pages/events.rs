//! `/events`: workflows' events (jobq.events: emitted, first emit wins) and the jobs blocked
//! on one (jobq.blocked), with their time limits.

use crate::db::AppError;
use crate::layout::{self, age, name};
use crate::App;
use axum::extract::State;
use maud::{html, Markup};
use std::sync::Arc;

/// Rows shown per table, newest first.
const SHOWN: i64 = 500;

pub async fn page(State(app): State<Arc<App>>) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let client = app.db.client().await?;
    let emitted = client
        .query(
            &format!(
                "SELECT name, CASE WHEN $1 THEN NULL ELSE payload::text END, emitted_at::text,
                        extract(epoch FROM now() - emitted_at)::float8
                   FROM jobq.events ORDER BY emitted_at DESC LIMIT {SHOWN}"
            ),
            &[&app.cfg.hide_payloads],
        )
        .await?;
    let awaited = client
        .query(
            &format!(
                "SELECT b.job_id, b.event, extract(epoch FROM now() - b.until)::float8, j.queue
                   FROM jobq.blocked b JOIN jobq.live_jobs j ON j.id = b.job_id
                  WHERE b.event IS NOT NULL ORDER BY b.job_id LIMIT {SHOWN}"
            ),
            &[],
        )
        .await?;
    let emitted_rows: Vec<Markup> = emitted
        .iter()
        .map(|r| {
            html! { tr {
                td { code { (name(&r.get::<_, String>(0))) } }
                td { (age(r.get(3))) br; span.muted { (r.get::<_, Option<String>>(2).unwrap_or_default()) } }
                td { @if let Some(p) = r.get::<_, Option<String>>(1) { code { (p) } } }
            } }
        })
        .collect();
    let awaited_rows: Vec<Markup> = awaited
        .iter()
        .map(|r| {
            let job: i64 = r.get(0);
            html! { tr {
                td { a href=(app.link(&format!("/jobs/{job}"))) { (job) } }
                td { (name(&r.get::<_, String>(3))) }
                td { code { (name(&r.get::<_, String>(1))) } }
                td { @match r.get::<_, Option<f64>>(2) { Some(a) => { "times out " (age(Some(a))) }, None => { span.muted { "no limit" } } } }
            } }
        })
        .collect();
    let body = html! {
        h2 { "Jobs awaiting an event" }
        (super::table(&["job", "queue", "event", "time limit"], awaited_rows, "No job awaits an event."))
        h2 { "Events emitted" }
        (super::table(&["name", "emitted", "payload"], emitted_rows, "No event was emitted (or all were pruned after jobq.retention)."))
        @if app.cfg.hide_payloads { p.muted { "Payloads are hidden (--hide-payloads)." } }
        p.muted { "An event is emitted once (jobq_emit_event: the first emit wins) and kept for jobq.retention, so a job that awaits it later gets it at once." }
    };
    Ok(layout::page(&app, Some(&access), "/events", "Events", body))
}
