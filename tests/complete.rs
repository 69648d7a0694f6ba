//! jobq_complete's two paths (src/complete.rs): the common completion done without a plan,
//! and the SQL (`jobq._complete`) that serves every other case. Each test counts which path
//! ran with `track_functions` (a call of jobq._complete is the SQL path), so that the fast
//! path is proven to be taken where it should, and to leave exactly what the SQL leaves.
mod common;

use common::*;
use postgres::Client;
use serde_json::Value;
use std::time::Duration;
use uuid::Uuid;

/// Completes `id` in its own transaction at `isolation`; its answer, and whether the SQL path ran.
fn complete_in(c: &mut Client, isolation: &str, id: i64, w: Uuid, result: Option<&Value>) -> (bool, bool) {
    calls_sql(c, isolation, "_complete", |t| t.query_one("SELECT jobq_complete($1, $2, $3)", &[&id, &w, &result]).unwrap().get(0))
}

/// The finished row of `id` as JSON, without what differs between two jobs and two moments.
fn finished(c: &mut Client, id: i64) -> Value {
    c.query_one(
        "SELECT to_jsonb(f) - 'id' - 'enqueued_at' - 'run_at' - 'started_at' - 'finished_at' - 'concurrency_slot'
           FROM jobq.finished_jobs f WHERE f.id = $1",
        &[&id],
    )
    .unwrap()
    .get(0)
}

#[test]
fn both_paths_leave_the_same_rows_and_release_the_same_keys() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    // Pairs of jobs alike: plain; a payload stored out of line (TOAST) with a large result; a
    // unique key kept until executed; a concurrency key; a while_executing key. One of each
    // pair is completed by each path.
    let kinds = [
        "'q', '{\"n\": 1}', kind => 'Plain'",
        "'q', jsonb_build_object('big', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 3000) g))",
        "'q', unique_key => 'u@', unique_strategy => 'until_executed'",
        "'q', concurrency_key => 'c', concurrency_limit => 2",
        "'q', unique_key => 'w@', unique_strategy => 'while_executing'",
    ];
    let mut pairs = Vec::new();
    for k in kinds {
        let ids: Vec<i64> = ["fast", "sql"]
            .iter()
            .map(|p| c.query_one(&format!("SELECT jobq_enqueue({})", k.replace('@', p)), &[]).unwrap().get(0))
            .collect();
        pairs.push((ids[0], ids[1]));
    }
    let toast: String = c
        .query_one("SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'jobq.live_jobs'::regclass", &[])
        .unwrap()
        .get(0);
    let chunks: i64 = c.query_one(&format!("SELECT count(*) FROM {toast}"), &[]).unwrap().get(0);
    assert!(chunks > 0, "the large payloads are stored out of line");
    let held: Vec<i64> = c.query("SELECT id FROM jobq_checkout($1, NULL, 100)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(held.len(), 10);
    let big_result: Value = c
        .query_one("SELECT jsonb_build_object('r', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 2000) g))", &[])
        .unwrap()
        .get(0);
    for (i, &(fast, sql)) in pairs.iter().enumerate() {
        let result = (i == 1).then_some(&big_result);
        assert_eq!(complete_in(&mut c, "READ COMMITTED", fast, w, result), (true, false), "job {fast}: completed, fast path");
        assert_eq!(complete_in(&mut c, "REPEATABLE READ", sql, w, result), (true, true), "job {sql}: completed, SQL path");
        let (a, b) = (finished(&mut c, fast), finished(&mut c, sql).to_string().replace("sql", "fast").parse::<Value>().unwrap());
        assert!(a == b, "jobs {fast} and {sql} were left differently: {:.300} against {:.300}", a.to_string(), b.to_string());
        // A second completion changes nothing on either path.
        assert_eq!(complete_in(&mut c, "READ COMMITTED", fast, w, None), (false, true));
    }
    // Every key was released: no unique key, no slot left; the job tables agree.
    let (locks, slots): (i64, i64) = c
        .query_one("SELECT (SELECT count(*) FROM jobq.locks), (SELECT count(*) FROM jobq.slots)", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((locks, slots), (0, 0));
    assert_job_tables_consistent(&mut c);
    let states: Vec<String> = c.query("SELECT DISTINCT state FROM jobq.jobs", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(states, ["completed"]);
    // The unique keys can be taken again (until_executed: released at completion).
    for p in ["fast", "sql"] {
        let again: Option<i64> = c
            .query_one(&format!("SELECT jobq_enqueue('q', unique_key => 'u{p}', unique_strategy => 'until_executed')"), &[])
            .unwrap()
            .get(0);
        assert!(again.is_some());
    }
}

/// A job executing under a new worker of `c`: the worker and the job.
fn executing(c: &mut Client) -> (Uuid, i64) {
    let w = register(c);
    let id: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    c.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap();
    (w, id)
}

/// Another session makes `change` to the job (given the session, the job and its worker) in an
/// open transaction; the worker's completion of the job waits for it (awaited in
/// pg_stat_activity), then the change commits. The completion's answer, the worker and the job.
fn completion_behind(cluster: &'static Cluster, db: &str, c: &mut Client, change: impl FnOnce(&mut Client, i64, Uuid)) -> (Result<bool, String>, Uuid, i64) {
    let (w, id) = executing(c);
    let mut a = cluster.connect(db);
    a.batch_execute("BEGIN").unwrap();
    change(&mut a, id, w);
    let mut b = cluster.connect(db);
    let pid: i32 = b.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let h = std::thread::spawn(move || {
        b.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).map(|r| r.get::<_, bool>(0)).map_err(|e| e.to_string())
    });
    wait_until("the completion to wait for the row lock", Duration::from_secs(30), || {
        c.query_one("SELECT wait_event_type IS NOT DISTINCT FROM 'Lock' FROM pg_stat_activity WHERE pid = $1", &[&pid])
            .map(|r| r.get::<_, bool>(0))
            .unwrap_or(false)
    });
    a.batch_execute("COMMIT").unwrap();
    (h.join().unwrap(), w, id)
}

#[test]
fn a_completion_that_waited_for_a_cancel_request_keeps_it() {
    let (cluster, db_name, mut c) = db();
    // A cancel request is being written when the worker completes: the completion waits for
    // it, then completes the job as it now is (its newest version, with the request).
    let (done, _, id) = completion_behind(cluster, &db_name, &mut c, |a, id, _| {
        let s: String = a.query_one("SELECT jobq_cancel($1)", &[&id]).unwrap().get(0);
        assert_eq!(s, "executing");
    });
    assert_eq!(done, Ok(true));
    let (state, requested): (String, bool) = c
        .query_one("SELECT state, cancel_requested_at IS NOT NULL FROM jobq.finished_jobs WHERE id = $1", &[&id])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((state.as_str(), requested), ("completed", true));
    assert_job_tables_consistent(&mut c);
}

#[test]
fn a_completion_that_waited_for_its_job_to_be_taken_back_changes_nothing() {
    let (cluster, db_name, mut c) = db();
    // The worker's heartbeat says it holds nothing (the job goes back to the queue) while its
    // completion of that job is on the way: the completion waits, then finds the job no longer
    // executing under it and changes nothing.
    let (done, w, id) = completion_behind(cluster, &db_name, &mut c, |a, _, w| {
        a.query_one("SELECT jobq_heartbeat($1, '{}')", &[&w]).unwrap();
    });
    assert_eq!(done, Ok(false));
    let state: String = c.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
    assert_eq!(state, "ready");
    assert_job_tables_consistent(&mut c);
    let again: Vec<i64> = c.query("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(again, vec![id]);
}

#[test]
fn a_read_only_transaction_is_refused_and_changes_nothing() {
    let (_, _, mut c) = db();
    let (w, id) = executing(&mut c);
    let mut t = c.transaction().unwrap();
    t.batch_execute("SET TRANSACTION READ ONLY").unwrap();
    let e = t.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap_err();
    assert_eq!(sqlstate(&e), "25006");
    drop(t);
    let state: String = c.query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
    assert_eq!(state, "executing");
    assert!(c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
}

#[test]
fn a_session_completes_across_a_drop_and_create_of_the_extension() {
    // The fast path keeps, per session, where the columns are, two prepared calls and the
    // oids of jobq's tables (src/relids.rs); after DROP EXTENSION and CREATE EXTENSION (new
    // tables, new functions), by this session (round 1) or by another one (round 2), it must
    // find the new ones, for a plain and for a keyed job.
    let (cluster, name, mut c) = db();
    let recreate = "SET client_min_messages = error; DROP EXTENSION jobq CASCADE; CREATE EXTENSION jobq;";
    for round in 0..3 {
        if round == 1 {
            c.batch_execute(recreate).unwrap();
        } else if round == 2 {
            Client::connect(&cluster.url(&name), postgres::NoTls).unwrap().batch_execute(recreate).unwrap();
        }
        let w = register(&mut c);
        let plain: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
        let keyed: i64 = c.query_one("SELECT jobq_enqueue('q', concurrency_key => 'k')", &[]).unwrap().get(0);
        assert_eq!(c.query("SELECT id FROM jobq_checkout($1, NULL, 2)", &[&w]).unwrap().len(), 2);
        for id in [plain, keyed] {
            assert_eq!(complete_in(&mut c, "READ COMMITTED", id, w, None), (true, false), "round {round}, job {id}");
        }
        let slots: i64 = c.query_one("SELECT count(*) FROM jobq.slots", &[]).unwrap().get(0);
        assert_eq!(slots, 0, "round {round}: the keyed job's slot was released");
        assert_job_tables_consistent(&mut c);
    }
}
