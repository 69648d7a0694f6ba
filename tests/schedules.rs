//! Recurring jobs (src/sql/schedules.sql, src/schedules.rs) over real connections: validation,
//! replace and remove, exactly one job per tick under concurrent reap passes, with catch-up on
//! and off, from the background worker, and across a crash between enqueue and commit. (The
//! promoted standby is in tests/reaper.rs, beside the failover test whose cluster it uses;
//! the parser's edge cases are unit tests in src/schedules.rs.)
mod common;

use common::*;
use postgres::Client;
use std::sync::{Arc, Barrier};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(60);

fn schedules(c: &mut Client) -> i64 {
    c.query_one("SELECT count(*) FROM jobq.schedules", &[]).unwrap().get(0)
}

fn epoch(c: &mut Client, sql: &str) -> f64 {
    c.query_one(&format!("SELECT extract(epoch FROM ({sql}))::float8"), &[]).unwrap().get(0)
}

#[test]
fn bad_schedules_are_refused_and_change_nothing() {
    let (_, _, mut c) = db();
    c.execute("SELECT jobq_schedule('kept', '0 * * * *', 'q')", &[]).unwrap();
    let before: String = c.query_one("SELECT s::text FROM jobq.schedules s", &[]).unwrap().get(0);
    for (sql, code) in [
        ("SELECT jobq_schedule('s', '* * * *', 'q')", "22023"),
        ("SELECT jobq_schedule('s', '* * * * * * *', 'q')", "22023"),
        ("SELECT jobq_schedule('s', '61 * * * *', 'q')", "22023"),
        ("SELECT jobq_schedule('s', '*/0 * * * *', 'q')", "22023"),
        ("SELECT jobq_schedule('s', '@reboot', 'q')", "22023"),
        ("SELECT jobq_schedule('s', '0 0 30 2 *', 'q')", "22023"),
        ("SELECT jobq_schedule('s', '0 * * * *', 'q', time_zone => 'Mars/Olympus')", "22023"),
        ("SELECT jobq_schedule('s', '0 * * * *', '')", "22023"),
        ("SELECT jobq_schedule('', '0 * * * *', 'q')", "22023"),
        ("SELECT jobq_schedule('s', '0 * * * *', 'q', max_attempts => 0)", "22023"),
        ("SELECT jobq_schedule('s', '0 * * * *', repeat('q', 1001))", "22023"),
        ("SELECT jobq_schedule(NULL, '0 * * * *', 'q')", "22004"),
        ("SELECT jobq_schedule('s', NULL, 'q')", "22004"),
        ("SELECT jobq_schedule('s', '0 * * * *', 'q', time_zone => NULL)", "22004"),
        ("SELECT jobq_unschedule(NULL)", "22004"),
        // A bad replacement leaves the schedule as it was.
        ("SELECT jobq_schedule('kept', 'every hour', 'q')", "22023"),
        ("SELECT jobq_schedule('kept', '0 * * * *', 'q', time_zone => 'Europe/Nowhere')", "22023"),
    ] {
        let e = c.query(sql, &[]).expect_err(sql);
        assert_eq!(sqlstate(&e), code, "{sql}: {e}");
    }
    assert_eq!(schedules(&mut c), 1);
    let after: String = c.query_one("SELECT s::text FROM jobq.schedules s", &[]).unwrap().get(0);
    assert_eq!(after, before);
    let jobs: i64 = c.query_one("SELECT count(*) FROM jobq.jobs", &[]).unwrap().get(0);
    assert_eq!(jobs, 0);
}

#[test]
fn a_schedule_is_created_replaced_and_removed() {
    let (_, _, mut c) = db();
    c.execute(
        "SELECT jobq_schedule('report', '30 2 * * *', 'reports', '{\"k\": 1}', kind => 'daily', priority => 3,
                              max_attempts => 2, time_zone => 'America/New_York')",
        &[],
    )
    .unwrap();
    let r = c
        .query_one("SELECT name, cron, time_zone, queue, kind, next_run_at > now(), last_run_at IS NULL, payload, priority, max_attempts, catch_up FROM jobq.schedules", &[])
        .unwrap();
    assert_eq!(r.get::<_, String>(0), "report");
    assert_eq!(r.get::<_, String>(1), "30 2 * * *");
    assert_eq!(r.get::<_, String>(2), "America/New_York");
    assert_eq!(r.get::<_, String>(3), "reports");
    assert_eq!(r.get::<_, String>(4), "daily");
    assert!(r.get::<_, bool>(5) && r.get::<_, bool>(6));
    assert_eq!(r.get::<_, serde_json::Value>(7), serde_json::json!({"k": 1}));
    assert_eq!((r.get::<_, i32>(8), r.get::<_, i32>(9), r.get::<_, bool>(10)), (3, 2, false));
    // next_run_at is 02:30 in New York, the next one after now.
    let local: String = c.query_one("SELECT to_char(next_run_at AT TIME ZONE 'America/New_York', 'HH24:MI') FROM jobq.schedules", &[]).unwrap().get(0);
    assert_eq!(local, "02:30");
    // Daylight saving through SQL: the gap's 02:30 fires at 03:00 EDT, once.
    let gap: String = c
        .query_one("SELECT jobq._cron_next('30 2 * * *', 'America/New_York', '2026-03-07 12:00Z')::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(gap, "2026-03-08 07:00:00+00");

    // A due tick of the old definition is enqueued before the replacement takes effect.
    // (Yearly, on 1 January: this year's is the latest tick that came due.)
    c.execute("SELECT jobq_schedule('r', '0 0 1 1 *', 'old')", &[]).unwrap();
    c.execute("UPDATE jobq.crontab SET next_run_at = date_trunc('year', now(), 'UTC') WHERE name = 'r'", &[]).unwrap();
    c.execute("SELECT jobq_schedule('r', '0 0 1 1 *', 'new')", &[]).unwrap();
    assert_eq!(ticks_of(&mut c, "old").len(), 1, "the old definition's due tick");
    let r = c.query_one("SELECT queue, last_run_at = date_trunc('year', now(), 'UTC'), next_run_at > now() FROM jobq.schedules WHERE name = 'r'", &[]).unwrap();
    assert_eq!(r.get::<_, String>(0), "new");
    assert!(r.get::<_, bool>(1), "last_run_at kept across the replacement");
    assert!(r.get::<_, bool>(2));
    c.query("SELECT jobq_reap()", &[]).unwrap();
    assert!(ticks_of(&mut c, "new").is_empty(), "no tick of the new definition before its next one");

    assert!(c.query_one("SELECT jobq_unschedule('r')", &[]).unwrap().get::<_, bool>(0));
    assert!(!c.query_one("SELECT jobq_unschedule('r')", &[]).unwrap().get::<_, bool>(0));
    assert_eq!(ticks_of(&mut c, "old").len(), 1, "jobs already enqueued stay");
    assert_eq!(schedules(&mut c), 1);
}

/// Sixteen sessions run reap passes at once, over and over, while a schedule is behind by a
/// hundred ticks: exactly one job per tick, with catch-up; only the latest, without.
#[test]
fn concurrent_reap_passes_enqueue_exactly_one_job_per_tick() {
    let (cluster, db, mut c) = db();
    // Every 5 s; then a clock jump: its next tick put 500 s in the past (on a minute, so a tick).
    c.execute("SELECT jobq_schedule('all', '*/5 * * * * *', 'caught_up', catch_up => true)", &[]).unwrap();
    c.execute("SELECT jobq_schedule('latest', '*/5 * * * * *', 'latest_only')", &[]).unwrap();
    c.execute("UPDATE jobq.crontab SET next_run_at = date_trunc('minute', now()) - interval '500 s'", &[]).unwrap();
    let start = epoch(&mut c, "SELECT next_run_at FROM jobq.crontab WHERE name = 'all'");

    let n = 16;
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (url, barrier) = (cluster.url(&db), barrier.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                barrier.wait();
                for _ in 0..20 {
                    c.query("SELECT * FROM jobq_reap()", &[]).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    c.query("SELECT * FROM jobq_reap()", &[]).unwrap();

    let last = epoch(&mut c, "SELECT last_run_at FROM jobq.schedules WHERE name = 'all'");
    let caught_up = ticks_of(&mut c, "caught_up");
    assert_eq!(caught_up[0].0, start, "catch-up starts at the first missed tick");
    assert!(caught_up.len() >= 100, "{} ticks", caught_up.len());
    assert_one_job_per_tick(&caught_up, 5.0, last);
    let next = epoch(&mut c, "SELECT next_run_at FROM jobq.schedules WHERE name = 'all'");
    assert_eq!(next, last + 5.0);

    // Without catch-up: one job, for the latest tick that had come due; the missed ones are skipped.
    let latest = ticks_of(&mut c, "latest_only");
    let last_latest = epoch(&mut c, "SELECT last_run_at FROM jobq.schedules WHERE name = 'latest'");
    assert_one_job_per_tick(&latest, 5.0, last_latest);
    assert!(latest[0].0 > start + 400.0, "the first job is for a recent tick, not a missed one: {latest:?}");
    assert_job_tables_consistent(&mut c);
}

/// Replacing a schedule while passes run: eight sessions replace it (same expression) over and
/// over while eight run reap passes, on a per-second schedule that starts 60 ticks behind with
/// catch-up. Every tick still has exactly one job: a replacement never moves the schedule back
/// to a tick a pass has enqueued meanwhile, nor skips one the old definition had made due.
#[test]
fn replacing_a_schedule_while_passes_run_keeps_one_job_per_tick() {
    let (cluster, db, mut c) = db();
    let replace = "SELECT jobq_schedule('s', '* * * * * *', 'q', catch_up => true)";
    c.execute(replace, &[]).unwrap();
    c.execute("UPDATE jobq.crontab SET next_run_at = date_trunc('second', now()) - interval '60 s'", &[]).unwrap();
    let start = epoch(&mut c, "SELECT next_run_at FROM jobq.crontab");
    let n = 16;
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (url, barrier) = (cluster.url(&db), barrier.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                barrier.wait();
                for _ in 0..30 {
                    if i % 2 == 0 {
                        c.execute(replace, &[]).unwrap();
                    } else {
                        c.query("SELECT * FROM jobq_reap()", &[]).unwrap();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let last = epoch(&mut c, "SELECT last_run_at FROM jobq.schedules");
    let ticks = ticks_of(&mut c, "q");
    assert_eq!(ticks[0].0, start, "the ticks that were due when the race began");
    assert_one_job_per_tick(&ticks, 1.0, last);
    assert!(epoch(&mut c, "SELECT next_run_at FROM jobq.schedules") > last);
}

/// A catch-up further behind than one pass enqueues (1,000 ticks) goes on over the next passes.
#[test]
fn a_long_catch_up_is_spread_over_passes() {
    let (_, _, mut c) = db();
    c.execute("SELECT jobq_schedule('s', '* * * * * *', 'q', catch_up => true)", &[]).unwrap();
    c.execute("UPDATE jobq.crontab SET next_run_at = date_trunc('second', now()) - interval '1500 s'", &[]).unwrap();
    c.query("SELECT * FROM jobq_reap()", &[]).unwrap();
    assert_eq!(ticks_of(&mut c, "q").len(), 1000, "one pass enqueues at most 1,000 ticks");
    c.query("SELECT * FROM jobq_reap()", &[]).unwrap();
    let last = epoch(&mut c, "SELECT last_run_at FROM jobq.schedules");
    let ticks = ticks_of(&mut c, "q");
    assert!(ticks.len() >= 1500);
    assert_one_job_per_tick(&ticks, 1.0, last);
}

/// The background worker fires a six-field schedule every second, alongside sessions that
/// call jobq_reap() themselves: one job per tick. Then a crash between a pass's enqueue and
/// its commit: after the restart the tick is enqueued once, by the background worker.
#[test]
fn the_background_worker_fires_ticks_once_even_across_a_crash() {
    // The background worker serves database postgres only at first, so that the crash below
    // can be set up in database sched without it firing the tick first.
    let cluster = Cluster::start("schedules", &["jobq.reap_interval = '100ms'", "jobq.database = 'postgres'"]);
    let mut pg = cluster.connect("postgres");
    pg.batch_execute("CREATE EXTENSION jobq").unwrap();
    pg.batch_execute("CREATE DATABASE sched").unwrap();
    // Its first tick, read before the schedule is committed (the background worker fires it
    // right after).
    let mut tx = pg.transaction().unwrap();
    tx.execute("SELECT jobq_schedule('every_second', '* * * * * *', 'ticks', catch_up => true)", &[]).unwrap();
    let first: f64 = tx.query_one("SELECT extract(epoch FROM next_run_at)::float8 FROM jobq.crontab", &[]).unwrap().get(0);
    tx.commit().unwrap();
    // Three sessions reap too, as fast as they can, while the background worker does.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reapers: Vec<_> = (0..3)
        .map(|_| {
            let (url, stop) = (cluster.url("postgres"), stop.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    c.query("SELECT * FROM jobq_reap()", &[]).unwrap();
                }
            })
        })
        .collect();
    wait_until("five ticks", PATIENCE, || ticks_of(&mut pg, "ticks").len() >= 5);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for r in reapers {
        r.join().unwrap();
    }
    // Stop the schedule, reading its last tick with its row locked (passes skip it), then
    // check every tick so far.
    let mut tx = pg.transaction().unwrap();
    let last: f64 = tx.query_one("SELECT extract(epoch FROM last_run_at)::float8 FROM jobq.crontab FOR UPDATE", &[]).unwrap().get(0);
    tx.execute("SELECT jobq_unschedule('every_second')", &[]).unwrap();
    tx.commit().unwrap();
    let ticks = ticks_of(&mut pg, "ticks");
    assert_eq!(ticks[0].0, first);
    assert_one_job_per_tick(&ticks, 1.0, last);
    let log = cluster.log();
    assert!(!log.contains("failed to enqueue"), "{log}");

    // The crash: a pass in an open transaction has enqueued the due tick when the server stops.
    let mut s = cluster.connect("sched");
    s.batch_execute("CREATE EXTENSION jobq").unwrap();
    s.execute("SELECT jobq_schedule('yearly', '0 0 1 1 *', 'crash')", &[]).unwrap();
    s.execute("UPDATE jobq.crontab SET next_run_at = date_trunc('year', now(), 'UTC')", &[]).unwrap();
    let tick = epoch(&mut s, "SELECT date_trunc('year', now(), 'UTC')");
    let mut tx = s.transaction().unwrap();
    tx.query("SELECT * FROM jobq_reap()", &[]).unwrap();
    let in_tx: i64 = tx.query_one("SELECT count(*) FROM jobq.jobs WHERE queue = 'crash'", &[]).unwrap().get(0);
    assert_eq!(in_tx, 1, "the pass enqueued the tick (not committed)");
    cluster.pg_ctl_stop("immediate");
    drop(tx);
    drop(s);
    append_conf(&cluster.data, &["jobq.database = ''".to_string()]);
    cluster.pg_ctl_start();
    let mut s = cluster.connect_when_up("sched");
    wait_until("the background worker to enqueue the tick", PATIENCE, || {
        s.query_one("SELECT count(*) FROM jobq.jobs WHERE queue = 'crash'", &[]).unwrap().get::<_, i64>(0) >= 1
    });
    // And nothing more: the schedule has moved past it, in the same commit.
    let r = s
        .query_one(
            "SELECT next_run_at = date_trunc('year', now(), 'UTC') + interval '1 year', last_run_at = date_trunc('year', now(), 'UTC')
               FROM jobq.schedules",
            &[],
        )
        .unwrap();
    assert!(r.get::<_, bool>(0) && r.get::<_, bool>(1));
    s.query("SELECT * FROM jobq_reap()", &[]).unwrap();
    assert_eq!(ticks_of(&mut s, "crash"), vec![(tick, 1)], "one job, for this year's 1 January 00:00 UTC");
    cluster.pg_ctl_stop("fast");
}
