//! `/schedules`: recurring jobs (jobq.schedules), their next and last ticks.

use crate::db::AppError;
use crate::layout::{self, age, name, seg};
use crate::App;
use axum::extract::State;
use maud::{html, Markup};
use std::sync::Arc;

pub async fn page(State(app): State<Arc<App>>) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let client = app.db.client().await?;
    let rows = client
        .query(
            "SELECT name, cron, time_zone, queue, kind, next_run_at::text,
                    extract(epoch FROM now() - next_run_at)::float8,
                    last_run_at::text, extract(epoch FROM now() - last_run_at)::float8
               FROM jobq.schedules ORDER BY next_run_at, name LIMIT 1000",
            &[],
        )
        .await?;
    let trs: Vec<Markup> = rows
        .iter()
        .map(|r| {
            let queue: String = r.get(3);
            let next: Option<f64> = r.get(6);
            html! { tr.warn[next.is_some_and(|n| n > 60.0)] {
                td { (name(&r.get::<_, String>(0))) }
                td { code { (r.get::<_, String>(1)) } }
                td { (name(&r.get::<_, String>(2))) }
                td { a href=(app.link(&format!("/queues/{}", seg(&queue)))) { (name(&queue)) } }
                td { @if let Some(k) = r.get::<_, Option<String>>(4) { (name(&k)) } }
                td { (age(next)) br; span.muted { (r.get::<_, Option<String>>(5).unwrap_or_default()) } }
                td { (age(r.get(8))) br; span.muted { (r.get::<_, Option<String>>(7).unwrap_or_default()) } }
            } }
        })
        .collect();
    let body = html! {
        (super::table(&["name", "cron", "time zone", "queue", "kind", "next tick", "last tick enqueued"], trs, "No schedule."))
        p.muted { "A next tick more than a minute in the past (highlighted) means no reap pass has enqueued it: is the background worker running?" }
    };
    Ok(layout::page(
        &app,
        Some(&access),
        "/schedules",
        "Schedules",
        body,
    ))
}
