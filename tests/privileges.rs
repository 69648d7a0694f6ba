//! Privileges (the contract, section Privileges), over real connections as real login roles: PUBLIC
//! gets nothing; the four roles jobq_reader < jobq_producer < jobq_worker < jobq_admin get
//! exactly their column of the contract's table; a worker belongs to the role that registered it;
//! pg_dump / pg_restore keep the queue.
mod common;

use common::*;
use postgres::Client;
use std::collections::BTreeSet;
use uuid::Uuid;

/// A new login role for this test, granted `roles` (cluster-wide, so named after the database).
fn login_role(admin: &mut Client, db: &str, name: &str, roles: &[&str]) -> String {
    let role = format!("{db}_{name}");
    admin.batch_execute(&format!("CREATE ROLE {role} LOGIN")).unwrap();
    for r in roles {
        admin.batch_execute(&format!("GRANT {r} TO {role}")).unwrap();
    }
    role
}

/// Everything jobq keeps, as text: what "changes nothing" is checked against.
fn fingerprint(c: &mut Client) -> String {
    c.query_one(
        "SELECT concat_ws(' | ',
            (SELECT string_agg(row_to_json(j)::text, ',' ORDER BY id) FROM jobq.jobs j),
            (SELECT string_agg(row_to_json(w)::text, ',' ORDER BY id) FROM jobq.workers w),
            (SELECT string_agg(row_to_json(l)::text, ',' ORDER BY key) FROM jobq.locks l),
            (SELECT string_agg(row_to_json(s)::text, ',' ORDER BY ns, key, slot) FROM jobq.slots s),
            (SELECT string_agg(row_to_json(p)::text, ',' ORDER BY queue, kind) FROM jobq.pauses p),
            (SELECT last_value::text || is_called::text FROM jobq.jobs_id_seq))",
        &[],
    )
    .unwrap()
    .get(0)
}

/// Every function of the extension, as a call with typed NULL arguments (an aggregate in
/// the select list). The arguments are
/// subqueries so that the planner cannot fold a strict function's call away before the
/// executor checks the EXECUTE privilege.
fn every_function_call(c: &mut Client) -> Vec<String> {
    c.query(
        "SELECT format(CASE WHEN p.prokind = 'a' THEN 'SELECT %I.%I(%s)' ELSE 'SELECT * FROM %I.%I(%s)' END, n.nspname, p.proname,
                       (SELECT coalesce(string_agg(format('(SELECT NULL::%s)', format_type(t, NULL)), ', ' ORDER BY i), '')
                          FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, i)))
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'jobq' OR p.proname LIKE 'jobq\\_%'
          ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Every table, view and sequence of schema jobq.
fn every_relation(c: &mut Client) -> Vec<String> {
    c.query(
        "SELECT format('jobq.%I', relname) FROM pg_class
          WHERE relnamespace = 'jobq'::regnamespace AND relkind IN ('r', 'v', 'S', 'm', 'p') ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn refused(c: &mut Client, sql: &str) {
    let e = c.query(sql, &[]).expect_err(sql);
    assert_eq!(sqlstate(&e), "42501", "{sql}: {e:?}");
}

#[test]
fn a_role_granted_nothing_is_refused_everything() {
    let (cluster, db, mut su) = db();
    let w = register(&mut su);
    let job: i64 = su.query_one("SELECT jobq_enqueue('q', '{\"secret\": 1}')", &[]).unwrap().get(0);
    let mallory = login_role(&mut su, &db, "mallory", &[]);
    let before = fingerprint(&mut su);
    let mut m = cluster.connect_as(&db, &mallory);

    let calls = every_function_call(&mut su);
    assert!(calls.len() >= 16 + 10, "the extension's functions, internal helpers included: {calls:?}");
    for sql in &calls {
        refused(&mut m, sql);
    }
    // The same calls with real arguments, as a hostile role would make them.
    for sql in [
        "SELECT jobq_register_worker()".to_string(),
        format!("SELECT * FROM jobq_checkout('{w}', NULL, 1000)"),
        format!("SELECT * FROM jobq_checkout('{w}', NULL, 1, '10 s')"),
        format!("SELECT jobq_unregister_worker('{w}')"),
        format!("SELECT jobq_heartbeat('{w}')"),
        format!("SELECT jobq_cancel({job})"),
        format!("SELECT jobq_retry({job})"),
        "SELECT jobq_pause(NULL, 'k')".to_string(),
        "SELECT jobq_enqueue('q')".to_string(),
        "SELECT * FROM jobq_reap()".to_string(),
        "SELECT jobq_schedule('s', '* * * * *', 'q')".to_string(),
        "SELECT jobq_unschedule('s')".to_string(),
        "SELECT jobq_set_rate_limit('k', 1, '1 s')".to_string(),
        "SELECT jobq_set_fairness_weight('q', 'k', 2)".to_string(),
        "SELECT * FROM jobq.throughput(now() - interval '1 hour')".to_string(),
    ] {
        refused(&mut m, &sql);
    }
    let relations = every_relation(&mut su);
    for want in ["jobq.jobs", "jobq.live_jobs", "jobq.finished_jobs", "jobq.workers", "jobq.locks", "jobq.queue_stats", "jobq.slots", "jobq.pauses", "jobq.jobs_id_seq", "jobq.schedules", "jobq.crontab", "jobq.rate_limits", "jobq.rate_slots"] {
        assert!(relations.contains(&want.to_string()), "{want} in {relations:?}");
    }
    for rel in &relations {
        refused(&mut m, &format!("SELECT * FROM {rel}"));
    }
    refused(&mut m, "SELECT payload FROM jobq.jobs");
    refused(&mut m, "SELECT nextval('jobq.jobs_id_seq')");
    refused(&mut m, "UPDATE jobq.live_jobs SET state = 'completed'");
    refused(&mut m, "DELETE FROM jobq.workers");
    assert_eq!(fingerprint(&mut su), before, "nothing changed");
}

/// the contract's table: the jobq_* functions each role may execute, and the relations it may read.
const READER_RELATIONS: &[&str] = &[
    "jobq.blocked",
    "jobq.concurrency_slots",
    "jobq.edges",
    "jobq.events",
    "jobq.finished_jobs",
    "jobq.health",
    "jobq.jobs",
    "jobq.live_jobs",
    "jobq.locks",
    "jobq.pauses",
    "jobq.queue_depths",
    "jobq.queue_minutes",
    "jobq.queue_stats",
    "jobq.queue_totals",
    "jobq.rate_windows",
    "jobq.schedules",
    "jobq.table_stats",
    "jobq.workers",
];
/// The read-only internal helpers jobq.health calls (a view's functions run as its reader), and
/// the dashboard's counters: jobq.throughput and its histogram functions (src/sql/counters.sql).
const READER_FUNCTIONS: &[&str] = &[
    // What the views and policies call to show a limited role its queues only (src/sql/grants.sql).
    "_patterns",
    "_sees",
    "_sees_job",
    "_histogram_add",
    "_last_pass",
    "_oldest_horizon",
    "histogram_bounds",
    "histogram_quantile",
    "histogram_sum",
    "jobq_results",
    "jobq_version",
    "throughput",
];
/// The SQL edition's own rows of the table: jobq.health's last pass is a table there
/// (src/sql/twins/health.sql), and pg_cron's passes are jobq_admin's (src/sql/twins/edition.sql).
const SQL_EDITION_READER_RELATIONS: &[&str] = &["jobq.last_pass"];
const SQL_EDITION_ADMIN_FUNCTIONS: &[&str] = &["jobq_schedule_passes", "jobq_unschedule_passes"];
const PRODUCER_FUNCTIONS: &[&str] = &["jobq_cancel", "jobq_emit_event", "jobq_enqueue", "jobq_enqueue_batch", "jobq_enqueue_graph", "jobq_retry"];
const WORKER_FUNCTIONS: &[&str] = &[
    "_register_worker", // jobq_proxy's registration: one worker id on every node
    "jobq_acquire_lock",
    "jobq_await_event",
    "jobq_await_jobs",
    "jobq_checkout",
    "jobq_checkpoint",
    "jobq_complete",
    "jobq_complete_and_checkout",
    "jobq_complete_many",
    "jobq_fail",
    "jobq_fail_and_checkout",
    "jobq_fail_many",
    "jobq_heartbeat",
    "jobq_lock_holder",
    "jobq_register_worker",
    "jobq_release_lock",
    "jobq_snooze",
    "jobq_stop_checkouts",
    "jobq_unregister_worker",
];
const ADMIN_FUNCTIONS: &[&str] = &[
    "jobq_grant_queues",
    "jobq_pause",
    "jobq_reap",
    "jobq_resume",
    "jobq_revoke_queues",
    "jobq_schedule",
    "jobq_set_fairness_weight",
    "jobq_set_node",
    "jobq_set_rate_limit",
    "jobq_unschedule",
];

fn set(items: &[&[&str]]) -> BTreeSet<String> {
    items.iter().flat_map(|s| s.iter().map(|x| x.to_string())).collect()
}

#[test]
fn each_role_has_exactly_its_column_of_the_table() {
    let (_, _, mut su) = db();
    let granted = |su: &mut Client, role: &str| -> (BTreeSet<String>, BTreeSet<String>) {
        let functions = su
            .query(
                "SELECT DISTINCT p.proname::text FROM pg_proc p
                  WHERE (p.pronamespace = 'jobq'::regnamespace OR p.proname LIKE 'jobq\\_%')
                    AND has_function_privilege($1, p.oid, 'EXECUTE')",
                &[&role],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let relations = su
            .query(
                "SELECT format('jobq.%I', relname) FROM pg_class
                  WHERE relnamespace = 'jobq'::regnamespace AND relkind IN ('r', 'v', 'S')
                    AND (has_table_privilege($1, oid, 'SELECT') OR has_table_privilege($1, oid, 'INSERT')
                         OR has_table_privilege($1, oid, 'UPDATE') OR has_table_privilege($1, oid, 'DELETE'))",
                &[&role],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        (functions, relations)
    };
    let all_tables: BTreeSet<String> = su
        .query("SELECT format('jobq.%I', relname) FROM pg_class WHERE relnamespace = 'jobq'::regnamespace AND relkind IN ('r', 'v')", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let (edition_reads, edition_admin): (&[&str], &[&str]) =
        if sql_edition().is_some() { (SQL_EDITION_READER_RELATIONS, SQL_EDITION_ADMIN_FUNCTIONS) } else { (&[], &[]) };
    let reads = set(&[READER_RELATIONS, edition_reads]);
    let cases: [(&str, BTreeSet<String>, BTreeSet<String>); 4] = [
        ("jobq_reader", set(&[READER_FUNCTIONS]), reads.clone()),
        ("jobq_producer", set(&[READER_FUNCTIONS, PRODUCER_FUNCTIONS]), reads.clone()),
        ("jobq_worker", set(&[READER_FUNCTIONS, PRODUCER_FUNCTIONS, WORKER_FUNCTIONS]), reads),
        ("jobq_admin", set(&[READER_FUNCTIONS, PRODUCER_FUNCTIONS, WORKER_FUNCTIONS, ADMIN_FUNCTIONS, edition_admin]), all_tables),
    ];
    for (role, functions, relations) in cases {
        let (f, r) = granted(&mut su, role);
        assert_eq!(f, functions, "functions {role} may execute");
        assert_eq!(r, relations, "relations {role} may read (and none it may write)");
        let login: bool = su.query_one("SELECT rolcanlogin FROM pg_roles WHERE rolname = $1", &[&role]).unwrap().get(0);
        assert!(!login, "{role} is NOLOGIN");
    }
}

#[test]
fn each_role_can_do_its_calls_and_is_refused_the_others() {
    let (cluster, db, mut su) = db();
    let reader = login_role(&mut su, &db, "reader", &["jobq_reader"]);
    let producer = login_role(&mut su, &db, "producer", &["jobq_producer"]);
    let worker = login_role(&mut su, &db, "worker", &["jobq_worker"]);
    let admin = login_role(&mut su, &db, "admin", &["jobq_admin"]);

    let mut r = cluster.connect_as(&db, &reader);
    for rel in READER_RELATIONS {
        r.query(&format!("SELECT * FROM {rel}"), &[]).unwrap();
    }
    refused(&mut r, "SELECT * FROM jobq.slots");
    refused(&mut r, "SELECT jobq_enqueue('q')");
    refused(&mut r, "SELECT jobq_register_worker()");
    refused(&mut r, "SELECT jobq_emit_event('e')");
    refused(&mut r, "SELECT jobq_enqueue_graph('[]')");
    assert!(r.query("SELECT * FROM jobq_results(ARRAY[1::bigint])", &[]).unwrap().is_empty());

    let mut p = cluster.connect_as(&db, &producer);
    let a: i64 = p.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    let b: i64 = p.query_one("SELECT jobq_enqueue_batch('q', ARRAY['{}'::jsonb])", &[]).unwrap().get(0);
    assert_eq!(p.query_one("SELECT jobq_cancel($1)", &[&b]).unwrap().get::<_, String>(0), "cancelled");
    assert!(p.query_one("SELECT jobq_retry($1)", &[&b]).unwrap().get::<_, bool>(0));
    p.query("SELECT * FROM jobq.queue_stats", &[]).unwrap();
    refused(&mut p, "SELECT jobq_register_worker()");
    refused(&mut p, "SELECT jobq._register_worker(gen_random_uuid(), 'w', '{}', false)");
    refused(&mut p, "SELECT jobq_pause('q')");
    assert_eq!(p.query_one("SELECT jobq_emit_event('ev')", &[]).unwrap().get::<_, i32>(0), 0);
    for call in [
        "SELECT jobq_checkpoint(1, gen_random_uuid(), 's', '1')",
        "SELECT jobq_snooze(1, gen_random_uuid(), now())",
        "SELECT jobq_await_jobs(1, gen_random_uuid(), '{}')",
        "SELECT jobq_await_event(1, gen_random_uuid(), 'ev')",
    ] {
        refused(&mut p, call);
    }
    refused(&mut p, "SELECT * FROM jobq_reap()");
    refused(&mut p, "SELECT jobq_schedule('s', '* * * * *', 'q')");
    refused(&mut p, "SELECT jobq_set_rate_limit('k', 1, '1 s')");
    refused(&mut p, "SELECT jobq_set_fairness_weight('q', 'k', 2)");
    refused(&mut p, "INSERT INTO jobq.live_jobs (queue, payload, priority, run_at, enqueued_at, state, max_attempts) VALUES ('q', '{}', 0, now(), now(), 'ready', 1)");

    let mut w = cluster.connect_as(&db, &worker);
    // The proxy's form: the id given, the worker owned by the caller; an id taken is refused.
    let chosen = Uuid::new_v4();
    let given: Uuid = w.query_one("SELECT jobq._register_worker($1, 'w', '{}', false)", &[&chosen]).unwrap().get(0);
    assert_eq!(given, chosen);
    let owner: String = su.query_one("SELECT owner::regrole::text FROM jobq.workers WHERE id = $1", &[&chosen]).unwrap().get(0);
    assert_eq!(owner, worker);
    let e = w.query_one("SELECT jobq._register_worker($1, 'w', '{}', false)", &[&chosen]).unwrap_err();
    assert_eq!(sqlstate(&e), "23505");
    w.query_one("SELECT jobq_unregister_worker($1)", &[&chosen]).unwrap();
    let me: Uuid = w.query_one("SELECT jobq_register_worker('w')", &[]).unwrap().get(0);
    let got: Vec<i64> = w.query("SELECT id FROM jobq_checkout($1, NULL, 2)", &[&me]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(got, vec![a, b]);
    let hb: Vec<i64> = w.query_one("SELECT jobq_heartbeat($1, $2)", &[&me, &vec![a, b]]).unwrap().get(0);
    assert!(hb.is_empty());
    assert!(w.query_one("SELECT jobq_acquire_lock('L', $1)", &[&me]).unwrap().get::<_, bool>(0));
    assert_eq!(w.query_one("SELECT jobq_lock_holder('L')", &[]).unwrap().get::<_, Option<Uuid>>(0), Some(me));
    assert!(w.query_one("SELECT jobq_release_lock('L', $1)", &[&me]).unwrap().get::<_, bool>(0));
    assert!(w.query_one("SELECT jobq_complete($1, $2)", &[&a, &me]).unwrap().get::<_, bool>(0));
    assert_eq!(w.query_one("SELECT jobq_fail($1, $2, discard => true)", &[&b, &me]).unwrap().get::<_, String>(0), "dead");
    let follow_up: i64 = w.query_one("SELECT jobq_enqueue('next')", &[]).unwrap().get(0);
    assert!(follow_up > b);
    assert_eq!(w.query_one("SELECT jobq_unregister_worker($1)", &[&me]).unwrap().get::<_, i32>(0), 0);
    refused(&mut w, "SELECT jobq_pause('q')");
    refused(&mut w, "SELECT jobq_resume('q')");
    refused(&mut w, "SELECT * FROM jobq_reap()");
    refused(&mut w, "SELECT jobq_schedule('s', '* * * * *', 'q')");
    refused(&mut w, "SELECT jobq_unschedule('s')");
    refused(&mut w, "SELECT jobq_set_rate_limit('k', 1, '1 s')");
    refused(&mut w, "SELECT jobq_set_fairness_weight('q', 'k', 2)");
    refused(&mut w, "SELECT * FROM jobq.fairness");
    refused(&mut w, "SELECT * FROM jobq.fairness_keys");
    refused(&mut w, "SELECT jobq_set_node(1)");
    refused(&mut w, "SELECT * FROM jobq.crontab");
    refused(&mut w, "SELECT * FROM jobq.rate_limits");
    refused(&mut w, "SELECT * FROM jobq.slots");
    w.query("SELECT * FROM jobq.pauses", &[]).unwrap(); // what is paused: a reader's

    let mut ad = cluster.connect_as(&db, &admin);
    ad.execute("SELECT jobq_pause('q')", &[]).unwrap();
    ad.query("SELECT * FROM jobq.pauses", &[]).unwrap();
    ad.execute("SELECT jobq_resume('q')", &[]).unwrap();
    ad.query("SELECT * FROM jobq_reap()", &[]).unwrap();
    ad.query("SELECT * FROM jobq.slots", &[]).unwrap();
    ad.execute("SELECT jobq_schedule('nightly', '0 3 * * *', 'q', time_zone => 'Europe/Paris')", &[]).unwrap();
    ad.execute("SELECT jobq_set_rate_limit('api', 10, '1 minute')", &[]).unwrap();
    ad.query("SELECT * FROM jobq.rate_limits", &[]).unwrap();
    ad.execute("SELECT jobq_set_fairness_weight('q', 'k', 2)", &[]).unwrap();
    ad.query("SELECT * FROM jobq.fairness", &[]).unwrap();
    ad.query("SELECT * FROM jobq.fairness_keys", &[]).unwrap();
    // The admin may call jobq_set_node; this node has made jobs, so it says 55000, not 42501.
    assert_eq!(sqlstate(&ad.execute("SELECT jobq_set_node(1)", &[]).unwrap_err()), "55000");
    let seen: i64 = r.query_one("SELECT count(*) FROM jobq.schedules WHERE name = 'nightly'", &[]).unwrap().get(0);
    assert_eq!(seen, 1, "jobq_reader sees the schedules");
    refused(&mut r, "SELECT * FROM jobq.crontab");
    refused(&mut r, "SELECT jobq_unschedule('nightly')");
    assert!(ad.query_one("SELECT jobq_unschedule('nightly')", &[]).unwrap().get::<_, bool>(0));
    // An admin does not get to write the tables either: every write goes through a function.
    refused(&mut ad, "DELETE FROM jobq.live_jobs");
    refused(&mut ad, "DELETE FROM jobq.finished_jobs");
}

#[test]
fn a_worker_belongs_to_the_role_that_registered_it() {
    let (cluster, db, mut su) = db();
    let role_a = login_role(&mut su, &db, "a", &["jobq_worker"]);
    let role_b = login_role(&mut su, &db, "b", &["jobq_worker"]);
    let role_admin = login_role(&mut su, &db, "admin", &["jobq_admin"]);
    let mut a = cluster.connect_as(&db, &role_a);
    let mut b = cluster.connect_as(&db, &role_b);
    let mut admin = cluster.connect_as(&db, &role_admin);

    let wa: Uuid = a.query_one("SELECT jobq_register_worker('a')", &[]).unwrap().get(0);
    let owner: String = su.query_one("SELECT owner::text FROM jobq.workers WHERE id = $1", &[&wa]).unwrap().get(0);
    assert_eq!(owner, role_a);
    let j1: i64 = a.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    let j2: i64 = a.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    assert_eq!(a.query_one("SELECT id FROM jobq_checkout($1)", &[&wa]).unwrap().get::<_, i64>(0), j1);
    assert!(a.query_one("SELECT jobq_acquire_lock('ka', $1)", &[&wa]).unwrap().get::<_, bool>(0));

    // Role b knows a's worker id (jobq_reader can read it) and still can do nothing with it.
    let wb: Uuid = b.query_one("SELECT jobq_register_worker('b')", &[]).unwrap().get(0);
    let before = fingerprint(&mut su);
    for sql in [
        format!("SELECT jobq_heartbeat('{wa}')"),
        format!("SELECT jobq_heartbeat('{wa}', '{{}}')"),
        format!("SELECT * FROM jobq_checkout('{wa}', NULL, 10)"),
        format!("SELECT * FROM jobq_checkout('{wa}', ARRAY['q'])"),
        // Refused before it waits: a foreign worker's call never sleeps.
        format!("SELECT * FROM jobq_checkout('{wa}', ARRAY['q'], 1, '10 s')"),
        format!("SELECT jobq_unregister_worker('{wa}')"),
        format!("SELECT jobq_stop_checkouts('{wa}')"),
        format!("SELECT jobq_complete({j1}, '{wa}')"),
        format!("SELECT jobq_fail({j1}, '{wa}')"),
        format!("SELECT jobq_complete_many('{wa}', ARRAY[{j1}])"),
        format!("SELECT jobq_complete_many('{wa}', '{{}}')"),
        format!("SELECT jobq_fail_many('{wa}', ARRAY[{j1}])"),
        format!("SELECT * FROM jobq_complete_and_checkout('{wa}', ARRAY[{j1}])"),
        format!("SELECT * FROM jobq_complete_and_checkout('{wa}', '{{}}', queues => ARRAY['q'])"),
        format!("SELECT * FROM jobq_fail_and_checkout('{wa}', ARRAY[{j1}])"),
        format!("SELECT jobq_acquire_lock('kb', '{wa}')"),
        format!("SELECT jobq_release_lock('ka', '{wa}')"),
    ] {
        refused(&mut b, &sql);
        // Also as the second statement of a transaction, so no cached check can be reused.
        let mut tx = b.transaction().unwrap();
        tx.query("SELECT jobq_heartbeat($1)", &[&wb]).unwrap();
        let e = tx.query(sql.as_str(), &[]).expect_err(&sql);
        assert_eq!(sqlstate(&e), "42501", "{sql}");
    }
    // With its own worker, b cannot finish a's job either (fencing, not a privilege error).
    assert!(!b.query_one("SELECT jobq_complete($1, $2)", &[&j1, &wb]).unwrap().get::<_, bool>(0));
    assert_eq!(fingerprint(&mut su), before, "b changed nothing of a's");

    // SET ROLE decides whose worker a session registers: the superuser acting as role a.
    su.batch_execute(&format!("SET ROLE {role_a}")).unwrap();
    let wa2: Uuid = su.query_one("SELECT jobq_register_worker('a2')", &[]).unwrap().get(0);
    su.batch_execute("RESET ROLE").unwrap();
    let owner: String = su.query_one("SELECT owner::text FROM jobq.workers WHERE id = $1", &[&wa2]).unwrap().get(0);
    assert_eq!(owner, role_a);
    refused(&mut b, &format!("SELECT jobq_heartbeat('{wa2}')"));
    a.query_one("SELECT jobq_heartbeat($1)", &[&wa2]).unwrap();

    // An admin may act for any worker.
    assert_eq!(admin.query_one("SELECT jobq_heartbeat($1)", &[&wa]).unwrap().get::<_, Vec<i64>>(0), Vec::<i64>::new());
    assert!(admin.query_one("SELECT jobq_complete($1, $2)", &[&j1, &wa]).unwrap().get::<_, bool>(0));
    assert_eq!(admin.query_one("SELECT id FROM jobq_checkout($1)", &[&wa]).unwrap().get::<_, i64>(0), j2);
    assert!(admin.query_one("SELECT jobq_acquire_lock('kb', $1)", &[&wa]).unwrap().get::<_, bool>(0));
    assert!(admin.query_one("SELECT jobq_release_lock('ka', $1)", &[&wa]).unwrap().get::<_, bool>(0));
    assert_eq!(admin.query_one("SELECT jobq_fail($1, $2, discard => true)", &[&j2, &wa]).unwrap().get::<_, String>(0), "dead");
    assert_eq!(admin.query_one("SELECT jobq_unregister_worker($1)", &[&wa]).unwrap().get::<_, i32>(0), 0);
    // a's worker is gone: a gets JQ001 for it, as for any unregistered worker.
    let e = a.query("SELECT jobq_heartbeat($1)", &[&wa]).unwrap_err();
    assert_eq!(sqlstate(&e), "JQ001");
}

#[test]
fn a_second_database_and_drop_then_create_extension_work() {
    let (cluster, db, mut su) = db();
    // db() created the extension in its own database; the roles existed from other
    // databases' CREATE EXTENSION (tests run in parallel, each in its own database).
    let other = cluster.fresh_db();
    let mut o = cluster.connect(&other);
    let roles: i64 = o
        .query_one("SELECT count(*) FROM pg_roles WHERE rolname IN ('jobq_reader', 'jobq_producer', 'jobq_worker', 'jobq_admin') AND NOT rolcanlogin", &[])
        .unwrap()
        .get(0);
    assert_eq!(roles, 4);
    su.batch_execute("DROP EXTENSION jobq; CREATE EXTENSION jobq;").unwrap();
    // The grants came back with it: a worker role can work, PUBLIC still cannot.
    let app = login_role(&mut su, &db, "app", &["jobq_worker"]);
    let nobody = login_role(&mut su, &db, "nobody", &[]);
    let mut c = cluster.connect_as(&db, &app);
    let w: Uuid = c.query_one("SELECT jobq_register_worker()", &[]).unwrap().get(0);
    let id: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    assert_eq!(c.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().get::<_, i64>(0), id);
    refused(&mut cluster.connect_as(&db, &nobody), "SELECT jobq_enqueue('q')");
}

#[test]
fn pg_dump_and_restore_keep_the_queue() {
    let (cluster, db, mut c) = db();
    let w = register(&mut c);
    let ready: i64 = c.query_one("SELECT jobq_enqueue('q', '{\"n\": 1}', unique_key => 'held-key')", &[]).unwrap().get(0);
    let scheduled: i64 = c.query_one("SELECT jobq_enqueue('q', run_at => now() + interval '1 day')", &[]).unwrap().get(0);
    let running: i64 = c.query_one("SELECT jobq_enqueue('run', concurrency_key => 'ck', concurrency_limit => 2)", &[]).unwrap().get(0);
    assert_eq!(c.query_one("SELECT id FROM jobq_checkout($1, ARRAY['run'])", &[&w]).unwrap().get::<_, i64>(0), running);
    let dead: i64 = c.query_one("SELECT jobq_enqueue('die', max_attempts => 1)", &[]).unwrap().get(0);
    assert_eq!(c.query_one("SELECT id FROM jobq_checkout($1, ARRAY['die'])", &[&w]).unwrap().get::<_, i64>(0), dead);
    assert_eq!(c.query_one("SELECT jobq_fail($1, $2, '{\"e\": 1}')", &[&dead, &w]).unwrap().get::<_, String>(0), "dead");
    let paused: i64 = c.query_one("SELECT jobq_enqueue('paused')", &[]).unwrap().get(0);
    c.execute("SELECT jobq_pause('paused')", &[]).unwrap();
    assert!(c.query_one("SELECT jobq_acquire_lock('held-lock', $1, interval '1 hour')", &[&w]).unwrap().get::<_, bool>(0));
    let max_id: i64 = c.query_one("SELECT max(id) FROM jobq.jobs", &[]).unwrap().get(0);
    let before = fingerprint(&mut c);

    let dump = cluster.scratch_file("dump");
    let dump = dump.to_str().unwrap();
    cluster.run_tool("pg_dump", &["-Fc", "-d", &db, "-f", dump]);
    let restored = format!("{db}_restored");
    cluster.connect("postgres").batch_execute(&format!("CREATE DATABASE {restored}")).unwrap();
    cluster.run_tool("pg_restore", &["--exit-on-error", "-d", &restored, dump]);

    let mut r = cluster.connect(&restored);
    assert_eq!(fingerprint(&mut r), before, "every row and the sequence came back as they were");
    let states: Vec<(i64, String)> =
        r.query("SELECT id, state FROM jobq.jobs ORDER BY id", &[]).unwrap().iter().map(|x| (x.get(0), x.get(1))).collect();
    assert_eq!(
        states,
        vec![
            (ready, "ready".into()),
            (scheduled, "ready".into()),
            (running, "executing".into()),
            (dead, "dead".into()),
            (paused, "ready".into())
        ]
    );
    // Ids continue; keys, locks and pauses still hold; the executing job's worker finishes it.
    let next: i64 = r.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    assert!(next > max_id, "id {next} continues after {max_id}");
    let e = r.query("SELECT jobq_enqueue('q', unique_key => 'held-key')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "23505", "the unique key is still held");
    let e = r.query("SELECT jobq_enqueue('q', unique_key => 'held-lock')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "23505", "the lock still holds its key");
    let other = register(&mut r);
    assert!(!r.query_one("SELECT jobq_acquire_lock('held-lock', $1)", &[&other]).unwrap().get::<_, bool>(0));
    let got: Vec<i64> = r.query("SELECT id FROM jobq_checkout($1, NULL, 10)", &[&other]).unwrap().iter().map(|x| x.get(0)).collect();
    assert_eq!(got, vec![ready, next], "not the scheduled job, not the paused queue's");
    assert!(r.query_one("SELECT jobq_complete($1, $2)", &[&running, &w]).unwrap().get::<_, bool>(0));
    let slots: i64 = r.query_one("SELECT count(*) FROM jobq.slots WHERE key = 'ck'", &[]).unwrap().get(0);
    assert_eq!(slots, 0, "the concurrency slot was released");
    let _ = std::fs::remove_file(dump);
}
