//! Exactly once under contention: many connections, each with its own worker, check out and
//! complete in a loop (some in one call, as the client libraries' workers do); every job completes exactly once, none is lost, none is handed to two
//! workers at the same time.
mod common;

use common::*;
use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use uuid::Uuid;

const JOBS: i64 = 5_000;
const WORKERS: usize = 16;

#[test]
fn every_job_completes_exactly_once_under_16_concurrent_workers() {
    let (cluster, name, mut c) = db();
    // Several queues and priorities, enqueued in batches.
    for q in 0..4 {
        c.execute(
            "SELECT jobq_enqueue_batch($1, ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $2::int) g), priority => $3)",
            &[&format!("q{q}"), &((JOBS / 4) as i32), &(q % 2)],
        )
        .unwrap();
    }
    let total: i64 = c.query_one("SELECT count(*) FROM jobq.jobs", &[]).unwrap().get(0);
    assert_eq!(total, JOBS);

    let start = Arc::new(Barrier::new(WORKERS));
    let handles: Vec<_> = (0..WORKERS)
        .map(|i| {
            let url = cluster.url(&name);
            let start = start.clone();
            std::thread::spawn(move || {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                let w: Uuid = c.query_one("SELECT jobq_register_worker($1)", &[&format!("w{i}")]).unwrap().get(0);
                // Workers differ: batch sizes 1..4, half of them restricted to two queues.
                let max_jobs = 1 + (i % 4) as i32;
                let queues: Option<Vec<String>> = (i % 2 == 1).then(|| vec!["q0".into(), "q1".into(), "q2".into(), "q3".into()]);
                start.wait();
                // And a quarter of them run as the client libraries' workers do: each call
                // completes the jobs in hand and checks out the next (jobq_complete_and_checkout;
                // with one job in hand and max_jobs 1, the path of its own in both editions).
                let fused = i % 8 < 2;
                let mut in_hand: Vec<i64> = Vec::new();
                let mut done = Vec::new();
                loop {
                    let rows = if fused {
                        let rows = c
                            .query("SELECT id, attempt FROM jobq_complete_and_checkout($1, $2, NULL, $3, $4)", &[&w, &in_hand, &queues, &max_jobs])
                            .unwrap();
                        done.append(&mut in_hand);
                        rows
                    } else {
                        c.query("SELECT id, attempt FROM jobq_checkout($1, $2, $3)", &[&w, &queues, &max_jobs]).unwrap()
                    };
                    if rows.is_empty() {
                        let left: i64 = c.query_one("SELECT count(*) FROM jobq.jobs WHERE state = 'ready'", &[]).unwrap().get(0);
                        if left == 0 {
                            break;
                        }
                        continue;
                    }
                    for r in rows {
                        let (id, attempt): (i64, i32) = (r.get(0), r.get(1));
                        assert_eq!(attempt, 1, "job {id} handed out twice");
                        if fused {
                            in_hand.push(id);
                            continue;
                        }
                        let ok: bool = c.query_one("SELECT jobq_complete($1, $2)", &[&id, &w]).unwrap().get(0);
                        assert!(ok, "worker {i} could not complete job {id} it had just checked out");
                        done.push(id);
                    }
                }
                done
            })
        })
        .collect();

    let mut seen: HashMap<i64, usize> = HashMap::new();
    for h in handles {
        for id in h.join().unwrap() {
            *seen.entry(id).or_default() += 1;
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs completed more than once: {twice:?}");
    assert_eq!(seen.len() as i64, JOBS, "every job was completed");
    let r = c
        .query_one("SELECT count(*) FILTER (WHERE state = 'completed'), count(*), max(attempt), min(attempt) FROM jobq.jobs", &[])
        .unwrap();
    assert_eq!((r.get::<_, i64>(0), r.get::<_, i64>(1)), (JOBS, JOBS));
    assert_eq!((r.get::<_, i32>(2), r.get::<_, i32>(3)), (1, 1));
    assert_job_tables_consistent(&mut c);
}
