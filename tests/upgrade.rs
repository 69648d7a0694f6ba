//! Upgrades (the contract, Versions and upgrades): a database created at jobq 0.1.0, 0.2.0, 0.3.0 or 0.4.0
//! (0.1.0's, 0.3.0's and 0.4.0's install scripts kept in sql/, 0.2.0's the one inside the upgrade to it), filled with jobs in
//! every state, keys, slots, a lock, a pause and live workers, then `ALTER EXTENSION jobq
//! UPDATE` under the new library (0.1.0 goes through 0.2.0): nothing lost, the catalog exactly
//! that of a fresh `CREATE EXTENSION`, and the new version's behaviour on the upgraded rows,
//! jobs in flight included. The background worker leaves the database alone while it is at an
//! older version.
mod common;

use common::*;
use postgres::Client;
use std::time::Duration;
use uuid::Uuid;

const PATIENCE: Duration = Duration::from_secs(30);

/// The library's version: what `ALTER EXTENSION jobq UPDATE` reaches.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Puts the install script of `version` where `CREATE EXTENSION jobq VERSION '<version>'` finds
/// it (`cargo pgrx install` copies only the upgrade scripts): 0.1.0's is kept in
/// sql/jobq--0.1.0.sql; 0.2.0's is the middle part of the upgrade script to it, as shipped.
fn install_script(version: &str) {
    let sql = |f: &str| std::fs::read_to_string(format!("{}/sql/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let script = match version {
        "0.1.0" => sql("jobq--0.1.0.sql"),
        "0.2.0" => {
            let upgrade = sql("jobq--0.1.0--0.2.0.sql");
            let start = upgrade.find("-- ==== 0.2.0's install script ====").unwrap();
            let end = upgrade.find("-- ==== 0.1.0's rows ====").unwrap();
            upgrade[start..end].to_string()
        }
        // 0.3.0's and 0.4.0's as `cargo pgrx schema` generated them at their release commits (CHANGELOG.md).
        "0.3.0" => sql("jobq--0.3.0.sql"),
        "0.4.0" => sql("jobq--0.4.0.sql"),
        _ => panic!("no install script kept for {version}"),
    };
    let out = std::process::Command::new(format!("{PG_BIN}/pg_config")).arg("--sharedir").output().unwrap();
    let share = String::from_utf8(out.stdout).unwrap();
    std::fs::write(std::path::Path::new(share.trim()).join(format!("extension/jobq--{version}.sql")), script).unwrap();
}

/// A cluster with database `up` at jobq `version` and `fresh` at the library's own, restarted
/// as in a real upgrade (the new library installed, the server restarted): its background
/// worker has found `up` at the old version under the new library and leaves it alone.
fn cluster_with_old_database(name: &str, version: &str) -> Cluster {
    install_script(version);
    let cluster = Cluster::start(name, &["jobq.reap_interval = '200ms'", "jobq.heartbeat_timeout = '1h'"]);
    let mut admin = cluster.connect("postgres");
    admin.batch_execute("CREATE DATABASE up").unwrap();
    admin.batch_execute("CREATE DATABASE fresh").unwrap();
    cluster.connect("fresh").batch_execute("CREATE EXTENSION jobq").unwrap();
    cluster.connect("up").batch_execute(&format!("CREATE EXTENSION jobq VERSION '{version}'")).unwrap();
    drop(admin);
    cluster.pg_ctl_stop("fast");
    cluster.pg_ctl_start();
    wait_until("the reaper to see the old version", PATIENCE, || {
        cluster.log().contains(&format!(
            "database \"up\" has jobq {version}, this library is {VERSION}; leaving it alone until ALTER EXTENSION jobq UPDATE"
        ))
    });
    cluster
}

/// Every object of the extension as text: relations with their columns, options and
/// privileges, row level security and its policies, indexes, constraints, views, triggers, functions (signature, body, settings, privileges),
/// the schema's privileges, what pg_dump keeps, and the extension's members.
fn catalog(c: &mut Client) -> Vec<String> {
    let rows = c
        .query(
            "WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'jobq'),
                  rels AS (SELECT c.* FROM pg_class c WHERE c.relnamespace = 'jobq'::regnamespace)
             SELECT x FROM (
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
               SELECT format('con %s %s', conname, pg_get_constraintdef(oid)) FROM pg_constraint WHERE connamespace = 'jobq'::regnamespace
               UNION ALL
               SELECT format('view %s %s', relname, pg_get_viewdef(oid)) FROM rels WHERE relkind = 'v'
               UNION ALL
               SELECT format('trigger %s %s', pg_get_triggerdef(t.oid), t.tgenabled)
                 FROM pg_trigger t JOIN rels r ON r.oid = t.tgrelid WHERE NOT t.tgisinternal
               UNION ALL
               SELECT format('fn %s %s %s %s %s %s %s', p.oid::regprocedure, md5(p.prosrc), p.prosecdef, p.proconfig,
                             p.provolatile, p.proacl, pg_get_function_result(p.oid))
                 FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                 JOIN ext ON d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'
               UNION ALL
               SELECT format('schema %s %s', nspname, nspacl) FROM pg_namespace WHERE nspname LIKE 'jobq%'
               UNION ALL
               SELECT format('dumped %s %s', u.c::regclass, u.cond)
                 FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS u(c, cond) WHERE e.extname = 'jobq'
               UNION ALL
               SELECT format('member %s', pg_describe_object(d.classid, d.objid, d.objsubid))
                 FROM pg_depend d JOIN ext ON d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'
             ) s(x) ORDER BY x",
            &[],
        )
        .unwrap();
    // `cargo pgrx test` installs a build with the #[pg_test] functions of src/lib.rs in schema
    // `tests`: not part of jobq, and not in the upgrade script.
    rows.iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|x| !x.starts_with("member function tests.") && !x.starts_with("fn tests.") && x != "member schema tests")
        .collect()
}

/// The rows a user sees, as text, ordered.
fn contents(c: &mut Client) -> String {
    c.query_one(
        "SELECT concat_ws(' | ',
            -- (rate_key, errors: columns 0.2.0 added, NULL for every upgraded job; depends_on,
            -- checkpoints: 0.3.0's, checked by upgraded_jobs_have_no_workflow; fairness_key:
            -- 0.5.0's, checked there too)
            (SELECT string_agg((to_jsonb(j) - 'rate_key' - 'errors' - 'depends_on' - 'checkpoints' - 'fairness_key')::text, ',' ORDER BY id)
               FROM jobq.jobs j),
            (SELECT string_agg(format('%s %s %s %s %s', id, name, metadata, heartbeat_at, backend_pid), ',' ORDER BY id) FROM jobq.workers),
            (SELECT string_agg(row_to_json(l)::text, ',' ORDER BY key) FROM jobq.locks l),
            (SELECT string_agg(row_to_json(s)::text, ',' ORDER BY ns, key, slot) FROM jobq.slots s WHERE job_id IS NOT NULL),
            (SELECT string_agg(row_to_json(p)::text, ',' ORDER BY queue, kind) FROM jobq.pauses p),
            (SELECT string_agg(format('%s %s %s %s %s', queue, ready, scheduled, executing, dead), ',' ORDER BY queue)
               FROM jobq.queue_stats))",
        &[],
    )
    .unwrap()
    .get(0)
}

/// 0.3.0's columns on jobs that were there before: no dependencies, no checkpoints (`{}`); and
/// 0.5.0's: no fairness key.
fn upgraded_jobs_have_no_workflow(c: &mut Client) {
    let (jobs, plain): (i64, i64) = {
        let r = c
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE depends_on IS NULL AND checkpoints = '{}' AND fairness_key IS NULL) FROM jobq.jobs",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert!(jobs > 0);
    assert_eq!(plain, jobs);
}

fn checkout(c: &mut Client, w: Uuid, queue: &str) -> Option<i64> {
    c.query_opt("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&w, &queue]).unwrap().map(|r| r.get(0))
}

#[test]
fn an_upgrade_from_0_1_0_keeps_everything_and_behaves_as_the_new_version() {
    let cluster = cluster_with_old_database("upgrade", "0.1.0");
    let mut admin = cluster.connect("postgres");
    let mut c = cluster.connect("up");

    // 0.1.0 granted everything to PUBLIC: the application's role had no grant to need.
    admin.batch_execute("CREATE ROLE upgrade_app LOGIN").unwrap();
    let mut app = cluster.connect_as("up", "upgrade_app");
    let live = register(&mut app);
    let doomed = register(&mut app);
    let q = |c: &mut Client, sql: &str| -> i64 { c.query_one(sql, &[]).unwrap().get(0) };
    // Executing under the live worker: a concurrency key (limit 1), an until_executed key.
    let keyed = q(&mut app, "SELECT jobq_enqueue('work', '{\"n\": 1}', concurrency_key => 'ck', unique_key => 'u1')");
    assert_eq!(checkout(&mut app, live, "work"), Some(keyed));
    // Waiting behind that slot, with an until_executing key.
    let behind = q(&mut app, "SELECT jobq_enqueue('work', '{\"n\": 2}', concurrency_key => 'ck', unique_key => 'u3', unique_strategy => 'until_executing')");
    assert_eq!(checkout(&mut app, live, "work"), None, "the slot is taken");
    // Executing under a worker that will be dead, with a while_executing key.
    let orphan = q(&mut app, "SELECT jobq_enqueue('orphans', unique_key => 'u2', unique_strategy => 'while_executing')");
    assert_eq!(checkout(&mut app, doomed, "orphans"), Some(orphan));
    // Finished in every way, with a result and an error.
    let done = q(&mut app, "SELECT jobq_enqueue('done', '{\"n\": 3}')");
    assert_eq!(checkout(&mut app, live, "done"), Some(done));
    assert!(app.query_one("SELECT jobq_complete($1, $2, '{\"ok\": true}')", &[&done, &live]).unwrap().get::<_, bool>(0));
    let dead = q(&mut app, "SELECT jobq_enqueue('dies', max_attempts => 1)");
    assert_eq!(checkout(&mut app, live, "dies"), Some(dead));
    app.execute("SELECT jobq_fail($1, $2, '{\"boom\": 1}')", &[&dead, &live]).unwrap();
    let cancelled = q(&mut app, "SELECT jobq_enqueue('cancelled')");
    app.execute("SELECT jobq_cancel($1)", &[&cancelled]).unwrap();
    // Waiting: due, scheduled, in a paused queue; a named lock.
    let due = q(&mut app, "SELECT jobq_enqueue('due', priority => 3)");
    let later = q(&mut app, "SELECT jobq_enqueue('due', run_at => now() + interval '1 hour')");
    let paused = q(&mut app, "SELECT jobq_enqueue('paused')");
    app.batch_execute("SELECT jobq_pause('paused')").unwrap();
    assert!(app.query_one("SELECT jobq_acquire_lock('lk', $1)", &[&live]).unwrap().get::<_, bool>(0));
    let states: String = c.query_one("SELECT string_agg(DISTINCT state, ',' ORDER BY state) FROM jobq.jobs", &[]).unwrap().get(0);
    assert_eq!(states, "cancelled,completed,dead,executing,ready");
    let before = contents(&mut c);
    let last_id = q(&mut c, "SELECT last_value FROM jobq.jobs_id_seq");

    // The administrator grants the new roles (0.2.0 grants PUBLIC nothing), then updates.
    admin.batch_execute("GRANT jobq_worker TO upgrade_app").unwrap();
    c.batch_execute("ALTER EXTENSION jobq UPDATE").unwrap();
    let version: String = c.query_one("SELECT extversion FROM pg_extension WHERE extname = 'jobq'", &[]).unwrap().get(0);
    assert_eq!(version, VERSION);

    // Nothing lost; the catalog is a fresh one's.
    assert_eq!(contents(&mut c), before);
    upgraded_jobs_have_no_workflow(&mut c);
    assert_job_tables_consistent(&mut c);
    let fresh = catalog(&mut cluster.connect("fresh"));
    assert!(fresh.iter().any(|x| x.starts_with("idx CREATE INDEX ready_by_queue")) && fresh.len() > 150, "{fresh:#?}");
    assert_eq!(catalog(&mut c), fresh);
    wait_until("the reaper to serve the updated database", PATIENCE, || cluster.log().contains("jobq reaper: serving database \"up\""));

    // PUBLIC gets nothing now.
    admin.batch_execute("CREATE ROLE upgrade_nobody LOGIN").unwrap();
    let mut nobody = cluster.connect_as("up", "upgrade_nobody");
    assert_eq!(sqlstate(&nobody.query_one("SELECT jobq_enqueue('x')", &[]).unwrap_err()), "42501");
    assert_eq!(sqlstate(&nobody.query("SELECT 1 FROM jobq.jobs", &[]).unwrap_err()), "42501");

    // The live worker carries on: heartbeats (0.1.0's one-argument call), its lock, its job.
    let mut app = cluster.connect_as("up", "upgrade_app");
    app.execute("SELECT jobq_heartbeat($1)", &[&live]).unwrap();
    let other = register(&mut app);
    assert!(!app.query_one("SELECT jobq_acquire_lock('lk', $1)", &[&other]).unwrap().get::<_, bool>(0), "the lock is still held");
    assert_eq!(app.query_one("SELECT jobq_lock_holder('lk')", &[]).unwrap().get::<_, Option<Uuid>>(0), Some(live));
    // Keys: u1 still taken while its job runs; u3's job still waits for the slot.
    assert_eq!(sqlstate(&app.query_one("SELECT jobq_enqueue('work', unique_key => 'u1')", &[]).unwrap_err()), "23505");
    assert_eq!(sqlstate(&app.query_one("SELECT jobq_enqueue('work', unique_key => 'u3', unique_strategy => 'until_executing')", &[]).unwrap_err()), "23505");
    assert_eq!(checkout(&mut app, other, "work"), None, "the concurrency slot is still held");
    assert!(app.query_one("SELECT jobq_complete($1, $2)", &[&keyed, &live]).unwrap().get::<_, bool>(0), "the job in flight completes");
    assert_eq!(checkout(&mut app, other, "work"), Some(behind), "its slot went to the job behind it");
    // The waiting jobs come out in order; the paused queue stays paused until resumed.
    assert_eq!(checkout(&mut app, other, "due"), Some(due));
    assert_eq!(checkout(&mut app, other, "due"), None, "the scheduled one is not due");
    assert_eq!(checkout(&mut app, other, "paused"), None);
    c.batch_execute("SELECT jobq_resume('paused')").unwrap();
    assert_eq!(checkout(&mut app, other, "paused"), Some(paused));
    let state: String = c.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&later]).unwrap().get(0);
    assert_eq!(state, "ready");
    // The dead worker's job: the background worker requeues it, and its key moves on with it.
    c.execute("UPDATE jobq.workers SET heartbeat_at = now() - interval '2 hours' WHERE id = $1", &[&doomed]).unwrap();
    wait_until("the background worker to requeue the dead worker's job", PATIENCE, || {
        c.query_one("SELECT state = 'ready' AND interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[&orphan]).unwrap().get(0)
    });
    assert_eq!(checkout(&mut app, other, "orphans"), Some(orphan));
    // No id is reused.
    let next = q(&mut app, "SELECT jobq_enqueue('after')");
    assert!(next > last_id, "{next} > {last_id}");
    assert_job_tables_consistent(&mut c);
}

#[test]
fn an_upgrade_from_0_2_0_keeps_everything_and_behaves_as_the_new_version() {
    upgrade_keeps_everything("upgrade2", "0.2.0");
}

#[test]
fn an_upgrade_from_0_3_0_keeps_everything_and_behaves_as_the_new_version() {
    upgrade_keeps_everything("upgrade3", "0.3.0");
}

#[test]
fn an_upgrade_from_0_4_0_keeps_everything_and_behaves_as_the_new_version() {
    upgrade_keeps_everything("upgrade4", "0.4.0");
}

/// A database at `version` (0.2.0 or later: its roles and grants are the current ones) with
/// jobs in every state, updated under the new library.
fn upgrade_keeps_everything(name: &str, version: &str) {
    let cluster = cluster_with_old_database(name, version);
    let mut admin = cluster.connect("postgres");
    let mut c = cluster.connect("up");

    admin.batch_execute(&format!("CREATE ROLE {name}_app LOGIN; GRANT jobq_worker TO {name}_app")).unwrap();
    let mut app = cluster.connect_as("up", &format!("{name}_app"));
    let w = register(&mut app);
    let q = |c: &mut Client, sql: &str| -> i64 { c.query_one(sql, &[]).unwrap().get(0) };
    // Executing with a unique key and a concurrency key; waiting behind its slot; waiting and
    // scheduled; finished.
    let keyed = q(&mut app, "SELECT jobq_enqueue('work', '{\"n\": 1}', concurrency_key => 'ck', unique_key => 'u1')");
    assert_eq!(checkout(&mut app, w, "work"), Some(keyed));
    let behind = q(&mut app, "SELECT jobq_enqueue('work', '{\"n\": 2}', concurrency_key => 'ck')");
    let due = q(&mut app, "SELECT jobq_enqueue('due', priority => 3)");
    let later = q(&mut app, "SELECT jobq_enqueue('due', run_at => now() + interval '1 hour')");
    let done = q(&mut app, "SELECT jobq_enqueue('done')");
    assert_eq!(checkout(&mut app, w, "done"), Some(done));
    assert!(app.query_one("SELECT jobq_complete($1, $2)", &[&done, &w]).unwrap().get::<_, bool>(0));
    let before = contents(&mut c);
    let last_id = q(&mut c, "SELECT last_value FROM jobq.jobs_id_seq");

    c.batch_execute("ALTER EXTENSION jobq UPDATE").unwrap();
    let version: String = c.query_one("SELECT extversion FROM pg_extension WHERE extname = 'jobq'", &[]).unwrap().get(0);
    assert_eq!(version, VERSION);
    assert_eq!(contents(&mut c), before);
    upgraded_jobs_have_no_workflow(&mut c);
    assert_job_tables_consistent(&mut c);
    let fresh = catalog(&mut cluster.connect("fresh"));
    assert!(fresh.iter().any(|x| x.starts_with("fn jobq._enqueue(")) && fresh.len() > 150, "{fresh:#?}");
    assert_eq!(catalog(&mut c), fresh);
    wait_until("the reaper to serve the updated database", PATIENCE, || cluster.log().contains("jobq reaper: serving database \"up\""));

    // The new enqueue on the upgraded rows: the key still held, the slot still taken, ids go on.
    let mut app = cluster.connect_as("up", &format!("{name}_app"));
    let e = app.query_one("SELECT jobq_enqueue('work', unique_key => 'u1')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "23505");
    assert!(e.as_db_error().unwrap().detail().unwrap().contains(&format!("existing job id: {keyed}")), "{e:?}");
    let next = q(&mut app, "SELECT jobq_enqueue('after')");
    assert!(next > last_id, "{next} > {last_id}");
    assert_eq!(checkout(&mut app, w, "work"), None, "the concurrency slot is still held");
    assert!(app.query_one("SELECT jobq_complete($1, $2)", &[&keyed, &w]).unwrap().get::<_, bool>(0));
    assert_eq!(checkout(&mut app, w, "work"), Some(behind));
    assert_eq!(checkout(&mut app, w, "due"), Some(due));
    assert_eq!(checkout(&mut app, w, "due"), None, "the scheduled one is not due");
    assert_eq!(checkout(&mut app, w, "after"), Some(next));
    let state: String = c.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&later]).unwrap().get(0);
    assert_eq!(state, "ready");
    // u1 is free again: enqueued through the new path.
    let again = q(&mut app, "SELECT jobq_enqueue('work', unique_key => 'u1')");
    assert!(again > next);
    assert_job_tables_consistent(&mut c);
}
