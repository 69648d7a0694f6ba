//! Reaping and the background worker: crash recovery inside Postgres, over real clusters
//! started by the tests.
mod common;

use common::*;
use postgres::Client;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;
use uuid::Uuid;

const PATIENCE: Duration = Duration::from_secs(60);

fn expired(c: &mut Client, w: Uuid) -> bool {
    c.query_one("SELECT NOT jobq.worker_alive(heartbeat_at, backend_pid, backend_start) FROM jobq.workers WHERE id = $1", &[&w])
        .unwrap()
        .get(0)
}

fn reap(c: &mut Client) -> (i32, i32, i32, i32, i32) {
    let r = c.query_one("SELECT * FROM jobq_reap()", &[]).unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))
}

#[test]
fn a_silent_worker_is_reaped_and_fenced() {
    let (cluster, name, mut old) = db();
    let zombie = register(&mut old);
    old.execute("SELECT jobq_acquire_lock('its-lock', $1)", &[&zombie]).unwrap();
    let job: i64 = old
        .query_one("SELECT jobq_enqueue('q', unique_key => 'U', concurrency_key => 'C', concurrency_limit => 1)", &[])
        .unwrap()
        .get(0);
    let got: i64 = old.query_one("SELECT id FROM jobq_checkout($1)", &[&zombie]).unwrap().get(0);
    assert_eq!(got, job);

    // The reaper's session judges with a short timeout; the zombie just stops calling.
    let mut r = cluster.connect(&name);
    r.batch_execute("SET jobq.heartbeat_timeout = '300ms'").unwrap();
    wait_until("the zombie's heartbeat to expire", PATIENCE, || expired(&mut r, zombie));
    assert_eq!(reap(&mut r), (1, 1, 0, 1, 0), "one worker, one job, its lock");
    assert_eq!(reap(&mut r), (0, 0, 0, 0, 0), "a second pass finds nothing");

    // The unique key stays with the job; the concurrency slot is free.
    let holder: i64 = r.query_one("SELECT job_id FROM jobq.locks WHERE key = 'U'", &[]).unwrap().get(0);
    assert_eq!(holder, job);
    let slots: i64 = r.query_one("SELECT count(*) FROM jobq.slots", &[]).unwrap().get(0);
    assert_eq!(slots, 0);

    let w2 = register(&mut r);
    let row = r.query_one("SELECT id, attempt, interrupted_at IS NOT NULL FROM jobq_checkout($1)", &[&w2]).unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i32>(1), row.get::<_, bool>(2)), (job, 2, true));

    // The old worker is fenced off.
    assert!(!old.query_one("SELECT jobq_complete($1, $2)", &[&job, &zombie]).unwrap().get::<_, bool>(0));
    assert_eq!(old.query_one("SELECT jobq_fail($1, $2)", &[&job, &zombie]).unwrap().get::<_, Option<String>>(0), None);
    for sql in ["SELECT jobq_heartbeat($1)", "SELECT * FROM jobq_checkout($1)"] {
        assert_eq!(sqlstate(&old.query(sql, &[&zombie]).unwrap_err()), "JQ001", "{sql}");
    }
    assert!(r.query_one("SELECT jobq_complete($1, $2)", &[&job, &w2]).unwrap().get::<_, bool>(0));
}

#[test]
fn a_checkout_that_overlaps_the_reaping_of_its_worker_is_requeued() {
    // Checkout does not lock the worker's row, so a pass can reap the worker while one of
    // its checkouts is still open; the claim commits afterwards, orphaned, and the next pass
    // must requeue it.
    let (cluster, name, mut a) = db();
    let job: i64 = a.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    let w = register(&mut a);
    let mut tx = a.transaction().unwrap();
    let got: i64 = tx.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().get(0);
    assert_eq!(got, job);

    let mut r = cluster.connect(&name);
    r.batch_execute("SET jobq.heartbeat_timeout = '300ms'").unwrap();
    wait_until("the worker's heartbeat to expire", PATIENCE, || expired(&mut r, w));
    assert_eq!(reap(&mut r), (1, 0, 0, 0, 0), "the worker goes; its claim is not committed yet");
    tx.commit().unwrap();

    let state: String = r.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&job]).unwrap().get(0);
    assert_eq!(state, "executing", "claimed by a worker that no longer exists");
    assert_eq!(reap(&mut r), (0, 1, 0, 0, 0), "the orphaned claim is requeued");
    let row = r.query_one("SELECT state, interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[&job]).unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, bool>(1)), ("ready".into(), true));
    assert_eq!(sqlstate(&a.query("SELECT jobq_heartbeat($1)", &[&w]).unwrap_err()), "JQ001");
    assert!(!a.query_one("SELECT jobq_complete($1, $2)", &[&job, &w]).unwrap().get::<_, bool>(0));
}

#[test]
fn a_job_that_keeps_killing_workers_ends_dead() {
    let (cluster, name, mut c) = db();
    let job: i64 = c.query_one("SELECT jobq_enqueue('q', max_attempts => 2, unique_key => 'poison')", &[]).unwrap().get(0);
    let mut r = cluster.connect(&name);
    r.batch_execute("SET jobq.heartbeat_timeout = '300ms'").unwrap();
    for attempt in 1..=2 {
        let w = register(&mut c);
        let got: i64 = c.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().get(0);
        assert_eq!(got, job);
        wait_until("the worker to expire", PATIENCE, || expired(&mut r, w));
        let expect = if attempt == 1 { (1, 1, 0, 0, 0) } else { (1, 0, 1, 0, 0) };
        assert_eq!(reap(&mut r), expect, "attempt {attempt}: dead jobs count only in jobs_dead");
    }
    let row = r.query_one("SELECT state, interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[&job]).unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, bool>(1)), ("dead".into(), true));
    let keys: i64 = r.query_one("SELECT count(*) FROM jobq.locks", &[]).unwrap().get(0);
    assert_eq!(keys, 0, "a dead job gives its unique key back");
}

#[test]
fn concurrent_reap_passes_requeue_each_job_exactly_once() {
    let (cluster, name, mut c) = db();
    let workers: Vec<Uuid> = (0..5).map(|_| register(&mut c)).collect();
    c.execute("SELECT jobq_enqueue_batch('q', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 20)))", &[]).unwrap();
    for w in &workers {
        assert_eq!(c.query("SELECT id FROM jobq_checkout($1, max_jobs => 4)", &[w]).unwrap().len(), 4);
    }
    c.execute("SELECT jobq_acquire_lock('z-' || g, $1) FROM generate_series(1, 3) g", &[&workers[0]]).unwrap();
    let mut judge = cluster.connect(&name);
    judge.batch_execute("SET jobq.heartbeat_timeout = '300ms'").unwrap();
    wait_until("all five workers to expire", PATIENCE, || workers.iter().all(|w| expired(&mut judge, *w)));

    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (url, barrier) = (cluster.url(&name), barrier.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                c.batch_execute("SET jobq.heartbeat_timeout = '300ms'").unwrap();
                barrier.wait();
                reap(&mut c)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let sum = |f: fn(&(i32, i32, i32, i32, i32)) -> i32| results.iter().map(f).sum::<i32>();
    assert_eq!(sum(|r| r.0), 5, "workers reaped, over all passes: {results:?}");
    assert_eq!(sum(|r| r.1), 20, "jobs requeued, over all passes: {results:?}");
    assert_eq!(sum(|r| r.3), 3, "locks released, over all passes: {results:?}");
    let r = c
        .query_one("SELECT count(*) FILTER (WHERE state = 'ready' AND interrupted_at IS NOT NULL AND attempt = 1), count(*) FROM jobq.jobs", &[])
        .unwrap();
    assert_eq!((r.get::<_, i64>(0), r.get::<_, i64>(1)), (20, 20));
}

#[test]
fn a_worker_bound_to_a_session_dies_with_it() {
    let (cluster, name, mut c) = db();
    let job: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    let mut bound = cluster.connect(&name);
    let w: Uuid = bound.query_one("SELECT jobq_register_worker(bind_to_session => true)", &[]).unwrap().get(0);
    let pid: i32 = bound.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    bound.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap();
    // Alive while the session is; the cluster's heartbeat timeout (tests/common) is far away.
    assert_eq!(reap(&mut c), (0, 0, 0, 0, 0));
    c.execute("SELECT pg_terminate_backend($1)", &[&pid]).unwrap();
    wait_until("the session to be gone", PATIENCE, || {
        c.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", &[&pid]).unwrap().is_empty()
    });
    assert_eq!(reap(&mut c), (1, 1, 0, 0, 0), "reaped at once, long before the heartbeat timeout");
    assert_eq!(c.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&job]).unwrap().get::<_, String>(0), "ready");
    drop(bound);
}

#[test]
fn a_checkout_whose_reply_was_lost_goes_back_at_the_next_heartbeat() {
    // A worker not bound to a session (as behind a pooler) lives on while one of its
    // connections dies with a checkout's reply unread. Its next heartbeat lists what it
    // really holds: nothing.
    let (cluster, name, mut hb) = db();
    let w = register(&mut hb);
    let job: i64 = hb.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    {
        let mut cut = cluster.connect(&name);
        // The simple-query protocol: the rows come back and this client discards them.
        cut.batch_execute(&format!("SELECT * FROM jobq_checkout('{w}')")).unwrap();
    } // the connection is closed here
    let state = |c: &mut Client| -> (String, i32, bool) {
        let r = c.query_one("SELECT state, attempt, interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[&job]).unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!(state(&mut hb), ("executing".into(), 1, false), "claimed, and nobody knows");
    let cancels: Vec<i64> = hb.query_one("SELECT jobq_heartbeat($1, '{}')", &[&w]).unwrap().get(0);
    assert!(cancels.is_empty());
    assert_eq!(state(&mut hb), ("ready".into(), 1, true), "back in the queue as an interrupted attempt");
    let again: i64 = hb.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().get(0);
    assert_eq!(again, job, "the same worker, alive all along, gets it again");
    assert_eq!(state(&mut hb).1, 2);
}

#[test]
fn an_open_transaction_delays_the_recovery_of_its_rows_only() {
    // Three workers die. An open transaction holds the job of the first (a jobq_cancel left
    // uncommitted), the second froze inside its own jobq_complete; nothing holds the third's.
    let (cluster, name, mut c) = db();
    let (wa, wb, wc) = (register(&mut c), register(&mut c), register(&mut c));
    let mut jobs = Vec::new();
    for w in [wa, wb, wc] {
        let id: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
        assert_eq!(c.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().get::<_, i64>(0), id);
        jobs.push(id);
    }
    let (ja, jb) = (jobs[0], jobs[1]);
    assert!(c.query_one("SELECT jobq_acquire_lock('c-lock', $1)", &[&wc]).unwrap().get::<_, bool>(0));
    let mut holder = cluster.connect(&name);
    let mut cancel = holder.transaction().unwrap();
    assert_eq!(cancel.query_one("SELECT jobq_cancel($1)", &[&ja]).unwrap().get::<_, String>(0), "executing");
    let mut frozen = cluster.connect(&name);
    let mut complete = frozen.transaction().unwrap();
    assert!(complete.query_one("SELECT jobq_complete($1, $2)", &[&jb, &wb]).unwrap().get::<_, bool>(0));

    let mut r = cluster.connect(&name);
    // A pass that waited for a held row would run into this.
    r.batch_execute("SET jobq.heartbeat_timeout = '300ms'; SET statement_timeout = '5s'").unwrap();
    for w in [wa, wb, wc] {
        wait_until("the heartbeats to expire", PATIENCE, || expired(&mut r, w));
    }
    assert_eq!(reap(&mut r), (1, 1, 0, 1, 0), "the third worker, its job and its lock; the held rows wait");
    let states = |r: &mut Client| -> Vec<String> {
        r.query("SELECT state FROM jobq.jobs ORDER BY id", &[]).unwrap().iter().map(|x| x.get(0)).collect()
    };
    assert_eq!(states(&mut r), ["executing", "executing", "ready"]);
    assert_eq!(reap(&mut r), (0, 0, 0, 0, 0), "still held: passed over again, nothing else to do");

    // The transactions end: a later pass recovers what they held.
    cancel.commit().unwrap();
    complete.rollback().unwrap();
    assert_eq!(reap(&mut r), (2, 1, 0, 0, 0), "the first job is cancelled (as requested), the second requeued");
    assert_eq!(states(&mut r), ["cancelled", "ready", "ready"]);
    let interrupted: bool = r.query_one("SELECT interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[&jb]).unwrap().get(0);
    assert!(interrupted);
    let workers: i64 = r.query_one("SELECT count(*) FROM jobq.workers", &[]).unwrap().get(0);
    assert_eq!(workers, 0);
}

#[test]
fn liveness_is_judged_on_the_live_sessions_not_on_a_transactions_snapshot() {
    // PostgreSQL caches its view of the backends for the rest of a transaction once a query
    // looks at it. Liveness of bound workers must not use that view.
    let (cluster, name, mut t) = db();
    let mut first = cluster.connect(&name);
    first.query_one("SELECT jobq_register_worker(bind_to_session => true)", &[]).unwrap();
    let mine = register(&mut t);
    let mut tx = t.transaction().unwrap();
    // The first pass judges `first`'s session: the view of the backends is now cached.
    assert_eq!(tx.query_one("SELECT workers_reaped FROM jobq_reap()", &[]).unwrap().get::<_, i32>(0), 0);

    // A session that starts after that registers a bound worker and takes a lock.
    let mut late = cluster.connect(&name);
    let late_pid: i32 = late.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let lw: Uuid = late.query_one("SELECT jobq_register_worker(bind_to_session => true)", &[]).unwrap().get(0);
    assert!(late.query_one("SELECT jobq_acquire_lock('L', $1)", &[&lw]).unwrap().get::<_, bool>(0));
    // To the old transaction it is alive: its lock is not stolen, a second pass does not reap it.
    assert!(!tx.query_one("SELECT jobq_acquire_lock('L', $1)", &[&mine]).unwrap().get::<_, bool>(0));
    assert_eq!(tx.query_one("SELECT workers_reaped FROM jobq_reap()", &[]).unwrap().get::<_, i32>(0), 0);
    assert_eq!(tx.query_one("SELECT jobq_lock_holder('L')", &[]).unwrap().get::<_, Option<Uuid>>(0), Some(lw));
    tx.commit().unwrap();

    // The other way: a transaction that saw the session alive sees it dead once it ended.
    let mut tx = t.transaction().unwrap();
    assert_eq!(tx.query_one("SELECT jobq_lock_holder('L')", &[]).unwrap().get::<_, Option<Uuid>>(0), Some(lw));
    drop(late);
    let mut watcher = cluster.connect(&name);
    wait_until("the late session to end", PATIENCE, || {
        watcher.query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", &[&late_pid]).unwrap().get::<_, i64>(0) == 0
    });
    assert_eq!(tx.query_one("SELECT jobq_lock_holder('L')", &[]).unwrap().get::<_, Option<Uuid>>(0), None);
    assert!(tx.query_one("SELECT jobq_acquire_lock('L', $1)", &[&mine]).unwrap().get::<_, bool>(0));
    assert_eq!(tx.query_one("SELECT workers_reaped FROM jobq_reap()", &[]).unwrap().get::<_, i32>(0), 1);
    tx.commit().unwrap();
}

#[test]
fn expired_locks_are_released_and_old_jobs_pruned() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    c.execute("SELECT jobq_acquire_lock('short', $1, interval '100 milliseconds')", &[&w]).unwrap();
    c.execute("SELECT jobq_acquire_lock('long', $1)", &[&w]).unwrap();
    let done: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    c.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap();
    c.execute("SELECT jobq_complete($1, $2)", &[&done, &w]).unwrap();
    let waiting: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    wait_until("the short lock to expire", PATIENCE, || {
        c.query_one("SELECT expires_at < clock_timestamp() FROM jobq.locks WHERE key = 'short'", &[]).unwrap().get(0)
    });
    // Retention 1 day: nothing pruned; retention 0: the completed job goes, the waiting one stays.
    assert_eq!(reap(&mut c), (0, 0, 0, 1, 0));
    c.batch_execute("SET jobq.retention = 0").unwrap();
    assert_eq!(reap(&mut c), (0, 0, 0, 0, 1));
    let left: Vec<i64> = c.query("SELECT id FROM jobq.jobs", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(left, vec![waiting]);
    let locks: Vec<String> = c.query("SELECT key FROM jobq.locks", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(locks, vec!["long".to_string()]);
}

#[test]
fn one_pass_prunes_more_than_one_batch() {
    // Pruning goes in batches of 10,000 until nothing past retention is left (or a second
    // has passed): a history that grows faster than 10,000 jobs a pass is still pruned.
    let (_, _, mut c) = db();
    c.execute("SELECT count(jobq_cancel(id)) FROM jobq_enqueue_batch('q', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 25000))) id", &[])
        .unwrap();
    let waiting: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    c.batch_execute("SET jobq.retention = 0").unwrap();
    assert_eq!(reap(&mut c), (0, 0, 0, 0, 25000), "every finished job in one pass");
    let left: Vec<i64> = c.query("SELECT id FROM jobq.jobs", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(left, vec![waiting]);
}

#[test]
fn settings_are_gucs_with_units() {
    let (cluster, name, mut c) = db();
    c.batch_execute("SET jobq.heartbeat_timeout = '2s'; SET jobq.retention = '2h'").unwrap();
    assert_eq!(c.query_one("SHOW jobq.heartbeat_timeout", &[]).unwrap().get::<_, String>(0), "2s");
    assert_eq!(c.query_one("SHOW jobq.retention", &[]).unwrap().get::<_, String>(0), "2h");
    assert_eq!(sqlstate(&c.batch_execute("SET jobq.heartbeat_timeout = 'soon'").unwrap_err()), "22023");
    assert_eq!(sqlstate(&c.batch_execute("SET jobq.heartbeat_timeout = '1ms'").unwrap_err()), "22023", "below the minimum");
    assert_eq!(sqlstate(&c.batch_execute("SET jobq.reap_interval = '5s'").unwrap_err()), "55P02", "reload-only");
    assert_eq!(sqlstate(&c.batch_execute("SET jobq.database = 'x'").unwrap_err()), "55P02", "start-only");
    c.batch_execute("ALTER SYSTEM SET jobq.retention = '3d'").unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until("the reload to reach new sessions", PATIENCE, || {
        let mut fresh = cluster.connect(&name);
        // The library loads (and defines the setting) with the first jobq call of a session.
        fresh.query_one("SELECT jobq.worker_alive(NULL, NULL, NULL)", &[]).unwrap();
        fresh.query_one("SHOW jobq.retention", &[]).unwrap().get::<_, String>(0) == "3d"
    });
    c.batch_execute("ALTER SYSTEM RESET jobq.retention").unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
}

/// The background worker, on its own cluster: waits out a missing database and extension,
/// reaps by itself, survives SIGKILL, follows SIGHUP.
#[test]
fn the_background_worker_reaps_by_itself() {
    let cluster = Cluster::start(
        "bgworker",
        &["jobq.database = 'reapdb'", "jobq.reap_interval = '200ms'", "jobq.heartbeat_timeout = '1s'"],
    );
    wait_until("the launcher to notice the missing database", PATIENCE, || cluster.log().contains("\"reapdb\" (jobq.database) does not exist yet"));
    assert!(!cluster.pids_of("jobq launcher").is_empty(), "the launcher shows in pg_stat_activity");
    let mut admin = cluster.connect("postgres");
    admin.batch_execute("CREATE DATABASE reapdb").unwrap();
    wait_until("the launcher to start the reaper", PATIENCE, || cluster.log().contains("extension jobq is not created in \"reapdb\" yet"));
    assert_eq!(cluster.log().matches("does not exist yet").count(), 1, "the missing database is logged once");
    let mut c = cluster.connect("reapdb");
    c.batch_execute("CREATE EXTENSION jobq").unwrap();

    // A worker dies silently: the background worker requeues its job, no client reaps.
    // Each round uses its own queue, so it checks out its own job.
    let round = std::cell::Cell::new(0);
    let requeued_by_itself = |c: &mut Client| {
        round.set(round.get() + 1);
        let queue = format!("round{}", round.get());
        // Registered last: its 1 s of life has only the checkout to cover.
        let job: i64 = c.query_one("SELECT jobq_enqueue($1)", &[&queue]).unwrap().get(0);
        let w = register(c);
        let got: i64 = c.query_one("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&w, &queue]).unwrap().get(0);
        assert_eq!(got, job);
        wait_until("the background worker to requeue the job", PATIENCE, || {
            c.query_one("SELECT state = 'ready' AND interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[&job]).unwrap().get(0)
        });
        assert!(c.query("SELECT 1 FROM jobq.workers WHERE id = $1", &[&w]).unwrap().is_empty(), "the worker was removed");
    };
    requeued_by_itself(&mut c);
    assert_eq!(cluster.pids_of("jobq reaper").len(), 1, "one reaper");

    // SIGKILL the reaper: the postmaster restarts the server's processes; reaping resumes.
    let old_pid = cluster.pids_of("jobq reaper")[0];
    assert_eq!(unsafe { libc::kill(old_pid, libc::SIGKILL) }, 0);
    wait_until("a new reaper", PATIENCE, || cluster.pids_of("jobq reaper").iter().any(|p| *p != old_pid));
    let mut c = cluster.connect_when_up("reapdb");
    requeued_by_itself(&mut c);

    // pg_terminate_backend of the reaper: the launcher starts another, after a backoff since
    // this reaper stopped soon after its start.
    let pid = cluster.pids_of("jobq reaper")[0];
    let terminated: bool = c.query_one("SELECT pg_terminate_backend($1)", &[&pid]).unwrap().get(0);
    assert!(terminated);
    wait_until("the launcher to restart the reaper after a backoff", PATIENCE, || cluster.log().contains("starting it again in 1 s"));
    wait_until("the launcher to restart the reaper", PATIENCE, || cluster.pids_of("jobq reaper").iter().any(|p| *p != pid));
    requeued_by_itself(&mut c);

    // SIGHUP: a new interval is picked up by the running reaper.
    c.batch_execute("ALTER SYSTEM SET jobq.reap_interval = '350ms'").unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until("the reaper to pick up the new interval", PATIENCE, || cluster.log().contains("jobq reaper: reap interval is now 350 ms"));
    requeued_by_itself(&mut c);
    cluster.pg_ctl_stop("fast");
}

/// Kill the whole server mid-run: nothing committed is lost, nothing completes twice, and the
/// jobs that were executing come back through the reaper and complete.
/// The WARNINGs a `CREATE EXTENSION jobq` in `db` sends its client.
fn create_extension_warnings(cluster: &Cluster, db: &str) -> Vec<String> {
    let notices = Arc::new(Mutex::new(Vec::new()));
    let sink = notices.clone();
    let mut c = cluster
        .url(db)
        .parse::<postgres::Config>()
        .unwrap()
        .notice_callback(move |n| sink.lock().unwrap().push(format!("{}: {}", n.severity(), n.message())))
        .connect(postgres::NoTls)
        .unwrap();
    c.batch_execute("CREATE EXTENSION jobq").unwrap();
    let got = notices.lock().unwrap().clone();
    got
}

#[test]
fn the_background_worker_behaves_like_postgres_own() {
    let cluster = Cluster::start("manners", &["jobq.database = 'served'", "jobq.reap_interval = '200ms'", "jobq.retention = 0"]);
    let mut admin = cluster.connect("postgres");
    admin.batch_execute("CREATE DATABASE served").unwrap();
    admin.batch_execute("CREATE DATABASE unserved").unwrap();
    // CREATE EXTENSION says so where no background worker will reap, and only there.
    assert_eq!(create_extension_warnings(&cluster, "served"), Vec::<String>::new());
    let warnings = create_extension_warnings(&cluster, "unserved");
    assert!(warnings.iter().any(|w| w == "WARNING: jobq: no background worker reaps database \"unserved\""), "{warnings:?}");

    // Its state shows in pg_stat_activity, as a backend's does.
    wait_until("the reaper to show its pass in pg_stat_activity", PATIENCE, || {
        admin
            .query("SELECT 1 FROM pg_stat_activity WHERE backend_type = 'jobq reaper' AND query = 'jobq reap pass' AND state IN ('idle', 'active')", &[])
            .unwrap()
            .len()
            == 1
    });
    // Its statistics reach pg_stat_user_tables while it runs: autovacuum sees the rows its
    // passes delete (50 cancelled jobs, pruned at once with retention 0).
    let mut c = cluster.connect("served");
    c.execute("SELECT jobq_cancel(jobq_enqueue('q')) FROM generate_series(1, 50)", &[]).unwrap();
    wait_until("the reaper to prune them", PATIENCE, || c.query_one("SELECT count(*) FROM jobq.jobs", &[]).unwrap().get::<_, i64>(0) == 0);
    wait_until("the reaper's deletes to show in the statistics", PATIENCE, || {
        c.query_one("SELECT n_tup_del FROM pg_stat_user_tables WHERE relid = 'jobq.finished_jobs'::regclass", &[]).unwrap().get::<_, i64>(0) >= 50
    });
    drop(c);

    // DROP DATABASE of the served database succeeds without FORCE: the reaper leaves when a
    // session waits to drop it (PostgreSQL waits 5 s for the others to go).
    assert_eq!(cluster.pids_of("jobq reaper").len(), 1);
    admin.batch_execute("DROP DATABASE served").unwrap();
    assert!(cluster.log().contains("jobq reaper: leaving database \"served\""));
    // (The restart after a backoff of a reaper that stopped soon after its start is checked in
    // the_background_worker_reaps_by_itself: here the database is gone by the launcher's next
    // tick as often as not, and a dropped database gets no reaper to restart.)
    // The launcher said so once at the start, before the database was created; now again.
    wait_until("the launcher to wait for the database", PATIENCE, || {
        cluster.log().matches("\"served\" (jobq.database) does not exist yet").count() == 2
    });
    // It comes back: served again.
    admin.batch_execute("CREATE DATABASE served").unwrap();
    cluster.connect("served").batch_execute("CREATE EXTENSION jobq").unwrap();
    wait_until("a reaper for the new database", PATIENCE, || cluster.log().matches("jobq reaper: serving database \"served\"").count() >= 2);

    // A database that stops allowing connections: the launcher says so once and waits,
    // instead of starting a reaper that cannot connect every half second.
    admin.batch_execute("ALTER DATABASE served ALLOW_CONNECTIONS false").unwrap();
    let pid = cluster.pids_of("jobq reaper")[0];
    assert!(admin.query_one("SELECT pg_terminate_backend($1)", &[&pid]).unwrap().get::<_, bool>(0));
    wait_until("the launcher to notice", PATIENCE, || cluster.log().contains("\"served\" (jobq.database) does not allow connections"));
    let starts = cluster.log().matches("jobq reaper: serving database").count();
    // Six launcher ticks: an observation window (a line not written has no event to await).
    std::thread::sleep(Duration::from_secs(3));
    let log = cluster.log();
    assert_eq!(log.matches("does not allow connections").count(), 1, "said once");
    assert_eq!(log.matches("jobq reaper: serving database").count(), starts, "no reaper started meanwhile");
    assert!(cluster.pids_of("jobq reaper").is_empty());
    cluster.pg_ctl_stop("fast");
}

#[test]
fn the_background_worker_recovers_around_an_open_transaction() {
    // Recovery around an open transaction, with no client reaping: an open jobq_cancel holds
    // one dead worker's job; the background worker requeues the other dead worker's job within
    // its passes while that transaction lives, and the held job once it ends.
    let cluster = Cluster::start(
        "stall",
        &["jobq.database = 'stall'", "jobq.reap_interval = '200ms'", "jobq.heartbeat_timeout = '1s'"],
    );
    cluster.connect("postgres").batch_execute("CREATE DATABASE stall").unwrap();
    let mut c = cluster.connect("stall");
    c.batch_execute("CREATE EXTENSION jobq").unwrap();
    let held: i64 = c.query_one("SELECT jobq_enqueue('a')", &[]).unwrap().get(0);
    let free: i64 = c.query_one("SELECT jobq_enqueue('b')", &[]).unwrap().get(0);
    // Each worker checks out right after it registers: its 1 s of life has one call to cover.
    let wa = register(&mut c);
    assert_eq!(c.query_one("SELECT id FROM jobq_checkout($1, ARRAY['a'])", &[&wa]).unwrap().get::<_, i64>(0), held);
    let wb = register(&mut c);
    assert_eq!(c.query_one("SELECT id FROM jobq_checkout($1, ARRAY['b'])", &[&wb]).unwrap().get::<_, i64>(0), free);
    let mut holder = cluster.connect("stall");
    let mut tx = holder.transaction().unwrap();
    assert_eq!(tx.query_one("SELECT jobq_cancel($1)", &[&held]).unwrap().get::<_, String>(0), "executing");

    let state = |c: &mut Client, id: i64| -> String { c.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0) };
    wait_until("the background worker to requeue the free job", PATIENCE, || state(&mut c, free) == "ready");
    assert_eq!(state(&mut c, held), "executing", "the held job waits for its transaction");
    let workers: Vec<Uuid> = c.query("SELECT id FROM jobq.workers", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(workers, vec![wa], "the worker whose job is held stays for a later pass; the other is gone");
    tx.commit().unwrap();
    wait_until("the held job's recovery", PATIENCE, || state(&mut c, held) == "cancelled");
    wait_until("its worker's removal", PATIENCE, || c.query("SELECT 1 FROM jobq.workers", &[]).unwrap().is_empty());
    assert!(!cluster.log().contains("pass failed"), "no pass failed meanwhile");
    cluster.pg_ctl_stop("fast");
}

#[test]
fn a_full_max_worker_processes_gets_a_backoff_not_a_line_every_tick() {
    // The launcher takes the only worker slot: the reaper cannot start.
    let cluster = Cluster::start("noslot", &["jobq.database = 'postgres'", "max_worker_processes = 1", "max_logical_replication_workers = 0"]);
    wait_until("the launcher to fail to start the reaper", PATIENCE, || cluster.log().contains("could not start a reaper for \"postgres\""));
    // An observation window of 4 s (8 launcher ticks): with the backoff (1 s, 2 s, 4 s) at
    // most 3 attempts fall in it, where a retry every tick would make 8 lines.
    std::thread::sleep(Duration::from_secs(4));
    let lines = cluster.log().matches("could not start a reaper").count();
    assert!((2..=4).contains(&lines), "{lines} lines in about 4 s");
    assert!(cluster.log().contains("trying again in 2 s"), "the delay doubles");
    cluster.pg_ctl_stop("fast");
}

#[test]
fn an_immediate_shutdown_loses_no_committed_job() {
    // The workers do not heartbeat: they are bound to their sessions, which the crash ends, and
    // live until then however slow the machine (a heartbeat timeout they could outlast would
    // reap a worker between its checkout and its completion).
    let cluster = Cluster::start("crash", &["jobq.database = 'crashdb'", "jobq.reap_interval = '200ms'"]);
    cluster.create_jobq_db("crashdb");

    let enqueued = Arc::new(Mutex::new(Vec::<i64>::new()));
    let completed = Arc::new(Mutex::new(Vec::<i64>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for i in 0..8 {
        let (url, enqueued, completed, stop) = (cluster.url("crashdb"), enqueued.clone(), completed.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let Ok(mut c) = Client::connect(&url, postgres::NoTls) else { return };
            if i < 4 {
                while !stop.load(Ordering::SeqCst) {
                    match c.query_one("SELECT jobq_enqueue('crash', jsonb_build_object('by', $1::int))", &[&i]) {
                        Ok(r) => enqueued.lock().unwrap().push(r.get(0)),
                        Err(_) => return, // the server went away
                    }
                }
            } else {
                let Ok(r) = c.query_one("SELECT jobq_register_worker(bind_to_session => true)", &[]) else { return };
                let w: Uuid = r.get(0);
                while !stop.load(Ordering::SeqCst) {
                    let Ok(rows) = c.query("SELECT id FROM jobq_checkout($1, max_jobs => 3)", &[&w]) else { return };
                    for r in rows {
                        let id: i64 = r.get(0);
                        match c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]) {
                            Ok(r) if r.get::<_, bool>(0) => completed.lock().unwrap().push(id),
                            Ok(_) => panic!("complete of a job this worker holds returned false"),
                            Err(_) => return,
                        }
                    }
                }
            }
        }));
    }
    wait_until("some work to be done", PATIENCE, || completed.lock().unwrap().len() > 300);
    cluster.pg_ctl_stop("immediate");
    stop.store(true, Ordering::SeqCst);
    for h in handles {
        h.join().unwrap();
    }
    cluster.pg_ctl_start();
    let mut c = cluster.connect_when_up("crashdb");

    let enqueued: HashSet<i64> = enqueued.lock().unwrap().iter().copied().collect();
    let present: HashSet<i64> = c.query("SELECT id FROM jobq.jobs", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    let lost: Vec<_> = enqueued.difference(&present).collect();
    assert!(lost.is_empty(), "enqueues the client saw committed are gone: {lost:?}");
    let mut before = completed.lock().unwrap().clone();
    let n = before.len();
    before.sort();
    before.dedup();
    assert_eq!(before.len(), n, "a job was completed twice before the crash");
    let states: Vec<(i64, String)> = c.query("SELECT id, state FROM jobq.jobs WHERE id = ANY($1)", &[&before]).unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
    assert!(states.iter().all(|(_, s)| s == "completed"), "every completion the client saw survived");

    // Drain after the restart: executing jobs of the dead workers (their sessions gone) come
    // back through the background worker's reaping (in the SQL edition, the passes of this worker's
    // heartbeats) and complete, each exactly once.
    let w = register(&mut c);
    let mut after = Vec::new();
    wait_until("every job to complete after the restart", PATIENCE, || {
        c.query_one("SELECT jobq_heartbeat($1)", &[&w]).unwrap();
        for r in c.query("SELECT id FROM jobq_checkout($1, max_jobs => 100)", &[&w]).unwrap() {
            let id: i64 = r.get(0);
            assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
            after.push(id);
        }
        c.query_one("SELECT count(*) = 0 FROM jobq.jobs WHERE state <> 'completed'", &[]).unwrap().get(0)
    });
    let before: HashSet<i64> = before.into_iter().collect();
    assert!(after.iter().all(|id| !before.contains(id)), "a job completed before the crash ran again");
    let interrupted: i64 = c.query_one("SELECT count(*) FROM jobq.jobs WHERE interrupted_at IS NOT NULL", &[]).unwrap().get(0);
    let total: i64 = c.query_one("SELECT count(*) FROM jobq.jobs", &[]).unwrap().get(0);
    assert_eq!(total as usize, present.len());
    eprintln!("crash test: {} enqueued, {} completed before, {} after, {} interrupted", present.len(), n, after.len(), interrupted);
    cluster.pg_ctl_stop("fast");
}

/// A streaming replica with the preload: its background worker does nothing while in
/// recovery; promoted, it reaps.
#[test]
fn a_standby_reaps_only_once_promoted() {
    let primary = Cluster::start("primary", &["jobq.database = 'repdb'", "jobq.heartbeat_timeout = '1h'"]);
    primary.connect("postgres").batch_execute("CREATE DATABASE repdb").unwrap();
    let mut p = primary.connect("repdb");
    p.batch_execute("CREATE EXTENSION jobq").unwrap();
    let w = register(&mut p);
    let job: i64 = p.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    p.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap();
    // A schedule ticking every second, with catch-up, through the failover: each tick once.
    let mut tx = p.transaction().unwrap();
    tx.execute("SELECT jobq_schedule('beat', '* * * * * *', 'beat', catch_up => true)", &[]).unwrap();
    let first: f64 = tx.query_one("SELECT extract(epoch FROM next_run_at)::float8 FROM jobq.schedules", &[]).unwrap().get(0);
    tx.commit().unwrap();
    wait_until("the primary to fire a tick", PATIENCE, || !ticks_of(&mut p, "beat").is_empty());

    let standby = Cluster::replica_of(&primary, "standby", &["jobq.heartbeat_timeout = '1s'", "jobq.reap_interval = '200ms'"]);
    let mut s = standby.connect_when_up("repdb");
    wait_until("the standby to replay the checkout", PATIENCE, || {
        s.query("SELECT 1 FROM jobq.jobs WHERE id = $1 AND state = 'executing'", &[&job]).map(|r| r.len() == 1).unwrap_or(false)
    });
    assert!(s.query_one("SELECT pg_is_in_recovery()", &[]).unwrap().get::<_, bool>(0));
    assert!(standby.pids_of("jobq reaper").is_empty() && standby.pids_of("jobq launcher").is_empty(), "no jobq worker runs in recovery");

    primary.pg_ctl_stop("fast");
    standby.promote();
    wait_until("the promoted server to reap the dead worker's job", PATIENCE, || {
        s.query_one("SELECT state = 'ready' AND interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[&job]).unwrap().get(0)
    });
    assert_eq!(standby.pids_of("jobq reaper").len(), 1);
    // The schedule goes on from the promoted server: every tick from the first, through the
    // failover (caught up), has exactly one job.
    let promoted: f64 = s.query_one("SELECT extract(epoch FROM now())::float8", &[]).unwrap().get(0);
    wait_until("the promoted server to fire ticks", PATIENCE, || {
        s.query_one("SELECT extract(epoch FROM last_run_at)::float8 FROM jobq.schedules", &[]).unwrap().get::<_, f64>(0) > promoted + 2.0
    });
    let mut tx = s.transaction().unwrap();
    let last: f64 = tx.query_one("SELECT extract(epoch FROM last_run_at)::float8 FROM jobq.crontab FOR UPDATE", &[]).unwrap().get(0);
    tx.execute("SELECT jobq_unschedule('beat')", &[]).unwrap();
    tx.commit().unwrap();
    let ticks = ticks_of(&mut s, "beat");
    assert_eq!(ticks[0].0, first);
    assert_one_job_per_tick(&ticks, 1.0, last);
    standby.pg_ctl_stop("fast");
}
