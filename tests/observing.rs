//! The dashboard's views (src/sql/observe.sql, src/health.rs), read as a role granted
//! jobq_reader only: concurrency slots in use, rate-limit windows, jobq's tables, and the
//! health row (the background worker's last pass, the oldest holder of the vacuum horizon,
//! dead rows, the NOTIFY queue).
mod common;

use common::*;
use postgres::Client;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(60);

fn login_reader(admin: &mut Client) {
    admin
        .batch_execute("CREATE ROLE dash LOGIN; GRANT jobq_reader TO dash")
        .unwrap();
}

#[test]
fn the_dashboard_views_show_keys_rate_windows_tables_and_health() {
    let cluster = Cluster::start("observing", &["jobq.reap_interval = '100ms'"]);
    cluster.connect("postgres").batch_execute("CREATE DATABASE obs").unwrap();
    let mut su = cluster.connect("obs");
    su.batch_execute("CREATE EXTENSION jobq").unwrap();
    login_reader(&mut su);
    let mut r = cluster.connect_as("obs", "dash");
    // No view may wait on a lock (a page must not hang): a statement that did fails here.
    r.batch_execute("SET statement_timeout = '5s'").unwrap();

    // Concurrency slots: two of 'ck' (limit 3) and one while_executing key, executing.
    let w = register(&mut su);
    su.batch_execute(
        "SELECT jobq_enqueue('q', concurrency_key => 'ck', concurrency_limit => 3) FROM generate_series(1, 2);
         SELECT jobq_enqueue('q', unique_key => 'solo', unique_strategy => 'while_executing');",
    )
    .unwrap();
    let got = su.query("SELECT id FROM jobq_checkout($1, max_jobs => 10)", &[&w]).unwrap();
    assert_eq!(got.len(), 3);
    let slots: Vec<(String, String, i64, i32)> = r
        .query("SELECT kind, key, executing, max_limit FROM jobq.concurrency_slots ORDER BY key", &[])
        .unwrap()
        .iter()
        .map(|x| (x.get(0), x.get(1), x.get(2), x.get(3)))
        .collect();
    assert_eq!(slots, vec![("concurrency".into(), "ck".into(), 2, 3), ("while_executing".into(), "solo".into(), 1, 1)]);

    // Rate windows: 3 starts an hour; two used, then the third fills the window.
    su.execute("SELECT jobq_set_rate_limit('api', 3, '1 hour')", &[]).unwrap();
    su.execute("SELECT jobq_enqueue('r', rate_key => 'api') FROM generate_series(1, 4)", &[]).unwrap();
    let window = |r: &mut Client| -> (i64, bool) {
        let x = r.query_one("SELECT starts_in_window, next_start_at IS NOT NULL FROM jobq.rate_windows WHERE key = 'api'", &[]).unwrap();
        (x.get(0), x.get(1))
    };
    assert_eq!(window(&mut r), (0, false));
    assert_eq!(su.query("SELECT id FROM jobq_checkout($1, ARRAY['r'], 2)", &[&w]).unwrap().len(), 2);
    assert_eq!(window(&mut r), (2, false));
    assert_eq!(su.query("SELECT id FROM jobq_checkout($1, ARRAY['r'], 2)", &[&w]).unwrap().len(), 1);
    assert_eq!(window(&mut r), (3, true), "full: the next start is due an hour after the oldest");
    let next_ok: bool = r
        .query_one(
            "SELECT w.next_start_at = (SELECT min(started_at) FROM jobq.jobs WHERE rate_key = 'api') + interval '1 hour'
               FROM jobq.rate_windows w WHERE w.key = 'api'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(next_ok);

    // jobq's tables, by name.
    let tables: Vec<String> = r.query("SELECT table_name FROM jobq.table_stats ORDER BY 1", &[]).unwrap().iter().map(|x| x.get(0)).collect();
    for t in ["finished_jobs", "live_jobs", "ready", "slots", "workers"] {
        assert!(tables.contains(&t.to_string()), "{t} in {tables:?}");
    }

    // Health: the background worker's passes, as they come.
    wait_until("a reap pass noted for jobq.health", PATIENCE, || {
        r.query_one("SELECT last_pass_at IS NOT NULL FROM jobq.health", &[]).unwrap().get(0)
    });
    let h = r
        .query_one(
            "SELECT database, last_pass_at > now() - interval '1 minute', last_pass_ms >= 0, last_pass_error,
                    notify_queue_usage BETWEEN 0 AND 1
               FROM jobq.health",
            &[],
        )
        .unwrap();
    assert_eq!(h.get::<_, String>(0), "obs");
    assert!(h.get::<_, bool>(1) && h.get::<_, bool>(2) && h.get::<_, bool>(4));
    assert_eq!(h.get::<_, Option<String>>(3), None, "the pass succeeded");
    // A pass that reaps says so: a dead worker's job requeued.
    su.execute("UPDATE jobq.workers SET heartbeat_at = now() - interval '1 hour' WHERE id = $1", &[&w]).unwrap();
    wait_until("a pass that requeued the dead worker's jobs", PATIENCE, || {
        r.query_one("SELECT jobs_requeued > 0 FROM jobq.health", &[]).unwrap().get::<_, Option<bool>>(0) == Some(true)
    });

    // A pass that fails says why: a table of jobq's locked away from it (its lock_timeout of
    // 100 ms runs out), then it recovers once the lock is gone. The views do not wait for it.
    let mut locker = cluster.connect("obs");
    locker.batch_execute("BEGIN; LOCK TABLE jobq.crontab IN ACCESS EXCLUSIVE MODE;").unwrap();
    wait_until("a failed pass in jobq.health", PATIENCE, || {
        let e: Option<String> = r.query_one("SELECT last_pass_error FROM jobq.health", &[]).unwrap().get(0);
        e.is_some_and(|e| e.contains("55P03"))
    });
    locker.batch_execute("ROLLBACK").unwrap();
    wait_until("a successful pass again", PATIENCE, || {
        r.query_one("SELECT last_pass_error IS NULL FROM jobq.health", &[]).unwrap().get(0)
    });

    // The oldest holder of the vacuum horizon: a session idle in a transaction with an xid,
    // seen by the reader with its role, state and age (not its query).
    let mut idle = cluster.connect("obs");
    idle.batch_execute("BEGIN; SELECT txid_current();").unwrap();
    let idle_pid: i32 = idle.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    wait_until("the idle transaction to be the oldest horizon", PATIENCE, || {
        let x = r.query_one("SELECT horizon_holder, horizon_pid, horizon_role, horizon_state FROM jobq.health", &[]).unwrap();
        x.get::<_, Option<i32>>(1) == Some(idle_pid)
            && x.get::<_, Option<String>>(0).as_deref() == Some("session")
            && x.get::<_, Option<String>>(2).as_deref() == Some("postgres")
            && x.get::<_, Option<String>>(3).as_deref() == Some("idle in transaction")
    });
    idle.batch_execute("ROLLBACK").unwrap();

    // The reader may read, and only read.
    let e = r.query("SELECT jobq_set_rate_limit('api', NULL, NULL)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    cluster.pg_ctl_stop("fast");
}

/// The per-minute counters' totals since an hour ago, for one queue, as the reader sees them:
/// (enqueued, started, completed, failed, dead).
fn totals(r: &mut Client, queue: &str) -> (i64, i64, i64, i64, i64) {
    let x = r
        .query_one(
            "SELECT coalesce(sum(enqueued), 0)::bigint, coalesce(sum(started), 0)::bigint, coalesce(sum(completed), 0)::bigint,
                    coalesce(sum(failed), 0)::bigint, coalesce(sum(dead), 0)::bigint
               FROM jobq.throughput(now() - interval '1 hour') WHERE queue = $1",
            &[&queue],
        )
        .unwrap();
    (x.get(0), x.get(1), x.get(2), x.get(3), x.get(4))
}

/// The queue's counts in jobq.queue_totals (never pruned): (enqueued, started, completed,
/// failed, dead).
fn lifetime(r: &mut Client, queue: &str) -> (i64, i64, i64, i64, i64) {
    let x = r
        .query_one(
            "SELECT coalesce(sum(enqueued), 0)::bigint, coalesce(sum(started), 0)::bigint, coalesce(sum(completed), 0)::bigint,
                    coalesce(sum(failed), 0)::bigint, coalesce(sum(dead), 0)::bigint
               FROM jobq.queue_totals WHERE queue = $1",
            &[&queue],
        )
        .unwrap();
    (x.get(0), x.get(1), x.get(2), x.get(3), x.get(4))
}

#[test]
fn counters_count_what_committed_per_queue_and_minute_with_wait_and_run_times() {
    let cluster = Cluster::start("counters", &["jobq.reap_interval = '100ms'"]);
    cluster.connect("postgres").batch_execute("CREATE DATABASE cnt").unwrap();
    let mut su = cluster.connect("cnt");
    su.batch_execute("CREATE EXTENSION jobq").unwrap();
    login_reader(&mut su);
    let mut r = cluster.connect_as("cnt", "dash");
    let w = register(&mut su);

    // Enqueued: 5 one by one, 3 in a batch, 1 in a savepoint kept; not the 2 rolled back, nor
    // the one of a savepoint rolled back, nor the jobs of another queue.
    // (One statement per call: a multi-statement string is one implicit transaction.)
    for sql in [
        "SELECT jobq_enqueue('c', '{}') FROM generate_series(1, 5)",
        "SELECT jobq_enqueue_batch('c', ARRAY['{}', '{}', '{}']::jsonb[])",
        "BEGIN; SELECT jobq_enqueue('c') FROM generate_series(1, 2); ROLLBACK",
        "BEGIN; SAVEPOINT s; SELECT jobq_enqueue('c'); ROLLBACK TO s; SELECT jobq_enqueue('c'); COMMIT",
        "SELECT jobq_enqueue('other')",
    ] {
        su.batch_execute(sql).unwrap();
    }
    // Started: 9, in one checkout; a checkout rolled back does not count.
    su.batch_execute("BEGIN").unwrap();
    assert_eq!(su.query("SELECT id FROM jobq_checkout($1, ARRAY['c'], 3)", &[&w]).unwrap().len(), 3);
    su.batch_execute("ROLLBACK").unwrap();
    let ids: Vec<i64> = su.query("SELECT id FROM jobq_checkout($1, ARRAY['c'], 20)", &[&w]).unwrap().iter().map(|x| x.get(0)).collect();
    assert_eq!(ids.len(), 9);
    // Each attempt runs at least 300 ms (this sleep makes the run time, it awaits nothing).
    let checked_out = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    // Completed: 6; failed: 2 retried now, 1 discarded (dead).
    for id in &ids[..6] {
        assert!(su.query_one("SELECT jobq_complete($1, $2)", &[id, &w]).unwrap().get::<_, bool>(0));
    }
    for id in &ids[6..8] {
        su.execute("SELECT jobq_fail($1, $2, retry_in => '0')", &[id, &w]).unwrap();
    }
    su.execute("SELECT jobq_fail($1, $2, discard => true)", &[&ids[8], &w]).unwrap();
    // No attempt of those nine ran longer than this (a slow machine's statements included).
    let longest_ms = checked_out.elapsed().as_secs_f64() * 1000.0;
    // The two retried run again (started 11) and complete (completed 8).
    let again = su.query("SELECT id FROM jobq_checkout($1, ARRAY['c'], 5)", &[&w]).unwrap();
    assert_eq!(again.len(), 2);
    su.execute("SELECT jobq_complete_many($1, $2)", &[&w, &again.iter().map(|x| x.get::<_, i64>(0)).collect::<Vec<_>>()]).unwrap();
    // A worker whose session ends while it holds a job: the reaper interrupts the attempt
    // (enqueued 10, started 12, failed 4).
    {
        let mut gone = cluster.connect("cnt");
        let g: uuid::Uuid = gone.query_one("SELECT jobq_register_worker(bind_to_session => true)", &[]).unwrap().get(0);
        gone.execute("SELECT jobq_enqueue('c')", &[]).unwrap();
        assert_eq!(gone.query("SELECT id FROM jobq_checkout($1, ARRAY['c'])", &[&g]).unwrap().len(), 1);
    }
    let want = (10, 12, 8, 4, 1);
    wait_until("the counters to show every move", PATIENCE, || totals(&mut r, "c").3 >= want.3 && totals(&mut r, "c").1 >= want.1);
    assert_eq!(totals(&mut r, "c"), want);
    assert_eq!(totals(&mut r, "other"), (1, 0, 0, 0, 0));
    // The same in the totals that are never pruned, with the histograms' sums: 6 completed runs
    // of 300 ms or more, 12 short waits.
    assert_eq!(lifetime(&mut r, "c"), want);
    let x = r.query_one("SELECT run_us, wait_us, (SELECT sum(x) FROM unnest(run_ms) x)::bigint FROM jobq.queue_totals WHERE queue = 'c'", &[]).unwrap();
    let (run_us, wait_us, runs): (i64, i64, i64) = (x.get(0), x.get(1), x.get(2));
    assert_eq!(runs, 8 + 3);
    assert!(run_us >= 6 * 300_000, "run_us {run_us}");
    assert!(wait_us < 12 * 200_000, "wait_us {wait_us}");

    // Times: the 12 starts waited little; the completed runs took 300 ms or more (the bucket
    // (200, 500] ms holds 6 of them unless the machine was slow, the 2 quick reruns are below).
    let x = r
        .query_one(
            "SELECT jobq.histogram_quantile(jobq.histogram_sum(wait_ms), 0.5), jobq.histogram_quantile(jobq.histogram_sum(run_ms), 0.5),
                    (SELECT sum(x) FROM jobq.queue_minutes m2, unnest(m2.run_ms) x WHERE m2.queue = 'c')::bigint
               FROM jobq.queue_minutes WHERE queue = 'c'",
            &[],
        )
        .unwrap();
    let (wait_p50, run_p50, runs): (f64, f64, i64) = (x.get(0), x.get(1), x.get(2));
    assert!(wait_p50 < 200.0, "wait p50 {wait_p50} ms");
    // The median lies in the bucket of a run between 300 ms and the longest: at most the upper
    // bound of that one's bucket (buckets grow by 2.5 at most).
    assert!(run_p50 >= 200.0 && run_p50 <= 500f64.max(2.5 * longest_ms), "run p50 {run_p50} ms, the longest run under {longest_ms} ms");
    assert_eq!(runs, 8 + 3, "a run time per completion (8) and per failure by jobq_fail (3), not for the interrupted one");
    // In buckets of an hour: one or two rows (if the test crossed an hour), the same totals.
    let hourly: (i64, i64) = {
        let x = r.query_one("SELECT count(*), sum(started)::bigint FROM jobq.throughput(now() - interval '1 hour', '1 hour') WHERE queue = 'c'", &[]).unwrap();
        (x.get(0), x.get(1))
    };
    assert!((1..=2).contains(&hourly.0) && hourly.1 == 12, "{hourly:?}");

    // Bad input changes nothing and says why.
    for (sql, state) in [
        ("SELECT * FROM jobq.throughput(NULL)", "22004"),
        ("SELECT * FROM jobq.throughput(now(), '30 seconds')", "22023"),
        ("SELECT * FROM jobq.throughput(now(), '90 seconds')", "22023"),
        ("SELECT * FROM jobq.throughput(now(), '1 month')", "22023"),
        ("SELECT * FROM jobq.throughput('infinity')", "22023"),
        ("SELECT jobq.histogram_quantile('{1}', 1.5)", "22023"),
    ] {
        assert_eq!(sqlstate(&r.query(sql, &[]).unwrap_err()), state, "{sql}");
    }

    // Pruned after jobq.retention (a day): an old minute goes at the next pass, a recent one stays.
    su.batch_execute(
        "INSERT INTO jobq.queue_minutes VALUES
           ('old', date_trunc('minute', now()) - interval '2 days', 1, 0, 0, 0, 0, '{}', '{}'),
           ('recent', date_trunc('minute', now()) - interval '30 minutes', 1, 0, 0, 0, 0, '{}', '{}')",
    )
    .unwrap();
    wait_until("the old minute pruned", PATIENCE, || {
        su.query_one("SELECT count(*) FROM jobq.queue_minutes WHERE queue = 'old'", &[]).unwrap().get::<_, i64>(0) == 0
    });
    assert_eq!(totals(&mut r, "recent"), (1, 0, 0, 0, 0));
    // The totals do not lose what was pruned.
    assert_eq!(lifetime(&mut r, "c"), want);
    // The reader may not write them.
    assert_eq!(sqlstate(&r.execute("DELETE FROM jobq.queue_minutes", &[]).unwrap_err()), "42501");
    assert_eq!(sqlstate(&r.execute("DELETE FROM jobq.queue_totals", &[]).unwrap_err()), "42501");
    cluster.pg_ctl_stop("fast");
}

/// Counters are exact under concurrency: 8 sessions enqueue, check out, complete and fail
/// (some in savepoints rolled back) while 2 more run reap passes that flush the counts, beside
/// the background worker's; the totals equal what the job tables say happened.
#[test]
fn counters_stay_exact_while_many_sessions_move_jobs_and_passes_flush() {
    // Its 8 workers never heartbeat: they outlive a slow machine's run of the hammer by every
    // test cluster's 10-minute timeout (tests/common).
    let cluster = Cluster::start("counters_hammer", &["jobq.reap_interval = '50ms'"]);
    cluster.connect("postgres").batch_execute("CREATE DATABASE cnth").unwrap();
    let mut su = cluster.connect("cnth");
    su.batch_execute("CREATE EXTENSION jobq").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reapers: Vec<_> = (0..2)
        .map(|_| {
            let (url, stop) = (cluster.url("cnth"), stop.clone());
            std::thread::spawn(move || {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Err(e) = c.execute("SELECT * FROM jobq_reap()", &[]) { panic!("{e:?}") }
                }
            })
        })
        .collect();
    let sessions: Vec<_> = (0..8)
        .map(|s| {
            let url = cluster.url("cnth");
            std::thread::spawn(move || {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                let w: uuid::Uuid = c.query_one("SELECT jobq_register_worker()", &[]).unwrap().get(0);
                let queue = format!("h{}", s % 3);
                for i in 0..150 {
                    c.execute("SELECT jobq_enqueue($1)", &[&queue]).unwrap();
                    if i % 5 == 0 {
                        // Rolled back in a savepoint: an enqueue, a checkout and a completion.
                        c.batch_execute("BEGIN; SAVEPOINT x").unwrap();
                        c.execute("SELECT jobq_enqueue($1)", &[&queue]).unwrap();
                        for j in c.query("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&w, &queue]).unwrap() {
                            c.execute("SELECT jobq_complete($1, $2)", &[&j.get::<_, i64>(0), &w]).unwrap();
                        }
                        c.batch_execute("ROLLBACK TO x; COMMIT").unwrap();
                    }
                    for j in c.query("SELECT id FROM jobq_checkout($1, ARRAY[$2], 2)", &[&w, &queue]).unwrap() {
                        let id: i64 = j.get(0);
                        match id % 4 {
                            0 => c.execute("SELECT jobq_fail($1, $2, retry_in => '0')", &[&id, &w]).unwrap(),
                            1 => c.execute("SELECT jobq_fail($1, $2, discard => true)", &[&id, &w]).unwrap(),
                            _ => c.execute("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap(),
                        };
                    }
                }
            })
        })
        .collect();
    for s in sessions {
        s.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in reapers {
        r.join().unwrap();
    }
    // The truth, from the job tables (retention keeps every finished job): enqueued = jobs;
    // started = attempts (a failed-and-retried job's attempts, plus the one running now, if
    // any: none is left executing); completed, dead as their states; failed = attempts that
    // did not complete.
    let truth = |c: &mut Client, q: &str| -> (i64, i64, i64, i64, i64) {
        let x = c
            .query_one(
                "SELECT count(*), coalesce(sum(attempt), 0)::bigint, count(*) FILTER (WHERE state = 'completed'),
                        coalesce(sum(attempt), 0)::bigint - count(*) FILTER (WHERE state = 'completed')
                          - count(*) FILTER (WHERE state = 'executing'),
                        count(*) FILTER (WHERE state = 'dead')
                   FROM jobq.jobs WHERE queue = $1",
                &[&q],
            )
            .unwrap();
        (x.get(0), x.get(1), x.get(2), x.get(3), x.get(4))
    };
    for q in ["h0", "h1", "h2"] {
        let want = truth(&mut su, q);
        assert!(want.0 > 0 && want.3 > 0 && want.4 > 0, "{q}: {want:?}");
        // Every column: a pass may have flushed the starts before the last failure's count
        // reached shared memory, which the next pass flushes.
        wait_until("the counters to catch up", PATIENCE, || {
            let t = totals(&mut su, q);
            t.0 >= want.0 && t.1 >= want.1 && t.2 >= want.2 && t.3 >= want.3 && t.4 >= want.4
        });
        assert_eq!(totals(&mut su, q), want, "{q}: counters vs the job tables");
        assert_eq!(lifetime(&mut su, q), want, "{q}: totals vs the job tables");
    }
    assert_job_tables_consistent(&mut su);
    cluster.pg_ctl_stop("fast");
}

/// jobq.queue_depths says what jobq.queue_stats says for every queue with a waiting,
/// executing or dead job, without reading the completed history; a reader may read the live
/// jobs apart from the history.
#[test]
fn queue_depths_match_queue_stats_and_live_filters_skip_the_history() {
    let (cluster, db, mut su) = db();
    su.batch_execute("CREATE ROLE depths LOGIN; GRANT jobq_reader TO depths").unwrap();
    let w = register(&mut su);
    for sql in [
        // d1: 3 due, 2 scheduled, 1 executing, 2 dead, 1 completed; d2: only completed; d3: only dead.
        "SELECT jobq_enqueue('d1', run_at => now() - interval '10 minutes') FROM generate_series(1, 6)",
        "SELECT jobq_enqueue('d1', run_at => now() + interval '1 hour') FROM generate_series(1, 2)",
        "SELECT jobq_enqueue('d2')",
        "SELECT jobq_enqueue('d3')",
    ] {
        su.batch_execute(sql).unwrap();
    }
    let take = |su: &mut Client, q: &str, n: i32| -> Vec<i64> {
        su.query("SELECT id FROM jobq_checkout($1, ARRAY[$2], $3)", &[&w, &q, &n]).unwrap().iter().map(|r| r.get(0)).collect()
    };
    let d1 = take(&mut su, "d1", 4);
    for id in &d1[..2] {
        su.execute("SELECT jobq_fail($1, $2, discard => true)", &[id, &w]).unwrap();
    }
    su.execute("SELECT jobq_complete($1, $2)", &[&d1[2], &w]).unwrap();
    for (q, fail) in [("d2", false), ("d3", true)] {
        let id = take(&mut su, q, 1)[0];
        let sql = if fail { "SELECT jobq_fail($1, $2, discard => true)" } else { "SELECT jobq_complete($1, $2)::text" };
        su.execute(sql, &[&id, &w]).unwrap();
    }
    let mut r = cluster.connect_as(&db, "depths");
    let rows = |r: &mut Client, view: &str| -> Vec<(String, i64, i64, i64, i64, bool)> {
        r.query(
            &format!(
                "SELECT queue, ready, scheduled, executing, dead, oldest_ready_age BETWEEN interval '10 minutes' AND interval '11 minutes'
                   FROM {view} WHERE queue LIKE 'd_' AND ready + scheduled + executing + dead > 0 ORDER BY queue"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|x| (x.get(0), x.get(1), x.get(2), x.get(3), x.get(4), x.get::<_, Option<bool>>(5).unwrap_or(false)))
        .collect()
    };
    let depths = rows(&mut r, "jobq.queue_depths");
    assert_eq!(depths, vec![("d1".into(), 2, 2, 1, 2, true), ("d3".into(), 0, 0, 0, 1, false)]);
    assert_eq!(depths, rows(&mut r, "jobq.queue_stats"));
    // d2 (only completed) is in queue_stats, not in queue_depths.
    let d2: i64 = r.query_one("SELECT count(*) FROM jobq.queue_depths WHERE queue = 'd2'", &[]).unwrap().get(0);
    assert_eq!(d2, 0);

    // The live jobs apart from the history: the same rows as jobq.jobs shows in those states.
    let live: i64 = r.query_one("SELECT count(*) FROM jobq.live_jobs WHERE queue = 'd1'", &[]).unwrap().get(0);
    let via_view: i64 = r
        .query_one("SELECT count(*) FROM jobq.jobs WHERE queue = 'd1' AND state IN ('ready', 'executing')", &[])
        .unwrap()
        .get(0);
    assert_eq!((live, via_view), (5, 5));
}
