//! Workflows and durable jobs (the contract, section Workflows and durable jobs (0.3)) over real
//! connections: dependencies and their cascade, suspensions (snooze, awaited jobs, awaited
//! events), checkpoints, fencing, bad input; and the races that must never leave a job
//! blocked for ever or wake it twice, hammered from several sessions in every isolation level.
mod common;

use common::*;
use postgres::{Client, IsolationLevel};
use serde_json::{json, Value};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;
use uuid::Uuid;

fn one<T: for<'a> postgres::types::FromSql<'a>>(c: &mut Client, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> T {
    c.query_one(sql, params).unwrap().get(0)
}

fn state(c: &mut Client, id: i64) -> String {
    one(c, "SELECT state FROM jobq.jobs WHERE id = $1", &[&id])
}

fn checkout(c: &mut Client, w: Uuid, queue: &str, max: i32) -> Vec<i64> {
    c.query("SELECT id FROM jobq_checkout($1, ARRAY[$2], $3)", &[&w, &queue, &max]).unwrap().iter().map(|r| r.get(0)).collect()
}

fn complete(c: &mut Client, id: i64, w: Uuid) -> bool {
    one(c, "SELECT jobq_complete($1, $2)", &[&id, &w])
}

/// `f` in its own transaction at `iso`, retried on 40001 as the contract asks clients to do under
/// REPEATABLE READ and SERIALIZABLE.
fn retrying<T>(c: &mut Client, iso: IsolationLevel, mut f: impl FnMut(&mut postgres::Transaction) -> Result<T, postgres::Error>) -> T {
    loop {
        let mut tx = c.build_transaction().isolation_level(iso).start().unwrap();
        tx.query_one("SELECT 1", &[]).unwrap(); // the snapshot is taken before the jobq call
        match f(&mut tx).and_then(|v| tx.commit().map(|()| v)) {
            Ok(v) => return v,
            Err(e) if sqlstate(&e) == "40001" => continue,
            Err(e) => panic!("{e:?}"),
        }
    }
}

/// `f` in one transaction at `iso`: under READ COMMITTED once, where no jobq call may raise
/// 40001 or 40P01, so any error fails the test; under the other two levels through `retrying`.
fn strictly(c: &mut Client, iso: IsolationLevel, mut f: impl FnMut(&mut postgres::Transaction) -> Result<(), postgres::Error>) {
    if matches!(iso, IsolationLevel::ReadCommitted) {
        let mut tx = c.transaction().unwrap();
        f(&mut tx).unwrap();
        tx.commit().unwrap();
    } else {
        retrying(c, iso, f);
    }
}

/// Runs `sides` threads for `rounds` rounds, each thread with its own connection to `url`,
/// every round started by all of them at once (a barrier): `f(connection, side, round)`. A
/// failing round is recorded and its thread keeps meeting the barrier, so no thread waits for
/// ever for one that failed; the first failure fails the test once all are done.
fn race(url: String, sides: usize, rounds: usize, f: impl Fn(&mut Client, usize, usize) + Send + Sync + 'static) {
    let (f, barrier) = (Arc::new(f), Arc::new(Barrier::new(sides)));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let threads: Vec<_> = (0..sides)
        .map(|side| {
            let (f, barrier, failures, url) = (f.clone(), barrier.clone(), failures.clone(), url.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                for round in 0..rounds {
                    barrier.wait();
                    if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut c, side, round))) {
                        let what = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
                        failures.lock().unwrap().push(format!("side {side}, round {round}: {}", what.unwrap_or_default()));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let failures = failures.lock().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

const LEVELS: [IsolationLevel; 3] = [IsolationLevel::ReadCommitted, IsolationLevel::RepeatableRead, IsolationLevel::Serializable];

#[test]
fn a_child_becomes_ready_once_its_last_parent_completes() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let p1: i64 = one(&mut c, "SELECT jobq_enqueue('steps', '{\"n\": 1}')", &[]);
    let p2: i64 = one(&mut c, "SELECT jobq_enqueue('steps', '{\"n\": 2}')", &[]);
    // Duplicates are ignored: each parent is kept once, in the order first named.
    let child: i64 = one(&mut c, "SELECT jobq_enqueue('steps', kind => 'gather', depends_on => $1)", &[&vec![p2, p1, p2, p1, p2]]);
    assert_eq!(state(&mut c, child), "blocked");
    let depends: Vec<i64> = one(&mut c, "SELECT depends_on FROM jobq.jobs WHERE id = $1", &[&child]);
    assert_eq!(depends, vec![p2, p1], "each parent once");
    let edges: i64 = one(&mut c, "SELECT count(*) FROM jobq.edges WHERE child = $1", &[&child]);
    assert_eq!(edges, 2);
    // Checkout never takes a blocked job.
    assert_eq!(checkout(&mut c, w, "steps", 10), vec![p1, p2]);
    assert!(checkout(&mut c, w, "steps", 10).is_empty());
    assert!(one::<bool>(&mut c, "SELECT jobq_complete($1, $2, '\"one\"')", &[&p1, &w]));
    assert_eq!(state(&mut c, child), "blocked", "one parent is still unfinished");
    assert!(one::<bool>(&mut c, "SELECT jobq_complete($1, $2, '\"two\"')", &[&p2, &w]));
    assert_eq!(state(&mut c, child), "ready");
    // Its checkout shows what it depends on; jobq_results gathers what the parents produced.
    let row = c.query_one("SELECT id, depends_on, checkpoints, attempt FROM jobq_checkout($1, ARRAY['steps'])", &[&w]).unwrap();
    assert_eq!(row.get::<_, i64>(0), child);
    assert_eq!(row.get::<_, Vec<i64>>(1), vec![p2, p1]);
    assert_eq!(row.get::<_, Value>(2), json!({}));
    assert_eq!(row.get::<_, i32>(3), 1);
    let results: Vec<(i64, String, Option<Value>)> = c
        .query("SELECT id, state, result FROM jobq_results($1)", &[&vec![p2, p1, 999_999]])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(results, vec![(p2, "completed".into(), Some(json!("two"))), (p1, "completed".into(), Some(json!("one")))]);
    // A child of finished parents starts ready; of a failed one with 'cancel', cancelled.
    let ready: i64 = one(&mut c, "SELECT jobq_enqueue('steps', depends_on => $1)", &[&vec![p1, p2]]);
    assert_eq!(state(&mut c, ready), "ready");
    assert_job_tables_consistent(&mut c);
}

/// A database whose completions found no edge to look for (noted in shared memory, so that
/// plain jobs skip the look: src/edges.rs) still tells the dependents enqueued afterwards,
/// from another session, when their parent completes on the common (Rust) path.
#[test]
fn dependents_are_told_in_a_database_that_ran_plain_jobs_first() {
    let (cluster, db, mut c) = db();
    let w = register(&mut c);
    let plain: i64 = one(&mut c, "SELECT jobq_enqueue('plain')", &[]);
    assert_eq!(checkout(&mut c, w, "plain", 1), vec![plain]);
    assert!(complete(&mut c, plain, w));
    let parent: i64 = one(&mut c, "SELECT jobq_enqueue('steps')", &[]);
    assert_eq!(checkout(&mut c, w, "steps", 1), vec![parent]);
    let mut other = cluster.connect(&db);
    let child: i64 = one(&mut other, "SELECT jobq_enqueue('steps', depends_on => ARRAY[$1::bigint])", &[&parent]);
    assert_eq!(state(&mut c, child), "blocked");
    assert!(complete(&mut c, parent, w));
    assert_eq!(state(&mut c, child), "ready");
    assert_job_tables_consistent(&mut c);
}

/// The same when the jobs and their edge arrive by a logical replication subscription, whose
/// apply fires row triggers only (edges_replicated, src/sql/workflows.sql): the subscriber
/// completes the parent.
#[test]
fn dependents_are_told_when_their_edges_arrive_by_replication() {
    let (cluster, mut publisher, mut c) = subscriber();
    // A completion here finds jobq.edges without a page (noted: src/edges.rs).
    let w = register(&mut c);
    let plain: i64 = one(&mut c, "SELECT jobq_enqueue('plain')", &[]);
    assert_eq!(checkout(&mut c, w, "plain", 1), vec![plain]);
    assert!(complete(&mut c, plain, w));
    // The parent and its dependent arrive by the apply.
    let parent: i64 = one(&mut publisher, "SELECT jobq_enqueue('steps')", &[]);
    let child: i64 = one(&mut publisher, "SELECT jobq_enqueue('steps', depends_on => ARRAY[$1::bigint])", &[&parent]);
    wait_until("the dependent's edge replicated", Duration::from_secs(60), || {
        one::<i64>(&mut c, "SELECT count(*) FROM jobq.edges WHERE child = $1", &[&child]) == 1
    });
    c.batch_execute("DROP SUBSCRIPTION jobq_sub").unwrap();
    assert_eq!(state(&mut c, child), "blocked");
    assert_eq!(checkout(&mut c, w, "steps", 1), vec![parent]);
    assert!(complete(&mut c, parent, w));
    assert_eq!(state(&mut c, child), "ready");
    assert_job_tables_consistent(&mut c);
    cluster.pg_ctl_stop("fast");
}

#[test]
fn a_failed_parent_cancels_its_children_and_a_retry_brings_them_back() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let a: i64 = one(&mut c, "SELECT jobq_enqueue('flow', max_attempts => 1)", &[]);
    let b: i64 = one(&mut c, "SELECT jobq_enqueue('flow', depends_on => ARRAY[$1::bigint], unique_key => 'b-key')", &[&a]);
    let d: i64 = one(&mut c, "SELECT jobq_enqueue('flow', depends_on => ARRAY[$1::bigint])", &[&b]);
    let runs: i64 = one(&mut c, "SELECT jobq_enqueue('flow', depends_on => ARRAY[$1::bigint], on_parent_failure => 'run')", &[&b]);
    assert_eq!(checkout(&mut c, w, "flow", 10), vec![a]);
    assert_eq!(one::<String>(&mut c, "SELECT jobq_fail($1, $2, '{\"boom\": 1}')", &[&a, &w]), "dead");
    // b (cancel) is cancelled with its key released; d (cancel, child of b) too; `runs`
    // counts b as finished and runs.
    assert_eq!(state(&mut c, b), "cancelled");
    assert_eq!(state(&mut c, d), "cancelled");
    assert_eq!(state(&mut c, runs), "ready");
    assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM jobq.locks WHERE key = 'b-key'", &[]), 0);
    // A child enqueued now under a failed parent is cancelled at once; its id is returned.
    let late: i64 = one(&mut c, "SELECT jobq_enqueue('flow', depends_on => ARRAY[$1::bigint])", &[&a]);
    assert_eq!(state(&mut c, late), "cancelled");
    assert_job_tables_consistent(&mut c);

    // The retry of a: b, d and late wait for it again; b takes its key back.
    assert!(one::<bool>(&mut c, "SELECT jobq_retry($1)", &[&a]));
    for id in [b, d, late] {
        assert_eq!(state(&mut c, id), "blocked", "job {id}");
    }
    assert_eq!(one::<i64>(&mut c, "SELECT job_id FROM jobq.locks WHERE key = 'b-key'", &[]), b);
    assert_eq!(checkout(&mut c, w, "flow", 10), vec![runs, a]);
    assert!(complete(&mut c, runs, w));
    assert!(complete(&mut c, a, w));
    assert_eq!(state(&mut c, b), "ready");
    assert_eq!(checkout(&mut c, w, "flow", 10), vec![b, late]);
    assert!(complete(&mut c, b, w));
    assert_eq!(checkout(&mut c, w, "flow", 10), vec![d]);
    assert_job_tables_consistent(&mut c);

    // A child whose unique key was taken meanwhile stays cancelled on retry.
    let p: i64 = one(&mut c, "SELECT jobq_enqueue('keys')", &[]);
    let k: i64 = one(&mut c, "SELECT jobq_enqueue('keys', depends_on => ARRAY[$1::bigint], unique_key => 'k')", &[&p]);
    assert_eq!(one::<String>(&mut c, "SELECT jobq_cancel($1)", &[&p]), "cancelled");
    assert_eq!(state(&mut c, k), "cancelled");
    let taker: i64 = one(&mut c, "SELECT jobq_enqueue('keys', unique_key => 'k')", &[]);
    assert!(one::<bool>(&mut c, "SELECT jobq_retry($1)", &[&p]));
    assert_eq!(state(&mut c, k), "cancelled");
    assert_eq!(one::<i64>(&mut c, "SELECT job_id FROM jobq.locks WHERE key = 'k'", &[]), taker);
    // jobq_cancel of a blocked job cancels it at once.
    let q: i64 = one(&mut c, "SELECT jobq_enqueue('keys', depends_on => ARRAY[$1::bigint])", &[&p]);
    assert_eq!(state(&mut c, q), "blocked");
    assert_eq!(one::<String>(&mut c, "SELECT jobq_cancel($1)", &[&q]), "cancelled");
    assert_eq!(state(&mut c, q), "cancelled");
    assert_job_tables_consistent(&mut c);
}

#[test]
fn bad_workflow_input_is_refused_and_changes_nothing() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let p: i64 = one(&mut c, "SELECT jobq_enqueue('q')", &[]);
    let before: i64 = one(&mut c, "SELECT count(*) FROM jobq.jobs", &[]);
    let too_many: Vec<i64> = (1..=1001).collect();
    for (sql, code) in [
        ("SELECT jobq_enqueue('q', depends_on => ARRAY[123456789::bigint])", "22023"),
        ("SELECT jobq_enqueue('q', depends_on => ARRAY[NULL::bigint])", "22023"),
        ("SELECT jobq_enqueue('q', depends_on => ARRAY[1::bigint], on_parent_failure => 'ignore')", "22023"),
        ("SELECT jobq_enqueue('q', depends_on => ARRAY[1::bigint], on_parent_failure => NULL)", "22004"),
        (&format!("SELECT jobq_enqueue('q', depends_on => '{{{}}}'::bigint[])", too_many.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")), "22023"),
        ("SELECT jobq_emit_event('')", "22023"),
        (&format!("SELECT jobq_emit_event('{}')", "e".repeat(1001)), "22023"),
        ("SELECT jobq_emit_event(NULL)", "22004"),
        ("SELECT * FROM jobq_results(NULL)", "22004"),
        ("SELECT * FROM jobq_results(array_fill(1::bigint, ARRAY[10001]))", "22023"),
    ] {
        let e = c.query(sql, &[]).unwrap_err();
        assert_eq!(sqlstate(&e), code, "{sql}: {e:?}");
    }
    assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM jobq.jobs", &[]), before);
    assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM jobq.edges", &[]), 0);
    assert_eq!(checkout(&mut c, w, "q", 1), vec![p]);
    for (sql, code) in [
        ("SELECT jobq_checkpoint($1, $2, '', '1')", "22023"),
        ("SELECT jobq_checkpoint($1, $2, NULL, '1')", "22004"),
        ("SELECT jobq_snooze($1, $2, NULL)", "22004"),
        ("SELECT jobq_snooze($1, $2, 'infinity')", "22023"),
        ("SELECT jobq_await_jobs($1, $2, ARRAY[987654321::bigint])", "22023"),
        ("SELECT jobq_await_jobs($1, $2, array_fill(1::bigint, ARRAY[10001]))", "22023"),
        ("SELECT jobq_await_event($1, $2, '')", "22023"),
        ("SELECT jobq_await_event($1, $2, 'e', '-1 s')", "22023"),
    ] {
        let e = c.query(sql, &[&p, &w]).unwrap_err();
        assert_eq!(sqlstate(&e), code, "{sql}: {e:?}");
    }
    assert_eq!(state(&mut c, p), "executing");
    assert_eq!(one::<Value>(&mut c, "SELECT checkpoints FROM jobq.jobs WHERE id = $1", &[&p]), json!({}));
    // At most 1,000 steps.
    c.execute("SELECT jobq_checkpoint($1, $2, 'step' || i, to_jsonb(i)) FROM generate_series(1, 1000) i", &[&p, &w]).unwrap();
    let e = c.query("SELECT jobq_checkpoint($1, $2, 'one more', '1')", &[&p, &w]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    assert!(one::<bool>(&mut c, "SELECT jobq_checkpoint($1, $2, 'step7', '\"again\"')", &[&p, &w]), "an existing step is replaced");
    assert_eq!(one::<Value>(&mut c, "SELECT checkpoints -> 'step7' FROM jobq.jobs WHERE id = $1", &[&p]), json!("again"));
}

#[test]
fn a_snoozed_job_comes_back_at_its_time_with_the_same_attempt_and_its_checkpoints() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let id: i64 = one(&mut c, "SELECT jobq_enqueue('nap', concurrency_key => 'one', concurrency_limit => 1)", &[]);
    let other: i64 = one(&mut c, "SELECT jobq_enqueue('nap', concurrency_key => 'one', concurrency_limit => 1)", &[]);
    assert_eq!(checkout(&mut c, w, "nap", 10), vec![id], "the key lets one run");
    assert!(one::<bool>(&mut c, "SELECT jobq_checkpoint($1, $2, 'charged', '{\"amount\": 5}')", &[&id, &w]));
    assert!(one::<bool>(&mut c, "SELECT jobq_snooze($1, $2, clock_timestamp() + interval '300 ms')", &[&id, &w]));
    // Its slot is free: the other job of the key starts; the snoozed one is not due yet.
    assert_eq!(checkout(&mut c, w, "nap", 10), vec![other]);
    assert!(complete(&mut c, other, w));
    assert_eq!(state(&mut c, id), "ready");
    let mut got = Vec::new();
    wait_until("the snoozed job to come due", Duration::from_secs(10), || {
        got = c.query("SELECT id, attempt, checkpoints FROM jobq_checkout($1, ARRAY['nap'])", &[&w]).unwrap().iter().map(|r| (r.get::<_, i64>(0), r.get::<_, i32>(1), r.get::<_, Value>(2))).collect();
        !got.is_empty()
    });
    assert_eq!(got, vec![(id, 1, json!({"charged": {"amount": 5}}))], "the same attempt, the checkpoint kept");
    // Checkpoints survive a failure too.
    assert_eq!(one::<String>(&mut c, "SELECT jobq_fail($1, $2, retry_in => '0')", &[&id, &w]), "ready");
    let row = c.query_one("SELECT attempt, checkpoints FROM jobq_checkout($1, ARRAY['nap'])", &[&w]).unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, Value>(1)), (2, json!({"charged": {"amount": 5}})));
    assert_job_tables_consistent(&mut c);
}

#[test]
fn an_await_of_jobs_suspends_the_job_until_the_last_one_finishes() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let parent: i64 = one(&mut c, "SELECT jobq_enqueue('fan')", &[]);
    assert_eq!(checkout(&mut c, w, "fan", 1), vec![parent]);
    let kids: Vec<i64> = c.query("SELECT * FROM jobq_enqueue_batch('kids', array_fill('{}'::jsonb, ARRAY[3]))", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(one::<String>(&mut c, "SELECT jobq_await_jobs($1, $2, $3)", &[&parent, &w, &kids]), "waiting");
    assert_eq!(state(&mut c, parent), "blocked");
    // The worker no longer holds it: completing it is refused, its heartbeat does not name it.
    assert!(!complete(&mut c, parent, w));
    let cancelled: Vec<i64> = one(&mut c, "SELECT jobq_heartbeat($1, '{}')", &[&w]);
    assert!(cancelled.is_empty());
    let got = checkout(&mut c, w, "kids", 10);
    assert_eq!(got, kids);
    assert!(complete(&mut c, kids[0], w));
    assert_eq!(one::<String>(&mut c, "SELECT jobq_fail($1, $2, discard => true)", &[&kids[1], &w]), "dead");
    assert_eq!(state(&mut c, parent), "blocked");
    assert_eq!(one::<String>(&mut c, "SELECT jobq_cancel($1)", &[&kids[2]]), "executing");
    assert_eq!(one::<Option<String>>(&mut c, "SELECT jobq_fail($1, $2)", &[&kids[2], &w]).as_deref(), Some("cancelled"));
    // Whatever their final states, the last one finishing wakes the job: the same attempt.
    assert_eq!(state(&mut c, parent), "ready");
    let row = c.query_one("SELECT id, attempt FROM jobq_checkout($1, ARRAY['fan'])", &[&w]).unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i32>(1)), (parent, 1));
    // Awaiting finished jobs: 'finished', and it keeps executing.
    assert_eq!(one::<String>(&mut c, "SELECT jobq_await_jobs($1, $2, $3)", &[&parent, &w, &kids]), "finished");
    assert_eq!(state(&mut c, parent), "executing");
    let states: Vec<String> = c.query("SELECT state FROM jobq_results($1)", &[&kids]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(states, ["completed", "dead", "cancelled"]);
    assert!(complete(&mut c, parent, w));
    assert_job_tables_consistent(&mut c);
}

#[test]
fn an_event_is_emitted_once_and_wakes_its_awaiters_with_a_checkpoint() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let a: i64 = one(&mut c, "SELECT jobq_enqueue('ev')", &[]);
    let b: i64 = one(&mut c, "SELECT jobq_enqueue('ev')", &[]);
    assert_eq!(checkout(&mut c, w, "ev", 2), vec![a, b]);
    for id in [a, b] {
        assert_eq!(one::<String>(&mut c, "SELECT jobq_await_event($1, $2, 'order-1:delivered')", &[&id, &w]), "waiting");
        assert_eq!(state(&mut c, id), "blocked");
    }
    assert_eq!(one::<i32>(&mut c, "SELECT jobq_emit_event('order-1:delivered', '{\"by\": \"van\"}')", &[]), 2);
    // The first emit wins.
    assert_eq!(one::<i32>(&mut c, "SELECT jobq_emit_event('order-1:delivered', '{\"by\": \"bike\"}')", &[]), 0);
    let (payload, emitted_at): (Value, Value) = {
        let r = c.query_one("SELECT payload, to_jsonb(emitted_at) FROM jobq.events WHERE name = 'order-1:delivered'", &[]).unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(payload, json!({"by": "van"}));
    let rows: Vec<(i64, i32, Value)> = c.query("SELECT id, attempt, checkpoints FROM jobq_checkout($1, ARRAY['ev'], 2)", &[&w]).unwrap().iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    let expected = json!({"event:order-1:delivered": {"payload": {"by": "van"}, "emitted_at": emitted_at}});
    assert_eq!(rows, vec![(a, 1, expected.clone()), (b, 1, expected.clone())]);
    // An event emitted before the await: 'emitted' at once, the checkpoint written, still executing.
    assert_eq!(one::<String>(&mut c, "SELECT jobq_await_event($1, $2, 'order-1:delivered')", &[&a, &w]), "emitted");
    assert_eq!(state(&mut c, a), "executing");
    // A timeout: ready again without the checkpoint (the reap pass wakes it).
    assert_eq!(one::<String>(&mut c, "SELECT jobq_await_event($1, $2, 'never', '100 ms')", &[&b, &w]), "waiting");
    wait_until("the await to time out", Duration::from_secs(10), || {
        c.execute("SELECT jobq_reap()", &[]).unwrap();
        state(&mut c, b) == "ready"
    });
    let cp: Value = one(&mut c, "SELECT checkpoints FROM jobq.jobs WHERE id = $1", &[&b]);
    assert_eq!(cp, expected, "no checkpoint for the event that did not come");
    assert_job_tables_consistent(&mut c);
}

#[test]
fn suspensions_are_fenced_like_completion() {
    let (cluster, db, mut c) = db();
    let w = register(&mut c);
    let other = register(&mut c);
    let id: i64 = one(&mut c, "SELECT jobq_enqueue('f')", &[]);
    assert_eq!(checkout(&mut c, w, "f", 1), vec![id]);
    // Another worker of the same role: false or NULL, nothing changed.
    assert!(!one::<bool>(&mut c, "SELECT jobq_checkpoint($1, $2, 's', '1')", &[&id, &other]));
    assert!(!one::<bool>(&mut c, "SELECT jobq_snooze($1, $2, now())", &[&id, &other]));
    assert_eq!(one::<Option<String>>(&mut c, "SELECT jobq_await_jobs($1, $2, '{}')", &[&id, &other]), None);
    assert_eq!(one::<Option<String>>(&mut c, "SELECT jobq_await_event($1, $2, 'e')", &[&id, &other]), None);
    // A worker of another role: 42501.
    c.batch_execute(&format!("CREATE ROLE wf_other LOGIN; GRANT jobq_worker TO wf_other; GRANT CONNECT ON DATABASE {db} TO wf_other")).unwrap();
    let mut stranger = cluster.connect_as(&db, "wf_other");
    for sql in [
        "SELECT jobq_checkpoint($1, $2, 's', '1')::text",
        "SELECT jobq_snooze($1, $2, now())::text",
        "SELECT jobq_await_jobs($1, $2, '{}')",
        "SELECT jobq_await_event($1, $2, 'e')",
    ] {
        assert_eq!(sqlstate(&stranger.query(sql, &[&id, &w]).unwrap_err()), "42501", "{sql}");
    }
    // A reaped (unknown) worker: false or NULL, never JQ001.
    c.execute("DELETE FROM jobq.workers WHERE id = $1", &[&w]).unwrap();
    assert!(!one::<bool>(&mut c, "SELECT jobq_checkpoint($1, $2, 's', '1')", &[&id, &w]));
    assert!(!one::<bool>(&mut c, "SELECT jobq_snooze($1, $2, now())", &[&id, &w]));
    assert_eq!(one::<Option<String>>(&mut c, "SELECT jobq_await_jobs($1, $2, '{}')", &[&id, &w]), None);
    assert_eq!(one::<Option<String>>(&mut c, "SELECT jobq_await_event($1, $2, 'e')", &[&id, &w]), None);
    let r = c.query_one("SELECT state, checkpoints, attempt FROM jobq.jobs WHERE id = $1", &[&id]).unwrap();
    assert_eq!((r.get::<_, String>(0), r.get::<_, Value>(1), r.get::<_, i32>(2)), ("executing".into(), json!({}), 1));
}

#[test]
fn a_finished_parent_is_kept_while_a_dependent_is_unfinished() {
    let (_, _, mut c) = db();
    c.batch_execute("SET jobq.retention = '1s'").unwrap();
    let w = register(&mut c);
    let p: i64 = one(&mut c, "SELECT jobq_enqueue('prune')", &[]);
    let child: i64 = one(&mut c, "SELECT jobq_enqueue('prune', depends_on => ARRAY[$1::bigint], run_at => now() + interval '1 hour')", &[&p]);
    let lone: i64 = one(&mut c, "SELECT jobq_enqueue('prune')", &[]);
    assert_eq!(checkout(&mut c, w, "prune", 10), vec![p, lone]);
    assert!(complete(&mut c, p, w));
    assert!(complete(&mut c, lone, w));
    assert_eq!(state(&mut c, child), "ready");
    let finished = |c: &mut Client| -> Vec<i64> { c.query("SELECT id FROM jobq.finished_jobs ORDER BY id", &[]).unwrap().iter().map(|r| r.get(0)).collect() };
    wait_until("the lone job to be pruned", Duration::from_secs(10), || {
        c.execute("SELECT jobq_reap()", &[]).unwrap();
        !finished(&mut c).contains(&lone)
    });
    assert_eq!(finished(&mut c), vec![p], "the parent of a waiting child is kept, past its retention");
    assert_eq!(one::<String>(&mut c, "SELECT jobq_cancel($1)", &[&child]), "cancelled");
    wait_until("both to be pruned", Duration::from_secs(10), || {
        c.execute("SELECT jobq_reap()", &[]).unwrap();
        finished(&mut c).is_empty()
    });
    assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM jobq.edges", &[]), 0, "a pruned job's edges go with it");
}

/// Large fan-ins hammered in every isolation level: a job awaiting 300 jobs and a job depending
/// on 150 of them (with 'cancel'), while 8 sessions finish those jobs in batches of 1 to 5 in
/// shuffled orders: the awaiting job becomes ready exactly once,
/// the dependent is cancelled exactly once by the one parent that dies, and no session meets a
/// deadlock (under READ COMMITTED, no 40001 either).
#[test]
fn large_fan_ins_are_released_once_by_many_finishers() {
    let (cluster, db, mut c) = db();
    for iso in LEVELS {
        let w = register(&mut c);
        let queue = format!("fan-{iso:?}");
        let awaiter: i64 = one(&mut c, "SELECT jobq_enqueue($1)", &[&format!("{queue}-a")]);
        assert_eq!(checkout(&mut c, w, &format!("{queue}-a"), 1), vec![awaiter]);
        let jobs: Vec<i64> = c
            .query("SELECT * FROM jobq_enqueue_batch($1, array_fill('{}'::jsonb, ARRAY[300]))", &[&queue])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let dependent: i64 = one(&mut c, "SELECT jobq_enqueue($1, depends_on => $2)", &[&format!("{queue}-d"), &jobs[..150].to_vec()]);
        assert_eq!(one::<String>(&mut c, "SELECT jobq_await_jobs($1, $2, $3)", &[&awaiter, &w, &jobs]), "waiting");
        assert_eq!(checkout(&mut c, w, &queue, 300).len(), 300);
        // 8 sessions, each with every 8th job, shuffled, finished in batches of 1 to 5; job 77
        // (a parent of the dependent) dies.
        let dies = jobs[77];
        let threads: Vec<_> = (0..8usize)
            .map(|side| {
                let url = cluster.url(&db);
                let mut mine: Vec<i64> = jobs.iter().copied().skip(side).step_by(8).collect();
                let mut seed = side as u64 + 1;
                for i in (1..mine.len()).rev() {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    mine.swap(i, (seed >> 33) as usize % (i + 1));
                }
                std::thread::spawn(move || {
                    let mut s = Client::connect(&url, postgres::NoTls).unwrap();
                    for (k, batch) in mine.chunks(1 + side % 5).enumerate() {
                        let finish = |tx: &mut postgres::Transaction| -> Result<(), postgres::Error> {
                            if batch.contains(&dies) {
                                tx.execute("SELECT jobq_fail($1, $2, discard => true)", &[&dies, &w])?;
                            }
                            let rest: Vec<i64> = batch.iter().copied().filter(|j| *j != dies).collect();
                            let done: Vec<i64> = tx.query_one("SELECT jobq_complete_many($1, $2)", &[&w, &rest])?.get(0);
                            assert_eq!(done.len(), rest.len(), "batch {k} of side {side}");
                            Ok(())
                        };
                        strictly(&mut s, iso, finish);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(state(&mut c, awaiter), "ready", "{iso:?}");
        assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM jobq.ready WHERE id = $1", &[&awaiter]), 1);
        assert_eq!(state(&mut c, dependent), "cancelled", "{iso:?}");
        let last_error: Value = one(&mut c, "SELECT last_error FROM jobq.jobs WHERE id = $1", &[&dependent]);
        assert_eq!(last_error, json!({"parent": dies, "parent_state": "dead"}));
        assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM jobq.blocked WHERE job_id = ANY ($1)", &[&vec![awaiter, dependent]]), 0);
        assert_eq!(checkout(&mut c, w, &format!("{queue}-a"), 1), vec![awaiter]);
        assert!(complete(&mut c, awaiter, w));
        c.execute("SELECT jobq_unregister_worker($1)", &[&w]).unwrap();
        assert_job_tables_consistent(&mut c);
    }
}

/// Parents of two children finished in crossing orders, many times, in every isolation level:
/// one session completes q0 (a parent of the second child only) and q (of the first only) in
/// one batch, in id order, while another completes p (a parent of both): the first locks the
/// second child's count before the first's, the other in child order. Neither deadlocks, and
/// both children become ready once.
#[test]
fn parents_of_two_children_finished_in_crossing_orders_never_deadlock() {
    let (cluster, db, mut c) = db();
    for iso in LEVELS {
        let w = register(&mut c);
        let rounds = 80;
        let mut sets = Vec::new();
        for _ in 0..rounds {
            let q0: i64 = one(&mut c, "SELECT jobq_enqueue('cross')", &[]);
            let q: i64 = one(&mut c, "SELECT jobq_enqueue('cross')", &[]);
            let p: i64 = one(&mut c, "SELECT jobq_enqueue('cross')", &[]);
            let c1: i64 = one(&mut c, "SELECT jobq_enqueue('cross-child', depends_on => ARRAY[$1::bigint, $2::bigint])", &[&p, &q]);
            let c2: i64 = one(&mut c, "SELECT jobq_enqueue('cross-child', depends_on => ARRAY[$1::bigint, $2::bigint])", &[&p, &q0]);
            sets.push((q0, q, p, c1, c2));
        }
        assert_eq!(checkout(&mut c, w, "cross", 3 * rounds).len(), 3 * rounds as usize);
        let s2 = sets.clone();
        race(cluster.url(&db), 2, rounds as usize, move |s, side, round| {
            let (q0, q, p, _, _) = s2[round];
            let finish = |tx: &mut postgres::Transaction| -> Result<(), postgres::Error> {
                if side == 0 {
                    let done: Vec<i64> = tx.query_one("SELECT jobq_complete_many($1, ARRAY[$2::bigint, $3::bigint])", &[&w, &q0, &q])?.get(0);
                    assert_eq!(done, vec![q0, q]);
                } else {
                    assert!(tx.query_one("SELECT jobq_complete($1, $2)", &[&p, &w])?.get::<_, bool>(0));
                }
                Ok(())
            };
            strictly(s, iso, finish);
        });
        let children: Vec<i64> = sets.iter().flat_map(|x| [x.3, x.4]).collect();
        let ready: i64 = one(&mut c, "SELECT count(*) FROM jobq.ready WHERE id = ANY ($1)", &[&children]);
        assert_eq!(ready, 2 * rounds as i64, "{iso:?}: every child ready, once");
        c.execute("SELECT jobq_unregister_worker($1)", &[&w]).unwrap();
        assert_job_tables_consistent(&mut c);
    }
}

/// Two parents of one child completed at once from two sessions, many times, in every
/// isolation level: the child becomes ready exactly once.
#[test]
fn two_parents_completing_at_once_release_the_child_once() {
    let (cluster, db, mut c) = db();
    for iso in LEVELS {
        let w = register(&mut c);
        let rounds = 60;
        let mut triples = Vec::new();
        for _ in 0..rounds {
            let a: i64 = one(&mut c, "SELECT jobq_enqueue('race2')", &[]);
            let b: i64 = one(&mut c, "SELECT jobq_enqueue('race2')", &[]);
            let child: i64 = one(&mut c, "SELECT jobq_enqueue('race2-child', depends_on => ARRAY[$1::bigint, $2::bigint])", &[&a, &b]);
            triples.push((a, b, child));
        }
        assert_eq!(checkout(&mut c, w, "race2", 2 * rounds).len(), 2 * rounds as usize);
        let parents = triples.clone();
        race(cluster.url(&db), 2, rounds as usize, move |s, side, round| {
            let id = if side == 0 { parents[round].0 } else { parents[round].1 };
            assert!(retrying(s, iso, |tx| tx.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).map(|r| r.get::<_, bool>(0))));
        });
        let children: Vec<i64> = triples.iter().map(|t| t.2).collect();
        let ready: i64 = one(&mut c, "SELECT count(*) FROM jobq.ready WHERE id = ANY ($1)", &[&children]);
        assert_eq!(ready, rounds as i64, "{iso:?}: every child ready, once");
        assert_eq!(checkout(&mut c, w, "race2-child", 1000).len(), rounds as usize);
        assert_job_tables_consistent(&mut c);
    }
}

/// An emit racing an await of the same event, many times, in every isolation level: the
/// awaiting job is never left blocked.
#[test]
fn an_emit_racing_an_await_never_loses_the_wake_up() {
    let (cluster, db, mut c) = db();
    for iso in LEVELS {
        let w = register(&mut c);
        let rounds = 60;
        let queue = format!("race-ev-{iso:?}");
        let ids: Vec<i64> = c.query("SELECT * FROM jobq_enqueue_batch($2, array_fill('{}'::jsonb, ARRAY[$1::int]))", &[&rounds, &queue]).unwrap().iter().map(|r| r.get(0)).collect();
        assert_eq!(checkout(&mut c, w, &queue, rounds).len(), rounds as usize);
        let jobs = ids.clone();
        race(cluster.url(&db), 2, rounds as usize, move |s, side, round| {
            let (id, event) = (jobs[round], format!("{iso:?}-{}", jobs[round]));
            if side == 0 {
                let got = retrying(s, iso, |tx| tx.query_one("SELECT jobq_await_event($1, $2, $3)", &[&id, &w, &event]).map(|r| r.get::<_, String>(0)));
                assert!(got == "waiting" || got == "emitted", "{got}");
            } else {
                let woken = retrying(s, iso, |tx| tx.query_one("SELECT jobq_emit_event($1)", &[&event]).map(|r| r.get::<_, i32>(0)));
                assert!(woken == 0 || woken == 1, "{woken}");
            }
        });
        let blocked: i64 = one(&mut c, "SELECT count(*) FROM jobq.jobs WHERE id = ANY ($1) AND state = 'blocked'", &[&ids]);
        assert_eq!(blocked, 0, "{iso:?}: an await lost its wake-up");
        let with_checkpoint: i64 = one(&mut c, "SELECT count(*) FROM jobq.jobs WHERE id = ANY ($1) AND checkpoints <> '{}'", &[&ids]);
        assert_eq!(with_checkpoint, rounds as i64, "{iso:?}: every job has its event's checkpoint");
        c.execute("SELECT jobq_unregister_worker($1)", &[&w]).unwrap();
        assert_job_tables_consistent(&mut c);
    }
}

/// The jobs a job awaits finishing while the await commits, and a dependent enqueued while its
/// parent completes, many times, in every isolation level: nothing stays blocked, with no reap
/// pass to help (under REPEATABLE READ a completion whose snapshot predates the dependent's
/// edge gets 40001 and its retry tells the child).
#[test]
fn dependents_racing_their_parents_completion_are_never_left_blocked() {
    let (cluster, db, mut c) = db();
    for iso in LEVELS {
        let w = register(&mut c);
        let rounds = 60;
        let (pq, aq) = (format!("race-p-{iso:?}"), format!("race-a-{iso:?}"));
        let batch = |c: &mut Client, q: &str| -> Vec<i64> {
            c.query("SELECT * FROM jobq_enqueue_batch($2, array_fill('{}'::jsonb, ARRAY[$1::int]))", &[&rounds, &q]).unwrap().iter().map(|r| r.get(0)).collect()
        };
        let (parents, awaiters) = (batch(&mut c, &pq), batch(&mut c, &aq));
        assert_eq!(checkout(&mut c, w, &pq, rounds).len(), rounds as usize);
        assert_eq!(checkout(&mut c, w, &aq, rounds).len(), rounds as usize);
        let children = Arc::new(Mutex::new(Vec::new()));
        let (ps, aw, ch) = (parents.clone(), awaiters.clone(), children.clone());
        race(cluster.url(&db), 3, rounds as usize, move |s, side, round| {
            let (p, a) = (ps[round], aw[round]);
            match side {
                0 => assert!(retrying(s, iso, |tx| tx.query_one("SELECT jobq_complete($1, $2)", &[&p, &w]).map(|r| r.get::<_, bool>(0)))),
                1 => {
                    let got = retrying(s, iso, |tx| tx.query_one("SELECT jobq_await_jobs($1, $2, ARRAY[$3::bigint])", &[&a, &w, &p]).map(|r| r.get::<_, String>(0)));
                    assert!(got == "waiting" || got == "finished", "{got}");
                }
                _ => {
                    let id = retrying(s, iso, |tx| tx.query_one("SELECT jobq_enqueue('race-c', depends_on => ARRAY[$1::bigint])", &[&p]).map(|r| r.get::<_, i64>(0)));
                    ch.lock().unwrap().push(id);
                }
            }
        });
        let children = children.lock().unwrap().clone();
        assert_eq!(children.len(), rounds as usize);
        if sql_edition().is_some() {
            // The SQL edition cannot refuse a completion that does not see a dependent's edge
            // (src/edges.rs); the next pass tells those dependents (src/sql/twins/edges.sql).
            c.batch_execute("SELECT jobq_reap()").unwrap();
        }
        let stuck: i64 = one(&mut c, "SELECT count(*) FROM jobq.jobs WHERE (id = ANY ($1) OR id = ANY ($2)) AND state = 'blocked'", &[&awaiters, &children]);
        assert_eq!(stuck, 0, "{iso:?}: a job left blocked after its parent finished");
        let ready: i64 = one(&mut c, "SELECT count(*) FROM jobq.ready WHERE id = ANY ($1)", &[&children]);
        assert_eq!(ready, rounds as i64, "{iso:?}: every dependent ready, once");
        c.execute("SELECT jobq_unregister_worker($1)", &[&w]).unwrap();
        assert_job_tables_consistent(&mut c);
    }
}

/// A cancel of a blocked child racing its parent's completion: the child ends cancelled (the
/// cancel finds it blocked, or ready once the parent woke it), never blocked, never ready.
#[test]
fn a_cancel_racing_a_parents_completion_leaves_one_outcome() {
    let (cluster, db, mut c) = db();
    let w = register(&mut c);
    let rounds = 80;
    let mut pairs = Vec::new();
    for _ in 0..rounds {
        let p: i64 = one(&mut c, "SELECT jobq_enqueue('race-x')", &[]);
        let child: i64 = one(&mut c, "SELECT jobq_enqueue('race-xc', depends_on => ARRAY[$1::bigint])", &[&p]);
        pairs.push((p, child));
    }
    assert_eq!(checkout(&mut c, w, "race-x", rounds).len(), rounds as usize);
    let both = pairs.clone();
    race(cluster.url(&db), 2, rounds as usize, move |s, side, round| {
        let (p, child) = both[round];
        if side == 0 {
            assert!(one::<bool>(s, "SELECT jobq_complete($1, $2)", &[&p, &w]));
        } else {
            assert_eq!(one::<String>(s, "SELECT jobq_cancel($1)", &[&child]), "cancelled");
        }
    });
    let children: Vec<i64> = pairs.iter().map(|p| p.1).collect();
    let cancelled: i64 = one(&mut c, "SELECT count(*) FROM jobq.jobs WHERE id = ANY ($1) AND state = 'cancelled'", &[&children]);
    assert_eq!(cancelled, rounds as i64);
    assert_job_tables_consistent(&mut c);
}

/// A whole graph in one call (jobq_enqueue_graph): a diamond whose jobs run in its order, and
/// bad graphs refused with 22023, writing nothing.
#[test]
fn a_graph_is_enqueued_in_one_call() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let earlier: i64 = one(&mut c, "SELECT jobq_enqueue('g')", &[]);
    let graph = json!([
        {"queue": "g", "kind": "fetch", "payload": {"n": 0}},
        {"queue": "g", "kind": "left", "after": [0], "priority": 1},
        {"queue": "g", "kind": "right", "after": [0], "depends_on": [earlier]},
        {"queue": "g", "kind": "join", "after": [1, 2, 1], "on_parent_failure": "run", "max_attempts": 3}
    ]);
    let ids: Vec<i64> = c.query("SELECT * FROM jobq_enqueue_graph($1)", &[&graph]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(ids.len(), 4);
    let rows: Vec<(String, Option<Vec<i64>>, i32)> = c
        .query("SELECT state, depends_on, max_attempts FROM jobq.jobs WHERE id = ANY ($1) ORDER BY id", &[&ids])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(rows[0], ("ready".into(), None, 25));
    assert_eq!(rows[1], ("blocked".into(), Some(vec![ids[0]]), 25));
    assert_eq!(rows[2], ("blocked".into(), Some(vec![earlier, ids[0]]), 25));
    assert_eq!(rows[3], ("blocked".into(), Some(vec![ids[1], ids[2]]), 3));
    // They run in the graph's order.
    let mut order = Vec::new();
    for _ in 0..6 {
        for id in checkout(&mut c, w, "g", 10) {
            order.push(id);
            assert!(complete(&mut c, id, w));
        }
    }
    assert_eq!(order.len(), 5);
    assert_eq!(&order[..2], &[earlier, ids[0]]);
    assert_eq!(order[4], ids[3], "the join runs last");
    // Bad graphs: refused, nothing written.
    let before: i64 = one(&mut c, "SELECT count(*) FROM jobq.jobs", &[]);
    for (bad, code) in [
        (json!({"queue": "g"}), "22023"),
        (json!([{"queue": "g", "after": [0]}]), "22023"),
        (json!([{"queue": "g"}, {"queue": "g", "after": [1]}]), "22023"),
        (json!([{"queue": "g", "colour": "red"}]), "22023"),
        (json!([{"queue": "g", "priority": "high"}]), "22023"),
        (json!([{"queue": "g", "after": "0"}]), "22023"),
        (json!([{"queue": "g"}, {"queue": "g", "depends_on": [987654321]}]), "22023"),
        (json!(["g"]), "22023"),
        (json!([{"payload": {}}]), "22004"),
    ] {
        let e = c.query("SELECT * FROM jobq_enqueue_graph($1)", &[&bad]).unwrap_err();
        assert_eq!(sqlstate(&e), code, "{bad}: {e:?}");
    }
    let e = c.query("SELECT * FROM jobq_enqueue_graph(NULL)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "22004");
    assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM jobq.jobs", &[]), before);
    // A unique key already held: discarded (NULL), and an element after it is refused.
    let held = json!([{"queue": "g", "unique_key": "u", "on_conflict": "discard"}]);
    c.query("SELECT * FROM jobq_enqueue_graph($1)", &[&held]).unwrap();
    let again: Vec<Option<i64>> = c.query("SELECT * FROM jobq_enqueue_graph($1)", &[&held]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(again, vec![None]);
    let after_discarded = json!([{"queue": "g", "unique_key": "u", "on_conflict": "discard"}, {"queue": "g", "after": [0]}]);
    assert_eq!(sqlstate(&c.query("SELECT * FROM jobq_enqueue_graph($1)", &[&after_discarded]).unwrap_err()), "22023");
    assert_job_tables_consistent(&mut c);
}

/// A reap pass and a suspension of the same job, many times, in every isolation level: one of
/// them wins. Either the job is snoozed (its attempt given back) and the pass finds nothing of
/// it to requeue, or the pass requeues it (the attempt interrupted) and the snooze, the job no
/// longer its worker's, returns false; never both, never neither.
#[test]
fn a_reap_pass_and_a_suspension_of_one_job_leave_one_outcome() {
    let (cluster, db, mut c) = db();
    for iso in LEVELS {
        let rounds = 40;
        let queue = format!("reap-race-{iso:?}");
        let mut pairs = Vec::new();
        for _ in 0..rounds {
            let w = register(&mut c);
            let id: i64 = one(&mut c, "SELECT jobq_enqueue($1)", &[&queue]);
            assert_eq!(checkout(&mut c, w, &queue, 1), vec![id]);
            pairs.push((id, w));
        }
        let snoozed = Arc::new(Mutex::new(Vec::new()));
        let (jobs, got) = (pairs.clone(), snoozed.clone());
        race(cluster.url(&db), 2, rounds as usize, move |s, side, round| {
            let (id, w) = jobs[round];
            if side == 0 {
                let ok = retrying(s, iso, |tx| tx.query_one("SELECT jobq_snooze($1, $2, now())", &[&id, &w]).map(|r| r.get::<_, bool>(0)));
                got.lock().unwrap().push((id, ok));
            } else {
                // The worker dies (its heartbeat an hour old) and a pass reaps it, in one transaction.
                retrying(s, iso, |tx| {
                    tx.execute("UPDATE jobq.workers SET heartbeat_at = now() - interval '1 hour' WHERE id = $1", &[&w])?;
                    tx.query("SELECT * FROM jobq_reap()", &[]).map(|_| ())
                });
            }
        });
        c.execute("SELECT jobq_reap()", &[]).unwrap();
        for (id, ok) in snoozed.lock().unwrap().iter() {
            let r = c.query_one("SELECT state, attempt, interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[id]).unwrap();
            let (state, attempt, interrupted): (String, i32, bool) = (r.get(0), r.get(1), r.get(2));
            assert_eq!(state, "ready", "{iso:?}: job {id}");
            if *ok {
                assert_eq!((attempt, interrupted), (0, false), "{iso:?}: job {id} snoozed: its attempt given back");
            } else {
                assert_eq!((attempt, interrupted), (1, true), "{iso:?}: job {id} requeued by the pass");
            }
        }
        assert_job_tables_consistent(&mut c);
    }
}
