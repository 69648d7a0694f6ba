//! Uniqueness keys, concurrency keys and named locks under contention from many real
//! connections, in READ COMMITTED and in REPEATABLE READ client transactions.
mod common;

use common::*;
use postgres::{Client, GenericClient, IsolationLevel};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Iso {
    ReadCommitted,
    RepeatableRead,
    Serializable,
    /// Half the workers READ COMMITTED (checkout's Rust path), half REPEATABLE READ (its SQL):
    /// both paths taking the same keys side by side.
    Mixed,
}

/// Runs `f` in a client transaction at `iso`, retrying the whole transaction on 40001
/// (as the contract asks clients to do under REPEATABLE READ). Returns the result and how many
/// serialization failures were retried.
/// What a client retries: a serialization failure, and under SERIALIZABLE the server running
/// out of room to record read/write conflicts (53200, "not enough elements in RWConflictPool":
/// the pool is sized by max_connections and shared by every serializable transaction of the
/// cluster; seen once in CI on PostgreSQL 17 while the other tests of this file ran beside
/// the 32 serializable workers). Both leave nothing changed.
fn retryable(e: &postgres::Error) -> bool {
    let code = sqlstate(e);
    code == "40001" || (code == "53200" && e.as_db_error().is_some_and(|d| d.message().contains("RWConflictPool")))
}

/// At every level but SERIALIZABLE (whose checkouts may meet a conflict the retry is for), the
/// workers of both paths side by side included, jobq raised no serialization failure.
fn assert_no_needless_retries(iso: Iso, failures: usize) {
    if iso != Iso::Serializable {
        assert_eq!(failures, 0, "jobq raised no serialization failure a retry inside would have avoided");
    }
}

fn in_tx<T>(c: &mut Client, iso: Iso, mut f: impl FnMut(&mut postgres::Transaction) -> Result<T, postgres::Error>) -> (Result<T, postgres::Error>, usize) {
    let mut retries = 0;
    loop {
        let level = match iso {
            Iso::ReadCommitted => IsolationLevel::ReadCommitted,
            Iso::RepeatableRead => IsolationLevel::RepeatableRead,
            Iso::Serializable => IsolationLevel::Serializable,
            Iso::Mixed => unreachable!("run_workers gives each worker one level"),
        };
        let mut tx = c.build_transaction().isolation_level(level).start().unwrap();
        // Take the snapshot before the jobq call, as a real client transaction would.
        tx.query_one("SELECT 1", &[]).unwrap();
        match f(&mut tx) {
            Ok(v) => match tx.commit() {
                Ok(()) => return (Ok(v), retries),
                Err(e) if retryable(&e) => retries += 1,
                Err(e) => return (Err(e), retries),
            },
            Err(e) if retryable(&e) => {
                retries += 1;
                drop(tx);
            }
            Err(e) => {
                drop(tx);
                return (Err(e), retries);
            }
        }
    }
}

/// `n` connections released together by a barrier each run `f(i, client)`.
fn hammer<T: Send + 'static>(cluster: &Cluster, db: &str, n: usize, f: impl Fn(usize, &mut Client) -> T + Send + Sync + 'static) -> Vec<T> {
    let f = Arc::new(f);
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (url, f, barrier) = (cluster.url(db), f.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                barrier.wait();
                f(i, &mut c)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn unique_enqueue_race(strategy: &'static str, on_conflict: &'static str, iso: Iso) {
    let (cluster, name, mut c) = db();
    c.batch_execute("CREATE SEQUENCE commit_order").unwrap();
    for round in 0..8 {
        let key = format!("{strategy}-{on_conflict}-{round}");
        let k = key.clone();
        let results = hammer(cluster, &name, 32, move |i, c| {
            let (r, _) = in_tx(c, iso, |tx| {
                let id: Option<i64> = tx
                    .query_one(
                        "SELECT jobq_enqueue('u', jsonb_build_object('n', $1::int), unique_key => $2, unique_strategy => $3, on_conflict => $4)",
                        &[&(i as i32), &k, &strategy, &on_conflict],
                    )?
                    .get(0);
                // Taken while this transaction still holds what it wrote: the order of these
                // values is the commit order.
                let order: i64 = tx.query_one("SELECT nextval('commit_order')", &[])?.get(0);
                Ok((id, order, i))
            });
            r.map_err(|e| (sqlstate(&e), e.as_db_error().and_then(|d| d.detail().map(str::to_string))))
        });
        let ids: HashSet<i64> = c
            .query("SELECT id FROM jobq.jobs WHERE unique_key = $1", &[&key])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(ids.len(), 1, "round {round}: exactly one job with the key, got {ids:?}");
        let the_id = *ids.iter().next().unwrap();
        let created: Vec<_> = results.iter().filter(|r| matches!(r, Ok((Some(id), _, _)) if *id == the_id)).collect();
        match on_conflict {
            "reject" => {
                assert_eq!(created.len(), 1, "round {round}: one enqueue returned the id");
                for r in &results {
                    match r {
                        Ok((Some(id), _, _)) => assert_eq!(*id, the_id),
                        Err((code, detail)) => {
                            assert_eq!(code, "23505");
                            assert_eq!(detail.as_deref(), Some(format!("existing job id: {the_id}").as_str()));
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
            }
            "discard" => {
                assert_eq!(created.len(), 1);
                assert_eq!(results.iter().filter(|r| matches!(r, Ok((None, _, _)))).count(), 31);
            }
            "replace" => {
                assert!(results.iter().all(|r| matches!(r, Ok((Some(id), _, _)) if *id == the_id)), "all get the one id: {results:?}");
                let last = results.iter().map(|r| r.as_ref().unwrap()).max_by_key(|(_, order, _)| *order).unwrap();
                let payload: Value = c.query_one("SELECT payload FROM jobq.jobs WHERE id = $1", &[&the_id]).unwrap().get(0);
                assert_eq!(payload, json!({"n": last.2}), "the last committed payload wins");
            }
            _ => unreachable!(),
        }
    }
    assert_job_tables_consistent(&mut c);
}

#[test]
fn until_executed_race_reject() {
    unique_enqueue_race("until_executed", "reject", Iso::ReadCommitted);
}
#[test]
fn until_executed_race_discard() {
    unique_enqueue_race("until_executed", "discard", Iso::ReadCommitted);
}
#[test]
fn until_executed_race_replace() {
    unique_enqueue_race("until_executed", "replace", Iso::ReadCommitted);
}
#[test]
fn until_executing_race_reject() {
    unique_enqueue_race("until_executing", "reject", Iso::ReadCommitted);
}
#[test]
fn until_executing_race_replace() {
    unique_enqueue_race("until_executing", "replace", Iso::ReadCommitted);
}
#[test]
fn until_executed_race_reject_repeatable_read() {
    unique_enqueue_race("until_executed", "reject", Iso::RepeatableRead);
}
#[test]
fn until_executing_race_discard_repeatable_read() {
    unique_enqueue_race("until_executing", "discard", Iso::RepeatableRead);
}
#[test]
fn until_executed_race_replace_serializable() {
    unique_enqueue_race("until_executed", "replace", Iso::Serializable);
}

#[test]
fn enqueues_taking_concurrency_keys_in_opposite_orders_never_deadlock() {
    // 32 READ COMMITTED transactions, each enqueuing two jobs with two concurrency keys no
    // job had before; half take the keys in one order, half in the other, and a barrier
    // makes every first enqueue happen before any second one. Enqueue writes no slot row,
    // so nobody waits for anybody: no 40P01, and every transaction commits.
    let (cluster, name, mut c) = db();
    for round in 0..3 {
        let b = Arc::new(Barrier::new(32));
        let results = hammer(cluster, &name, 32, move |i, c| {
            let (first, second) = if i % 2 == 0 { ("a", "b") } else { ("b", "a") };
            // An enqueue that waited for another one would hold everybody at the barrier:
            // the timeout turns such a wait into a failure of this test, not a hang.
            c.batch_execute("SET statement_timeout = '10s'").unwrap();
            let mut tx = c.transaction().unwrap();
            let enqueue = |tx: &mut postgres::Transaction, key: &str| {
                tx.query_one("SELECT jobq_enqueue('opp', concurrency_key => $1, concurrency_limit => 2)", &[&format!("r{round}-{key}")])
                    .map(|r| r.get::<_, i64>(0))
            };
            let one = enqueue(&mut tx, first);
            b.wait();
            let two = enqueue(&mut tx, second);
            match (one, two) {
                (Ok(_), Ok(_)) => tx.commit().map_err(|e| sqlstate(&e)),
                (Err(e), _) | (_, Err(e)) => Err(sqlstate(&e)),
            }
        });
        assert!(results.iter().all(|r| r.is_ok()), "round {round}: {results:?}");
    }
    let n: i64 = c.query_one("SELECT count(*) FROM jobq.jobs WHERE queue = 'opp'", &[]).unwrap().get(0);
    assert_eq!(n, 3 * 32 * 2);
    // The limits still hold when these jobs run: 2 at most per key.
    let w = register(&mut c);
    let got = c.query("SELECT concurrency_key FROM jobq_checkout($1, ARRAY['opp'], 100)", &[&w]).unwrap();
    assert_eq!(got.len(), 3 * 2 * 2, "two of each of the six keys");
}

#[test]
fn replace_never_rejects_when_the_holder_starts_in_between() {
    // Debounced enqueues of one until_executing key race with workers that start its job: a
    // replace that finds the holder already started must take the released key and enqueue
    // anew, never raise 23505 (the key was free again).
    let (cluster, name, _) = db();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (url, stop, started) = (cluster.url(&name), stop.clone(), started.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                let w = register(&mut c);
                while !stop.load(Ordering::Relaxed) {
                    for row in c.query("SELECT id FROM jobq_checkout($1, ARRAY['deb'], 4)", &[&w]).unwrap() {
                        started.fetch_add(1, Ordering::Relaxed);
                        let id: i64 = row.get(0);
                        c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap();
                    }
                }
            })
        })
        .collect();
    let outcomes = hammer(cluster, &name, 16, |i, c| {
        let mut errors = Vec::new();
        for n in 0..150 {
            let r = c.query_one(
                "SELECT jobq_enqueue('deb', jsonb_build_object('n', $1::int), unique_key => 'debounced',
                                     unique_strategy => 'until_executing', on_conflict => 'replace')",
                &[&((i * 1000 + n) as i32)],
            );
            match r {
                Ok(row) => assert!(row.get::<_, Option<i64>>(0).is_some(), "replace always returns a job id"),
                Err(e) => errors.push(format!("{}: {e:?}", sqlstate(&e))),
            }
        }
        errors
    });
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let errors: Vec<String> = outcomes.into_iter().flatten().collect();
    assert!(errors.is_empty(), "{} enqueues failed, e.g. {:?}", errors.len(), errors.first());
    assert!(started.load(Ordering::Relaxed) > 10, "the workers started jobs while the producers enqueued");
    assert_job_tables_consistent(&mut cluster.connect(&name));
}

#[test]
fn cancels_and_replaces_racing_checkouts_never_deadlock_and_lose_nothing() {
    // A cancel or a replace changes a waiting job (its ready row, then its job row) while
    // checkouts claim the same jobs (ready rows, then job rows), many of them keyed (an
    // until_executing key, a concurrency key). 40P01 would mean two writers took them in
    // opposite orders. Afterwards every job is completed or cancelled, each exactly once, the
    // waiting set matches the jobs, and no slot or key is left held for a job that did not
    // start (a replace that commits between a checkout's snapshot and its lock).
    let (cluster, name, mut c) = db();
    const JOBS: i64 = 600;
    c.batch_execute(&format!(
        "SELECT jobq_enqueue('race', jsonb_build_object('n', g), unique_key => CASE WHEN g <= 50 THEN 'k' || g END,
                             unique_strategy => 'until_executing',
                             concurrency_key => CASE WHEN g % 3 = 0 THEN 'c' || (g % 4) END, concurrency_limit => 2)
           FROM generate_series(1, {JOBS}) g"
    ))
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let completed = Arc::new(Mutex::new(Vec::<i64>::new()));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (url, stop, errors, completed) = (cluster.url(&name), stop.clone(), errors.clone(), completed.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                let w = register(&mut c);
                while !stop.load(Ordering::Relaxed) {
                    match c.query("SELECT id FROM jobq_checkout($1, ARRAY['race'], 3)", &[&w]) {
                        Ok(rows) => {
                            for row in rows {
                                let id: i64 = row.get(0);
                                if c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0) {
                                    completed.lock().unwrap().push(id);
                                }
                            }
                        }
                        Err(e) => errors.lock().unwrap().push(format!("checkout {}: {e}", sqlstate(&e))),
                    }
                }
            })
        })
        .collect();
    let outcomes = hammer(cluster, &name, 8, |i, c| {
        let mut errors = Vec::new();
        for n in 0..100i64 {
            let r = if i % 2 == 0 {
                // Cancel ids spread over the whole range from the last one down (checkout takes
                // the lowest first): waiting, executing or gone.
                c.query_one("SELECT jobq_cancel(max(id) - $1) IS NOT NULL FROM jobq.jobs", &[&((n * 7 + i as i64 * 13) % JOBS)])
            } else {
                c.query_one(
                    "SELECT jobq_enqueue('race', jsonb_build_object('r', $1::int), unique_key => 'k' || ($1::int % 50),
                                         unique_strategy => 'until_executing', on_conflict => 'replace',
                                         concurrency_key => 'c' || ($1::int % 4), concurrency_limit => 2) IS NOT NULL",
                    &[&((n * 8 + i as i64) as i32)],
                )
            };
            if let Err(e) = r {
                errors.push(format!("{}: {e}", sqlstate(&e)));
            }
        }
        errors
    });
    let mut all_errors: Vec<String> = outcomes.into_iter().flatten().collect();
    // Let the workers drain what is left, then stop them.
    wait_until("the queue drained", Duration::from_secs(60), || {
        c.query_one("SELECT NOT EXISTS (SELECT 1 FROM jobq.jobs WHERE state IN ('ready', 'executing'))", &[]).unwrap().get(0)
    });
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    all_errors.extend(errors.lock().unwrap().drain(..));
    assert!(all_errors.is_empty(), "{} calls failed, e.g. {:?}", all_errors.len(), all_errors.first());
    let completed = completed.lock().unwrap();
    let distinct: HashSet<_> = completed.iter().collect();
    assert_eq!(distinct.len(), completed.len(), "a job was completed twice");
    let r = c
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state = 'cancelled'), count(*) FROM jobq.jobs",
            &[],
        )
        .unwrap();
    let (done, cancelled, total) = (r.get::<_, i64>(0), r.get::<_, i64>(1), r.get::<_, i64>(2));
    assert_eq!(done as usize, completed.len(), "the completed jobs are the ones workers completed");
    assert_eq!(done + cancelled, total, "every job ended completed or cancelled");
    assert!(cancelled > 0 && done > 0, "both cancels and completions happened ({cancelled}, {done})");
    assert_job_tables_consistent(&mut c);
}

/// A job moves between jobq.live_jobs and jobq.finished_jobs when it finishes (complete,
/// fail, cancel) and when it is retried. Cancels and retries of random jobs race workers that
/// complete or discard them: a cancel always finds the job (never NULL, whichever table it is
/// in at that instant), no call fails, and every job is in exactly one table at the end.
#[test]
fn cancels_retries_and_completions_move_jobs_between_tables_without_losing_one() {
    let (cluster, name, mut c) = db();
    const JOBS: i64 = 300;
    let first: i64 = c
        .query_one(
            &format!(
                "SELECT min(jobq_enqueue('move', jsonb_build_object('n', g),
                                         unique_key => CASE WHEN g % 3 = 0 THEN 'mv' || g END))
                   FROM generate_series(1, {JOBS}) g"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let workers: Vec<_> = (0..3)
        .map(|k| {
            let (url, stop, errors) = (cluster.url(&name), stop.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                let w = register(&mut c);
                let mut n = 0i64;
                while !stop.load(Ordering::Relaxed) {
                    let ids: Vec<i64> = match c.query("SELECT id FROM jobq_checkout($1, ARRAY['move'], 2)", &[&w]) {
                        Ok(rows) => rows.iter().map(|r| r.get(0)).collect(),
                        Err(e) => {
                            errors.lock().unwrap().push(format!("checkout {}: {e}", sqlstate(&e)));
                            continue;
                        }
                    };
                    for id in ids {
                        n += 1;
                        // Complete most, discard some: both leave jobq.live_jobs. The hot jobs
                        // are always discarded, so that retries keep bringing them back.
                        let r = if id < first + 8 || (n + k as i64) % 4 == 0 {
                            c.query_one("SELECT jobq_fail($1, $2, discard => true) IS NOT NULL", &[&id, &w])
                        } else {
                            c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w])
                        };
                        if let Err(e) = r {
                            errors.lock().unwrap().push(format!("finish {}: {e}", sqlstate(&e)));
                        }
                    }
                }
            })
        })
        .collect();
    let outcomes = hammer(cluster, &name, 8, move |i, c| {
        let (mut errors, mut nulls, mut cancelled, mut retried) = (Vec::new(), 0, 0, 0);
        for n in 0..300i64 {
            // Half the sessions spread over every job, half cancel and retry the same 8 jobs
            // at once, so those flip between the tables under each other's feet.
            let id = if i < 4 { first + (n / 2) % 8 } else { first + (n * 37 + i as i64 * 53) % JOBS };
            if i % 2 == 0 {
                match c.query_one("SELECT jobq_cancel($1)", &[&id]) {
                    Ok(r) => match r.get::<_, Option<String>>(0).as_deref() {
                        None => nulls += 1,
                        Some("cancelled") => cancelled += 1,
                        Some(_) => {}
                    },
                    Err(e) => errors.push(format!("cancel {}: {e}", sqlstate(&e))),
                }
            } else {
                match c.query_one("SELECT jobq_retry($1)", &[&id]) {
                    Ok(r) => retried += r.get::<_, bool>(0) as i32,
                    Err(e) => errors.push(format!("retry {}: {e}", sqlstate(&e))),
                }
            }
        }
        (errors, nulls, cancelled, retried)
    });
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let mut all_errors: Vec<String> = errors.lock().unwrap().drain(..).collect();
    let (mut nulls, mut cancelled, mut retried) = (0, 0, 0);
    for (e, n, ca, r) in outcomes {
        all_errors.extend(e);
        nulls += n;
        cancelled += ca;
        retried += r;
    }
    assert!(all_errors.is_empty(), "{} calls failed, e.g. {:?}", all_errors.len(), all_errors.first());
    assert_eq!(nulls, 0, "a cancel did not find an existing job");
    assert!(cancelled > 0 && retried > 0, "both cancels and retries took effect ({cancelled}, {retried})");
    let r = c.query_one("SELECT count(*), count(DISTINCT id) FROM jobq.jobs WHERE queue = 'move'", &[]).unwrap();
    assert_eq!((r.get::<_, i64>(0), r.get::<_, i64>(1)), (JOBS, JOBS), "every job is in exactly one table");
    assert_job_tables_consistent(&mut c);
    // The unique keys follow their jobs: held by every job that is not finished, by no other.
    let r = c
        .query_one(
            "SELECT (SELECT count(*) FROM jobq.locks l LEFT JOIN jobq.jobs j ON j.id = l.job_id
                      WHERE l.key LIKE 'mv%' AND (j.id IS NULL OR j.state NOT IN ('ready', 'executing'))),
                    (SELECT count(*) FROM jobq.jobs j
                      WHERE j.queue = 'move' AND j.unique_key IS NOT NULL AND j.state IN ('ready', 'executing')
                        AND NOT EXISTS (SELECT 1 FROM jobq.locks l WHERE l.key = j.unique_key AND l.job_id = j.id))",
            &[],
        )
        .unwrap();
    assert_eq!((r.get::<_, i64>(0), r.get::<_, i64>(1)), (0, 0), "keys held by finished jobs, unfinished jobs without their key");
}

#[test]
fn unique_keys_are_held_and_released_as_their_strategy_says() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let enq = |c: &mut Client, key: &str, strategy: &str| -> Result<Option<i64>, String> {
        c.query_one("SELECT jobq_enqueue('u', unique_key => $1, unique_strategy => $2)", &[&key, &strategy])
            .map(|r| r.get(0))
            .map_err(|e| sqlstate(&e))
    };
    let checkout_one = |c: &mut Client| -> i64 { c.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().get(0) };

    // until_executed: held while waiting and running, kept on retry, released on complete.
    let a = enq(&mut c, "A", "until_executed").unwrap().unwrap();
    assert_eq!(checkout_one(&mut c), a);
    assert_eq!(enq(&mut c, "A", "until_executed"), Err("23505".into()), "held while executing");
    assert_eq!(c.query_one("SELECT jobq_fail($1, $2, retry_in => interval '0')", &[&a, &w]).unwrap().get::<_, String>(0), "ready");
    assert_eq!(enq(&mut c, "A", "until_executed"), Err("23505".into()), "kept by the retried job");
    assert_eq!(checkout_one(&mut c), a);
    assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&a, &w]).unwrap().get::<_, bool>(0));
    let a2 = enq(&mut c, "A", "until_executed").unwrap().unwrap();
    // ... released on cancel and on death too.
    assert_eq!(c.query_one("SELECT jobq_cancel($1)", &[&a2]).unwrap().get::<_, String>(0), "cancelled");
    let a3 = enq(&mut c, "A", "until_executed").unwrap().unwrap();
    c.execute("SELECT jobq_cancel($1)", &[&a3]).unwrap();
    // The key is free again: a2 takes it back on retry, so a3 cannot.
    assert!(c.query_one("SELECT jobq_retry($1)", &[&a2]).unwrap().get::<_, bool>(0));
    assert!(!c.query_one("SELECT jobq_retry($1)", &[&a3]).unwrap().get::<_, bool>(0), "retry refused: key taken");

    // until_executing: held while waiting, released when it starts, so a new one may queue.
    let b = enq(&mut c, "B", "until_executing").unwrap().unwrap();
    assert_eq!(enq(&mut c, "B", "until_executing"), Err("23505".into()));
    c.execute("SELECT jobq_cancel($1)", &[&a2]).unwrap();
    assert_eq!(checkout_one(&mut c), b);
    let b2 = enq(&mut c, "B", "until_executing").unwrap().unwrap();
    assert_eq!(enq(&mut c, "B", "until_executing"), Err("23505".into()), "b2 waits with the key");
    // b fails and waits again: b2 holds the key, so b waits without it (it is not dropped).
    assert_eq!(c.query_one("SELECT jobq_fail($1, $2)", &[&b, &w]).unwrap().get::<_, String>(0), "ready");
    let holder: i64 = c.query_one("SELECT job_id FROM jobq.locks WHERE key = 'B'", &[]).unwrap().get(0);
    assert_eq!(holder, b2);
    assert_eq!(c.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&b]).unwrap().get::<_, String>(0), "ready");
}

/// One execution as its worker saw it: the job's key (concurrency, unique or rate key), when
/// the checkout that returned it was sent (`asked`), when it returned (`start`), when the
/// work ended, and the job's id.
#[derive(Clone, Debug)]
struct Run {
    key: String,
    asked: Instant,
    start: Instant,
    end: Instant,
    id: i64,
}
type Intervals = Arc<Mutex<Vec<Run>>>;

/// What a worker does with a job between its checkout and its complete.
#[derive(Clone)]
enum Work {
    /// Works on every job for this long.
    For(Duration),
    /// Holds each job of concurrency key `key` until `n` of the key's jobs are executing (then
    /// counts one in `full`) or none of them is left ready, and completes every other job at
    /// once: a wait for a condition, so that a limit is shown to be used to the full without
    /// timing (one used below `n` leaves the holds waiting until their deadline).
    HoldUntilRunning { key: &'static str, n: i64, full: Arc<AtomicUsize> },
}

fn work_loop(c: &mut Client, w: Uuid, iso: Iso, intervals: &Intervals, stop: &AtomicBool, work: &Work) -> usize {
    let mut serialization_failures = 0;
    while !stop.load(Ordering::SeqCst) {
        let asked = Instant::now();
        let (rows, retries) = in_tx(c, iso, |tx| {
            tx.query(
                "SELECT c.id, coalesce(c.concurrency_key, c.unique_key, j.rate_key, '')
                   FROM jobq_checkout($1, max_jobs => 2) c JOIN jobq.live_jobs j USING (id)",
                &[&w],
            )
        });
        serialization_failures += retries;
        let rows = rows.unwrap();
        if rows.is_empty() {
            std::thread::yield_now();
            continue;
        }
        for r in rows {
            let (id, key): (i64, String) = (r.get(0), r.get(1));
            let start = Instant::now();
            match work {
                Work::For(d) => std::thread::sleep(*d),
                Work::HoldUntilRunning { key: held, n, full } if key == *held => {
                    wait_until("the key's jobs to run at once, or none left ready", Duration::from_secs(60), || {
                        let r = c
                            .query_one(
                                "SELECT count(*) FILTER (WHERE state = 'executing'), count(*) FILTER (WHERE state = 'ready')
                                   FROM jobq.jobs WHERE concurrency_key = $1",
                                &[held],
                            )
                            .unwrap();
                        let (running, ready): (i64, i64) = (r.get(0), r.get(1));
                        if running >= *n {
                            full.fetch_add(1, Ordering::SeqCst);
                        }
                        running >= *n || ready == 0
                    })
                }
                Work::HoldUntilRunning { .. } => {}
            }
            let end = Instant::now();
            intervals.lock().unwrap().push(Run { key, asked, start, end, id });
            let (ok, retries) = in_tx(c, iso, |tx| tx.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).map(|r| r.get::<_, bool>(0)));
            serialization_failures += retries;
            assert!(ok.unwrap(), "complete of job {id}");
        }
    }
    serialization_failures
}

/// The ids of the jobs one checkout of up to 10 by worker `w` returns, in claim order.
fn checkout_ids(c: &mut impl GenericClient, w: Uuid) -> Vec<i64> {
    c.query("SELECT id FROM jobq_checkout($1, max_jobs => 10)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect()
}

/// Runs `workers` work loops until every job is completed; returns the recorded intervals
/// and the number of serialization failures the loops had to retry.
fn run_workers(cluster: &Cluster, db: &str, workers: usize, iso: Iso, work: Work, monitor: impl Fn(&mut Client) + Send + 'static) -> (Vec<Run>, usize) {
    run_workers_until(cluster, db, workers, iso, work, monitor, "SELECT count(*) FROM jobq.jobs WHERE state <> 'completed'")
}

/// Runs `workers` work loops until `left` (a query of one bigint: what is still to be done)
/// gives zero or less; returns as `run_workers` does.
fn run_workers_until(
    cluster: &Cluster,
    db: &str,
    workers: usize,
    iso: Iso,
    work: Work,
    monitor: impl Fn(&mut Client) + Send + 'static,
    left: &str,
) -> (Vec<Run>, usize) {
    let intervals: Intervals = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..workers)
        .map(|i| {
            let (url, intervals, stop, work) = (cluster.url(db), intervals.clone(), stop.clone(), work.clone());
            let iso = match iso {
                Iso::Mixed if i % 2 == 0 => Iso::ReadCommitted,
                Iso::Mixed => Iso::RepeatableRead,
                iso => iso,
            };
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                let w = register(&mut c);
                work_loop(&mut c, w, iso, &intervals, &stop, &work)
            })
        })
        .collect();
    let mut c = cluster.connect(db);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        monitor(&mut c);
        let left: i64 = c.query_one(left, &[]).unwrap().get(0);
        if left <= 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{left} left to do after two minutes");
    }
    stop.store(true, Ordering::SeqCst);
    let failures = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let v = intervals.lock().unwrap().clone();
    (v, failures)
}

fn max_overlap(intervals: &[Run], key: &str) -> usize {
    let mut events: Vec<(Instant, i32)> = intervals
        .iter()
        .filter(|r| r.key == key)
        .flat_map(|r| [(r.start, 1), (r.end, -1)])
        .collect();
    events.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut cur, mut max) = (0i32, 0i32);
    for (_, d) in events {
        cur += d;
        max = max.max(cur);
    }
    max as usize
}

fn while_executing_never_overlaps(iso: Iso) {
    let (cluster, name, mut c) = db();
    // The keyed jobs sit at the head of the queue; plain work queued behind them.
    c.execute("SELECT jobq_enqueue('w', unique_key => 'solo', unique_strategy => 'while_executing') FROM generate_series(1, 10)", &[]).unwrap();
    c.execute("SELECT jobq_enqueue_batch('w', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 200)), priority => 1)", &[]).unwrap();
    let (iv, failures) = run_workers(cluster, &name, 8, iso, Work::For(Duration::from_millis(15)), |c| {
        let n: i64 = c.query_one("SELECT count(*) FROM jobq.jobs WHERE unique_key = 'solo' AND state = 'executing'", &[]).unwrap().get(0);
        assert!(n <= 1, "SQL sees {n} 'solo' jobs executing");
    });
    assert_eq!(iv.iter().filter(|r| r.key == "solo").count(), 10);
    assert_eq!(max_overlap(&iv, "solo"), 1, "two 'solo' jobs executed at once");
    // Other work flowed while the keyed jobs ran one after another.
    let first_solo = iv.iter().filter(|r| r.key == "solo").map(|r| r.start).min().unwrap();
    let last_solo = iv.iter().filter(|r| r.key == "solo").map(|r| r.end).max().unwrap();
    let plain_between = iv.iter().filter(|r| r.key.is_empty() && r.start > first_solo && r.start < last_solo).count();
    assert!(plain_between > 0, "plain jobs were started while the 'solo' jobs were serialised");
    assert_no_needless_retries(iso, failures);
    assert_job_tables_consistent(&mut c);
}

#[test]
fn while_executing_jobs_never_overlap() {
    while_executing_never_overlaps(Iso::ReadCommitted);
}

#[test]
fn while_executing_jobs_never_overlap_repeatable_read() {
    while_executing_never_overlaps(Iso::RepeatableRead);
}

#[test]
fn while_executing_jobs_never_overlap_with_both_checkout_paths_side_by_side() {
    while_executing_never_overlaps(Iso::Mixed);
}

fn concurrency_limit_holds(iso: Iso) {
    let (cluster, name, mut c) = db();
    c.execute("SELECT jobq_enqueue('c', concurrency_key => 'ck', concurrency_limit => 3) FROM generate_series(1, 60)", &[]).unwrap();
    c.execute("SELECT jobq_enqueue_batch('c', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 100)), priority => 1)", &[]).unwrap();
    let sql_max = Arc::new(AtomicUsize::new(0));
    let m = sql_max.clone();
    // Each keyed job is held until 3 of the key's jobs run at once (or none is left ready).
    let full = Arc::new(AtomicUsize::new(0));
    let work = Work::HoldUntilRunning { key: "ck", n: 3, full: full.clone() };
    let (iv, failures) = run_workers(cluster, &name, 12, iso, work, move |c| {
        let n: i64 = c.query_one("SELECT count(*) FROM jobq.jobs WHERE concurrency_key = 'ck' AND state = 'executing'", &[]).unwrap().get(0);
        m.fetch_max(n as usize, Ordering::SeqCst);
        assert!(n <= 3, "SQL sees {n} 'ck' jobs executing");
    });
    assert_eq!(iv.iter().filter(|r| r.key == "ck").count(), 60, "all keyed jobs completed once");
    let overlap = max_overlap(&iv, "ck");
    assert!(overlap <= 3, "{overlap} 'ck' jobs executed at once");
    assert!(full.load(Ordering::SeqCst) > 0, "the limit of 3 was used: 3 keyed jobs ran at once");
    assert!(sql_max.load(Ordering::SeqCst) <= 3);
    let slots: i64 = c.query_one("SELECT count(*) FROM jobq.slots", &[]).unwrap().get(0);
    assert_eq!(slots, 0, "every slot was given back, and a key no job uses leaves no row");
    assert_no_needless_retries(iso, failures);
    assert_job_tables_consistent(&mut c);
}

#[test]
fn concurrency_limit_of_3_holds_under_12_workers() {
    concurrency_limit_holds(Iso::ReadCommitted);
}

#[test]
fn concurrency_limit_of_3_holds_under_12_workers_repeatable_read() {
    concurrency_limit_holds(Iso::RepeatableRead);
}

#[test]
fn concurrency_limit_of_3_holds_with_both_checkout_paths_side_by_side() {
    concurrency_limit_holds(Iso::Mixed);
}

#[test]
fn concurrency_limit_of_3_holds_under_12_workers_serializable() {
    // SERIALIZABLE may still fail a commit (SSI), which the loop retries; the limit holds.
    concurrency_limit_holds(Iso::Serializable);
}

/// Rate limits (src/sql/rate_limits.sql): 32 workers, 30 jobs of a key limited to 5 starts per
/// 400 ms at the head of the queue and 150 plain jobs behind them. No window of 400 ms holds
/// more than 5 starts, by the server's start times (exact) and by the workers' own clocks (a
/// job started between the moment its checkout was sent and the moment it returned, so any 6
/// starts span more than 400 ms from the first send to the last return).
fn rate_limit_holds(iso: Iso) {
    let (cluster, name, mut c) = db();
    let per = Duration::from_millis(400);
    c.execute("SELECT jobq_set_rate_limit('api', 5, '400 ms')", &[]).unwrap();
    c.execute("SELECT jobq_enqueue('r', rate_key => 'api') FROM generate_series(1, 30)", &[]).unwrap();
    c.execute("SELECT jobq_enqueue_batch('r', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 150)), priority => 1)", &[]).unwrap();
    let (iv, failures) = run_workers(cluster, &name, 32, iso, Work::For(Duration::from_millis(1)), |_| {});
    let mut runs: Vec<&Run> = iv.iter().filter(|r| r.key == "api").collect();
    assert_eq!(runs.len(), 30, "every rate-limited job ran once");
    assert_eq!(iv.len(), 180, "and every plain one");
    runs.sort_by_key(|r| r.asked);
    for w in runs.windows(6) {
        let span = w.iter().map(|r| r.start).max().unwrap() - w[0].asked;
        assert!(span > per, "6 starts within {span:?} by the workers' clocks: jobs {:?}", w.iter().map(|r| r.id).collect::<Vec<_>>());
    }
    let started: Vec<f64> = c
        .query("SELECT extract(epoch FROM started_at)::float8 FROM jobq.jobs WHERE rate_key = 'api' ORDER BY started_at", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(started.len(), 30);
    for w in started.windows(6) {
        assert!(w[5] - w[0] > 0.4, "6 starts within {} s by the server's start times", w[5] - w[0]);
    }
    assert_no_needless_retries(iso, failures);
    assert_job_tables_consistent(&mut c);
}

#[test]
fn rate_limit_holds_under_32_workers() {
    rate_limit_holds(Iso::ReadCommitted);
}

#[test]
fn rate_limit_holds_under_32_workers_repeatable_read() {
    rate_limit_holds(Iso::RepeatableRead);
}

#[test]
fn rate_limit_holds_under_32_workers_serializable() {
    rate_limit_holds(Iso::Serializable);
}

/// A rate limit is used to the full, not undershot, under the same 32 workers: 5 starts an
/// hour, 30 of its jobs at the head of the queue and 150 plain jobs behind them. The workers
/// run until every plain job and 5 of the keyed ones are completed (what a correct checkout
/// reaches however slow the machine), hammering the full key all the while; then exactly 5
/// keyed jobs have started and 25 wait, ready.
fn rate_limit_is_used_to_the_full(iso: Iso) {
    let (cluster, name, mut c) = db();
    c.execute("SELECT jobq_set_rate_limit('api', 5, '1 hour')", &[]).unwrap();
    c.execute("SELECT jobq_enqueue('r', rate_key => 'api') FROM generate_series(1, 30)", &[]).unwrap();
    c.execute("SELECT jobq_enqueue_batch('r', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 150)), priority => 1)", &[]).unwrap();
    let left = "SELECT count(*) FILTER (WHERE rate_key IS NULL AND state <> 'completed')
                     + 5 - count(*) FILTER (WHERE rate_key = 'api' AND state = 'completed')
                  FROM jobq.jobs";
    let (iv, failures) = run_workers_until(cluster, &name, 32, iso, Work::For(Duration::from_millis(1)), |_| {}, left);
    assert_eq!(iv.iter().filter(|r| r.key == "api").count(), 5, "5 keyed jobs ran, no more");
    assert_eq!(iv.iter().filter(|r| r.key.is_empty()).count(), 150, "every plain job ran");
    let states: Vec<(String, i64)> = c
        .query("SELECT state::text, count(*) FROM jobq.jobs WHERE rate_key = 'api' GROUP BY 1 ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(states, [("completed".to_string(), 5), ("ready".to_string(), 25)]);
    assert_no_needless_retries(iso, failures);
    assert_job_tables_consistent(&mut c);
}

#[test]
fn rate_limit_is_used_to_the_full_under_32_workers() {
    rate_limit_is_used_to_the_full(Iso::ReadCommitted);
}

#[test]
fn rate_limit_is_used_to_the_full_under_32_workers_repeatable_read() {
    rate_limit_is_used_to_the_full(Iso::RepeatableRead);
}

#[test]
fn rate_limit_is_used_to_the_full_under_32_workers_serializable() {
    rate_limit_is_used_to_the_full(Iso::Serializable);
}

/// A rate limit changed while its jobs start: it flips between 5 and 3 starts per 400 ms
/// while 16 workers run 40 of its jobs. No 400 ms ever holds more than 5 starts: the starts
/// made count across every change (jobq_set_rate_limit keeps them, src/sql/rate_limits.sql).
#[test]
fn a_rate_limit_changed_while_its_jobs_start_never_lets_more_through() {
    let (cluster, name, mut c) = db();
    c.execute("SELECT jobq_set_rate_limit('flip', 5, '400 ms')", &[]).unwrap();
    c.execute("SELECT jobq_enqueue('f', rate_key => 'flip') FROM generate_series(1, 40)", &[]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(AtomicUsize::new(0));
    let flipper = {
        let (url, stop, flips) = (cluster.url(&name), stop.clone(), flips.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(&url, postgres::NoTls).unwrap();
            while !stop.load(Ordering::SeqCst) {
                let n = flips.fetch_add(1, Ordering::SeqCst);
                c.execute("SELECT jobq_set_rate_limit('flip', $1, '400 ms')", &[&(if n % 2 == 0 { 3 } else { 5 })]).unwrap();
                // The flip rate (a load's pace, not a wait for a condition): about 50 a second,
                // several within every window.
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let (iv, _) = run_workers(cluster, &name, 16, Iso::ReadCommitted, Work::For(Duration::from_millis(1)), |_| {});
    stop.store(true, Ordering::SeqCst);
    flipper.join().unwrap();
    assert_eq!(iv.len(), 40);
    assert!(flips.load(Ordering::SeqCst) > 10, "the limit changed while the jobs started");
    let started: Vec<f64> = c
        .query("SELECT extract(epoch FROM started_at)::float8 FROM jobq.jobs WHERE rate_key = 'flip' ORDER BY started_at", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for w in started.windows(6) {
        assert!(w[5] - w[0] > 0.4, "6 starts within {} s while the limit flipped between 5 and 3", w[5] - w[0]);
    }
    assert_job_tables_consistent(&mut c);
}

/// A change of a limit waits for the transactions that took a start of its key, and meanwhile
/// a checkout passes the key's jobs over instead of waiting (src/sql/rate_limits.sql: the
/// key's advisory lock, shared by takers, exclusive for a change). Once the change commits,
/// the start taken before it counts against the new limit.
#[test]
fn a_rate_limit_change_waits_for_a_start_in_flight_and_no_checkout_waits_for_it() {
    let (cluster, name, mut c) = db();
    let w = register(&mut c);
    c.execute("SELECT jobq_set_rate_limit('busy', 2, '1 hour')", &[]).unwrap();
    let keyed: Vec<i64> = c.query("SELECT jobq_enqueue('q', rate_key => 'busy') FROM generate_series(1, 4)", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    let plain: i64 = c.query_one("SELECT jobq_enqueue('q', priority => 1)", &[]).unwrap().get(0);
    // A checkout holds a start of 'busy' in an open transaction.
    let mut holder = cluster.connect(&name);
    holder.batch_execute("BEGIN").unwrap();
    let got: Vec<i64> = holder.query("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(got, vec![keyed[0]]);
    // The change waits for it (awaited in pg_stat_activity) ...
    let mut changer = cluster.connect(&name);
    let pid: i32 = changer.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let change = std::thread::spawn(move || changer.execute("SELECT jobq_set_rate_limit('busy', 3, '1 hour')", &[]).map_err(|e| e.to_string()));
    wait_until("the change to wait for the start in flight", Duration::from_secs(30), || {
        c.query_one("SELECT wait_event IS NOT DISTINCT FROM 'advisory' FROM pg_stat_activity WHERE pid = $1", &[&pid]).map(|r| r.get::<_, bool>(0)).unwrap_or(false)
    });
    // ... and a checkout meanwhile neither waits nor starts a job of the key: the plain job
    // behind them starts. (The statement timeout turns a wait into a failure.)
    c.batch_execute("SET statement_timeout = '20s'").unwrap();
    let got = checkout_ids(&mut c, w);
    assert_eq!(got, vec![plain], "the key's jobs are passed over while its limit changes");
    holder.batch_execute("COMMIT").unwrap();
    assert_eq!(change.join().unwrap(), Ok(1));
    // The new limit counts the start made before it: two more start, not three.
    let got = checkout_ids(&mut c, w);
    assert_eq!(got, vec![keyed[1], keyed[2]]);
    assert_job_tables_consistent(&mut c);
}

/// A checkout that finds a key's window full passes its jobs over without the key's lock: a
/// change of the limit does not wait for that checkout's open transaction.
#[test]
fn a_checkout_that_passed_a_full_rate_key_over_does_not_hold_back_a_change() {
    let (cluster, name, mut c) = db();
    let w = register(&mut c);
    c.execute("SELECT jobq_set_rate_limit('full', 1, '1 hour')", &[]).unwrap();
    let keyed: Vec<i64> = c.query("SELECT jobq_enqueue('q', rate_key => 'full') FROM generate_series(1, 2)", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    let first: i64 = c.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().get(0);
    assert_eq!(first, keyed[0], "the window's one start");
    let mut looker = cluster.connect(&name);
    looker.batch_execute("BEGIN").unwrap();
    assert!(looker.query("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().is_empty(), "the window is full");
    // The change goes through while the looker's transaction is open (the statement timeout
    // turns a wait into a failure).
    c.batch_execute("SET statement_timeout = '20s'").unwrap();
    c.execute("SELECT jobq_set_rate_limit('full', 2, '1 hour')", &[]).unwrap();
    looker.batch_execute("COMMIT").unwrap();
    let got = checkout_ids(&mut c, w);
    assert_eq!(got, vec![keyed[1]], "the raised limit's second start");
    assert_job_tables_consistent(&mut c);
}

#[test]
fn a_rate_limited_key_holds_back_only_its_own_jobs() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    c.execute("SELECT jobq_set_rate_limit('slow', 1, '1 hour')", &[]).unwrap();
    let slow: Vec<i64> = c.query("SELECT jobq_enqueue('q', rate_key => 'slow') FROM generate_series(1, 3)", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    let unlimited: i64 = c.query_one("SELECT jobq_enqueue('q', rate_key => 'no limit set')", &[]).unwrap().get(0);
    let plain: i64 = c.query_one("SELECT jobq_enqueue('q', priority => 1)", &[]).unwrap().get(0);
    assert_eq!(checkout_ids(&mut c, w), vec![slow[0], unlimited, plain], "one start of 'slow', then the jobs behind it");
    assert_eq!(checkout_ids(&mut c, w), Vec::<i64>::new());
    // A checkout that rolls back gives its start back.
    c.execute("SELECT jobq_set_rate_limit('slow', 2, '1 hour')", &[]).unwrap();
    let mut tx = c.transaction().unwrap();
    let got = checkout_ids(&mut tx, w);
    assert_eq!(got, vec![slow[1]], "a raised limit counts the start already made");
    tx.rollback().unwrap();
    assert_eq!(checkout_ids(&mut c, w), vec![slow[1]]);
    assert_eq!(checkout_ids(&mut c, w), Vec::<i64>::new());
    // Lowered to 1: the most recent start is kept, so nothing starts.
    c.execute("SELECT jobq_set_rate_limit('slow', 1, '1 hour')", &[]).unwrap();
    assert_eq!(checkout_ids(&mut c, w), Vec::<i64>::new());
    // Removed: the key's jobs start as plain ones, and nothing of the limit is left.
    c.execute("SELECT jobq_set_rate_limit('slow', NULL, NULL)", &[]).unwrap();
    assert_eq!(checkout_ids(&mut c, w), vec![slow[2]]);
    let left: i64 = c.query_one("SELECT (SELECT count(*) FROM jobq.rate_limits) + (SELECT count(*) FROM jobq.rate_slots)", &[]).unwrap().get(0);
    assert_eq!(left, 0);
}

#[test]
fn bad_rate_limits_are_refused_and_change_nothing() {
    let (_, _, mut c) = db();
    c.execute("SELECT jobq_set_rate_limit('kept', 3, '1 minute')", &[]).unwrap();
    for (sql, code) in [
        ("SELECT jobq_set_rate_limit(NULL, 1, '1 s')", "22004"),
        ("SELECT jobq_set_rate_limit('k', 1, NULL)", "22004"),
        ("SELECT jobq_set_rate_limit('', 1, '1 s')", "22023"),
        ("SELECT jobq_set_rate_limit(repeat('k', 1001), 1, '1 s')", "22023"),
        ("SELECT jobq_set_rate_limit('k', 0, '1 s')", "22023"),
        ("SELECT jobq_set_rate_limit('k', -1, '1 s')", "22023"),
        ("SELECT jobq_set_rate_limit('k', 10001, '1 s')", "22023"),
        ("SELECT jobq_set_rate_limit('k', 1, '0 s')", "22023"),
        ("SELECT jobq_set_rate_limit('k', 1, '-1 s')", "22023"),
        ("SELECT jobq_set_rate_limit('kept', 0, '1 s')", "22023"),
        ("SELECT jobq_set_rate_limit('kept', 2, '-1 s')", "22023"),
        ("SELECT jobq_enqueue('q', rate_key => '')", "22023"),
        ("SELECT jobq_enqueue('q', rate_key => repeat('k', 1001))", "22023"),
    ] {
        let e = c.query(sql, &[]).expect_err(sql);
        assert_eq!(sqlstate(&e), code, "{sql}: {e}");
    }
    let r = c.query_one("SELECT (SELECT array_agg(key || max_starts || per) FROM jobq.rate_limits)::text, (SELECT count(*) FROM jobq.rate_slots), (SELECT count(*) FROM jobq.jobs)", &[]).unwrap();
    assert_eq!(r.get::<_, String>(0), "{kept300:01:00}");
    assert_eq!((r.get::<_, i64>(1), r.get::<_, i64>(2)), (3, 0));
}

#[test]
fn a_full_concurrency_key_does_not_block_other_work() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let keyed: Vec<i64> = c
        .query("SELECT jobq_enqueue('q', concurrency_key => 'k', concurrency_limit => 1) FROM generate_series(1, 3)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plain: i64 = c.query_one("SELECT jobq_enqueue('q', priority => 1)", &[]).unwrap().get(0);
    let got: Vec<i64> = c.query("SELECT id FROM jobq_checkout($1, max_jobs => 3)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(got, vec![keyed[0], plain], "one keyed job, then the plain one behind the blocked ones");
}

#[test]
fn jobs_with_different_limits_for_one_key() {
    // Each executing job holds a distinct slot numbered no higher than its own limit, so for
    // every m at most m of the key's jobs with a limit <= m execute at once: a limit-1 job
    // never runs beside another limit-1 job, limit-3 jobs run up to three at a time.
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let ids: Vec<i64> = c
        .query(
            "SELECT jobq_enqueue('m', concurrency_key => 'mix', concurrency_limit => l) FROM unnest(ARRAY[1, 1, 3, 3, 3, 3]) l",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let (l1a, l1b, l3a, l3b, l3c) = (ids[0], ids[1], ids[2], ids[3], ids[4]);
    // l1b waits for slot 1; l3a and l3b take slots 3 and 2; the key is then full.
    assert_eq!(checkout_ids(&mut c, w), vec![l1a, l3a, l3b]);
    assert!(checkout_ids(&mut c, w).is_empty());
    c.execute("SELECT jobq_complete($1, $2)", &[&l3a, &w]).unwrap();
    assert_eq!(checkout_ids(&mut c, w), vec![l3c], "a limit-3 job takes the freed slot; l1b still waits for slot 1");
    c.execute("SELECT jobq_complete($1, $2)", &[&l1a, &w]).unwrap();
    assert_eq!(checkout_ids(&mut c, w), vec![l1b]);
}

#[test]
fn lock_contention_many_workers_one_key() {
    let (cluster, name, _) = db();
    let inside = Arc::new(AtomicUsize::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let (i2, e2) = (inside.clone(), entered.clone());
    let results = hammer(cluster, &name, 16, move |_, c| {
        let w = register(c);
        let mut mine = 0;
        for _ in 0..40 {
            let got: bool = c.query_one("SELECT jobq_acquire_lock('the-lock', $1)", &[&w]).unwrap().get(0);
            if got {
                assert_eq!(i2.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                let holder: Option<Uuid> = c.query_one("SELECT jobq_lock_holder('the-lock')", &[]).unwrap().get(0);
                assert_eq!(holder, Some(w));
                std::thread::sleep(Duration::from_millis(1));
                i2.fetch_sub(1, Ordering::SeqCst);
                let released: bool = c.query_one("SELECT jobq_release_lock('the-lock', $1)", &[&w]).unwrap().get(0);
                assert!(released);
                e2.fetch_add(1, Ordering::SeqCst);
                mine += 1;
            }
        }
        mine
    });
    assert_eq!(results.iter().sum::<usize>(), entered.load(Ordering::SeqCst));
    assert!(entered.load(Ordering::SeqCst) > 0);
}

#[test]
fn locks_extend_expire_and_are_released_only_by_their_owner() {
    let (cluster, name, mut a) = db();
    let mut b = cluster.connect(&name);
    let wa = register(&mut a);
    let wb = register(&mut b);
    let acquire = |c: &mut Client, w: Uuid, ttl: &str| -> bool {
        c.query_one("SELECT jobq_acquire_lock('L', $1, $2::text::interval)", &[&w, &ttl]).unwrap().get(0)
    };
    let expires = |c: &mut Client| -> std::time::SystemTime { c.query_one("SELECT expires_at FROM jobq.locks WHERE key = 'L'", &[]).unwrap().get(0) };
    assert!(acquire(&mut a, wa, "1 minute"));
    let e1 = expires(&mut a);
    assert!(acquire(&mut a, wa, "10 minutes"), "the owner extends it");
    assert!(expires(&mut a) > e1);
    assert!(!acquire(&mut b, wb, "1 minute"));
    assert!(!b.query_one("SELECT jobq_release_lock('L', $1)", &[&wb]).unwrap().get::<_, bool>(0), "not the owner");
    assert_eq!(b.query_one("SELECT jobq_lock_holder('L')", &[]).unwrap().get::<_, Option<Uuid>>(0), Some(wa));
    assert!(a.query_one("SELECT jobq_release_lock('L', $1)", &[&wa]).unwrap().get::<_, bool>(0));
    assert_eq!(b.query_one("SELECT jobq_lock_holder('L')", &[]).unwrap().get::<_, Option<Uuid>>(0), None);

    // ttl expiry: a short lock is free for b once its ttl passed (long enough that b's first
    // try comes before it on any machine).
    assert!(acquire(&mut a, wa, "5 seconds"));
    assert!(!acquire(&mut b, wb, "1 minute"));
    wait_until("the lock's ttl to pass", Duration::from_secs(30), || acquire(&mut b, wb, "1 minute"));
    assert_eq!(a.query_one("SELECT jobq_lock_holder('L')", &[]).unwrap().get::<_, Option<Uuid>>(0), Some(wb));
    assert!(!a.query_one("SELECT jobq_release_lock('L', $1)", &[&wa]).unwrap().get::<_, bool>(0), "a lost it");

    // A dead owner: b stops heartbeating. For a session with a 5 s timeout b is dead (and
    // its lock free) once its heartbeat is older than that, before any reap pass ran (the
    // judge's own worker heartbeats before each try, and stays alive from there to the
    // holder's look on any machine).
    let mut judge = cluster.connect(&name);
    judge.batch_execute("SET jobq.heartbeat_timeout = '5s'").unwrap();
    let wc = register(&mut judge);
    wait_until("b's heartbeat to expire", Duration::from_secs(30), || {
        judge.query_one("SELECT jobq_heartbeat($1)", &[&wc]).unwrap();
        acquire(&mut judge, wc, "1 minute")
    });
    assert_eq!(judge.query_one("SELECT jobq_lock_holder('L')", &[]).unwrap().get::<_, Option<Uuid>>(0), Some(wc));
    let e = judge.query_one("SELECT jobq_heartbeat($1)", &[&wb]).unwrap_err();
    assert_eq!(sqlstate(&e), "JQ001", "b is dead for the judging session");
}

#[test]
fn locks_and_unique_keys_share_one_namespace() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    // lock first, then a unique enqueue of the same key
    assert!(c.query_one("SELECT jobq_acquire_lock('K1', $1)", &[&w]).unwrap().get::<_, bool>(0));
    let e = c.query_one("SELECT jobq_enqueue('q', unique_key => 'K1')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "23505");
    assert!(e.as_db_error().unwrap().detail().unwrap().contains(&w.to_string()));
    assert!(c.query_one("SELECT jobq_release_lock('K1', $1)", &[&w]).unwrap().get::<_, bool>(0));
    c.query_one("SELECT jobq_enqueue('q', unique_key => 'K1')", &[]).unwrap();
    // unique job first, then a lock of the same key
    let job: i64 = c.query_one("SELECT jobq_enqueue('q', unique_key => 'K2')", &[]).unwrap().get(0);
    assert!(!c.query_one("SELECT jobq_acquire_lock('K2', $1)", &[&w]).unwrap().get::<_, bool>(0));
    assert_eq!(c.query_one("SELECT jobq_lock_holder('K2')", &[]).unwrap().get::<_, Option<Uuid>>(0), None, "held by a job, not a worker");
    c.execute("SELECT jobq_cancel($1)", &[&job]).unwrap();
    assert!(c.query_one("SELECT jobq_acquire_lock('K2', $1)", &[&w]).unwrap().get::<_, bool>(0));
}
