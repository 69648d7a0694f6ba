//! jobq_checkout's two paths (src/checkout.rs): the common checkout done without a plan (the
//! C function `jobq_checkout` itself), and the SQL (`jobq._checkout`) that serves every other
//! case and the rest of a call that met a ready row changed since its snapshot. Each test counts which path ran with
//! `track_functions` (a call of jobq._checkout is the SQL path), so that the fast path is
//! proven to be taken where it should, to claim what the SQL claims and to leave the same rows.
mod common;

use common::*;
use postgres::Client;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use uuid::Uuid;

/// Checks out in its own transaction at `isolation` (`call` names the arguments after the
/// worker, $1): the rows as JSON, in the order returned, and whether the SQL path ran.
fn checkout_in(c: &mut Client, isolation: &str, w: Uuid, call: &str) -> (Vec<Value>, bool) {
    calls_sql(c, isolation, "_checkout", |t| {
        t.query(&format!("SELECT to_jsonb(j) FROM jobq_checkout($1, {call}) j"), &[&w]).unwrap().iter().map(|r| r.get(0)).collect()
    })
}

/// The same checkout through both paths: `fast_call` in READ COMMITTED, which the fast path must
/// serve, then `sql_call` in REPEATABLE READ, which the SQL must; the rows each returned.
fn in_both_paths(c: &mut Client, w: Uuid, fast_call: &str, sql_call: &str) -> (Vec<Value>, Vec<Value>) {
    let (fast, fast_sql) = checkout_in(c, "READ COMMITTED", w, fast_call);
    let (sql, sql_sql) = checkout_in(c, "REPEATABLE READ", w, sql_call);
    assert_eq!((fast_sql, sql_sql), (false, true), "which path ran ({fast_call}; {sql_call})");
    (fast, sql)
}

fn ids(rows: &[Value]) -> Vec<i64> {
    rows.iter().map(|r| r["id"].as_i64().unwrap()).collect()
}

/// Every index of jobq.live_jobs and jobq.ready finds what a sequential scan finds: the
/// executing jobs of `w` (jobs_executing_by_worker), each of `jobs` by primary key, the waiting
/// rows in claim order (ready_by_queue).
fn assert_indexes_agree(c: &mut Client, w: Uuid, jobs: &[i64]) {
    let look = |c: &mut Client, scan: &str| -> (Vec<i64>, Vec<i64>, Vec<i64>) {
        let mut t = c.transaction().unwrap();
        t.batch_execute(scan).unwrap();
        let col = |t: &mut postgres::Transaction, q: &str, args: &[&(dyn postgres::types::ToSql + Sync)]| -> Vec<i64> {
            t.query(q, args).unwrap().iter().map(|r| r.get(0)).collect()
        };
        let executing = col(&mut t, "SELECT id FROM jobq.live_jobs WHERE state = 'executing' AND worker_id = $1 ORDER BY id", &[&w]);
        let mut by_id = Vec::new();
        for id in jobs {
            by_id.extend(col(&mut t, "SELECT id FROM jobq.live_jobs WHERE id = $1", &[id]));
        }
        let waiting = col(&mut t, "SELECT id FROM jobq.ready WHERE queue_hash = hashtext('q') AND queue = 'q' ORDER BY queue_hash, priority, run_at, id", &[]);
        t.rollback().unwrap();
        (executing, by_id, waiting)
    };
    let by_index = look(c, "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off");
    let by_heap = look(c, "SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_indexonlyscan = off");
    assert_eq!(by_index, by_heap, "indexes and heap disagree (executing of the worker, by id, waiting)");
}

#[test]
fn the_fast_path_claims_what_the_sql_claims_and_leaves_the_same_rows() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    // The same jobs in queues 'q' (claimed by the fast path) and 'r' (by the SQL): a plain
    // job, a payload stored out of line (TOAST), a better priority enqueued last, a job not
    // yet due.
    let jobs = [
        "'@', '{\"n\": 1}', kind => 'Plain'",
        "'@', jsonb_build_object('big', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 3000) g))",
        "'@', '{\"n\": 3}', run_at => now() + interval '1 hour'",
        "'@', '{\"n\": 4}', priority => -1, max_attempts => 7",
    ];
    let mut enqueued = Vec::new();
    for q in ["q", "r"] {
        for j in jobs {
            let id: i64 = c.query_one(&format!("SELECT jobq_enqueue({})", j.replace('@', q)), &[]).unwrap().get(0);
            enqueued.push(id);
        }
    }
    let (fast, sql) = in_both_paths(&mut c, w, "ARRAY['q'], 10", "ARRAY['r'], 10");
    // Claim order: the better priority first, then by id; the job not yet due stays.
    assert_eq!(ids(&fast), [enqueued[3], enqueued[0], enqueued[1]]);
    assert_eq!(ids(&sql), [enqueued[7], enqueued[4], enqueued[5]]);
    for (a, b) in fast.iter().zip(&sql) {
        assert_eq!(without_moments(a), without_moments(b), "the two paths returned different rows");
        assert_eq!(a["attempt"], 1);
        assert!(a["started_at"].is_string());
    }
    for i in [0, 1, 3] {
        let (a, b) = (claimed(&mut c, enqueued[i]), claimed(&mut c, enqueued[i + 4]));
        assert!(a == b, "jobs {} and {} were left differently: {a:.300} against {b:.300}", enqueued[i], enqueued[i + 4]);
        assert_eq!(a["state"], "executing");
        assert_eq!(a["worker_id"], w.to_string());
    }
    assert_job_tables_consistent(&mut c);
    assert_indexes_agree(&mut c, w, &enqueued);
    // Completed, the fast path's jobs count as started and completed like the others.
    for id in ids(&fast).into_iter().chain(ids(&sql)) {
        assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
    }
    assert_job_tables_consistent(&mut c);
}

#[test]
fn keyed_jobs_start_in_the_fast_path_as_the_sql_starts_them() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    // The same jobs in queues 'q' (the fast path) and 'r' (the SQL, REPEATABLE READ), each
    // queue with its own keys: plain jobs between two jobs of a concurrency key of limit 1,
    // two of a rate key of one start per hour, a while_executing job and an until_executing one.
    let jobs = [
        "",
        ", concurrency_key => 'k@', concurrency_limit => 1",
        "",
        ", concurrency_key => 'k@', concurrency_limit => 1",
        ", rate_key => 'rate@'",
        ", rate_key => 'rate@'",
        ", unique_key => 'w@', unique_strategy => 'while_executing'",
        ", unique_key => 'x@', unique_strategy => 'until_executing'",
        "",
    ];
    let mut enqueued: Vec<Vec<i64>> = Vec::new();
    for q in ["q", "r"] {
        c.query_one(&format!("SELECT jobq_set_rate_limit('rate{q}', 1, '1 hour')"), &[]).unwrap();
        let ids = jobs
            .iter()
            .map(|j| c.query_one(&format!("SELECT jobq_enqueue('{q}'{})", j.replace('@', q)), &[]).unwrap().get(0))
            .collect();
        enqueued.push(ids);
    }
    let (fast, sql) = in_both_paths(&mut c, w, "ARRAY['q'], 20", "ARRAY['r'], 20");
    // Claimed: all but the second job of the full concurrency key and of the spent rate key.
    let started = [0, 1, 2, 4, 6, 7, 8];
    assert_eq!(ids(&fast), started.map(|i| enqueued[0][i]));
    assert_eq!(ids(&sql), started.map(|i| enqueued[1][i]));
    for i in started {
        let (a, b) = (claimed(&mut c, enqueued[0][i]), claimed(&mut c, enqueued[1][i]));
        let b = b.to_string().replace("kr", "kq").replace("rater", "rateq").replace("wr", "wq").replace("xr", "xq").parse::<Value>().unwrap();
        assert!(a == b, "jobs {} and {} were left differently: {a:.300} against {b:.300}", enqueued[0][i], enqueued[1][i]);
    }
    // The keys as the SQL leaves them: a slot of each executing keyed job, the
    // until_executing key given up at the start.
    let keys: Vec<(String, String, i64)> = c
        .query("SELECT ns::text, key, job_id FROM jobq.slots ORDER BY key", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        keys,
        [
            ("c".to_string(), "kq".to_string(), enqueued[0][1]),
            ("c".to_string(), "kr".to_string(), enqueued[1][1]),
            ("u".to_string(), "wq".to_string(), enqueued[0][6]),
            ("u".to_string(), "wr".to_string(), enqueued[1][6]),
        ]
    );
    let held: i64 = c.query_one("SELECT count(*) FROM jobq.locks WHERE key IN ('xq', 'xr')", &[]).unwrap().get(0);
    assert_eq!(held, 0);
    assert_job_tables_consistent(&mut c);
    assert_indexes_agree(&mut c, w, &enqueued[0]);
    // The key's first job completed, its second starts.
    assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&enqueued[0][1], &w]).unwrap().get::<_, bool>(0));
    let (rows, sql) = checkout_in(&mut c, "READ COMMITTED", w, "ARRAY['q'], 20");
    assert_eq!((ids(&rows), sql), (vec![enqueued[0][3]], false));
    assert_job_tables_consistent(&mut c);
}

/// Runs `sql` in its own READ COMMITTED transaction and returns its first column (bigint
/// ids) and how many times each of `helpers` (jobq's PL/pgSQL helpers) was called.
fn counting_calls(c: &mut Client, sql: &str, w: Uuid, helpers: &[&str]) -> (Vec<i64>, Vec<i64>) {
    let mut t = c.transaction().unwrap();
    t.batch_execute("SET LOCAL track_functions = 'pl'").unwrap();
    let before: Vec<i64> = helpers.iter().map(|h| pending_calls(&mut t, h)).collect();
    let ids = t.query(sql, &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    let calls = helpers.iter().zip(before).map(|(h, b)| pending_calls(&mut t, h) - b).collect();
    t.commit().unwrap();
    (ids, calls)
}

#[test]
fn slots_alone_are_taken_and_given_back_without_the_sql() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let ids: Vec<i64> = (0..3)
        .map(|_| c.query_one("SELECT jobq_enqueue('q', concurrency_key => 'k', concurrency_limit => 2)", &[]).unwrap().get(0))
        .collect();
    let helpers = ["_checkout", "_take_keys", "_release_keys"];
    // Two of the key's three jobs start, on its slots 2 and 1 (the highest free first, as
    // jobq._take_slot takes them), with no call of the SQL or its helpers.
    let (got, calls) = counting_calls(&mut c, "SELECT id FROM jobq_checkout($1, ARRAY['q'], 10)", w, &helpers);
    assert_eq!((got, calls), (ids[..2].to_vec(), vec![0, 0, 0]));
    let slots = |c: &mut Client| -> Vec<(i32, i64)> {
        c.query("SELECT slot, job_id FROM jobq.slots WHERE ns = 'c' AND key = 'k' ORDER BY slot", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    };
    assert_eq!(slots(&mut c), [(1, ids[1]), (2, ids[0])]);
    let slot_of = |c: &mut Client, id: i64| -> Option<i32> {
        c.query_one("SELECT concurrency_slot FROM jobq.live_jobs WHERE id = $1", &[&id]).unwrap().get(0)
    };
    assert_eq!((slot_of(&mut c, ids[0]), slot_of(&mut c, ids[1])), (Some(2), Some(1)));
    // Completing the first gives its slot back, again without the SQL; the third job then
    // starts on it.
    let (done, calls) = counting_calls(&mut c, &format!("SELECT jobq_complete({}, $1)::int::bigint", ids[0]), w, &helpers);
    assert_eq!((done, calls), (vec![1], vec![0, 0, 0]));
    assert_eq!(slots(&mut c), [(1, ids[1])]);
    let (got, calls) = counting_calls(&mut c, "SELECT id FROM jobq_checkout($1, ARRAY['q'], 10)", w, &helpers);
    assert_eq!((got, calls), (vec![ids[2]], vec![0, 0, 0]));
    assert_eq!(slots(&mut c), [(1, ids[1]), (2, ids[2])]);
    // A while_executing key with a concurrency key (limit 5) in queue 'w': one job of the
    // key runs at a time; both of its slots are given back at completion.
    let w_ids: Vec<i64> = (0..2)
        .map(|_| {
            c.query_one("SELECT jobq_enqueue('w', unique_key => 'u', unique_strategy => 'while_executing', concurrency_key => 'wk', concurrency_limit => 5)", &[])
                .unwrap()
                .get(0)
        })
        .collect();
    let held = |c: &mut Client| -> Vec<(String, String, i32, i64)> {
        c.query("SELECT ns::text, key, slot, job_id FROM jobq.slots WHERE key IN ('u', 'wk') ORDER BY ns, key", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect()
    };
    let (got, calls) = counting_calls(&mut c, "SELECT id FROM jobq_checkout($1, ARRAY['w'], 10)", w, &helpers);
    assert_eq!((got, calls), (vec![w_ids[0]], vec![0, 0, 0]));
    assert_eq!(held(&mut c), [("c".into(), "wk".into(), 5, w_ids[0]), ("u".into(), "u".into(), 1, w_ids[0])]);
    let (done, calls) = counting_calls(&mut c, &format!("SELECT jobq_complete({}, $1)::int::bigint", w_ids[0]), w, &helpers);
    assert_eq!((done, calls), (vec![1], vec![0, 0, 0]));
    assert_eq!(held(&mut c), []);
    let (got, calls) = counting_calls(&mut c, "SELECT id FROM jobq_checkout($1, ARRAY['w'], 10)", w, &helpers);
    assert_eq!((got, calls), (vec![w_ids[1]], vec![0, 0, 0]));
    assert_eq!(held(&mut c), [("c".into(), "wk".into(), 5, w_ids[1]), ("u".into(), "u".into(), 1, w_ids[1])]);
    assert_job_tables_consistent(&mut c);
}

/// Enqueues `jobs` (queue a, b or c; the rest of the call, '@' standing for the set's tag)
/// twice: in queues a, b, c with tag "f" (for the fast path), then in x, y, z with tag "s" (for
/// the SQL). The two sets' ids.
fn enqueue_in_two_sets(c: &mut Client, jobs: &[(&str, &str)]) -> Vec<Vec<i64>> {
    [("f", ["a", "b", "c"]), ("s", ["x", "y", "z"])]
        .iter()
        .map(|(tag, queues)| {
            jobs.iter()
                .map(|(q, extra)| {
                    let q = queues[(q.as_bytes()[0] - b'a') as usize];
                    c.query_one(&format!("SELECT jobq_enqueue('{q}'{})", extra.replace('@', tag)), &[]).unwrap().get(0)
                })
                .collect()
        })
        .collect()
}

#[test]
fn several_queues_and_every_queue_are_claimed_as_the_sql_claims_them() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    // The same jobs in queues a, b, c (the fast path) and x, y, z (the SQL, REPEATABLE READ):
    // claim order runs across queues by priority, then run_at, then id; a job not yet due and
    // the third queue's jobs stay; a keyed job starts with its slot.
    let jobs = [
        ("a", ""),
        ("b", ", priority => -1"),
        ("c", ", priority => -2"),
        ("a", ", run_at => now() + interval '1 hour'"),
        ("b", ", concurrency_key => 'k@', concurrency_limit => 1"),
        ("a", ", priority => 1"),
        ("c", ""),
    ];
    let enqueued = enqueue_in_two_sets(&mut c, &jobs);
    let (fast, sql) = in_both_paths(&mut c, w, "ARRAY['a', 'b', 'b'], 10", "ARRAY['x', 'y', 'y'], 10");
    let order = [1, 0, 4, 5];
    assert_eq!(ids(&fast), order.map(|i| enqueued[0][i]));
    assert_eq!(ids(&sql), order.map(|i| enqueued[1][i]));
    for i in order {
        let (a, b) = (claimed(&mut c, enqueued[0][i]), claimed(&mut c, enqueued[1][i]));
        let b = b.to_string().replace("ks", "kf").parse::<Value>().unwrap();
        assert!(a == b, "jobs {} and {} were left differently: {a:.300} against {b:.300}", enqueued[0][i], enqueued[1][i]);
    }
    assert_job_tables_consistent(&mut c);
    // Every queue (NULL): the fast path takes what is left and due, c's and z's jobs, in
    // claim order across both sets.
    let (all, sql) = checkout_in(&mut c, "READ COMMITTED", w, "NULL, 10");
    assert!(!sql, "the fast path served a checkout of every queue");
    assert_eq!(ids(&all), [enqueued[0][2], enqueued[1][2], enqueued[0][6], enqueued[1][6]]);
    assert_job_tables_consistent(&mut c);
    assert_indexes_agree(&mut c, w, &enqueued.concat());
}

/// Two queues whose names have the same hashtext, ready_by_queue's leading column
/// (src/sql/schema.sql, jobq.ready): their waiting jobs sit in one run of the index,
/// interleaved, and a checkout of either, in the fast path or in the SQL, takes only its own,
/// in claim order; a cancel finds a waiting job of either (jobq._lock_ready).
#[test]
fn queues_that_share_a_hash_are_kept_apart() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let (a, b) = queues_sharing_a_hash(&mut c);
    // Interleaved in claim order: each queue's jobs alternate with the other's.
    let mut jobs: Vec<(String, i64)> = Vec::new();
    for i in 0..12 {
        let q = if i % 2 == 0 { a } else { b };
        let id: i64 = c.query_one("SELECT jobq_enqueue($1, '{}', priority => $2)", &[&q, &(i / 4)]).unwrap().get(0);
        jobs.push((q.to_owned(), id));
    }
    let of = |q: &str| -> Vec<i64> { jobs.iter().filter(|(x, _)| x == q).map(|&(_, id)| id).collect() };
    let cancelled: String = c.query_one("SELECT jobq_cancel($1)", &[&of(b)[0]]).unwrap().get(0);
    assert_eq!(cancelled, "cancelled");
    let (fast, sql) = in_both_paths(&mut c, w, &format!("ARRAY['{a}'], 4"), &format!("ARRAY['{b}'], 4"));
    assert_eq!(ids(&fast), of(a)[..4]);
    assert_eq!(ids(&sql), of(b)[1..5]);
    let (rest, _) = checkout_in(&mut c, "READ COMMITTED", w, &format!("ARRAY['{b}'], 10"));
    assert_eq!(ids(&rest), of(b)[5..]);
    assert_job_tables_consistent(&mut c);
    assert_indexes_agree(&mut c, w, &jobs.iter().map(|&(_, id)| id).collect::<Vec<_>>());
}

#[test]
fn paused_queues_and_kinds_are_passed_over_as_the_sql_passes_them() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    // Two sets of queues with the same pauses: a queue paused (a / x), one kind paused in one
    // queue (K in b / y), one kind paused in every queue (G); jobs of every kind in each.
    for (q1, q2) in [("a", "b"), ("x", "y")] {
        c.query_one(&format!("SELECT jobq_pause('{q1}')"), &[]).unwrap();
        c.query_one(&format!("SELECT jobq_pause('{q2}', 'K')"), &[]).unwrap();
    }
    c.query_one("SELECT jobq_pause(NULL, 'G')", &[]).unwrap();
    let jobs = [
        ("a", ""),
        ("a", ", kind => 'K'"),
        ("b", ", kind => 'K'"),
        ("b", ""),
        ("b", ", kind => 'G'"),
        ("c", ", kind => 'G'"),
        ("c", ", kind => 'K'"),
        ("c", ""),
        ("b", ", kind => 'H'"),
    ];
    let enqueued = enqueue_in_two_sets(&mut c, &jobs);
    let (fast, sql) = in_both_paths(&mut c, w, "ARRAY['a', 'b', 'c'], 20", "ARRAY['x', 'y', 'z'], 20");
    // Started: b's unkinded and H jobs, c's K and unkinded jobs.
    let started = [3, 6, 7, 8];
    assert_eq!(ids(&fast), started.map(|i| enqueued[0][i]));
    assert_eq!(ids(&sql), started.map(|i| enqueued[1][i]));
    // One queue, paused or not: the same rule.
    let (rows, sql) = checkout_in(&mut c, "READ COMMITTED", w, "ARRAY['a'], 20");
    assert_eq!((ids(&rows), sql), (vec![], false));
    c.query_one("SELECT jobq_resume('a')", &[]).unwrap();
    let (rows, sql) = checkout_in(&mut c, "READ COMMITTED", w, "ARRAY['a'], 20");
    assert_eq!((ids(&rows), sql), (vec![enqueued[0][0], enqueued[0][1]], false));
    assert_job_tables_consistent(&mut c);
}

#[test]
fn a_waiting_row_held_by_another_transaction_is_passed_over_without_waiting() {
    let (cluster, db_name, mut c) = db();
    let w = register(&mut c);
    let first: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    let second: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    // Another transaction holds the first job's ready row (as a cancel or another checkout does).
    let mut holder = cluster.connect(&db_name);
    holder.batch_execute(&format!("BEGIN; SELECT 1 FROM jobq.ready WHERE id = {first} FOR UPDATE")).unwrap();
    c.batch_execute("SET lock_timeout = '10s'").unwrap();
    let (rows, sql) = checkout_in(&mut c, "READ COMMITTED", w, "ARRAY['q'], 2");
    assert_eq!((ids(&rows), sql), (vec![second], false));
    holder.batch_execute("ROLLBACK").unwrap();
    let (rows, sql) = checkout_in(&mut c, "READ COMMITTED", w, "ARRAY['q'], 2");
    assert_eq!((ids(&rows), sql), (vec![first], false));
    assert_job_tables_consistent(&mut c);
}

#[test]
fn what_the_fast_path_does_not_serve_goes_to_the_sql_with_its_answers() {
    let (cluster, db_name, mut c) = db();
    let w = register(&mut c);
    let enqueue = |c: &mut Client, q: &str| -> i64 { c.query_one("SELECT jobq_enqueue($1)", &[&q]).unwrap().get(0) };
    // An empty array (nothing to claim), a NULL queue name, `wait`.
    let (rows, sql) = checkout_in(&mut c, "READ COMMITTED", w, "'{}'::text[]");
    assert_eq!((ids(&rows), sql), (vec![], true));
    for call in ["ARRAY['q', NULL]", "ARRAY['q'], 1, '5 seconds'"] {
        let id = enqueue(&mut c, "q");
        let (rows, sql) = checkout_in(&mut c, "READ COMMITTED", w, call);
        assert_eq!((ids(&rows), sql), (vec![id], true), "jobq_checkout($1, {call})");
    }
    // The SQL's errors reach the client with their own SQLSTATEs: a worker that does not
    // exist (JQ001), another role's worker (42501), bad input (22004, 22023), a read-only
    // transaction (25006); and nothing was claimed.
    let id = enqueue(&mut c, "q");
    let e = c.query("SELECT id FROM jobq_checkout($1, ARRAY['q'])", &[&Uuid::new_v4()]).unwrap_err();
    assert_eq!(sqlstate(&e), "JQ001");
    c.batch_execute("DROP ROLE IF EXISTS checkout_other; CREATE ROLE checkout_other LOGIN; GRANT jobq_worker TO checkout_other").unwrap();
    let mut other = cluster.connect_as(&db_name, "checkout_other");
    let e = other.query("SELECT id FROM jobq_checkout($1, ARRAY['q'])", &[&w]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    for (call, state) in [("ARRAY['q'], NULL", "22004"), ("ARRAY['q'], 0", "22023")] {
        let e = c.query(&format!("SELECT id FROM jobq_checkout($1, {call})"), &[&w]).unwrap_err();
        assert_eq!(sqlstate(&e), state, "jobq_checkout($1, {call})");
    }
    let mut t = c.transaction().unwrap();
    t.batch_execute("SET TRANSACTION READ ONLY").unwrap();
    let e = t.query("SELECT id FROM jobq_checkout($1, ARRAY['q'])", &[&w]).unwrap_err();
    assert_eq!(sqlstate(&e), "25006");
    drop(t);
    let state: String = c.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
    assert_eq!(state, "ready");
    let (rows, sql) = checkout_in(&mut c, "READ COMMITTED", w, "ARRAY['q']");
    assert_eq!((ids(&rows), sql), (vec![id], false));
    drop(other);
    c.batch_execute("DROP OWNED BY checkout_other; DROP ROLE checkout_other").unwrap();
}

#[test]
fn a_session_checks_out_across_a_drop_and_create_of_the_extension() {
    // The fast paths keep, per session, where the columns are and the oids of jobq's tables
    // (src/relids.rs); after DROP EXTENSION and CREATE EXTENSION (new tables, a new index, a
    // new result type), by this session (round 1) or by another one (round 2), they must find
    // the new ones.
    let (cluster, name, mut c) = db();
    let recreate = "SET client_min_messages = error; DROP EXTENSION jobq CASCADE; CREATE EXTENSION jobq;";
    for round in 0..3 {
        if round == 1 {
            c.batch_execute(recreate).unwrap();
        } else if round == 2 {
            Client::connect(&cluster.url(&name), postgres::NoTls).unwrap().batch_execute(recreate).unwrap();
        }
        let w = register(&mut c);
        let id: i64 = c.query_one("SELECT jobq_enqueue('q', '{\"round\": 1}')", &[]).unwrap().get(0);
        let (rows, sql) = checkout_in(&mut c, "READ COMMITTED", w, "ARRAY['q']");
        assert_eq!((ids(&rows), sql), (vec![id], false), "round {round}");
        assert_eq!(rows[0]["payload"]["round"], 1);
        assert_job_tables_consistent(&mut c);
    }
}

#[test]
fn sixteen_workers_on_one_queue_claim_each_job_once_while_jobs_come_and_go() {
    // The fast path under contention: 16 workers check out of one queue (batches of 1 to 4)
    // while jobs are enqueued, some with a concurrency key (the SQL's part of a call), and
    // others cancelled while they wait. Every job is handed out once, never beyond its key's
    // limit, and ends completed or cancelled.
    const WORKERS: usize = 16;
    const FIRST: i64 = 1500;
    const MORE: i64 = 1500;
    let (cluster, name, mut c) = db();
    let enqueue = "SELECT jobq_enqueue('q', jsonb_build_object('n', $1::int), priority => $1::int % 3,
                          concurrency_key => CASE WHEN $1::int % 5 = 0 THEN 'k' || ($1::int % 7) END,
                          concurrency_limit => 2)";
    for n in 0..FIRST {
        c.query_one(enqueue, &[&(n as i32)]).unwrap();
    }
    let start = Arc::new(Barrier::new(WORKERS + 2));
    let produced = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for i in 0..WORKERS {
        let (url, start, produced) = (cluster.url(&name), start.clone(), produced.clone());
        handles.push(std::thread::spawn(move || {
            let mut c = Client::connect(&url, postgres::NoTls).unwrap();
            let w = register(&mut c);
            let max_jobs = 1 + (i % 4) as i32;
            let mut got = Vec::new();
            start.wait();
            loop {
                // Read before the checkout: when every job was enqueued before a checkout that
                // found nothing and nothing waits, the work is done.
                let all_in = produced.load(Ordering::SeqCst);
                let rows = c.query("SELECT id, attempt, concurrency_key FROM jobq_checkout($1, ARRAY['q'], $2)", &[&w, &max_jobs]).unwrap();
                if rows.is_empty() {
                    let left: i64 = c.query_one("SELECT count(*) FROM jobq.ready", &[]).unwrap().get(0);
                    if all_in && left == 0 {
                        break;
                    }
                    continue;
                }
                for r in rows {
                    let (id, attempt, key): (i64, i32, Option<String>) = (r.get(0), r.get(1), r.get(2));
                    assert_eq!(attempt, 1, "job {id} handed out twice");
                    if let Some(k) = key {
                        let running: i64 = c
                            .query_one("SELECT count(*) FROM jobq.live_jobs WHERE concurrency_key = $1 AND state = 'executing'", &[&k])
                            .unwrap()
                            .get(0);
                        assert!(running <= 2, "key {k}: {running} executing");
                    }
                    assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0), "job {id}");
                    got.push(id);
                }
            }
            got
        }));
    }
    let producer = {
        let (url, start) = (cluster.url(&name), start.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(&url, postgres::NoTls).unwrap();
            start.wait();
            for n in FIRST..FIRST + MORE {
                c.query_one(enqueue, &[&(n as i32)]).unwrap();
            }
        })
    };
    let canceller = {
        let (url, start) = (cluster.url(&name), start.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(&url, postgres::NoTls).unwrap();
            start.wait();
            let mut cancelled = Vec::new();
            for _ in 0..300 {
                let r = c.query_opt("SELECT id FROM jobq.ready ORDER BY random() LIMIT 1", &[]).unwrap();
                let Some(r) = r else { continue };
                let id: i64 = r.get(0);
                let s: String = c.query_one("SELECT jobq_cancel($1)", &[&id]).unwrap().get(0);
                if s == "cancelled" {
                    cancelled.push(id);
                }
            }
            cancelled
        })
    };
    producer.join().unwrap();
    produced.store(true, Ordering::SeqCst);
    let cancelled: Vec<i64> = canceller.join().unwrap();
    let mut done = Vec::new();
    for h in handles {
        done.extend(h.join().unwrap());
    }
    let unique: HashSet<i64> = done.iter().copied().collect();
    assert_eq!(unique.len(), done.len(), "a job was completed twice");
    assert!(cancelled.iter().all(|id| !unique.contains(id)), "a cancelled job was handed out");
    let (completed, cancelled_n, left): (i64, i64, i64) = c
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state = 'cancelled'),
                    count(*) FILTER (WHERE state NOT IN ('completed', 'cancelled')) FROM jobq.jobs",
            &[],
        )
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .unwrap();
    assert_eq!((completed, cancelled_n, left), (done.len() as i64, cancelled.len() as i64, 0));
    assert_eq!(completed + cancelled_n, FIRST + MORE);
    assert_job_tables_consistent(&mut c);
    // The jobs went through both paths.
    let keyed: i64 = c.query_one("SELECT count(*) FROM jobq.jobs WHERE concurrency_key IS NOT NULL AND state = 'completed'", &[]).unwrap().get(0);
    assert!(keyed > 0 && keyed < completed);
}
