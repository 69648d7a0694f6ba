//! The dashboard's test cluster: one PostgreSQL 15 (Debian's) with jobq, started by the
//! extension's own test harness (tests/common, included below: initdb and pg_ctl as the OS user
//! `postgres`, a free loopback port, stopped and removed when the test process exits,
//! JOBQ_KEEP_CLUSTERS=1 keeps it). What is here is what the dashboard's tests need on top of it:
//! async connections (tokio-postgres; the harness's blocking client cannot run inside a tokio
//! test) as any login role, fresh databases, jobq's settings, and an async wait.
//!
//! Two editions, as the harness runs them:
//! - the extension (by default): jobq preloaded, must already be installed (`cargo pgrx
//!   install`; these tests never install it), each test database gets `CREATE EXTENSION jobq`,
//!   and the background worker passes in each;
//! - the SQL edition, when `JOBQ_SQL_EDITION` names a built `jobq-sql--V.sql`
//!   (scripts/build-sql-edition.py): no library preloaded, each test database is the harness's
//!   copy of a template where `jobq_installer` (CREATEROLE, no superuser) installed the file,
//!   settings are per database (`ALTER DATABASE`: nothing registers jobq.* there, so `ALTER
//!   SYSTEM` refuses them), and the passes run as a deployment runs them: a thread of this
//!   process (`passes`) calls `SELECT jobq_reap()` every 100 ms in every database the tests made,
//!   standing in for pg_cron (jobq_schedule_passes) or the workers of the client libraries.
#![allow(dead_code)]

#[path = "../../../tests/common/mod.rs"]
mod harness;
pub mod dash;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static DB_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Whether the tests run against the SQL edition (`JOBQ_SQL_EDITION`), not the extension.
pub fn sql_edition() -> bool {
    harness::sql_edition().is_some()
}

pub struct Cluster {
    pub port: u16,
    /// Its data directory (pg_hba.conf).
    pub data: std::path::PathBuf,
    /// The harness's handle of it (the SQL edition's databases are made through it).
    harness: harness::Cluster,
}

/// The cluster of this test binary, started on first use, with the login roles the tests
/// connect as: dash_admin (jobq_admin) and dash_reader (jobq_reader).
pub fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        // A reaper per test database (each test makes its own), with the launcher: more than
        // the default 8 background processes.
        let c = harness::Cluster::start("dash", &["max_worker_processes = 32"]);
        // Roles are cluster-wide and jobq's roles exist once jobq is installed somewhere: with
        // CREATE EXTENSION, or (SQL edition) once the harness made its template, which its
        // first fresh database does. (psql, and the harness's blocking client on a thread of
        // its own: this may run inside a tokio test.)
        let install = if sql_edition() {
            std::thread::scope(|s| s.spawn(|| c.fresh_db()).join().expect("the SQL edition's template"));
            start_passes(c.port);
            // jobq.health's horizon (jobq._oldest_horizon(), SECURITY DEFINER) reads
            // pg_stat_activity as the role that installed jobq: the other roles' sessions show
            // their transaction and snapshot only to a member of pg_read_all_stats (pg_monitor
            // includes it), as a deployment's admin role may be. With the extension it runs as
            // the superuser that created it.
            "GRANT pg_read_all_stats TO jobq_installer; "
        } else {
            "CREATE EXTENSION jobq; "
        };
        let out = harness::pg_command("psql")
            .args(["-h", "127.0.0.1", "-p", &c.port.to_string(), "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c"])
            .arg(format!(
                "{install}CREATE ROLE dash_admin LOGIN; CREATE ROLE dash_reader LOGIN; \
                 GRANT jobq_admin TO dash_admin; GRANT jobq_reader TO dash_reader;"
            ))
            .output()
            .expect("spawn psql");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Cluster { port: c.port, data: c.data.clone(), harness: c }
    })
}

/// SQL edition: the databases the passes run in, each with whether its connection must be made
/// again (its settings changed: `ALTER DATABASE ... SET` reaches new sessions only).
static PASSED: std::sync::Mutex<Vec<(String, bool)>> = std::sync::Mutex::new(Vec::new());

/// SQL edition: nothing runs the maintenance passes there but pg_cron (jobq_schedule_passes),
/// the heartbeats of the client libraries' workers, or whoever calls `SELECT jobq_reap()`. This
/// thread stands in for them, as the extension's background worker does in its tests: every
/// 100 ms, one `SELECT jobq_reap()` in each database of `PASSED`, as the superuser (pg_cron runs
/// it as the role that installed jobq: the function is SECURITY DEFINER either way). A pass that
/// fails (a lock it waited for too long) is said on stderr and tried again 100 ms later.
fn start_passes(port: u16) {
    std::thread::Builder::new()
        .name("jobq-passes".into())
        .spawn(move || {
            let mut clients: std::collections::HashMap<String, postgres::Client> = Default::default();
            loop {
                let dbs: Vec<(String, bool)> = {
                    let mut passed = PASSED.lock().unwrap();
                    let now = passed.clone();
                    passed.iter_mut().for_each(|d| d.1 = false);
                    now
                };
                for (db, renew) in dbs {
                    if renew {
                        clients.remove(&db);
                    }
                    if !clients.contains_key(&db) {
                        let url = format!("host=127.0.0.1 port={port} user=postgres dbname={db} application_name=jobq-passes connect_timeout=10");
                        match postgres::Client::connect(&url, postgres::NoTls) {
                            Ok(c) => {
                                clients.insert(db.clone(), c);
                            }
                            Err(e) => {
                                eprintln!("jobq passes: connect to {db}: {e}");
                                continue;
                            }
                        }
                    }
                    if let Err(e) = clients.get_mut(&db).unwrap().batch_execute("SELECT jobq_reap()") {
                        eprintln!("jobq passes: SELECT jobq_reap() in {db}: {e}");
                        clients.remove(&db);
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
        .expect("spawn the passes' thread");
}

impl Cluster {
    pub fn url(&self, db: &str, user: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={user} dbname={db} connect_timeout=10",
            self.port
        )
    }

    pub async fn connect(&self, db: &str, user: &str) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url(db, user), tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to {db} as {user}: {e}"));
        tokio::spawn(conn);
        client
    }

    /// Makes login role `role` with `password`, the one role of the cluster that must give a
    /// password (scram-sha-256; every other login is trusted).
    pub async fn password_role(&self, role: &str, password: &str) {
        let admin = self.connect("postgres", "postgres").await;
        admin
            .batch_execute(&format!("CREATE ROLE {role} LOGIN PASSWORD '{password}' IN ROLE jobq_reader"))
            .await
            .unwrap();
        // Root may write the file (it belongs to postgres); the first line that matches wins.
        let hba = self.data.join("pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).unwrap();
        std::fs::write(&hba, format!("host all {role} 127.0.0.1/32 scram-sha-256\n{rules}")).unwrap();
        admin.batch_execute("SELECT pg_reload_conf()").await.unwrap();
        let url = format!("{} password=wrong", self.url("postgres", role));
        wait_until("the server to ask for a password", std::time::Duration::from_secs(30), || async {
            tokio_postgres::connect(&url, tokio_postgres::NoTls).await.is_err()
        })
        .await;
    }

    /// A new database with jobq in it; each test gets its own. In the SQL edition, the
    /// harness's copy of its template, where the passes run from now on (`start_passes`).
    pub async fn fresh_db(&self) -> String {
        if sql_edition() {
            let name = self.fresh_db_without_passes().await;
            PASSED.lock().unwrap().push((name.clone(), false));
            return name;
        }
        let name = format!(
            "d{}_{}",
            std::process::id(),
            DB_COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        self.connect("postgres", "postgres")
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        self.connect(&name, "postgres")
            .await
            .batch_execute("CREATE EXTENSION jobq")
            .await
            .unwrap();
        name
    }

    /// SQL edition: a new database with jobq where nothing runs the passes (no pg_cron, no
    /// worker that heartbeats): what a deployment that forgot them has.
    pub async fn fresh_db_without_passes(&self) -> String {
        assert!(sql_edition(), "with the extension, the background worker passes in every database");
        let h = &cluster().harness;
        tokio::task::spawn_blocking(move || h.fresh_db()).await.unwrap()
    }

    /// Sets jobq's `settings` (name without `jobq.`, value) for the tests of database `db`:
    /// with the extension `ALTER SYSTEM` and a reload (the background worker reads them when
    /// it is told); in the SQL edition, where no library registers jobq.* and `ALTER SYSTEM`
    /// refuses them, `ALTER DATABASE db SET`, which the sessions that start afterwards read:
    /// the dashboard's, started later, and the passes', whose connection is made again.
    pub async fn set_jobq(&self, db: &str, settings: &[(&str, &str)]) {
        let s = self.connect(db, "postgres").await;
        if !sql_edition() {
            for (name, value) in settings {
                s.batch_execute(&format!("ALTER SYSTEM SET jobq.{name} = '{value}'")).await.unwrap();
            }
            s.batch_execute("SELECT pg_reload_conf()").await.unwrap();
            return;
        }
        for (name, value) in settings {
            s.batch_execute(&format!("ALTER DATABASE {db} SET jobq.{name} = '{value}'")).await.unwrap();
        }
        let renew = |flag: bool| {
            let mut passed = PASSED.lock().unwrap();
            let d = passed.iter_mut().find(|d| d.0 == db).expect("a database of fresh_db");
            if flag {
                d.1 = true;
            }
            d.1
        };
        renew(true);
        // Taken by the passes' thread, which connects again in the same round.
        wait_until("the passes to connect again", Duration::from_secs(30), || {
            let taken = !renew(false);
            async move { taken }
        })
        .await;
    }
}

/// Polls `cond` until it holds, failing after `timeout`: never a fixed sleep.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
