//! The dashboard's test cluster: one PostgreSQL 15 (Debian's) with jobq preloaded, started by
//! the extension's own test harness (tests/common, included below: initdb and pg_ctl as the
//! OS user `postgres`, a free loopback port, stopped and removed when the test process exits,
//! JOBQ_KEEP_CLUSTERS=1 keeps it). jobq must already be installed (`cargo pgrx install`; these
//! tests never install it). What is here is what the dashboard's tests need on top of it: async
//! connections (tokio-postgres; the harness's blocking client cannot run inside a tokio test)
//! as any login role, fresh databases, and an async wait.
#![allow(dead_code)]

#[path = "../../../tests/common/mod.rs"]
mod harness;
pub mod dash;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static DB_COUNTER: AtomicUsize = AtomicUsize::new(0);

pub struct Cluster {
    pub port: u16,
    /// Its data directory (pg_hba.conf).
    pub data: std::path::PathBuf,
}

/// The cluster of this test binary, started on first use, with the login roles the tests
/// connect as: dash_admin (jobq_admin) and dash_reader (jobq_reader).
pub fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        // A reaper per test database (each test makes its own), with the launcher: more than
        // the default 8 background processes.
        let c = harness::Cluster::start("dash", &["max_worker_processes = 32"]);
        // Roles are cluster-wide and jobq's roles exist once CREATE EXTENSION ran somewhere.
        // (psql, not a client: this may run inside a tokio test.)
        let out = harness::pg_command("psql")
            .args(["-h", "127.0.0.1", "-p", &c.port.to_string(), "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c"])
            .arg(
                "CREATE EXTENSION jobq; CREATE ROLE dash_admin LOGIN; CREATE ROLE dash_reader LOGIN; \
                 GRANT jobq_admin TO dash_admin; GRANT jobq_reader TO dash_reader;",
            )
            .output()
            .expect("spawn psql");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Cluster { port: c.port, data: c.data }
    })
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

    /// A new database with jobq created in it; each test gets its own.
    pub async fn fresh_db(&self) -> String {
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
