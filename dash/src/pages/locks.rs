//! `/locks`: named locks and unique keys (jobq.locks, one namespace), and the concurrency
//! slots in use per key (jobq.concurrency_slots).

use crate::db::AppError;
use crate::layout::{self, age, name, num};
use crate::App;
use axum::extract::State;
use maud::{html, Markup};
use std::sync::Arc;

/// Rows shown per table (the count says how many there are, capped).
const SHOWN: i64 = 500;

pub async fn page(State(app): State<Arc<App>>) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let client = app.db.client().await?;
    let count: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT 1 FROM jobq.locks LIMIT 10001) s",
            &[],
        )
        .await?
        .get(0);
    let locks = client
        .query(
            &format!(
                "SELECT key, worker_id::text, job_id,
                        extract(epoch FROM now() - acquired_at)::float8,
                        extract(epoch FROM now() - expires_at)::float8
                   FROM jobq.locks ORDER BY key LIMIT {SHOWN}"
            ),
            &[],
        )
        .await?;
    let slots = client
        .query(
            &format!(
                "SELECT kind, key, executing, max_limit, extract(epoch FROM now() - oldest_started_at)::float8
                   FROM jobq.concurrency_slots ORDER BY key LIMIT {SHOWN}"
            ),
            &[],
        )
        .await?;
    let lock_rows: Vec<Markup> = locks
        .iter()
        .map(|r| {
            let job: Option<i64> = r.get(2);
            html! { tr {
                td { code { (name(&r.get::<_, String>(0))) } }
                td { @if let Some(j) = job { "unique key of job " a href=(app.link(&format!("/jobs/{j}"))) { (j) } } @else { "named lock" } }
                td { code { (r.get::<_, Option<String>>(1).unwrap_or_default()) } }
                td { (age(r.get(3))) }
                td { (age(r.get(4))) }
            } }
        })
        .collect();
    let slot_rows: Vec<Markup> = slots
        .iter()
        .map(|r| {
            let (n, max): (i64, Option<i32>) = (r.get(2), r.get(3));
            html! { tr.warn[max.is_some_and(|m| n >= m as i64)] {
                td { (r.get::<_, String>(0)) }
                td { code { (name(&r.get::<_, String>(1))) } }
                td.n { (num(n)) } td.n { (max.map(|m| num(m as i64)).unwrap_or_default()) }
                td { (age(r.get(4))) }
            } }
        })
        .collect();
    let body = html! {
        h2 { "Locks and unique keys" }
        p { (if count > 10_000 { "10,000+".to_string() } else { num(count) }) " held" @if count > SHOWN { ", the first " (SHOWN) " by key:" } }
        (super::table(&["key", "held by", "worker", "acquired", "expires"], lock_rows, "No lock or unique key is held."))
        h2 { "Concurrency slots in use" }
        (super::table(&["kind", "key", "#executing", "#limit", "oldest started"], slot_rows, "No concurrency slot is in use."))
    };
    Ok(layout::page(
        &app,
        Some(&access),
        "/locks",
        "Locks & keys",
        body,
    ))
}
