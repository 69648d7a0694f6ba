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
