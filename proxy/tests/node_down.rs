//! A node stopped mid-run (the contract, Scale-out: "a node that is down fails the calls routed to it,
//! naming it, and nothing else; its jobs wait for it, none lost"). Its own test binary: it stops
//! one of the clusters.
mod common;

use common::{sqlstate, wait_until, Fleet};
use postgres::Client;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

const PER_QUEUE: usize = 600;

/// common::register, tried again while it fails: a registration goes to every node, and fails
/// while one is down.
fn register(c: &mut Client) -> Uuid {
    loop {
        match c.query_one("SELECT jobq_register_worker()", &[]) {
            Ok(r) => return r.get(0),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// How many of the jobs in `done` are of node `k` (an id's node is its remainder modulo 1024).
fn completed_on(done: &Mutex<Vec<i64>>, k: i64) -> usize {
    done.lock().unwrap().iter().filter(|i| *i % 1024 == k).count()
}

#[test]
fn a_stopped_node_fails_its_calls_and_nothing_else_and_loses_nothing() {
    let f = Fleet::new();
    let mut expected = HashSet::new();
    let mut p = f.proxy_as("app");
    for k in 0..3 {
        let q = format!("q{k}");
        f.place(&q, k);
        let ids: Vec<i64> = p
            .query("SELECT * FROM jobq_enqueue_batch($1, array_fill('{}'::jsonb, ARRAY[$2::integer]))", &[&q, &(PER_QUEUE as i32)])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        expected.extend(ids);
    }
    let done = Arc::new(Mutex::new(Vec::<i64>::new()));
    // Jobs whose completion failed (its node went down) and, tried again, answered false: the
    // first try may have committed with its reply lost in the stop, or the job was given back
    // meanwhile. Which one, the job's row tells (`settled`).
    let unsure = Arc::new(Mutex::new(Vec::<i64>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    // Set once node 2 is stopped. Until then its workers pause at five sixths of its jobs, so
    // that it still has jobs when it goes down however long the stop takes (it is asked for at
    // a sixth, with the workers busy).
    let node2_stopped = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..9)
        .map(|t| {
            let (done, unsure, stop, node2_stopped) = (done.clone(), unsure.clone(), stop.clone(), node2_stopped.clone());
            let (c, db) = (f.c, f.proxy_db.clone());
            std::thread::spawn(move || {
                let queue = format!("q{}", t % 3);
                let mut c = c.proxy.connect_as(&db, "app");
                let mut w = register(&mut c);
                let mut beat = Instant::now();
                while !stop.load(Ordering::SeqCst) {
                    if beat.elapsed() > Duration::from_millis(500) {
                        // Passes over a node that is down (with a WARNING). It holds no job
                        // here (each is completed before the next checkout), so `holding` is
                        // empty: a claim whose reply was lost when node 2 went down (committed
                        // there, never received) goes back to its queue instead of staying
                        // executing under this live worker.
                        if let Err(e) = c.query_one("SELECT jobq_heartbeat($1, holding => '{}')", &[&w]) {
                            if sqlstate(&e) == "JQ001" {
                                w = register(&mut c);
                            }
                        }
                        beat = Instant::now();
                    }
                    if t % 3 == 2 && !node2_stopped.load(Ordering::SeqCst) && completed_on(&done, 2) >= PER_QUEUE * 5 / 6 {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                    let ids: Vec<i64> = match c.query("SELECT id FROM jobq_checkout($1, ARRAY[$2], 5)", &[&w, &queue]) {
                        Ok(rows) => rows.iter().map(|r| r.get(0)).collect(),
                        Err(e) => {
                            // The worker's copy on the restarted node ran out of heartbeat
                            // while it was down: register again (its jobs there came back).
                            if sqlstate(&e) == "JQ001" {
                                w = register(&mut c);
                            }
                            std::thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                    };
                    if ids.is_empty() {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    for id in ids {
                        std::thread::sleep(Duration::from_millis(5)); // the job's work
                        // A completion that fails (its node is down) is tried again until the
                        // node answers: true, or false when the job was given back meanwhile or
                        // when the failed try had committed.
                        let mut failed = false;
                        loop {
                            match c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]) {
                                Ok(r) => {
                                    if r.get::<_, bool>(0) {
                                        done.lock().unwrap().push(id);
                                    } else if failed {
                                        unsure.lock().unwrap().push(id);
                                    }
                                    break;
                                }
                                Err(_) => {
                                    failed = true;
                                    std::thread::sleep(Duration::from_millis(100))
                                }
                            }
                        }
                    }
                }
            })
        })
        .collect();
    wait_until("a sixth of node 2's jobs done", Duration::from_secs(60), || completed_on(&done, 2) >= PER_QUEUE / 6);

    // Node 2 goes down hard.
    f.c.nodes[2].pg_ctl_stop("immediate");
    node2_stopped.store(true, Ordering::SeqCst);
    let before = (completed_on(&done, 0), completed_on(&done, 1), completed_on(&done, 2));
    assert!(before.2 < PER_QUEUE, "node 2 still had jobs when it went down");
    // Calls routed to it fail, naming it: its database (the first call on a connection the
    // proxy had open finds it closed), then its host and port (a new connection is refused).
    let e = p.query_one("SELECT jobq_enqueue('q2')", &[]).unwrap_err();
    let msg = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    assert!(msg.contains(&format!("[{}]", f.node_dbs[2])), "{msg}");
    let e = p.query_one("SELECT jobq_complete($1, gen_random_uuid())", &[&(1024i64 * 5 + 2)]).unwrap_err();
    let msg = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    assert!(msg.contains(&format!("[{}]", f.node_dbs[2])), "{msg}");
    assert!(msg.contains(&format!("port {}", f.c.nodes[2].port)), "{msg}");
    // The other queues go on: their workers complete jobs while it is down.
    wait_until("nodes 0 and 1 go on", Duration::from_secs(60), || {
        completed_on(&done, 0) >= (before.0 + 50).min(PER_QUEUE) && completed_on(&done, 1) >= (before.1 + 50).min(PER_QUEUE)
    });
    assert_eq!(completed_on(&done, 2), before.2, "nothing completes on a node that is down");
    // The calls that go to every node pass over it.
    p.query("SELECT * FROM jobq.queue_stats", &[]).unwrap();

    // Back up: its jobs complete, none lost, none twice.
    f.c.nodes[2].pg_ctl_start();
    // An unsure job is settled once its row says completed: its lost reply had committed (if it
    // was given back instead, another worker completes it and it is in `done`). One connection
    // to node 2 serves the whole wait, asked only while some job is unsure.
    let mut node2 = f.node(2);
    let missing = |n: &mut Client| -> Vec<i64> {
        let done: HashSet<i64> = done.lock().unwrap().iter().copied().collect();
        let unsure: Vec<i64> = unsure.lock().unwrap().iter().copied().filter(|i| !done.contains(i)).collect();
        let settled = settled(n, &unsure);
        expected.iter().copied().filter(|i| !done.contains(i) && !settled.contains(i)).collect()
    };
    let start = Instant::now();
    while !missing(&mut node2).is_empty() {
        if start.elapsed() > Duration::from_secs(120) {
            let left = missing(&mut node2);
            let rows = node2.query("SELECT id, state FROM jobq.jobs WHERE id = ANY($1) ORDER BY id", &[&left]).unwrap();
            let states: Vec<(i64, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            panic!("timed out after 120s waiting for every job completed; {} not, on node 2: {states:?}", left.len());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.join().unwrap();
    }
    let done = done.lock().unwrap();
    let unique: HashSet<i64> = done.iter().copied().collect();
    assert_eq!(unique.len(), done.len(), "no job completed twice");
    let unsure: Vec<i64> = unsure.lock().unwrap().iter().copied().filter(|i| !unique.contains(i)).collect();
    let settled = settled(&mut node2, &unsure);
    assert_eq!(settled.len(), unsure.len(), "a completion answered false is a job completed or given back");
    assert!(unique.is_disjoint(&settled));
    assert_eq!(unique.union(&settled).copied().collect::<HashSet<i64>>(), expected, "every job completed");
    for k in 0..3 {
        let mut n = f.node(k);
        let left: i64 = n.query_one("SELECT count(*) FROM jobq.jobs WHERE state <> 'completed'", &[]).unwrap().get(0);
        assert_eq!(left, 0, "node {k}");
        common::harness::assert_job_tables_consistent(&mut n);
    }
}

/// Which of `ids` (jobs of node 2) are completed there, asked through `node2`; nothing is asked
/// for none.
fn settled(node2: &mut Client, ids: &[i64]) -> HashSet<i64> {
    if ids.is_empty() {
        return HashSet::new();
    }
    let rows = node2.query("SELECT id FROM jobq.jobs WHERE id = ANY($1) AND state = 'completed'", &[&ids]).unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}
