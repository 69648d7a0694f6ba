//! The connection pool, what the connected role may do, which jobq the database has (release
//! and edition), and the errors a page can end in.

use crate::config::Config;
use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::str::FromStr;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;
use tokio_postgres::NoTls;

/// How long what the role may do is trusted before it is asked again.
const ACCESS_TTL: Duration = Duration::from_secs(5);

/// One database the dashboard serves.
pub struct Db {
    /// Its name on the pages, in its URLs (`/db/<name>/`) and in the `database` label of
    /// /metrics: the connection string's `dash_name`, else the server's current_database().
    pub name: String,
    pub pool: Pool,
    /// The connection string, to name the server when a connection fails.
    pg: tokio_postgres::Config,
    access: Mutex<Option<(Instant, Access)>>,
}

/// What the role the dashboard connects as may do and read, asked of the database itself.
#[derive(Clone, Debug)]
pub struct Access {
    pub user: String,
    /// Member of jobq_admin: may retry, cancel, pause and resume (the database decides anyway).
    pub admin: bool,
    /// jobq.throughput(timestamptz, interval) exists and may be executed: charts have data.
    pub counters: bool,
    /// May read jobq.pauses: the queue page says whether the queue is paused.
    pub pauses: bool,
    /// The jobq the database has: its release and edition.
    pub jobq: Installed,
}

/// The jobq a database has, as `jobq_version()` says (0.4 on, both editions), else (an older
/// extension, which has no jobq_version(), or a role that may not call it) as pg_extension
/// says: the SQL edition is no extension.
#[derive(Clone, Debug, PartialEq)]
pub struct Installed {
    /// Its release ("0.5.0"), when known.
    pub version: Option<String>,
    pub edition: Edition,
}

/// jobq's two editions: the extension (its library, preloaded, with its background worker)
/// and the SQL edition (the same SQL contract from one file, `jobq-sql--V.sql`: no library,
/// custom settings, the passes run by pg_cron or by the workers' heartbeats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edition {
    Extension,
    Sql,
}

impl Edition {
    /// As jobq_version() names it, and /health.json: "extension" or "sql".
    pub fn name(self) -> &'static str {
        match self {
            Edition::Extension => "extension",
            Edition::Sql => "sql",
        }
    }

    /// For people: "extension" or "SQL edition".
    pub fn label(self) -> &'static str {
        match self {
            Edition::Extension => "extension",
            Edition::Sql => "SQL edition",
        }
    }
}

impl Installed {
    /// "jobq 0.5.0 (SQL edition)".
    pub fn label(&self) -> String {
        match &self.version {
            Some(v) => format!("jobq {v} ({})", self.edition.label()),
            None => format!("jobq ({})", self.edition.label()),
        }
    }
}

/// jobq.heartbeat_timeout, as an interval, in SQL: the extension's setting, or the SQL
/// edition's custom one (`ALTER DATABASE app SET jobq.heartbeat_timeout = '10s'`), else the
/// contract's default of 30 s. current_setting(name, true) is NULL (or '') where nothing
/// defines it: the SQL edition with the setting unset, or a session of the extension that has
/// not loaded its library yet.
pub const HEARTBEAT_TIMEOUT: &str =
    "coalesce(nullif(current_setting('jobq.heartbeat_timeout', true), '')::interval, interval '30 seconds')";

/// The jobs in states ready and executing (jobq_reader may read both tables behind jobq.jobs):
/// a query about live jobs never walks the history.
pub const LIVE_JOBS: &str = "jobq.live_jobs";
/// The completed, dead and cancelled jobs, until jobq.retention prunes them.
pub const FINISHED_JOBS: &str = "jobq.finished_jobs";

impl Db {
    /// Connects to the database of `conn` (a connection string, with `dash_name` or not) and
    /// checks that jobq is installed there: the dashboard refuses to start otherwise, saying
    /// why as psql would.
    pub async fn open(cfg: &Config, conn: &str) -> Result<Db, String> {
        let (name, conn) = crate::config::split_name(conn)?;
        let mut db = Db::new(cfg, &conn)?;
        let row = db
            .client()
            .await
            .map_err(|e| format!("{e}"))?
            .query_one("SELECT current_database()::text, to_regnamespace('jobq') IS NOT NULL", &[])
            .await
            .map_err(|e| crate::pgerror::connection(&e, &db.pg))?;
        let current: String = row.get(0);
        if !row.get::<_, bool>(1) {
            return Err(format!(
                "jobq is not installed in database \"{current}\" ({}): CREATE EXTENSION jobq there (or install its SQL edition, jobq-sql--V.sql), or connect to another database",
                crate::pgerror::servers(&db.pg)
            ));
        }
        db.name = name.unwrap_or(current);
        Ok(db)
    }

    /// A pool whose every connection runs `SET statement_timeout` first (no connection yet).
    pub fn new(cfg: &Config, conn: &str) -> Result<Db, String> {
        let mut pg = tokio_postgres::Config::from_str(conn)
            .map_err(|e| crate::pgerror::chain(&e))?;
        if pg.get_application_name().is_none() {
            pg.application_name("jobq-dash");
        }
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(Duration::from_secs(5));
        }
        let mgr = Manager::from_config(
            pg.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let set = format!(
            "SET statement_timeout = {}",
            cfg.query_timeout.as_millis().max(1)
        );
        let pool = Pool::builder(mgr)
            .max_size(cfg.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(5)))
            .create_timeout(Some(Duration::from_secs(10)))
            .post_create(Hook::async_fn(move |client, _| {
                let set = set.clone();
                Box::pin(
                    async move { client.batch_execute(&set).await.map_err(HookError::Backend) },
                )
            }))
            .build()
            .map_err(|e| format!("connection pool: {e}"))?;
        Ok(Db {
            name: String::new(),
            pool,
            pg,
            access: Mutex::new(None),
        })
    }

    /// A connection of the pool; without one, what psql would say of the failed connection.
    pub async fn client(&self) -> Result<deadpool_postgres::Client, AppError> {
        self.pool
            .get()
            .await
            .map_err(|e| AppError::Unavailable(crate::pgerror::pool(&e, &self.pg)))
    }

    /// What the role may do, and which jobq the database has, asked at most every few seconds.
    pub async fn access(&self) -> Result<Access, AppError> {
        let mut cached = self.access.lock().await;
        if let Some((at, a)) = cached.as_ref() {
            if at.elapsed() < ACCESS_TTL {
                return Ok(a.clone());
            }
        }
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT current_user::text,
                        pg_has_role(current_user, 'jobq_admin', 'MEMBER'),
                        coalesce(has_function_privilege(to_regprocedure('jobq.throughput(timestamptz, interval)'), 'EXECUTE'), false),
                        coalesce(has_table_privilege(to_regclass('jobq.pauses'), 'SELECT'), false),
                        coalesce(has_function_privilege(to_regprocedure('jobq_version()'), 'EXECUTE'), false),
                        (SELECT extversion::text FROM pg_extension WHERE extname = 'jobq')",
                &[],
            )
            .await?;
        let extversion: Option<String> = row.get(5);
        // jobq_version() is named in a statement of its own: where it does not exist (an
        // extension older than 0.4), naming it would fail the statement.
        let jobq = if row.get::<_, bool>(4) {
            let v = client.query_one("SELECT version, edition FROM jobq_version()", &[]).await?;
            Installed {
                version: v.get(0),
                edition: if v.get::<_, Option<&str>>(1) == Some("sql") { Edition::Sql } else { Edition::Extension },
            }
        } else {
            Installed {
                edition: if extversion.is_some() { Edition::Extension } else { Edition::Sql },
                version: extversion,
            }
        };
        let a = Access {
            user: row.get(0),
            admin: row.get(1),
            counters: row.get(2),
            pauses: row.get(3),
            jobq,
        };
        *cached = Some((Instant::now(), a.clone()));
        Ok(a)
    }
}

/// How a request fails: each variant is a status and an error page (pages::error_page).
#[derive(Debug)]
pub enum AppError {
    /// A statement failed: 42501 is 403, a statement timeout 504, the rest 500.
    Db(tokio_postgres::Error),
    /// No connection to the database.
    Unavailable(String),
    /// The dashboard refuses it itself: a missing CSRF token, an action while read-only or
    /// connected as a role that may not act.
    Forbidden(String),
    NotFound(String),
    BadRequest(String),
}

impl From<tokio_postgres::Error> for AppError {
    fn from(e: tokio_postgres::Error) -> Self {
        AppError::Db(e)
    }
}

impl AppError {
    /// The SQLSTATE of a database error.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            AppError::Db(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }
}

/// What went wrong, in a sentence (a server error's message and SQLSTATE).
impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppError::Db(e) => match e.as_db_error() {
                Some(d) => write!(f, "{} (SQLSTATE {})", d.message(), d.code().code()),
                None => f.write_str(&crate::pgerror::chain(e)),
            },
            AppError::Unavailable(m) | AppError::Forbidden(m) | AppError::NotFound(m) | AppError::BadRequest(m) => {
                f.write_str(m)
            }
        }
    }
}
