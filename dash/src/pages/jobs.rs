//! `/jobs`: jobs filtered by queue, kind, state, key and payload containment (all kept in the
//! URL), newest first, keyset-paged by id (`?before=ID`), with a capped count; `/jobs/bulk`:
//! retry or cancel what a filter selects, after a confirmation page saying how many.
//!
//! The list and the count are the only queries of the dashboard that may walk the history,
//! and both stop early (LIMIT). A filter on live states reads jobq.live_jobs, on finished
//! states jobq.finished_jobs (both readable by jobq_reader), on both the view jobq.jobs.

use super::authorize_action;
use crate::auth::CsrfToken;
use crate::auth::CSRF_FIELD;
use crate::db::AppError;
use crate::layout::{self, age, name, num, seg};
use crate::App;
use axum::extract::{Form, Query, State};
use axum::http::HeaderMap;
use axum::Extension;
use maud::{html, Markup};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use tokio_postgres::types::ToSql;

pub const PAGE_SIZE: i64 = 50;
/// The count stops here ("10,000+").
pub const COUNT_CAP: i64 = 10_000;
/// A bulk action touches at most this many jobs (the newest first).
pub const BULK_CAP: i64 = 10_000;

pub const STATES: &[&str] = &["ready", "executing", "blocked", "completed", "dead", "cancelled"];
const LIVE: &[&str] = &["ready", "executing", "blocked"];

/// The filters, as in the URL's query string (empty fields mean no filter).
#[derive(Deserialize, Serialize, Default, Clone, Debug)]
pub struct Filter {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// A unique_key or concurrency_key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// JSON the payload must contain (`payload @> …`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
}

/// Paging and the bulk action, apart from the filters so that links can keep the filters only.
#[derive(Deserialize, Default)]
pub struct Paging {
    pub before: Option<String>,
    pub action: Option<String>,
}

type Params = Vec<Box<dyn ToSql + Sync + Send>>;

/// A WHERE clause and its parameters, and the table to read.
struct Selection {
    source: &'static str,
    conds: Vec<String>,
    params: Params,
}

impl Selection {
    fn sql_where(&self) -> String {
        if self.conds.is_empty() {
            "true".into()
        } else {
            self.conds.join(" AND ")
        }
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }

    fn push(&mut self, cond: impl Fn(usize) -> String, p: Box<dyn ToSql + Sync + Send>) {
        self.params.push(p);
        self.conds.push(cond(self.params.len()));
    }
}

impl Filter {
    /// Empty fields become None, text is trimmed.
    pub fn normalized(self) -> Filter {
        let f = |o: Option<String>| o.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        Filter {
            queue: f(self.queue),
            kind: f(self.kind),
            state: f(self.state),
            key: f(self.key),
            payload: f(self.payload),
        }
    }

    pub fn from_form(form: &HashMap<String, String>) -> Filter {
        let g = |k: &str| form.get(k).cloned();
        Filter {
            queue: g("queue"),
            kind: g("kind"),
            state: g("state"),
            key: g("key"),
            payload: g("payload"),
        }
        .normalized()
    }

    /// The query string of these filters ("queue=mail&state=dead").
    pub fn query_string(&self) -> String {
        serde_urlencoded::to_string(self).unwrap_or_default()
    }

    /// The selection of these filters, restricted to `only` states when given (a bulk action's
    /// states). Err: a message about a bad filter.
    fn select(&self, app: &App, only: Option<&[&str]>) -> Result<Selection, String> {
        let mut states: Vec<&str> = STATES.to_vec();
        if let Some(s) = &self.state {
            let Some(s) = STATES.iter().find(|x| **x == s.as_str()) else {
                return Err(format!("unknown state {s:?}: one of {}", STATES.join(", ")));
            };
            states = vec![*s];
        }
        if let Some(only) = only {
            states.retain(|s| only.contains(s));
        }
        let source = if states.iter().all(|s| LIVE.contains(s)) {
            crate::db::LIVE_JOBS
        } else if states.iter().all(|s| !LIVE.contains(s)) {
            crate::db::FINISHED_JOBS
        } else {
            "jobq.jobs"
        };
        let mut sel = Selection {
            source,
            conds: Vec::new(),
            params: Vec::new(),
        };
        if states.len() < STATES.len() {
            let v: Vec<String> = states.iter().map(|s| s.to_string()).collect();
            sel.push(|n| format!("state = ANY(${n}::text[])"), Box::new(v));
        }
        if let Some(q) = &self.queue {
            sel.push(|n| format!("queue = ${n}"), Box::new(q.clone()));
        }
        if let Some(k) = &self.kind {
            sel.push(|n| format!("kind = ${n}"), Box::new(k.clone()));
        }
        if let Some(k) = &self.key {
            sel.push(
                |n| format!("(unique_key = ${n} OR concurrency_key = ${n})"),
                Box::new(k.clone()),
            );
        }
        if let Some(p) = &self.payload {
            if app.cfg.hide_payloads {
                return Err("payloads are hidden (--hide-payloads): no payload filter".into());
            }
            match serde_json::from_str::<serde_json::Value>(p) {
                Err(e) => return Err(format!("the payload filter is not valid JSON: {e}")),
                Ok(v) if json_holds_nul(&v) => {
                    return Err("the payload filter holds \\u0000, which jsonb cannot hold".into())
                }
                Ok(_) => {}
            }
            sel.push(
                |n| format!("payload @> (${n}::text)::jsonb"),
                Box::new(p.clone()),
            );
            // Only the newest jobs (--payload-window): a range of the primary key.
            sel.push(
                |n| format!("id > (SELECT coalesce(max(id), 0) FROM jobq.jobs) - ${n}"),
                Box::new(app.cfg.payload_window),
            );
        }
        Ok(sel)
    }
}

/// Whether a string or key of `v` holds U+0000 (jsonb refuses `\u0000`, SQLSTATE 22P05).
fn json_holds_nul(v: &serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(json_holds_nul),
        Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || json_holds_nul(v)),
        _ => false,
    }
}

pub async fn list(
    State(app): State<Arc<App>>,
    Query(filter): Query<Filter>,
    Query(paging): Query<Paging>,
) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let filter = filter.normalized();
    let before = match paging
        .before
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        Some(b) => Some(
            b.parse::<i64>()
                .map_err(|_| AppError::BadRequest(format!("before={b:?} is not a job id")))?,
        ),
        None => None,
    };
    let form = filter_form(&app, &filter);
    let sel = match filter.select(&app, None) {
        Ok(s) => s,
        Err(msg) => {
            let body = html! { (form) p.msg.bad { (msg) } };
            return Ok(layout::page(&app, Some(&access), "/jobs", "Jobs", body));
        }
    };
    let client = app.db.client().await?;
    let count: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM (SELECT 1 FROM {} WHERE {} LIMIT {}) s",
                sel.source,
                sel.sql_where(),
                COUNT_CAP + 1
            ),
            &sel.params(),
        )
        .await?
        .get(0);
    let mut params = sel.params();
    let mut conds = sel.sql_where();
    if let Some(b) = &before {
        params.push(b);
        conds = format!("{conds} AND id < ${}", params.len());
    }
    let error_col = if app.cfg.hide_payloads {
        "NULL::text"
    } else {
        "left(last_error::text, 160)"
    };
    let rows = client
        .query(
            &format!(
                "SELECT id, queue, kind, state, attempt, max_attempts, priority,
                        extract(epoch FROM now() - enqueued_at)::float8,
                        extract(epoch FROM now() - run_at)::float8,
                        extract(epoch FROM now() - finished_at)::float8,
                        {error_col}
                   FROM {} WHERE {conds} ORDER BY id DESC LIMIT {}",
                sel.source,
                PAGE_SIZE + 1
            ),
            &params,
        )
        .await?;
    let more = rows.len() as i64 > PAGE_SIZE;
    let shown = &rows[..rows.len().min(PAGE_SIZE as usize)];
    let last_id: Option<i64> = shown.last().map(|r| r.get(0));
    let qs = filter.query_string();
    let amp = if qs.is_empty() {
        String::new()
    } else {
        format!("{qs}&")
    };
    let table_rows: Vec<Markup> = shown
        .iter()
        .map(|r| {
            let id: i64 = r.get(0);
            let queue: String = r.get(1);
            let state: String = r.get(3);
            html! { tr.bad[state == "dead"] {
                td.n { a href=(app.link(&format!("/jobs/{id}"))) { (id) } }
                td { a href=(app.link(&format!("/queues/{}", seg(&queue)))) { (name(&queue)) } }
                td { @if let Some(k) = r.get::<_, Option<String>>(2) { (name(&k)) } }
                td { (state) }
                td.n { (r.get::<_, i32>(4)) " / " (r.get::<_, i32>(5)) }
                td.n { (r.get::<_, i32>(6)) }
                td { (age(r.get(7))) }
                td { (age(r.get(8))) }
                td { (age(r.get(9))) }
                @if !app.cfg.hide_payloads { td.err { (r.get::<_, Option<String>>(10).unwrap_or_default()) } }
            } }
        })
        .collect();
    let mut headers = vec![
        "#id",
        "queue",
        "kind",
        "state",
        "#attempt",
        "#priority",
        "enqueued",
        "run at",
        "finished",
    ];
    if !app.cfg.hide_payloads {
        headers.push("last error");
    }
    let body = html! {
        (form)
        p {
            strong { @if count > COUNT_CAP { (num(COUNT_CAP)) "+" } @else { (num(count)) } }
            " jobs match"
            @if filter.payload.is_some() { " (the payload filter searches the newest " (num(app.cfg.payload_window)) " jobs)" }
            @if before.is_some() { " · " a href=(app.link(&format!("/jobs?{qs}"))) { "newest" } }
            @if app.may_act(&access) {
                " · bulk: "
                a href=(app.link(&format!("/jobs/bulk?{amp}action=retry"))) { "retry dead and cancelled…" } " · "
                a href=(app.link(&format!("/jobs/bulk?{amp}action=cancel"))) { "cancel ready and executing…" }
            }
        }
        (super::table(&headers, table_rows, "No job matches."))
        @if more { @if let Some(last) = last_id {
            p { a href=(app.link(&format!("/jobs?{amp}before={last}"))) { "older →" } }
        } }
    };
    Ok(layout::page(&app, Some(&access), "/jobs", "Jobs", body))
}

fn filter_form(app: &App, f: &Filter) -> Markup {
    let v = |o: &Option<String>| o.clone().unwrap_or_default();
    html! {
        form.filters method="get" action=(app.link("/jobs")) {
            // A value wider than its field is whole in the field's title (the tooltip) too.
            label { "queue" input name="queue" value=(v(&f.queue)) title=[f.queue.as_deref()] size="12"; }
            label { "kind" input name="kind" value=(v(&f.kind)) title=[f.kind.as_deref()] size="12"; }
            label { "state" select name="state" {
                option value="" { "any" }
                @for s in STATES { option value=(s) selected[f.state.as_deref() == Some(*s)] { (s) } }
            } }
            label { "unique or concurrency key" input name="key" value=(v(&f.key)) title=[f.key.as_deref()] size="16"; }
            @if !app.cfg.hide_payloads {
                label { "payload contains (JSON)" input name="payload" value=(v(&f.payload)) title=[f.payload.as_deref()] size="24" placeholder="{\"to\": \"a@example.com\"}"; }
            }
            button type="submit" { "Filter" }
            a href=(app.link("/jobs")) { "clear" }
        }
    }
}

/// The states an action applies to, its verb, and its SQL call.
fn bulk_action(action: Option<&str>) -> Result<(&'static [&'static str], &'static str), AppError> {
    match action {
        Some("retry") => Ok((&["dead", "cancelled"], "retry")),
        Some("cancel") => Ok((&["ready", "executing"], "cancel")),
        _ => Err(AppError::BadRequest(
            "action must be retry or cancel".into(),
        )),
    }
}

/// GET `/jobs/bulk?action=retry&<filters>`: how many jobs the action would touch, and the
/// form that does it.
pub async fn bulk_confirm(
    State(app): State<Arc<App>>,
    Query(filter): Query<Filter>,
    Query(paging): Query<Paging>,
    Extension(csrf): Extension<CsrfToken>,
) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let filter = filter.normalized();
    let (states, verb) = bulk_action(paging.action.as_deref())?;
    let sel = filter
        .select(&app, Some(states))
        .map_err(AppError::BadRequest)?;
    let n: i64 = app
        .db
        .client()
        .await?
        .query_one(
            &format!(
                "SELECT count(*) FROM (SELECT 1 FROM {} WHERE {} LIMIT {BULK_CAP}) s",
                sel.source,
                sel.sql_where()
            ),
            &sel.params(),
        )
        .await?
        .get(0);
    let qs = filter.query_string();
    let body = html! {
        p { "Filter: " code { @if qs.is_empty() { "(all jobs)" } @else { (qs) } } }
        p {
            "This will " strong { (verb) " " (num(n)) } " job(s) in state " (states.join(" or ")) "."
            @if n >= BULK_CAP { " That is the cap: the newest " (num(BULK_CAP)) " matching jobs; run it again for more." }
        }
        @if !app.may_act(&access) {
            p.msg.bad { "Actions are disabled (read-only, or the role is not a member of jobq_admin)." }
        } @else if n > 0 {
            form method="post" action=(app.link("/jobs/bulk")) {
                input type="hidden" name=(CSRF_FIELD) value=(csrf.0);
                input type="hidden" name="action" value=(verb);
                @for (k, v) in [("queue", &filter.queue), ("kind", &filter.kind), ("state", &filter.state), ("key", &filter.key), ("payload", &filter.payload)] {
                    @if let Some(v) = v { input type="hidden" name=(k) value=(v); }
                }
                button.danger type="submit" { "Yes, " (verb) " " (num(n)) " job(s)" }
                " "
                a href=(app.link(&format!("/jobs?{qs}"))) { "no, back to the jobs" }
            }
        }
    };
    Ok(layout::page(
        &app,
        Some(&access),
        "/jobs",
        &format!("Bulk {verb}"),
        body,
    ))
}

/// POST `/jobs/bulk`: runs the action on at most BULK_CAP jobs of the selection, in one
/// transaction with a longer statement timeout (a minute).
pub async fn bulk_run(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Markup, AppError> {
    let access = authorize_action(&app, &headers, &form).await?;
    let filter = Filter::from_form(&form);
    let (states, verb) = bulk_action(form.get("action").map(String::as_str))?;
    let sel = filter
        .select(&app, Some(states))
        .map_err(AppError::BadRequest)?;
    let inner = format!(
        "SELECT id FROM {} WHERE {} ORDER BY id DESC LIMIT {BULK_CAP}",
        sel.source,
        sel.sql_where()
    );
    let sql = if verb == "retry" {
        format!("SELECT count(*) FILTER (WHERE r), count(*) FILTER (WHERE NOT r) FROM (SELECT jobq_retry(id) AS r FROM ({inner}) s) t")
    } else {
        format!(
            "SELECT count(*) FILTER (WHERE r = 'cancelled'), count(*) FILTER (WHERE r = 'executing')
               FROM (SELECT jobq_cancel(id) AS r FROM ({inner}) s) t"
        )
    };
    let mut client = app.db.client().await?;
    let tx = client.transaction().await?;
    tx.batch_execute("SET LOCAL statement_timeout = '60s'")
        .await?;
    let row = tx.query_one(&sql, &sel.params()).await?;
    tx.commit().await?;
    let (a, b): (i64, i64) = (row.get(0), row.get(1));
    let qs = filter.query_string();
    let body = html! {
        @if verb == "retry" {
            p.msg { (num(a)) " job(s) retried (ready again)." }
            @if b > 0 { p.msg.bad { (num(b)) " not retried: their unique key is taken, or they left the dead and cancelled states meanwhile." } }
        } @else {
            p.msg { (num(a)) " job(s) cancelled, " (num(b)) " executing job(s) asked to cancel (their workers see it at their next heartbeat)." }
        }
        p { a href=(app.link(&format!("/jobs?{qs}"))) { "back to the jobs" } }
    };
    Ok(layout::page(
        &app,
        Some(&access),
        "/jobs",
        &format!("Bulk {verb}"),
        body,
    ))
}
