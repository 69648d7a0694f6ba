//! `/jobs/{id}`: every column of the job (as jobq.jobs has them, read from the catalog), its
//! payload, result, last error and every failed attempt's error (`errors`) pretty-printed
//! (unless --hide-payloads), a timeline; its workflow: the jobs it depends on or awaits, those
//! that depend on or await it, what it waits for while blocked, its checkpoints; retry and
//! cancel (`jobq_retry(id)`, `jobq_cancel(id)`).

use super::{authorize_action, back, message, Msg};
use crate::auth::CsrfToken;
use crate::db::AppError;
use crate::layout::{self, action_button, age, name, seg};
use crate::App;
use axum::extract::{Form, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Redirect;
use axum::Extension;
use maud::{html, Markup};
use std::collections::HashMap;
use std::sync::Arc;

/// Shown apart, pretty-printed, and never read with --hide-payloads.
const CONTENTS: &[&str] = &["payload", "result", "last_error", "errors", "checkpoints"];
/// The moments of a job's life, in the order they usually come.
const TIMELINE: &[(&str, &str)] = &[
    ("enqueued_at", "enqueued"),
    ("run_at", "due (run_at)"),
    ("started_at", "started (last attempt)"),
    ("interrupted_at", "interrupted (reaped)"),
    ("cancel_requested_at", "cancellation requested"),
    ("finished_at", "finished"),
];

fn ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

pub async fn page(
    State(app): State<Arc<App>>,
    Path(id): Path<i64>,
    Query(msg): Query<Msg>,
    Extension(csrf): Extension<CsrfToken>,
) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let client = app.db.client().await?;
    let columns: Vec<String> = client
        .query(
            "SELECT attname::text FROM pg_attribute WHERE attrelid = 'jobq.jobs'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plain: Vec<&String> = columns
        .iter()
        .filter(|c| !CONTENTS.contains(&c.as_str()))
        .collect();
    let contents: Vec<&str> = if app.cfg.hide_payloads {
        vec![]
    } else {
        CONTENTS
            .iter()
            .copied()
            .filter(|c| columns.iter().any(|x| x == c))
            .collect()
    };
    let timeline: Vec<&(&str, &str)> = TIMELINE
        .iter()
        .filter(|(c, _)| columns.iter().any(|x| x == c))
        .collect();
    let mut select = vec![format!(
        "(SELECT row_to_json(c)::text FROM (SELECT {}) c)",
        plain
            .iter()
            .map(|c| format!("j.{}", ident(c)))
            .collect::<Vec<_>>()
            .join(", ")
    )];
    select.extend(
        contents
            .iter()
            .map(|c| format!("jsonb_pretty(j.{})", ident(c))),
    );
    select.extend(
        timeline
            .iter()
            .map(|(c, _)| format!("extract(epoch FROM now() - j.{})::float8", ident(c))),
    );
    let sql = format!(
        "SELECT {} FROM jobq.jobs j WHERE j.id = $1",
        select.join(", ")
    );
    let row = client.query_opt(&sql, &[&id]).await?.ok_or_else(|| {
        AppError::NotFound(format!(
            "no job {id} (never made, or pruned after jobq.retention)"
        ))
    })?;
    let fields: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&row.get::<_, String>(0)).unwrap_or_default();
    let text = |k: &str| match fields.get(k) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    };
    let state = text("state");
    let queue = text("queue");
    // Oldest first; equal moments in TIMELINE's order (the sort is stable).
    let mut moments: Vec<(&str, &str, f64)> = timeline
        .iter()
        .enumerate()
        .filter_map(|(i, (c, label))| {
            row.get::<_, Option<f64>>(1 + contents.len() + i)
                .map(|a| (*c, *label, a))
        })
        .collect();
    moments.sort_by(|a, b| b.2.total_cmp(&a.2));
    // Its workflow (jobq.edges, jobq.blocked): the jobs on either side, and what it waits for.
    let related = |sql: &'static str| {
        let client = &client;
        async move {
            Ok::<_, AppError>(
                client
                    .query(sql, &[&id])
                    .await?
                    .iter()
                    .map(|r| (r.get::<_, i64>(0), r.get::<_, Option<String>>(1).unwrap_or_else(|| "pruned".into()), r.get::<_, bool>(2)))
                    .collect::<Vec<_>>(),
            )
        }
    };
    let parents = related(
        "SELECT e.parent, j.state, e.cancel FROM jobq.edges e LEFT JOIN jobq.jobs j ON j.id = e.parent
          WHERE e.child = $1 ORDER BY e.parent LIMIT 1000",
    )
    .await?;
    let children = related(
        "SELECT e.child, j.state, e.cancel FROM jobq.edges e LEFT JOIN jobq.jobs j ON j.id = e.child
          WHERE e.parent = $1 ORDER BY e.child LIMIT 1000",
    )
    .await?;
    let blocked = client
        .query_opt(
            "SELECT waiting, event, until::text FROM jobq.blocked WHERE job_id = $1",
            &[&id],
        )
        .await?;
    let job_list = |jobs: &[(i64, String, bool)]| {
        html! {
            @for (j, st, cancel) in jobs {
                a href=(app.link(&format!("/jobs/{j}"))) { (j) } " " span.muted { (st) @if *cancel { ", cancels on failure" } } " · "
            }
        }
    };
    let may_act = app.may_act(&access);
    let body = html! {
        (message(&msg))
        p {
            "Queue " a href=(app.link(&format!("/queues/{}", seg(&queue)))) { (name(&queue)) } " · state " strong { (state) }
            " · attempt " (text("attempt")) " of " (text("max_attempts"))
            @if may_act {
                @if state == "dead" || state == "cancelled" { " " (action_button(&app.link(&format!("/jobs/{id}/retry")), &csrf, "Retry", false, &[])) }
                @if state == "ready" || state == "executing" || state == "blocked" { " " (action_button(&app.link(&format!("/jobs/{id}/cancel")), &csrf, "Cancel", true, &[])) }
            }
        }
        @if !parents.is_empty() || !children.is_empty() || blocked.is_some() {
            h2 { "Workflow" }
            table.kv { tbody {
                @if let Some(b) = &blocked {
                    tr { th { "waits for" } td {
                        @if let Some(ev) = b.get::<_, Option<String>>(1) {
                            "event " code { (name(&ev)) }
                            @if let Some(u) = b.get::<_, Option<String>>(2) { " until " (u) }
                            " (" a href=(app.link("/events")) { "events" } ")"
                        } @else {
                            (b.get::<_, i32>(0)) " unfinished job(s)"
                        }
                    } }
                }
                @if !parents.is_empty() { tr { th { "depends on / awaits" } td { (job_list(&parents)) } } }
                @if !children.is_empty() { tr { th { "awaited by / depended on by" } td { (job_list(&children)) } } }
            } }
        }
        h2 { "Timeline" }
        table { tbody {
            @for (c, label, a) in &moments {
                tr { th { (label) } td { (text(c)) } td.muted { (age(Some(*a))) } }
            }
        } }
        @for (i, c) in contents.iter().enumerate() {
            h2 { (c) }
            @match row.get::<_, Option<String>>(1 + i) {
                Some(v) => { pre { (v) } },
                None => { p.muted { "none" } },
            }
        }
        @if app.cfg.hide_payloads { p.muted { "Payload, result and errors are hidden (--hide-payloads)." } }
        @if contents.contains(&"last_error") { p.muted { "jobq keeps the last attempt's error only." } }
        h2 { "Every column" }
        table.kv { tbody {
            @for c in &plain { tr { th { (c) } td { (text(c)) } } }
        } }
    };
    Ok(layout::page(
        &app,
        Some(&access),
        "/jobs",
        &format!("Job {id}"),
        body,
    ))
}

pub async fn retry(
    State(app): State<Arc<App>>,
    Path(id): Path<i64>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Redirect, AppError> {
    authorize_action(&app, &headers, &form).await?;
    let ok: Option<bool> = app
        .db
        .client()
        .await?
        .query_one("SELECT jobq_retry($1)", &[&id])
        .await?
        .get(0);
    Ok(back(
        &app,
        &format!("/jobs/{id}"),
        if ok == Some(true) {
            "retried"
        } else {
            "retry-refused"
        },
    ))
}

pub async fn cancel(
    State(app): State<Arc<App>>,
    Path(id): Path<i64>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Redirect, AppError> {
    authorize_action(&app, &headers, &form).await?;
    let state: Option<String> = app
        .db
        .client()
        .await?
        .query_one("SELECT jobq_cancel($1)", &[&id])
        .await?
        .get(0);
    let msg = match state.as_deref() {
        Some("cancelled") => "cancelled",
        Some("executing") => "cancel-requested",
        _ => "cancel-noop",
    };
    Ok(back(&app, &format!("/jobs/{id}"), msg))
}
