//! jobq_proxy over three real nodes (the contract, Scale-out): routing, privileges, locks and unique
//! keys through the proxy, exactly once under 16 workers, and a killed worker's jobs coming back
//! on every node. A node stopped mid-run is in tests/node_down.rs (it stops a cluster).
mod common;

use common::harness::register;
use common::{sqlstate, wait_until, Fleet, Heartbeat};
use std::collections::HashSet;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

#[test]
fn calls_reach_the_node_of_their_queue_job_or_key() {
    let f = Fleet::new();
    for k in 0..3 {
        f.place(&format!("q{k}"), k);
    }
    let mut p = f.proxy_as("app");
    // The clusters are of the PostgreSQL version under test (scripts/test.sh runs 15, 17 and 18).
    let major = if cfg!(feature = "pg18") { "18" } else if cfg!(feature = "pg17") { "17" } else { "15" };
    for c in [&mut p, &mut f.node(0)] {
        let v: String = c.query_one("SHOW server_version", &[]).unwrap().get(0);
        assert!(v.starts_with(major), "server {v}, expected {major}");
    }
    // A queue's jobs are made on its node, and their ids name it.
    for k in 0..3usize {
        let id: i64 = p.query_one("SELECT jobq_enqueue($1, '{\"n\": 1}')", &[&format!("q{k}")]).unwrap().get(0);
        assert_eq!(id % 1024, k as i64, "job of q{k}");
        let here: i64 = f.node(k).query_one("SELECT count(*) FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
        assert_eq!(here, 1, "job {id} on node {k}");
        let ids: Vec<i64> = p
            .query("SELECT * FROM jobq_enqueue_batch($1, ARRAY['{}', '{}']::jsonb[])", &[&format!("q{k}")])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(ids.iter().all(|i| i % 1024 == k as i64), "{ids:?}");
    }
    // One worker, one id, registered on every node by the calling role.
    let w = register(&mut p);
    for k in 0..3 {
        let owner: String = f
            .node(k)
            .query_one("SELECT owner::regrole::text FROM jobq.workers WHERE id = $1", &[&w])
            .unwrap()
            .get(0);
        assert_eq!(owner, "app", "node {k}");
    }
    // The stats of every node, one row per queue.
    let stats: Vec<(String, i64)> = p
        .query("SELECT queue, ready FROM jobq.queue_stats ORDER BY queue", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(stats, vec![("q0".into(), 3), ("q1".into(), 3), ("q2".into(), 3)]);
    // A checkout of one queue takes from its node; of every queue, from all of them.
    let one: Vec<i64> = p.query("SELECT id FROM jobq_checkout($1, ARRAY['q1'], 10)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(one.len(), 3);
    assert!(one.iter().all(|i| i % 1024 == 1));
    let all: Vec<i64> = p.query("SELECT id FROM jobq_checkout($1, NULL, 10)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(all.len(), 6);
    assert_eq!(all.iter().map(|i| i % 1024).collect::<HashSet<_>>(), HashSet::from([0, 2]));
    // Complete and fail reach the job's node, fenced there.
    for id in &one {
        assert!(p.query_one("SELECT jobq_complete($1, $2)", &[id, &w]).unwrap().get::<_, bool>(0));
        assert!(!p.query_one("SELECT jobq_complete($1, $2)", &[id, &w]).unwrap().get::<_, bool>(0));
    }
    let done: Vec<i64> = p
        .query_one("SELECT jobq_complete_many($1, $2)", &[&w, &all[..3].to_vec()])
        .unwrap()
        .get(0);
    assert_eq!(done, all[..3].to_vec(), "complete_many answers in the caller's order");
    let states: Vec<Option<String>> = p
        .query_one("SELECT jobq_fail_many($1, $2, NULL)", &[&w, &vec![all[3], 999_999, all[4]]])
        .unwrap()
        .get(0);
    assert_eq!(states, vec![Some("ready".into()), None, Some("ready".into())]);
    let hb: Vec<i64> = p.query_one("SELECT jobq_heartbeat($1, $2)", &[&w, &vec![all[5]]]).unwrap().get(0);
    assert!(hb.is_empty());
    // A worker that stops checking out does so on every node: with jobs ready on each, its
    // checkouts of one node, of several and of all, waiting or not, take none (a wait that
    // went on would run into the statement timeout).
    for k in 0..3 {
        p.query_one("SELECT jobq_enqueue($1)", &[&format!("q{k}")]).unwrap();
    }
    p.execute("SELECT jobq_stop_checkouts($1)", &[&w]).unwrap();
    for k in 0..3 {
        let stopping: bool = f.node(k).query_one("SELECT stopping_at IS NOT NULL FROM jobq.workers WHERE id = $1", &[&w]).unwrap().get(0);
        assert!(stopping, "node {k}");
    }
    p.batch_execute("SET statement_timeout = '20s'").unwrap();
    for sql in [
        "SELECT id FROM jobq_checkout($1, ARRAY['q1'], 10)",
        "SELECT id FROM jobq_checkout($1, NULL, 10)",
        "SELECT id FROM jobq_checkout($1, ARRAY['q1'], 10, '1 hour')",
        "SELECT id FROM jobq_checkout($1, ARRAY['q0', 'q2'], 10, '1 hour')",
    ] {
        assert!(p.query(sql, &[&w]).unwrap().is_empty(), "{sql}");
    }
    p.batch_execute("RESET statement_timeout").unwrap();
    // A worker's calls reach every node: unregister gives back what it held anywhere.
    let back: i32 = p.query_one("SELECT jobq_unregister_worker($1)", &[&w]).unwrap().get(0);
    assert_eq!(back, 1, "the one job still executing (the others were finished or failed)");
    for k in 0..3 {
        let n: i64 = f.node(k).query_one("SELECT count(*) FROM jobq.workers", &[]).unwrap().get(0);
        assert_eq!(n, 0, "node {k}");
    }
    // bind_to_session cannot hold through the proxy.
    let e = p.query_one("SELECT jobq_register_worker('b', '{}', true)", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "0A000");
    // A node's own refusals come through with their SQLSTATE.
    assert_eq!(sqlstate(&p.query_one("SELECT jobq_enqueue('')", &[]).unwrap_err()), "22023");
    assert_eq!(sqlstate(&p.query_one("SELECT jobq_enqueue(NULL)", &[]).unwrap_err()), "22004");
    assert_eq!(sqlstate(&p.query("SELECT * FROM jobq_checkout($1, NULL, 0)", &[&w]).unwrap_err()), "22023");
    assert_eq!(sqlstate(&p.query("SELECT * FROM jobq_checkout($1)", &[&w]).unwrap_err()), "JQ001");
    // pg_dump of the proxy database keeps the placements (configuration, not an empty table).
    let dump = f.c.proxy.scratch_file("proxy.sql");
    f.c.proxy.run_tool("pg_dump", &["-d", &f.proxy_db, "-f", dump.to_str().unwrap()]);
    let text = std::fs::read_to_string(&dump).unwrap();
    let copy = text.split("COPY jobq.placements").nth(1).expect("the placements are dumped");
    assert!(copy.contains("q0\t0") && copy.contains("q2\t2"), "{copy}");
    // jobq_reap runs on every node and sums.
    let mut admin = f.proxy_as("admin");
    let pruned: i32 = admin.query_one("SELECT workers_reaped FROM jobq_reap()", &[]).unwrap().get(0);
    assert_eq!(pruned, 0);
}

#[test]
fn locks_and_unique_keys_hold_through_the_proxy() {
    let f = Fleet::new();
    let mut p = f.proxy_as("app");
    let a = register(&mut p);
    let b = register(&mut p);
    for key in ["alpha", "beta", "gamma", "delta"] {
        assert!(p.query_one("SELECT jobq_acquire_lock($1, $2)", &[&key, &a]).unwrap().get::<_, bool>(0));
        assert!(!p.query_one("SELECT jobq_acquire_lock($1, $2)", &[&key, &b]).unwrap().get::<_, bool>(0));
        assert_eq!(p.query_one("SELECT jobq_lock_holder($1)", &[&key]).unwrap().get::<_, Option<Uuid>>(0), Some(a));
        // Held on exactly one node: the key's.
        let held: i64 = (0..3)
            .map(|k| f.node(k).query_one("SELECT count(*) FROM jobq.locks WHERE key = $1", &[&key]).unwrap().get::<_, i64>(0))
            .sum();
        assert_eq!(held, 1, "{key}");
        assert!(!p.query_one("SELECT jobq_release_lock($1, $2)", &[&key, &b]).unwrap().get::<_, bool>(0));
        assert!(p.query_one("SELECT jobq_release_lock($1, $2)", &[&key, &a]).unwrap().get::<_, bool>(0));
        assert!(p.query_one("SELECT jobq_acquire_lock($1, $2)", &[&key, &b]).unwrap().get::<_, bool>(0));
    }
    // A unique key of one queue: one job at a time, as on a node. (Keys are a node's: queues on
    // one node share them, so each queue here has its own.)
    for queue in ["mail", "sms", "push"] {
        let first: i64 = p.query_one("SELECT jobq_enqueue($1, unique_key => 'u-' || $1)", &[&queue]).unwrap().get(0);
        let e = p.query_one("SELECT jobq_enqueue($1, unique_key => 'u-' || $1)", &[&queue]).unwrap_err();
        assert_eq!(sqlstate(&e), "23505", "{queue}");
        let discarded: Option<i64> =
            p.query_one("SELECT jobq_enqueue($1, unique_key => 'u-' || $1, on_conflict => 'discard')", &[&queue]).unwrap().get(0);
        assert_eq!(discarded, None);
        assert_eq!(p.query_one("SELECT jobq_cancel($1)", &[&first]).unwrap().get::<_, Option<String>>(0).as_deref(), Some("cancelled"));
        p.query_one("SELECT jobq_enqueue($1, unique_key => 'u-' || $1)", &[&queue]).unwrap();
    }
}

#[test]
fn roles_are_refused_through_the_proxy_as_on_a_node() {
    let f = Fleet::new();
    let mut nobody = f.proxy_as("nobody");
    for call in [
        "SELECT jobq_enqueue('q')",
        "SELECT * FROM jobq_enqueue_batch('q', ARRAY['{}']::jsonb[])",
        "SELECT jobq_register_worker()",
        "SELECT jobq_heartbeat(gen_random_uuid())",
        "SELECT jobq_unregister_worker(gen_random_uuid())",
        "SELECT jobq_stop_checkouts(gen_random_uuid())",
        "SELECT * FROM jobq_checkout(gen_random_uuid())",
        "SELECT jobq_complete(1024, gen_random_uuid())",
        "SELECT jobq_fail(1024, gen_random_uuid())",
        "SELECT jobq_complete_many(gen_random_uuid(), ARRAY[1024::bigint])",
        "SELECT jobq_fail_many(gen_random_uuid(), ARRAY[1024::bigint])",
        "SELECT * FROM jobq_complete_and_checkout(gen_random_uuid(), ARRAY[1024::bigint])",
        "SELECT * FROM jobq_fail_and_checkout(gen_random_uuid(), ARRAY[1024::bigint])",
        "SELECT jobq_cancel(1024)",
        "SELECT jobq_retry(1024)",
        "SELECT jobq_acquire_lock('k', gen_random_uuid())",
        "SELECT jobq_release_lock('k', gen_random_uuid())",
        "SELECT jobq_lock_holder('k')",
        "SELECT jobq_pause('q')",
        "SELECT jobq_resume('q')",
        "SELECT * FROM jobq_reap()",
        "SELECT jobq_schedule('s', '@daily', 'q')",
        "SELECT jobq_unschedule('s')",
        "SELECT jobq_set_rate_limit('r', 1, '1 minute')",
        "SELECT jobq_set_node(0)",
        "SELECT jobq_grant_queues('app', 'worker', '{q}')",
        "SELECT jobq_revoke_queues('app', 'worker', '{q}')",
        "SELECT jobq_set_fairness_weight('q', 'k', 2)",
        "SELECT * FROM jobq.queue_stats",
        "SELECT * FROM jobq.placements",
    ] {
        let e = nobody.query(call, &[]).unwrap_err();
        assert_eq!(sqlstate(&e), "42501", "{call}");
    }
    // A worker role is refused what only jobq_admin may.
    let mut app = f.proxy_as("app");
    for call in [
        "SELECT * FROM jobq_reap()",
        "SELECT jobq_pause('q')",
        "SELECT jobq_schedule('s', '@daily', 'q')",
        "SELECT jobq_set_rate_limit('r', 1, '1 minute')",
        "SELECT jobq_grant_queues('app', 'worker', '{q}')",
        "SELECT jobq_set_fairness_weight('q', 'k', 2)",
        "INSERT INTO jobq.placements VALUES ('q', 1)",
    ] {
        let e = app.query(call, &[]).unwrap_err();
        assert_eq!(sqlstate(&e), "42501", "{call}");
    }
    // A worker belongs to the role that registered it, on every node: another role's calls
    // naming it are refused by the node, and the refusal comes through.
    let w = register(&mut app);
    let mut other = f.proxy_as("app2");
    for call in ["SELECT jobq_heartbeat($1)", "SELECT * FROM jobq_checkout($1)", "SELECT jobq_acquire_lock('x', $1)"] {
        let e = other.query(call, &[&w]).unwrap_err();
        assert_eq!(sqlstate(&e), "42501", "{call}");
    }
    // The admin may act for it, through the proxy as on a node.
    let mut admin = f.proxy_as("admin");
    admin.query_one("SELECT jobq_heartbeat($1)", &[&w]).unwrap();
}

/// 16 workers through the proxy, each with its own connection, over queues on all three
/// nodes (checkouts of every queue, of one queue, and the one-commit protocol): every job is
/// completed exactly once, none is lost.
#[test]
fn sixteen_workers_through_the_proxy_run_every_job_exactly_once() {
    let f = Fleet::new();
    let queues: Vec<String> = (0..6).map(|i| format!("h{i}")).collect();
    let mut producer = f.proxy_as("app");
    let mut expected = HashSet::new();
    for (i, q) in queues.iter().enumerate() {
        let ids: Vec<i64> = producer
            .query("SELECT * FROM jobq_enqueue_batch($1, array_fill('{}'::jsonb, ARRAY[400]))", &[q])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(ids.len(), 400, "queue {i}");
        expected.extend(ids);
    }
    let nodes_used: HashSet<i64> = expected.iter().map(|i| i % 1024).collect();
    assert_eq!(nodes_used.len(), 3, "the queues cover every node");
    let done = Arc::new(Mutex::new(Vec::<i64>::new()));
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let done = done.clone();
            let queues = queues.clone();
            let (c, db) = (f.c, f.proxy_db.clone());
            std::thread::spawn(move || {
                let mut c = c.proxy.connect_as(&db, "app");
                let w = register(&mut c);
                let mut beat = Heartbeat::new(w);
                let mut mine = Vec::new();
                let mut in_hand: Vec<i64> = Vec::new();
                let mut idle = 0;
                while idle < 3 {
                    beat.due(&mut c);
                    let rows = match t % 3 {
                        0 => c.query("SELECT id FROM jobq_checkout($1, NULL, 3)", &[&w]).unwrap(),
                        1 => c.query("SELECT id FROM jobq_checkout($1, ARRAY[$2], 2)", &[&w, &queues[t % queues.len()]]).unwrap(),
                        _ => c.query("SELECT id FROM jobq_complete_and_checkout($1, $2, NULL, NULL, 2)", &[&w, &in_hand]).unwrap(),
                    };
                    if t % 3 == 2 {
                        mine.append(&mut in_hand);
                    }
                    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
                    if ids.is_empty() {
                        idle += 1;
                        // Another queue's worker may still hold jobs it has not finished.
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                    idle = 0;
                    if t % 3 == 2 {
                        in_hand = ids;
                    } else {
                        for id in ids {
                            let ok: bool = c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get(0);
                            assert!(ok, "job {id} was ours to complete");
                            mine.push(id);
                        }
                    }
                }
                if !in_hand.is_empty() {
                    let ok: Vec<i64> = c.query_one("SELECT jobq_complete_many($1, $2)", &[&w, &in_hand]).unwrap().get(0);
                    assert_eq!(ok, in_hand);
                    mine.append(&mut in_hand);
                }
                done.lock().unwrap().extend(mine);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Workers of one queue stop when it is empty: the rest is finished by the all-queue ones,
    // until nothing is left anywhere.
    let mut sweeper = f.proxy_as("app");
    let w = register(&mut sweeper);
    loop {
        let ids: Vec<i64> = sweeper.query("SELECT id FROM jobq_checkout($1, NULL, 100)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
        if ids.is_empty() {
            break;
        }
        let ok: Vec<i64> = sweeper.query_one("SELECT jobq_complete_many($1, $2)", &[&w, &ids]).unwrap().get(0);
        assert_eq!(ok, ids);
        done.lock().unwrap().extend(ids);
    }
    let done = done.lock().unwrap();
    let unique: HashSet<i64> = done.iter().copied().collect();
    assert_eq!(unique.len(), done.len(), "no job completed twice");
    assert_eq!(unique, expected, "every job completed");
    for k in 0..3 {
        let mut n = f.node(k);
        let (completed, other, attempts): (i64, i64, i64) = {
            let r = n
                .query_one(
                    "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state <> 'completed'),
                            count(*) FILTER (WHERE attempt <> 1) FROM jobq.jobs",
                    &[],
                )
                .unwrap();
            (r.get(0), r.get(1), r.get(2))
        };
        assert!(completed > 0, "node {k} ran jobs");
        assert_eq!((other, attempts), (0, 0), "node {k}: every job completed at its first attempt");
        common::harness::assert_job_tables_consistent(&mut n);
    }
}

/// A worker process killed with SIGKILL while it holds jobs on every node: each node's reaper
/// gives its jobs back (the worker's copy there runs out of heartbeat), and they run again.
#[test]
fn a_killed_workers_jobs_come_back_on_every_node() {
    let f = Fleet::new();
    let mut p = f.proxy_as("app");
    for k in 0..3 {
        f.place(&format!("k{k}"), k);
        p.query_one("SELECT jobq_enqueue($1)", &[&format!("k{k}")]).unwrap();
    }
    // The worker: psql through the proxy, registering, taking every job, then hanging.
    let mut child = Command::new(format!("{}/psql", common::harness::PG_BIN))
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
        .arg(f.c.proxy.url_as(&f.proxy_db, "app"))
        .args(["-c", "SELECT count(*) FROM jobq_checkout(jobq_register_worker('doomed'), NULL, 10)"])
        .args(["-c", "SELECT pg_sleep(600)"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let executing = |f: &Fleet| -> i64 {
        (0..3).map(|k| f.node(k).query_one("SELECT count(*) FROM jobq.jobs WHERE state = 'executing'", &[]).unwrap().get::<_, i64>(0)).sum()
    };
    wait_until("the worker holds a job on every node", Duration::from_secs(30), || executing(&f) == 3);
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    for k in 0..3 {
        let mut n = f.node(k);
        wait_until(&format!("node {k} gives the job back"), Duration::from_secs(30), || {
            n.query_one("SELECT count(*) FROM jobq.jobs WHERE state = 'ready' AND interrupted_at IS NOT NULL AND attempt = 1", &[])
                .unwrap()
                .get::<_, i64>(0)
                == 1
        });
    }
    // And they run again, through the proxy, by another worker.
    let w = register(&mut p);
    let ids: Vec<i64> = p.query("SELECT id FROM jobq_checkout($1, NULL, 10)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(ids.len(), 3);
    for id in ids {
        assert!(p.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
    }
}

/// A checkout of every queue takes from every node that has work, from a random one first: over
/// many one-job checkouts each node gives about a third, none is starved.
#[test]
fn a_checkout_of_every_queue_starves_no_node() {
    let f = Fleet::new();
    let mut p = f.proxy_as("app");
    for k in 0..3 {
        f.place(&format!("f{k}"), k);
        p.query("SELECT * FROM jobq_enqueue_batch($1, array_fill('{}'::jsonb, ARRAY[300]))", &[&format!("f{k}")]).unwrap();
    }
    let w = register(&mut p);
    let mut beat = Heartbeat::new(w);
    let mut per_node = [0usize; 3];
    for _ in 0..300 {
        beat.due(&mut p);
        let id: i64 = p.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().get(0);
        per_node[(id % 1024) as usize] += 1;
        assert!(p.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
    }
    // Each node is first for a third of the calls (binomial: 100 expected, below 50 has a
    // probability under 1e-9).
    assert!(per_node.iter().all(|&n| n >= 50), "jobs taken per node: {per_node:?}");
    // max_jobs is a total over the nodes, and a call that needs more than one node gets it.
    let ids: Vec<i64> = p.query("SELECT id FROM jobq_checkout($1, NULL, 700)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(ids.len(), 600, "every job left, from all three nodes");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 600);
    let none: Vec<i64> = p.query("SELECT id FROM jobq_checkout($1, NULL, 5)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(none.is_empty());
}

/// A waiting checkout through the proxy: of one queue it is the node's own wait; of queues on
/// several nodes it sees a job enqueued on any of them while it waits, and it returns empty
/// when `wait` runs out.
#[test]
fn a_waiting_checkout_sees_a_job_made_on_any_node() {
    let f = Fleet::new();
    for k in 0..3 {
        f.place(&format!("w{k}"), k);
    }
    let mut p = f.proxy_as("app");
    let w = register(&mut p);
    let start = std::time::Instant::now();
    let none = p.query("SELECT id FROM jobq_checkout($1, ARRAY['w0', 'w1', 'w2'], 1, '300 ms')", &[&w]).unwrap();
    assert!(none.is_empty());
    assert!(start.elapsed() >= Duration::from_millis(300), "waited the whole time: {:?}", start.elapsed());
    for queues in [vec!["w2"], vec!["w0", "w1", "w2"]] {
        for target in ["w0", "w1", "w2"] {
            if !queues.contains(&target) {
                continue;
            }
            // The nodes take a worker silent for 3 s for dead: each round starts with a
            // heartbeat (through the proxy: to every node), as a real worker's loop would.
            p.query_one("SELECT jobq_heartbeat($1)", &[&w]).unwrap();
            let (c, db, t) = (f.c, f.proxy_db.clone(), target.to_string());
            let waiter = {
                let queues: Vec<String> = queues.iter().map(|s| s.to_string()).collect();
                std::thread::spawn(move || {
                    let mut c = c.proxy.connect_as(&db, "app");
                    let rows = c.query("SELECT id FROM jobq_checkout($1, $2, 1, '20 s')", &[&w, &queues]).unwrap();
                    rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>()
                })
            };
            // Enqueue once the call is waiting (it shows in pg_stat_activity on the proxy).
            let mut admin = f.c.proxy.connect(&f.proxy_db);
            wait_until("the checkout is waiting", Duration::from_secs(10), || {
                admin
                    .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE '%jobq_checkout($1, $2, 1, ''20 s'')%' AND state = 'active'", &[])
                    .unwrap()
                    .get::<_, i64>(0)
                    == 1
            });
            let id: i64 = p.query_one("SELECT jobq_enqueue($1)", &[&t]).unwrap().get(0);
            let got = waiter.join().unwrap();
            assert_eq!(got, vec![id], "waiting on {queues:?}, job made in {t}");
            assert!(p.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get::<_, bool>(0));
        }
    }
}

/// What a call over several nodes must not do: claim a job on one node and lose it because
/// another node failed; leave half a batch done when a node would refuse the whole; drop a
/// schedule for a refused replacement; leave a worker registered where it is still known.
#[test]
fn calls_over_several_nodes_lose_nothing_when_one_node_refuses() {
    let f = Fleet::new();
    for k in 0..3 {
        f.place(&format!("s{k}"), k);
    }
    let mut p = f.proxy_as("app");
    let w = register(&mut p);
    // The worker is unknown on node 1 (as if reaped there while it was out of reach).
    f.node(1).execute("DELETE FROM jobq.workers WHERE id = $1", &[&w]).unwrap();
    let mut returned = 0i64;
    for _ in 0..20 {
        for k in [0, 2] {
            p.query_one("SELECT jobq_enqueue($1)", &[&format!("s{k}")]).unwrap();
        }
        // Node 1 raises JQ001: either before anything was claimed (the error comes through), or
        // after other nodes gave jobs (they are returned, with a WARNING).
        match p.query("SELECT id FROM jobq_checkout($1, NULL, 10)", &[&w]) {
            Ok(rows) => {
                assert!(!rows.is_empty());
                returned += rows.len() as i64;
            }
            Err(e) => assert_eq!(sqlstate(&e), "JQ001"),
        }
        let held: i64 = [0, 2]
            .iter()
            .map(|&k| {
                f.node(k)
                    .query_one("SELECT count(*) FROM jobq.jobs WHERE state = 'executing' AND worker_id = $1", &[&w])
                    .unwrap()
                    .get::<_, i64>(0)
            })
            .sum();
        assert_eq!(held, returned, "every job claimed was returned");
    }
    assert!(returned > 0, "some calls reached node 1 last");

    // Unregistering gives back what the worker holds on nodes 0 and 2, although node 1 does not
    // know it.
    let back: i32 = p.query_one("SELECT jobq_unregister_worker($1)", &[&w]).unwrap().get(0);
    assert_eq!(back as i64, returned);
    for k in 0..3 {
        let n: i64 = f.node(k).query_one("SELECT count(*) FROM jobq.workers WHERE id = $1", &[&w]).unwrap().get(0);
        assert_eq!(n, 0, "node {k}");
    }
    // Unknown everywhere: JQ001.
    assert_eq!(sqlstate(&p.query_one("SELECT jobq_unregister_worker($1)", &[&w]).unwrap_err()), "JQ001");

    // A batch a node would refuse (an id repeated) is refused whole: nothing completed anywhere.
    let w = register(&mut p);
    let held: Vec<i64> = p.query("SELECT id FROM jobq_checkout($1, NULL, 100)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    let on0 = *held.iter().find(|i| *i % 1024 == 0).unwrap();
    let on2 = *held.iter().find(|i| *i % 1024 == 2).unwrap();
    let e = p.query_one("SELECT jobq_complete_many($1, $2)", &[&w, &vec![on2, on0, on0]]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    let e = p.query("SELECT * FROM jobq_complete_and_checkout($1, $2, NULL, NULL, 0)", &[&w, &vec![on0, on2]]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    let executing = |f: &Fleet| -> i64 {
        (0..3).map(|k| f.node(k).query_one("SELECT count(*) FROM jobq.jobs WHERE state = 'executing'", &[]).unwrap().get::<_, i64>(0)).sum()
    };
    assert_eq!(executing(&f), held.len() as i64, "nothing was completed");
    // A job no longer held: JQ002, and nothing checked out.
    assert!(p.query_one("SELECT jobq_complete($1, $2)", &[&on0, &w]).unwrap().get::<_, bool>(0));
    p.query_one("SELECT jobq_enqueue('s1')", &[]).unwrap();
    let e = p.query("SELECT * FROM jobq_complete_and_checkout($1, $2, NULL, NULL, 5)", &[&w, &vec![on0, on2]]).unwrap_err();
    assert_eq!(sqlstate(&e), "JQ002");
    let waiting: i64 = f.node(1).query_one("SELECT count(*) FROM jobq.jobs WHERE state = 'ready'", &[]).unwrap().get(0);
    assert_eq!(waiting, 1, "nothing was checked out");
    // (on2 was completed on the way: what other nodes finished stays finished.) The same call
    // failing another held job, over several nodes: the job goes back to wait for its retry on
    // its node, and the checkout takes the one job due.
    let on2 = *held.iter().filter(|i| *i % 1024 == 2).nth(1).unwrap();
    let s1: i64 = f.node(1).query_one("SELECT id FROM jobq.jobs WHERE state = 'ready'", &[]).unwrap().get(0);
    let got: Vec<i64> = p
        .query("SELECT id FROM jobq_fail_and_checkout($1, $2, NULL, NULL, 5)", &[&w, &vec![on2]])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(got, vec![s1]);
    let state: String = f.node(2).query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&on2]).unwrap().get(0);
    assert_eq!(state, "ready");

    // A replacement of a schedule that its new node refuses leaves the old one in place.
    let mut admin = f.proxy_as("admin");
    admin.query_one("SELECT jobq_schedule('nightly', '0 3 * * *', 's0')", &[]).unwrap();
    let e = admin.query_one("SELECT jobq_schedule('nightly', 'not a cron', 's2')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    let kept: i64 = f.node(0).query_one("SELECT count(*) FROM jobq.schedules WHERE name = 'nightly'", &[]).unwrap().get(0);
    assert_eq!(kept, 1);
    admin.query_one("SELECT jobq_schedule('nightly', '0 4 * * *', 's2')", &[]).unwrap();
    let places: Vec<i64> = (0..3)
        .map(|k| f.node(k).query_one("SELECT count(*) FROM jobq.schedules WHERE name = 'nightly'", &[]).unwrap().get::<_, i64>(0))
        .collect();
    assert_eq!(places, vec![0, 0, 1], "moved to its new queue's node");

    // A queue re-pinned to another node while it drains is still one row of jobq.queue_stats.
    p.query_one("SELECT jobq_enqueue('moving')", &[]).unwrap();
    admin.execute("INSERT INTO jobq.placements VALUES ('moving', (jobq.queue_node('moving') + 1) % 3)", &[]).unwrap();
    p.query_one("SELECT jobq_enqueue('moving')", &[]).unwrap();
    let rows = p.query("SELECT ready FROM jobq.queue_stats WHERE queue = 'moving'", &[]).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i64>(0), 2);
}

/// Workflows through the proxy (the contract, Workflows and Scale-out): a dependency and an await among
/// one node's jobs work as on the node; naming a job of another node is refused with 0A000 and
/// changes nothing; a job's calls reach its node; an event is emitted on every node (the sum of
/// what each woke); jobq_results answers for jobs of every node, in the caller's order.
#[test]
fn workflows_run_on_the_node_of_their_jobs() {
    let f = Fleet::new();
    f.place("wf0", 0);
    f.place("wf1", 1);
    let mut p = f.proxy_as("app");
    let w = register(&mut p);
    let parent: i64 = p.query_one("SELECT jobq_enqueue('wf0', '{}')", &[]).unwrap().get(0);
    let far: i64 = p.query_one("SELECT jobq_enqueue('wf1', '{}')", &[]).unwrap().get(0);
    assert_eq!((parent % 1024, far % 1024), (0, 1));
    let child: i64 = p.query_one("SELECT jobq_enqueue('wf0', '{}', depends_on => ARRAY[$1::bigint])", &[&parent]).unwrap().get(0);
    let e = p.query("SELECT jobq_enqueue('wf0', '{}', depends_on => ARRAY[$1::bigint, $2::bigint])", &[&parent, &far]).unwrap_err();
    assert_eq!(sqlstate(&e), "0A000");
    let on_node0: i64 = f.node(0).query_one("SELECT count(*) FROM jobq.jobs", &[]).unwrap().get(0);
    assert_eq!(on_node0, 2, "the refused enqueue wrote nothing");
    let state = |k: usize, id: i64| -> String { f.node(k).query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&id]).unwrap().get(0) };
    assert_eq!(state(0, child), "blocked");

    // The parent runs: a checkpoint, an await of a job of its node, and of another node's (0A000).
    let got: Vec<i64> = p.query("SELECT id FROM jobq_checkout($1, ARRAY['wf0'])", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(got, vec![parent]);
    assert!(p.query_one("SELECT jobq_checkpoint($1, $2, 'step', '1')", &[&parent, &w]).unwrap().get::<_, bool>(0));
    let e = p.query("SELECT jobq_await_jobs($1, $2, ARRAY[$3::bigint])", &[&parent, &w, &far]).unwrap_err();
    assert_eq!(sqlstate(&e), "0A000");
    assert_eq!(state(0, parent), "executing");
    // Awaiting an event: the emit through the proxy reaches node 0.
    let r: String = p.query_one("SELECT jobq_await_event($1, $2, 'px-event')", &[&parent, &w]).unwrap().get(0);
    assert_eq!(r, "waiting");
    let woken: i32 = p.query_one("SELECT jobq_emit_event('px-event', '{\"ok\": true}')", &[]).unwrap().get(0);
    assert_eq!(woken, 1);
    assert_eq!(p.query_one("SELECT jobq_emit_event('px-event')", &[]).unwrap().get::<_, i32>(0), 0, "emitted once");
    let row = p.query_one("SELECT id, attempt, checkpoints FROM jobq_checkout($1, ARRAY['wf0'])", &[&w]).unwrap();
    assert_eq!(row.get::<_, i64>(0), parent);
    assert_eq!(row.get::<_, i32>(1), 1, "the suspended attempt did not count");
    let cp: serde_json::Value = row.get(2);
    assert_eq!(cp["step"], serde_json::json!(1));
    assert_eq!(cp["event:px-event"]["payload"], serde_json::json!({"ok": true}));
    assert!(p.query_one("SELECT jobq_complete($1, $2, '\"done\"')", &[&parent, &w]).unwrap().get::<_, bool>(0));
    assert_eq!(state(0, child), "ready");
    // Snooze, on the job's node.
    let got: Vec<i64> = p.query("SELECT id FROM jobq_checkout($1, ARRAY['wf0'])", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(got, vec![child]);
    assert!(p.query_one("SELECT jobq_snooze($1, $2, now() + interval '1 hour')", &[&child, &w]).unwrap().get::<_, bool>(0));
    assert_eq!(state(0, child), "ready");
    // Results of jobs of two nodes, in the order asked.
    let rows: Vec<(i64, String)> = p
        .query("SELECT id, state FROM jobq_results($1)", &[&vec![far, parent, child]])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(rows, vec![(far, "ready".to_string()), (parent, "completed".to_string()), (child, "ready".to_string())]);
    // A graph in one call: on its queues' node; queues of two nodes are refused.
    let graph = serde_json::json!([{"queue": "wf0"}, {"queue": "wf0", "after": [0]}]);
    let ids: Vec<i64> = p.query("SELECT * FROM jobq_enqueue_graph($1)", &[&graph]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(ids.iter().map(|i| i % 1024).collect::<Vec<_>>(), vec![0, 0]);
    assert_eq!(state(0, ids[1]), "blocked");
    let split = serde_json::json!([{"queue": "wf0"}, {"queue": "wf1", "after": [0]}]);
    assert_eq!(sqlstate(&p.query("SELECT * FROM jobq_enqueue_graph($1)", &[&split]).unwrap_err()), "0A000");
    // A reader may gather results; a producer may emit; neither may checkpoint.
    let mut nobody = f.proxy_as("nobody");
    assert_eq!(sqlstate(&nobody.query("SELECT * FROM jobq_results(ARRAY[1::bigint])", &[]).unwrap_err()), "42501");
    assert_eq!(sqlstate(&nobody.query("SELECT jobq_emit_event('x')", &[]).unwrap_err()), "42501");
}

/// Queues granted per role through the proxy (the contract, "Tenants"): a grant or revoke made
/// on the proxy holds on every node, a limited role is refused there through the proxy as on
/// a node, nothing of the refused calls is done, and only jobq_admin may grant.
#[test]
fn queue_grants_hold_on_every_node_through_the_proxy() {
    let f = Fleet::new();
    for (k, q) in ["t:a", "t:b", "other"].iter().enumerate() {
        f.place(q, k);
    }
    let mut admin = f.proxy_as("admin");
    let mut app = f.proxy_as("app");
    let e = app.query("SELECT jobq_grant_queues('app2', 'worker', '{t:*}')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501", "a worker role may not grant");
    let e = admin.query("SELECT jobq_grant_queues('app', 'owner', '{t:*}')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "22023", "a node's check comes through");
    admin.execute("SELECT jobq_grant_queues('app', 'worker', '{t:*}')", &[]).unwrap();
    for k in 0..3 {
        let grants: Vec<String> = f.node(k).query("SELECT role::text || ' ' || privilege || ' ' || pattern FROM jobq.queue_grants", &[]).unwrap().iter().map(|r| r.get(0)).collect();
        assert_eq!(grants, vec!["app worker t:*".to_string()], "node {k}");
    }
    let other: i64 = admin.query_one("SELECT jobq_enqueue('other')", &[]).unwrap().get(0);
    let mine: Vec<i64> = ["t:a", "t:b"].iter().map(|q| app.query_one("SELECT jobq_enqueue($1)", &[q]).unwrap().get(0)).collect();
    let e = app.query("SELECT jobq_enqueue('other')", &[]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501", "enqueue into a queue not granted");
    let e = app.query("SELECT jobq_cancel($1)", &[&other]).unwrap_err();
    assert_eq!(sqlstate(&e), "42501", "cancel of a job of a queue not granted");
    let w = register(&mut app);
    // A checkout of every queue, through the proxy over the three nodes: the role's jobs only.
    let mut got: Vec<i64> = app.query("SELECT id FROM jobq_checkout($1, NULL, 10)", &[&w]).unwrap().iter().map(|r| r.get(0)).collect();
    got.sort();
    assert_eq!(got, mine);
    let state: String = admin.query_one("SELECT state FROM jobq_results(ARRAY[$1::bigint])", &[&other]).unwrap().get(0);
    assert_eq!(state, "ready", "the refused calls did nothing");
    // Revoked through the proxy: unlimited again on every node.
    admin.execute("SELECT jobq_revoke_queues('app', 'worker', '{t:*}')", &[]).unwrap();
    for k in 0..3 {
        let n: i64 = f.node(k).query_one("SELECT count(*) FROM jobq.queue_grants", &[]).unwrap().get(0);
        assert_eq!(n, 0, "node {k}");
    }
    app.query_one("SELECT jobq_enqueue('other')", &[]).unwrap();
}

/// Fair checkout through the proxy (the contract, "Tenants"): the fairness key travels with the
/// job to its queue's node, the weight is set there, and a checkout through the proxy serves the
/// keys in turns and returns each job's key.
#[test]
fn fair_checkout_holds_through_the_proxy() {
    let f = Fleet::new();
    f.place("fair", 2);
    let mut admin = f.proxy_as("admin");
    let mut app = f.proxy_as("app");
    admin.execute("SELECT jobq_set_fairness_weight('fair', 'big', 2)", &[]).unwrap();
    let weight: i32 = f.node(2).query_one("SELECT weight FROM jobq.fairness WHERE fairness_key = 'big'", &[]).unwrap().get(0);
    assert_eq!(weight, 2, "set on the queue's node");
    app.execute("SELECT count(*) FROM jobq_enqueue_batch('fair', array_fill('{}'::jsonb, ARRAY[6]), fairness_key => 'big')", &[]).unwrap();
    app.execute("SELECT jobq_enqueue('fair', fairness_key => 'small')", &[]).unwrap();
    app.execute("SELECT jobq_enqueue('fair', fairness_key => 'small')", &[]).unwrap();
    let w = register(&mut app);
    let mut keys = Vec::new();
    while let Some(r) = app.query("SELECT fairness_key FROM jobq_checkout($1, ARRAY['fair'])", &[&w]).unwrap().first() {
        keys.push(r.get::<_, String>(0));
    }
    assert_eq!(keys, ["big", "big", "small", "big", "big", "small", "big", "big"]);
}
