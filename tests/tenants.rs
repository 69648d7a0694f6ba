//! Queues granted per role (the contract, "Tenants"), over real connections as real login roles:
//! jobq_grant_queues / jobq_revoke_queues check their arguments and are jobq_admin's; a role
//! limited to some queues is refused (42501, nothing changed) every call of the Privileges
//! table that names or touches another queue's jobs, locks or events, and reads only its
//! queues' rows in every view and table it may read; roles without grants, members of a limited
//! role and jobq_admin members are not limited; many tenants checking out of one backlog at
//! once each get their own jobs, each job once; the same through PgBouncer in transaction mode.
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

fn grant(su: &mut Client, role: &str, privilege: &str, queues: &[&str]) {
    su.execute("SELECT jobq_grant_queues($1::text::regrole, $2, $3)", &[&role, &privilege, &queues]).unwrap();
}

fn refused(c: &mut Client, sql: &str) {
    let e = c.query(sql, &[]).expect_err(sql);
    assert_eq!(sqlstate(&e), "42501", "{sql}: {e:?}");
}

fn ids(c: &mut Client, sql: &str) -> Vec<i64> {
    c.query(sql, &[]).unwrap().iter().map(|r| r.get(0)).collect()
}

fn texts(c: &mut Client, sql: &str) -> BTreeSet<String> {
    c.query(sql, &[]).unwrap().iter().map(|r| r.get(0)).collect()
}

fn enqueue(c: &mut Client, queue: &str) -> i64 {
    c.query_one("SELECT jobq_enqueue($1)", &[&queue]).unwrap().get(0)
}

/// Everything jobq keeps, read as the superuser: what "changes nothing" is checked against.
fn fingerprint(c: &mut Client) -> String {
    c.query_one(
        "SELECT concat_ws(' | ',
            (SELECT string_agg(row_to_json(j)::text, ',' ORDER BY id) FROM jobq.jobs j),
            (SELECT string_agg(row_to_json(w)::text, ',' ORDER BY id) FROM jobq.workers w),
            (SELECT string_agg(row_to_json(l)::text, ',' ORDER BY key) FROM jobq.locks l),
            (SELECT string_agg(row_to_json(s)::text, ',' ORDER BY ns, key, slot) FROM jobq.slots s),
            (SELECT string_agg(row_to_json(e)::text, ',' ORDER BY name) FROM jobq.event_log e),
            (SELECT string_agg(row_to_json(g)::text, ',' ORDER BY role, privilege, pattern) FROM jobq.queue_grants g),
            (SELECT last_value::text || is_called::text FROM jobq.jobs_id_seq))",
        &[],
    )
    .unwrap()
    .get(0)
}

#[test]
fn grants_are_checked_and_are_jobq_admins() {
    let (cluster, db, mut su) = db();
    let t = login_role(&mut su, &db, "t", &["jobq_worker"]);
    let admin = login_role(&mut su, &db, "admin", &["jobq_admin"]);
    let before = fingerprint(&mut su);
    let mut a = cluster.connect_as(&db, &admin);
    for (sql, state) in [
        (format!("SELECT jobq_grant_queues('{t}', 'owner', '{{q}}')"), "22023"),
        (format!("SELECT jobq_grant_queues('{t}', NULL, '{{q}}')"), "22004"),
        (format!("SELECT jobq_grant_queues('{t}', 'worker', NULL)"), "22004"),
        (format!("SELECT jobq_grant_queues('{t}', 'worker', ARRAY['q', NULL])"), "22004"),
        ("SELECT jobq_grant_queues(NULL, 'worker', '{q}')".to_string(), "22004"),
        (format!("SELECT jobq_grant_queues('{t}', 'worker', '{{\"\"}}')"), "22023"),
        (format!("SELECT jobq_grant_queues('{t}', 'worker', '{{a*b}}')"), "22023"),
        (format!("SELECT jobq_grant_queues('{t}', 'worker', '{{{{a,b}},{{c,d}}}}')"), "22023"),
        (format!("SELECT jobq_grant_queues('{t}', 'worker', ARRAY[repeat('x', 1001)])"), "22023"),
        (format!("SELECT jobq_grant_queues('{t}', 'worker', ARRAY(SELECT 'q' || i FROM generate_series(1, 1001) i))"), "22023"),
        (format!("SELECT jobq_revoke_queues('{t}', 'admin', '{{q}}')"), "22023"),
        ("SELECT jobq_grant_queues('no_such_role_here', 'worker', '{q}')".to_string(), "42704"),
    ] {
        let e = a.execute(&sql, &[]).expect_err(&sql);
        assert_eq!(sqlstate(&e), state, "{sql}: {e:?}");
    }
    // A role below jobq_admin may neither grant nor revoke, not even to itself.
    let mut w = cluster.connect_as(&db, &t);
    refused(&mut w, &format!("SELECT jobq_grant_queues('{t}', 'worker', '{{q}}')"));
    refused(&mut w, &format!("SELECT jobq_revoke_queues('{t}', 'worker', '{{q}}')"));
    refused(&mut w, "SELECT * FROM jobq.queue_grants");
    assert_eq!(fingerprint(&mut su), before, "nothing changed");

    // 1,000 patterns at once; the same again changes nothing; a revoke takes back exactly its rows.
    a.execute(&format!("SELECT jobq_grant_queues('{t}', 'worker', ARRAY(SELECT 'q' || i FROM generate_series(1, 1000) i))"), &[]).unwrap();
    a.execute(&format!("SELECT jobq_grant_queues('{t}', 'worker', '{{q1, q2}}')"), &[]).unwrap();
    a.execute(&format!("SELECT jobq_grant_queues('{t}', 'reader', '{{q1}}')"), &[]).unwrap();
    let n: i64 = a.query_one("SELECT count(*) FROM jobq.queue_grants WHERE role = $1::text::regrole", &[&t]).unwrap().get(0);
    assert_eq!(n, 1001);
    a.execute(&format!("SELECT jobq_revoke_queues('{t}', 'worker', ARRAY(SELECT 'q' || i FROM generate_series(1, 1000) i))"), &[]).unwrap();
    let left = texts(&mut a, &format!("SELECT privilege || ' ' || pattern FROM jobq.queue_grants WHERE role = '{t}'::regrole"));
    assert_eq!(left, BTreeSet::from(["reader q1".to_string()]));
}

/// What tenant `t1` (a jobq_worker limited to `t1:*` as a worker) is refused, with every
/// argument otherwise valid, and what it may still do.
#[test]
fn a_limited_role_is_refused_every_call_on_another_queue_and_nothing_changes() {
    let (cluster, db, mut su) = db();
    let t1 = login_role(&mut su, &db, "t1", &["jobq_worker"]);
    let mut c = cluster.connect_as(&db, &t1);
    let w = register(&mut c);
    // Before its grant, the role took a job of queue 'legacy' (its worker still runs it).
    let legacy = enqueue(&mut su, "legacy");
    let held: Vec<i64> = ids(&mut c, &format!("SELECT id FROM jobq_checkout('{w}', '{{legacy}}')"));
    assert_eq!(held, vec![legacy]);
    grant(&mut su, &t1, "worker", &["t1:*"]);
    let other = enqueue(&mut su, "other");
    let dead = enqueue(&mut su, "other");
    su.execute("SELECT jobq_cancel($1)", &[&dead]).unwrap();
    let sw = register(&mut su);
    assert!(su.query_one("SELECT jobq_acquire_lock('other-lock', $1)", &[&sw]).unwrap().get::<_, bool>(0));
    su.execute("SELECT jobq_emit_event('other-event', '{\"secret\": 1}')", &[]).unwrap();
    let mine = enqueue(&mut c, "t1:a");
    let before = fingerprint(&mut su);

    for sql in [
        "SELECT jobq_enqueue('other')".to_string(),
        "SELECT jobq_enqueue('t2:a')".to_string(),
        "SELECT jobq_enqueue('t1')".to_string(), // 't1:*' is a prefix: 't1' itself is not covered
        "SELECT jobq_enqueue_batch('other', ARRAY['{}'::jsonb])".to_string(),
        "SELECT * FROM jobq_enqueue_graph('[{\"queue\": \"t1:a\"}, {\"queue\": \"other\", \"after\": [0]}]')".to_string(),
        format!("SELECT jobq_enqueue('t1:a', depends_on => ARRAY[{other}::bigint])"),
        format!("SELECT jobq_cancel({other})"),
        format!("SELECT jobq_retry({dead})"),
        // Another queue's job named by a call that would leave it as it is (waiting, not this
        // worker's): refused all the same, not answered false or NULL.
        format!("SELECT jobq_retry({other})"),
        format!("SELECT jobq_complete({other}, '{w}')"),
        format!("SELECT jobq_fail({other}, '{w}')"),
        format!("SELECT jobq_complete_many('{w}', ARRAY[{other}::bigint])"),
        format!("SELECT jobq_fail_many('{w}', ARRAY[{other}::bigint])"),
        format!("SELECT * FROM jobq_checkout('{w}', '{{other}}')"),
        format!("SELECT * FROM jobq_checkout('{w}', '{{t1:a, other}}', 2)"),
        format!("SELECT * FROM jobq_checkout('{w}', '{{other}}', 1, '1 s')"),
        format!("SELECT * FROM jobq_complete_and_checkout('{w}', '{{}}', NULL, '{{other}}')"),
        format!("SELECT jobq_complete({legacy}, '{w}')"),
        format!("SELECT jobq_fail({legacy}, '{w}')"),
        format!("SELECT jobq_complete_many('{w}', ARRAY[{legacy}::bigint])"),
        format!("SELECT jobq_fail_many('{w}', ARRAY[{legacy}::bigint])"),
        format!("SELECT * FROM jobq_complete_and_checkout('{w}', ARRAY[{legacy}::bigint])"),
        format!("SELECT * FROM jobq_fail_and_checkout('{w}', ARRAY[{legacy}::bigint])"),
        format!("SELECT jobq_checkpoint({legacy}, '{w}', 'step', '1')"),
        format!("SELECT jobq_snooze({legacy}, '{w}', now() + interval '1 hour')"),
        format!("SELECT jobq_await_jobs({legacy}, '{w}', ARRAY[{mine}::bigint])"),
        format!("SELECT jobq_await_event({legacy}, '{w}', 't1:event')"),
        format!("SELECT jobq_acquire_lock('other-lock', '{w}')"),
        format!("SELECT jobq_acquire_lock('free-lock', '{w}')"),
        format!("SELECT jobq_release_lock('other-lock', '{w}')"),
        "SELECT jobq_lock_holder('other-lock')".to_string(),
        "SELECT jobq_emit_event('other-event')".to_string(),
        "SELECT jobq_emit_event('e2')".to_string(),
    ] {
        refused(&mut c, &sql);
    }
    assert_eq!(fingerprint(&mut su), before, "nothing changed");

    // Every call of the privilege table on its own queues, locks and events: as without grants.
    let one = |c: &mut Client, sql: &str| -> String {
        c.query_one(&format!("SELECT ({sql})::text"), &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).get::<_, Option<String>>(0).unwrap_or_default()
    };
    let got = ids(&mut c, &format!("SELECT id FROM jobq_checkout('{w}', NULL, 10)"));
    assert_eq!(got, vec![mine], "a checkout of every queue takes only its queues' jobs");
    assert_eq!(one(&mut c, &format!("jobq_acquire_lock('t1:lock', '{w}')")), "true");
    assert_eq!(one(&mut c, "jobq_lock_holder('t1:lock')"), w.to_string());
    assert_eq!(one(&mut c, &format!("jobq_release_lock('t1:lock', '{w}')")), "true");
    assert_eq!(one(&mut c, "jobq_emit_event('t1:event')"), "0");
    let e = c.query_one("SELECT jobq_await_jobs($1, $2, ARRAY[$1::bigint])", &[&mine, &w]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023", "a job cannot await itself: argument checks come first");
    assert_eq!(one(&mut c, &format!("jobq_checkpoint({mine}, '{w}', 's', '1')")), "true");
    assert_eq!(one(&mut c, &format!("jobq_await_event({mine}, '{w}', 't1:event')")), "emitted");
    assert_eq!(one(&mut c, &format!("jobq_complete({mine}, '{w}')")), "true");
    assert_eq!(one(&mut c, &format!("(SELECT count(*) FROM jobq_results(ARRAY[{mine}::bigint]))")), "1");
    let again = enqueue(&mut c, "t1:b");
    assert_eq!(one(&mut c, &format!("jobq_cancel({again})")), "cancelled");
    assert_eq!(one(&mut c, &format!("jobq_retry({again})")), "true");
    let batch = ids(&mut c, "SELECT jobq_enqueue_batch('t1:c', ARRAY['{}'::jsonb, '{}'])");
    let graph = ids(&mut c, "SELECT jobq_enqueue_graph('[{\"queue\": \"t1:d\"}, {\"queue\": \"t1:d\", \"after\": [0]}]')");
    assert_eq!((batch.len(), graph.len()), (2, 2));
    // Checked out with the one-commit calls, then finished through each of the others.
    let mut held = ids(&mut c, &format!("SELECT id FROM jobq_complete_and_checkout('{w}', '{{}}', NULL, '{{t1:b, t1:c}}', 3)"));
    held.sort();
    assert_eq!(held, vec![again, batch[0], batch[1]]);
    assert_eq!(one(&mut c, &format!("jobq_snooze({again}, '{w}', now())")), "true");
    assert_eq!(one(&mut c, &format!("jobq_await_jobs({}, '{w}', ARRAY[{}::bigint])", batch[0], graph[0])), "waiting");
    assert_eq!(one(&mut c, &format!("jobq_fail({}, '{w}', discard => true)", batch[1])), "dead");
    let next = ids(&mut c, &format!("SELECT id FROM jobq_fail_and_checkout('{w}', '{{}}', NULL, NULL, 5)"));
    assert!(next.contains(&again) && next.contains(&graph[0]), "{next:?}");
    assert_eq!(one(&mut c, &format!("array_length(jobq_complete_many('{w}', ARRAY[{again}, {}]::bigint[]), 1)", graph[0])), "2");
    // Their completion woke the job awaiting one and the job depending on it: both failed, to retry.
    assert_eq!(one(&mut c, &format!("jobq_fail_many('{w}', ARRAY(SELECT id FROM jobq_checkout('{w}', NULL, 5)))")), "{ready,ready}");
    assert_eq!(one(&mut c, "(SELECT edition FROM jobq_version())"), if sql_edition().is_some() { "sql" } else { "extension" });
    // Its worker's own calls name no queue: heartbeats, stopping and unregistering (the legacy
    // job, of a queue it may no longer work on, goes back all the same).
    c.query_one("SELECT jobq_heartbeat($1)", &[&w]).unwrap();
    c.execute("SELECT jobq_stop_checkouts($1)", &[&w]).unwrap();
    assert_eq!(c.query_one("SELECT jobq_unregister_worker($1)", &[&w]).unwrap().get::<_, i32>(0), 1);
    let proxied = Uuid::new_v4();
    c.query_one("SELECT jobq._register_worker($1, 'proxied', '{}', false)", &[&proxied]).unwrap();
}

/// The extension's fast paths (src/grants.rs) serve a limited role inside its grants: its
/// enqueue into its queue, its checkout of queues it names and its completion never reach the
/// SQL; a checkout of every queue, or a call outside its grants, does (and is kept to its queues
/// or refused). (The SQL edition has the SQL alone: scripts/test-sql-edition.sh skips this.)
#[test]
fn the_fast_paths_serve_a_limited_role_inside_its_grants() {
    let (_, db, mut su) = db();
    let t = login_role(&mut su, &db, "t", &["jobq_worker"]);
    grant(&mut su, &t, "worker", &["t:*"]);
    let as_t = format!("SET LOCAL ROLE {t}");
    su.batch_execute(&format!("SET ROLE {t}")).unwrap();
    let w = register(&mut su);
    su.batch_execute("RESET ROLE").unwrap();
    let (id, sql) = calls_sql(&mut su, "READ COMMITTED", "_enqueue", |x| {
        x.batch_execute(&as_t).unwrap();
        x.query_one("SELECT jobq_enqueue('t:a')", &[]).unwrap().get::<_, i64>(0)
    });
    assert!(!sql, "the enqueue into its queue is the fast path's");
    let (got, sql) = calls_sql(&mut su, "READ COMMITTED", "_checkout", |x| {
        x.batch_execute(&as_t).unwrap();
        x.query_one("SELECT id FROM jobq_checkout($1, '{t:a, t:b}')", &[&w]).unwrap().get::<_, i64>(0)
    });
    assert_eq!(got, id);
    assert!(!sql, "the checkout of its named queues is the fast path's");
    let (done, sql) = calls_sql(&mut su, "READ COMMITTED", "_complete", |x| {
        x.batch_execute(&as_t).unwrap();
        x.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0)
    });
    assert!(done && !sql, "its completion is the fast path's");
    let (n, sql) = calls_sql(&mut su, "READ COMMITTED", "_checkout", |x| {
        x.batch_execute(&as_t).unwrap();
        x.query("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().len()
    });
    assert!(n == 0 && sql, "a checkout of every queue is the SQL's");
    let mut x = su.transaction().unwrap();
    x.batch_execute(&as_t).unwrap();
    assert_eq!(sqlstate(&x.query_one("SELECT jobq_enqueue('u:a')", &[]).unwrap_err()), "42501");
}

/// What a limited role reads: in every view and table of jobq_reader's column, the rows of the
/// queues it holds a grant for (any privilege), its own workers, the locks and events its
/// patterns cover; jobq_results the same. A role without grants reads everything.
#[test]
fn a_limited_role_reads_only_its_queues_rows() {
    let (cluster, db, mut su) = db();
    let t1 = login_role(&mut su, &db, "t1", &["jobq_worker"]);
    let all = login_role(&mut su, &db, "all", &["jobq_reader"]);
    grant(&mut su, &t1, "reader", &["t1:*", "shared"]);
    let mut c = cluster.connect_as(&db, &t1);
    let w = register(&mut c);
    let sw = register(&mut su);
    for q in ["t1:a", "t1:b", "shared", "other", "t2:a"] {
        let ck = format!("ck-{q}");
        su.execute("SELECT jobq_enqueue($1, concurrency_key => $2, rate_key => $1)", &[&q, &ck]).unwrap();
        let id = enqueue(&mut su, q);
        su.query("SELECT * FROM jobq_checkout($1, ARRAY[$2], 1)", &[&sw, &q]).unwrap();
        su.execute("SELECT jobq_cancel($1)", &[&id]).unwrap();
        su.execute("SELECT jobq_schedule($1, '0 3 * * *', $1)", &[&q]).unwrap();
        su.execute("SELECT jobq_pause($1, 'k')", &[&q]).unwrap();
        su.execute("SELECT jobq_set_rate_limit($1, 5, '1 minute')", &[&q]).unwrap();
        su.execute("SELECT jobq_emit_event($1)", &[&q]).unwrap();
        su.execute("SELECT jobq_acquire_lock($1, $2)", &[&q, &sw]).unwrap();
    }
    su.execute("SELECT jobq_pause(NULL, 'everywhere')", &[]).unwrap();
    su.query("SELECT * FROM jobq_reap()", &[]).unwrap(); // the counters reach jobq.queue_minutes
    let mine = BTreeSet::from(["t1:a".to_string(), "t1:b".to_string(), "shared".to_string()]);
    let everyone: BTreeSet<String> = mine.iter().cloned().chain(["other".to_string(), "t2:a".to_string()]).collect();
    let mut r = cluster.connect_as(&db, &all);
    // Queues, and the keys and names that its patterns cover (rate keys, events and locks are
    // named after the queues here).
    let reads = [
        ("queue", "jobq.jobs"),
        ("queue", "jobq.live_jobs"),
        ("queue", "jobq.finished_jobs"),
        ("queue", "jobq.queue_stats"),
        ("queue", "jobq.queue_depths"),
        ("queue", "jobq.schedules"),
        ("queue", "jobq.pauses"),
        ("queue", "jobq.queue_minutes"),
        ("queue", "jobq.queue_totals"),
        ("substr(key, 4)", "jobq.concurrency_slots"),
        ("key", "jobq.rate_windows"),
        ("name", "jobq.events"),
        ("key", "jobq.locks"),
    ];
    for (column, from) in reads {
        let sql = format!("SELECT DISTINCT {column} FROM {from} WHERE {column} IS NOT NULL");
        assert_eq!(texts(&mut c, &sql), mine, "{sql} as the limited role");
        assert_eq!(texts(&mut r, &sql), everyone, "{sql} as a role without grants");
    }
    let sql = "SELECT DISTINCT queue FROM jobq.throughput(now() - interval '1 hour')";
    assert_eq!((texts(&mut c, sql), texts(&mut r, sql)), (mine.clone(), everyone.clone()), "{sql}");
    // A condition of the reader's own, cheaper than the filter, is applied after it (views are
    // security barriers, tables filtered by row level security): a function that fails on any
    // other name never sees one.
    c.batch_execute(
        "CREATE FUNCTION pg_temp.peek(name text) RETURNS boolean LANGUAGE plpgsql STABLE COST 0.0001 AS $$
         BEGIN
             IF name IS NOT NULL AND NOT (name LIKE 't1:%' OR name = 'shared' OR name LIKE 'ck-t1:%' OR name = 'ck-shared') THEN
                 RAISE EXCEPTION 'peeked at %', name;
             END IF;
             RETURN true;
         END $$",
    )
    .unwrap();
    for (column, from) in reads {
        let raw = column.replace("substr(key, 4)", "key");
        for sql in [format!("SELECT DISTINCT {column} FROM {from} WHERE pg_temp.peek({raw}) AND {column} IS NOT NULL"),
                    format!("SELECT count(*)::text FROM {from} WHERE NOT pg_temp.peek({raw})")] {
            let got = c.query(&sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
            if sql.contains("count(*)") {
                assert_eq!(got[0].get::<_, String>(0), "0", "{sql}");
            } else {
                assert_eq!(got.iter().map(|r| r.get(0)).collect::<BTreeSet<String>>(), mine, "{sql}");
            }
        }
    }
    // jobq_results: the jobs of its queues (2 of each of 3), not the others' (2 of each of 5).
    let results = "SELECT count(*) FROM jobq_results(ARRAY(SELECT generate_series(1, 1000)::bigint))";
    assert_eq!((ids(&mut c, results), ids(&mut r, results)), (vec![6], vec![10]));
    // Its own workers only; the global pause of a kind is every queue's.
    let workers: Vec<Uuid> = c.query("SELECT id FROM jobq.workers", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(workers, vec![w]);
    assert_eq!(ids(&mut r, "SELECT count(*) FROM jobq.workers"), vec![2]);
    assert_eq!(ids(&mut c, "SELECT count(*) FROM jobq.pauses WHERE queue IS NULL"), vec![1]);
    // A reader's grant is not a worker's: it reads 't1:a' but may not work or enqueue there.
    refused(&mut c, "SELECT jobq_enqueue('t1:a')");
    refused(&mut c, &format!("SELECT * FROM jobq_checkout('{w}', '{{t1:a}}')"));
    assert!(ids(&mut c, &format!("SELECT id FROM jobq_checkout('{w}')")).is_empty(), "no queue granted as a worker");
}

/// Privileges are ordered (worker > producer > reader); grants are the role's own, not its
/// members'; jobq_admin members are never limited; the last revoke lifts the limit.
#[test]
fn privileges_are_ordered_and_only_the_role_itself_is_limited() {
    let (cluster, db, mut su) = db();
    let p = login_role(&mut su, &db, "p", &["jobq_worker"]);
    grant(&mut su, &p, "producer", &["p1"]);
    let mut c = cluster.connect_as(&db, &p);
    let w = register(&mut c);
    let job = enqueue(&mut c, "p1");
    assert_eq!(texts(&mut c, "SELECT queue FROM jobq.jobs"), BTreeSet::from(["p1".to_string()]), "a producer reads its queue");
    refused(&mut c, &format!("SELECT * FROM jobq_checkout('{w}', '{{p1}}')"));
    grant(&mut su, &p, "worker", &["p1"]);
    assert_eq!(ids(&mut c, &format!("SELECT id FROM jobq_checkout('{w}', '{{p1}}')")), vec![job]);
    assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&job, &w]).unwrap().get::<_, bool>(0));

    // A member of the limited role, logged in as itself, is not limited by its grants.
    let member = login_role(&mut su, &db, "member", &["jobq_worker", &p]);
    let mut m = cluster.connect_as(&db, &member);
    enqueue(&mut m, "elsewhere");
    // ... but after SET ROLE it is the limited role.
    m.batch_execute(&format!("SET ROLE {p}")).unwrap();
    refused(&mut m, "SELECT jobq_enqueue('elsewhere')");
    m.batch_execute("RESET ROLE").unwrap();
    // Nor does SET ROLE widen a limited login: the login role's grants and the set role's
    // both apply (a name must be covered by both).
    let wide = login_role(&mut su, &db, "wide", &["jobq_worker"]);
    grant(&mut su, &wide, "producer", &["x1", "y1"]);
    let narrow = login_role(&mut su, &db, "narrow", &["jobq_worker", &wide]);
    grant(&mut su, &narrow, "producer", &["x*"]);
    let mut n = cluster.connect_as(&db, &narrow);
    let x2 = enqueue(&mut n, "x2");
    n.batch_execute("SET ROLE jobq_worker").unwrap();
    refused(&mut n, "SELECT jobq_enqueue('elsewhere')");
    let e = n.query(&format!("SELECT jobq_cancel({job})"), &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    assert!(!e.as_db_error().unwrap().message().contains("p1"), "a job's refusal names no queue: {e:?}");
    assert_eq!(texts(&mut n, "SELECT queue FROM jobq.jobs"), BTreeSet::from(["x2".to_string()]), "as jobq_worker");
    // It acts for no worker as the set role: a worker of jobq_worker's may be another tenant's.
    refused(&mut n, "SELECT jobq_register_worker()");
    let theirs = register(&mut m); // member, not limited, its own worker
    m.batch_execute("SET ROLE jobq_worker").unwrap();
    let shared = register(&mut m);
    m.batch_execute("RESET ROLE").unwrap();
    for sql in [format!("SELECT jobq_heartbeat('{shared}', '{{}}')"), format!("SELECT jobq_unregister_worker('{shared}')"),
                format!("SELECT jobq_stop_checkouts('{shared}')"), format!("SELECT * FROM jobq_checkout('{shared}')"),
                format!("SELECT jobq_heartbeat('{theirs}')")] {
        refused(&mut n, &sql);
    }
    n.batch_execute(&format!("SET ROLE {wide}")).unwrap();
    let x1 = enqueue(&mut n, "x1");
    refused(&mut n, "SELECT jobq_enqueue('y1')");
    refused(&mut n, "SELECT jobq_enqueue('x3')");
    assert_eq!(texts(&mut n, "SELECT queue FROM jobq.jobs"), BTreeSet::from(["x1".to_string()]), "as {wide}");
    n.batch_execute("RESET ROLE").unwrap();
    assert_eq!(ids(&mut n, "SELECT id FROM jobq.jobs ORDER BY id"), vec![x2, x1]);
    // jobq_admin members are never limited.
    let admin = login_role(&mut su, &db, "admin", &["jobq_admin"]);
    grant(&mut su, &admin, "reader", &["p1"]);
    let mut a = cluster.connect_as(&db, &admin);
    enqueue(&mut a, "elsewhere");
    assert!(texts(&mut a, "SELECT queue FROM jobq.jobs").contains("elsewhere"));
    // Revoking every grant: 0.4's behaviour again.
    su.execute("SELECT jobq_revoke_queues($1::text::regrole, 'producer', '{p1}')", &[&p]).unwrap();
    refused(&mut c, "SELECT jobq_enqueue('elsewhere')");
    su.execute("SELECT jobq_revoke_queues($1::text::regrole, 'worker', '{p1}')", &[&p]).unwrap();
    enqueue(&mut c, "elsewhere");
    assert!(texts(&mut c, "SELECT queue FROM jobq.jobs").contains("elsewhere"));
}

/// Eight tenants, each limited to its own prefix, check out of one backlog of every tenant's
/// queues at once (every queue: NULL), from two connections each: every job is taken once, by
/// a worker of its own tenant, and the backlog ends empty.
#[test]
fn many_tenants_checking_out_at_once_each_get_their_own_jobs_once() {
    const TENANTS: usize = 8;
    const PER_QUEUE: i64 = 60;
    let (cluster, db, mut su) = db();
    let mut roles = Vec::new();
    for t in 0..TENANTS {
        let role = login_role(&mut su, &db, &format!("t{t}"), &["jobq_worker"]);
        grant(&mut su, &role, "worker", &[&format!("t{t}:*")]);
        roles.push(role);
    }
    // Two queues per tenant, and an unlimited queue nobody here may take.
    for t in 0..TENANTS {
        for q in ["a", "b"] {
            su.execute("SELECT jobq_enqueue_batch($1, array_fill('{}'::jsonb, ARRAY[$2::integer]))", &[&format!("t{t}:{q}"), &(PER_QUEUE as i32)]).unwrap();
        }
    }
    su.execute("SELECT jobq_enqueue_batch('free', array_fill('{}'::jsonb, ARRAY[50]))", &[]).unwrap();
    let handles: Vec<_> = (0..TENANTS * 2)
        .map(|i| {
            let (url, t) = (cluster.url_as(&db, &roles[i / 2]), i / 2);
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                let w = register(&mut c);
                let mut got: Vec<(i64, String)> = Vec::new();
                loop {
                    let rows = c.query("SELECT id, queue FROM jobq_checkout($1, NULL, 5)", &[&w]).unwrap();
                    if rows.is_empty() {
                        break;
                    }
                    for r in rows {
                        let id: i64 = r.get(0);
                        assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
                        got.push((id, r.get(1)));
                    }
                }
                (t, got)
            })
        })
        .collect();
    let mut seen = BTreeSet::new();
    for h in handles {
        let (t, got) = h.join().unwrap();
        for (id, queue) in got {
            assert!(queue.starts_with(&format!("t{t}:")), "tenant {t} took job {id} of {queue}");
            assert!(seen.insert(id), "job {id} taken twice");
        }
    }
    assert_eq!(seen.len() as i64, TENANTS as i64 * 2 * PER_QUEUE);
    let left: Vec<(String, i64)> = su
        .query("SELECT queue, count(*) FROM jobq.live_jobs GROUP BY queue", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(left, vec![("free".to_string(), 50)]);
    assert_job_tables_consistent(&mut su);
}

/// The contract, Poolers: behind PgBouncer in transaction mode, where the calls of one client
/// run in whichever server session of its role is free, a limited role is limited (its grants
/// are its role's, not a session's) and a role without grants is not; a waiting checkout of
/// every queue takes the limited role's job only.
#[test]
fn grants_hold_through_pgbouncer_in_transaction_mode() {
    let cluster = Cluster::start("tenantpool", &[]);
    let db = "tenantpool";
    cluster.create_jobq_db(db);
    let mut su = cluster.connect(db);
    su.batch_execute("CREATE ROLE tp_limited LOGIN; GRANT jobq_worker TO tp_limited; CREATE ROLE tp_free LOGIN; GRANT jobq_worker TO tp_free").unwrap();
    grant(&mut su, "tp_limited", "worker", &["mine:*"]);
    let bouncer = Bouncer::start_users(&cluster, db, &["tp_limited", "tp_free"], 2);
    let url = |user: &str| format!("host=127.0.0.1 port={} user={user} dbname={db}", bouncer.port);
    let mut limited = Client::connect(&url("tp_limited"), postgres::NoTls).unwrap();
    let mut other = Client::connect(&url("tp_limited"), postgres::NoTls).unwrap();
    let mut free = Client::connect(&url("tp_free"), postgres::NoTls).unwrap();
    let theirs = enqueue(&mut free, "theirs");
    let mine = enqueue(&mut limited, "mine:a");
    let w = register(&mut limited);
    // The other client holds a server session in a transaction while this one calls: its calls
    // run in the role's other session, then in either.
    for hold in [true, false] {
        let mut t = other.transaction().unwrap();
        if hold {
            t.query("SELECT 1", &[]).unwrap();
        }
        refused(&mut limited, "SELECT jobq_enqueue('theirs')");
        refused(&mut limited, &format!("SELECT jobq_cancel({theirs})"));
        assert_eq!(texts(&mut limited, "SELECT queue FROM jobq.jobs"), BTreeSet::from(["mine:a".to_string()]));
        t.commit().unwrap();
    }
    assert_eq!(ids(&mut limited, &format!("SELECT id FROM jobq_checkout('{w}', NULL, 5, '1 s')")), vec![mine]);
    assert!(texts(&mut free, "SELECT queue FROM jobq.jobs").contains("theirs"));
}

/// A schedule's ticks reach its queue whoever runs the pass that enqueues them: in the SQL
/// edition a worker's heartbeat runs it (src/sql/twins/bgworker.sql), and a limited worker's
/// heartbeat enqueues the ticks of a queue it may not use (src/sql/schedules.sql).
#[test]
fn a_schedule_ticks_into_its_queue_whoever_runs_the_pass() {
    let (cluster, db, mut su) = db();
    let t = login_role(&mut su, &db, "t", &["jobq_worker"]);
    grant(&mut su, &t, "worker", &["mine"]);
    su.batch_execute(
        "SELECT jobq_schedule('nightly', '0 3 * * *', 'theirs');
         UPDATE jobq.crontab SET next_run_at = now() - interval '1 minute' WHERE name = 'nightly'",
    )
    .unwrap();
    let mut c = cluster.connect_as(&db, &t);
    let w = register(&mut c);
    wait_until("the schedule's tick in its queue", std::time::Duration::from_secs(60), || {
        c.execute("SELECT jobq_heartbeat($1)", &[&w]).unwrap();
        if sql_edition().is_none() {
            // The extension's passes are its background worker's (here, as in the other tests
            // of this cluster, jobq_reap's), which runs as the installing role.
            su.query("SELECT * FROM jobq_reap()", &[]).unwrap();
        }
        su.query_one("SELECT count(*) FROM jobq.jobs WHERE queue = 'theirs'", &[]).unwrap().get::<_, i64>(0) == 1
    });
    refused(&mut c, "SELECT jobq_enqueue('theirs')");
}

/// Unique keys are global, but a limited role is told which job holds one only when it may
/// read that job: the 23505's DETAIL and the 'log' NOTICE name another tenant's job or lock
/// without its id.
#[test]
fn a_unique_key_held_by_another_tenant_is_named_without_its_holder() {
    let (cluster, db, mut su) = db();
    let t = login_role(&mut su, &db, "t", &["jobq_worker"]);
    grant(&mut su, &t, "worker", &["t:*"]);
    let theirs: i64 = su.query_one("SELECT jobq_enqueue('other', unique_key => 'k-other')", &[]).unwrap().get(0);
    let w = register(&mut su);
    su.execute("SELECT jobq_acquire_lock('k-lock', $1)", &[&w]).unwrap();
    let mut c = cluster.connect_as(&db, &t);
    let mine: i64 = c.query_one("SELECT jobq_enqueue('t:a', unique_key => 'k-mine')", &[]).unwrap().get(0);
    let detail = |c: &mut Client, key: &str| -> String {
        let e = c.query("SELECT jobq_enqueue('t:a', unique_key => $1)", &[&key]).unwrap_err();
        assert_eq!(sqlstate(&e), "23505", "{e:?}");
        e.as_db_error().unwrap().detail().unwrap_or_default().to_string()
    };
    assert_eq!(detail(&mut c, "k-mine"), format!("existing job id: {mine}"));
    for key in ["k-other", "k-lock"] {
        let d = detail(&mut c, key);
        assert_eq!(d, "held by a job or lock outside this role's queues", "{key}");
    }
    // A lock whose key its patterns cover is named, as jobq.locks shows it.
    su.execute("SELECT jobq_acquire_lock('t:lock', $1)", &[&w]).unwrap();
    assert_eq!(detail(&mut c, "t:lock"), format!("held by the lock of worker {w}"));
    // Debounce does not replace another tenant's job: a conflict like any other.
    let e = c.query("SELECT jobq_enqueue('t:a', unique_key => 'k-other', on_conflict => 'replace')", &[]).unwrap_err();
    assert_eq!((sqlstate(&e), e.as_db_error().unwrap().detail()), ("23505".to_string(), Some("held by a job or lock outside this role's queues")));
    assert_eq!(detail(&mut su, "k-other"), format!("existing job id: {theirs}"), "a role without grants is told");
}

/// A dropped role's grants go with the next pass: PostgreSQL does not know jobq.queue_grants
/// names the role, and a role created later with the same oid must not find itself limited.
#[test]
fn the_grants_of_a_dropped_role_go_at_the_next_pass() {
    let (_cluster, db, mut su) = db();
    let gone = login_role(&mut su, &db, "gone", &["jobq_worker"]);
    let kept = login_role(&mut su, &db, "kept", &["jobq_worker"]);
    grant(&mut su, &gone, "worker", &["g:*"]);
    grant(&mut su, &kept, "worker", &["k:*"]);
    su.batch_execute(&format!("DROP ROLE {gone}")).unwrap();
    su.query("SELECT * FROM jobq_reap()", &[]).unwrap();
    assert_eq!(texts(&mut su, "SELECT role::text || ' ' || pattern FROM jobq.queue_grants"), BTreeSet::from([format!("{kept} k:*")]));
}
