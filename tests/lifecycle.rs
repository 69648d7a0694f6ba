//! The job lifecycle of the contract over real connections: states, returns, ordering, pause,
//! cancel, retry, backoff, fencing, bad input, search-path hijack, LISTEN/NOTIFY.
mod common;

use common::*;
use postgres::Client;
use serde_json::{json, Value};
use std::time::Duration;
use uuid::Uuid;

fn enqueue(c: &mut Client, sql_args: &str) -> i64 {
    c.query_one(&format!("SELECT jobq_enqueue({sql_args})"), &[]).unwrap().get(0)
}

fn checkout(c: &mut Client, w: Uuid, queues: Option<&[&str]>, max: i32) -> Vec<i64> {
    let queues: Option<Vec<String>> = queues.map(|q| q.iter().map(|s| s.to_string()).collect());
    c.query("SELECT id FROM jobq_checkout($1, $2, $3)", &[&w, &queues, &max])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn state(c: &mut Client, id: i64) -> String {
    c.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0)
}

#[test]
fn a_job_goes_from_ready_to_executing_to_completed() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let id = enqueue(&mut c, "'mail', '{\"to\": 1}', kind => 'Mailer', priority => 3, max_attempts => 4");
    assert_eq!(state(&mut c, id), "ready");

    let row = c.query_one("SELECT * FROM jobq_checkout($1)", &[&w]).unwrap();
    assert_eq!(row.get::<_, i64>("id"), id);
    assert_eq!(row.get::<_, String>("queue"), "mail");
    assert_eq!(row.get::<_, Option<String>>("kind").as_deref(), Some("Mailer"));
    assert_eq!(row.get::<_, Value>("payload"), json!({"to": 1}));
    assert_eq!(row.get::<_, i32>("priority"), 3);
    assert_eq!(row.get::<_, i32>("attempt"), 1);
    assert_eq!(row.get::<_, i32>("max_attempts"), 4);
    assert_eq!(row.get::<_, Option<Value>>("last_error"), None);
    assert!(row.get::<_, Option<std::time::SystemTime>>("interrupted_at").is_none());
    assert_eq!(state(&mut c, id), "executing");

    let done: bool = c.query_one("SELECT jobq_complete($1, $2, '{\"ok\": true}')", &[&id, &w]).unwrap().get(0);
    assert!(done);
    let r = c.query_one("SELECT state, result, finished_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[&id]).unwrap();
    assert_eq!(r.get::<_, String>(0), "completed");
    assert_eq!(r.get::<_, Value>(1), json!({"ok": true}));
    assert!(r.get::<_, bool>(2));
    // A second completion is refused: the job is no longer executing under this worker.
    let again: bool = c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get(0);
    assert!(!again);
    // Nothing is left to check out.
    assert!(checkout(&mut c, w, None, 10).is_empty());
}

#[test]
fn checkout_orders_by_priority_then_run_at_then_id() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let a = enqueue(&mut c, "'q', priority => 5");
    let b = enqueue(&mut c, "'q', priority => 1, run_at => now() - interval '1 minute'");
    let d = enqueue(&mut c, "'q', priority => 1, run_at => now() - interval '2 minutes'");
    let e = enqueue(&mut c, "'q', priority => -7");
    let f = enqueue(&mut c, "'q', priority => 1, run_at => now() - interval '2 minutes'");
    // One at a time and in one batch: the same order, and the batch comes back in claim order.
    let one_by_one: Vec<i64> = (0..2).flat_map(|_| checkout(&mut c, w, Some(&["q"]), 1)).collect();
    assert_eq!(one_by_one, vec![e, d]);
    assert_eq!(checkout(&mut c, w, None, 10), vec![f, b, a]);
}

#[test]
fn future_jobs_are_not_due_and_queue_filters_apply() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let later = enqueue(&mut c, "'q1', run_at => now() + interval '1 hour'");
    let q1 = enqueue(&mut c, "'q1'");
    let q2 = enqueue(&mut c, "'q2'");
    let q3 = enqueue(&mut c, "'q3'");
    assert_eq!(checkout(&mut c, w, Some(&["q2"]), 5), vec![q2]);
    assert_eq!(checkout(&mut c, w, Some(&["nope"]), 5), Vec::<i64>::new());
    assert_eq!(checkout(&mut c, w, Some(&[]), 5), Vec::<i64>::new());
    assert_eq!(checkout(&mut c, w, Some(&["q1", "q3"]), 5), vec![q1, q3]);
    assert!(checkout(&mut c, w, None, 5).is_empty(), "the future job is not due");
    assert_eq!(state(&mut c, later), "ready");
}

/// A checkout of one queue reads that queue's rows of jobq.ready only, whatever the statistics
/// say. Its statements keep a generic plan, which estimates `queue = $1` from the number of
/// distinct queues ANALYZE saw; where it saw one (a database that started with one queue),
/// that estimate was "every row", and the plan walked the all-queues index (ready_any),
/// reading every row of the other queues ahead of this one's: here 20,000 rows per checkout.
/// jobq.ready.queue carries a fixed n_distinct (src/sql/schema.sql), so the plan walks
/// ready_by_queue from this queue's first row.
#[test]
fn a_checkout_of_one_queue_reads_no_other_queues_rows() {
    let (cluster, name, mut c) = db();
    // Statistics taken while one queue exists, and kept (no autovacuum analyzes it meanwhile).
    c.batch_execute(
        "ALTER TABLE jobq.ready SET (autovacuum_enabled = false);
         SELECT count(*) FROM jobq_enqueue_batch('big', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 20000)));
         ANALYZE jobq.ready;
         SELECT count(*) FROM jobq_enqueue_batch('small', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 10)));",
    )
    .unwrap();
    // A new session plans its statements now, from those statistics.
    let mut s = cluster.connect(&name);
    let w = register(&mut s);
    s.batch_execute("BEGIN").unwrap();
    for _ in 0..10 {
        assert_eq!(checkout(&mut s, w, Some(&["small"]), 1).len(), 1);
    }
    let fetched: i64 = s
        .query_one("SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relid = 'jobq.ready'::regclass", &[])
        .unwrap()
        .get(0);
    s.batch_execute("COMMIT").unwrap();
    assert!(fetched <= 50, "10 checkouts of queue small read {fetched} rows of jobq.ready");
}

#[test]
fn max_jobs_takes_a_batch() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let ids: Vec<i64> = c
        .query("SELECT jobq_enqueue_batch('b', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 7) g))", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len(), 7);
    assert!(ids.windows(2).all(|p| p[0] < p[1]), "ids come back in payload order");
    let payloads: Vec<Value> = c
        .query("SELECT payload FROM jobq.jobs WHERE id = ANY($1) ORDER BY id", &[&ids])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(payloads, (1..=7).map(|i| json!({"i": i})).collect::<Vec<_>>());
    assert_eq!(checkout(&mut c, w, None, 3), ids[0..3].to_vec());
    assert_eq!(checkout(&mut c, w, None, 10), ids[3..7].to_vec());
    // An empty batch enqueues nothing.
    let n = c.query("SELECT jobq_enqueue_batch('b', '{}')", &[]).unwrap().len();
    assert_eq!(n, 0);
}

#[test]
fn pause_and_resume_queue_kind_and_kind_in_queue() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let a1 = enqueue(&mut c, "'a', kind => 'K1'");
    let a2 = enqueue(&mut c, "'a', kind => 'K2'");
    let b1 = enqueue(&mut c, "'b', kind => 'K1'");
    let b2 = enqueue(&mut c, "'b', kind => 'K2'");

    c.execute("SELECT jobq_pause('a')", &[]).unwrap();
    c.execute("SELECT jobq_pause(NULL, 'K1')", &[]).unwrap();
    c.execute("SELECT jobq_pause('b', 'K2')", &[]).unwrap();
    // Enqueue still works while paused.
    let a3 = enqueue(&mut c, "'a', kind => 'K3'");
    assert!(checkout(&mut c, w, None, 10).is_empty());

    // A resume with other arguments does not undo a pause.
    c.execute("SELECT jobq_resume('a', 'K1')", &[]).unwrap();
    c.execute("SELECT jobq_resume('b')", &[]).unwrap();
    assert!(checkout(&mut c, w, None, 10).is_empty());

    c.execute("SELECT jobq_resume('b', 'K2')", &[]).unwrap();
    assert_eq!(checkout(&mut c, w, None, 10), vec![b2]);
    c.execute("SELECT jobq_resume(NULL, 'K1')", &[]).unwrap();
    assert_eq!(checkout(&mut c, w, None, 10), vec![b1]);
    c.execute("SELECT jobq_resume('a')", &[]).unwrap();
    assert_eq!(checkout(&mut c, w, Some(&["a"]), 10), vec![a1, a2, a3]);

    let e = c.execute("SELECT jobq_pause(NULL, NULL)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "22004");
    let e = c.execute("SELECT jobq_resume(NULL)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "22004");
}

#[test]
fn cancel_of_ready_and_executing_jobs() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let ready = enqueue(&mut c, "'q', priority => 9");
    let running = enqueue(&mut c, "'q'");
    let running2 = enqueue(&mut c, "'q'");
    assert_eq!(checkout(&mut c, w, None, 2), vec![running, running2]);

    let s: String = c.query_one("SELECT jobq_cancel($1)", &[&ready]).unwrap().get(0);
    assert_eq!(s, "cancelled");
    assert_eq!(state(&mut c, ready), "cancelled");

    let hb: Vec<i64> = c.query_one("SELECT jobq_heartbeat($1)", &[&w]).unwrap().get(0);
    assert!(hb.is_empty(), "nothing requested yet: an empty array, not NULL");
    for id in [running, running2] {
        let s: String = c.query_one("SELECT jobq_cancel($1)", &[&id]).unwrap().get(0);
        assert_eq!(s, "executing");
    }
    let hb: Vec<i64> = c.query_one("SELECT jobq_heartbeat($1)", &[&w]).unwrap().get(0);
    assert_eq!(hb, vec![running, running2]);

    // The worker stops the first (fail -> cancelled, never retried), finishes the second anyway.
    let s: String = c.query_one("SELECT jobq_fail($1, $2, '{\"e\": \"stopped\"}')", &[&running, &w]).unwrap().get(0);
    assert_eq!(s, "cancelled");
    assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&running2, &w]).unwrap().get::<_, bool>(0));
    assert_eq!(state(&mut c, running2), "completed");
    // A finished job keeps its state; an unknown id gives NULL.
    let s: String = c.query_one("SELECT jobq_cancel($1)", &[&running2]).unwrap().get(0);
    assert_eq!(s, "completed");
    let s: Option<String> = c.query_one("SELECT jobq_cancel(987654321)", &[]).unwrap().get(0);
    assert_eq!(s, None);
    assert!(checkout(&mut c, w, None, 10).is_empty());
}

#[test]
fn fail_retries_with_backoff_then_dies_and_retry_revives() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let id = enqueue(&mut c, "'q', max_attempts => 2");
    assert_eq!(checkout(&mut c, w, None, 1), vec![id]);
    let before: std::time::SystemTime = c.query_one("SELECT clock_timestamp()", &[]).unwrap().get(0);
    let s: String = c.query_one("SELECT jobq_fail($1, $2, '{\"error\": \"boom\"}')", &[&id, &w]).unwrap().get(0);
    assert_eq!(s, "ready");
    // The default backoff pushed run_at into the future: not due now.
    let run_at: std::time::SystemTime = c.query_one("SELECT run_at FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
    assert!(run_at > before, "backoff moves run_at forward");
    assert!(checkout(&mut c, w, None, 1).is_empty());
    // Make it due, and the error is visible. (A test-only shortcut as superuser: the job
    // row and its row in the waiting set, jobq.ready, carry run_at together.)
    c.batch_execute(&format!(
        "UPDATE jobq.live_jobs SET run_at = now() WHERE id = {id}; UPDATE jobq.ready SET run_at = now() WHERE id = {id};"
    ))
    .unwrap();
    let row = c.query_one("SELECT id, attempt, last_error FROM jobq_checkout($1)", &[&w]).unwrap();
    assert_eq!(row.get::<_, i64>(0), id);
    assert_eq!(row.get::<_, i32>(1), 2);
    assert_eq!(row.get::<_, Value>(2), json!({"error": "boom"}));
    // Attempts exhausted: dead.
    let s: String = c.query_one("SELECT jobq_fail($1, $2, '{\"error\": \"again\"}')", &[&id, &w]).unwrap().get(0);
    assert_eq!(s, "dead");
    assert_eq!(state(&mut c, id), "dead");

    let ok: bool = c.query_one("SELECT jobq_retry($1)", &[&id]).unwrap().get(0);
    assert!(ok);
    let row = c.query_one("SELECT state, attempt FROM jobq.jobs WHERE id = $1", &[&id]).unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, i32>(1)), ("ready".into(), 0));
    assert_eq!(checkout(&mut c, w, None, 1), vec![id]);
    // Retry of a job in any other state: false.
    assert!(!c.query_one("SELECT jobq_retry($1)", &[&id]).unwrap().get::<_, bool>(0));
    // retry_in sets the delay exactly; discard kills at once.
    let s: String = c.query_one("SELECT jobq_fail($1, $2, retry_in => interval '0')", &[&id, &w]).unwrap().get(0);
    assert_eq!(s, "ready");
    assert_eq!(checkout(&mut c, w, None, 1), vec![id]);
    let s: String = c.query_one("SELECT jobq_fail($1, $2, discard => true)", &[&id, &w]).unwrap().get(0);
    assert_eq!(s, "dead");
    let cancelled = enqueue(&mut c, "'q'");
    c.execute("SELECT jobq_cancel($1)", &[&cancelled]).unwrap();
    assert!(c.query_one("SELECT jobq_retry($1)", &[&cancelled]).unwrap().get::<_, bool>(0));
    // Every failed attempt's error, oldest first, across the retry (attempt numbers restart).
    let errors: Value = c
        .query_one(
            "SELECT jsonb_agg(jsonb_build_object('attempt', e->'attempt', 'error', e->'error', 'at', (e->>'at')::timestamptz <= now()))
               FROM jobq.jobs, jsonb_array_elements(errors) e WHERE id = $1",
            &[&id],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        errors,
        json!([
            {"attempt": 1, "error": {"error": "boom"}, "at": true},
            {"attempt": 2, "error": {"error": "again"}, "at": true},
            {"attempt": 1, "error": null, "at": true},
            {"attempt": 2, "error": null, "at": true}
        ])
    );
}

#[test]
fn a_job_keeps_its_last_100_errors_and_the_reapers_interruptions() {
    let (cluster, db_name, mut c) = db();
    let w = register(&mut c);
    let id = enqueue(&mut c, "'hist', max_attempts => 500");
    for i in 1..=101 {
        assert_eq!(checkout(&mut c, w, None, 1), vec![id]);
        let s: String = c.query_one("SELECT jobq_fail($1, $2, jsonb_build_object('n', $3::int), retry_in => '0')", &[&id, &w, &i]).unwrap().get(0);
        assert_eq!(s, "ready");
    }
    let (n, first, last): (i32, i32, i32) = {
        let r = c
            .query_one(
                "SELECT jsonb_array_length(errors), (errors->0->'error'->>'n')::int, (errors->-1->'error'->>'n')::int FROM jobq.jobs WHERE id = $1",
                &[&id],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!((n, first, last), (100, 2, 101), "the last 100, oldest first");
    // A worker whose session ends mid-attempt: the reaper's interruption is recorded.
    let mut gone = cluster.connect(&db_name);
    let g: uuid::Uuid = gone.query_one("SELECT jobq_register_worker(bind_to_session => true)", &[]).unwrap().get(0);
    assert_eq!(gone.query("SELECT id FROM jobq_checkout($1, ARRAY['hist'])", &[&g]).unwrap().len(), 1);
    drop(gone);
    // (No background worker serves this database: a reap pass by hand, once the session is gone.)
    wait_until("a reap pass to interrupt the attempt", Duration::from_secs(60), || {
        c.execute("SELECT * FROM jobq_reap()", &[]).unwrap();
        c.query_one("SELECT state = 'ready' FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0)
    });
    let last: Value = c.query_one("SELECT errors->-1 FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
    assert_eq!((last["attempt"].clone(), last["interrupted"].clone()), (json!(102), json!(true)));
}

#[test]
fn default_backoff_grows_with_attempts_and_is_capped() {
    let (_, _, mut c) = db();
    // 2^attempt seconds with +/-25% jitter, capped at one hour.
    let rows = c
        .query(
            "SELECT a, min(s), max(s) FROM (
               SELECT a, extract(epoch FROM jobq._backoff(a))::float8 AS s
                 FROM generate_series(1, 20) a, generate_series(1, 50) n) x
             GROUP BY a ORDER BY a",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), 20);
    for r in rows {
        let (a, lo, hi): (i32, f64, f64) = (r.get(0), r.get(1), r.get(2));
        let base = 2f64.powi(a);
        assert!(lo >= (base * 0.75).min(3600.0) - 1e-6, "attempt {a}: min {lo}");
        assert!(hi <= (base * 1.25).min(3600.0) + 1e-6, "attempt {a}: max {hi}");
    }
}

#[test]
fn fencing_a_worker_cannot_finish_a_job_it_does_not_hold() {
    let (_, _, mut c) = db();
    let owner = register(&mut c);
    let other = register(&mut c);
    let id = enqueue(&mut c, "'q'");
    assert_eq!(checkout(&mut c, owner, None, 1), vec![id]);
    let snapshot = |c: &mut Client| -> String {
        c.query_one("SELECT row_to_json(j)::text FROM jobq.jobs j WHERE id = $1", &[&id]).unwrap().get(0)
    };
    let before = snapshot(&mut c);
    assert!(!c.query_one("SELECT jobq_complete($1, $2)", &[&id, &other]).unwrap().get::<_, bool>(0));
    assert_eq!(c.query_one("SELECT jobq_fail($1, $2)", &[&id, &other]).unwrap().get::<_, Option<String>>(0), None);
    let stranger = Uuid::new_v4();
    assert!(!c.query_one("SELECT jobq_complete($1, $2)", &[&id, &stranger]).unwrap().get::<_, bool>(0));
    assert_eq!(c.query_one("SELECT jobq_fail($1, $2)", &[&id, &stranger]).unwrap().get::<_, Option<String>>(0), None);
    assert!(!c.query_one("SELECT jobq_complete(424242, $1)", &[&owner]).unwrap().get::<_, bool>(0));
    assert_eq!(snapshot(&mut c), before, "nothing changed");
    // After a graceful unregister the old owner is fenced off too.
    let n: i32 = c.query_one("SELECT jobq_unregister_worker($1)", &[&owner]).unwrap().get(0);
    assert_eq!(n, 1);
    assert!(!c.query_one("SELECT jobq_complete($1, $2)", &[&id, &owner]).unwrap().get::<_, bool>(0));
    assert_eq!(state(&mut c, id), "ready");
}

#[test]
fn unregister_returns_jobs_without_counting_the_attempt() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let a = enqueue(&mut c, "'q'");
    let b = enqueue(&mut c, "'q'");
    c.execute("SELECT jobq_acquire_lock('some-lock', $1)", &[&w]).unwrap();
    assert_eq!(checkout(&mut c, w, None, 2), vec![a, b]);
    let n: i32 = c.query_one("SELECT jobq_unregister_worker($1)", &[&w]).unwrap().get(0);
    assert_eq!(n, 2);
    let rows = c.query("SELECT state, attempt, interrupted_at IS NULL FROM jobq.jobs ORDER BY id", &[]).unwrap();
    for r in rows {
        assert_eq!((r.get::<_, String>(0), r.get::<_, i32>(1), r.get::<_, bool>(2)), ("ready".into(), 0, true));
    }
    let locks: i64 = c.query_one("SELECT count(*) FROM jobq.locks", &[]).unwrap().get(0);
    assert_eq!(locks, 0);
    let workers: i64 = c.query_one("SELECT count(*) FROM jobq.workers", &[]).unwrap().get(0);
    assert_eq!(workers, 0);
    // Every worker function now answers JQ001 for it.
    for sql in [
        "SELECT jobq_heartbeat($1)",
        "SELECT * FROM jobq_checkout($1)",
        "SELECT jobq_unregister_worker($1)",
        "SELECT jobq_acquire_lock('x', $1)",
        "SELECT jobq_release_lock('x', $1)",
    ] {
        let e = c.query(sql, &[&w]).unwrap_err();
        assert_eq!(sqlstate(&e), "JQ001", "{sql}");
    }
}

#[test]
fn register_stores_name_and_metadata() {
    let (_, _, mut c) = db();
    let w: Uuid = c.query_one("SELECT jobq_register_worker('billing-1', '{\"host\": \"a\"}')", &[]).unwrap().get(0);
    let r = c.query_one("SELECT name, metadata, backend_pid FROM jobq.workers WHERE id = $1", &[&w]).unwrap();
    assert_eq!(r.get::<_, Option<String>>(0).as_deref(), Some("billing-1"));
    assert_eq!(r.get::<_, Value>(1), json!({"host": "a"}));
    assert_eq!(r.get::<_, Option<i32>>(2), None);
    let bound: Uuid = c.query_one("SELECT jobq_register_worker(bind_to_session => true)", &[]).unwrap().get(0);
    let pid: Option<i32> = c.query_one("SELECT backend_pid FROM jobq.workers WHERE id = $1", &[&bound]).unwrap().get(0);
    let me: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    assert_eq!(pid, Some(me));
}

#[test]
fn queue_stats_counts_per_queue() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    enqueue(&mut c, "'s1', run_at => now() - interval '10 minutes'");
    enqueue(&mut c, "'s1'");
    enqueue(&mut c, "'s1', run_at => now() + interval '1 day'");
    let dead = enqueue(&mut c, "'s2', max_attempts => 1");
    enqueue(&mut c, "'s2', priority => 5");
    assert_eq!(checkout(&mut c, w, Some(&["s2"]), 1), vec![dead]);
    let cols: Vec<String> = c
        .query("SELECT column_name::text FROM information_schema.columns WHERE table_schema = 'jobq' AND table_name = 'queue_stats' ORDER BY ordinal_position", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(cols, ["queue", "ready", "scheduled", "executing", "dead", "oldest_ready_age"]);

    let stats = |c: &mut Client, q: &str| -> (i64, i64, i64, i64, bool) {
        let r = c
            .query_one("SELECT ready, scheduled, executing, dead, oldest_ready_age >= interval '10 minutes' FROM jobq.queue_stats WHERE queue = $1", &[&q])
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3), r.get::<_, Option<bool>>(4).unwrap_or(false))
    };
    assert_eq!(stats(&mut c, "s1"), (2, 1, 0, 0, true));
    assert_eq!(stats(&mut c, "s2"), (1, 0, 1, 0, false));
    c.query_one("SELECT jobq_fail($1, $2)", &[&dead, &w]).unwrap();
    assert_eq!(stats(&mut c, "s2"), (1, 0, 0, 1, false));
    // A queue with only future jobs: no oldest ready age.
    enqueue(&mut c, "'s3', run_at => now() + interval '1 hour'");
    let age: Option<String> =
        c.query_one("SELECT oldest_ready_age::text FROM jobq.queue_stats WHERE queue = 's3'", &[]).unwrap().get(0);
    assert_eq!(age, None);
}

/// jobq.queue_stats has one row per queue with a job not yet pruned, whatever the states of
/// its jobs, and the counts those jobs have: the view finds the history's queues through an
/// index instead of reading the finished jobs, and this checks it against a plain count over
/// jobq.jobs, before and after the history of some queues is pruned.
#[test]
fn queue_stats_has_a_row_for_every_queue_with_a_job_not_yet_pruned() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    for i in 0..40 {
        let id = enqueue(&mut c, &format!("'h{i}'"));
        assert_eq!(checkout(&mut c, w, Some(&[format!("h{i}").as_str()]), 1), vec![id]);
        assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
    }
    let cancelled = enqueue(&mut c, "'hc'");
    c.execute("SELECT jobq_cancel($1)", &[&cancelled]).unwrap();
    let dead = enqueue(&mut c, "'hd', max_attempts => 1");
    assert_eq!(checkout(&mut c, w, Some(&["hd"]), 1), vec![dead]);
    c.execute("SELECT jobq_fail($1, $2)", &[&dead, &w]).unwrap();
    let parent = enqueue(&mut c, "'hp', run_at => now() - interval '5 minutes'");
    enqueue(&mut c, &format!("'hb', depends_on => ARRAY[{parent}::bigint]"));
    enqueue(&mut c, "'hp', run_at => now() + interval '1 hour'");
    let running = enqueue(&mut c, "'hx'");
    assert_eq!(checkout(&mut c, w, Some(&["hx"]), 1), vec![running]);

    type Row = (String, i64, i64, i64, i64, bool);
    let view = |c: &mut Client| -> Vec<Row> {
        c.query(
            "SELECT queue, ready, scheduled, executing, dead, oldest_ready_age IS NOT NULL FROM jobq.queue_stats ORDER BY queue",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect()
    };
    let counted = |c: &mut Client| -> Vec<Row> {
        c.query(
            "SELECT queue, count(*) FILTER (WHERE state = 'ready' AND run_at <= clock_timestamp()),
                    count(*) FILTER (WHERE state = 'ready' AND run_at > clock_timestamp()),
                    count(*) FILTER (WHERE state = 'executing'), count(*) FILTER (WHERE state = 'dead'),
                    bool_or(state = 'ready' AND run_at <= clock_timestamp())
               FROM jobq.jobs GROUP BY queue ORDER BY queue",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect()
    };
    let before = view(&mut c);
    assert_eq!(before.len(), 40 + 5, "{before:?}");
    assert_eq!(before, counted(&mut c));
    assert!(before.contains(&("h7".into(), 0, 0, 0, 0, false)), "a queue whose jobs all completed");
    assert!(before.contains(&("hd".into(), 0, 0, 0, 1, false)));
    assert!(before.contains(&("hp".into(), 1, 1, 0, 0, true)));
    assert!(before.contains(&("hb".into(), 0, 0, 0, 0, false)), "a queue of one blocked job");

    // The completed history of h0..h39 passes retention and is pruned: those rows go.
    c.execute(
        "UPDATE jobq.finished_jobs SET finished_at = now() - interval '2 days' WHERE queue ~ '^h[0-9]+$'",
        &[],
    )
    .unwrap();
    wait_until("the history of h0..h39 to be pruned", Duration::from_secs(30), || {
        c.query_one("SELECT jobs_pruned FROM jobq_reap()", &[]).unwrap();
        c.query_one("SELECT count(*) = 0 FROM jobq.finished_jobs WHERE queue ~ '^h[0-9]+$'", &[]).unwrap().get(0)
    });
    let after = view(&mut c);
    assert_eq!(after, counted(&mut c));
    assert_eq!(after.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["hb", "hc", "hd", "hp", "hx"]);
}

#[test]
fn bad_input_is_refused_with_its_sqlstate_and_changes_nothing() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let job = enqueue(&mut c, "'q'");
    let cases: &[(&str, &str)] = &[
        ("SELECT jobq_enqueue(NULL)", "22004"),
        ("SELECT jobq_enqueue('')", "22023"),
        ("SELECT jobq_enqueue('q', NULL)", "22004"),
        ("SELECT jobq_enqueue('q', priority => NULL)", "22004"),
        ("SELECT jobq_enqueue('q', max_attempts => 0)", "22023"),
        ("SELECT jobq_enqueue('q', max_attempts => -3)", "22023"),
        ("SELECT jobq_enqueue('q', unique_key => 'k', unique_strategy => 'forever')", "22023"),
        ("SELECT jobq_enqueue('q', unique_key => 'k', on_conflict => 'ignore')", "22023"),
        ("SELECT jobq_enqueue('q', unique_key => '')", "22023"),
        ("SELECT jobq_enqueue('q', concurrency_key => '')", "22023"),
        ("SELECT jobq_enqueue('q', concurrency_key => 'c', concurrency_limit => 0)", "22023"),
        ("SELECT jobq_enqueue('q', concurrency_key => 'c', concurrency_limit => -1)", "22023"),
        ("SELECT jobq_enqueue('q', concurrency_key => 'c', concurrency_limit => NULL)", "22004"),
        ("SELECT jobq_enqueue_batch(NULL, ARRAY['{}'::jsonb])", "22004"),
        ("SELECT jobq_enqueue_batch('', ARRAY['{}'::jsonb])", "22023"),
        ("SELECT jobq_enqueue_batch('q', NULL)", "22004"),
        ("SELECT jobq_enqueue_batch('q', ARRAY['{}'::jsonb, NULL])", "22004"),
        ("SELECT jobq_enqueue_batch('q', ARRAY['{}'::jsonb], max_attempts => 0)", "22023"),
        // Values PostgreSQL would refuse later (or that would fill the disk) are refused up front.
        ("SELECT jobq_enqueue('q', run_at => '-infinity')", "22023"),
        ("SELECT jobq_enqueue('q', run_at => 'infinity')", "22023"),
        ("SELECT jobq_enqueue_batch('q', ARRAY['{}'::jsonb], run_at => '-infinity')", "22023"),
        ("SELECT jobq_enqueue(repeat('q', 1001))", "22023"),
        ("SELECT jobq_enqueue('q', kind => repeat('k', 1001))", "22023"),
        ("SELECT jobq_enqueue('q', unique_key => repeat('é', 501))", "22023"),
        ("SELECT jobq_enqueue('q', concurrency_key => repeat('c', 1001))", "22023"),
        ("SELECT jobq_enqueue_batch(repeat('q', 1001), ARRAY['{}'::jsonb])", "22023"),
        ("SELECT jobq_enqueue('q', concurrency_key => 'c', concurrency_limit => 10001)", "22023"),
        ("SELECT jobq_enqueue('q', concurrency_key => 'c', concurrency_limit => 2147483647)", "22023"),
        ("SELECT jobq_pause(repeat('q', 1001))", "22023"),
        ("SELECT jobq_pause(NULL, repeat('k', 1001))", "22023"),
        ("SELECT * FROM jobq_checkout(NULL)", "22004"),
        ("SELECT jobq_heartbeat(NULL)", "22004"),
        ("SELECT jobq_complete(NULL, gen_random_uuid())", "22004"),
        ("SELECT jobq_fail(1, NULL)", "22004"),
        ("SELECT jobq_cancel(NULL)", "22004"),
        ("SELECT jobq_retry(NULL)", "22004"),
        ("SELECT jobq_pause('')", "22023"),
        ("SELECT jobq_acquire_lock(NULL, gen_random_uuid())", "22004"),
        ("SELECT jobq_heartbeat(gen_random_uuid())", "JQ001"),
        ("SELECT * FROM jobq_checkout(gen_random_uuid())", "JQ001"),
        ("SELECT jobq_unregister_worker(gen_random_uuid())", "JQ001"),
        ("SELECT jobq_acquire_lock('k', gen_random_uuid())", "JQ001"),
    ];
    let worker_cases: &[(&str, &str)] = &[
        ("SELECT * FROM jobq_checkout($1, max_jobs => 0)", "22023"),
        ("SELECT * FROM jobq_checkout($1, max_jobs => NULL)", "22004"),
        ("SELECT jobq_acquire_lock('', $1)", "22023"),
        ("SELECT jobq_acquire_lock('k', $1, interval '-1 second')", "22023"),
        ("SELECT jobq_acquire_lock('k', $1, NULL)", "22004"),
        ("SELECT jobq_fail(1, $1, retry_in => interval '-5 seconds')", "22023"),
        ("SELECT jobq_fail(1, $1, discard => NULL)", "22004"),
        ("SELECT * FROM jobq_checkout($1, max_jobs => 10001)", "22023"),
        ("SELECT jobq_acquire_lock(repeat('k', 1001), $1)", "22023"),
        ("SELECT jobq_acquire_lock('k', $1, interval '200000 years')", "22023"),
        ("SELECT jobq_fail(1, $1, retry_in => interval '200000 years')", "22023"),
        ("SELECT jobq_heartbeat($1, ARRAY[1, NULL]::bigint[])", "22004"),
        ("SELECT jobq_complete_many($1, NULL)", "22004"),
        ("SELECT jobq_complete_many($1, ARRAY[1, NULL]::bigint[])", "22004"),
        ("SELECT jobq_complete_many($1, ARRAY[1, 1]::bigint[])", "22023"),
        ("SELECT jobq_complete_many($1, ARRAY[1, 2]::bigint[], ARRAY['{}']::jsonb[])", "22023"),
        ("SELECT jobq_fail_many($1, ARRAY(SELECT generate_series(1, 10001))::bigint[])", "22023"),
    ];
    let fingerprint = |c: &mut Client| -> String {
        c.query_one(
            "SELECT (SELECT coalesce(string_agg(row_to_json(j)::text, ',' ORDER BY id), '') FROM jobq.jobs j)
                 || (SELECT count(*) FROM jobq.locks)::text || (SELECT count(*) FROM jobq.slots)::text
                 || (SELECT count(*) FROM jobq.pauses)::text || (SELECT count(*) FROM jobq.workers)::text
                 || (SELECT last_value::text || is_called::text FROM jobq.jobs_id_seq)",
            &[],
        )
        .unwrap()
        .get(0)
    };
    let before = fingerprint(&mut c);
    for (sql, code) in cases {
        let e = c.query(*sql, &[]).expect_err(sql);
        assert_eq!(sqlstate(&e), *code, "{sql}: {e:?}");
        let msg = e.as_db_error().unwrap().message().to_string();
        assert!(msg.starts_with("jobq: "), "{sql}: a clear jobq message, got {msg}");
    }
    for (sql, code) in worker_cases {
        let e = c.query(*sql, &[&w]).expect_err(sql);
        assert_eq!(sqlstate(&e), *code, "{sql}: {e:?}");
    }
    assert_eq!(fingerprint(&mut c), before, "bad input changed nothing");
    assert_eq!(state(&mut c, job), "ready");
    // The bounds themselves are accepted.
    c.query_one("SELECT jobq_enqueue(repeat('q', 1000), kind => repeat('k', 1000), unique_key => repeat('u', 1000), concurrency_key => repeat('c', 1000), concurrency_limit => 10000)", &[]).unwrap();
    assert_eq!(c.query("SELECT * FROM jobq_checkout($1, max_jobs => 10000)", &[&w]).unwrap().len(), 2);
    assert!(c.query_one("SELECT jobq_acquire_lock(repeat('k', 1000), $1, interval '99999 years')", &[&w]).unwrap().get::<_, bool>(0));
}

#[test]
fn batch_complete_and_fail_fence_each_job_like_the_single_calls() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let other = register(&mut c);
    let ids: Vec<i64> = (0..4).map(|_| enqueue(&mut c, "'q', max_attempts => 1")).collect();
    let keyed = enqueue(&mut c, "'q', unique_key => 'uk', concurrency_key => 'ck'");
    let theirs = enqueue(&mut c, "'q'");
    let retried = enqueue(&mut c, "'q'");
    assert_eq!(checkout(&mut c, w, None, 5), [&ids[..], &[keyed]].concat());
    assert_eq!(checkout(&mut c, other, None, 1), vec![theirs]);
    assert_eq!(checkout(&mut c, w, None, 1), vec![retried]);

    // Complete three of w's jobs, one of another worker's and an unknown id, in one call:
    // the answer lists the completed ids in the order given.
    let asked = vec![keyed, ids[1], theirs, 424242, ids[0]];
    let results: Vec<serde_json::Value> = asked.iter().map(|id| json!({ "id": id })).collect();
    let done: Vec<i64> = c.query_one("SELECT jobq_complete_many($1, $2, $3)", &[&w, &asked, &results]).unwrap().get(0);
    assert_eq!(done, vec![keyed, ids[1], ids[0]]);
    for id in [keyed, ids[1], ids[0]] {
        let r = c.query_one("SELECT state, result FROM jobq.jobs WHERE id = $1", &[&id]).unwrap();
        assert_eq!((r.get::<_, String>(0), r.get::<_, Value>(1)), ("completed".to_string(), json!({ "id": id })));
    }
    assert_eq!(state(&mut c, theirs), "executing", "another worker's job is untouched");
    // The keys went as with jobq_complete: the unique key and the slot are free again.
    let held: i64 = c.query_one("SELECT (SELECT count(*) FROM jobq.locks) + (SELECT count(*) FROM jobq.slots)", &[]).unwrap().get(0);
    assert_eq!(held, 0);

    // Fail: per job the state jobq_fail gives (attempts exhausted: dead; else ready with a
    // backoff), NULL where the job is not this worker's (already completed, or another's).
    let states: Vec<Option<String>> = c
        .query_one("SELECT jobq_fail_many($1, $2, $3)", &[&w, &vec![ids[2], retried, ids[1], theirs], &vec![json!({"e": 1}), json!({"e": 2}), json!({}), json!({})]])
        .unwrap()
        .get(0);
    assert_eq!(states, vec![Some("dead".to_string()), Some("ready".to_string()), None, None]);
    let err: Value = c.query_one("SELECT last_error FROM jobq.jobs WHERE id = $1", &[&retried]).unwrap().get(0);
    assert_eq!(err, json!({"e": 2}));
    // Without results or errors, and with nothing to do: empty answers.
    let done: Vec<i64> = c.query_one("SELECT jobq_complete_many($1, ARRAY[$2::bigint])", &[&w, &ids[3]]).unwrap().get(0);
    assert_eq!(done, vec![ids[3]]);
    let none: Vec<i64> = c.query_one("SELECT jobq_complete_many($1, '{}')", &[&w]).unwrap().get(0);
    assert!(none.is_empty());
}

#[test]
fn complete_and_checkout_finish_the_jobs_in_hand_and_claim_the_next_in_one_call() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let ids: Vec<i64> = (0..6).map(|_| enqueue(&mut c, "'q', max_attempts => 1")).collect();
    let next = |c: &mut Client, sql: &str, args: &[&(dyn postgres::types::ToSql + Sync)]| -> Result<Vec<i64>, postgres::Error> {
        c.query(sql, args).map(|rows| rows.iter().map(|r| r.get::<_, i64>(0)).collect())
    };
    // The first call has nothing in hand.
    let none: Vec<i64> = vec![];
    let got = next(&mut c, "SELECT id FROM jobq_complete_and_checkout($1, $2, queues => ARRAY['q'], max_jobs => 2)", &[&w, &none]).unwrap();
    assert_eq!(got, ids[0..2]);
    // Complete both (with their results) and take the next two, in one statement.
    let results = vec![json!({"r": 0}), json!({"r": 1})];
    let got2 = next(&mut c, "SELECT id FROM jobq_complete_and_checkout($1, $2, $3, ARRAY['q'], 2)", &[&w, &got, &results]).unwrap();
    assert_eq!(got2, ids[2..4]);
    for (id, r) in got.iter().zip(&results) {
        let row = c.query_one("SELECT state, result FROM jobq.jobs WHERE id = $1", &[id]).unwrap();
        assert_eq!((row.get::<_, String>(0), row.get::<_, Value>(1)), ("completed".to_string(), r.clone()));
    }
    // Fail both (attempts exhausted: dead) and take the next one.
    let errors = vec![json!({"e": 2}), json!({"e": 3})];
    let got3 = next(&mut c, "SELECT id FROM jobq_fail_and_checkout($1, $2, $3)", &[&w, &got2, &errors]).unwrap();
    assert_eq!(got3, vec![ids[4]]);
    assert_eq!((state(&mut c, ids[2]), state(&mut c, ids[3])), ("dead".to_string(), "dead".to_string()));

    // One job in hand (a worker's common call, completed by jobq_complete alone), with its
    // result: completed, and the next one claimed.
    let got4 = next(&mut c, "SELECT id FROM jobq_complete_and_checkout($1, $2, $3, ARRAY['q'])", &[&w, &got3, &vec![json!({"r": 4})]]).unwrap();
    assert_eq!(got4, vec![ids[5]]);
    let row = c.query_one("SELECT state, result FROM jobq.jobs WHERE id = $1", &[&ids[4]]).unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, Value>(1)), ("completed".to_string(), json!({"r": 4})));

    // Fencing is all or nothing: ids[4] is finished (above), so a call that also holds a job
    // of its own raises JQ002, completes nothing, claims nothing.
    let waiting = enqueue(&mut c, "'q'");
    let e = next(&mut c, "SELECT id FROM jobq_complete_and_checkout($1, $2)", &[&w, &vec![ids[5], ids[4]]]).unwrap_err();
    assert_eq!(sqlstate(&e), "JQ002", "{e:?}");
    assert!(e.as_db_error().unwrap().message().contains(&format!("{{{}}}", ids[4])), "names the fenced job: {e:?}");
    assert_eq!((state(&mut c, ids[5]), state(&mut c, waiting)), ("executing".to_string(), "ready".to_string()));
    // The finished job alone in hand: the same refusal, nothing claimed.
    for sql in ["SELECT id FROM jobq_complete_and_checkout($1, $2)", "SELECT id FROM jobq_fail_and_checkout($1, $2)"] {
        let e = next(&mut c, sql, &[&w, &vec![ids[4]]]).unwrap_err();
        assert_eq!(sqlstate(&e), "JQ002", "{sql}: {e:?}");
        assert!(e.as_db_error().unwrap().message().contains(&format!("{{{}}}", ids[4])), "{sql} names the fenced job: {e:?}");
    }
    assert_eq!((state(&mut c, ids[5]), state(&mut c, waiting)), ("executing".to_string(), "ready".to_string()));

    // A worker that is gone gets JQ001 (as from jobq_checkout), whatever it holds.
    c.query_one("SELECT jobq_unregister_worker($1)", &[&w]).unwrap();
    for sql in ["SELECT id FROM jobq_complete_and_checkout($1, $2)", "SELECT id FROM jobq_fail_and_checkout($1, $2)"] {
        let e = next(&mut c, sql, &[&w, &vec![ids[5]]]).unwrap_err();
        assert_eq!(sqlstate(&e), "JQ001", "{sql}: {e:?}");
        let e = next(&mut c, sql, &[&w, &none]).unwrap_err();
        assert_eq!(sqlstate(&e), "JQ001", "{sql}: {e:?}");
    }
    assert_eq!(state(&mut c, waiting), "ready");
    // Bad input: that of the two calls.
    let w2 = register(&mut c);
    for (sql, code) in [
        ("SELECT id FROM jobq_complete_and_checkout($1, NULL)", "22004"),
        ("SELECT id FROM jobq_complete_and_checkout($1, '{NULL}')", "22004"),
        ("SELECT id FROM jobq_complete_and_checkout($1, '{1}', '{}')", "22023"),
        ("SELECT id FROM jobq_complete_and_checkout($1, '{}', max_jobs => 0)", "22023"),
        ("SELECT id FROM jobq_fail_and_checkout($1, '{1,1}')", "22023"),
    ] {
        let e = next(&mut c, sql, &[&w2]).unwrap_err();
        assert_eq!(sqlstate(&e), code, "{sql}");
    }
    assert_eq!(state(&mut c, waiting), "ready");
}

#[test]
fn heartbeat_with_holding_returns_the_jobs_the_worker_does_not_hold() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let other = register(&mut c);
    let ids: Vec<i64> = (0..3).map(|_| enqueue(&mut c, "'q'")).collect();
    let theirs = enqueue(&mut c, "'q'");
    assert_eq!(checkout(&mut c, w, None, 3), ids);
    assert_eq!(checkout(&mut c, other, None, 1), vec![theirs]);
    // Without holding (NULL), nothing changes.
    c.query_one("SELECT jobq_heartbeat($1)", &[&w]).unwrap();
    assert!(ids.iter().all(|id| state(&mut c, *id) == "executing"));
    // The worker really runs only ids[0]; it also lists a job of another worker, ignored.
    let hb: Vec<i64> = c.query_one("SELECT jobq_heartbeat($1, $2)", &[&w, &vec![ids[0], theirs, 999_999]]).unwrap().get(0);
    assert!(hb.is_empty());
    let rows = c.query("SELECT id, state, attempt, interrupted_at IS NOT NULL FROM jobq.jobs ORDER BY id", &[]).unwrap();
    let got: Vec<(i64, String, i32, bool)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
    assert_eq!(
        got,
        vec![
            (ids[0], "executing".into(), 1, false),
            (ids[1], "ready".into(), 1, true),
            (ids[2], "ready".into(), 1, true),
            (theirs, "executing".into(), 1, false)
        ]
    );
    // An empty list returns the rest; the returned jobs run again, on anyone.
    c.query_one("SELECT jobq_heartbeat($1, '{}')", &[&w]).unwrap();
    assert_eq!(state(&mut c, ids[0]), "ready");
    assert!(!c.query_one("SELECT jobq_complete($1, $2)", &[&ids[0], &w]).unwrap().get::<_, bool>(0));
    assert_eq!(checkout(&mut c, other, None, 3), ids);
}

#[test]
fn a_hostile_search_path_changes_nothing() {
    let (_, _, mut c) = db();
    // Objects with the names the implementation uses, first on the search_path, ahead of
    // pg_catalog: tables, functions and even an `=` operator that would corrupt any query
    // of a function that did not pin its search_path.
    c.batch_execute(
        "CREATE SCHEMA evil;
         CREATE TABLE evil.hits (what text);
         CREATE TABLE evil.jobs (id bigint, queue text, state text, priority int, run_at timestamptz);
         CREATE TABLE evil.workers (id uuid, heartbeat_at timestamptz);
         CREATE TABLE evil.locks (key text PRIMARY KEY, job_id bigint, worker_id uuid);
         CREATE TABLE evil.slots (ns \"char\", key text, slot int, job_id bigint);
         CREATE TABLE evil.pauses (queue text, kind text);
         CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS
           $$ INSERT INTO evil.hits VALUES ('clock_timestamp') RETURNING '2000-01-01'::timestamptz $$;
         CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS
           $$ INSERT INTO evil.hits VALUES ('now') RETURNING '2000-01-01'::timestamptz $$;
         CREATE FUNCTION evil.gen_random_uuid() RETURNS uuid LANGUAGE sql AS
           $$ INSERT INTO evil.hits VALUES ('uuid') RETURNING '00000000-0000-0000-0000-000000000000'::uuid $$;
         CREATE FUNCTION evil.pg_notify(text, text) RETURNS void LANGUAGE sql AS
           $$ INSERT INTO evil.hits VALUES ('notify') $$;
         CREATE FUNCTION evil.nextval(regclass) RETURNS bigint LANGUAGE sql AS
           $$ INSERT INTO evil.hits VALUES ('nextval') RETURNING 1::bigint $$;
         CREATE FUNCTION evil.eq(bigint, bigint) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
         CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.eq);
         CREATE FUNCTION evil.teq(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
         CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.teq);
         SET search_path = evil, pg_catalog, public;",
    )
    .unwrap();
    let w: Uuid = c.query_one("SELECT public.jobq_register_worker()", &[]).unwrap().get(0);
    let a: i64 = c.query_one("SELECT public.jobq_enqueue('q1', unique_key => 'u', concurrency_key => 'c')", &[]).unwrap().get(0);
    let b: i64 = c.query_one("SELECT public.jobq_enqueue('q2')", &[]).unwrap().get(0);
    let got: Vec<i64> = c
        .query("SELECT id FROM public.jobq_checkout($1, ARRAY['q1'], 5)", &[&w])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(got, vec![a]);
    assert!(c.query_one("SELECT public.jobq_complete($1, $2)", &[&a, &w]).unwrap().get::<_, bool>(0));
    assert!(c.query_one("SELECT public.jobq_acquire_lock('L', $1)", &[&w]).unwrap().get::<_, bool>(0));
    c.query("SELECT * FROM public.jobq_heartbeat($1)", &[&w]).unwrap();
    c.query("SELECT * FROM public.jobq_reap()", &[]).unwrap();
    c.query("SELECT public.jobq_cancel($1)", &[&b]).unwrap();
    c.query("SELECT public.jobq_pause('q9'), public.jobq_resume('q9')", &[]).unwrap();
    c.batch_execute("RESET search_path").unwrap();
    let hits: i64 = c.query_one("SELECT count(*) FROM evil.hits", &[]).unwrap().get(0);
    assert_eq!(hits, 0, "no hostile function was called");
    for t in ["jobs", "workers", "locks", "slots", "pauses"] {
        let n: i64 = c.query_one(&format!("SELECT count(*) FROM evil.{t}"), &[]).unwrap().get(0);
        assert_eq!(n, 0, "evil.{t} untouched");
    }
    let states: Vec<String> = c.query("SELECT state FROM jobq.jobs ORDER BY id", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(states, ["completed", "cancelled"]);
    assert_ne!(w, Uuid::nil());
}

#[test]
fn every_function_pins_its_search_path() {
    let (_, _, mut c) = db();
    let unpinned: Vec<String> = c
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p
              WHERE (p.pronamespace = 'jobq'::regnamespace OR p.proname LIKE 'jobq\\_%')
                AND p.prolang <> (SELECT oid FROM pg_language WHERE lanname = 'c')
                AND p.prokind <> 'a'  -- an aggregate runs no code of its own (its step is in Rust)
                AND NOT coalesce('search_path=pg_catalog, jobq, pg_temp' = ANY (p.proconfig), false)
              ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // The keyed claim's per-job helpers, and the fair checkout's (src/sql/fairness.sql), leave
    // the setting to their callers (src/sql/checkout.sql, the header): each runs with the
    // definer's rights of no one, and only jobq's own functions, which pin it, may call it.
    let mut hot = vec![
        "jobq._checkout_fair(uuid,text[],integer,timestamp with time zone,text[])",
        "jobq._claim_keyed(bigint,tid,uuid,timestamp with time zone)",
        "jobq._complete(bigint,uuid,jsonb)", // jobq_complete's SQL (src/sql/finish.sql)
        "jobq._fair_claim(uuid,text,timestamp with time zone,boolean,boolean,text[])",
        "jobq._fair_due(integer,text,text,integer,timestamp with time zone,boolean)",
        "jobq._fair_next(text,timestamp with time zone,boolean,text[])",
        "jobq._fair_queues()",
        "jobq._fair_skip_entry(integer,text,text)",
        "jobq._fair_top(integer,text,integer,timestamp with time zone)",
        "jobq._limits(text)", // a limited role's queues (src/sql/grants.sql): checked on every job's path
        "jobq._limits_of(oid,text)",
        "jobq._outside_jobs(text,bigint[])",
        "jobq._paused(text,text)",
        "jobq._release_keys(bigint,text,text,text,text,text,integer)",
        "jobq._require(text,text[],text)",
        "jobq._require_job(text,bigint,text)",
        "jobq._require_jobs(text,bigint[])",
        "jobq._take_keys(bigint,tid,timestamp with time zone)",
        "jobq._take_rate(text,timestamp with time zone)",
        "jobq._take_slot(\"char\",text,integer,bigint)",
    ];
    // So do the SQL edition's twins on a job's path (src/sql/twins/), for the same reason and
    // on the same terms (the extension's are C, with nothing to pin).
    if sql_edition().is_some() {
        hot.extend([
            "jobq._caller()",
            "jobq._floor(oid,text)",
            "jobq._freed(text)",
            "jobq._hold_hot_tables()",
            "jobq._lower_floor(oid,text,integer,timestamp with time zone,bigint)",
            "jobq._may_act_for(oid)",
            "jobq._note_compaction()",
            "jobq._note_edges()",
            "jobq._note_fairness(bigint)",
            "jobq._notify(text)",
            "jobq._refuse_unseen_edges(bigint[])",
            "jobq._rung()",
            "jobq._setting(text,interval)",
            "jobq._tally(text,text,timestamp with time zone,timestamp with time zone)",
            "jobq._tally_minute(timestamp with time zone)",
            "jobq._tally_row(text,smallint,timestamp with time zone,timestamp with time zone)",
            "jobq._tally_took(timestamp with time zone,timestamp with time zone)",
            "jobq._usable_here(uuid,boolean,integer,timestamp with time zone)",
            "jobq._usable_worker(uuid)",
            "jobq._wake(text,timestamp with time zone,bigint)",
            "jobq.compact_after()",
            "jobq.retention_ms()",
            "jobq.worker_alive(timestamp with time zone,integer,timestamp with time zone)",
        ]);
        hot.sort();
    }
    let mut unpinned = unpinned;
    unpinned.sort();
    assert_eq!(unpinned, hot, "functions without a pinned search_path");
    for f in hot {
        let (definer, callers): (bool, Vec<String>) = c
            .query_one(
                "SELECT p.prosecdef,
                        ARRAY(SELECT r.rolname::text FROM pg_roles r
                               WHERE NOT r.rolsuper AND has_function_privilege(r.oid, p.oid, 'EXECUTE')
                                 AND r.oid <> p.proowner
                               ORDER BY 1)
                   FROM pg_proc p WHERE p.oid = $1::text::regprocedure",
                &[&f],
            )
            .map(|r| (r.get(0), r.get(1)))
            .unwrap();
        assert!(!definer, "{f} must not be SECURITY DEFINER");
        assert!(callers.is_empty(), "{f} may be called by {callers:?}");
    }
    // The statements of checkout and of a reap pass are planned generically, for a table
    // of any size: without this, a large table's estimates turned JIT on for every call.
    for f in ["jobq._checkout(uuid, text[], integer, interval)", "jobq._reap()"] {
        let jit_off: bool = c
            .query_one("SELECT 'jit=off' = ANY (proconfig) FROM pg_proc WHERE oid = $1::text::regprocedure", &[&f])
            .unwrap()
            .get(0);
        assert!(jit_off, "{f} runs with jit = off");
    }
}

#[test]
fn listen_gets_the_queue_name_once_per_transaction() {
    let (cluster, name, mut c) = db();
    let mut listener = cluster.connect(&name);
    listener.batch_execute("LISTEN jobq").unwrap();
    // One transaction that enqueues three due jobs in 'mail', one in 'sms' and one future job
    // in 'later': one notification per queue with a due job. Sent by the transaction itself
    // (jobq.notify = immediate), so that they come before the marker; the default's, from the
    // background worker after the commit, are tests/wakes.rs's.
    c.batch_execute(
        "SET jobq.notify = immediate;
         BEGIN;
         SELECT jobq_enqueue('mail'); SELECT jobq_enqueue('mail'); SELECT jobq_enqueue('mail');
         SELECT jobq_enqueue_batch('sms', ARRAY['{}'::jsonb, '{}'::jsonb]);
         SELECT jobq_enqueue('later', run_at => now() + interval '1 hour');
         COMMIT;
         NOTIFY jobq, 'end-marker';",
    )
    .unwrap();
    let mut got: Vec<String> =
        collect_until(&mut listener, "end-marker", Duration::from_secs(10)).into_iter().map(|(payload, _)| payload).collect();
    got.sort();
    assert_eq!(got, ["mail", "sms"]);
}

#[test]
fn with_zero_retention_a_completed_job_is_deleted_at_once() {
    let (_cluster, _name, mut c) = db();
    c.batch_execute("SET jobq.retention = 0").unwrap();
    let w = register(&mut c);
    let job = enqueue(&mut c, "'q', unique_key => 'only-one'");
    assert_eq!(checkout(&mut c, w, None, 1), vec![job]);
    assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&job, &w]).unwrap().get::<_, bool>(0));
    let left: i64 = c.query_one("SELECT count(*) FROM jobq.jobs WHERE id = $1", &[&job]).unwrap().get(0);
    assert_eq!(left, 0, "nothing is kept, so nothing waits for the reaper");
    // Fencing and the key are as with any retention.
    assert!(!c.query_one("SELECT jobq_complete($1, $2)", &[&job, &w]).unwrap().get::<_, bool>(0));
    let again = enqueue(&mut c, "'q', unique_key => 'only-one'");
    assert_ne!(again, job, "the until_executed key was released");
}

/// Scale-out: after jobq_set_node(n), every job id made here names node n (id % 1024 = n),
/// ids still grow in enqueue order; once an id was drawn the node cannot change (55000).
#[test]
fn set_node_makes_ids_name_their_node_and_only_before_the_first() {
    let (_, _, mut c) = db();
    for (sql, state) in [
        ("SELECT jobq_set_node(NULL)", "22004"),
        ("SELECT jobq_set_node(-1)", "22023"),
        ("SELECT jobq_set_node(1024)", "22023"),
    ] {
        assert_eq!(sqlstate(&c.execute(sql, &[]).unwrap_err()), state, "{sql}");
    }
    c.execute("SELECT jobq_set_node(3)", &[]).unwrap();
    c.execute("SELECT jobq_set_node(7)", &[]).unwrap(); // still no id drawn: may change
    let mut ids: Vec<i64> = (0..3).map(|_| enqueue(&mut c, "'n'")).collect();
    ids.extend(c.query("SELECT * FROM jobq_enqueue_batch('n', ARRAY['{}', '{}']::jsonb[])", &[]).unwrap().iter().map(|r| r.get::<_, i64>(0)));
    assert!(ids.iter().all(|id| id % 1024 == 7 && *id >= 1024), "{ids:?}");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let e = c.execute("SELECT jobq_set_node(8)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "55000");
    assert_eq!(enqueue(&mut c, "'n'") % 1024, 7, "the refusal changed nothing");
    // An id drawn by an enqueue that rolled back counts too: the node is fixed from then on.
    let (_, _, mut fresh) = db();
    fresh.batch_execute("BEGIN; SELECT jobq_enqueue('x'); ROLLBACK;").unwrap();
    assert_eq!(sqlstate(&fresh.execute("SELECT jobq_set_node(1)", &[]).unwrap_err()), "55000");
}

/// jobq_enqueue in one transaction of `isolation`: the new id, and whether the SQL path
/// (jobq._enqueue) served it.
fn enqueue_in(c: &mut Client, isolation: &str, args: &str) -> (Option<i64>, bool) {
    calls_sql(c, isolation, "_enqueue", |t| t.query_one(&format!("SELECT jobq_enqueue({args})"), &[]).unwrap().get(0))
}

/// What enqueue wrote for job `id` (its row, its ready row, its key, its fairness key's turns
/// at its priority and those of its queue's jobs without a key), as JSON, without what differs
/// between two jobs and two moments.
fn written(c: &mut Client, id: i64) -> Value {
    c.query_one(
        "SELECT jsonb_build_object(
            'job', (SELECT to_jsonb(j) - 'id' - 'enqueued_at' - 'run_at' FROM jobq.live_jobs j WHERE j.id = $1),
            'ready', (SELECT to_jsonb(r) - 'id' - 'run_at' || jsonb_build_object('queue_hash', r.queue_hash = hashtext(r.queue))
                        FROM jobq.ready r WHERE r.id = $1),
            'due', (SELECT j.run_at <= j.enqueued_at FROM jobq.live_jobs j WHERE j.id = $1),
            'lock', (SELECT to_jsonb(l) - 'job_id' - 'acquired_at' FROM jobq.locks l WHERE l.job_id = $1),
            'turns', (SELECT jsonb_agg(to_jsonb(f) - 'served' || jsonb_build_object('queue_hash', f.queue_hash = hashtext(f.queue))
                                ORDER BY f.fairness_key NULLS FIRST)
                        FROM jobq.live_jobs j JOIN jobq.fairness f ON f.queue = j.queue AND f.priority = j.priority
                       WHERE j.id = $1 AND j.fairness_key IS NOT NULL
                         AND (f.fairness_key = j.fairness_key OR f.fairness_key IS NULL)))",
        &[&id],
    )
    .unwrap()
    .get(0)
}

#[test]
fn both_enqueue_paths_write_the_same_rows() {
    let (_, _, mut c) = db();
    // The fast path serves READ COMMITTED; REPEATABLE READ goes to jobq._enqueue. Each kind of
    // job once on each path, '@' standing for the path in keys. (In the SQL edition jobq_enqueue's
    // twin is the fast path.)
    let kinds = [
        "'q', '{\"n\": 1}'",
        "'q', '{\"n\": 2}', kind => 'K', priority => -3, max_attempts => 2",
        "'q', run_at => now() + interval '1 hour'",
        "'q', jsonb_build_object('big', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 3000) g))",
        "'q', concurrency_key => 'c@', concurrency_limit => 4",
        "'q', rate_key => 'r@'",
        "'q', unique_key => 'u@'",
        "'q', unique_key => 'e@', unique_strategy => 'until_executing'",
        "'q', unique_key => 'w@', unique_strategy => 'while_executing', concurrency_key => 'c2@'",
        "'other queue', kind => 'k2', rate_key => 'r2@', unique_key => 'x@', on_conflict => 'discard'",
        // A fairness key: its turns and those of the jobs without a key made at its priority.
        "'fair@', fairness_key => 'f@'",
        "'fair@', fairness_key => 'f2@', priority => 4, concurrency_key => 'c3@', concurrency_limit => 1",
        "'weighted@', fairness_key => 'w@', run_at => now() + interval '1 hour'",
    ];
    for path in ["fast", "slow"] {
        // A key given a weight before its first job: its turns get the weight.
        c.execute("SELECT jobq_set_fairness_weight($1, $2, 3)", &[&format!("weighted{path}"), &format!("w{path}")]).unwrap();
    }
    for k in kinds {
        let (fast, fast_sql) = enqueue_in(&mut c, "READ COMMITTED", &k.replace('@', "fast"));
        let (slow, slow_sql) = enqueue_in(&mut c, "REPEATABLE READ", &k.replace('@', "slow"));
        // The SQL edition's twin (src/sql/twins/hot_path.sql) serves the jobs without keys but a
        // fairness key.
        let served = sql_edition().is_none() || !k.replace("fairness_key", "").contains("_key");
        assert!(fast_sql != served && slow_sql, "{k}: one job on each path");
        let (fast, slow) = (fast.unwrap(), slow.unwrap());
        let (a, b) = (written(&mut c, fast), written(&mut c, slow).to_string().replace("slow", "fast").parse::<Value>().unwrap());
        assert!(a == b, "{k}: jobs {fast} and {slow} were written differently: {a} against {b}");
        assert!(a["job"].is_object() && a["ready"].is_object(), "{k}: {a}");
    }
    // A known key's next job under READ COMMITTED: its turns are found, not made again (the
    // fast path's look, jobq._fair_keys's in the SQL edition's twin); a known key at a new priority
    // gets that priority's turns. (Under REPEATABLE READ jobq._fair_keys inserts them whatever
    // it sees, and the pass keeps one: src/sql/fairness.sql.)
    {
        let (path, isolation) = ("fast", "READ COMMITTED");
        let queue = format!("fair{path}");
        let rows = |c: &mut Client| -> Vec<(Option<String>, Option<i32>, i32)> {
            c.query("SELECT fairness_key, priority, weight FROM jobq.fairness WHERE queue = $1 ORDER BY 1 NULLS FIRST, 2", &[&queue])
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect()
        };
        let before = rows(&mut c);
        let (again, sql) = enqueue_in(&mut c, isolation, &format!("'{queue}', fairness_key => 'f{path}'"));
        assert!(again.is_some() && !sql, "{path}: {again:?} {sql}");
        assert_eq!(rows(&mut c), before, "{path}: no turn made again");
        enqueue_in(&mut c, isolation, &format!("'{queue}', fairness_key => 'f{path}', priority => 9"));
        let mut want = before.clone();
        want.extend([(None, Some(9), 1), (Some(format!("f{path}")), Some(9), 1)]);
        want.sort_by(|a, b| (a.0.is_some(), &a.0, a.1).cmp(&(b.0.is_some(), &b.0, b.1)));
        assert_eq!(rows(&mut c), want, "{path}: the turns of priority 9");
    }
    // A key already held goes to the SQL, which resolves the conflict as on_conflict says.
    let (held, sql) = enqueue_in(&mut c, "READ COMMITTED", "'q', unique_key => 'ufast', on_conflict => 'discard'");
    assert_eq!((held, sql), (None, true));
    let e = c.query_one("SELECT jobq_enqueue('q', unique_key => 'ufast')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "23505");
    // Arguments the SQL refuses are refused with its errors, and change nothing.
    let jobs: i64 = c.query_one("SELECT count(*) FROM jobq.jobs", &[]).unwrap().get(0);
    for (args, code) in [("''", "22023"), ("'q', NULL", "22004"), ("'q', max_attempts => 0", "22023"), ("'q', run_at => 'infinity'", "22023")] {
        let e = c.query_one(&format!("SELECT jobq_enqueue({args})"), &[]).unwrap_err();
        assert_eq!(sqlstate(&e), code, "{args}");
    }
    let after: i64 = c.query_one("SELECT count(*) FROM jobq.jobs", &[]).unwrap().get(0);
    assert_eq!(after, jobs);
    assert_job_tables_consistent(&mut c);
}
