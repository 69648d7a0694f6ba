//! jobq-dash: jobq's web dashboard. Every page reads the database's own views (schema jobq)
//! as the role in the connection string, and every action is a jobq_* function call that the
//! database's privileges decide.
//!
//! Where things are:
//! - `config`: flags and environment, the basic-auth-off-loopback rule, the databases served;
//! - `db`: a database's pool (`SET statement_timeout` on every connection), what the role may
//!   do, errors;
//! - `pgerror`: what a failed connection says, as psql would say it;
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
pub mod pgerror;
pub mod thresholds;

use axum::routing::{get, post, MethodRouter};
use axum::Router;
use std::sync::Arc;

pub use config::Config;

/// Everything a handler needs. One per database served: the first database's at the base
/// path (its URLs are those of a dashboard of one database), each one's at `/db/<name>/` too.
pub struct App {
    pub cfg: Config,
    /// The database the pages under `prefix` show.
    pub db: Arc<db::Db>,
    /// Every database served, the default first (the nav bar's database links).
    pub dbs: Vec<Arc<db::Db>>,
    /// Whether /metrics, /health.json and /healthz here cover every database (at the base
    /// path) or `db` only (under `/db/<name>`).
    pub every: bool,
    pub csrf: Arc<auth::Csrf>,
    /// The path the pages are under, without its trailing slash: the base path ("" at the
    /// root), or the base path and `/db/<name>`.
    pub prefix: String,
}

impl App {
    /// A link to `path` ("/jobs") under the base path.
    pub fn link(&self, path: &str) -> String {
        format!("{}{}", self.prefix, path)
    }

    /// The home of database `name`: `/db/<name>/` under the base path.
    pub fn db_home(&self, name: &str) -> String {
        format!("{}/db/{}/", self.cfg.prefix(), layout::seg(name))
    }

    /// The databases /metrics, /health.json and /healthz cover here.
    pub fn scope(&self) -> Vec<Arc<db::Db>> {
        if self.every {
            self.dbs.clone()
        } else {
            vec![self.db.clone()]
        }
    }

    /// Whether actions are shown and accepted: the role is a member of jobq_admin and the
    /// dashboard is not --read-only. (The database still checks every call.)
    pub fn may_act(&self, access: &db::Access) -> bool {
        access.admin && !self.cfg.read_only
    }
}

/// The dashboard's routes under the base path, with basic auth and CSRF cookies: every page of
/// the first database there, and of each database under `/db/<name>`. Connects to each
/// database once, to fail early (saying why) on a bad connection string, a server that refuses
/// the connection or a database without jobq, and to learn its name.
pub async fn router(cfg: Config) -> Result<Router, String> {
    cfg.validate()?;
    let urls = config::database_urls(&cfg.database_url, |k| std::env::var(k).ok());
    if urls.is_empty() {
        return Err(format!(
            "no database: give --database-url (or {}); repeat it for several databases",
            config::DATABASE_URL_ENV
        ));
    }
    let mut dbs: Vec<Arc<db::Db>> = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        let which = if urls.len() > 1 { format!(" (--database-url {})", i + 1) } else { String::new() };
        let db = db::Db::open(&cfg, url)
            .await
            .map_err(|e| format!("cannot use the database{which}: {e}"))?;
        if let Some(other) = dbs.iter().position(|d| d.name == db.name) {
            return Err(format!(
                "--database-url {} and {} are both named \"{}\": name one with {}=NAME in its connection string",
                other + 1,
                i + 1,
                db.name,
                config::NAME_KEY
            ));
        }
        dbs.push(Arc::new(db));
    }
    let base = cfg.prefix();
    let csrf = Arc::new(auth::Csrf::new());
    let app = |db: &Arc<db::Db>, every: bool, prefix: String| {
        Arc::new(App {
            cfg: cfg.clone(),
            db: db.clone(),
            dbs: dbs.clone(),
            every,
            csrf: csrf.clone(),
            prefix,
        })
    };
    let first = app(&dbs[0], true, base.clone());
    let mut r = routes(first.clone());
    for db in &dbs {
        r = r.merge(routes(app(db, false, format!("{base}/db/{}", layout::seg(&db.name)))));
    }
    // The last layer added runs first: basic auth, then the CSRF cookie, then the NUL check.
    Ok(r.layer(axum::middleware::from_fn(input::refuse_nul))
        .layer(axum::middleware::from_fn_with_state(first.clone(), auth::csrf_layer))
        .layer(axum::middleware::from_fn_with_state(first, auth::basic_auth_layer)))
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
        ("/health.json", get(healthz::json)),
        ("/healthz", get(healthz::check)),
        ("/metrics", get(metrics::page)),
    ]
}

/// The path of every route under the base path, with its `{parameters}` ("/jobs/{id}").
pub fn paths() -> Vec<&'static str> {
    table().into_iter().map(|(path, _)| path).collect()
}

/// The routes of one App, under its prefix.
fn routes(app: Arc<App>) -> Router {
    let prefix = app.prefix.clone();
    let mut r = Router::new();
    for (path, route) in table() {
        r = r.route(&format!("{prefix}{path}"), route);
    }
    if !prefix.is_empty() {
        // The prefix without its slash shows the overview too.
        r = r.route(&prefix, get(pages::overview::page));
    }
    r.with_state(app)
}

/// Serves `router` on `listener` until ctrl-c.
pub async fn serve(listener: tokio::net::TcpListener, router: Router) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
