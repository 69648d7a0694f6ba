//! The jobq demo: three worker connections work a few queues with nothing but SQL.
//! Run by `scripts/demo.sh`, against the local cluster of `scripts/cluster.sh`.
//!
//! What happens, in order:
//!  1. jobs are enqueued in three queues with different priorities, one of them delayed by
//!     three seconds and one ("flaky") that fails on its first attempt;
//!  2. jobq.queue_stats is printed;
//!  3. three workers register (each on its own connection) and loop: check out up to two
//!     jobs, "run" them, complete them (or fail the flaky one, which retries in one second);
//!  4. when every job is completed, jobq.queue_stats and the job table are printed again.
use postgres::{Client, NoTls};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn url() -> String {
    let port = std::env::var("JOBQ_PORT").unwrap_or_else(|_| "5499".into());
    let db = std::env::var("JOBQ_DB").unwrap_or_else(|_| "jobq_demo".into());
    format!("host=127.0.0.1 port={port} user=postgres dbname={db}")
}

fn print_stats(c: &mut Client, title: &str) {
    println!("\n== jobq.queue_stats {title}");
    println!("{:<10} {:>6} {:>10} {:>10} {:>5}  oldest_ready_age", "queue", "ready", "scheduled", "executing", "dead");
    for r in c.query("SELECT queue, ready, scheduled, executing, dead, coalesce(oldest_ready_age::text, '-') FROM jobq.queue_stats ORDER BY queue", &[]).unwrap() {
        println!(
            "{:<10} {:>6} {:>10} {:>10} {:>5}  {}",
            r.get::<_, String>(0), r.get::<_, i64>(1), r.get::<_, i64>(2), r.get::<_, i64>(3), r.get::<_, i64>(4), r.get::<_, String>(5)
        );
    }
}

fn main() {
    let mut c = Client::connect(&url(), NoTls).expect("connect (is the cluster running? scripts/cluster.sh start)");
    // A clean slate for the demo: recreate the extension.
    c.batch_execute("SET client_min_messages = warning; DROP EXTENSION IF EXISTS jobq CASCADE; CREATE EXTENSION jobq;").unwrap();

    println!("== enqueue");
    for (queue, kind, priority, payload) in [
        ("emails", "Welcome", 5, r#"{"to": "ada@example.com"}"#),
        ("emails", "PasswordReset", 0, r#"{"to": "bob@example.com"}"#),
        ("emails", "Newsletter", 10, r#"{"list": "weekly"}"#),
        ("reports", "Invoice", 1, r#"{"invoice": 1001}"#),
        ("reports", "Invoice", 1, r#"{"invoice": 1002}"#),
        ("images", "Thumbnail", 0, r#"{"image": "cat.png"}"#),
    ] {
        let id: i64 = c
            .query_one("SELECT jobq_enqueue($1, $2::text::jsonb, kind => $3, priority => $4)", &[&queue, &payload, &kind, &priority])
            .unwrap()
            .get(0);
        println!("  job {id:>2}: {queue}/{kind} priority {priority} {payload}");
    }
    let delayed: i64 = c
        .query_one("SELECT jobq_enqueue('reports', '{\"report\": \"daily\"}', kind => 'Daily', run_at => clock_timestamp() + interval '3 seconds')", &[])
        .unwrap()
        .get(0);
    println!("  job {delayed:>2}: reports/Daily, delayed by 3 s");
    let flaky: i64 = c
        .query_one("SELECT jobq_enqueue('images', '{\"image\": \"huge.tif\"}', kind => 'Flaky', max_attempts => 3)", &[])
        .unwrap()
        .get(0);
    println!("  job {flaky:>2}: images/Flaky, fails on its first attempt");
    let total: i64 = c.query_one("SELECT count(*) FROM jobq.jobs", &[]).unwrap().get(0);

    print_stats(&mut c, "before the workers start");
    println!("\n== three workers, each on its own connection");
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = ["worker-a", "worker-b", "worker-c"]
        .into_iter()
        .map(|name| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&url(), NoTls).unwrap();
                let me: uuid::Uuid = c.query_one("SELECT jobq_register_worker($1)", &[&name]).unwrap().get(0);
                while !stop.load(Ordering::SeqCst) {
                    c.query("SELECT jobq_heartbeat($1)", &[&me]).unwrap();
                    let jobs = c.query("SELECT id, queue, kind, attempt FROM jobq_checkout($1, max_jobs => 2)", &[&me]).unwrap();
                    if jobs.is_empty() {
                        std::thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                    for j in jobs {
                        let (id, queue, kind, attempt): (i64, String, Option<String>, i32) = (j.get(0), j.get(1), j.get(2), j.get(3));
                        let kind = kind.unwrap_or_default();
                        let t = started.elapsed().as_secs_f32();
                        std::thread::sleep(Duration::from_millis(150)); // the "work"
                        if kind == "Flaky" && attempt == 1 {
                            let s: String = c
                                .query_one("SELECT jobq_fail($1, $2, '{\"error\": \"out of memory\"}', retry_in => interval '1 second')", &[&id, &me])
                                .unwrap()
                                .get(0);
                            println!("  {t:5.2}s {name}: job {id:>2} {queue}/{kind} attempt {attempt} FAILED -> {s}, retry in 1 s");
                        } else {
                            let ok: bool = c.query_one("SELECT jobq_complete($1, $2)", &[&id, &me]).unwrap().get(0);
                            println!("  {t:5.2}s {name}: job {id:>2} {queue}/{kind} attempt {attempt} completed={ok}");
                        }
                    }
                }
                c.query_one("SELECT jobq_unregister_worker($1)", &[&me]).unwrap();
            })
        })
        .collect();

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done: i64 = c.query_one("SELECT count(*) FROM jobq.jobs WHERE state = 'completed'", &[]).unwrap().get(0);
        if done == total {
            break;
        }
        assert!(Instant::now() < deadline, "the demo did not finish within a minute");
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.join().unwrap();
    }

    print_stats(&mut c, "after");
    println!("\n== jobq.jobs");
    for r in c.query("SELECT id, queue, kind, state, attempt, coalesce('last_error ' || last_error::text, '') FROM jobq.jobs ORDER BY id", &[]).unwrap() {
        println!(
            "  job {:>2} {:<8} {:<14} {:<10} attempts={} {}",
            r.get::<_, i64>(0), r.get::<_, String>(1), r.get::<_, Option<String>>(2).unwrap_or_default(),
            r.get::<_, String>(3), r.get::<_, i32>(4), r.get::<_, String>(5)
        );
    }
}
