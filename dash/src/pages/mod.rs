//! One module per URL:
//!
//! | URL | module |
//! | --- | --- |
//! | `/`, `/fragments/overview` | `overview` |
//! | `/queues/{queue}` (+ `/pause`, `/resume`) | `queue` |
//! | `/jobs`, `/jobs/bulk` | `jobs` |
//! | `/jobs/{id}` (+ `/retry`, `/cancel`) | `job` |
//! | `/workers` | `workers` |
//! | `/locks` | `locks` |
//! | `/schedules` | `schedules` |
//! | `/rate-limits` | `rate_limits` |
//! | `/events` | `events` |
//! | `/health` | `health` |
//! | `/health.json`, `/healthz` | `healthz` (for machines) |
//! | `/metrics` | `metrics` (Prometheus) |
//!
//! Every URL is served for the first database under the base path and for each database
//! under `/db/<name>` (lib.rs).

pub mod events;
pub mod health;
pub mod healthz;
pub mod job;
pub mod jobs;
pub mod locks;
pub mod metrics;
pub mod overview;
pub mod queue;
pub mod rate_limits;
pub mod schedules;
pub mod workers;

use crate::auth::CSRF_FIELD;
use crate::db::{Access, AppError};
use crate::App;
use axum::http::HeaderMap;
use axum::response::Redirect;
use maud::{html, Markup};
use serde::Deserialize;
use std::collections::HashMap;

/// Every action passes here before it reaches the database: a valid CSRF token, a role that
/// may act, not --read-only. The database then checks its own privileges (42501 → 403).
pub async fn authorize_action(
    app: &App,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Result<Access, AppError> {
    app.csrf
        .check(headers, form.get(CSRF_FIELD).map(String::as_str))?;
    let access = app.db.access().await?;
    if app.cfg.read_only {
        return Err(AppError::Forbidden(
            "this dashboard runs with --read-only: actions are disabled".into(),
        ));
    }
    if !access.admin {
        return Err(AppError::Forbidden(format!(
            "the role {} is not a member of jobq_admin: actions are disabled",
            access.user
        )));
    }
    Ok(access)
}

/// After an action: back to `path` with a message code (`?msg=`).
pub fn back(app: &App, path: &str, msg: &str) -> Redirect {
    let sep = if path.contains('?') { '&' } else { '?' };
    Redirect::to(&format!("{}{sep}msg={msg}", app.link(path)))
}

/// The `?msg=` an action leaves, read back by the page it returns to.
#[derive(Deserialize, Default)]
pub struct Msg {
    pub msg: Option<String>,
}

/// The sentence for a message code (unknown codes show nothing: no text from the URL is shown).
pub fn message(m: &Msg) -> Markup {
    let (text, bad) = match m.msg.as_deref() {
        Some("paused") => (
            "Queue paused: checkout skips it until it is resumed.",
            false,
        ),
        Some("resumed") => ("Queue resumed.", false),
        Some("retried") => ("The job is ready again.", false),
        Some("retry-refused") => (
            "Not retried: the job is not dead or cancelled, or its unique key is taken.",
            true,
        ),
        Some("cancelled") => ("The job is cancelled.", false),
        Some("cancel-requested") => (
            "Cancellation requested: its worker sees it at its next heartbeat.",
            false,
        ),
        Some("cancel-noop") => ("Nothing to cancel: the job had already finished.", true),
        _ => return html! {},
    };
    html! { p.msg.bad[bad] { (text) } }
}

/// A table of `rows` under `headers`; a header starting with '#' is a right-aligned number
/// column. Says `empty` when there is no row.
pub fn table(headers: &[&str], rows: Vec<Markup>, empty: &str) -> Markup {
    html! {
        @if rows.is_empty() {
            p.muted { (empty) }
        } @else {
            table {
                thead { tr { @for h in headers {
                    @if let Some(n) = h.strip_prefix('#') { th.n { (n) } } @else { th { (h) } }
                } } }
                tbody { @for r in rows { (r) } }
            }
        }
    }
}
