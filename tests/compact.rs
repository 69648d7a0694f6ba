//! Compaction of the hot tables under a held horizon (src/compact.rs, src/sql/compact.sql):
//! `jobq._compact` empties jobq.live_jobs, jobq.ready and jobq.slots with TRUNCATE and writes
//! their live rows back. These tests prove that:
//! - it keeps every job as it was, and every slot an executing job holds;
//! - a call which waited for it sees the rows it wrote back (READ COMMITTED);
//! - a REPEATABLE READ transaction whose snapshot predates it gets 40001, not a wrong answer;
//! - it waits for its conditions, and never runs beside pg_dump;
//! - it waits for its lock as long as it is told, but never longer than half of deadlock_timeout,
//!   the locks its TRUNCATE takes of the tables' TOAST tables included;
//! - the calls that write the hot tables lock jobq.ready first, as it does, so it never
//!   deadlocks with them;
//! - a waiting checkout does not hold it off;
//! - workers racing compactions lose no job and run none twice, and keyed jobs keep their
//!   slots and limits;
//! - the background worker compacts by itself while a transaction elsewhere holds the
//!   horizon, and only then.
mod common;

use common::*;
use postgres::types::ToSql;
use postgres::{Client, GenericClient, IsolationLevel};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use uuid::Uuid;

/// Every column of every row of the three hot tables, in id order: what a compaction must keep.
fn fingerprint(c: &mut Client) -> (String, String, String) {
    let r = c
        .query_one(
            "SELECT (SELECT coalesce(md5(string_agg(j::text, '|' ORDER BY j.id)), '') FROM jobq.live_jobs j),
                    (SELECT coalesce(md5(string_agg(r::text, '|' ORDER BY r.id)), '') FROM jobq.ready r),
                    (SELECT coalesce(md5(string_agg(s::text, '|' ORDER BY s.job_id, s.ns)), '') FROM jobq.slots s)",
            &[],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// The hot tables' size (tables, indexes, TOAST) in bytes, and the files of live_jobs and slots.
fn size_and_files(c: &mut Client) -> (i64, i64, i64) {
    let r = c
        .query_one(
            "SELECT pg_total_relation_size('jobq.live_jobs') + pg_total_relation_size('jobq.ready')
                      + pg_total_relation_size('jobq.slots'),
                    pg_relation_filenode('jobq.live_jobs')::bigint, pg_relation_filenode('jobq.slots')::bigint",
            &[],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// (executing jobs with a concurrency key that hold no slot row of it, keys with more jobs
/// executing than their limit): both 0 while slots are kept.
fn slots_astray(c: &mut Client) -> (i64, i64) {
    let r = c
        .query_one(
            "SELECT (SELECT count(*) FROM jobq.live_jobs j
                      WHERE j.state = 'executing' AND j.concurrency_key IS NOT NULL
                        AND NOT EXISTS (SELECT 1 FROM jobq.slots s WHERE s.ns = 'c' AND s.key = j.concurrency_key
                                           AND s.slot = j.concurrency_slot AND s.job_id = j.id)),
                    (SELECT count(*) FROM (SELECT 1 FROM jobq.live_jobs j
                                            WHERE j.state = 'executing' AND j.concurrency_key IS NOT NULL
                                            GROUP BY j.concurrency_key HAVING count(*) > min(j.concurrency_limit)) o)",
            &[],
        )
        .unwrap();
    (r.get(0), r.get(1))
}

/// A statement that enqueues 1,000 plain jobs into queue `churn`.
const PLAIN_1000: &str = "SELECT count(*) FROM jobq_enqueue_batch('churn', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 1000)))";
/// A statement that enqueues 1,000 jobs into queue `churn`, each with one of 50 concurrency
/// keys: each attempt also leaves a dead version in jobq.slots.
const KEYED_1000: &str = "SELECT count(jobq_enqueue('churn', concurrency_key => 'k' || (g % 50), concurrency_limit => 1000))
                            FROM generate_series(1, 1000) g";

/// `n` jobs enqueued by `enqueue` (PLAIN_1000 or KEYED_1000), claimed by `w` and completed, in
/// batches of 1,000: each leaves dead versions in the hot tables.
fn churn(c: &mut Client, w: Uuid, n: i64, enqueue: &str) {
    for _ in 0..n / 1000 {
        c.batch_execute(enqueue).unwrap();
        let done: i64 = c
            .query_one("SELECT count(*) FILTER (WHERE jobq_complete(id, $1)) FROM jobq_checkout($1, ARRAY['churn'], 1000)", &[&w])
            .unwrap()
            .get(0);
        assert_eq!(done, 1000);
    }
}

/// Session `h`, left idle in a transaction that holds an xid: vacuum can remove nothing newer.
fn hold_horizon(mut h: Client) -> Client {
    h.batch_execute("BEGIN; SELECT txid_current()").unwrap();
    h
}

/// A fresh database whose hot tables autovacuum leaves alone. A compaction waits 50 ms for its
/// locks and then answers NULL ("not now"), which is what it must do whenever autovacuum is
/// vacuuming one of the tables; the tests that use this assert that it compacts. (Workers
/// racing compactions keep autovacuum: there any answer is allowed.)
fn db_without_autovacuum() -> (&'static Cluster, String, Client) {
    let (cluster, name, mut c) = db();
    for table in ["jobq.live_jobs", "jobq.ready", "jobq.slots"] {
        c.batch_execute(&format!("ALTER TABLE {table} SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)")).unwrap();
    }
    (cluster, name, c)
}

/// `jobq._compact(0)`, a compaction now: Some(true) when it compacted, None when its lock was
/// not granted within its timeout.
fn compact_now(c: &mut impl GenericClient) -> Option<bool> {
    c.query_one("SELECT jobq._compact(0)", &[]).unwrap().get(0)
}

/// The first column of every row of `sql`: job ids.
fn ids(c: &mut impl GenericClient, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Vec<i64> {
    c.query(sql, params).unwrap().iter().map(|r| r.get(0)).collect()
}

/// Jobs of every shape in queue `q`: payloads (one stored out of line), priorities, future run_at,
/// kinds, unique, concurrency and rate keys. Returns their ids.
fn varied_jobs(c: &mut Client) -> Vec<i64> {
    c.batch_execute("SELECT jobq_set_rate_limit('r', 1000, '1 second')").unwrap();
    let mut ids = Vec::new();
    for i in 0..40 {
        let args = match i % 8 {
            0 => format!("'q', '{{\"n\": {i}}}', priority => {}", i % 3),
            1 => "'q', jsonb_build_object('big', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 3000) g))".to_string(),
            2 => format!("'q', '{{}}', run_at => now() + interval '1 hour', kind => 'Later{i}'"),
            3 => format!("'q', '{{}}', unique_key => 'u{i}', unique_strategy => 'until_executed'"),
            4 => format!("'q', '{{}}', unique_key => 'x{i}', unique_strategy => 'until_executing'"),
            5 => "'q', '{}', concurrency_key => 'c', concurrency_limit => 3".to_string(),
            6 => format!("'q', '{{}}', unique_key => 'w{i}', unique_strategy => 'while_executing'"),
            _ => "'q', '{}', rate_key => 'r', kind => 'Rated'".to_string(),
        };
        ids.push(c.query_one(&format!("SELECT jobq_enqueue({args})"), &[]).unwrap().get(0));
    }
    ids
}

#[test]
fn a_compaction_keeps_every_job_and_removes_the_dead_versions() {
    let (cluster, name, mut c) = db_without_autovacuum();
    let w = register(&mut c);
    varied_jobs(&mut c);
    let claimed: Vec<i64> = ids(&mut c, "SELECT id FROM jobq_checkout($1, ARRAY['q'], 12)", &[&w]);
    assert_eq!(claimed.len(), 12);
    let mut held = hold_horizon(cluster.connect(&name));
    churn(&mut c, w, 20_000, PLAIN_1000);
    churn(&mut c, w, 4_000, KEYED_1000);
    let slots: i64 = c.query_one("SELECT count(*) FROM jobq.slots", &[]).unwrap().get(0);
    assert!(slots >= 2, "the claimed jobs hold slots ({slots})");
    let before = fingerprint(&mut c);
    let due: Vec<i64> = c
        .query("SELECT id FROM jobq.ready WHERE queue = 'q' AND run_at <= now() ORDER BY priority, run_at, id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let (size, file, slots_file) = size_and_files(&mut c);

    assert_eq!(compact_now(&mut c), Some(true));

    let (size_after, file_after, slots_file_after) = size_and_files(&mut c);
    assert_ne!(file_after, file, "live_jobs was not truncated");
    assert_ne!(slots_file_after, slots_file, "slots was not truncated");
    assert!(size_after * 5 < size, "the hot tables did not shrink: {size} -> {size_after} bytes");
    assert_eq!(fingerprint(&mut c), before, "a row of the hot tables changed");
    assert_job_tables_consistent(&mut c);
    // The claimed jobs are still the worker's, the waiting ones come out in the same order.
    for id in &claimed {
        assert!(c.query_one("SELECT jobq_complete($1, $2)", &[id, &w]).unwrap().get::<_, bool>(0));
    }
    let mut got = Vec::new();
    loop {
        let batch: Vec<i64> = ids(&mut c, "SELECT id FROM jobq_checkout($1, ARRAY['q'], 1)", &[&w]);
        let Some(&id) = batch.first() else { break };
        got.push(id);
        assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
    }
    assert_eq!(got, due, "the waiting jobs, in claim order");
    held.batch_execute("COMMIT").unwrap();
    assert_job_tables_consistent(&mut c);
}

/// A backend of `cluster` waits for a lock.
fn waiting(c: &mut Client, pid: i32) -> bool {
    c.query_one("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)", &[&pid]).unwrap().get(0)
}

#[test]
fn calls_that_waited_for_a_compaction_see_the_rows_it_wrote_back() {
    let (cluster, name, mut c) = db_without_autovacuum();
    let w = register(&mut c);
    let ids: Vec<i64> = (0..4).map(|_| c.query_one("SELECT jobq_enqueue('q', '{}')", &[]).unwrap().get(0)).collect();
    c.query("SELECT id FROM jobq_checkout($1, ARRAY['q'], 3)", &[&w]).unwrap();
    // ids[2] is executing with a cancel requested; ids[3] waits.
    assert_eq!(c.query_one("SELECT jobq_cancel($1)", &[&ids[2]]).unwrap().get::<_, String>(0), "executing");
    // Each call, as the first statement of its own READ COMMITTED transaction: its statement's
    // snapshot is taken before its function locks the tables, while the compaction holds them.
    let calls: Vec<(&str, String)> = vec![
        ("complete (Rust)", format!("SELECT jobq_complete({}, '{w}')::text", ids[0])),
        ("fail", format!("SELECT jobq_fail({}, '{w}')", ids[1])),
        ("heartbeat", format!("SELECT jobq_heartbeat('{w}')::text")),
        ("cancel", format!("SELECT jobq_cancel({})", ids[3])),
    ];
    let mut compactor = cluster.connect(&name);
    compactor.batch_execute("BEGIN").unwrap();
    assert_eq!(compact_now(&mut compactor), Some(true));
    let threads: Vec<_> = calls
        .iter()
        .map(|(what, sql)| {
            let mut s = cluster.connect(&name);
            let pid: i32 = s.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
            let (what, sql) = (what.to_string(), sql.clone());
            (pid, std::thread::spawn(move || {
                // Counting calls of jobq._complete: the Rust path must serve the completion,
                // which it does only if its snapshot is taken after its locks.
                let mut t = s.transaction().unwrap();
                t.batch_execute("SET LOCAL track_functions = 'pl'").unwrap();
                let before = pending_calls(&mut t, "_complete");
                let answer: String = t.query_one(&sql, &[]).unwrap().get(0);
                let sql_path = pending_calls(&mut t, "_complete") > before;
                t.commit().unwrap();
                (what, answer, sql_path)
            }))
        })
        .collect();
    for (pid, _) in &threads {
        wait_until("the call to wait for the compaction's lock", Duration::from_secs(30), || waiting(&mut c, *pid));
    }
    compactor.batch_execute("COMMIT").unwrap();
    let answers: Vec<(String, String, bool)> = threads.into_iter().map(|(_, t)| t.join().unwrap()).collect();
    assert_eq!(
        answers,
        vec![
            ("complete (Rust)".to_string(), "true".to_string(), false),
            ("fail".to_string(), "ready".to_string(), false),
            ("heartbeat".to_string(), format!("{{{}}}", ids[2]), false),
            ("cancel".to_string(), "cancelled".to_string(), false),
        ]
    );
    assert_job_tables_consistent(&mut c);
}

/// Session `c` holds advisory lock 4242; a new session reads jobq.ready in a transaction and
/// then waits for that lock, holding jobq.ready until `c` lets the advisory lock go.
fn reader_holding_ready(cluster: &'static Cluster, name: &str, c: &mut Client) -> std::thread::JoinHandle<()> {
    c.batch_execute("SELECT pg_advisory_lock(4242)").unwrap();
    let mut reader = cluster.connect(name);
    let pid: i32 = reader.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let t = std::thread::spawn(move || {
        reader.batch_execute("BEGIN; SELECT count(*) FROM jobq.ready; SELECT pg_advisory_lock(4242); COMMIT").unwrap();
    });
    wait_until("the reader to hold jobq.ready", Duration::from_secs(30), || waiting(c, pid));
    t
}

/// A transaction that holds jobq.live_jobs' TOAST table, and not jobq.live_jobs: a superuser may
/// read a TOAST table directly. COMMIT lets go of it.
fn hold_toast(cluster: &Cluster, name: &str) -> Client {
    let mut h = cluster.connect(name);
    let toast: String = h
        .query_one("SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'jobq.live_jobs'::regclass", &[])
        .unwrap()
        .get(0);
    h.batch_execute(&format!("BEGIN; SELECT count(*) FROM {toast}")).unwrap();
    h
}

/// TRUNCATE also locks what the compaction's LOCK TABLE cannot name: each table's TOAST table
/// and indexes (autovacuum takes a TOAST table's lock on its own). A transaction holding one of
/// those makes the compaction give up within its time, as when the tables themselves were held:
/// NULL, the rows and files as they were; it compacts once that transaction ends.
#[test]
fn a_compaction_that_cannot_lock_a_toast_table_in_time_gives_up_and_changes_nothing() {
    let (cluster, name, mut c) = db_without_autovacuum();
    varied_jobs(&mut c);
    let before = fingerprint(&mut c);
    let (_, live_file, slots_file) = size_and_files(&mut c);
    let mut h = hold_toast(cluster, &name);
    assert_eq!(compact_now(&mut c), None, "its TOAST table held: not now");
    assert_eq!(fingerprint(&mut c), before);
    assert_eq!(size_and_files(&mut c).1, live_file, "jobq.live_jobs not truncated");
    h.batch_execute("COMMIT").unwrap();
    assert_eq!(compact_now(&mut c), Some(true));
    assert_eq!(fingerprint(&mut c), before);
    let (_, live_after, slots_after) = size_and_files(&mut c);
    assert!(live_after != live_file && slots_after != slots_file, "the tables were truncated this time");
    assert_job_tables_consistent(&mut c);
}

/// A compaction sets lock_timeout for its own locks only: the transaction that called it keeps
/// its own afterwards, whether the compaction ran or gave up at its TRUNCATE.
#[test]
fn a_compaction_leaves_its_callers_lock_timeout_as_it_was() {
    let (cluster, name, mut c) = db_without_autovacuum();
    varied_jobs(&mut c);
    let compact_in_transaction = |c: &mut Client| -> (Option<bool>, String) {
        let mut t = c.transaction().unwrap();
        t.batch_execute("SET LOCAL lock_timeout = '7s'").unwrap();
        let got = compact_now(&mut t);
        let after: String = t.query_one("SHOW lock_timeout", &[]).unwrap().get(0);
        t.commit().unwrap();
        (got, after)
    };
    assert_eq!(compact_in_transaction(&mut c), (Some(true), "7s".to_string()), "compacted");
    let mut h = hold_toast(cluster, &name);
    assert_eq!(compact_in_transaction(&mut c), (None, "7s".to_string()), "given up at its TRUNCATE");
    h.batch_execute("COMMIT").unwrap();
    assert_job_tables_consistent(&mut c);
}

#[test]
fn a_compaction_waits_for_its_lock_as_long_as_it_is_told_up_to_half_of_deadlock_timeout() {
    let (cluster, name, mut c) = db_without_autovacuum();
    c.batch_execute("SELECT jobq_enqueue('q', '{}')").unwrap();
    let reader = reader_holding_ready(cluster, &name, &mut c);
    let mut k = cluster.connect(&name);
    // 50 ms by default: not granted while the reader holds the table.
    assert_eq!(compact_now(&mut k), None);
    // Told to wait 10 s (and deadlock_timeout long enough to allow it), it gets its lock once
    // the reader ends, and compacts.
    k.batch_execute("SET deadlock_timeout = '30s'").unwrap();
    let pid: i32 = k.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let compaction = std::thread::spawn(move || -> Option<bool> { k.query_one("SELECT jobq._compact(0, '10 s')", &[]).unwrap().get(0) });
    // Let go of the reader only once the compaction has waited longer than 50 ms could have.
    wait_until("the compaction to wait for its lock for 300 ms", Duration::from_secs(30), || {
        c.query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted
                              AND waitstart < clock_timestamp() - interval '300 ms')",
            &[&pid],
        )
        .unwrap()
        .get(0)
    });
    c.batch_execute("SELECT pg_advisory_unlock(4242)").unwrap();
    assert_eq!(compaction.join().unwrap(), Some(true));
    reader.join().unwrap();
    // With the default deadlock_timeout (1 s) it waits at most 500 ms, whatever it is told:
    // callers queued behind its request never wait long enough to run the deadlock detector.
    let reader = reader_holding_ready(cluster, &name, &mut c);
    let mut k = cluster.connect(&name);
    let start = std::time::Instant::now();
    let got: Option<bool> = k.query_one("SELECT jobq._compact(0, '1 min')", &[]).unwrap().get(0);
    assert_eq!(got, None);
    let waited = start.elapsed();
    // At least its 500 ms (less a timer's slack), and far below the minute it was told, on
    // any machine.
    assert!(waited >= Duration::from_millis(400) && waited < Duration::from_secs(30), "waited {waited:?}, told a minute, capped at 500 ms");
    c.batch_execute("SELECT pg_advisory_unlock(4242)").unwrap();
    reader.join().unwrap();
    assert_job_tables_consistent(&mut c);
}

#[test]
fn calls_that_write_the_hot_tables_wait_for_jobq_ready_before_they_hold_jobq_live_jobs() {
    let (cluster, name, mut c) = db_without_autovacuum();
    let w = register(&mut c);
    // Two jobs executing under w, one dead.
    c.batch_execute("SELECT jobq_enqueue('q', '{}') FROM generate_series(1, 2)").unwrap();
    let held = ids(&mut c, "SELECT id FROM jobq_checkout($1, ARRAY['q'], 2)", &[&w]);
    let dead: i64 = c.query_one("SELECT jobq_enqueue('d', '{}', max_attempts => 1)", &[]).unwrap().get(0);
    assert_eq!(ids(&mut c, "SELECT id FROM jobq_checkout($1, ARRAY['d'], 1)", &[&w]), vec![dead]);
    assert_eq!(c.query_one("SELECT jobq_fail($1, $2)", &[&dead, &w]).unwrap().get::<_, String>(0), "dead");
    let calls = [
        "SELECT jobq_enqueue('q', '{}')::text".to_string(),
        "SELECT count(*)::text FROM jobq_enqueue_batch('q', ARRAY['{}'::jsonb])".to_string(),
        format!("SELECT jobq_retry({dead})::text"),
        format!("SELECT jobq_complete({}, '{w}')::text", held[0]),
        format!("SELECT count(*)::text FROM jobq_complete_and_checkout('{w}', ARRAY[{}]::bigint[])", held[1]),
    ];
    for sql in calls {
        // A compaction's first lock, jobq.ready, held while the call starts.
        let mut k = cluster.connect(&name);
        k.batch_execute("BEGIN; LOCK TABLE jobq.ready IN ACCESS EXCLUSIVE MODE").unwrap();
        let mut s = cluster.connect(&name);
        let pid: i32 = s.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        let call = std::thread::spawn(move || -> Result<String, String> {
            s.query_one(&sql, &[]).map(|r| r.get(0)).map_err(|e| format!("{sql}: {e}"))
        });
        wait_until("the call to wait for jobq.ready", Duration::from_secs(30), || waiting(&mut c, pid));
        // It waits holding no lock on jobq.live_jobs: the compaction's next locks are granted.
        // (A call holding live_jobs here would deadlock with it: 40P01 for one of the two.)
        k.batch_execute("SET lock_timeout = '20s'; LOCK TABLE jobq.live_jobs, jobq.slots IN ACCESS EXCLUSIVE MODE; COMMIT")
            .unwrap();
        call.join().unwrap().unwrap();
    }
    assert_job_tables_consistent(&mut c);
}

#[test]
fn a_compaction_runs_while_a_checkout_waits_and_the_waiter_then_claims() {
    let (cluster, name, mut c) = db_without_autovacuum();
    let mut waiter = cluster.connect(&name);
    let w = register(&mut waiter);
    let pid: i32 = waiter.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let waiting = std::thread::spawn(move || -> Vec<i64> {
        ids(&mut waiter, "SELECT id FROM jobq_checkout($1, ARRAY['idle'], 1, '30 seconds')", &[&w])
    });
    wait_until("the checkout to wait", Duration::from_secs(30), || {
        c.query_one("SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND wait_event = 'Extension'", &[&pid])
            .unwrap()
            .get(0)
    });
    // Between its looks the waiter holds no lock on the tables: the compaction gets its lock
    // within its 50 ms lock_timeout.
    assert_eq!(compact_now(&mut c), Some(true), "the compaction did not get its lock");
    let id: i64 = c.query_one("SELECT jobq_enqueue('idle', '{}')", &[]).unwrap().get(0);
    assert_eq!(waiting.join().unwrap(), vec![id]);
    assert_job_tables_consistent(&mut c);
}

#[test]
fn a_compaction_needs_read_committed_dead_versions_and_a_held_horizon_and_never_runs_beside_pg_dump() {
    let (cluster, name, mut c) = db_without_autovacuum();
    let w = register(&mut c);
    // Not in a transaction snapshot: its copy would miss rows committed before its lock.
    let mut t = c.build_transaction().isolation_level(IsolationLevel::RepeatableRead).start().unwrap();
    let e = t.query_one("SELECT jobq._compact(0)", &[]).expect_err("compacted at REPEATABLE READ");
    assert_eq!(sqlstate(&e), "0A000");
    t.rollback().unwrap();
    // Too few dead versions: no compaction, however old the horizon.
    let mut held = hold_horizon(cluster.connect(&name));
    assert!(!c.query_one("SELECT jobq._compact(1000000)", &[]).unwrap().get::<_, bool>(0));
    churn(&mut c, w, 5000, PLAIN_1000);
    wait_until("the statistics to count the dead versions", Duration::from_secs(30), || {
        c.query_one("SELECT pg_stat_get_dead_tuples('jobq.live_jobs'::regclass) >= 5000", &[]).unwrap().get(0)
    });
    // A session that names itself as pg_dump does.
    let dump = postgres::Client::connect(&format!("{} application_name=pg_dump", cluster.url(&name)), postgres::NoTls).unwrap();
    horizon_older_than_10_s(&mut c);
    assert!(!c.query_one("SELECT jobq._compact(1000)", &[]).unwrap().get::<_, bool>(0), "compacted beside pg_dump");
    drop(dump);
    wait_until("pg_dump's session to end", Duration::from_secs(30), || {
        c.query_one("SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pg_dump')", &[]).unwrap().get(0)
    });
    assert!(c.query_one("SELECT jobq._compact(1000)", &[]).unwrap().get::<_, bool>(0));
    held.batch_execute("COMMIT").unwrap();
    assert_job_tables_consistent(&mut c);
}

#[test]
fn a_repeatable_read_snapshot_older_than_a_compaction_gets_40001() {
    let (cluster, name, mut c) = db_without_autovacuum();
    let w = register(&mut c);
    let ids: Vec<i64> = (0..3).map(|_| c.query_one("SELECT jobq_enqueue('q', '{}')", &[]).unwrap().get(0)).collect();
    c.query("SELECT id FROM jobq_checkout($1, ARRAY['q'], 2)", &[&w]).unwrap();
    let mut compactor = cluster.connect(&name);
    let calls = [
        format!("SELECT jobq_complete({}, '{w}')::text", ids[0]),
        format!("SELECT jobq_fail({}, '{w}')", ids[1]),
        format!("SELECT jobq_heartbeat('{w}', ARRAY[{}, {}])::text", ids[0], ids[1]),
        format!("SELECT jobq_cancel({})", ids[2]),
    ];
    let mut a = cluster.connect(&name);
    for sql in &calls {
        let mut t = a.build_transaction().isolation_level(IsolationLevel::RepeatableRead).start().unwrap();
        t.batch_execute("SELECT 1").unwrap(); // the transaction's snapshot
        assert_eq!(compact_now(&mut compactor), Some(true));
        let e = t.query_one(sql.as_str(), &[]).expect_err(sql);
        assert_eq!(sqlstate(&e), "40001", "{sql}: {e}");
        t.rollback().unwrap();
    }
    // A manual reap pass too (it would see no job of a dead worker to requeue).
    let mut t = a.build_transaction().isolation_level(IsolationLevel::RepeatableRead).start().unwrap();
    t.batch_execute("SELECT 1").unwrap();
    assert_eq!(compact_now(&mut compactor), Some(true));
    assert_eq!(sqlstate(&t.query_one("SELECT jobq_reap()", &[]).expect_err("jobq_reap")), "40001");
    t.rollback().unwrap();
    let mut t = a.build_transaction().isolation_level(IsolationLevel::RepeatableRead).start().unwrap();
    t.query_one("SELECT jobq_reap()", &[]).unwrap();
    t.commit().unwrap();
    // A checkout in such a transaction sees no waiting job, and takes none (no error).
    c.batch_execute("SELECT jobq_enqueue('q2', '{}')").unwrap();
    let mut t = a.build_transaction().isolation_level(IsolationLevel::RepeatableRead).start().unwrap();
    t.batch_execute("SELECT 1").unwrap();
    assert_eq!(compact_now(&mut compactor), Some(true));
    assert_eq!(t.query("SELECT id FROM jobq_checkout($1, ARRAY['q2'], 1)", &[&w]).unwrap().len(), 0);
    t.commit().unwrap();
    // Retried, in transactions that start after the compaction, every call does its work.
    let mut answers = Vec::new();
    for sql in &calls {
        let mut t = a.build_transaction().isolation_level(IsolationLevel::RepeatableRead).start().unwrap();
        answers.push(t.query_one(sql.as_str(), &[]).unwrap().get::<_, String>(0));
        t.commit().unwrap();
    }
    assert_eq!(answers, vec!["true".to_string(), "ready".to_string(), "{}".to_string(), "cancelled".to_string()]);
    let mut t = a.build_transaction().isolation_level(IsolationLevel::RepeatableRead).start().unwrap();
    assert_eq!(t.query("SELECT id FROM jobq_checkout($1, ARRAY['q2'], 1)", &[&w]).unwrap().len(), 1);
    t.commit().unwrap();
    assert_job_tables_consistent(&mut c);
}

#[test]
fn workers_racing_compactions_lose_no_job_and_run_none_twice() {
    let (cluster, name, mut c) = db();
    const JOBS: i64 = 4000;
    c.batch_execute(&format!("SELECT count(*) FROM jobq_enqueue_batch('h', ARRAY(SELECT '{{}}'::jsonb FROM generate_series(1, {})))", JOBS / 2))
        .unwrap();
    let done: Arc<Mutex<Vec<i64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let compactions = Arc::new(AtomicUsize::new(0));
    let retries = Arc::new(AtomicUsize::new(0));
    // A compactor that never stops until the workers are done; after each compaction, every
    // executing keyed job still holds its slot and no key runs more jobs than its limit.
    let compactor = {
        let (mut k, stop, compactions) = (cluster.connect(&name), stop.clone(), compactions.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // None when its lock was not granted within its timeout.
                if compact_now(&mut k) == Some(true) {
                    compactions.fetch_add(1, Ordering::Relaxed);
                    assert_eq!(slots_astray(&mut k), (0, 0), "keyed jobs without their slot, or keys over their limit");
                }
            }
        })
    };
    // A producer: the other half of the jobs, each with one of 4 concurrency keys of limit 3
    // (a slot row per attempt), while workers and compactions run.
    let produced = Arc::new(AtomicBool::new(false));
    let producer = {
        let (mut p, produced) = (cluster.connect(&name), produced.clone());
        std::thread::spawn(move || {
            for _ in 0..JOBS / 2 / 100 {
                p.batch_execute(
                    "SELECT count(jobq_enqueue('h', concurrency_key => 'k' || (g % 4), concurrency_limit => 3))
                       FROM generate_series(1, 100) g",
                )
                .unwrap();
            }
            produced.store(true, Ordering::Relaxed);
        })
    };
    // Eight workers, half at READ COMMITTED, half at REPEATABLE READ (which retry on 40001).
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let (mut s, done, retries, produced) = (cluster.connect(&name), done.clone(), retries.clone(), produced.clone());
            std::thread::spawn(move || {
                let w = register(&mut s);
                let rr = i % 2 == 1;
                let level = if rr { IsolationLevel::RepeatableRead } else { IsolationLevel::ReadCommitted };
                let mut empty = 0;
                // Until the producer is done and the queue looks empty 50 times in a row.
                while !(produced.load(Ordering::Relaxed) && empty >= 50) {
                    let mut t = s.build_transaction().isolation_level(level).start().unwrap();
                    let claimed = ids(&mut t, "SELECT id FROM jobq_checkout($1, ARRAY['h'], 5)", &[&w]);
                    t.commit().unwrap();
                    empty = if claimed.is_empty() && produced.load(Ordering::Relaxed) { empty + 1 } else { 0 };
                    for id in claimed {
                        loop {
                            let mut t = s.build_transaction().isolation_level(level).start().unwrap();
                            match t.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]) {
                                Ok(r) => {
                                    assert!(r.get::<_, bool>(0), "job {id} was no longer held by its worker");
                                    t.commit().unwrap();
                                    done.lock().unwrap().push(id);
                                    break;
                                }
                                Err(e) => {
                                    assert_eq!(sqlstate(&e), "40001", "{e}");
                                    assert!(rr, "40001 at READ COMMITTED");
                                    retries.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                }
            })
        })
        .collect();
    producer.join().unwrap();
    for t in workers {
        t.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    compactor.join().unwrap();
    let done = done.lock().unwrap();
    let distinct: HashSet<i64> = done.iter().copied().collect();
    assert_eq!(distinct.len(), done.len(), "a job was completed twice");
    assert_eq!(done.len() as i64, JOBS, "jobs lost");
    assert!(compactions.load(Ordering::Relaxed) >= 5, "only {} compactions ran", compactions.load(Ordering::Relaxed));
    let left: i64 = c.query_one("SELECT count(*) FROM jobq.live_jobs", &[]).unwrap().get(0);
    assert_eq!(left, 0);
    assert_job_tables_consistent(&mut c);
    eprintln!("{} compactions, {} retries after 40001", compactions.load(Ordering::Relaxed), retries.load(Ordering::Relaxed));
}

const DB: &str = "compacted";

/// When the background worker's last reap pass ended.
fn last_pass(c: &mut Client) -> String {
    c.query_one("SELECT coalesce((SELECT ended_at::text FROM jobq._last_pass()), '')", &[]).unwrap().get(0)
}

/// A cluster whose background worker serves database `compacted` and compacts after 20,000
/// dead versions.
fn compacting_cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        let c = Cluster::start(
            "compact",
            &["jobq.database = 'compacted'", "jobq.reap_interval = '200ms'", "jobq.compact_after = 20000"],
        );
        // Transactions default to REPEATABLE READ here: the background worker must compact at
        // READ COMMITTED all the same (src/bgworker.rs), and the test's sessions set it.
        let mut admin = c.connect("postgres");
        admin.batch_execute(&format!("CREATE DATABASE {DB}")).unwrap();
        admin.batch_execute(&format!("ALTER DATABASE {DB} SET default_transaction_isolation = 'repeatable read'")).unwrap();
        c.connect(DB).batch_execute("SET client_min_messages = error; CREATE EXTENSION jobq").unwrap();
        c
    })
}

/// A session of database `compacted` at READ COMMITTED.
fn connect_rc(cluster: &Cluster) -> Client {
    let mut c = cluster.connect(DB);
    c.batch_execute("SET default_transaction_isolation = 'read committed'").unwrap();
    c
}

/// After the statistics count at least 20,000 dead versions, two more reap passes (and the
/// compaction attempt after the first).
fn two_passes_after_the_dead_versions_are_counted(c: &mut Client) {
    wait_until("the statistics to count the dead versions", Duration::from_secs(30), || {
        c.query_one("SELECT pg_stat_get_dead_tuples('jobq.live_jobs'::regclass) + pg_stat_get_dead_tuples('jobq.ready'::regclass) >= 20000", &[])
            .unwrap()
            .get(0)
    });
    for _ in 0..2 {
        let seen = last_pass(c);
        wait_until("a reap pass", Duration::from_secs(30), || last_pass(c) != seen);
    }
}

/// Until the oldest holder of the xmin horizon has held it for more than 10 s.
fn horizon_older_than_10_s(c: &mut Client) {
    wait_until("the horizon to be held for more than 10 s", Duration::from_secs(30), || {
        c.query_one("SELECT coalesce((SELECT xact_age > interval '10 seconds' FROM jobq._oldest_horizon()), false)", &[]).unwrap().get(0)
    });
}

#[test]
fn the_background_worker_compacts_under_a_held_horizon_only() {
    let cluster = compacting_cluster();
    let mut c = connect_rc(cluster);
    let w = register(&mut c);
    let waiting: Vec<i64> = (0..10).map(|i| c.query_one(&format!("SELECT jobq_enqueue('q', '{{\"n\": {i}}}')"), &[]).unwrap().get(0)).collect();
    let before = fingerprint(&mut c);
    let (_, file, _) = size_and_files(&mut c);

    // No horizon held: the dead versions are autovacuum's, however many.
    churn(&mut c, w, 30_000, PLAIN_1000);
    two_passes_after_the_dead_versions_are_counted(&mut c);
    assert_eq!(size_and_files(&mut c).1, file, "compacted without a held horizon");

    // A REPEATABLE READ reader of jobq.live_jobs holds the horizon and its lock: no compaction
    // while it lasts (TRUNCATE would wait for it).
    let mut reader = cluster.connect(DB);
    let mut t = reader.build_transaction().isolation_level(IsolationLevel::RepeatableRead).start().unwrap();
    t.query_one("SELECT count(*) FROM jobq.live_jobs", &[]).unwrap();
    churn(&mut c, w, 30_000, PLAIN_1000);
    horizon_older_than_10_s(&mut c);
    two_passes_after_the_dead_versions_are_counted(&mut c);
    assert_eq!(size_and_files(&mut c).1, file, "compacted under a reader's lock");
    t.commit().unwrap();

    // An idle transaction holding an xid, which takes no lock on them: the background worker
    // compacts.
    let mut held = hold_horizon(connect_rc(cluster));
    churn(&mut c, w, 10_000, PLAIN_1000);
    horizon_older_than_10_s(&mut c);
    wait_until("the background worker to compact the hot tables", Duration::from_secs(60), || size_and_files(&mut c).1 != file);
    held.batch_execute("COMMIT").unwrap();
    assert_eq!(fingerprint(&mut c), before, "a waiting job changed");
    let got: Vec<i64> = ids(&mut c, "SELECT id FROM jobq_checkout($1, ARRAY['q'], 10)", &[&w]);
    assert_eq!(got, waiting);
    assert_job_tables_consistent(&mut c);
}
