//! `/rate-limits`: every rate limit and its window now (jobq.rate_windows).

use crate::db::AppError;
use crate::layout::{self, age, exact_dur, name, num};
use crate::App;
use axum::extract::State;
use maud::{html, Markup};
use std::sync::Arc;

pub async fn page(State(app): State<Arc<App>>) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let client = app.db.client().await?;
    let rows = client
        .query(
            "SELECT key, max_starts, extract(epoch FROM per)::float8, starts_in_window,
                    extract(epoch FROM now() - next_start_at)::float8
               FROM jobq.rate_windows ORDER BY key LIMIT 1000",
            &[],
        )
        .await?;
    let trs: Vec<Markup> = rows
        .iter()
        .map(|r| {
            let (max, used): (i32, i64) = (r.get(1), r.get(3));
            let full = used >= max as i64;
            html! { tr.warn[full] {
                td { code { (name(&r.get::<_, String>(0))) } }
                td.n { (num(max as i64)) " per " (exact_dur(r.get(2))) }
                td.n { (num(used)) }
                td { @if full { "full: next start " (age(r.get(4))) } @else { "open" } }
            } }
        })
        .collect();
    let body = html! {
        (super::table(&["key", "#limit", "#starts in window", "window"], trs, "No rate limit is set."))
    };
    Ok(layout::page(
        &app,
        Some(&access),
        "/rate-limits",
        "Rate limits",
        body,
    ))
}
