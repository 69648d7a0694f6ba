//! `/queues/{queue}`: one queue's depth, charts and live jobs per kind; pause and resume
//! (`jobq_pause(queue)`, `jobq_resume(queue)`).

use super::{authorize_action, back, message, overview::queue_depths_or_warning, Msg};
use crate::auth::CsrfToken;
use crate::charts::{self, DAY, HOUR};
use crate::db::AppError;
use crate::layout::{self, action_button, dur, name, num, seg};
use crate::App;
use axum::extract::{Form, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Redirect;
use axum::Extension;
use maud::{html, Markup};
use std::collections::HashMap;
use std::sync::Arc;

pub async fn page(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Query(msg): Query<Msg>,
    Extension(csrf): Extension<CsrfToken>,
) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let client = app.db.client().await?;
    let (stats, warning) = queue_depths_or_warning(&client, Some(&queue)).await?;
    let s = stats.first();
    // Live jobs only (ready, executing, blocked: waiting for other jobs or an event): never the
    // history.
    let kinds = client
        .query(
            &format!(
                "SELECT kind, count(*) FILTER (WHERE state = 'ready'), count(*) FILTER (WHERE state = 'executing'),
                        count(*) FILTER (WHERE state = 'blocked')
                   FROM {} WHERE queue = $1 AND state IN ('ready', 'executing', 'blocked')
                  GROUP BY kind ORDER BY kind NULLS FIRST LIMIT 500",
                crate::db::LIVE_JOBS
            ),
            &[&queue],
        )
        .await?;
    // Pauses of this queue, and of kinds everywhere, when the role may read them.
    let pauses: Option<Vec<(Option<String>, Option<String>)>> = if access.pauses {
        let rows = client
            .query("SELECT queue, kind FROM jobq.pauses WHERE queue = $1 OR queue IS NULL ORDER BY queue NULLS LAST, kind", &[&queue])
            .await?;
        Some(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    } else {
        None
    };
    let paused = pauses.as_ref().map(|p| {
        p.iter()
            .any(|(q, k)| q.as_deref() == Some(queue.as_str()) && k.is_none())
    });
    let hour = charts::load(&client, &access, HOUR, Some(&queue)).await?;
    let day = charts::load(&client, &access, DAY, Some(&queue)).await?;
    let q = seg(&queue);
    let kind_rows: Vec<Markup> = kinds
        .iter()
        .map(|r| {
            let kind: Option<String> = r.get(0);
            let link = match &kind {
                Some(k) => format!("/jobs?queue={q}&kind={}", seg(k)),
                None => format!("/jobs?queue={q}"),
            };
            html! { tr {
                td { a href=(app.link(&link)) { @match &kind { Some(k) => { (name(k)) }, None => { "(no kind)" } } } }
                td.n { (num(r.get(1))) } td.n { (num(r.get(2))) } td.n { (num(r.get(3))) }
            } }
        })
        .collect();
    let body = html! {
        (message(&msg))
        @if let Some(w) = warning { (w) }
        p {
            @match paused {
                Some(true) => { span.badge.warn { "paused" } " " },
                Some(false) => { span.badge.ok { "running" } " " },
                None => {},
            }
            @if app.may_act(&access) {
                @if paused != Some(true) { (action_button(&app.link(&format!("/queues/{q}/pause")), &csrf, "Pause queue", true, &[])) " " }
                @if paused != Some(false) { (action_button(&app.link(&format!("/queues/{q}/resume")), &csrf, "Resume queue", false, &[])) }
            }
        }
        table {
            thead { tr { th.n { "ready" } th.n { "scheduled" } th.n { "executing" } th.n { "dead" } th { "oldest ready" } th { "jobs" } } }
            tbody { tr {
                td.n { (num(s.map_or(0, |s| s.ready))) }
                td.n { (num(s.map_or(0, |s| s.scheduled))) }
                td.n { (num(s.map_or(0, |s| s.executing))) }
                td.n { (num(s.map_or(0, |s| s.dead))) }
                td { (s.and_then(|s| s.oldest_ready_secs).map(dur).unwrap_or_else(|| "—".into())) }
                td {
                    a href=(app.link(&format!("/jobs?queue={q}"))) { "all" } " · "
                    a href=(app.link(&format!("/jobs?queue={q}&state=ready"))) { "ready" } " · "
                    a href=(app.link(&format!("/jobs?queue={q}&state=executing"))) { "executing" } " · "
                    a href=(app.link(&format!("/jobs?queue={q}&state=blocked"))) { "blocked" } " · "
                    a href=(app.link(&format!("/jobs?queue={q}&state=dead"))) { "dead" }
                }
            } }
        }
        @if let Some(p) = &pauses {
            @let kinds_paused: Vec<String> = p.iter().filter(|(q, k)| k.is_some() && (q.is_none() || q.as_deref() == Some(queue.as_str())))
                .map(|(q, k)| format!("{}{}", k.as_deref().unwrap_or(""), if q.is_none() { " (every queue)" } else { "" })).collect();
            @if !kinds_paused.is_empty() { p { "Paused kinds: " (kinds_paused.join(", ")) } }
        }
        h2 { "Throughput and latency" }
        div.charts { (charts::queue_charts(&hour, &queue)) (charts::queue_charts(&day, &queue)) }
        h2 { "Live jobs per kind" }
        (super::table(&["kind", "#ready", "#executing", "#blocked"], kind_rows, "No ready, executing or blocked job in this queue."))
    };
    Ok(layout::page(
        &app,
        Some(&access),
        "/",
        &format!("Queue {queue}"),
        body,
    ))
}

pub async fn pause(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Redirect, AppError> {
    authorize_action(&app, &headers, &form).await?;
    app.db
        .client()
        .await?
        .execute("SELECT jobq_pause($1)", &[&queue])
        .await?;
    Ok(back(&app, &format!("/queues/{}", seg(&queue)), "paused"))
}

pub async fn resume(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Redirect, AppError> {
    authorize_action(&app, &headers, &form).await?;
    app.db
        .client()
        .await?
        .execute("SELECT jobq_resume($1)", &[&queue])
        .await?;
    Ok(back(&app, &format!("/queues/{}", seg(&queue)), "resumed"))
}
