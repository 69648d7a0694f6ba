//! A test cluster for the dashboard's tests: PostgreSQL 15 (Debian's) with jobq preloaded,
//! which must already be installed (`cargo pgrx install`; these tests never install it).
//! initdb and pg_ctl run as the OS user `postgres` when the tests run as root. A small
//! equivalent of the extension's tests/common, which the dashboard does not share so that it
//! builds without the extension's features. Stopped and removed when the test process exits
//! (JOBQ_KEEP_CLUSTERS=1 keeps it).
#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

pub struct Cluster {
    pub port: u16,
    pub data: PathBuf,
}

static STARTED: Mutex<Option<PathBuf>> = Mutex::new(None);
static DB_COUNTER: AtomicUsize = AtomicUsize::new(0);

fn pg_command(program: &str) -> Command {
    let path = format!("{PG_BIN}/{program}");
    if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("sudo");
        c.args(["-u", "postgres", "--", &path]);
        c
    } else {
        Command::new(path)
    }
}

fn run(mut cmd: Command) {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

extern "C" fn stop() {
    if let Some(data) = STARTED.lock().ok().and_then(|d| d.clone()) {
        let _ = pg_command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        if std::env::var("JOBQ_KEEP_CLUSTERS").as_deref() != Ok("1") {
            let _ = std::fs::remove_dir_all(&data);
        }
    }
}

/// The cluster of this test binary, started on first use, with the login roles the tests
/// connect as: dash_admin (jobq_admin) and dash_reader (jobq_reader).
pub fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        let base = std::env::temp_dir().join("jobq-dash-test-clusters");
        std::fs::create_dir_all(&base).unwrap();
        let _ = Command::new("chmod").arg("1777").arg(&base).status();
        let data = base.join(format!("dash-{}", std::process::id()));
        let _ = pg_command("rm").arg("-rf").arg(&data).output();
        run({
            let mut c = pg_command("initdb");
            c.arg("-D").arg(&data).args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
            c
        });
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\n\
             shared_preload_libraries = 'jobq'\nmax_connections = 200\nfsync = off\n",
            data.display()
        );
        use std::io::Write;
        std::fs::OpenOptions::new().append(true).open(data.join("postgresql.conf")).unwrap().write_all(conf.as_bytes()).unwrap();
        run({
            let mut c = pg_command("pg_ctl");
            c.arg("-D").arg(&data).arg("-l").arg(data.join("server.log")).args(["-w", "-t", "120", "start"]);
            c
        });
        *STARTED.lock().unwrap() = Some(data.clone());
        unsafe { libc::atexit(stop) };
        // Roles are cluster-wide and jobq's roles exist once CREATE EXTENSION ran somewhere.
        run({
            let mut c = pg_command("psql");
            c.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c"]).arg(
                "CREATE EXTENSION jobq; CREATE ROLE dash_admin LOGIN; CREATE ROLE dash_reader LOGIN; \
                 GRANT jobq_admin TO dash_admin; GRANT jobq_reader TO dash_reader;",
            );
            c
        });
        Cluster { port, data }
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
