//! Fair checkout (the contract, "Tenants": `fairness_key`, `jobq_set_fairness_weight`), over real
//! connections: the keys of a queue take turns whatever the order and volume of their enqueues;
//! jobs without a key are one key of their own; a weight gives a key more jobs per turn;
//! priority still comes first, and a checkout of several queues keeps their order; a key's job
//! that goes back to waiting after the pass pruned its key is served; keys left without jobs are
//! pruned at once when walks pass many of them, not at the next pass, and checkouts at once take
//! every job once while such prunes run; the arguments are checked
//! and the weight is jobq_admin's; many checkouts at once, in every isolation level, take every
//! job once and still serve the small keys long before the backlog is done.
mod common;

use common::*;
use postgres::Client;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use uuid::Uuid;

fn enqueue(c: &mut impl postgres::GenericClient, queue: &str, key: Option<&str>, n: usize) -> Vec<i64> {
    (0..n)
        .map(|_| c.query_one("SELECT jobq_enqueue($1, fairness_key => $2)", &[&queue, &key]).unwrap().get(0))
        .collect()
}

/// One job checked out of `queues`: its id and fairness key; None when nothing was available.
fn take(c: &mut Client, w: Uuid, queues: Option<&[&str]>) -> Option<(i64, Option<String>)> {
    let rows = c.query("SELECT id, fairness_key FROM jobq_checkout($1, $2)", &[&w, &queues]).unwrap();
    rows.first().map(|r| (r.get(0), r.get(1)))
}

/// The fairness keys of every job checked out of `queue`, one checkout at a time, in order.
fn drain(c: &mut Client, w: Uuid, queue: &str) -> Vec<Option<String>> {
    let mut keys = Vec::new();
    while let Some((_, key)) = take(c, w, Some(&[queue])) {
        keys.push(key);
    }
    keys
}

/// Concurrency key 'one' (limit 1) held by a running job of another queue, checked out by
/// `w`: the held job's id.
fn hold_key_one(c: &mut Client, w: Uuid) -> i64 {
    c.execute("SELECT jobq_enqueue('other', concurrency_key => 'one')", &[]).unwrap();
    take(c, w, Some(&["other"])).expect("the holder of key 'one' is checked out").0
}

/// Waits until scheduled job `job` is due.
fn wait_due(c: &mut Client, job: i64) {
    wait_until(&format!("job {job} is due"), std::time::Duration::from_secs(30), || {
        c.query_one("SELECT clock_timestamp() > run_at FROM jobq.jobs WHERE id = $1", &[&job]).unwrap().get(0)
    });
}

fn k(s: &str) -> Option<String> {
    Some(s.to_string())
}

/// Rows of jobq.fairness without their copy in jobq.fairness_keys, and copies without their
/// row (the same queue, key, priority and weight, as many times), read in one snapshot.
fn copies_astray(c: &mut impl postgres::GenericClient) -> i64 {
    c.query_one(
        "SELECT count(*) FROM ((SELECT queue, fairness_key, priority, weight FROM jobq.fairness
                                EXCEPT ALL SELECT queue, fairness_key, priority, weight FROM jobq.fairness_keys)
                               UNION ALL
                               (SELECT queue, fairness_key, priority, weight FROM jobq.fairness_keys
                                EXCEPT ALL SELECT queue, fairness_key, priority, weight FROM jobq.fairness)) d",
        &[],
    )
    .unwrap()
    .get(0)
}

#[test]
fn the_keys_take_turns_whatever_the_backlog() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    // A checkout before any turn existed: the extension's fast path notes the database as
    // without turns (src/written.rs), and the first turn written must undo that.
    assert_eq!(take(&mut c, w, Some(&["q"])), None);
    // A backlog first, then two small keys and jobs without a key, enqueued after all of it.
    enqueue(&mut c, "q", Some("big"), 50);
    enqueue(&mut c, "q", Some("a"), 3);
    enqueue(&mut c, "q", None, 2);
    enqueue(&mut c, "q", Some("b"), 3);
    let order = drain(&mut c, w, "q");
    assert_eq!(order.len(), 58);
    // Each turn takes one job of every key that has one: the jobs without a key are a key too.
    let turn = |i: usize| order[i * 4..i * 4 + 4].iter().cloned().collect::<BTreeSet<_>>();
    assert_eq!(turn(0), BTreeSet::from([k("big"), k("a"), None, k("b")]), "{order:?}");
    assert_eq!(turn(1), BTreeSet::from([k("big"), k("a"), None, k("b")]), "{order:?}");
    assert_eq!(order[8..11].iter().cloned().collect::<BTreeSet<_>>(), BTreeSet::from([k("big"), k("a"), k("b")]), "{order:?}");
    assert!(order[11..].iter().all(|x| *x == k("big")), "{order:?}");
    // Within a key, oldest first; checkout returns the key (jobq.job's fairness_key).
    let rows = c.query("SELECT id FROM jobq.jobs WHERE fairness_key = 'a' ORDER BY started_at, id", &[]).unwrap();
    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
    assert_job_tables_consistent(&mut c);
}

#[test]
fn a_weight_gives_a_key_more_jobs_per_turn() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    c.execute("SELECT jobq_set_fairness_weight('q', 'big', 3)", &[]).unwrap();
    enqueue(&mut c, "q", Some("big"), 20);
    enqueue(&mut c, "q", Some("a"), 4);
    let order = drain(&mut c, w, "q");
    // Turns of four: three of big, one of a, until a runs out.
    for t in 0..4 {
        let turn = &order[t * 4..t * 4 + 4];
        assert_eq!(turn.iter().filter(|x| **x == k("big")).count(), 3, "turn {t}: {order:?}");
        assert_eq!(turn.iter().filter(|x| **x == k("a")).count(), 1, "turn {t}: {order:?}");
    }
    assert!(order[16..].iter().all(|x| *x == k("big")));
    // The weight is kept after the key's jobs are done and the pass has run.
    c.execute("SELECT * FROM jobq_reap()", &[]).unwrap();
    let weight: i32 = c.query_one("SELECT weight FROM jobq.fairness WHERE queue = 'q' AND fairness_key = 'big'", &[]).unwrap().get(0);
    assert_eq!(weight, 3);
    assert_eq!(copies_astray(&mut c), 0);
    // The jobs without a key are one key, and take a weight too (fairness_key NULL).
    c.execute("SELECT jobq_set_fairness_weight('n', NULL, 2)", &[]).unwrap();
    assert_eq!(copies_astray(&mut c), 0);
    enqueue(&mut c, "n", None, 8);
    enqueue(&mut c, "n", Some("a"), 3);
    let order = drain(&mut c, w, "n");
    assert_eq!(order.len(), 11);
    // Turns of three: two without a key, one of a, until a runs out.
    for t in 0..3 {
        let turn = &order[t * 3..t * 3 + 3];
        assert_eq!(turn.iter().filter(|x| x.is_none()).count(), 2, "turn {t}: {order:?}");
        assert_eq!(turn.iter().filter(|x| **x == k("a")).count(), 1, "turn {t}: {order:?}");
    }
    assert!(order[9..].iter().all(|x| x.is_none()), "{order:?}");
}

/// In REPEATABLE READ and SERIALIZABLE a key is picked without its row's lock, and its row is
/// locked to be moved after (jobq._fair_claim): a key and the jobs without a key still take
/// turns there.
#[test]
fn a_key_and_the_jobs_without_one_take_turns_in_repeatable_read_and_serializable() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    for (queue, isolation) in [("rr", "repeatable read"), ("sz", "serializable")] {
        c.batch_execute(&format!("SET default_transaction_isolation = '{isolation}'")).unwrap();
        enqueue(&mut c, queue, None, 3);
        enqueue(&mut c, queue, Some("a"), 3);
        // Which of the two goes first is the order their turns were added in; then each in turn.
        let order = drain(&mut c, w, queue);
        assert_eq!(order.len(), 6, "{isolation}: {order:?}");
        assert!(order.windows(2).all(|p| p[0] != p[1]), "{isolation}: {order:?}");
    }
}

/// An enqueue under REPEATABLE READ or SERIALIZABLE makes a key's turns once, as under READ
/// COMMITTED: jobs enqueued one at a time, each in a transaction of its own, leave one row per
/// key and the keys alternate. A transaction whose snapshot predates a pass that pruned the
/// key's row makes it again, and its job is served.
#[test]
fn an_enqueue_in_repeatable_read_or_serializable_makes_a_keys_turns_once() {
    let (cluster, name, mut c) = db();
    let w = register(&mut c);
    for (queue, isolation) in [("rr", "repeatable read"), ("sz", "serializable")] {
        let mut e = cluster.connect(&name);
        e.batch_execute(&format!("SET default_transaction_isolation = '{isolation}'")).unwrap();
        enqueue(&mut e, queue, Some("a"), 4);
        enqueue(&mut e, queue, Some("b"), 4);
        let rows: i64 = c.query_one("SELECT count(*) FROM jobq.fairness WHERE queue = $1", &[&queue]).unwrap().get(0);
        assert_eq!(rows, 3, "{isolation}: the rows of a, of b and of the jobs without a key");
        assert_eq!(drain(&mut c, w, queue), (0..4).flat_map(|_| [k("a"), k("b")]).collect::<Vec<_>>(), "{isolation}");

        // The snapshot first, then a pass that prunes every row of the queue (no job waits).
        let mut t = e.transaction().unwrap();
        t.query_one("SELECT 1", &[]).unwrap();
        c.query("SELECT * FROM jobq_reap()", &[]).unwrap();
        let rows: i64 = c.query_one("SELECT count(*) FROM jobq.fairness WHERE queue = $1", &[&queue]).unwrap().get(0);
        assert_eq!(rows, 0, "{isolation}: pruned");
        assert_eq!(copies_astray(&mut c), 0, "{isolation}: pruned with their copies");
        let job: i64 = t.query_one("SELECT jobq_enqueue($1, fairness_key => 'a')", &[&queue]).unwrap().get(0);
        t.commit().unwrap();
        assert_eq!(take(&mut c, w, Some(&[queue])), Some((job, k("a"))), "{isolation}: served");
    }
}

#[test]
fn priority_comes_first_and_several_queues_keep_their_order() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    // Priority before turns: a's job of priority 1 waits for every job of priority 0.
    enqueue(&mut c, "p", Some("big"), 3);
    c.execute("SELECT jobq_enqueue('p', priority => 1, fairness_key => 'a')", &[]).unwrap();
    assert_eq!(drain(&mut c, w, "p"), vec![k("big"), k("big"), k("big"), k("a")]);

    // Across queues, the order of priority, run_at and id: each fair queue gives the job of the
    // key whose turn it is.
    let first = enqueue(&mut c, "plain", None, 1)[0];
    let big = enqueue(&mut c, "fair", Some("big"), 3);
    let a = enqueue(&mut c, "fair", Some("a"), 1)[0];
    let last = enqueue(&mut c, "plain", None, 1)[0];
    let mut got = Vec::new();
    while let Some((id, _)) = take(&mut c, w, Some(&["fair", "plain"])) {
        got.push(id);
    }
    assert_eq!(got, vec![first, big[0], a, big[1], big[2], last]);
    assert_job_tables_consistent(&mut c);
}

#[test]
fn a_checkout_of_every_queue_serves_the_fair_ones_in_turns() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let first = enqueue(&mut c, "plain", None, 1)[0];
    let big = enqueue(&mut c, "fair", Some("big"), 3);
    let a = enqueue(&mut c, "fair", Some("a"), 1)[0];
    let last = enqueue(&mut c, "plain", None, 1)[0];
    let mut got = Vec::new();
    while let Some((id, _)) = take(&mut c, w, None) {
        got.push(id);
    }
    assert_eq!(got, vec![first, big[0], a, big[1], big[2], last]);
}

#[test]
fn a_keyed_job_back_to_waiting_after_its_key_was_pruned_is_served() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let id = enqueue(&mut c, "q", Some("t1"), 1)[0];
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((id, k("t1"))));
    // No job of the queue waits: the pass removes its turns, and checkout is the plain one again.
    c.execute("SELECT * FROM jobq_reap()", &[]).unwrap();
    let rows: i64 = c.query_one("SELECT count(*) FROM jobq.fairness", &[]).unwrap().get(0);
    assert_eq!(rows, 0);
    // The attempt fails and is retried: its key takes turns again, and the job is served.
    c.execute("SELECT jobq_fail($1, $2, '{}', retry_in => '0 s')", &[&id, &w]).unwrap();
    let rows: i64 = c.query_one("SELECT count(*) FROM jobq.fairness WHERE queue = 'q'", &[]).unwrap().get(0);
    assert_eq!(rows, 2, "the key's row and the row of the jobs without one");
    assert_eq!(copies_astray(&mut c), 0);
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((id, k("t1"))));
    assert_job_tables_consistent(&mut c);
}

#[test]
fn bad_arguments_and_other_roles_are_refused_and_change_nothing() {
    let (cluster, name, mut c) = db();
    let drawn = |c: &mut Client| -> i64 {
        c.query_one("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM jobq.jobs_id_seq", &[]).unwrap().get(0)
    };
    let before = drawn(&mut c);
    for (sql, state) in [
        ("SELECT jobq_enqueue('q', fairness_key => '')", "22023"),
        ("SELECT jobq_enqueue('q', fairness_key => repeat('x', 1001))", "22023"),
        ("SELECT jobq_enqueue_batch('q', ARRAY['{}'::jsonb], fairness_key => '')", "22023"),
        ("SELECT jobq_set_fairness_weight('q', 'k', 0)", "22023"),
        ("SELECT jobq_set_fairness_weight('q', 'k', 101)", "22023"),
        ("SELECT jobq_set_fairness_weight('q', '', 2)", "22023"),
        ("SELECT jobq_set_fairness_weight('', 'k', 2)", "22023"),
        ("SELECT jobq_set_fairness_weight(NULL, 'k', 2)", "22004"),
        ("SELECT jobq_set_fairness_weight('q', 'k', NULL)", "22004"),
    ] {
        let e = c.query(sql, &[]).expect_err(sql);
        assert_eq!(sqlstate(&e), state, "{sql}: {e:?}");
    }
    // The weight is jobq_admin's: a worker is refused.
    let role = format!("{name}_fair_worker");
    c.batch_execute(&format!("CREATE ROLE {role} LOGIN; GRANT jobq_worker TO {role}")).unwrap();
    let mut worker = cluster.connect_as(&name, &role);
    let e = worker.query("SELECT jobq_set_fairness_weight('q', 'k', 2)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501", "{e:?}");
    // A producer may enqueue with a key; the batch and the graph give theirs to every job.
    worker.execute("SELECT jobq_enqueue('q', fairness_key => 'k')", &[]).unwrap();
    assert_eq!(drawn(&mut c), before + 1, "no id drawn by a refusal");
    c.execute("SELECT jobq_enqueue_batch('q', ARRAY['{}'::jsonb, '{}'], fairness_key => 'b')", &[]).unwrap();
    c.execute("SELECT jobq_enqueue_graph('[{\"queue\": \"q\", \"fairness_key\": \"g\"}]')", &[]).unwrap();
    let keys: Vec<Option<String>> =
        c.query("SELECT fairness_key FROM jobq.jobs ORDER BY id", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(keys, vec![k("k"), k("b"), k("b"), k("g")]);
    let rows: i64 = c.query_one("SELECT count(*) FROM jobq.fairness WHERE weight <> 1", &[]).unwrap().get(0);
    assert_eq!(rows, 0);
}

/// Many checkouts at once on one fair queue: 16 small keys of 10 jobs and a backlog of 400,
/// enqueued first. Every job is taken once, and the small keys' jobs are all taken within
/// their ten turns (17 jobs each), plus what the concurrent checkouts may each take ahead.
fn hammer(isolation: &str) {
    const WORKERS: usize = 8;
    let (cluster, name, mut c) = db();
    c.execute("SELECT count(*) FROM jobq_enqueue_batch('h', array_fill('{}'::jsonb, ARRAY[400]), fairness_key => 'big')", &[]).unwrap();
    for t in 0..16 {
        c.execute("SELECT count(*) FROM jobq_enqueue_batch('h', array_fill('{}'::jsonb, ARRAY[10]), fairness_key => $1)", &[&format!("t{t}")])
            .unwrap();
    }
    let rank = AtomicUsize::new(0);
    let taken = Mutex::new(Vec::<(usize, i64, Option<String>)>::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            let mut conn = cluster.connect(&name);
            let (rank, taken) = (&rank, &taken);
            s.spawn(move || {
                let w = register(&mut conn);
                let mut empty = 0;
                while empty < 3 {
                    // The snapshot taken before the checkout, as a client's transaction takes it.
                    let mut t = conn.transaction().unwrap();
                    t.batch_execute(&format!("SET TRANSACTION ISOLATION LEVEL {isolation}; SELECT 1")).unwrap();
                    let rows = match t.query("SELECT id, fairness_key FROM jobq_checkout($1, ARRAY['h'])", &[&w]).and_then(|r| t.commit().map(|_| r)) {
                        Ok(rows) => rows,
                        // What the contract lets REPEATABLE READ and SERIALIZABLE raise, and the
                        // client retries (nothing changed); never under READ COMMITTED.
                        Err(e) if isolation != "READ COMMITTED" && sqlstate(&e) == "40001" => continue,
                        Err(e) => panic!("{isolation}: {e:?}"),
                    };
                    if rows.is_empty() {
                        empty += 1;
                        continue;
                    }
                    empty = 0;
                    let at = rank.fetch_add(1, Ordering::SeqCst);
                    taken.lock().unwrap().push((at, rows[0].get(0), rows[0].get(1)));
                }
            });
        }
    });
    let taken = taken.into_inner().unwrap();
    let ids: BTreeSet<i64> = taken.iter().map(|t| t.1).collect();
    assert_eq!(ids.len(), taken.len(), "{isolation}: a job taken twice");
    assert_eq!(ids.len(), 560, "{isolation}: every job taken");
    let mut last: BTreeMap<String, usize> = BTreeMap::new();
    for (at, _, key) in &taken {
        let key = key.clone().unwrap();
        let e = last.entry(key).or_default();
        *e = (*e).max(*at);
    }
    let small_done = last.iter().filter(|(key, _)| *key != "big").map(|(_, at)| *at).max().unwrap();
    assert!(small_done < 10 * 17 + WORKERS * 10, "{isolation}: the small keys' last job was taken {small_done}th of 560");
    assert_job_tables_consistent(&mut c);
}

#[test]
fn concurrent_checkouts_take_every_job_once_and_serve_the_small_keys_first_read_committed() {
    hammer("READ COMMITTED");
}

#[test]
fn concurrent_checkouts_take_every_job_once_and_serve_the_small_keys_first_repeatable_read() {
    hammer("REPEATABLE READ");
}

#[test]
fn concurrent_checkouts_take_every_job_once_and_serve_the_small_keys_first_serializable() {
    hammer("SERIALIZABLE");
}

/// An enqueue of a key never waits for a checkout that moved the key's turn and has not
/// committed (nor for another enqueue adding the same new key): under READ COMMITTED nothing
/// of jobq may wait there, and two such transactions crossing would deadlock. Two enqueues
/// that add one new key at once leave it two rows, and the pass keeps one.
#[test]
fn enqueues_of_a_key_never_wait_for_open_checkouts_or_enqueues() {
    let (cluster, name, mut c) = db();
    let w = register(&mut c);
    enqueue(&mut c, "q", Some("k"), 2);
    enqueue(&mut c, "q", None, 2);
    let mut a = cluster.connect(&name);
    let mut b = cluster.connect(&name);
    b.batch_execute("SET lock_timeout = '2s'").unwrap();
    // Transaction a takes k's turn and a turn of the jobs without a key, and stays open.
    let mut ta = a.transaction().unwrap();
    let got: Vec<Option<String>> =
        ta.query("SELECT fairness_key FROM jobq_checkout($1, ARRAY['q'], 2)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(got.len(), 2);
    // b enqueues into both turns, and a new key, without waiting for a.
    b.execute("SELECT jobq_enqueue('q', fairness_key => 'k')", &[]).unwrap();
    b.execute("SELECT jobq_enqueue('q', fairness_key => 'fresh')", &[]).unwrap();
    // a adds the same new key as an open b does: neither waits.
    let mut tb = b.transaction().unwrap();
    tb.execute("SELECT jobq_enqueue('q', fairness_key => 'new')", &[]).unwrap();
    ta.execute("SET LOCAL lock_timeout = '2s'", &[]).unwrap();
    ta.execute("SELECT jobq_enqueue('q', fairness_key => 'new')", &[]).unwrap();
    ta.commit().unwrap();
    tb.commit().unwrap();
    let rows: i64 = c.query_one("SELECT count(*) FROM jobq.fairness WHERE fairness_key = 'new'", &[]).unwrap().get(0);
    assert_eq!(rows, 2, "each inserted the new key's row");
    assert_eq!(copies_astray(&mut c), 0, "each with its copy");
    c.execute("SELECT * FROM jobq_reap()", &[]).unwrap();
    let rows: i64 = c.query_one("SELECT count(*) FROM jobq.fairness WHERE fairness_key = 'new'", &[]).unwrap().get(0);
    assert_eq!(rows, 1, "the pass keeps one");
    assert_eq!(copies_astray(&mut c), 0, "and one copy");
    // Every job is still taken, each once.
    let mut ids = BTreeSet::new();
    while let Some((id, _)) = take(&mut c, w, Some(&["q"])) {
        assert!(ids.insert(id));
    }
    assert_eq!(ids.len(), 6);
    assert_job_tables_consistent(&mut c);
}

/// The rows' copies in jobq.fairness_keys, where enqueues look a key up, follow the rows while
/// producers add keys, workers move them and passes prune them, all at once: every snapshot of
/// a pass sees as many copies of each key as rows, and every job is served once, including
/// those of keys pruned and added again.
#[test]
fn the_rows_copies_follow_them_through_enqueues_claims_and_prunes() {
    const PRODUCERS: usize = 3;
    const ROUNDS: usize = 60;
    let (cluster, name, mut c) = db();
    let produced = AtomicUsize::new(0);
    let done = Mutex::new(Vec::<i64>::new());
    std::thread::scope(|s| {
        for p in 0..PRODUCERS {
            let mut conn = cluster.connect(&name);
            let produced = &produced;
            s.spawn(move || {
                for r in 0..ROUNDS {
                    // A key the other producers use too, and one of its own seen once.
                    let shared = format!("s{}", r % 5);
                    let own = format!("p{p}-{r}");
                    enqueue(&mut conn, "c", Some(&shared), 1);
                    enqueue(&mut conn, "c", Some(&own), 1);
                    enqueue(&mut conn, "c", None, 1);
                }
                produced.fetch_add(1, Ordering::SeqCst);
            });
        }
        for _ in 0..3 {
            let mut conn = cluster.connect(&name);
            let (produced, done) = (&produced, &done);
            s.spawn(move || {
                let w = register(&mut conn);
                loop {
                    let finished = produced.load(Ordering::SeqCst) == PRODUCERS;
                    match take(&mut conn, w, Some(&["c"])) {
                        Some((id, _)) => {
                            assert!(conn.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
                            done.lock().unwrap().push(id);
                        }
                        None if finished => break,
                        None => {}
                    }
                }
            });
        }
        let mut conn = cluster.connect(&name);
        let produced = &produced;
        s.spawn(move || {
            loop {
                let last = produced.load(Ordering::SeqCst) == PRODUCERS;
                conn.query("SELECT * FROM jobq_reap()", &[]).unwrap();
                assert_eq!(copies_astray(&mut conn), 0, "rows and copies apart after a pass");
                if last {
                    break;
                }
            }
        });
    });
    let done = done.into_inner().unwrap();
    let ids: BTreeSet<i64> = done.iter().copied().collect();
    assert_eq!(ids.len(), done.len(), "a job completed twice");
    assert_eq!(ids.len(), PRODUCERS * ROUNDS * 3, "every job served");
    c.query("SELECT * FROM jobq_reap()", &[]).unwrap();
    let left: i64 = c.query_one("SELECT count(*) FROM jobq.fairness_keys", &[]).unwrap().get(0);
    assert_eq!((left, copies_astray(&mut c)), (0, 0), "the last pass prunes every row and copy");
    assert_job_tables_consistent(&mut c);
}

/// A key whose next job cannot start yields its turn at that priority only: its job of the
/// next priority is still served.
#[test]
fn a_key_that_cannot_start_yields_only_its_priority() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    hold_key_one(&mut c, w);
    c.execute("SELECT jobq_enqueue('q', priority => 0, concurrency_key => 'one', fairness_key => 'a')", &[]).unwrap();
    let later: i64 = c.query_one("SELECT jobq_enqueue('q', priority => 1, fairness_key => 'a')", &[]).unwrap().get(0);
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((later, k("a"))));
    assert_eq!(take(&mut c, w, Some(&["q"])), None, "the first still waits for its slot");
}

/// A job that cannot start is passed, as a plain checkout passes it (the jobs behind it still
/// start): its key's turn goes to the key's next job that can start, for a key and for the jobs
/// without one, by a checkout of the fair queue alone or of several queues alike; the held-back
/// jobs start once their keys allow.
#[test]
fn a_job_that_cannot_start_leaves_its_keys_turn_to_the_next() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    // Concurrency key 'one' held; rate key 'r' spent for its window.
    let holder = hold_key_one(&mut c, w);
    c.execute("SELECT jobq_set_rate_limit('r', 1, interval '1 hour')", &[]).unwrap();
    c.execute("SELECT jobq_enqueue('other', rate_key => 'r')", &[]).unwrap();
    assert!(take(&mut c, w, Some(&["other"])).is_some());
    let one = |c: &mut Client, key: Option<&str>| -> i64 {
        c.query_one("SELECT jobq_enqueue('q', concurrency_key => 'one', fairness_key => $1)", &[&key]).unwrap().get(0)
    };
    let rated = |c: &mut Client, key: Option<&str>| -> i64 {
        c.query_one("SELECT jobq_enqueue('q', rate_key => 'r', fairness_key => $1)", &[&key]).unwrap().get(0)
    };
    let a1 = one(&mut c, Some("a"));
    let a2 = rated(&mut c, Some("a"));
    let a3 = enqueue(&mut c, "q", Some("a"), 1)[0];
    let n1 = one(&mut c, None);
    let n2 = enqueue(&mut c, "q", None, 1)[0];
    // Key a's turn goes to its job that can start, and so does that of the jobs without a key,
    // whether the checkout names the fair queue alone or with another.
    let taken: BTreeSet<i64> =
        [take(&mut c, w, Some(&["q"])), take(&mut c, w, Some(&["q", "empty"]))].iter().flatten().map(|t| t.0).collect();
    assert_eq!(taken, BTreeSet::from([a3, n2]));
    assert_eq!(take(&mut c, w, Some(&["q"])), None, "what is left cannot start");
    assert_eq!(take(&mut c, w, Some(&["q", "empty"])), None);
    c.execute("SELECT jobq_complete($1, $2)", &[&holder, &w]).unwrap();
    let first = take(&mut c, w, Some(&["q"])).unwrap().0;
    assert!(first == a1 || first == n1, "a job of the freed key starts: {first}");
    assert_eq!(take(&mut c, w, Some(&["q"])), None, "the key's limit holds: one at a time");
    let left: i64 = c.query_one("SELECT count(*) FROM jobq.jobs WHERE id = ANY ($1) AND state = 'ready'",
                                &[&vec![a1, a2, n1]]).unwrap().get(0);
    assert_eq!(left, 2);
}

/// Each priority has its own turns: a key served at one priority keeps its place at another, so
/// a due job waits behind at most one job of every other key with due jobs of its priority, even
/// while its key's jobs of a higher priority come and go.
#[test]
fn each_priority_keeps_its_own_turns() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let job = |c: &mut Client, priority: i32, key: &str| -> i64 {
        c.query_one("SELECT jobq_enqueue('q', priority => $1, fairness_key => $2)", &[&priority, &key]).unwrap().get(0)
    };
    // At priority 5, key a's job comes first, then three of key b's.
    let a5 = job(&mut c, 5, "a");
    let b5: Vec<i64> = (0..3).map(|_| job(&mut c, 5, "b")).collect();
    // Key a also gets a job of priority 0 before each checkout of priority 5 (priority first).
    let mut at5 = Vec::new();
    for _ in 0..4 {
        let a0 = job(&mut c, 0, "a");
        assert_eq!(take(&mut c, w, Some(&["q"])), Some((a0, k("a"))), "priority first");
        at5.push(take(&mut c, w, Some(&["q"])).unwrap().0);
    }
    assert_eq!(at5, [vec![a5], b5].concat(), "key a's turn at priority 5 is not moved by its jobs of priority 0");
    // A priority where only jobs without a key wait is served too (it has no turns to take).
    let plain = c.query_one("SELECT jobq_enqueue('q', priority => 7)", &[]).unwrap().get::<_, i64>(0);
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((plain, None)));
    assert_eq!(take(&mut c, w, Some(&["q"])), None);
}

/// The extension's fast path (src/fairness.rs: a checkout of one fair queue) takes the turns
/// that the SQL (jobq._fair_claim: the same queue named twice) takes, in the same order: keys,
/// a weight, jobs without a key, priorities, a job that cannot start, a paused kind, a job not
/// yet due, several jobs per call; and the fast path serves it without the SQL.
#[test]
fn the_fast_path_takes_the_turns_the_sql_takes() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    hold_key_one(&mut c, w);
    for q in ["q", "r"] {
        c.execute("SELECT jobq_set_fairness_weight($1, 'heavy', 3)", &[&q]).unwrap();
        c.execute("SELECT jobq_pause($1, 'held')", &[&q]).unwrap();
        let job = |c: &mut Client, key: Option<&str>, priority: i32, kind: &str| {
            c.execute(
                "SELECT jobq_enqueue($1, kind => $4, priority => $3, fairness_key => $2,
                                     concurrency_key => CASE WHEN $4 = 'blocked' THEN 'one' END,
                                     run_at => now() + CASE WHEN $4 = 'later' THEN interval '1 hour' ELSE interval '0' END)",
                &[&q, &key, &priority, &kind],
            )
            .unwrap();
        };
        for _ in 0..12 {
            job(&mut c, Some("big"), 0, "work");
        }
        for _ in 0..7 {
            job(&mut c, Some("heavy"), 0, "work");
        }
        job(&mut c, Some("a"), 0, "blocked");
        for _ in 0..3 {
            job(&mut c, Some("a"), 0, "work");
            job(&mut c, None, 0, "work");
            job(&mut c, Some("b"), 1, "work");
        }
        job(&mut c, Some("c"), 0, "held");
        job(&mut c, Some("c"), 0, "work");
        job(&mut c, Some("d"), 0, "later");
        job(&mut c, None, 2, "work");
    }
    // Each call takes up to two jobs; the order of (key, priority, kind) of each queue's claims.
    let mut drain = |queues: &[&str]| {
        let mut order = Vec::new();
        let mut sql = false;
        loop {
            let (rows, used) = calls_sql(&mut c, "read committed", "_checkout", |t| {
                t.query("SELECT fairness_key, priority, kind FROM jobq_checkout($1, $2, 2)", &[&w, &queues]).unwrap()
            });
            sql |= used;
            if rows.is_empty() {
                return (order, sql);
            }
            order.extend(rows.iter().map(|r| (r.get::<_, Option<String>>(0), r.get::<_, i32>(1), r.get::<_, String>(2))));
        }
    };
    let (fast, fast_used_sql) = drain(&["q"]);
    let (slow, slow_used_sql) = drain(&["r", "r"]);
    assert!(slow_used_sql);
    if sql_edition().is_none() {
        assert!(!fast_used_sql, "a checkout of one fair queue went to the SQL");
    }
    assert_eq!(fast, slow);
    assert_eq!(fast.len(), 12 + 7 + 3 * 3 + 1 + 1, "{fast:?}");
    // The first turn: heavy takes three jobs, every other key with a due job that can start
    // one (a's blocked job and c's paused one passed, d's not due).
    let mut first: Vec<Option<&str>> = fast[..7].iter().map(|(k, _, _)| k.as_deref()).collect();
    first.sort();
    assert_eq!(first, [None, Some("a"), Some("big"), Some("c"), Some("heavy"), Some("heavy"), Some("heavy")], "{fast:?}");
    assert_job_tables_consistent(&mut c);
}

/// Two fair queues whose names have the same hashtext, fairness_by_turn's leading column
/// (src/sql/fairness.sql): their keys' rows sit in one run of the index, interleaved, and the
/// checkouts of each, in the fast path (one queue) and in the SQL (the same queue named twice),
/// taken in alternation, walk past the other's rows (of keys of the same names) and serve their
/// own keys in turn.
#[test]
fn fair_queues_that_share_a_hash_keep_their_own_turns() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let (a, b) = queues_sharing_a_hash(&mut c);
    // Each key's first job in both queues in alternation, b's first, so that the two queues'
    // rows interleave in turn order, each of a's keys behind b's row of the same name (which a
    // walk of a's turns that took it for a's would serve and move instead of a's own); then the
    // backlog of key big in each.
    for key in ["big", "a", "b"] {
        enqueue(&mut c, b, Some(key), 1);
        enqueue(&mut c, a, Some(key), 1);
    }
    enqueue(&mut c, a, Some("big"), 4);
    enqueue(&mut c, b, Some("big"), 4);
    let (mut from_a, mut from_b) = (Vec::new(), Vec::new());
    loop {
        let got_a = take(&mut c, w, Some(&[a]));
        let got_b = take(&mut c, w, Some(&[b, b]));
        if got_a.is_none() && got_b.is_none() {
            break;
        }
        from_a.extend(got_a.map(|(_, key)| key.unwrap()));
        from_b.extend(got_b.map(|(_, key)| key.unwrap()));
    }
    assert_eq!(from_a, ["big", "a", "b", "big", "big", "big", "big"]);
    assert_eq!(from_b, from_a);
    assert_job_tables_consistent(&mut c);
}

/// A key added while the turns go round takes its place (the first, its row being the oldest)
/// once its enqueue commits, though checkouts meanwhile moved every other key past it: the
/// extension's walks start at a floor of the turns they saw, and an insert of turns, counted
/// at its commit, moves them back (src/fairness.rs). A key with no due job keeps its place.
#[test]
fn a_key_added_while_the_turns_go_round_is_served_at_its_place() {
    let (cluster, db, mut c) = db();
    let w = register(&mut c);
    for key in ["a", "b", "c"] {
        enqueue(&mut c, "q", Some(key), 10);
    }
    // An enqueue of a new key, its turn's row inserted, not yet committed.
    let mut other = cluster.connect(&db);
    let mut t = other.transaction().unwrap();
    let late: i64 = t.query_one("SELECT jobq_enqueue('q', fairness_key => 'late')", &[]).unwrap().get(0);
    // Every key goes round twice, past the new row.
    for _ in 0..6 {
        assert!(take(&mut c, w, Some(&["q"])).is_some());
    }
    t.commit().unwrap();
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((late, k("late"))), "the new key is served at its place");
    // A key whose only job is paused keeps its place while claims pass it: once resumed, it is
    // served first.
    c.execute("SELECT jobq_enqueue('q', kind => 'held', fairness_key => 'd')", &[]).unwrap();
    c.execute("SELECT jobq_pause('q', 'held')", &[]).unwrap();
    let paused: Vec<Option<String>> = (0..4).map(|_| take(&mut c, w, Some(&["q"])).unwrap().1).collect();
    assert!(!paused.contains(&k("d")), "{paused:?}");
    c.execute("SELECT jobq_resume('q', 'held')", &[]).unwrap();
    assert_eq!(take(&mut c, w, Some(&["q"])).unwrap().1, k("d"), "{paused:?}");
    assert_job_tables_consistent(&mut c);
}

/// A key whose first job is enqueued while the turns go round joins them at the back, after
/// every key already there, and takes its turn once a round: its row's turn sorts after the
/// extension's floors, which the insert leaves in place (src/fairness.rs).
#[test]
fn a_new_key_joins_the_turns_at_the_back() {
    let (_cluster, _db, mut c) = db();
    let w = register(&mut c);
    for key in ["a", "b", "c"] {
        enqueue(&mut c, "q", Some(key), 10);
    }
    assert_eq!(take(&mut c, w, Some(&["q"])).unwrap().1, k("a"));
    enqueue(&mut c, "q", Some("d"), 10);
    let order: Vec<Option<String>> = (0..8).map(|_| take(&mut c, w, Some(&["q"])).unwrap().1).collect();
    assert_eq!(order, ["b", "c", "a", "d", "b", "c", "a", "d"].map(k), "a new key at the back");
    assert_job_tables_consistent(&mut c);
}

/// When the background worker's last pass ended, as `jobq.health` shows it.
fn last_pass(c: &mut Client) -> Option<String> {
    c.query_one("SELECT last_pass_at::text FROM jobq.health", &[]).unwrap().get(0)
}

/// A server of its own whose background worker serves database `name`, with jobq, and passes
/// an hour apart: the cluster, a connection, and the end of the first pass, which has run.
fn served_once(name: &str) -> (Cluster, Client, Option<String>) {
    let cluster = Cluster::start(name, &[&format!("jobq.database = '{name}'"), "jobq.reap_interval = '1h'"]);
    cluster.connect("postgres").batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    let mut c = cluster.connect(name);
    c.batch_execute("SET client_min_messages = error; CREATE EXTENSION jobq").unwrap();
    wait_until("the background worker's first pass", std::time::Duration::from_secs(60), || last_pass(&mut c).is_some());
    let first = last_pass(&mut c);
    (cluster, c, first)
}

/// Keys whose jobs have all been taken keep their rows at the front of the turns until a prune
/// drops them, and every walk passes them: a walk that passes many (src/fairness.rs,
/// PRUNE_ASK) has the background worker prune at once, not at its next pass, which here is an
/// hour away (the test checks that none ran meanwhile).
#[test]
fn keys_left_without_jobs_are_pruned_at_once_when_walks_pass_many() {
    let (_cluster, mut c, first) = served_once("prune");
    let w = register(&mut c);
    enqueue(&mut c, "q", Some("big"), 20);
    let mut tx = c.transaction().unwrap();
    for i in 0..100 {
        enqueue(&mut tx, "q", Some(&format!("k{i}")), 1);
    }
    tx.commit().unwrap();
    let small = |c: &mut Client| -> i64 {
        c.query_one("SELECT count(*) FROM jobq.fairness WHERE queue = 'q' AND fairness_key LIKE 'k%'", &[]).unwrap().get(0)
    };
    // Each small key's one job, in turns with the big key's: then every walk passes the small
    // keys' rows, none of which has a job waiting.
    let mut taken = BTreeMap::<Option<String>, usize>::new();
    for _ in 0..103 {
        let (_, key) = take(&mut c, w, Some(&["q"])).expect("a job waits");
        *taken.entry(key).or_default() += 1;
    }
    assert_eq!(taken.len(), 101, "every small key was served");
    assert_eq!(taken.get(&k("big")), Some(&3), "in turns with the big one");
    wait_until("the rows of the keys left without jobs to be pruned", std::time::Duration::from_secs(30), || small(&mut c) == 0);
    assert_eq!(last_pass(&mut c), first, "pruned by no pass: the next is an hour away");
    assert_eq!(copies_astray(&mut c), 0);
    let rest = drain(&mut c, w, "q");
    assert_eq!(rest, vec![k("big"); 17], "the big key's other jobs are all still served");
    assert_job_tables_consistent(&mut c);
}

/// Eight checkouts at once over keys that run out one after another, new keys arriving all
/// the while, in a database whose background worker prunes the turns whenever walks pass many
/// keys left without jobs: every job is taken once and completed, none is left behind a pruned
/// key, and the rows of the keys that ran out were pruned during the run.
#[test]
fn checkouts_take_every_job_once_while_keys_left_without_jobs_are_pruned_at_once() {
    const WORKERS: usize = 8;
    let (cluster, mut c, first) = served_once("prunes");
    c.execute("SELECT count(*) FROM jobq_enqueue_batch('q', array_fill('{}'::jsonb, ARRAY[400]), fairness_key => 'big')", &[]).unwrap();
    for k in 0..200 {
        c.execute("SELECT count(*) FROM jobq_enqueue_batch('q', array_fill('{}'::jsonb, ARRAY[2]), fairness_key => $1)", &[&format!("k{k}")])
            .unwrap();
    }
    let total = 400 + 400 + 100;
    let taken = Mutex::new(Vec::<i64>::new());
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        let mut producer = cluster.connect("prunes");
        s.spawn(move || {
            for n in 0..100 {
                enqueue(&mut producer, "q", Some(&format!("new{n}")), 1);
            }
        });
        for _ in 0..WORKERS {
            let mut conn = cluster.connect("prunes");
            let taken = &taken;
            s.spawn(move || {
                let w = register(&mut conn);
                while taken.lock().unwrap().len() < total && start.elapsed() < std::time::Duration::from_secs(120) {
                    if let Some((id, _)) = take(&mut conn, w, Some(&["q"])) {
                        assert!(conn.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
                        taken.lock().unwrap().push(id);
                    }
                }
            });
        }
    });
    let taken = taken.into_inner().unwrap();
    assert_eq!(taken.len(), total, "every job taken (none left behind a pruned key)");
    assert_eq!(taken.iter().collect::<BTreeSet<_>>().len(), total, "each once");
    let done: i64 = c.query_one("SELECT count(*) FROM jobq.jobs WHERE queue = 'q' AND state = 'completed'", &[]).unwrap().get(0);
    assert_eq!(done, total as i64);
    // The small keys ran out within their first turns, while the big one still had jobs for
    // many walks more: their rows were pruned meanwhile, by no pass.
    let small: i64 = c.query_one("SELECT count(*) FROM jobq.fairness WHERE queue = 'q' AND fairness_key LIKE 'k%'", &[]).unwrap().get(0);
    assert!(small < 200, "the rows of the small keys left without jobs were pruned during the run ({small} of 200 left)");
    assert_eq!(last_pass(&mut c), first, "pruned by no pass: the next is an hour away");
    assert_eq!(copies_astray(&mut c), 0);
    assert_job_tables_consistent(&mut c);
}

/// A key at the back of the turns (its `served` the last the sequence gave) stays there when it
/// is served: its row is not written while it is served alone, and a key that joins behind it
/// is served after one more of its jobs, as if it had moved at each claim.
#[test]
fn a_key_served_alone_keeps_its_row_until_another_joins() {
    // A server of its own: the extension keeps the turn the last claim left server-wide
    // (src/fairness.rs), so other tests' claims would have this key moved meanwhile (which
    // changes no order, only the row this test looks at).
    let cluster = Cluster::start("alone", &["jobq.database = 'postgres'"]);
    let db = cluster.fresh_db();
    let mut c = cluster.connect(&db);
    let w = register(&mut c);
    enqueue(&mut c, "q", Some("solo"), 6);
    assert_eq!(take(&mut c, w, Some(&["q"])).unwrap().1, k("solo"));
    let row = |c: &mut Client, key: &str| -> (String, i64) {
        let r = c.query_one("SELECT ctid::text, served FROM jobq.fairness WHERE queue = 'q' AND fairness_key = $1", &[&key]).unwrap();
        (r.get(0), r.get(1))
    };
    let before = row(&mut c, "solo");
    for _ in 0..2 {
        assert_eq!(take(&mut c, w, Some(&["q"])).unwrap().1, k("solo"));
    }
    assert_eq!(row(&mut c, "solo"), before, "a key alone at the back is not written");
    enqueue(&mut c, "q", Some("late"), 1);
    let order: Vec<Option<String>> = (0..3).map(|_| take(&mut c, w, Some(&["q"])).unwrap().1).collect();
    assert_eq!(order, ["solo", "late", "solo"].map(k), "the key that joined is served after one more job");
    assert!(row(&mut c, "solo").1 > row(&mut c, "late").1, "moved behind the key that joined");
    assert_job_tables_consistent(&mut c);
}

/// Keys whose jobs and rows arrive by a logical replication subscription, whose apply fires row
/// triggers only (fairness_replicated, src/sql/fairness.sql), take turns in a database whose
/// checkouts had found no turns before (noted in shared memory: src/written.rs).
#[test]
fn keys_that_arrive_by_replication_take_turns() {
    let (cluster, mut publisher, mut c) = subscriber();
    let w = register(&mut c);
    enqueue(&mut c, "plain", None, 1);
    assert!(take(&mut c, w, Some(&["plain"])).is_some());
    assert!(take(&mut c, w, None).is_none());
    let ids: Vec<i64> = ["a", "b"].iter().flat_map(|key| enqueue(&mut publisher, "q", Some(key), 3)).collect();
    let last = ids[ids.len() - 1];
    wait_until("the jobs replicated", std::time::Duration::from_secs(60), || {
        c.query_one("SELECT count(*) FROM jobq.ready WHERE id = $1", &[&last]).unwrap().get::<_, i64>(0) == 1
    });
    // The cut-over (docs/operations.md): the turns go on from the publisher's last one.
    c.batch_execute("DROP SUBSCRIPTION jobq_sub").unwrap();
    let last: i64 = publisher.query_one("SELECT last_value FROM jobq.fairness_turns", &[]).unwrap().get(0);
    c.execute("SELECT setval('jobq.fairness_turns', $1)", &[&last]).unwrap();
    assert_eq!(drain(&mut c, w, "q"), ["a", "b", "a", "b", "a", "b"].map(k));
    assert_job_tables_consistent(&mut c);
    cluster.pg_ctl_stop("fast");
}

/// A key with no due job keeps its place at the front of the turns, and the extension's walks
/// remember that it had none (src/fairness.rs) until a job is made ready anywhere or its first
/// job to come is due: a job of it made ready by another session, one of its scheduled jobs
/// coming due, and one made ready by the checkout's own transaction are each served first.
#[test]
fn a_key_with_no_due_job_is_served_at_its_place_once_one_is_due() {
    served_at_its_place_once_due(false);
}

/// The same, with the key behind one whose row another transaction holds all along: the
/// extension's walks then start at the held row and pass the idle key's index entry without
/// reading its row while they remember it had no due job (src/fairness.rs, `Floor::idle`).
#[test]
fn a_key_with_no_due_job_behind_a_held_one_is_served_at_its_place_once_one_is_due() {
    served_at_its_place_once_due(true);
}

fn served_at_its_place_once_due(behind_held: bool) {
    let (cluster, db, mut c) = db();
    let w = register(&mut c);
    let mut holder = cluster.connect(&db);
    let mut hold = behind_held.then(|| {
        enqueue(&mut c, "q", Some("h"), 1);
        let mut t = holder.transaction().unwrap();
        t.execute("SELECT 1 FROM jobq.fairness WHERE queue = 'q' AND fairness_key = 'h' FOR UPDATE", &[]).unwrap();
        t
    });
    enqueue(&mut c, "q", Some("x"), 1);
    for key in ["a", "b", "c"] {
        enqueue(&mut c, "q", Some(key), 10);
    }
    let mut other = cluster.connect(&db);
    // One round: x, its only job taken, then a, b and c; x is first again, with nothing due.
    let round: Vec<Option<String>> = (0..4).map(|_| take(&mut c, w, Some(&["q"])).unwrap().1).collect();
    assert_eq!(round, [k("x"), k("a"), k("b"), k("c")]);
    // Passed while it has nothing due: a is served, then a job of x is made ready elsewhere.
    assert_eq!(take(&mut c, w, Some(&["q"])).unwrap().1, k("a"));
    let made: i64 = other.query_one("SELECT jobq_enqueue('q', fairness_key => 'x')", &[]).unwrap().get(0);
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((made, k("x"))), "a job made ready elsewhere");
    // b, c and a go round; x is first again, with one job due in five seconds (after the next
    // checkout on any machine).
    let round: Vec<Option<String>> = (0..3).map(|_| take(&mut c, w, Some(&["q"])).unwrap().1).collect();
    assert_eq!(round, [k("b"), k("c"), k("a")]);
    let soon: i64 = other
        .query_one("SELECT jobq_enqueue('q', fairness_key => 'x', run_at => now() + interval '5 seconds')", &[])
        .unwrap()
        .get(0);
    assert_eq!(take(&mut c, w, Some(&["q"])).unwrap().1, k("b"), "x has nothing due yet");
    wait_due(&mut other, soon);
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((soon, k("x"))), "a scheduled job come due");
    // c, a and b go round; x is first again. Its job made ready by the checkout's transaction.
    let round: Vec<Option<String>> = (0..3).map(|_| take(&mut c, w, Some(&["q"])).unwrap().1).collect();
    assert_eq!(round, [k("c"), k("a"), k("b")]);
    assert_eq!(take(&mut c, w, Some(&["q"])).unwrap().1, k("c"));
    let mut t = c.transaction().unwrap();
    let own: i64 = t.query_one("SELECT jobq_enqueue('q', fairness_key => 'x')", &[]).unwrap().get(0);
    let got = t.query_one("SELECT id, fairness_key FROM jobq_checkout($1, ARRAY['q'])", &[&w]).unwrap();
    assert_eq!((got.get::<_, i64>(0), got.get::<_, Option<String>>(1)), (own, k("x")), "a job made ready by its own transaction");
    t.commit().unwrap();
    if let Some(t) = hold.take() {
        t.rollback().unwrap();
        assert_eq!(take(&mut c, w, Some(&["q"])).unwrap().1, k("h"), "the held key, let go, at its place");
    }
    assert_job_tables_consistent(&mut c);
}

/// A job at a more urgent priority made ready by another session is taken next, though the
/// checkouts before it found their top priority lower down (the extension's walks remember it
/// until a row is made ready, src/fairness.rs).
#[test]
fn a_job_made_ready_at_a_more_urgent_priority_is_taken_next() {
    let (cluster, db, mut c) = db();
    let w = register(&mut c);
    for key in ["a", "b"] {
        for _ in 0..3 {
            enqueue_at(&mut c, 5, key, None);
        }
    }
    assert_eq!(take(&mut c, w, Some(&["q"])).unwrap().1, k("a"));
    let mut other = cluster.connect(&db);
    let urgent: i64 = other.query_one("SELECT jobq_enqueue('q', priority => 1, fairness_key => 'c')", &[]).unwrap().get(0);
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((urgent, k("c"))));
    assert_eq!(take(&mut c, w, Some(&["q"])).unwrap().1, k("b"));
    assert_job_tables_consistent(&mut c);
}

/// A waiting job replaced by a later enqueue of its unique key (`on_conflict => 'replace'`)
/// at another priority keeps its key's turns there.
#[test]
fn a_job_replaced_at_another_priority_keeps_its_keys_turns() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let replaced: i64 = c
        .query_one("SELECT jobq_enqueue('q', unique_key => 'u', fairness_key => 'a')", &[])
        .unwrap()
        .get(0);
    c.execute("SELECT jobq_enqueue('q', priority => 5, fairness_key => 'b')", &[]).unwrap();
    let again: i64 = c
        .query_one("SELECT jobq_enqueue('q', priority => 5, unique_key => 'u', on_conflict => 'replace', fairness_key => 'a')", &[])
        .unwrap()
        .get(0);
    assert_eq!(again, replaced);
    let taken: BTreeSet<i64> = (0..2).filter_map(|_| take(&mut c, w, Some(&["q"]))).map(|(id, _)| id).collect();
    assert!(taken.contains(&replaced), "{taken:?}");
    assert_job_tables_consistent(&mut c);
}

/// What a checkout's walks remember (src/fairness.rs) may come from its own transaction's
/// claims and moves: a rollback, of the transaction or to a savepoint, gives the jobs back, and
/// the next checkout of the same session takes them.
#[test]
fn jobs_given_back_by_a_rollback_are_taken_by_the_next_checkout() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    let checkout_3 = format!("SELECT * FROM jobq_checkout('{w}', ARRAY['q'], 3)");
    enqueue(&mut c, "q", Some("x"), 1);
    enqueue(&mut c, "q", Some("a"), 1);
    // Three jobs asked for: the third claim finds x and a with nothing due.
    c.batch_execute(&format!("BEGIN; {checkout_3}; ROLLBACK")).unwrap();
    assert!(take(&mut c, w, Some(&["q"])).is_some(), "after a rollback");
    c.batch_execute(&format!("BEGIN; SAVEPOINT s; {checkout_3}; ROLLBACK TO SAVEPOINT s")).unwrap();
    let got = c.query("SELECT id FROM jobq_checkout($1, ARRAY['q'])", &[&w]).unwrap();
    assert_eq!(got.len(), 1, "after a rollback to a savepoint");
    c.batch_execute("COMMIT").unwrap();
    // A job moved to another priority by a replace and taken there, then both rolled back:
    // it waits at its first priority again.
    let job: i64 = c.query_one("SELECT jobq_enqueue('q', unique_key => 'u', fairness_key => 'x')", &[]).unwrap().get(0);
    c.batch_execute(&format!(
        "BEGIN; SELECT jobq_enqueue('q', priority => 5, unique_key => 'u', on_conflict => 'replace', fairness_key => 'x');
         {checkout_3}; ROLLBACK"
    ))
    .unwrap();
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((job, k("x"))), "after a replace rolled back");
    assert_job_tables_consistent(&mut c);
}

/// A key's jobs are taken oldest first (run_at, then id) after the checkouts' looks at the key
/// have moved past the jobs they took (src/fairness.rs, `START`): a job enqueued elsewhere to
/// run before the key's waiting ones is taken next, and so are the jobs a rollback to a
/// savepoint gives back.
#[test]
fn a_keys_oldest_job_is_taken_after_its_looks_moved_past_the_jobs_taken() {
    let (cluster, db, mut c) = db();
    let w = register(&mut c);
    let a = enqueue(&mut c, "q", Some("a"), 3);
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((a[0], k("a"))));
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((a[1], k("a"))));
    let mut other = cluster.connect(&db);
    let early: i64 = other
        .query_one("SELECT jobq_enqueue('q', fairness_key => 'a', run_at => now() - interval '1 hour')", &[])
        .unwrap()
        .get(0);
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((early, k("a"))), "the job enqueued elsewhere to run first");
    let later = enqueue(&mut other, "q", Some("a"), 1)[0];
    c.batch_execute("BEGIN; SAVEPOINT s").unwrap();
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((a[2], k("a"))));
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((later, k("a"))));
    c.batch_execute("ROLLBACK TO SAVEPOINT s").unwrap();
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((a[2], k("a"))), "the oldest job the rollback gave back");
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((later, k("a"))));
    c.batch_execute("COMMIT").unwrap();
    assert_job_tables_consistent(&mut c);
}

/// A more urgent job that comes due (not made ready: scheduled) is taken before the next job
/// of the less urgent priority the checkouts were serving.
#[test]
fn a_more_urgent_job_that_comes_due_is_taken_next() {
    let (_, _, mut c) = db();
    let w = register(&mut c);
    enqueue_at(&mut c, 5, "a", None);
    enqueue_at(&mut c, 5, "a", None);
    let soon = enqueue_at(&mut c, 1, "b", Some("1 second"));
    assert_eq!(take(&mut c, w, Some(&["q"])).unwrap().1, k("a"));
    wait_due(&mut c, soon);
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((soon, k("b"))));
}

fn enqueue_at(c: &mut Client, priority: i32, key: &str, after: Option<&str>) -> i64 {
    c.query_one(
        "SELECT jobq_enqueue('q', priority => $1, fairness_key => $2, run_at => now() + coalesce($3::text, '0 s')::interval)",
        &[&priority, &key, &after],
    )
    .unwrap()
    .get(0)
}

/// The job a key's test for a due job found first, held by another transaction, is passed over:
/// the key's next due job is taken in its turn.
#[test]
fn a_keys_first_job_held_elsewhere_leaves_its_turn_to_the_keys_next_job() {
    let (cluster, db, mut c) = db();
    let w = register(&mut c);
    let a = enqueue(&mut c, "q", Some("a"), 2);
    enqueue(&mut c, "q", Some("b"), 1);
    let mut other = cluster.connect(&db);
    let mut t = other.transaction().unwrap();
    t.execute("SELECT 1 FROM jobq.ready WHERE id = $1 FOR UPDATE", &[&a[0]]).unwrap();
    assert_eq!(take(&mut c, w, Some(&["q"])), Some((a[1], k("a"))));
    t.rollback().unwrap();
}

/// A transaction that adds a key's turn cannot be prepared: its row would become visible at
/// COMMIT PREPARED, in another session, unseen by the count that keeps the extension's floors
/// of the turns safe (src/fairness.rs). Nothing of it stays.
#[test]
fn a_transaction_that_adds_a_turn_cannot_be_prepared() {
    let (_, _, mut c) = db();
    c.batch_execute("BEGIN; SELECT jobq_set_fairness_weight('q', 'k', 2)").unwrap();
    let e = c.batch_execute("PREPARE TRANSACTION 'jobq_fair'").unwrap_err();
    let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    assert!(message.contains("adds fairness keys"), "{e:?}");
    c.batch_execute("ROLLBACK").unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM jobq.fairness WHERE queue = 'q'", &[]).unwrap().get(0);
    assert_eq!(n, 0);
}
