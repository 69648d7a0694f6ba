//! `/workers`: registered workers (jobq.workers), their owner role, heartbeat age (marked when
//! past jobq.heartbeat_timeout, either edition's), and the jobs each holds (executing jobs per
//! worker_id, from the live jobs only).

use crate::db::AppError;
use crate::layout::{self, age, name, num};
use crate::App;
use axum::extract::State;
use maud::{html, Markup};
use std::sync::Arc;

pub async fn page(State(app): State<Arc<App>>) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let client = app.db.client().await?;
    let rows = client
        .query(
            &format!(
                "SELECT w.id::text, w.owner::text, w.name, left(w.metadata::text, 200),
                        extract(epoch FROM now() - w.heartbeat_at)::float8,
                        extract(epoch FROM now() - w.registered_at)::float8,
                        w.backend_pid, coalesce(h.n, 0),
                        extract(epoch FROM {})::float8
                   FROM jobq.workers w
                   LEFT JOIN (SELECT worker_id, count(*) AS n FROM {} WHERE state = 'executing' GROUP BY worker_id) h
                     ON h.worker_id = w.id
                  ORDER BY w.registered_at LIMIT 1000",
                crate::db::HEARTBEAT_TIMEOUT,
                crate::db::LIVE_JOBS
            ),
            &[],
        )
        .await?;
    let trs: Vec<Markup> = rows
        .iter()
        .map(|r| {
            let hb: f64 = r.get(4);
            let timeout: f64 = r.get(8);
            let stale = hb > timeout;
            let id: String = r.get(0);
            html! { tr.bad[stale] {
                td { code { (id) } }
                td { (name(&r.get::<_, String>(1))) }
                td { @if let Some(n) = r.get::<_, Option<String>>(2) { (name(&n)) } }
                td { (age(Some(hb))) @if stale { " " span.badge.bad { "past jobq.heartbeat_timeout" } } }
                td { (age(r.get(5))) }
                td.n { (num(r.get(7))) }
                td { (r.get::<_, Option<i32>>(6).map(|p| p.to_string()).unwrap_or_else(|| "—".into())) }
                td.muted { @if let Some(m) = r.get::<_, Option<String>>(3) { (name(&m)) } }
            } }
        })
        .collect();
    let body = html! {
        (super::table(&["id", "owner", "name", "heartbeat", "registered", "#jobs held", "bound to pid", "metadata"], trs, "No worker is registered."))
    };
    Ok(layout::page(
        &app,
        Some(&access),
        "/workers",
        "Workers",
        body,
    ))
}
