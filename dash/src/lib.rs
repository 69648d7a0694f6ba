//! jobq-dash: jobq's web dashboard. Every page reads the database's own views (schema jobq)
//! as the role in the connection string, and every action is a jobq_* function call that the
//! database's privileges decide.
//!
//! Where things are:
//! - `config`: flags and environment, the basic-auth-off-loopback rule;
//! - `db`: the pool (`SET statement_timeout` on every connection), what the role may do, errors;
//! - `auth`: basic auth and CSRF tokens;
//! - `input`: what no request may carry (a NUL in its path, query or form), refused centrally;
//! - `layout`: the page frame, the error page, number and age formatting;
//! - `charts`: counters from `jobq.throughput` as SVG;
//! - `thresholds`: the health page's figures, their amber and red thresholds (the alert rules'
//!   of deploy/prometheus) and what to do when red;
//! - `pages::*`: one module per URL (see `table` below for the map).

pub mod auth;
pub mod charts;
pub mod config;
pub mod db;
pub mod input;
pub mod layout;
pub mod pages;
pub mod thresholds;

use axum::routing::{get, post, MethodRouter};
use axum::Router;
use std::sync::Arc;

pub use config::Config;

/// Everything a handler needs.
pub struct App {
    pub cfg: Config,
    pub db: db::Db,
    pub csrf: auth::Csrf,
    /// The base path without its trailing slash ("" at the root).
    pub prefix: String,
}

impl App {
    /// A link to `path` ("/jobs") under the base path.
    pub fn link(&self, path: &str) -> String {
        format!("{}{}", self.prefix, path)
    }

    /// Whether actions are shown and accepted: the role is a member of jobq_admin and the
    /// dashboard is not --read-only. (The database still checks every call.)
    pub fn may_act(&self, access: &db::Access) -> bool {
        access.admin && !self.cfg.read_only
    }
}

/// The dashboard's routes under the base path, with basic auth and CSRF cookies. Connects to
/// the database once to fail early on a bad connection string.
pub async fn router(cfg: Config) -> Result<Router, String> {
    cfg.validate()?;
    let db = db::Db::new(&cfg)?;
    db.access()
        .await
        .map_err(|e| format!("cannot query the database: {e:?}"))?;
    let prefix = cfg.prefix();
    let app = Arc::new(App {
        cfg,
        db,
        csrf: auth::Csrf::new(),
        prefix: prefix.clone(),
    });
    Ok(routes(app, &prefix))
}

/// Every route: its path under the base path (with its `{parameters}`) and what serves it.
/// The router is made of these and nothing else; the tests walk them (`paths`).
fn table() -> Vec<(&'static str, MethodRouter<Arc<App>>)> {
    use pages::*;
    vec![
        ("/", get(overview::page)),
        ("/fragments/overview", get(overview::fragment)),
        ("/queues/{queue}", get(queue::page)),
        ("/queues/{queue}/pause", post(queue::pause)),
        ("/queues/{queue}/resume", post(queue::resume)),
        ("/jobs", get(jobs::list)),
        ("/jobs/bulk", get(jobs::bulk_confirm).post(jobs::bulk_run)),
        ("/jobs/{id}", get(job::page)),
        ("/jobs/{id}/retry", post(job::retry)),
        ("/jobs/{id}/cancel", post(job::cancel)),
        ("/workers", get(workers::page)),
        ("/locks", get(locks::page)),
        ("/schedules", get(schedules::page)),
        ("/rate-limits", get(rate_limits::page)),
        ("/events", get(events::page)),
        ("/health", get(health::page)),
        ("/metrics", get(metrics::page)),
    ]
}

/// The path of every route under the base path, with its `{parameters}` ("/jobs/{id}").
pub fn paths() -> Vec<&'static str> {
    table().into_iter().map(|(path, _)| path).collect()
}

fn routes(app: Arc<App>, prefix: &str) -> Router {
    let mut r = Router::new();
    for (path, route) in table() {
        r = r.route(&format!("{prefix}{path}"), route);
    }
    if !prefix.is_empty() {
        // The base path without its slash shows the overview too.
        r = r.route(prefix, get(pages::overview::page));
    }
    // The last layer added runs first: basic auth, then the CSRF cookie, then the NUL check.
    r.layer(axum::middleware::from_fn(input::refuse_nul))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            auth::csrf_layer,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            auth::basic_auth_layer,
        ))
        .with_state(app)
}

/// Serves `router` on `listener` until ctrl-c.
pub async fn serve(listener: tokio::net::TcpListener, router: Router) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
