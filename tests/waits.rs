//! `jobq_checkout(..., wait)` (the contract, jobq_checkout): a checkout that waits inside the server
//! for a job, over real connections: woken by the commit that makes a job available (not by
//! a rollback, not by another queue), out on time, a scheduled job taken when due, cancel and
//! statement_timeout at once, no snapshot and no row lock held while it waits, woken by a slot
//! freed in another queue and by a rate window opening, the worker kept alive by the background
//! worker however long it waits, and 16 waiters sharing a stream of jobs, each done exactly once.
mod common;

use common::*;
use postgres::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use uuid::Uuid;

const PATIENCE: Duration = Duration::from_secs(30);

/// What a waiting checkout's thread returns: the ids it got (or the SQLSTATE it failed with)
/// and how long the call took.
type Waited = (Result<Vec<i64>, String>, Duration);

/// A checkout with `wait` on its own connection and thread: sends its backend pid, then
/// returns what it got (`Waited`).
fn waiter(url: String, worker: Uuid, queue: &str, wait: &str) -> (i32, thread::JoinHandle<Waited>) {
    let (tx, rx) = mpsc::channel();
    let (queue, wait) = (queue.to_string(), wait.to_string());
    let h = thread::spawn(move || {
        let mut c = Client::connect(&url, postgres::NoTls).unwrap();
        tx.send(c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get::<_, i32>(0)).unwrap();
        let start = Instant::now();
        let got = c
            .query("SELECT id FROM jobq_checkout($1, ARRAY[$2], 1, $3::text::interval)", &[&worker, &queue, &wait])
            .map(|rows| rows.iter().map(|r| r.get(0)).collect())
            .map_err(|e| sqlstate(&e));
        (got, start.elapsed())
    });
    (rx.recv().unwrap(), h)
}

/// Until backend `pid` sleeps in the wait: an active statement waiting on event Extension (the
/// SQL edition's: PgSleep, or the advisory lock of the call that polls, src/sql/twins/waits.sql).
fn await_sleeping(c: &mut Client, pid: i32) {
    wait_until("the checkout to sleep", PATIENCE, || {
        c.query_one(
            "SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND wait_event IN ('Extension', 'PgSleep', 'advisory')",
            &[&pid],
        )
        .unwrap()
        .get(0)
    });
}

#[test]
fn a_waiting_checkout_wakes_at_the_commit_of_a_job_for_it_and_holds_no_snapshot() {
    let (cluster, name, mut c) = db();
    let w = register(&mut c);
    for round in 0..3 {
        let (pid, h) = waiter(cluster.url(&name), w, "q", "20 s");
        await_sleeping(&mut c, pid);
        // While it sleeps it holds no snapshot (vacuum's horizon is not held back) and no lock
        // on any row.
        let row = c
            .query_one("SELECT backend_xmin IS NULL, backend_xid IS NULL FROM pg_stat_activity WHERE pid = $1", &[&pid])
            .unwrap();
        // (A row lock needs a transaction id: none means none held.)
        assert_eq!((row.get::<_, bool>(0), row.get::<_, bool>(1)), (true, true), "no snapshot, no transaction id");
        // Nor a lock on the tables its looks read (DDL on them would queue behind the wait).
        let table_locks: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE pid = $1 AND relation IN ('jobq.ready'::regclass, 'jobq.live_jobs'::regclass)",
                &[&pid],
            )
            .unwrap()
            .get(0);
        assert_eq!(table_locks, 0, "no lock held on jobq.ready or jobq.live_jobs while asleep");
        // A rollback and another queue wake nobody for a job: it goes on waiting.
        c.batch_execute("BEGIN; SELECT jobq_enqueue('q'); ROLLBACK").unwrap();
        let other: i64 = c.query_one("SELECT jobq_enqueue('other')", &[]).unwrap().get(0);
        await_sleeping(&mut c, pid);
        // The commit of a job for it: it returns with that job, well before its one-second
        // look (three rounds: a look that merely happened to follow the commit would not
        // do so three times).
        let committed = Instant::now();
        let job: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
        let (got, _) = h.join().unwrap();
        let latency = committed.elapsed();
        assert_eq!(got, Ok(vec![job]), "round {round}");
        assert!(latency < Duration::from_millis(500), "round {round}: woken {latency:?} after the commit");
        c.execute("SELECT jobq_complete($1, $2)", &[&job, &w]).unwrap();
        c.execute("SELECT jobq_cancel($1)", &[&other]).unwrap();
    }
}

#[test]
fn a_waiting_checkout_runs_out_on_time_and_takes_a_scheduled_job_when_it_comes_due() {
    let (cluster, name, mut c) = db();
    let w = register(&mut c);
    let (_, h) = waiter(cluster.url(&name), w, "empty", "400 ms");
    let (got, took) = h.join().unwrap();
    assert_eq!(got, Ok(vec![]));
    assert!(took >= Duration::from_millis(400), "{took:?}");

    // Scheduled before the wait, and scheduled while it waits.
    for before in [true, false] {
        let queue = format!("later{before}");
        let schedule = |c: &mut Client| -> i64 {
            c.query_one("SELECT jobq_enqueue($1, run_at => clock_timestamp() + interval '1200 ms')", &[&queue]).unwrap().get(0)
        };
        let job = if before { Some(schedule(&mut c)) } else { None };
        let (pid, h) = waiter(cluster.url(&name), w, &queue, "20 s");
        let job = job.unwrap_or_else(|| {
            await_sleeping(&mut c, pid);
            schedule(&mut c)
        });
        let (got, _) = h.join().unwrap();
        assert_eq!(got, Ok(vec![job]), "scheduled before the wait: {before}");
        let r = c
            .query_one("SELECT started_at < run_at, started_at - run_at < interval '2 s' FROM jobq.jobs WHERE id = $1", &[&job])
            .unwrap();
        assert!(!r.get::<_, bool>(0), "not taken before it was due");
        // The commit that scheduled it moved the waiter's alarm: taken as it came due, not at
        // the wait's periodic look (every five seconds in the SQL edition).
        assert!(r.get::<_, bool>(1), "taken as it came due (scheduled before the wait: {before})");
    }
}

#[test]
fn a_waiting_checkout_stops_at_once_on_cancel_and_statement_timeout_and_refuses_bad_waits() {
    let (cluster, name, mut c) = db();
    let w = register(&mut c);
    let (pid, h) = waiter(cluster.url(&name), w, "q", "30 s");
    await_sleeping(&mut c, pid);
    assert!(c.query_one("SELECT pg_cancel_backend($1)", &[&pid]).unwrap().get::<_, bool>(0));
    let (got, took) = h.join().unwrap();
    assert_eq!(got, Err("57014".to_string()));
    assert!(took < Duration::from_secs(5), "{took:?}");

    let mut t = cluster.connect(&name);
    t.batch_execute("SET statement_timeout = '300ms'").unwrap();
    let e = t.query("SELECT * FROM jobq_checkout($1, ARRAY['q'], 1, '30 s')", &[&w]).unwrap_err();
    assert_eq!(sqlstate(&e), "57014");
    t.batch_execute("RESET statement_timeout").unwrap();

    for bad in ["0 s", "-1 s", "1 hour 1 second"] {
        let e = t.query("SELECT * FROM jobq_checkout($1, NULL, 1, $2::text::interval)", &[&w, &bad]).unwrap_err();
        assert_eq!(sqlstate(&e), "22023", "wait => {bad}");
    }
    t.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
    let e = t.query("SELECT * FROM jobq_checkout($1, NULL, 1, '1 s')", &[&w]).unwrap_err();
    assert_eq!(sqlstate(&e), "0A000");
    t.batch_execute("ROLLBACK").unwrap();
    // After all that, waiting still works on this connection.
    let job: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    let got: Vec<i64> = t.query("SELECT id FROM jobq_checkout($1, ARRAY['q'], 1, '5 s')", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(got, vec![job]);
}

/// jobq_stop_checkouts (an addition to the contract), the first step of a graceful shutdown: the stopping
/// worker's checkout waiting in another session returns with nothing, without a cancel, and
/// every later checkout of that worker, waiting or not, claims nothing, though jobs are ready;
/// its job in hand is still completed, its heartbeat goes on, and another worker takes the jobs.
#[test]
fn a_worker_told_to_stop_checking_out_leaves_its_wait_and_claims_nothing_more() {
    let (cluster, name, mut c) = db();
    let w = register(&mut c);
    let in_hand: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    let got: Vec<i64> = c.query("SELECT id FROM jobq_checkout($1, ARRAY['q'])", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(got, vec![in_hand]);
    let (pid, h) = waiter(cluster.url(&name), w, "q", "1 hour");
    await_sleeping(&mut c, pid);
    c.execute("SELECT jobq_stop_checkouts($1)", &[&w]).unwrap();
    let (got, _) = h.join().unwrap();
    assert_eq!(got, Ok(vec![]), "the wait ended with nothing, and without an error");
    assert!(c.query_one("SELECT stopping_at IS NOT NULL FROM jobq.workers WHERE id = $1", &[&w]).unwrap().get::<_, bool>(0));

    // Later checkouts of it take none of the ready jobs, and none waits (a wait would run
    // into the statement timeout).
    let ready: Vec<i64> = c.query("SELECT * FROM jobq_enqueue_batch('q', ARRAY['{}', '{}']::jsonb[])", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    let mut t = cluster.connect(&name);
    t.batch_execute("SET statement_timeout = '20s'").unwrap();
    for sql in [
        "SELECT id FROM jobq_checkout($1, ARRAY['q'], 10)",
        "SELECT id FROM jobq_checkout($1, NULL, 10)",
        "SELECT id FROM jobq_checkout($1, ARRAY['q'], 10, '1 hour')",
        "SELECT id FROM jobq_checkout($1, NULL, 1, '1 hour')",
    ] {
        assert!(t.query(sql, &[&w]).unwrap().is_empty(), "{sql}");
    }
    // Its job in hand is completed by the one-commit call, which checks out nothing more.
    let fused = t.query("SELECT id FROM jobq_complete_and_checkout($1, ARRAY[$2::bigint], queues => ARRAY['q'], max_jobs => 10)", &[&w, &in_hand]).unwrap();
    assert!(fused.is_empty());
    assert_eq!(t.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&in_hand]).unwrap().get::<_, String>(0), "completed");
    // Still alive; called again, nothing changes.
    assert!(t.query_one("SELECT jobq_heartbeat($1)", &[&w]).unwrap().get::<_, Vec<i64>>(0).is_empty());
    t.execute("SELECT jobq_stop_checkouts($1)", &[&w]).unwrap();
    // Another worker takes the ready jobs; the stopping one unregisters with nothing to return.
    let other = register(&mut c);
    let mut taken: Vec<i64> = t.query("SELECT id FROM jobq_checkout($1, ARRAY['q'], 10)", &[&other]).unwrap().iter().map(|r| r.get(0)).collect();
    taken.sort();
    assert_eq!(taken, ready);
    assert_eq!(t.query_one("SELECT jobq_unregister_worker($1)", &[&w]).unwrap().get::<_, i32>(0), 0);
    // Bad input: NULL, an unknown or unregistered worker; nothing changed.
    assert_eq!(sqlstate(&t.execute("SELECT jobq_stop_checkouts(NULL)", &[]).unwrap_err()), "22004");
    assert_eq!(sqlstate(&t.execute("SELECT jobq_stop_checkouts($1)", &[&w]).unwrap_err()), "JQ001");
    assert_eq!(sqlstate(&t.execute("SELECT jobq_stop_checkouts(gen_random_uuid())", &[]).unwrap_err()), "JQ001");
    assert!(t.query_one("SELECT stopping_at IS NULL FROM jobq.workers WHERE id = $1", &[&other]).unwrap().get::<_, bool>(0));
    assert_job_tables_consistent(&mut c);
}

#[test]
fn sixteen_waiters_share_a_stream_of_jobs_each_done_exactly_once() {
    const N: i64 = 1500;
    let (cluster, name, mut c) = db();
    let done = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (url, done, stop) = (cluster.url(&name), done.clone(), stop.clone());
            thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                let w = register(&mut c);
                while !stop.load(Ordering::Relaxed) {
                    for r in c.query("SELECT id FROM jobq_checkout($1, ARRAY['s'], 1, '300 ms')", &[&w]).unwrap() {
                        let id: i64 = r.get(0);
                        assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
                        done.lock().unwrap().push(id);
                    }
                }
            })
        })
        .collect();
    // A stream: jobs a few at a time, each batch committed on its own.
    let mut ids = Vec::new();
    while (ids.len() as i64) < N {
        for r in c.query("SELECT jobq_enqueue('s') FROM generate_series(1, 1 + (random() * 4)::int)", &[]).unwrap() {
            ids.push(r.get::<_, i64>(0));
        }
    }
    wait_until("every job done", PATIENCE, || done.lock().unwrap().len() >= ids.len());
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let mut got = done.lock().unwrap().clone();
    got.sort();
    ids.sort();
    assert_eq!(got, ids, "each job done once");
    let completed: i64 = c.query_one("SELECT count(*) FROM jobq.jobs WHERE queue = 's' AND state = 'completed'", &[]).unwrap().get(0);
    assert_eq!(completed, ids.len() as i64);
    assert_job_tables_consistent(&mut c);
}

/// A slot freed by a job of another queue (the contract, jobq_checkout with wait: "a freed concurrency
/// slot") wakes a checkout waiting for a job that key held back, within the same bound as a
/// commit for its own queue, well before its one-second look: a concurrency key freed by
/// jobq_complete (the Rust path), a while_executing key freed by jobq_complete, a concurrency key
/// freed by jobq_fail (the SQL path, jobq._release_keys).
#[test]
fn a_waiting_checkout_wakes_when_a_job_of_another_queue_frees_the_key_its_job_waits_for() {
    let (cluster, name, mut c) = db();
    let holder = register(&mut c);
    let w = register(&mut c);
    let keyed = |c: &mut Client, queue: &str, round: i32| -> i64 {
        let sql = if round == 1 {
            "SELECT jobq_enqueue($1, unique_key => 'u' || $2, unique_strategy => 'while_executing')"
        } else {
            "SELECT jobq_enqueue($1, concurrency_key => 'k' || $2, concurrency_limit => 1)"
        };
        c.query_one(sql, &[&queue, &round.to_string()]).unwrap().get(0)
    };
    for round in 0..3 {
        let held = keyed(&mut c, "holders", round);
        let got: i64 = c.query_one("SELECT id FROM jobq_checkout($1, ARRAY['holders'])", &[&holder]).unwrap().get(0);
        assert_eq!(got, held, "round {round}");
        let waiting = keyed(&mut c, "waiters", round);
        let (pid, h) = waiter(cluster.url(&name), w, "waiters", "20 s");
        await_sleeping(&mut c, pid);
        let freed = Instant::now();
        if round == 2 {
            let state: String = c.query_one("SELECT jobq_fail($1, $2, discard => true)", &[&held, &holder]).unwrap().get(0);
            assert_eq!(state, "dead");
        } else {
            assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&held, &holder]).unwrap().get::<_, bool>(0));
        }
        let (got, _) = h.join().unwrap();
        let latency = freed.elapsed();
        assert_eq!(got, Ok(vec![waiting]), "round {round}");
        assert!(latency < Duration::from_millis(500), "round {round}: woken {latency:?} after the slot was freed");
        assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&waiting, &w]).unwrap().get::<_, bool>(0));
    }
}

/// A slot freed while every waiter that needs it is in a look (none asleep to ring; the look's
/// snapshot may predate the free) is remembered: the first of them to reach its wait takes it
/// and looks again at once, the second sleeps on to its one-second look (one free, one look).
/// Driven step by step through jobq._wait_begin and jobq._wait, as jobq._checkout_waiting calls
/// them.
#[test]
fn a_slot_freed_during_a_look_sends_exactly_one_waiter_to_look_again() {
    let (cluster, name, mut c) = db();
    let holder = register(&mut c);
    let w = register(&mut c);
    let held: i64 = c.query_one("SELECT jobq_enqueue('holders', concurrency_key => 'k', concurrency_limit => 1)", &[]).unwrap().get(0);
    let got: i64 = c.query_one("SELECT id FROM jobq_checkout($1, ARRAY['holders'])", &[&holder]).unwrap().get(0);
    assert_eq!(got, held);
    // Two waiting calls, each in its first look: registered, not asleep yet.
    let mut looking: Vec<Client> = (0..2).map(|_| cluster.connect(&name)).collect();
    for l in &mut looking {
        l.batch_execute("BEGIN").unwrap();
        assert!(l.query_one("SELECT jobq._wait_begin($1, ARRAY['waiters'])", &[&w]).unwrap().get::<_, bool>(0));
    }
    assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&held, &holder]).unwrap().get::<_, bool>(0));
    // Each now names the key that held its job back ('c' and the concurrency key).
    let took = |l: &mut Client| {
        let start = Instant::now();
        l.execute("SELECT jobq._wait(clock_timestamp() + interval '5 s', NULL, ARRAY['ck'])", &[]).unwrap();
        start.elapsed()
    };
    let first = took(&mut looking[0]);
    let second = took(&mut looking[1]);
    assert!(first < Duration::from_millis(300), "the first waiter looks again at once: {first:?}");
    assert!(second >= Duration::from_millis(900), "the second sleeps on to its one-second look: {second:?}");
}

/// A freed slot rings one waiter that named its key; when that waiter's job cannot use it (the
/// job also needs a while_executing key another job holds), its look takes nothing and it hands
/// the slot on to the next waiter that named the key, which takes its job at once (not at its
/// one-second look). The first waiter's job starts once its other key is freed too.
#[test]
fn a_freed_slot_the_rung_waiter_cannot_use_goes_on_to_a_waiter_that_can() {
    let (cluster, name, mut c) = db();
    let holder = register(&mut c);
    let w = register(&mut c);
    c.batch_execute(
        "SELECT jobq_enqueue('holding', concurrency_key => 'k', concurrency_limit => 1);
         SELECT jobq_enqueue('holding', unique_key => 'u', unique_strategy => 'while_executing');",
    )
    .unwrap();
    let held: Vec<i64> = c.query("SELECT id FROM jobq_checkout($1, ARRAY['holding'], 2)", &[&holder]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(held.len(), 2);
    let both: i64 = c
        .query_one("SELECT jobq_enqueue('both', unique_key => 'u', unique_strategy => 'while_executing', concurrency_key => 'k', concurrency_limit => 1)", &[])
        .unwrap()
        .get(0);
    let only_k: i64 = c.query_one("SELECT jobq_enqueue('only_k', concurrency_key => 'k', concurrency_limit => 1)", &[]).unwrap().get(0);
    // The waiter that cannot use the slot registers first, so a ring reaches it first.
    let (pid_both, h_both) = waiter(cluster.url(&name), w, "both", "20 s");
    await_sleeping(&mut c, pid_both);
    let (pid_k, h_k) = waiter(cluster.url(&name), w, "only_k", "20 s");
    await_sleeping(&mut c, pid_k);
    let freed = Instant::now();
    assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&held[0], &holder]).unwrap().get::<_, bool>(0));
    let (got, _) = h_k.join().unwrap();
    let latency = freed.elapsed();
    assert_eq!(got, Ok(vec![only_k]));
    assert!(latency < Duration::from_millis(500), "woken {latency:?} after the slot was freed");
    assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&only_k, &w]).unwrap().get::<_, bool>(0));
    assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&held[1], &holder]).unwrap().get::<_, bool>(0));
    assert_eq!(h_both.join().unwrap().0, Ok(vec![both]));
}

/// Two starts made at one moment leave their window at one moment: two waiting checkouts both
/// take a job when it opens, not one then and one at its next look.
#[test]
fn a_rate_window_that_two_starts_leave_at_once_lets_two_waiters_start() {
    let (cluster, name, mut c) = db();
    let w = register(&mut c);
    c.execute("SELECT jobq_set_rate_limit('r2', 2, interval '1500 ms')", &[]).unwrap();
    for _ in 0..4 {
        c.execute("SELECT jobq_enqueue('rated2', rate_key => 'r2')", &[]).unwrap();
    }
    let first: Vec<i64> = c.query("SELECT id FROM jobq_checkout($1, ARRAY['rated2'], 2)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(first.len(), 2);
    let waiters: Vec<_> = (0..2).map(|_| waiter(cluster.url(&name), w, "rated2", "20 s").1).collect();
    for h in waiters {
        let got = h.join().unwrap().0.unwrap();
        assert_eq!(got.len(), 1);
        let gap: f64 = c
            .query_one(
                "SELECT extract(epoch FROM b.started_at - a.started_at)::float8 FROM jobq.jobs a, jobq.jobs b WHERE a.id = $1 AND b.id = $2",
                &[&first[0], &got[0]],
            )
            .unwrap()
            .get(0);
        assert!((1.5..1.95).contains(&gap), "a start {gap} s after the first two, their window opened at 1.5 s");
    }
}

/// A rate-limited job held back by a full window (the contract, Rate limits: "takes it once the window
/// allows"): a waiting checkout takes it when the window opens, not at its next once-a-second
/// look. The window is 1.5 s and the waiter begins just after the first start, so those looks
/// would come about half a second late (at 2 s and more).
#[test]
fn a_waiting_checkout_takes_a_rate_limited_job_when_its_window_opens() {
    let (cluster, name, mut c) = db();
    let w = register(&mut c);
    c.execute("SELECT jobq_set_rate_limit('r', 1, interval '1500 ms')", &[]).unwrap();
    let first: i64 = c.query_one("SELECT jobq_enqueue('rated', rate_key => 'r')", &[]).unwrap().get(0);
    let second: i64 = c.query_one("SELECT jobq_enqueue('rated', rate_key => 'r')", &[]).unwrap().get(0);
    let got: i64 = c.query_one("SELECT id FROM jobq_checkout($1, ARRAY['rated'])", &[&w]).unwrap().get(0);
    assert_eq!(got, first);
    let (_, h) = waiter(cluster.url(&name), w, "rated", "20 s");
    assert_eq!(h.join().unwrap().0, Ok(vec![second]));
    let gap: f64 = c
        .query_one(
            "SELECT extract(epoch FROM b.started_at - a.started_at)::float8 FROM jobq.jobs a, jobq.jobs b WHERE a.id = $1 AND b.id = $2",
            &[&first, &second],
        )
        .unwrap()
        .get(0);
    assert!(gap >= 1.5, "the window held the second start back: {gap} s");
    assert!(gap < 1.95, "the second start came {gap} s after the first, its window opened at 1.5 s");
}

/// The worker counts as alive while it waits, longer than jobq.heartbeat_timeout, with the
/// background worker reaping: each pass refreshes a waiting worker's heartbeat.
#[test]
fn a_worker_waiting_longer_than_the_heartbeat_timeout_is_not_reaped() {
    let cluster = Cluster::start("waits", &["jobq.reap_interval = '200ms'", "jobq.heartbeat_timeout = '1s'"]);
    cluster.connect("postgres").batch_execute("CREATE DATABASE waitdb").unwrap();
    let mut c = cluster.connect("waitdb");
    c.batch_execute("CREATE EXTENSION jobq").unwrap();
    wait_until("the reaper to serve waitdb", PATIENCE, || cluster.log().contains("jobq reaper: serving database \"waitdb\""));
    let mut me = cluster.connect("waitdb");
    let w = register(&mut me);
    let got: Vec<i64> = me.query("SELECT id FROM jobq_checkout($1, ARRAY['q'], 1, '3 s')", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(got, Vec::<i64>::new(), "ran out after 3 s, the worker alive throughout");
    // Waiting again: a job that comes after more than a heartbeat_timeout is still taken.
    let (pid, h) = waiter(cluster.url("waitdb"), w, "q", "10 s");
    await_sleeping(&mut c, pid);
    // The condition here is time itself: more than a heartbeat_timeout spent waiting.
    thread::sleep(Duration::from_millis(1500));
    let job: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    assert_eq!(h.join().unwrap().0, Ok(vec![job]));
    assert!(me.query_one("SELECT jobq_complete($1, $2)", &[&job, &w]).unwrap().get::<_, bool>(0));
    cluster.pg_ctl_stop("fast");
}
