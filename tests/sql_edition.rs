//! The SQL edition (the contract, "The SQL edition"): `jobq-sql--V.sql`, built from src/sql by
//! scripts/build-sql-edition.py, installed with psql by a role that has CREATEROLE and owns
//! the database, no superuser, into a server without jobq's library. Its install, a second
//! run, a failing run, its catalog against the extension's, pg_dump and restore, the whole
//! pass of jobq_reap(), and pg_cron running the passes. (The suites of the guarantees run
//! against it too: scripts/test-sql-edition.sh.)
mod common;

use common::*;
use postgres::Client;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(60);
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The file, built once from this tree, and named in JOBQ_SQL_EDITION so that the clusters of
/// this test binary run without the library (tests/common).
fn edition_file() -> PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let root = env!("CARGO_MANIFEST_DIR");
        let out = std::env::temp_dir().join(format!("jobq-sql-{}.sql", std::process::id()));
        let status = std::process::Command::new("python3")
            .arg(format!("{root}/scripts/build-sql-edition.py"))
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "build-sql-edition.py failed");
        std::env::set_var("JOBQ_SQL_EDITION", &out);
        out
    })
    .clone()
}

fn cluster(name: &str, conf: &[&str]) -> Cluster {
    edition_file();
    Cluster::start(name, conf)
}

/// A database owned by the installer (as on a managed service: the admin role creates it).
fn database(c: &Cluster, name: &str) {
    c.create_installer();
    c.connect("postgres").batch_execute(&format!("CREATE DATABASE {name} OWNER {INSTALLER}")).unwrap();
}

/// A cluster with database `db`, the SQL edition installed in it by the installer.
fn installed(name: &str, conf: &[&str], db: &str) -> Cluster {
    let c = cluster(name, conf);
    database(&c, db);
    c.install_sql_edition(db, INSTALLER).unwrap();
    c
}

/// Objects of schema jobq and the jobq_* functions, as text: relations, columns, indexes,
/// constraints, row level security and its policies, views, triggers, functions (signature, settings, security, volatility,
/// privileges with the owner's name written `owner`, result) and the schema's privileges.
/// `bodies`: with each function's body and language (for comparing one edition with itself).
fn catalog(c: &mut Client, bodies: bool) -> Vec<String> {
    let rows = c
        .query(
            "WITH rels AS (SELECT c.* FROM pg_class c WHERE c.relnamespace = 'jobq'::regnamespace),
                  fns AS (SELECT p.* FROM pg_proc p
                           WHERE p.pronamespace = 'jobq'::regnamespace
                              OR (p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'jobq\\_%')),
                  owner AS (SELECT n.nspowner::regrole::text AS name FROM pg_namespace n WHERE n.nspname = 'jobq')
             SELECT replace(x, (SELECT name FROM owner), 'owner') FROM (
               SELECT format('rel %s %s %s %s %s', relname, relkind, reloptions, relacl, relrowsecurity) FROM rels
               UNION ALL
               SELECT format('policy %s %s %s %s %s', pol.polrelid::regclass, pol.polname, pol.polcmd, pol.polroles,
                             pg_get_expr(pol.polqual, pol.polrelid))
                 FROM pg_policy pol JOIN rels r ON r.oid = pol.polrelid
               UNION ALL
               SELECT format('col %s.%s %s %s %s %s', r.relname, a.attname, a.attnum, format_type(a.atttypid, a.atttypmod),
                             a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
                 FROM rels r JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
                 LEFT JOIN pg_attrdef d ON d.adrelid = r.oid AND d.adnum = a.attnum
               UNION ALL
               SELECT format('idx %s', pg_get_indexdef(i.indexrelid)) FROM pg_index i JOIN rels r ON r.oid = i.indrelid
               UNION ALL
               SELECT format('con %s %s', conname, pg_get_constraintdef(oid)) FROM pg_constraint
                WHERE connamespace = 'jobq'::regnamespace AND contype <> 't'
               UNION ALL
               SELECT format('view %s %s', relname, pg_get_viewdef(oid)) FROM rels WHERE relkind = 'v'
               UNION ALL
               SELECT format('trigger %s %s', pg_get_triggerdef(t.oid), t.tgenabled)
                 FROM pg_trigger t JOIN rels r ON r.oid = t.tgrelid WHERE NOT t.tgisinternal
               UNION ALL
               SELECT format('fn %s %s %s %s %s %s | %s', p.oid::regprocedure, p.prosecdef, p.provolatile,
                             p.proacl, pg_get_function_result(p.oid),
                             CASE WHEN $1 THEN p.prolang::text || md5(p.prosrc) ELSE '' END, p.proconfig)
                 FROM fns p
               UNION ALL
               SELECT format('schema %s %s', nspname, nspacl) FROM pg_namespace WHERE nspname = 'jobq'
             ) s(x) ORDER BY 1",
            &[&bodies],
        )
        .unwrap();
    rows.iter().map(|r| r.get::<_, String>(0)).collect()
}

/// What only the SQL edition has (src/sql/twins/*.sql: the twins' own tables and helpers, and
/// edition.sql), and what only the extension has (nothing but its C functions' twins differ).
fn edition_only(x: &str) -> bool {
    const ONLY: &[&str] = &[
        "jobq._setting(", "jobq._guarded_setting(", "jobq._waiter_key(", "jobq._ring(", "jobq._passes_job(", "jobq._passes_schedule(",
        "jobq._require_pg_cron(", "jobq_schedule_passes(", "jobq_unschedule_passes(", "jobq._bucket_of(",
        "jobq._histogram(", "jobq._tally_minute(", "jobq._tally_took(", "jobq._cron_", "col rings.", "rel rings", "last_pass", "tallies", "settle_later",
        "trigger CREATE CONSTRAINT TRIGGER ring_", "rel _cron", "jobq._cron_parse", "jobq._cron_field", "rel cron_",
        "pending_notifies", "jobq._worth_a_look(", "jobq._doze(", "jobq._rung(", "jobq._usable_here(",
    ];
    ONLY.iter().any(|o| x.contains(o))
}

#[test]
fn installs_as_an_ordinary_role_with_createrole_and_again_changes_nothing() {
    let c = cluster("sqlinstall", &[]);
    database(&c, "app");
    let mut su = c.connect("postgres");
    let installer: (bool, bool) = {
        let r = su.query_one("SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = $1", &[&INSTALLER]).unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(installer, (false, true), "the installer is no superuser and has CREATEROLE");
    let libs: String = su.query_one("SHOW shared_preload_libraries", &[]).unwrap().get(0);
    assert!(!libs.contains("jobq"), "{libs}");

    c.install_sql_edition("app", INSTALLER).unwrap();
    let mut app = c.connect("app");
    let v = app.query_one("SELECT version, edition FROM jobq_version()", &[]).unwrap();
    assert_eq!((v.get::<_, String>(0), v.get::<_, String>(1)), (VERSION.to_string(), "sql".to_string()));
    let no_library: i64 = app.query_one("SELECT count(*) FROM pg_proc WHERE probin LIKE '%jobq%'", &[]).unwrap().get(0);
    assert_eq!(no_library, 0);
    let owner: String = app.query_one("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'jobq'", &[]).unwrap().get(0);
    assert_eq!(owner, INSTALLER);

    // Some state, then the same file again: nothing changes, rows or catalog.
    su.batch_execute("CREATE ROLE sqlinstall_app LOGIN; GRANT jobq_worker TO sqlinstall_app").unwrap();
    let mut w = c.connect_as("app", "sqlinstall_app");
    let worker = register(&mut w);
    let id: i64 = w.query_one("SELECT jobq_enqueue('q', unique_key => 'k')", &[]).unwrap().get(0);
    let got: i64 = w.query_one("SELECT id FROM jobq_checkout($1, '{q}')", &[&worker]).unwrap().get(0);
    assert_eq!(got, id);
    let before = (catalog(&mut app, true), rows(&mut app));
    let out = c.install_sql_edition("app", INSTALLER).unwrap();
    assert!(out.contains("installed already: nothing changed"), "{out}");
    assert_eq!((catalog(&mut app, true), rows(&mut app)), before);
    assert!(w.query_one("SELECT jobq_complete($1, $2)", &[&id, &worker]).unwrap().get::<_, bool>(0));
}

fn rows(c: &mut Client) -> String {
    let r = c
        .query_one(
            "SELECT concat_ws(' | ',
                (SELECT string_agg(format('%s %s %s %s %s', id, queue, state, unique_key, attempt), ', ' ORDER BY id) FROM jobq.jobs),
                (SELECT string_agg(format('%s %s', id, name), ', ' ORDER BY id) FROM jobq.workers),
                (SELECT string_agg(format('%s %s', key, job_id), ', ' ORDER BY key) FROM jobq.locks),
                (SELECT last_value::text FROM jobq.jobs_id_seq))",
            &[],
        )
        .unwrap();
    r.get(0)
}

/// The contract, The SQL edition: the file of this release, run where 0.4.0's file
/// (sql/jobq-sql--0.4.0.sql, as released) installed jobq and jobs are in flight, upgrades it in
/// place: every row kept, the catalog exactly a fresh install's, the jobs in flight finish
/// as usual, the keys and slots still held; run again, it changes nothing.
#[test]
fn the_next_release_upgrades_0_4_0_in_place_with_everything_kept() {
    let c = cluster("sqlupgrade", &[]);
    database(&c, "up");
    database(&c, "fresh");
    let old = PathBuf::from(format!("{}/sql/jobq-sql--0.4.0.sql", env!("CARGO_MANIFEST_DIR")));
    c.install_sql_file("up", INSTALLER, &old).unwrap();
    c.install_sql_edition("fresh", INSTALLER).unwrap();
    let mut up = c.connect("up");
    let v: String = up.query_one("SELECT version FROM jobq_version()", &[]).unwrap().get(0);
    assert_eq!(v, "0.4.0");
    c.connect("postgres").batch_execute("CREATE ROLE sqlupgrade_app LOGIN; GRANT jobq_worker TO sqlupgrade_app").unwrap();
    let mut app = c.connect_as("up", "sqlupgrade_app");
    let w = register(&mut app);
    let q = |c: &mut Client, sql: &str| -> i64 { c.query_one(sql, &[]).unwrap().get(0) };
    let take = |c: &mut Client, queue: &str| -> Option<i64> {
        c.query("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&w, &queue]).unwrap().first().map(|r| r.get(0))
    };
    // Executing with a unique key and a concurrency key; waiting behind its slot; due and
    // scheduled; finished; a lock and a pause.
    let keyed = q(&mut app, "SELECT jobq_enqueue('work', concurrency_key => 'ck', unique_key => 'u1')");
    assert_eq!(take(&mut app, "work"), Some(keyed));
    let behind = q(&mut app, "SELECT jobq_enqueue('work', concurrency_key => 'ck')");
    let due = q(&mut app, "SELECT jobq_enqueue('due', priority => 3)");
    q(&mut app, "SELECT jobq_enqueue('due', run_at => now() + interval '1 hour')");
    let done = q(&mut app, "SELECT jobq_enqueue('done')");
    assert_eq!(take(&mut app, "done"), Some(done));
    assert!(app.query_one("SELECT jobq_complete($1, $2)", &[&done, &w]).unwrap().get::<_, bool>(0));
    assert!(app.query_one("SELECT jobq_acquire_lock('L', $1)", &[&w]).unwrap().get::<_, bool>(0));
    up.batch_execute("SELECT jobq_pause('paused')").unwrap();
    let before = rows(&mut up);

    let out = c.install_sql_edition("up", INSTALLER).unwrap();
    assert!(out.contains(&format!("jobq 0.4.0 (SQL edition) upgraded to {VERSION}")), "{out}");
    let v: String = up.query_one("SELECT version FROM jobq_version()", &[]).unwrap().get(0);
    assert_eq!(v, VERSION);
    assert_eq!(rows(&mut up), before);
    let fresh = catalog(&mut c.connect("fresh"), true);
    assert!(fresh.iter().any(|x| x.starts_with("fn jobq_grant_queues(")), "{fresh:#?}");
    assert_eq!(catalog(&mut up, true), fresh);
    assert_job_tables_consistent(&mut up);

    // The new release on the upgraded rows: the key and the slot still held, the jobs in flight
    // finish, the waiting ones start.
    let e = app.query_one("SELECT jobq_enqueue('work', unique_key => 'u1')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "23505");
    assert_eq!(take(&mut app, "work"), None, "the concurrency slot is still held");
    assert!(app.query_one("SELECT jobq_complete($1, $2)", &[&keyed, &w]).unwrap().get::<_, bool>(0));
    assert_eq!(take(&mut app, "work"), Some(behind));
    assert_eq!(take(&mut app, "due"), Some(due));
    assert_eq!(take(&mut app, "due"), None, "the scheduled one is not due");
    let after: i64 = up.query_one("SELECT jobq_enqueue('after')", &[]).unwrap().get(0);
    assert!(after > done);

    // Run again: nothing changes.
    let (cat, now) = (catalog(&mut up, true), rows(&mut up));
    let out = c.install_sql_edition("up", INSTALLER).unwrap();
    assert!(out.contains("installed already: nothing changed"), "{out}");
    assert_eq!((catalog(&mut up, true), rows(&mut up)), (cat, now));
}

#[test]
fn a_file_that_fails_changes_nothing() {
    let c = cluster("sqlfail", &[]);
    database(&c, "app");
    // An object in the way of one the file creates, late in the file: it fails there.
    c.connect("app")
        .batch_execute(&format!(
            "SET ROLE {INSTALLER}; CREATE FUNCTION public.jobq_unschedule_passes() RETURNS boolean LANGUAGE sql AS 'SELECT true'"
        ))
        .unwrap();
    let err = c.install_sql_edition("app", INSTALLER).unwrap_err();
    assert!(err.contains("jobq_unschedule_passes"), "{err}");
    let mut app = c.connect("app");
    let left: i64 = app
        .query_one(
            "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'jobq')
                  + (SELECT count(*) FROM pg_proc WHERE proname LIKE 'jobq\\_%' AND proname <> 'jobq_unschedule_passes')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "nothing of the failed file is left");
    // A role that may not create in the database is refused, and nothing is left either.
    c.connect("postgres").batch_execute("CREATE ROLE sqlfail_other LOGIN CREATEROLE").unwrap();
    c.connect("postgres").batch_execute("CREATE DATABASE other").unwrap();
    c.connect("other").batch_execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC").unwrap();
    let err = c.install_sql_edition("other", "sqlfail_other").unwrap_err();
    assert!(err.contains("permission denied"), "{err}");
    let left: i64 = c.connect("other").query_one("SELECT count(*) FROM pg_namespace WHERE nspname = 'jobq'", &[]).unwrap().get(0);
    assert_eq!(left, 0);
    // The extension's database is refused.
    c.connect("postgres").batch_execute(&format!("CREATE DATABASE withext OWNER {INSTALLER}")).unwrap();
    if c.connect("withext").batch_execute("CREATE EXTENSION jobq").is_ok() {
        let err = c.install_sql_edition("withext", INSTALLER).unwrap_err();
        assert!(err.contains("the jobq extension is installed"), "{err}");
    }
}

/// The two editions have the same functions (arguments, defaults, results, settings, security,
/// volatility, privileges), tables, indexes, views and grants; only the bodies of the twins and
/// the edition's own helpers differ.
#[test]
fn the_catalog_is_the_extensions() {
    let c = installed("sqlcatalog", &[], "sqled");
    c.connect("postgres").batch_execute("CREATE DATABASE ext").unwrap();
    let mut e = c.connect("ext");
    // The extension needs its library only to run, not to be created (no preload here).
    e.batch_execute("CREATE EXTENSION jobq").unwrap();
    // A twin pins its search_path as every SQL function of jobq does; the C function it stands
    // in for has nothing to pin: the setting is left out of the comparison for those.
    let twins: Vec<String> = e
        .query(
            "SELECT format('fn %s ', p.oid::regprocedure) FROM pg_proc p
              WHERE p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')
                AND (p.pronamespace = 'jobq'::regnamespace OR p.proname LIKE 'jobq\\_%')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let normal = |x: String| -> String {
        match x.find(" | ") {
            Some(i) if twins.iter().any(|t| x.starts_with(t.as_str())) => x[..i].to_string(),
            _ => x,
        }
    };
    let ext: Vec<String> = catalog(&mut e, false).into_iter().filter(|x| !edition_only(x)).map(normal).collect();
    let sql: Vec<String> = catalog(&mut c.connect("sqled"), false).into_iter().filter(|x| !edition_only(x)).map(normal).collect();
    assert!(ext.len() > 300, "{}", ext.len());
    let only_ext: Vec<&String> = ext.iter().filter(|x| !sql.contains(x)).collect();
    let only_sql: Vec<&String> = sql.iter().filter(|x| !ext.contains(x)).collect();
    assert!(only_ext.is_empty() && only_sql.is_empty(), "only in the extension: {only_ext:#?}\nonly in the SQL edition: {only_sql:#?}");
    // Every function that SQL may call has a twin: none of the SQL edition's is in C.
    let c_functions: i64 = c
        .connect("sqled")
        .query_one(
            "SELECT count(*) FROM pg_proc WHERE prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')
                AND (pronamespace = 'jobq'::regnamespace OR proname LIKE 'jobq\\_%')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(c_functions, 0);
}

/// pg_dump of the SQL edition's database restores as any schema's: jobs, keys, workers and the
/// id sequence go on where the dump was taken.
#[test]
fn pg_dump_and_restore_keep_everything() {
    let c = installed("sqldump", &[], "app");
    let mut app = c.connect("app");
    let w = register(&mut app);
    let held: i64 = app.query_one("SELECT jobq_enqueue('q', unique_key => 'held')", &[]).unwrap().get(0);
    let running: i64 = app.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    let _ = app.query("SELECT jobq_checkout($1, '{q}', 2)", &[&w]).unwrap();
    let before = rows(&mut app);
    let dump = c.scratch_file("sqldump.dump");
    c.run_tool("pg_dump", &["-Fc", "-d", "app", "-f", dump.to_str().unwrap()]);
    c.connect("postgres").batch_execute(&format!("CREATE DATABASE restored OWNER {INSTALLER}")).unwrap();
    c.run_tool("pg_restore", &["-d", "restored", "--exit-on-error", dump.to_str().unwrap()]);
    let mut r = c.connect("restored");
    assert_eq!(rows(&mut r), before);
    assert_eq!(catalog(&mut r, true), catalog(&mut app, true));
    let e = r.query_one("SELECT jobq_enqueue('q', unique_key => 'held')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "23505");
    assert!(e.as_db_error().unwrap().detail().unwrap().contains(&held.to_string()));
    let next: i64 = r.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    assert!(next > running);
    assert!(r.query_one("SELECT jobq_complete($1, $2)", &[&running, &w]).unwrap().get::<_, bool>(0));
}

/// Waits until `c`'s is the only session of database `app`: a bound worker's session has ended.
fn others_ended(c: &mut Client) {
    wait_until("the bound session to end", PATIENCE, || {
        let n: i64 = c
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE datname = 'app' AND pid <> pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        n == 0
    });
}

/// A job enqueued in queue `b` that `c`'s checkout for worker `w` must refuse as a dead
/// worker's (JQ001), leaving it ready: its id.
fn refused(c: &mut Client, w: &uuid::Uuid, why: &str) -> i64 {
    let id: i64 = c.query_one("SELECT jobq_enqueue('b')", &[]).unwrap().get(0);
    let e = c.query("SELECT id FROM jobq_checkout($1, '{b}')", &[w]).unwrap_err();
    assert_eq!(sqlstate(&e), "JQ001", "{why}");
    let state: String = c.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
    assert_eq!(state, "ready", "{why}");
    id
}

/// jobq_reap() is the whole pass: a dead worker's job back to ready, a schedule's due tick
/// enqueued, the counters moved, the pass noted for jobq.health; a worker bound to a session
/// that ended is dead at the next pass.
#[test]
fn a_pass_does_what_the_background_worker_does() {
    let c = installed("sqlpass", &["jobq.heartbeat_timeout = '1h'"], "app");
    let mut su = c.connect("app");
    let mut bound = c.connect("app");
    let w: uuid::Uuid = bound.query_one("SELECT jobq_register_worker('bound', bind_to_session => true)", &[]).unwrap().get(0);
    let id: i64 = su.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    let got: i64 = bound.query_one("SELECT id FROM jobq_checkout($1, '{q}')", &[&w]).unwrap().get(0);
    assert_eq!(got, id);
    su.batch_execute("SELECT jobq_schedule('tick', '* * * * * *', 'ticks')").unwrap();
    let none: i32 = su.query_one("SELECT workers_reaped FROM jobq_reap()", &[]).unwrap().get(0);
    assert_eq!(none, 0, "the bound session lives");
    drop(bound);
    others_ended(&mut su);
    let r = su.query_one("SELECT workers_reaped, jobs_requeued FROM jobq_reap()", &[]).unwrap();
    assert_eq!((r.get::<_, i32>(0), r.get::<_, i32>(1)), (1, 1));
    let state: String = su.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
    assert_eq!(state, "ready");
    let health = su.query_one("SELECT last_pass_at IS NOT NULL, workers_reaped FROM jobq.health", &[]).unwrap();
    assert_eq!((health.get::<_, bool>(0), health.get::<_, i32>(1)), (true, 1));
    let counted: i64 = su.query_one("SELECT coalesce(sum(enqueued), 0)::bigint FROM jobq.queue_minutes WHERE queue = 'q'", &[]).unwrap().get(0);
    assert_eq!(counted, 1);
    // The schedule's ticks (one a second) are enqueued by the passes, one job per tick.
    wait_until("a pass to enqueue a tick", PATIENCE, || {
        su.batch_execute("SELECT jobq_reap()").unwrap();
        let n: i64 = su.query_one("SELECT count(*) FROM jobq.jobs WHERE queue = 'ticks'", &[]).unwrap().get(0);
        n >= 1
    });
    let dupes: i64 = su
        .query_one("SELECT count(*) - count(DISTINCT run_at) FROM jobq.jobs WHERE queue = 'ticks'", &[])
        .unwrap()
        .get(0);
    assert_eq!(dupes, 0);
}

/// The deferred NOTIFY (src/sql/twins/wakes.sql): nothing at an enqueue's commit; the next pass
/// sends one per queue that had jobs enqueued since the last pass, whether the note is the
/// enqueue's tally (the common enqueue, of a due job or of one scheduled for later) or a row of
/// jobq.pending_notifies (a queue name too long for a tally, a batch); a pass with nothing new
/// sends none. With jobq.notify = immediate the enqueuing transaction sends its own, once.
#[test]
fn the_next_pass_sends_the_deferred_notifies_once_per_queue() {
    let c = installed("sqlnotify", &[], "app");
    let mut su = c.connect("app");
    let mut listener = c.connect("app");
    listener.batch_execute("LISTEN jobq").unwrap();
    let payloads = |listener: &mut Client, until: &str| -> Vec<String> {
        let mut got: Vec<String> = collect_until(listener, until, PATIENCE).into_iter().map(|(payload, _)| payload).collect();
        got.sort();
        got
    };
    let long = "l".repeat(201);
    su.batch_execute(&format!(
        "SELECT jobq_enqueue('due'); SELECT jobq_enqueue('due');
         SELECT jobq_enqueue('later', run_at => now() + interval '1 hour');
         SELECT jobq_enqueue('{long}');
         SELECT jobq_enqueue_batch('batch', ARRAY['{{}}'::jsonb, '{{}}'::jsonb]);
         NOTIFY jobq, 'committed';"
    ))
    .unwrap();
    assert_eq!(payloads(&mut listener, "committed"), Vec::<String>::new(), "no notification before a pass");
    su.batch_execute("SELECT jobq_reap(); NOTIFY jobq, 'passed';").unwrap();
    let mut want = vec!["batch".to_string(), "due".into(), "later".into(), long];
    want.sort();
    assert_eq!(payloads(&mut listener, "passed"), want);
    su.batch_execute("SELECT jobq_reap(); NOTIFY jobq, 'again';").unwrap();
    assert_eq!(payloads(&mut listener, "again"), Vec::<String>::new(), "a pass with nothing new sends nothing");
    su.batch_execute(
        "SET jobq.notify = immediate;
         BEGIN; SELECT jobq_enqueue('now'); SELECT jobq_enqueue('now'); COMMIT;
         NOTIFY jobq, 'immediate';",
    )
    .unwrap();
    assert_eq!(payloads(&mut listener, "immediate"), ["now"]);
}

/// The pass's histograms (src/sql/twins/counters.sql): a duration's bucket is the first whose
/// bound is at least it, as src/counters.rs's bucket_of, at every bound and on either side of
/// it; jobq._histogram counts each duration in that bucket, and in no other.
#[test]
fn a_durations_bucket_is_the_extensions() {
    let c = installed("sqlbuckets", &[], "app");
    let mut su = c.connect("app");
    let bounds: Vec<f64> = su.query_one("SELECT jobq.histogram_bounds()", &[]).unwrap().get(0);
    let mut durations = vec![0.0, 0.0001, 1e12];
    for b in bounds.iter().filter(|b| b.is_finite()) {
        durations.extend([b - 0.5, b - 0.001, *b, b + 0.001, b + 0.5]);
    }
    let expected = |ms: f64| bounds.iter().position(|b| ms <= *b).unwrap() as i32 + 1;
    for ms in &durations {
        let got: i32 = su.query_one("SELECT jobq._bucket_of($1)", &[ms]).unwrap().get(0);
        assert_eq!(got, expected(*ms), "the bucket of {ms} ms");
    }
    let hist: Vec<i64> = su.query_one("SELECT jobq._histogram($1)", &[&durations]).unwrap().get(0);
    let mut want = vec![0i64; bounds.len()];
    for ms in &durations {
        want[expected(*ms) as usize - 1] += 1;
    }
    assert_eq!(hist, want);
    let empty: Vec<i64> = su.query_one("SELECT jobq._histogram('{}')", &[]).unwrap().get(0);
    assert_eq!(empty, vec![0i64; bounds.len()]);
}

/// A waiting checkout returns with the job that a commit made available, long before its wait
/// runs out, and the worker stays alive while it waits (the pass refreshes its heartbeat).
#[test]
fn a_waiting_checkout_wakes_at_the_commit() {
    let c = installed("sqlwait", &["jobq.heartbeat_timeout = '3s'"], "app");
    let mut waiter = c.connect("app");
    let w = register(&mut waiter);
    let url = c.url("app");
    let t = std::thread::spawn(move || {
        let mut waiter = waiter;
        let start = Instant::now();
        let rows = waiter.query("SELECT id FROM jobq_checkout($1, '{wq}', 1, '60 s')", &[&w]).unwrap();
        (rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>(), start.elapsed())
    });
    let mut other = Client::connect(&url, postgres::NoTls).unwrap();
    wait_until("the checkout to wait", PATIENCE, || {
        let n: i64 = other.query_one("SELECT cardinality(jobq._waiting_workers())::bigint", &[]).unwrap().get(0);
        n == 1
    });
    // Passes every half second (as pg_cron or the workers' heartbeats run them): each finds
    // it alive, since it waits.
    for _ in 0..2 {
        let reaped: i32 = other.query_one("SELECT workers_reaped FROM jobq_reap()", &[]).unwrap().get(0);
        assert_eq!(reaped, 0, "a waiting worker is alive");
        std::thread::sleep(Duration::from_millis(500));
    }
    // Then no pass for longer than the heartbeat timeout (nothing ran them for a while; the
    // condition here is time itself): the next one still finds it alive.
    std::thread::sleep(Duration::from_millis(3500));
    let reaped: i32 = other.query_one("SELECT workers_reaped FROM jobq_reap()", &[]).unwrap().get(0);
    assert_eq!(reaped, 0, "a worker waiting past the heartbeat timeout since the last pass is alive");
    let id: i64 = other.query_one("SELECT jobq_enqueue('wq')", &[]).unwrap().get(0);
    let (got, took) = t.join().unwrap();
    assert_eq!(got, vec![id]);
    assert!(took < Duration::from_secs(50), "woken by the commit, not by the end of its wait: {took:?}");
}

/// Privileges of the edition's own functions: jobq_admin's, refused to a worker role.
#[test]
fn passes_are_scheduled_by_jobq_admin_only() {
    let c = installed("sqlprivs", &[], "app");
    let mut su = c.connect("postgres");
    su.batch_execute("CREATE ROLE sqlprivs_worker LOGIN; GRANT jobq_worker TO sqlprivs_worker; CREATE ROLE sqlprivs_reader LOGIN; GRANT jobq_reader TO sqlprivs_reader; CREATE ROLE sqlprivs_none LOGIN").unwrap();
    let mut w = c.connect_as("app", "sqlprivs_worker");
    for f in ["jobq_schedule_passes()", "jobq_unschedule_passes()", "jobq._ring()"] {
        let e = w.batch_execute(&format!("SELECT {f}")).unwrap_err();
        assert_eq!(sqlstate(&e), "42501", "{f}: {e:?}");
    }
    let edition: String = c.connect_as("app", "sqlprivs_reader").query_one("SELECT edition FROM jobq_version()", &[]).unwrap().get(0);
    assert_eq!(edition, "sql");
    let e = c.connect_as("app", "sqlprivs_none").batch_execute("SELECT jobq_version()").unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    // Without pg_cron in the database, the admin is told what to do instead.
    let mut admin = c.connect("app");
    let e = admin.batch_execute("SELECT jobq_schedule_passes()").unwrap_err();
    assert_eq!(sqlstate(&e), "0A000");
    assert!(e.as_db_error().unwrap().hint().unwrap().contains("cron.schedule_in_database"), "{e:?}");
}

/// With pg_cron (1.5 or later, scripts/build-pg-cron.sh) in the database, jobq_schedule_passes()
/// serves it with no client running: a dead worker's job is requeued by pg_cron's passes.
#[test]
fn pg_cron_runs_the_passes() {
    let c = cluster(
        "sqlcron",
        // Jobs in background workers: no connection, so no authentication to set up.
        &["shared_preload_libraries = 'pg_cron'", "cron.database_name = 'app'", "cron.use_background_workers = on", "jobq.heartbeat_timeout = '1s'"],
    );
    database(&c, "app");
    let mut su = c.connect("app");
    // First at pg_cron 1.4's version ('1.4-1', once a minute at best): refused with 0A000.
    su.batch_execute("CREATE EXTENSION pg_cron VERSION '1.4-1'").expect("pg_cron is installed (scripts/build-pg-cron.sh)");
    su.batch_execute(&format!("GRANT USAGE ON SCHEMA cron TO {INSTALLER}")).unwrap();
    c.install_sql_edition("app", INSTALLER).unwrap();
    su.batch_execute("CREATE ROLE sqlcron_admin LOGIN; GRANT jobq_admin TO sqlcron_admin").unwrap();
    let mut admin = c.connect_as("app", "sqlcron_admin");
    let e = admin.batch_execute("SELECT jobq_schedule_passes()").unwrap_err();
    assert_eq!(sqlstate(&e), "0A000", "{e:?}");
    assert!(e.as_db_error().unwrap().message().contains("1.5 or later"), "{e:?}");
    su.batch_execute("ALTER EXTENSION pg_cron UPDATE").unwrap();
    let version: String = su.query_one("SELECT extversion FROM pg_extension WHERE extname = 'pg_cron'", &[]).unwrap().get(0);
    assert!(version.as_str() >= "1.5", "pg_cron 1.5 or later is installed (scripts/build-pg-cron.sh): {version}");
    let job: i64 = admin.query_one("SELECT jobq_schedule_passes()", &[]).unwrap().get(0);
    let schedule: String = su.query_one("SELECT schedule FROM cron.job WHERE jobid = $1", &[&job]).unwrap().get(0);
    assert_eq!(schedule, "1 seconds");
    // A worker that dies holding a job (registered last: its 1 s of life has only the checkout
    // to cover).
    let id: i64 = su.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    let w = register(&mut su);
    let taken: Vec<i64> = su.query("SELECT id FROM jobq_checkout($1, '{q}')", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(taken, vec![id]);
    wait_until("pg_cron's passes to requeue the dead worker's job", PATIENCE, || {
        let state: String = su.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
        state == "ready"
    });
    let (attempt, interrupted): (i32, bool) = su
        .query_one("SELECT attempt, interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[&id])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((attempt, interrupted), (1, true), "requeued as the reaper requeues an interrupted job");
    // pg_cron records a run as succeeded after its command's transaction commits.
    wait_until("pg_cron to record a pass that succeeded", PATIENCE, || {
        let passes: i64 = su
            .query_one("SELECT count(*) FROM cron.job_run_details WHERE jobid = $1 AND status = 'succeeded'", &[&job])
            .unwrap()
            .get(0);
        passes >= 1
    });
    assert!(admin.query_one("SELECT jobq_unschedule_passes()", &[]).unwrap().get::<_, bool>(0));
    assert!(!admin.query_one("SELECT jobq_unschedule_passes()", &[]).unwrap().get::<_, bool>(0));
}

/// The checkout of one plain job (src/sql/twins/hot_path.sql, jobq_checkout) against the general
/// path (jobq._checkout), as tests/checkout.rs holds the extension's fast path against it: the
/// same jobs in two queues, one checked out a job at a time under READ COMMITTED (which the
/// twin must serve without jobq._checkout), the other under REPEATABLE READ (which only
/// jobq._checkout serves); the same rows returned, in the same order, and left the same. Then
/// every case the twin hands on: a key to take, a pause, several jobs, a stopping worker, a
/// worker bound to a session that has ended.
#[test]
fn the_checkout_of_one_job_claims_what_the_general_path_claims() {
    let c = installed("sqlcheckout", &[], "app");
    let mut su = c.connect("app");
    let w = register(&mut su);
    let one = |su: &mut Client, isolation: &str, call: &str| -> (Vec<serde_json::Value>, bool) {
        calls_sql(su, isolation, "_checkout", |t| {
            t.query(&format!("SELECT to_jsonb(j) FROM jobq_checkout($1, {call}) j"), &[&w]).unwrap().iter().map(|r| r.get(0)).collect()
        })
    };
    // A plain job, a payload stored out of line (TOAST), a job not yet due, a better priority
    // enqueued last.
    let jobs = [
        "'@', '{\"n\": 1}', kind => 'Plain'",
        "'@', jsonb_build_object('big', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 3000) g))",
        "'@', '{\"n\": 3}', run_at => now() + interval '1 hour'",
        "'@', '{\"n\": 4}', priority => -1, max_attempts => 7",
    ];
    let mut enqueued = std::collections::HashMap::new();
    for q in ["q", "r"] {
        for (i, j) in jobs.iter().enumerate() {
            let id: i64 = su.query_one(&format!("SELECT jobq_enqueue({})", j.replace('@', q)), &[]).unwrap().get(0);
            enqueued.insert((q, i), id);
        }
    }
    // Claim order: the better priority first, then by id; the job not yet due stays.
    for i in [3, 0, 1] {
        let (fast, general) = one(&mut su, "READ COMMITTED", "'{q}'");
        let (sql, sql_general) = one(&mut su, "REPEATABLE READ", "'{r}'");
        assert_eq!((general, sql_general), (false, true), "which path ran");
        assert_eq!(fast.len(), 1);
        assert_eq!(fast[0]["id"].as_i64(), Some(enqueued[&("q", i)]));
        assert_eq!(sql[0]["id"].as_i64(), Some(enqueued[&("r", i)]));
        assert_eq!(without_moments(&fast[0]), without_moments(&sql[0]), "the two paths returned different rows");
        assert_eq!(fast[0]["attempt"], 1);
        assert_eq!(claimed(&mut su, enqueued[&("q", i)]), claimed(&mut su, enqueued[&("r", i)]));
    }
    // Nothing due: nothing, still without the general path; so for every queue (NULL) and two.
    assert_eq!(one(&mut su, "READ COMMITTED", "'{q}'"), (vec![], false));
    let id: i64 = su.query_one("SELECT jobq_enqueue('s')", &[]).unwrap().get(0);
    let (got, general) = one(&mut su, "READ COMMITTED", "NULL");
    assert_eq!((got[0]["id"].as_i64(), general), (Some(id), false));
    let id: i64 = su.query_one("SELECT jobq_enqueue('s')", &[]).unwrap().get(0);
    let (got, general) = one(&mut su, "READ COMMITTED", "'{q,s}'");
    assert_eq!((got[0]["id"].as_i64(), general), (Some(id), false));
    // A worker bound to its session, as the client libraries register theirs: the twin's too.
    let bound: uuid::Uuid = su.query_one("SELECT jobq_register_worker('bound', bind_to_session => true)", &[]).unwrap().get(0);
    let id: i64 = su.query_one("SELECT jobq_enqueue('b')", &[]).unwrap().get(0);
    let (got, general) = calls_sql(&mut su, "READ COMMITTED", "_checkout", |t| {
        t.query_one("SELECT id FROM jobq_checkout($1, '{b}')", &[&bound]).unwrap().get::<_, i64>(0)
    });
    assert_eq!((got, general), (id, false));
    assert!(su.query_one("SELECT jobq_complete($1, $2)", &[&id, &bound]).unwrap().get::<_, bool>(0));
    // Its checkouts judge it without jobq.worker_alive, which reads every session, and without
    // jobq._usable_worker, which reads its row again: here by its pid alone (jobq's role may not
    // see a superuser's session start, so its row has none); the workers' call as well.
    for function in ["worker_alive", "_usable_worker"] {
        let id: i64 = su.query_one("SELECT jobq_enqueue('b')", &[]).unwrap().get(0);
        let (got, read) = calls_sql(&mut su, "READ COMMITTED", function, |t| {
            t.query_one("SELECT id FROM jobq_checkout($1, '{b}')", &[&bound]).unwrap().get::<_, i64>(0)
        });
        assert_eq!((got, read), (id, false), "{function}");
        let next: i64 = su.query_one("SELECT jobq_enqueue('b')", &[]).unwrap().get(0);
        let (got, read) = calls_sql(&mut su, "READ COMMITTED", function, |t| {
            t.query_one("SELECT id FROM jobq_complete_and_checkout($1, ARRAY[$2::bigint], NULL, '{b}')", &[&bound, &id])
                .unwrap()
                .get::<_, i64>(0)
        });
        assert_eq!((got, read), (next, false), "{function}");
        assert!(su.query_one("SELECT jobq_complete($1, $2)", &[&next, &bound]).unwrap().get::<_, bool>(0));
    }
    // Where jobq's role sees the session's start, the row names it. Its own start: alive, the
    // sessions read once and the start kept in the session; a row that names another start of
    // this pid is another session's worker, dead (JQ001), whether the start is kept yet or not.
    su.batch_execute(&format!("GRANT pg_read_all_stats TO {INSTALLER}")).unwrap();
    let forge = |su: &mut Client, w: &uuid::Uuid, by: &str| {
        su.batch_execute(&format!("UPDATE jobq.workers SET backend_start = backend_start + interval '{by}' WHERE id = '{w}'")).unwrap();
    };
    let mut seen = c.connect("app");
    let sw: uuid::Uuid = seen.query_one("SELECT jobq_register_worker('seen', bind_to_session => true)", &[]).unwrap().get(0);
    let started: bool = su.query_one("SELECT backend_start IS NOT NULL FROM jobq.workers WHERE id = $1", &[&sw]).unwrap().get(0);
    assert!(started, "the row names its session's start");
    forge(&mut su, &sw, "-1 s");
    let mut next = refused(&mut seen, &sw, "a worker of another start of this pid claimed");
    forge(&mut su, &sw, "1 s");
    // (Once the start is kept, not even jobq._usable_worker is called: the look's row decides.)
    for k in 0..3 {
        let function = if k < 2 { "worker_alive" } else { "_usable_worker" };
        let (got, read) = calls_sql(&mut seen, "READ COMMITTED", function, |t| {
            t.query_one("SELECT id FROM jobq_checkout($1, '{b}')", &[&sw]).unwrap().get::<_, i64>(0)
        });
        assert_eq!((got, read), (next, false), "{function}");
        let kept: String = seen.query_one("SELECT current_setting('jobq.session_start', true)", &[]).unwrap().get(0);
        assert!(!kept.is_empty(), "the session's start is kept");
        assert!(seen.query_one("SELECT jobq_complete($1, $2)", &[&next, &sw]).unwrap().get::<_, bool>(0));
        next = su.query_one("SELECT jobq_enqueue('b')", &[]).unwrap().get(0);
    }
    // The start kept, another one named: refused all the same.
    forge(&mut su, &sw, "1 microsecond");
    refused(&mut seen, &sw, "a worker of another start of this pid claimed");
    forge(&mut su, &sw, "-1 microsecond");
    su.batch_execute(&format!("REVOKE pg_read_all_stats FROM {INSTALLER}")).unwrap();
    drop(seen);
    // A worker bound to a session that has ended is dead, its heartbeat fresh or not: the twin's
    // look at the worker takes only unbound ones, and the general path refuses it (JQ001).
    let gone: uuid::Uuid = {
        let mut s = c.connect("app");
        s.query_one("SELECT jobq_register_worker('gone', bind_to_session => true)", &[]).unwrap().get(0)
    };
    others_ended(&mut su);
    refused(&mut su, &gone, "a dead session's worker claimed");
    // A first job with a key to take goes to the general path, which takes its slot; a plain
    // job behind it is then the twin's again.
    let keyed: i64 = su.query_one("SELECT jobq_enqueue('k', concurrency_key => 'ck')", &[]).unwrap().get(0);
    let plain: i64 = su.query_one("SELECT jobq_enqueue('k')", &[]).unwrap().get(0);
    let (got, general) = one(&mut su, "READ COMMITTED", "'{k}'");
    assert_eq!((got[0]["id"].as_i64(), general), (Some(keyed), true));
    let slot: Option<i32> = su.query_one("SELECT concurrency_slot FROM jobq.live_jobs WHERE id = $1", &[&keyed]).unwrap().get(0);
    assert!(slot.is_some(), "the key's slot was taken");
    let (got, general) = one(&mut su, "READ COMMITTED", "'{k}'");
    assert_eq!((got[0]["id"].as_i64(), general), (Some(plain), false));
    // Several jobs, a paused queue: the general path.
    su.query_one("SELECT count(jobq_enqueue('m')) FROM generate_series(1, 3)", &[]).unwrap();
    let (got, general) = one(&mut su, "READ COMMITTED", "'{m}', 2");
    assert_eq!((got.len(), general), (2, true));
    su.batch_execute("SELECT jobq_pause('m')").unwrap();
    assert_eq!(one(&mut su, "READ COMMITTED", "'{m}'"), (vec![], true));
    su.batch_execute("SELECT jobq_resume('m')").unwrap();
    // A stopping worker claims nothing, as the general path says.
    su.query("SELECT jobq_stop_checkouts($1)", &[&w]).unwrap();
    assert_eq!(one(&mut su, "READ COMMITTED", "'{m}'"), (vec![], true));
    assert_job_tables_consistent(&mut su);
    // The twin's jobs complete and count as started and completed like the others.
    let done: i64 = su
        .query_one(
            "SELECT count(*) FILTER (WHERE jobq_complete(id, $1)) FROM jobq.live_jobs WHERE state = 'executing' AND worker_id = $1",
            &[&w],
        )
        .unwrap()
        .get(0);
    assert_eq!(done, 12);
    su.batch_execute("SELECT jobq_reap()").unwrap();
    let (started, completed): (i64, i64) = {
        let r = su
            .query_one("SELECT sum(started)::bigint, sum(completed)::bigint FROM jobq.throughput(now() - interval '1 hour')", &[])
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((started, completed), (20, 20));
}

/// The workers' call with one job in hand (src/sql/twins/hot_path.sql,
/// jobq_complete_and_checkout) checks out its next job with jobq_checkout's one-job statements
/// (src/sql/twins/pasted/checkout_one.sql, pasted into both): held against the general path as
/// that one is. The same jobs in two queues, each job
/// in hand completed and the next claimed in one call, under READ COMMITTED (the copy, with
/// neither jobq_checkout nor jobq._checkout called) and under REPEATABLE READ (jobq._checkout);
/// the same rows returned, in the same order, and left the same; every queue (NULL) and two
/// queues, the copy's other claim. Then the cases the copy hands on: a key to take, several
/// jobs, a pause, a stopping worker. Each start and completion is counted once.
#[test]
fn the_workers_call_claims_what_the_general_path_claims() {
    let c = installed("sqlfused", &[], "app");
    let mut su = c.connect("app");
    let w = register(&mut su);
    // (job returned, jobq_checkout called, jobq._checkout called) of one call at `isolation`
    // (common::calls_sql, which counts jobq._checkout's calls). `queues`: the call's argument, as SQL.
    let call = |su: &mut Client, isolation: &str, in_hand: i64, queues: &str, max: i32| {
        let ((got, checkout), general) = calls_sql(su, isolation, "_checkout", |t| {
            // jobq_checkout is of the installer's schema, not jobq's (pending_calls).
            let checkouts = |t: &mut postgres::Transaction| -> i64 {
                t.query_one("SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_xact_user_functions WHERE funcname = 'jobq_checkout'", &[])
                    .unwrap()
                    .get(0)
            };
            let before = checkouts(t);
            let got: Vec<serde_json::Value> = t
                .query(&format!("SELECT to_jsonb(j) FROM jobq_complete_and_checkout($1, ARRAY[$2::bigint], NULL, {queues}, $3) j"), &[&w, &in_hand, &max])
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            (got, checkouts(t) > before)
        });
        (got, checkout, general)
    };
    let jobs = ["'@', '{\"n\": 1}', kind => 'Plain'", "'@', '{\"n\": 2}', priority => -1, max_attempts => 7", "'@', '{\"n\": 3}'"];
    let mut enqueued = std::collections::HashMap::new();
    for q in ["q", "r", "k", "m"] {
        for (i, j) in jobs.iter().enumerate() {
            let id: i64 = su.query_one(&format!("SELECT jobq_enqueue({})", j.replace('@', q)), &[]).unwrap().get(0);
            enqueued.insert((q, i), id);
        }
    }
    // The first job of each queue in hand, then one call a job: claim order is priority, then id.
    let first = |su: &mut Client, q: &str| -> i64 { su.query_one("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&w, &q]).unwrap().get(0) };
    let (mut in_q, mut in_r) = (first(&mut su, "q"), first(&mut su, "r"));
    assert_eq!((in_q, in_r), (enqueued[&("q", 1)], enqueued[&("r", 1)]));
    for i in [0, 2] {
        let (fast, checkout, general) = call(&mut su, "READ COMMITTED", in_q, "'{q}'", 1);
        assert_eq!((checkout, general), (false, false), "the copy, and nothing else, claimed");
        let (sql, _, sql_general) = call(&mut su, "REPEATABLE READ", in_r, "'{r}'", 1);
        assert!(sql_general, "REPEATABLE READ is the general path's");
        assert_eq!(fast.len(), 1);
        assert_eq!((fast[0]["id"].as_i64(), sql[0]["id"].as_i64()), (Some(enqueued[&("q", i)]), Some(enqueued[&("r", i)])));
        assert_eq!(without_moments(&fast[0]), without_moments(&sql[0]), "the two paths returned different rows");
        assert_eq!(claimed(&mut su, enqueued[&("q", i)]), claimed(&mut su, enqueued[&("r", i)]));
        (in_q, in_r) = (enqueued[&("q", i)], enqueued[&("r", i)]);
    }
    // Nothing due: nothing, and the job in hand completed, without the general path.
    assert_eq!(call(&mut su, "READ COMMITTED", in_q, "'{q}'", 1), (vec![], false, false));
    let state: String = su.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&in_q]).unwrap().get(0);
    assert_eq!(state, "completed");
    // Every queue: the first in claim order of them all (k's and m's best priority, k's first);
    // then two queues, one with a job: the copy again.
    let (got, checkout, general) = call(&mut su, "READ COMMITTED", in_r, "NULL", 1);
    assert_eq!((got[0]["id"].as_i64(), checkout, general), (Some(enqueued[&("k", 1)]), false, false));
    let s: i64 = su.query_one("SELECT jobq_enqueue('s')", &[]).unwrap().get(0);
    let (got, checkout, general) = call(&mut su, "READ COMMITTED", enqueued[&("k", 1)], "'{q,s}'", 1);
    assert_eq!((got[0]["id"].as_i64(), checkout, general), (Some(s), false, false));
    // A first job with a key to take: the general path, which takes its slot.
    let keyed: i64 = su.query_one("SELECT jobq_enqueue('k', concurrency_key => 'ck', priority => -5)", &[]).unwrap().get(0);
    let (got, _, general) = call(&mut su, "READ COMMITTED", s, "'{k}'", 1);
    assert_eq!((got[0]["id"].as_i64(), general), (Some(keyed), true));
    let slot: Option<i32> = su.query_one("SELECT concurrency_slot FROM jobq.live_jobs WHERE id = $1", &[&keyed]).unwrap().get(0);
    assert!(slot.is_some(), "the key's slot was taken");
    // Several jobs: the general path.
    let (got, _, general) = call(&mut su, "READ COMMITTED", keyed, "'{k}'", 2);
    assert_eq!((got.len(), general), (2, true));
    // A paused queue, a stopping worker: nothing, as the general path says.
    let in_m = first(&mut su, "m");
    su.batch_execute("SELECT jobq_pause('m')").unwrap();
    let (got, _, general) = call(&mut su, "READ COMMITTED", in_m, "'{m}'", 1);
    assert_eq!((got, general), (vec![], true));
    su.batch_execute("SELECT jobq_resume('m')").unwrap();
    let in_m: i64 = su.query_one("SELECT id FROM jobq_checkout($1, '{m}')", &[&w]).unwrap().get(0);
    su.query("SELECT jobq_stop_checkouts($1)", &[&w]).unwrap();
    let (got, _, general) = call(&mut su, "READ COMMITTED", in_m, "'{m}'", 1);
    assert_eq!((got, general), (vec![], true));
    assert_job_tables_consistent(&mut su);
    // Started: q's and r's three, k's four (its first, the keyed, two), s's one, m's two; completed:
    // every job a call had in hand, two of k's left executing.
    su.batch_execute("SELECT jobq_reap()").unwrap();
    let r = su
        .query_one("SELECT sum(started)::bigint, sum(completed)::bigint FROM jobq.throughput(now() - interval '1 hour')", &[])
        .unwrap();
    assert_eq!((r.get::<_, i64>(0), r.get::<_, i64>(1)), (13, 11));
    let executing: i64 = su.query_one("SELECT count(*) FROM jobq.live_jobs WHERE state = 'executing'", &[]).unwrap().get(0);
    assert_eq!(executing, 2);
}

/// The SQL edition's jobq_complete (src/sql/twins/hot_path.sql) moves a job without keys,
/// completed under READ COMMITTED by the caller's own worker, as jobq._complete moves it, and
/// hands every other completion to jobq._complete.
#[test]
fn the_completion_of_a_job_without_keys_moves_what_the_general_path_moves() {
    let c = installed("sqlcomplete", &[], "app");
    let mut su = c.connect("app");
    su.batch_execute("CREATE ROLE sqlcomplete_other LOGIN; GRANT jobq_worker TO sqlcomplete_other").unwrap();
    let w = register(&mut su);
    let complete = |su: &mut Client, isolation: &str, id: i64| -> (bool, bool) {
        calls_sql(su, isolation, "_complete", |t| {
            t.query_one("SELECT jobq_complete($1, $2, '{\"ok\": 1}')", &[&id, &w]).unwrap().get(0)
        })
    };
    let enqueue = |su: &mut Client, args: &str| -> i64 { su.query_one(&format!("SELECT jobq_enqueue({args})"), &[]).unwrap().get(0) };
    let checkout = |su: &mut Client, queue: &str| -> i64 {
        su.query_one(&format!("SELECT id FROM jobq_checkout($1, '{{{queue}}}')"), &[&w]).unwrap().get(0)
    };
    let finished = |su: &mut Client, id: i64| -> serde_json::Value {
        let row: serde_json::Value =
            su.query_one("SELECT to_jsonb(f) - 'finished_at' FROM jobq.finished_jobs f WHERE f.id = $1", &[&id]).unwrap().get(0);
        without_moments(&row)
    };
    // Two alike jobs: one completed by the twin, one by the general path, the same row kept.
    let mut ids = vec![];
    for q in ["q", "r"] {
        let id = enqueue(&mut su, &format!("'{q}', '{{\"n\": 1}}', kind => 'Plain', max_attempts => 3"));
        assert_eq!(checkout(&mut su, q), id);
        ids.push(id);
    }
    assert_eq!(complete(&mut su, "READ COMMITTED", ids[0]), (true, false), "the twin completes it");
    assert_eq!(complete(&mut su, "REPEATABLE READ", ids[1]), (true, true));
    let kept = finished(&mut su, ids[0]);
    assert_eq!(kept, finished(&mut su, ids[1]), "the two paths kept different rows");
    assert_eq!((kept["state"].as_str(), kept["result"].clone()), (Some("completed"), serde_json::json!({"ok": 1})));
    // Once more: the DELETE finds nothing, and the general path answers false.
    assert_eq!(complete(&mut su, "READ COMMITTED", ids[0]), (false, true));
    // A job with a key: the general path, which frees it for the next job of that key.
    let keyed = enqueue(&mut su, "'k', concurrency_key => 'ck'");
    let next = enqueue(&mut su, "'k', concurrency_key => 'ck'");
    assert_eq!(checkout(&mut su, "k"), keyed);
    assert!(su.query("SELECT id FROM jobq_checkout($1, '{k}')", &[&w]).unwrap().is_empty(), "the key's one slot is held");
    assert_eq!(complete(&mut su, "READ COMMITTED", keyed), (true, true));
    assert_eq!(checkout(&mut su, "k"), next);
    // A job whose child waits on it: the twin completes it and the child becomes ready.
    let parent = enqueue(&mut su, "'p'");
    let child = enqueue(&mut su, &format!("'p', depends_on => ARRAY[{parent}]::bigint[]"));
    assert_eq!(checkout(&mut su, "p"), parent);
    assert_eq!(complete(&mut su, "READ COMMITTED", parent), (true, false));
    let state: String = su.query_one("SELECT state FROM jobq.live_jobs WHERE id = $1", &[&child]).unwrap().get(0);
    assert_eq!(state, "ready");
    // Another role names this worker: refused by the general path (42501), the job untouched.
    let job = enqueue(&mut su, "'o'");
    assert_eq!(checkout(&mut su, "o"), job);
    let mut other = c.connect_as("app", "sqlcomplete_other");
    let e = other.query_one("SELECT jobq_complete($1, $2)", &[&job, &w]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    assert_eq!(claimed(&mut su, job)["state"], "executing");
    // Where a queue grant limits a role, every completion is the general path's.
    su.batch_execute("SELECT jobq_grant_queues('sqlcomplete_other', 'worker', '{o}')").unwrap();
    assert_eq!(complete(&mut su, "READ COMMITTED", job), (true, true));
    assert_job_tables_consistent(&mut su);
    // Both paths count their completions.
    su.batch_execute("SELECT jobq_reap()").unwrap();
    let completed: i64 =
        su.query_one("SELECT sum(completed)::bigint FROM jobq.throughput(now() - interval '1 hour')", &[]).unwrap().get(0);
    assert_eq!(completed, 5);
}

/// A heartbeat's pass reads the sessions afresh (jobq._reap, src/sql/reap.sql): PostgreSQL keeps
/// the sessions a transaction read for the rest of it, and a heartbeat reads them before its
/// pass (its own worker's liveness). A worker registered since, bound to a session started
/// since, must not be judged dead by that pass.
#[test]
fn a_pass_after_an_earlier_look_at_the_sessions_keeps_a_worker_registered_since() {
    let c = installed("sqlpasssessions", &[], "app");
    let mut beating = c.connect("app");
    let mut t = beating.transaction().unwrap();
    // The sessions, read now and kept by this transaction; any pass is due from here on.
    t.batch_execute("SELECT count(*) FROM pg_stat_get_activity(NULL); SET LOCAL jobq.reap_interval = '1ms'").unwrap();
    let mut late = c.connect("app");
    let w: uuid::Uuid = late.query_one("SELECT jobq_register_worker('late', bind_to_session => true)", &[]).unwrap().get(0);
    t.batch_execute("SELECT jobq._pass_if_due()").unwrap();
    t.commit().unwrap();
    let registered: bool = late.query_one("SELECT EXISTS (SELECT 1 FROM jobq.workers WHERE id = $1)", &[&w]).unwrap().get(0);
    assert!(registered, "the pass reaped a worker whose session it had not read");
    // The late session ends: the next pass reaps its worker.
    drop(late);
    let mut other = c.connect("app");
    wait_until("the pass to reap the worker whose session ended", PATIENCE, || {
        other.batch_execute("SET jobq.reap_interval = '1ms'; SELECT jobq._pass_if_due()").unwrap();
        !other.query_one("SELECT EXISTS (SELECT 1 FROM jobq.workers WHERE id = $1)", &[&w]).unwrap().get::<_, bool>(0)
    });
}

/// Settings a role sets for itself never hasten what jobq does to another role's workers and
/// jobs (in the extension only a superuser or the server's file sets them): a worker role with a
/// 1 s heartbeat timeout cannot take the lock of another role's worker whose heartbeat is 10 s
/// old, and the pass its heartbeat runs, with a retention of 0 and a pass every millisecond,
/// reaps no live worker and prunes no finished job. A superuser's own settings still apply.
#[test]
fn a_roles_own_settings_never_hasten_what_happens_to_others() {
    let c = installed("sqlguard", &[], "app");
    let mut su = c.connect("app");
    su.batch_execute("CREATE ROLE sqlguard_w LOGIN; GRANT jobq_worker TO sqlguard_w").unwrap();
    let victim = register(&mut su);
    assert!(su.query_one("SELECT jobq_acquire_lock('L', $1, interval '1 hour')", &[&victim]).unwrap().get::<_, bool>(0));
    let done: i64 = su.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    su.query("SELECT jobq_checkout($1, '{q}')", &[&victim]).unwrap();
    assert!(su.query_one("SELECT jobq_complete($1, $2)", &[&done, &victim]).unwrap().get::<_, bool>(0));
    // The victim's last heartbeat, 10 s ago: alive by the server's setting (tests/common: 10 min);
    // any pass is due.
    su.batch_execute(&format!(
        "UPDATE jobq.workers SET heartbeat_at = clock_timestamp() - interval '10 s' WHERE id = '{victim}';
         UPDATE jobq.last_pass SET ended_at = clock_timestamp() - interval '1 hour'"
    ))
    .unwrap();
    let mut w = c.connect_as("app", "sqlguard_w");
    let mine = register(&mut w);
    w.batch_execute("SET jobq.heartbeat_timeout = '1s'; SET jobq.reap_interval = '1ms'; SET jobq.retention = '0'").unwrap();
    assert!(!w.query_one("SELECT jobq_acquire_lock('L', $1)", &[&mine]).unwrap().get::<_, bool>(0), "the lock's holder is alive");
    w.query_one("SELECT jobq_heartbeat($1)", &[&mine]).unwrap();
    let passed: bool = su.query_one("SELECT ended_at > clock_timestamp() - interval '1 minute' FROM jobq.last_pass", &[]).unwrap().get(0);
    assert!(passed, "the heartbeat ran a pass");
    let (workers, finished): (i64, i64) = su
        .query_one("SELECT (SELECT count(*) FROM jobq.workers WHERE id = $1), (SELECT count(*) FROM jobq.finished_jobs WHERE id = $2)", &[&victim, &done])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((workers, finished), (1, 1), "the pass reaped no live worker and pruned no job of a day");
    // The same settings in a superuser's session apply: the holder is dead by 1 s.
    let other = register(&mut su);
    su.batch_execute("SET jobq.heartbeat_timeout = '1s'").unwrap();
    assert!(su.query_one("SELECT jobq_acquire_lock('L', $1)", &[&other]).unwrap().get::<_, bool>(0));
}
