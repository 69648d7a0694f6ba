//! Test clusters for the integration tests: real PostgreSQL servers of the version under test
//! (`PG_BIN`), started by the tests themselves (initdb and pg_ctl run as the OS user
//! `postgres` when the tests run as root, since initdb refuses root), each on a free loopback
//! port, with jobq preloaded. They expect the extension to be installed already (`cargo pgrx
//! test` / `cargo pgrx install` do that). Every cluster is stopped when the test process exits.
//!
//! With `JOBQ_SQL_EDITION` naming a built `jobq-sql--V.sql` (scripts/build-sql-edition.py), the
//! same tests run against the SQL edition instead: no library preloaded, and each test database
//! gets jobq from that file, installed by `jobq_installer`, a role with CREATEROLE that is no
//! superuser (scripts/test-sql-edition.sh runs the suites that hold for that edition).
#![allow(dead_code)]

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The PostgreSQL under test: the one this build is for (`cargo pgrx test pgNN` builds with
/// feature pgNN). 15 is Debian's; 17 and 18 are built by scripts/build-postgres.sh. Without
/// pg17 or pg18 (the dashboard's tests, dash/tests/common, which include this file) it is 15.
#[cfg(not(any(feature = "pg17", feature = "pg18")))]
pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
#[cfg(feature = "pg17")]
pub const PG_BIN: &str = "/opt/jobq-pg/17/bin";
#[cfg(feature = "pg18")]
pub const PG_BIN: &str = "/opt/jobq-pg/18/bin";

static STARTED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The SQL edition's file when the tests run against it (`JOBQ_SQL_EDITION`), else None.
pub fn sql_edition() -> Option<PathBuf> {
    std::env::var_os("JOBQ_SQL_EDITION").map(PathBuf::from)
}

/// The role that installs the SQL edition in the test databases: CREATEROLE, no superuser.
pub const INSTALLER: &str = "jobq_installer";
static DB_COUNTER: AtomicUsize = AtomicUsize::new(0);

pub struct Cluster {
    pub port: u16,
    pub data: PathBuf,
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// Runs a PostgreSQL program as the `postgres` OS user when we are root.
pub fn pg_command(program: &str) -> Command {
    let path = format!("{PG_BIN}/{program}");
    if is_root() {
        let mut c = Command::new("sudo");
        c.args(["-u", "postgres", "--", &path]);
        c
    } else {
        Command::new(path)
    }
}

fn run(mut cmd: Command) {
    let out = cmd.output().expect("spawn");
    assert!(out.status.success(), "{cmd:?} failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// At exit: every cluster this process started is stopped, and its data directory and the
/// scratch files removed (a run leaves ~1.5 GB of clusters behind otherwise, which filled this
/// machine's disk over many runs). JOBQ_KEEP_CLUSTERS=1 keeps them, for a look at server.log.
extern "C" fn stop_all() {
    let keep = std::env::var("JOBQ_KEEP_CLUSTERS").as_deref() == Ok("1");
    for data in STARTED.lock().map(|v| v.clone()).unwrap_or_default() {
        let _ = pg_command("pg_ctl").args(["-D"]).arg(&data).args(["-m", "immediate", "-w", "stop"]).output();
        if !keep {
            let _ = std::fs::remove_dir_all(&data);
        }
    }
    if !keep {
        let mine = format!("-{}-", std::process::id());
        for entry in std::fs::read_dir(base_dir()).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().contains(&mine) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Under the system temp directory rather than the checkout: the `postgres` user must be
/// able to reach it, whatever the permissions of the directories above the clone.
fn base_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("jobq-test-clusters");
    std::fs::create_dir_all(&dir).unwrap();
    // The postgres user must be able to create data directories here.
    let _ = Command::new("chmod").arg("1777").arg(&dir).status();
    dir
}

impl Cluster {
    /// initdb + start a new cluster. `conf` lines are appended to postgresql.conf.
    pub fn start(name: &str, conf: &[&str]) -> Cluster {
        let data = base_dir().join(format!("{name}-{}", std::process::id()));
        if data.exists() {
            let _ = pg_command("pg_ctl").arg("-D").arg(&data).args(["-m", "immediate", "stop"]).output();
            let _ = pg_command("rm").arg("-rf").arg(&data).output();
            let _ = std::fs::remove_dir_all(&data);
        }
        run({
            let mut c = pg_command("initdb");
            c.arg("-D").arg(&data).args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
            c
        });
        let port = free_port();
        let mut lines = vec![
            "listen_addresses = '127.0.0.1'".to_string(),
            format!("port = {port}"),
            format!("unix_socket_directories = '{}'", data.display()),
            if sql_edition().is_some() { "shared_preload_libraries = ''" } else { "shared_preload_libraries = 'jobq'" }.to_string(),
            "max_connections = 200".to_string(),
            "fsync = off".to_string(),
            // The tests' workers do not heartbeat, and a test that shares the machine with
            // another suite can outlast the default 30 s, after which every call of its workers
            // would get JQ001. Tests of expiry set their own (in `conf`, which comes after, or
            // SET in the session).
            "jobq.heartbeat_timeout = '10min'".to_string(),
        ];
        lines.extend(conf.iter().map(|s| s.to_string()));
        append_conf(&data, &lines);
        let cluster = Cluster { port, data };
        cluster.pg_ctl_start();
        {
            let mut started = STARTED.lock().unwrap();
            if started.is_empty() {
                unsafe { libc::atexit(stop_all) };
            }
            started.push(cluster.data.clone());
        }
        cluster
    }

    pub fn pg_ctl_start(&self) {
        run({
            let mut c = pg_command("pg_ctl");
            c.arg("-D").arg(&self.data).arg("-l").arg(self.data.join("server.log")).args(["-w", "-t", "120", "start"]);
            c
        });
    }

    pub fn pg_ctl_stop(&self, mode: &str) {
        run({
            let mut c = pg_command("pg_ctl");
            c.arg("-D").arg(&self.data).args(["-m", mode, "-w", "-t", "120", "stop"]);
            c
        });
    }

    pub fn url(&self, db: &str) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname={db} connect_timeout=10", self.port)
    }

    pub fn connect(&self, db: &str) -> Client {
        Client::connect(&self.url(db), NoTls).unwrap_or_else(|e| panic!("connect to {db}: {e}"))
    }

    /// The connection string of login role `user` (the test clusters trust every local login).
    pub fn url_as(&self, db: &str, user: &str) -> String {
        self.url(db).replace("user=postgres", &format!("user={user}"))
    }

    /// A connection as login role `user`.
    pub fn connect_as(&self, db: &str, user: &str) -> Client {
        Client::connect(&self.url_as(db, user), NoTls).unwrap_or_else(|e| panic!("connect to {db} as {user}: {e}"))
    }

    /// Runs a PostgreSQL client program (pg_dump, pg_restore, …) against this cluster as the
    /// `postgres` OS user, asserting that it succeeds.
    pub fn run_tool(&self, program: &str, args: &[&str]) {
        let mut c = pg_command(program);
        c.args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres"]).args(args);
        run(c);
    }

    /// A path in this cluster's directory tree that the `postgres` OS user may write.
    pub fn scratch_file(&self, name: &str) -> PathBuf {
        base_dir().join(format!("{name}-{}-{}", std::process::id(), DB_COUNTER.fetch_add(1, Ordering::SeqCst)))
    }

    /// A new database with jobq created in it: each test gets its own. In the SQL edition, a
    /// copy of a template database where `jobq_installer` ran the file once.
    pub fn fresh_db(&self) -> String {
        let name = format!("t{}_{}", std::process::id(), DB_COUNTER.fetch_add(1, Ordering::SeqCst));
        if sql_edition().is_some() {
            let template = self.sql_edition_template();
            self.connect("postgres")
                .batch_execute(&format!("CREATE DATABASE {name} OWNER {INSTALLER} TEMPLATE {template}"))
                .unwrap();
        } else {
            self.create_jobq_db(&name);
        }
        name
    }

    /// Database `name`, made with jobq in it: `CREATE EXTENSION jobq`, or in the SQL edition the
    /// file run by `jobq_installer`, which owns it.
    pub fn create_jobq_db(&self, name: &str) {
        let mut admin = self.connect("postgres");
        if sql_edition().is_some() {
            self.create_installer();
            admin.batch_execute(&format!("CREATE DATABASE {name} OWNER {INSTALLER}")).unwrap();
            self.install_sql_edition(name, INSTALLER).unwrap();
        } else {
            admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
            self.connect(name).batch_execute("CREATE EXTENSION jobq").unwrap();
        }
    }

    /// The SQL edition's template database of this cluster, made once.
    fn sql_edition_template(&self) -> &'static str {
        static MADE: Mutex<Vec<u16>> = Mutex::new(Vec::new());
        let mut made = MADE.lock().unwrap();
        if !made.contains(&self.port) {
            self.create_installer();
            self.connect("postgres").batch_execute(&format!("CREATE DATABASE jobq_sql_template OWNER {INSTALLER}")).unwrap();
            self.install_sql_edition("jobq_sql_template", INSTALLER).unwrap();
            made.push(self.port);
        }
        "jobq_sql_template"
    }

    /// The SQL edition's installer role, if the cluster has none yet.
    pub fn create_installer(&self) {
        self.connect("postgres")
            .batch_execute(&format!(
                "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{INSTALLER}') THEN
                     CREATE ROLE {INSTALLER} LOGIN CREATEROLE; END IF; END $$"
            ))
            .unwrap();
    }

    /// Runs the SQL edition's file in `db` as `role` with psql, as its documentation says;
    /// Err(psql's output) when it fails.
    pub fn install_sql_edition(&self, db: &str, role: &str) -> Result<String, String> {
        self.install_sql_file(db, role, &sql_edition().expect("JOBQ_SQL_EDITION names the SQL edition's file"))
    }

    /// Runs a SQL edition's `file` (this release's, or an earlier one's kept in sql/) with psql
    /// as `role`: psql's output, or its error.
    pub fn install_sql_file(&self, db: &str, role: &str, file: &Path) -> Result<String, String> {
        let out = pg_command("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", role, "-d", db, "-f", "-"])
            // Read by this process: the postgres OS user may not reach the file.
            .stdin(std::fs::File::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display())))
            .output()
            .expect("spawn psql");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if out.status.success() { Ok(text) } else { Err(text) }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data.join("server.log")).unwrap_or_default()
    }
}

pub fn append_conf(data: &Path, lines: &[String]) {
    use std::io::Write;
    // The file belongs to postgres; root can still append to it.
    let mut f = std::fs::OpenOptions::new().append(true).open(data.join("postgresql.conf")).unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

/// One cluster shared by the tests of a test binary (they use separate databases). Its
/// background worker serves database postgres only: the tests call jobq_reap() themselves
/// and count what a pass did, so no reaper may run in their databases.
/// Like every test cluster's, its workers stay alive for 10 minutes without a heartbeat.
pub fn shared() -> &'static Cluster {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    SHARED.get_or_init(|| Cluster::start("shared", &["jobq.database = 'postgres'"]))
}

/// A fresh database on the shared cluster and a connection to it.
pub fn db() -> (&'static Cluster, String, Client) {
    let c = shared();
    let name = c.fresh_db();
    let client = c.connect(&name);
    (c, name, client)
}

/// Polls `cond` until it holds, failing after `timeout`. For conditions that another
/// process makes true (the background worker, a server restart): never a fixed sleep.
pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Calls of function jobq.`name` counted in the calling session's statistics but not yet flushed
/// (`track_functions` must cover it): in this transaction, and maybe in the previous ones
/// (PostgreSQL 15+ flushes them about every second), so a test takes differences.
pub fn pending_calls(c: &mut impl postgres::GenericClient, name: &str) -> i64 {
    c.query_one(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_xact_user_functions
          WHERE schemaname = 'jobq' AND funcname = $1",
        &[&name],
    )
    .unwrap()
    .get(0)
}

/// `call` in a transaction of its own at `isolation`, committed: what it returned, and whether
/// it called `jobq.<function>` (the SQL path behind a C function's fast one).
pub fn calls_sql<T>(c: &mut Client, isolation: &str, function: &str, call: impl FnOnce(&mut postgres::Transaction) -> T) -> (T, bool) {
    let mut t = c.transaction().unwrap();
    t.batch_execute(&format!("SET TRANSACTION ISOLATION LEVEL {isolation}; SET LOCAL track_functions = 'pl'")).unwrap();
    // A difference: the counts of earlier transactions stay pending until they are flushed.
    let before = pending_calls(&mut t, function);
    let out = call(&mut t);
    let calls = pending_calls(&mut t, function) - before;
    t.commit().unwrap();
    (out, calls > 0)
}

/// What differs between two checkouts of the same kind of job at two moments: left out when
/// two paths' claims are compared (tests/checkout.rs, tests/sql_edition.rs).
const MOMENTS: [&str; 5] = ["id", "queue", "enqueued_at", "run_at", "started_at"];

/// A checked-out job (a row of `jobq_checkout`, as JSON) without [`MOMENTS`].
pub fn without_moments(job: &serde_json::Value) -> serde_json::Value {
    let mut job = job.clone();
    for k in MOMENTS {
        job.as_object_mut().unwrap().remove(k);
    }
    job
}

/// What a claim leaves of job `id` in jobq.live_jobs, as JSON, without [`MOMENTS`].
pub fn claimed(c: &mut Client, id: i64) -> serde_json::Value {
    let row: serde_json::Value = c.query_one("SELECT to_jsonb(j) FROM jobq.live_jobs j WHERE j.id = $1", &[&id]).unwrap().get(0);
    without_moments(&row)
}

/// A cluster of its own with two jobq databases: `sub` subscribes to the inserts of jobq's tables
/// in `pubdb` (logical replication, whose apply fires row triggers only, never statement
/// triggers), without an initial copy, and takes its own jobs' ids far from the publisher's
/// (sequences are not replicated). Returns the cluster and connections to `pubdb` and `sub`.
pub fn subscriber() -> (Cluster, Client, Client) {
    let cluster = Cluster::start("logical", &["wal_level = logical", "jobq.database = 'postgres'"]);
    cluster.create_jobq_db("pubdb");
    cluster.create_jobq_db("sub");
    let mut publisher = cluster.connect("pubdb");
    publisher.batch_execute("CREATE PUBLICATION jobq_all FOR TABLES IN SCHEMA jobq WITH (publish = 'insert')").unwrap();
    publisher.batch_execute("SELECT pg_create_logical_replication_slot('jobq_sub', 'pgoutput')").unwrap();
    let mut sub = cluster.connect("sub");
    sub.batch_execute("SELECT setval('jobq.jobs_id_seq', 1000000)").unwrap();
    sub.batch_execute(&format!(
        "CREATE SUBSCRIPTION jobq_sub CONNECTION 'host=127.0.0.1 port={} dbname=pubdb user=postgres'
             PUBLICATION jobq_all WITH (create_slot = false, slot_name = 'jobq_sub', copy_data = false)",
        cluster.port
    ))
    .unwrap();
    (cluster, publisher, sub)
}

/// The SQLSTATE of a failed statement.
pub fn sqlstate(e: &postgres::Error) -> String {
    e.as_db_error().map(|d| d.code().code().to_string()).unwrap_or_else(|| format!("no db error: {e}"))
}

/// Two queue names with the same hashtext, the leading column of jobq.ready's indexes and of
/// fairness_by_turn: for the tests of queues kept apart where their entries interleave.
pub fn queues_sharing_a_hash(c: &mut Client) -> (&'static str, &'static str) {
    let (a, b) = ("q22137", "q190411");
    let same: bool = c.query_one("SELECT hashtext($1) = hashtext($2)", &[&a, &b]).unwrap().get(0);
    assert!(same, "{a} and {b} no longer share a hash: choose two names that do");
    (a, b)
}

pub fn register(c: &mut Client) -> uuid::Uuid {
    c.query_one("SELECT jobq_register_worker()", &[]).unwrap().get(0)
}

impl Cluster {
    /// A streaming replica of `primary` (pg_basebackup -R), started, with extra `conf` lines.
    pub fn replica_of(primary: &Cluster, name: &str, conf: &[&str]) -> Cluster {
        let data = base_dir().join(format!("{name}-{}", std::process::id()));
        let _ = pg_command("rm").arg("-rf").arg(&data).output();
        run({
            let mut c = pg_command("pg_basebackup");
            c.args(["-h", "127.0.0.1", "-p", &primary.port.to_string(), "-U", "postgres", "-X", "stream", "-R", "--checkpoint=fast", "-D"]).arg(&data);
            c
        });
        let port = free_port();
        let mut lines = vec![format!("port = {port}"), format!("unix_socket_directories = '{}'", data.display())];
        lines.extend(conf.iter().map(|s| s.to_string()));
        append_conf(&data, &lines);
        let cluster = Cluster { port, data };
        cluster.pg_ctl_start();
        STARTED.lock().unwrap().push(cluster.data.clone());
        cluster
    }

    pub fn promote(&self) {
        run({
            let mut c = pg_command("pg_ctl");
            c.arg("-D").arg(&self.data).args(["-w", "promote"]);
            c
        });
    }

    /// Pids of this cluster's processes of a `backend_type` (from pg_stat_activity).
    pub fn pids_of(&self, backend_type: &str) -> Vec<i32> {
        match postgres::Client::connect(&self.url("postgres"), NoTls) {
            Ok(mut c) => c
                .query("SELECT pid FROM pg_stat_activity WHERE backend_type = $1", &[&backend_type])
                .map(|rows| rows.iter().map(|r| r.get(0)).collect())
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// Connects, waiting for the server to accept connections (after a restart).
    pub fn connect_when_up(&self, db: &str) -> Client {
        let mut client = None;
        wait_until("the server to accept connections", Duration::from_secs(60), || {
            client = Client::connect(&self.url(db), NoTls).ok();
            client.is_some()
        });
        client.unwrap()
    }
}

/// The invariants of the job tables (src/sql/schema.sql): a job is in state 'ready' exactly
/// when it has one row in jobq.ready, and that row carries the job's queue, kind, priority,
/// run_at and the keys checkout takes from it; jobq.live_jobs holds only ready and executing jobs, jobq.finished_jobs only
/// finished ones, and no job is in both; every row of jobq.slots is held by an executing job
/// that records it (its concurrency slot, or its while_executing key); every unique key a job
/// holds in jobq.locks is that unfinished job's own, and an until_executing one's only while it waits.
pub fn assert_job_tables_consistent(c: &mut Client) {
    let r = c
        .query_one(
            "SELECT (SELECT count(*) FROM jobq.ready r LEFT JOIN jobq.live_jobs j ON j.id = r.id
                      WHERE j.id IS NULL OR j.state <> 'ready'
                         OR (j.queue, j.kind, j.priority, j.run_at) IS DISTINCT FROM (r.queue, r.kind, r.priority, r.run_at)
                         OR (j.concurrency_key, j.concurrency_limit, j.rate_key,
                             CASE WHEN j.unique_strategy = 'while_executing' THEN j.unique_key END)
                            IS DISTINCT FROM (r.concurrency_key, r.concurrency_limit, r.rate_key, r.while_key)),
                    (SELECT count(*) FROM jobq.live_jobs j
                      WHERE j.state = 'ready' AND (SELECT count(*) FROM jobq.ready r WHERE r.id = j.id) <> 1),
                    (SELECT count(*) FROM jobq.live_jobs WHERE state NOT IN ('ready', 'executing', 'blocked'))
                  + (SELECT count(*) FROM jobq.finished_jobs WHERE state NOT IN ('completed', 'dead', 'cancelled')),
                    (SELECT count(*) FROM jobq.live_jobs l JOIN jobq.finished_jobs f USING (id)),
                    (SELECT count(*) FROM jobq.slots s LEFT JOIN jobq.live_jobs j ON j.id = s.job_id
                      WHERE j.id IS NULL OR j.state <> 'executing'
                         OR (s.ns = 'c' AND (j.concurrency_key, j.concurrency_slot) IS DISTINCT FROM (s.key, s.slot))
                         OR (s.ns = 'u' AND (j.unique_key, j.unique_strategy) IS DISTINCT FROM (s.key, 'while_executing'))),
                    (SELECT count(*) FROM jobq.locks l LEFT JOIN jobq.live_jobs j ON j.id = l.job_id
                      WHERE l.job_id IS NOT NULL
                        AND (j.id IS NULL OR j.unique_key IS DISTINCT FROM l.key
                             OR (j.unique_strategy = 'until_executing' AND j.state NOT IN ('ready', 'blocked')))),
                    (SELECT count(*) FROM jobq.live_jobs j
                      WHERE j.state = 'blocked' AND NOT EXISTS (SELECT 1 FROM jobq.blocked b WHERE b.job_id = j.id))
                  + (SELECT count(*) FROM jobq.blocked b
                      WHERE NOT EXISTS (SELECT 1 FROM jobq.live_jobs j WHERE j.id = b.job_id AND j.state = 'blocked'))",
            &[],
        )
        .unwrap();
    assert_eq!(
        (r.get::<_, i64>(0), r.get::<_, i64>(1)),
        (0, 0),
        "ready rows without a waiting job (or with other values), waiting jobs without exactly one ready row"
    );
    assert_eq!(r.get::<_, i64>(2), 0, "jobs in the wrong table for their state");
    assert_eq!(r.get::<_, i64>(3), 0, "jobs in both jobq.live_jobs and jobq.finished_jobs");
    assert_eq!(r.get::<_, i64>(4), 0, "slot rows not held by an executing job that records them");
    assert_eq!(r.get::<_, i64>(5), 0, "unique keys held for a job that is finished, another key's, or (until_executing) started");
    assert_eq!(r.get::<_, i64>(6), 0, "blocked jobs without their jobq.blocked row, or rows of jobs not blocked");
}

/// The notifications `listener` gets on channel jobq before the first with payload `until`,
/// each as (payload, sender pid); fails if none comes within `timeout`.
pub fn collect_until(listener: &mut Client, until: &str, timeout: Duration) -> Vec<(String, i32)> {
    let mut got = Vec::new();
    let mut n = listener.notifications();
    let mut it = n.timeout_iter(timeout);
    loop {
        let note = it.next().unwrap().expect("a notification");
        assert_eq!(note.channel(), "jobq");
        if note.payload() == until {
            return got;
        }
        got.push((note.payload().to_string(), note.process_id()));
    }
}

/// The jobs of `queue` as (run_at in seconds since the epoch, count of jobs with that run_at).
pub fn ticks_of(c: &mut Client, queue: &str) -> Vec<(f64, i64)> {
    c.query(
        "SELECT extract(epoch FROM run_at)::float8, count(*) FROM jobq.jobs WHERE queue = $1 GROUP BY run_at ORDER BY run_at",
        &[&queue],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Every tick from the first job's run_at to `last` (seconds), `step` apart, has exactly one
/// job: none twice, none missing.
pub fn assert_one_job_per_tick(ticks: &[(f64, i64)], step: f64, last: f64) {
    assert!(!ticks.is_empty(), "no job enqueued");
    for (t, n) in ticks {
        assert_eq!(*n, 1, "{n} jobs for the tick at {t}");
    }
    let first = ticks[0].0;
    let want = ((last - first) / step).round() as usize + 1;
    assert_eq!(ticks.len(), want, "ticks from {first} to {last} every {step} s: {ticks:?}");
    for w in ticks.windows(2) {
        assert_eq!(w[1].0 - w[0].0, step, "consecutive ticks {w:?}");
    }
}

/// PgBouncer (Debian's package) in transaction pooling mode in front of database `db` of
/// `cluster`, on a free loopback port, run as the `postgres` OS user (it refuses root),
/// stopped when dropped.
pub struct Bouncer {
    child: std::process::Child,
    pub port: u16,
}

impl Bouncer {
    pub fn start(cluster: &Cluster, db: &str, user: &str, pool_size: u32) -> Bouncer {
        Bouncer::start_users(cluster, db, &[user], pool_size)
    }

    /// The same for several login roles (a pool of `pool_size` sessions each).
    pub fn start_users(cluster: &Cluster, db: &str, users: &[&str], pool_size: u32) -> Bouncer {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let list: String = users.iter().chain(&["postgres"]).map(|u| format!("\"{u}\" \"\"\n")).collect();
        let users = cluster.scratch_file("pgbouncer-users.txt");
        std::fs::write(&users, list).unwrap();
        let ini = cluster.scratch_file("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n{db} = host=127.0.0.1 port={} dbname={db}\n\n[pgbouncer]\n\
                 listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                 auth_type = trust\nauth_file = {}\npool_mode = transaction\n\
                 default_pool_size = {pool_size}\nmax_client_conn = 200\n\
                 ignore_startup_parameters = extra_float_digits,options\n\
                 logfile = {}\n",
                cluster.port,
                users.display(),
                cluster.scratch_file("pgbouncer.log").display()
            ),
        )
        .unwrap();
        for f in [&users, &ini] {
            let _ = Command::new("chmod").arg("644").arg(f).status();
        }
        let child = Command::new("sudo")
            .args(["-u", "postgres", "--", "/usr/sbin/pgbouncer"])
            .arg(&ini)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()) // it logs to the logfile too
            .spawn()
            .expect("start pgbouncer (scripts/setup.sh installs it)");
        let b = Bouncer { child, port };
        wait_until("pgbouncer to accept connections", Duration::from_secs(30), || {
            Client::connect(&format!("host=127.0.0.1 port={port} user=postgres dbname={db}"), NoTls).is_ok()
        });
        b
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        // sudo passes SIGTERM on to pgbouncer, which then exits.
        let _ = unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}
