//! The health page's figures for machines: `/health.json` (everything `/health` shows, as
//! JSON) and `/healthz` (for a load balancer or an uptime check: 200 when every figure is green,
//! else 503 with a line for each figure that is not). At the base path both cover every
//! database the dashboard serves, under `/db/<name>/` that database only; a database that
//! cannot be read is not green.

use super::health::{self, Figure, Health};
use crate::db::{AppError, Db, Edition};
use crate::thresholds::Level;
use crate::App;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The health of every database in the scope, read at once.
async fn read_all(app: &App) -> Vec<(Arc<Db>, Result<Health, AppError>)> {
    let reads: Vec<_> = app
        .scope()
        .into_iter()
        .map(|db| {
            let d = db.clone();
            (db, tokio::spawn(async move { health::read(&d).await }))
        })
        .collect();
    let mut out = Vec::new();
    for (db, read) in reads {
        let h = read.await.map_err(|e| AppError::Unavailable(e.to_string())).and_then(|r| r);
        out.push((db, h));
    }
    out
}

fn figure_json(f: &Figure, edition: Edition) -> Value {
    let c = f.check;
    let level = f.level();
    let mut v = json!({
        "alert": c.alert,
        "metric": c.metric,
        "label": c.label,
        "unit": c.unit.name(),
        // JSON has no infinity: a figure that never happened (no pass yet) is null.
        "value": if f.value.is_finite() { json!(f.value) } else { Value::Null },
        "shown": f.shown(),
        "level": level.word(),
        "amber": c.amber,
        "red": c.red,
        "meaning": c.meaning,
    });
    if level != Level::Green {
        v["what_to_do"] = json!(c.what_to_do(edition));
    }
    if !f.about.is_empty() {
        v["about"] = Value::Object(f.about.iter().map(|(k, s)| (k.to_string(), json!(s))).collect());
    }
    v
}

/// `/health.json`: `{"status", "databases": [{"database", "status", "jobq", "figures",
/// "health", "tables"}]}`, "jobq" being `{"version", "edition"}` (edition "extension" or
/// "sql", as jobq_version() says), a status being the worst level of its figures (green, amber, red), or
/// "unreadable" (with "error") for a database that cannot be read; the whole's status is the
/// worst of its databases', an unreadable one counting as red.
pub async fn json(State(app): State<Arc<App>>) -> Response {
    let mut worst = Level::Green;
    let mut dbs = Vec::new();
    for (db, h) in read_all(&app).await {
        let mut d = Map::new();
        d.insert("database".into(), json!(db.name));
        match h {
            Ok(h) => {
                worst = worst.max(h.level());
                d.insert("status".into(), json!(h.level().word()));
                d.insert("jobq".into(), json!({"version": h.jobq.version, "edition": h.jobq.edition.name()}));
                d.insert("figures".into(), Value::Array(h.figures.iter().map(|f| figure_json(f, h.jobq.edition)).collect()));
                d.insert("health".into(), Value::Object(h.columns));
                d.insert("tables".into(), json!(h.tables));
            }
            Err(e) => {
                worst = Level::Red;
                d.insert("status".into(), json!("unreadable"));
                d.insert("error".into(), json!(e.to_string()));
            }
        }
        dbs.push(Value::Object(d));
    }
    let body = json!({"status": worst.word(), "databases": dbs});
    (
        [(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")],
        serde_json::to_string_pretty(&body).unwrap_or_default(),
    )
        .into_response()
}

/// `/healthz`: 200 and `ok` when every figure of every database is green; else 503, one line
/// for each figure that is not ("app: red: Longest wait of a due job (any queue) is 10 min
/// (amber above 1 min, red above 5 min; alert JobqQueueBackingUp; queue=late)") and for each
/// database that cannot be read.
pub async fn check(State(app): State<Arc<App>>) -> Response {
    let mut names = Vec::new();
    let mut lines = Vec::new();
    for (db, h) in read_all(&app).await {
        names.push(db.name.clone());
        match h {
            Ok(h) => {
                for f in h.figures.iter().filter(|f| f.level() != Level::Green) {
                    let about: String = f.about.iter().map(|(k, v)| format!("; {k}={v}")).collect();
                    lines.push(format!(
                        "{}: {}: {} is {} ({}; alert {}{about})",
                        db.name,
                        f.level().word(),
                        f.check.label,
                        f.shown(),
                        health::threshold(f.check),
                        f.check.alert
                    ));
                }
            }
            Err(e) => lines.push(format!("{}: unreadable: {e}", db.name)),
        }
    }
    let (status, body) = if lines.is_empty() {
        (StatusCode::OK, format!("ok: every figure is green ({})\n", names.join(", ")))
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, lines.join("\n") + "\n")
    };
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8"), (header::CACHE_CONTROL, "no-store")],
        body,
    )
        .into_response()
}
