//! `/health`: the background worker's last pass, the oldest holder of the vacuum horizon, the
//! NOTIFY queue (jobq.health), and jobq's tables (jobq.table_stats).

use crate::db::AppError;
use crate::layout::{self, age, num};
use crate::App;
use axum::extract::State;
use maud::{html, Markup};
use std::sync::Arc;

pub async fn page(State(app): State<Arc<App>>) -> Result<Markup, AppError> {
    let access = app.db.access().await?;
    let client = app.db.client().await?;
    // Every column, whatever this version of jobq.health has, in its order.
    let health: Option<String> = client
        .query_one(
            "SELECT (SELECT row_to_json(h)::text FROM jobq.health h LIMIT 1)",
            &[],
        )
        .await?
        .get(0);
    let health: serde_json::Map<String, serde_json::Value> = health
        .and_then(|h| serde_json::from_str(&h).ok())
        .unwrap_or_default();
    let pass_age: Option<f64> = client
        .query_one(
            "SELECT extract(epoch FROM now() - last_pass_at)::float8 FROM jobq.health",
            &[],
        )
        .await?
        .get(0);
    let tables = client
        .query(
            "SELECT table_name, live_rows, dead_rows, dead_share::float8, approx_bytes,
                    extract(epoch FROM now() - last_vacuum)::float8
               FROM jobq.table_stats ORDER BY table_name",
            &[],
        )
        .await?;
    let error = health.get("last_pass_error").is_some_and(|v| !v.is_null());
    let trs: Vec<Markup> = tables
        .iter()
        .map(|r| {
            let share: Option<f64> = r.get(3);
            html! { tr.warn[share.is_some_and(|s| s > 0.5)] {
                td { (r.get::<_, String>(0)) }
                td.n { (num(r.get(1))) } td.n { (num(r.get(2))) }
                td.n { (share.map(|s| format!("{:.1} %", s * 100.0)).unwrap_or_else(|| "—".into())) }
                td.n { (r.get::<_, Option<i64>>(4).map(|b| format!("{} kB", num(b / 1024))).unwrap_or_default()) }
                td { (age(r.get(5))) }
            } }
        })
        .collect();
    let body = html! {
        p {
            "Background worker: "
            @match pass_age {
                None => { span.badge.warn { "no pass since the server started" } " (not preloaded, or this database is not served)" },
                Some(a) if error => { span.badge.bad { "last pass failed" } " " (age(Some(a))) },
                Some(a) => { span.badge.ok { "last pass " (age(Some(a))) } },
            }
        }
        table.kv { tbody {
            @for (k, v) in &health {
                tr.bad[k == "last_pass_error" && !v.is_null()] {
                    th { (k) }
                    td { @match v { serde_json::Value::Null => { span.muted { "—" } }, serde_json::Value::String(s) => { (s) }, v => { (v.to_string()) } } }
                }
            }
        } }
        h2 { "jobq's tables" }
        (super::table(&["table", "#live rows", "#dead rows", "#dead share", "#size", "last vacuum"], trs, "No statistics yet."))
    };
    Ok(layout::page(&app, Some(&access), "/health", "Health", body))
}
