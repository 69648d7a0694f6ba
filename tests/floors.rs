//! Claim floors (src/floors.rs): checkout starts its walk at a floor the background worker
//! raises, and every way a job becomes ready (or moves to a lower key) brings the floor down
//! at commit. These tests run where the background worker raises the floors (every 200 ms)
//! and prove that no ready job is ever hidden below one: strict claim order under concurrent
//! enqueues at random priorities, and jobs that come back below the floor (a requeue of a dead
//! worker's job, a replace to a better priority).
mod common;

use common::*;
use postgres::{Client, IsolationLevel};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use uuid::Uuid;

const DB: &str = "floors";

/// One cluster for this file, its background worker serving database `floors`.
fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        // Its workers never heartbeat (nor does any test here age one): they outlive a slow
        // machine's whole file by every test cluster's 10-minute timeout (tests/common).
        let c = Cluster::start("floors", &["jobq.database = 'floors'", "jobq.reap_interval = '200ms'"]);
        c.connect("postgres").batch_execute(&format!("CREATE DATABASE {DB}")).unwrap();
        c.connect(DB).batch_execute("SET client_min_messages = error; CREATE EXTENSION jobq").unwrap();
        c
    })
}

/// The floor of `queue` as checkout reads it: (priority, run_at as text, id).
fn floor(c: &mut Client, queue: &str) -> (i32, String, i64) {
    floor_of(c, Some(queue))
}

/// The floor of `queue`, or of every queue (None): the one checkouts of several queues read.
fn floor_of(c: &mut Client, queue: Option<&str>) -> (i32, String, i64) {
    let r = c.query_one("SELECT priority, run_at::text, id FROM jobq._floor('jobq.ready'::regclass, $1)", &[&queue]).unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// Waits until the background worker has raised the floor of `queue` above `key`.
fn wait_for_floor_above(c: &mut Client, queue: &str, key: (i32, i64)) {
    wait_until(&format!("the floor of {queue} to rise above {key:?}"), Duration::from_secs(30), || {
        let (p, _, id) = floor(c, queue);
        (p, id) > key
    });
}

/// A claim key: (priority, run_at in microseconds since the epoch, id).
type Key = (i32, i64, i64);

fn order_holds_under_concurrent_enqueues(queue: &str, iso: IsolationLevel) {
    let mut c = cluster().connect(DB);
    let stop = Arc::new(AtomicBool::new(false));
    // Producers: jobs at random priorities, so that new jobs often land below the floor the
    // worker raised over older ones. Each records when its enqueue returned (committed).
    let enqueued: Arc<Mutex<Vec<(i64, Key, Instant)>>> = Arc::default();
    let producers: Vec<_> = (0..4)
        .map(|i| {
            let (url, stop, enqueued, queue) = (cluster().url(DB), stop.clone(), enqueued.clone(), queue.to_string());
            std::thread::spawn(move || {
                let mut p = Client::connect(&url, postgres::NoTls).unwrap();
                let mut n = 0i32;
                while !stop.load(Ordering::Relaxed) {
                    let prio = (n * 7 + i) % 5;
                    n += 1;
                    let id: i64 = p.query_one("SELECT jobq_enqueue($1, priority => $2)", &[&queue, &prio]).unwrap().get(0);
                    let committed = Instant::now();
                    let r = p
                        .query_one("SELECT priority, (extract(epoch FROM run_at) * 1000000)::bigint FROM jobq.jobs WHERE id = $1", &[&id])
                        .unwrap();
                    enqueued.lock().unwrap().push((id, (r.get(0), r.get(1), id), committed));
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .collect();
    // One worker: claims one job at a time, so "claimed before" is well defined. It is faster
    // than the producers, so the queue runs nearly empty and the floor keeps rising to the
    // last waiting job's key, above the priority the next job may come with.
    let w = register(&mut c);
    let mut claims: Vec<(i64, Instant)> = Vec::new();
    let started = Instant::now();
    let mut floor_moved = false;
    // At least 4 s, and on until the floor moved and 100 jobs were claimed (a minute at most):
    // a slow machine gets its time.
    while started.elapsed() < Duration::from_secs(4) || !(floor_moved && claims.len() > 100) && started.elapsed() < Duration::from_secs(60) {
        let sent = Instant::now();
        let mut tx = c.build_transaction().isolation_level(iso).start().unwrap();
        let got: Vec<i64> = tx.query("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&w, &queue]).unwrap().iter().map(|r| r.get(0)).collect();
        for id in &got {
            assert!(tx.query_one("SELECT jobq_complete($1, $2)", &[id, &w]).unwrap().get::<_, bool>(0));
        }
        tx.commit().unwrap();
        claims.extend(got.iter().map(|id| (*id, sent)));
        floor_moved |= floor(&mut c, queue).0 > i32::MIN;
    }
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.join().unwrap();
    }
    assert!(floor_moved, "the background worker raised the floor while the worker claimed");
    assert!(claims.len() > 100, "the worker claimed jobs all along ({})", claims.len());
    // No claim passed over a job with a lower key that had been enqueued (committed) before
    // the checkout was sent and was still waiting then.
    let enqueued = enqueued.lock().unwrap();
    let claimed_at: HashMap<i64, Instant> = claims.iter().cloned().collect();
    let key: HashMap<i64, &Key> = enqueued.iter().map(|(id, k, _)| (*id, k)).collect();
    for (a, sent) in &claims {
        let ka = key[a];
        for (b, kb, committed) in enqueued.iter() {
            let waiting = claimed_at.get(b).is_none_or(|t| t > sent);
            assert!(
                !(kb < ka && committed < sent && waiting),
                "job {a} {ka:?} was claimed while job {b} {kb:?}, committed before, waited with a lower key"
            );
        }
    }
    // And nothing is left behind: the rest drains.
    loop {
        let got = c.query("SELECT id FROM jobq_checkout($1, ARRAY[$2], 100)", &[&w, &queue]).unwrap();
        if got.is_empty() {
            break;
        }
        for r in got {
            let id: i64 = r.get(0);
            c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap();
        }
    }
    let left: i64 = c.query_one("SELECT count(*) FROM jobq.jobs WHERE queue = $1 AND state <> 'completed'", &[&queue]).unwrap().get(0);
    assert_eq!(left, 0);
    assert_job_tables_consistent(&mut c);
}

#[test]
fn claim_order_holds_while_floors_rise_under_concurrent_enqueues() {
    order_holds_under_concurrent_enqueues("order-rc", IsolationLevel::ReadCommitted);
}

#[test]
fn claim_order_holds_while_floors_rise_repeatable_read() {
    order_holds_under_concurrent_enqueues("order-rr", IsolationLevel::RepeatableRead);
}

#[test]
fn a_job_requeued_below_the_floor_is_claimed_first() {
    let mut c = cluster().connect(DB);
    let q = "requeue";
    let first: i64 = c.query_one("SELECT jobq_enqueue($1)", &[&q]).unwrap().get(0);
    // A worker bound to its session claims the first job, then its session dies.
    let mut doomed = cluster().connect(DB);
    let dw: Uuid = doomed.query_one("SELECT jobq_register_worker(bind_to_session => true)", &[]).unwrap().get(0);
    let got: i64 = doomed.query_one("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&dw, &q]).unwrap().get(0);
    assert_eq!(got, first);
    // Later jobs are claimed past it, and the floor rises above its key.
    c.execute("SELECT jobq_enqueue($1) FROM generate_series(1, 30)", &[&q]).unwrap();
    let w = register(&mut c);
    let done: Vec<i64> = c.query("SELECT id FROM jobq_checkout($1, ARRAY[$2], 10)", &[&w, &q]).unwrap().iter().map(|r| r.get(0)).collect();
    let done: Vec<i64> = c.query_one("SELECT jobq_complete_many($1, $2)", &[&w, &done]).unwrap().get(0);
    assert_eq!(done.len(), 10);
    wait_for_floor_above(&mut c, q, (0, first));
    // The dead worker's job comes back with its old run_at: below the floor.
    let pid: i32 = doomed.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    c.execute("SELECT pg_terminate_backend($1)", &[&pid]).unwrap();
    wait_until("the reaper to requeue the job", Duration::from_secs(30), || {
        c.query_one("SELECT state = 'ready' FROM jobq.jobs WHERE id = $1", &[&first]).unwrap().get::<_, bool>(0)
    });
    let next: i64 = c.query_one("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&w, &q]).unwrap().get(0);
    assert_eq!(next, first, "the requeued job has the lowest key and is claimed first");
}

#[test]
fn a_job_replaced_to_a_better_priority_is_claimed_first() {
    let mut c = cluster().connect(DB);
    let q = "replace";
    let debounced: i64 = c.query_one("SELECT jobq_enqueue($1, priority => 5, unique_key => 'floor-deb', on_conflict => 'replace')", &[&q]).unwrap().get(0);
    let others: Vec<i64> = c.query("SELECT jobq_enqueue($1, priority => 3) FROM generate_series(1, 5)", &[&q]).unwrap().iter().map(|r| r.get(0)).collect();
    let w = register(&mut c);
    // Claim two of the priority-3 jobs: the floor rises to the third one's key.
    let got: Vec<i64> = c.query("SELECT id FROM jobq_checkout($1, ARRAY[$2], 2)", &[&w, &q]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(got, others[..2]);
    wait_for_floor_above(&mut c, q, (3, others[1]));
    assert_eq!(floor(&mut c, q).0, 3);
    // The replace moves the waiting job to priority 0: below the floor.
    let same: i64 = c.query_one("SELECT jobq_enqueue($1, priority => 0, unique_key => 'floor-deb', on_conflict => 'replace')", &[&q]).unwrap().get(0);
    assert_eq!(same, debounced);
    let next: i64 = c.query_one("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&w, &q]).unwrap().get(0);
    assert_eq!(next, debounced, "the replaced job has the lowest key and is claimed first");
    // Any-queue checkout reads the floor of all queues: it is lowered the same way.
    let any: i64 = c.query_one("SELECT jobq_enqueue('replace-any', priority => -1)", &[]).unwrap().get(0);
    let next: i64 = c.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().get(0);
    assert_eq!(next, any);
}

#[test]
fn an_empty_queue_has_the_highest_floor_and_a_new_job_lowers_it() {
    let mut c = cluster().connect(DB);
    let q = "empty";
    let id: i64 = c.query_one("SELECT jobq_enqueue($1)", &[&q]).unwrap().get(0);
    let w = register(&mut c);
    assert_eq!(c.query_one("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&w, &q]).unwrap().get::<_, i64>(0), id);
    wait_for_floor_above(&mut c, q, (i32::MAX - 1, 0));
    let again: i64 = c.query_one("SELECT jobq_enqueue($1, priority => 7)", &[&q]).unwrap().get(0);
    assert_eq!(floor(&mut c, q), (7, floor(&mut c, q).1, again), "lowered to the new job's key at its commit");
    assert_eq!(c.query_one("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&w, &q]).unwrap().get::<_, i64>(0), again);
}

/// A transaction's checkout takes the jobs that same transaction made ready, however far below
/// the floor the background worker raised: the floor comes down only when the transaction
/// commits, and its own checkouts see the rows before that. A new job, a job `replace`d to a
/// better priority and a job brought back by `jobq_retry`; a checkout of one queue, of several
/// and of every queue; READ COMMITTED (served by the Rust checkout) and REPEATABLE READ (by the
/// SQL one). Each case first waits until the floor it reads lies above the job's new key.
#[test]
fn a_transaction_claims_the_jobs_it_made_ready_below_the_floor() {
    // Below every key the other tests of this cluster use, so the floor of all queues rises
    // above it whatever else is waiting.
    const LOW: i32 = -1_000_000;
    let mut c = cluster().connect(DB);
    let w = register(&mut c);
    for (level, iso) in [("rc", IsolationLevel::ReadCommitted), ("rr", IsolationLevel::RepeatableRead)] {
        for how in ["enqueue", "replace", "retry"] {
            for scope in ["one", "several", "every"] {
                let q = format!("own-{how}-{scope}-{level}");
                let case = format!("{how}, {scope} queue(s), {level}");
                // What the transaction will bring below the floor, committed before it.
                let earlier: i64 = match how {
                    // A job comes and goes: the queue's floor then rises to the top.
                    "enqueue" => {
                        let id: i64 = c.query_one("SELECT jobq_enqueue($1)", &[&q]).unwrap().get(0);
                        let got: i64 = c.query_one("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&w, &q]).unwrap().get(0);
                        assert_eq!(got, id);
                        assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
                        id
                    }
                    // A debounced job waits at priority 5, where the queue's floor rises to.
                    "replace" => c
                        .query_one("SELECT jobq_enqueue($1, priority => 5, unique_key => $1, on_conflict => 'replace')", &[&q])
                        .unwrap()
                        .get(0),
                    // A job at the low priority is cancelled: nothing of the queue waits.
                    _ => {
                        let id: i64 = c.query_one("SELECT jobq_enqueue($1, priority => $2)", &[&q, &LOW]).unwrap().get(0);
                        let state: String = c.query_one("SELECT jobq_cancel($1)", &[&id]).unwrap().get(0);
                        assert_eq!(state, "cancelled");
                        id
                    }
                };
                let read = if scope == "one" { Some(q.as_str()) } else { None };
                wait_until(&format!("the floor read by {case} to rise above priority {LOW}"), Duration::from_secs(30), || {
                    floor_of(&mut c, read).0 > LOW
                });
                let queues: Option<Vec<&str>> = match scope {
                    "one" => Some(vec![q.as_str()]),
                    "several" => Some(vec!["own-other", q.as_str()]),
                    _ => None,
                };
                let mut tx = c.build_transaction().isolation_level(iso).start().unwrap();
                let id: i64 = match how {
                    "enqueue" => tx.query_one("SELECT jobq_enqueue($1, priority => $2)", &[&q, &LOW]).unwrap().get(0),
                    "replace" => {
                        let same: i64 = tx
                            .query_one("SELECT jobq_enqueue($1, priority => $2, unique_key => $1, on_conflict => 'replace')", &[&q, &LOW])
                            .unwrap()
                            .get(0);
                        assert_eq!(same, earlier, "{case}: the waiting job was replaced");
                        same
                    }
                    _ => {
                        assert!(tx.query_one("SELECT jobq_retry($1)", &[&earlier]).unwrap().get::<_, bool>(0));
                        earlier
                    }
                };
                let got: Vec<i64> = tx.query("SELECT id FROM jobq_checkout($1, $2)", &[&w, &queues]).unwrap().iter().map(|r| r.get(0)).collect();
                assert_eq!(got, vec![id], "{case}: the transaction's checkout takes the job it made ready");
                assert!(tx.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
                tx.commit().unwrap();
            }
        }
    }
    assert_job_tables_consistent(&mut c);
}
