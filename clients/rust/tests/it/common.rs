//! What the tests share: connections as each role, unique queue names, and waiting for a
//! state of the database with a deadline.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jobq_client::tokio_postgres::{self, Client, NoTls};
use tokio::sync::OnceCell;

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| {
        panic!("{key} is not set: run these tests with scripts/test-clients.sh rust")
    })
}

/// A worker's connection string (role jobq_test_app, granted jobq_worker).
pub fn dsn() -> String {
    env("JOBQ_TEST_DSN")
}

/// The superuser's.
pub fn admin_dsn() -> String {
    env("JOBQ_TEST_ADMIN_DSN")
}

/// The server's log file (the suites read it to prove that a clean shutdown logs no error).
pub fn server_log() -> String {
    env("JOBQ_TEST_SERVER_LOG")
}

/// jobq_test_app's, through PgBouncer in transaction mode.
pub fn pooler_dsn() -> String {
    env("JOBQ_TEST_POOLER_DSN")
}

/// The server's jobq: `"extension"`, or `"sql"` for the SQL edition (no background worker: the
/// workers' heartbeats run the passes).
pub fn edition() -> String {
    std::env::var("JOBQ_TEST_EDITION").unwrap_or_else(|_| "extension".into())
}

/// What a waiting checkout waits on in `pg_stat_activity.wait_event`: the extension's latch,
/// or in the SQL edition the `pg_sleep` of the call that polls, or the advisory lock it holds,
/// on which the others sleep (docs/sql-edition.md, "Waiting checkout polls").
pub fn waiting_events() -> Vec<&'static str> {
    if edition() == "sql" {
        vec!["PgSleep", "advisory"]
    } else {
        vec!["Extension"]
    }
}

/// The worker's connection string with another login role.
pub fn dsn_as(role: &str) -> String {
    dsn().replacen("jobq_test_app@", &format!("{role}@"), 1)
}

pub async fn connect(dsn: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(dsn, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {dsn}: {e}"));
    tokio::spawn(connection);
    client
}

pub async fn app() -> Client {
    connect(&dsn()).await
}

pub async fn admin() -> Client {
    connect(&admin_dsn()).await
}

/// A queue (or key) name no other test, and no earlier run on the same server, uses.
pub fn unique(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("rs-{name}-{nanos}")
}

/// Polls `check` until it is true; panics naming `what` after `timeout`.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The state of a job, read as the superuser.
pub async fn state(admin: &Client, id: i64) -> String {
    admin
        .query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0)
}

/// How many of `ids` are in `state`.
pub async fn count_in_state(admin: &Client, ids: &[i64], state: &str) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM jobq.jobs WHERE id = ANY($1) AND state = $2",
            &[&ids, &state],
        )
        .await
        .unwrap()
        .get(0)
}

static RUNS_TABLE: OnceCell<()> = OnceCell::const_new();

/// The table the test worker process writes a row to for every run of its handler.
pub async fn runs_table() {
    RUNS_TABLE
        .get_or_init(|| async {
            admin()
                .await
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS public.client_runs (
                         job_id bigint NOT NULL, pid integer NOT NULL, attempt integer NOT NULL,
                         worker uuid NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
                     GRANT SELECT, INSERT ON public.client_runs TO jobq_test_app;",
                )
                .await
                .unwrap();
        })
        .await;
}
