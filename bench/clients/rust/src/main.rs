//! bench/clients.sh, Rust: one worker process over one queue of no-op jobs, C jobs in flight.
//!
//!   jobq-bench-clients raw     DSN QUEUE C
//!   jobq-bench-clients library DSN QUEUE C
//!
//! raw: the hand-written loop on tokio-postgres: register, wait inside the server for up to C
//! jobs (`jobq_checkout` with wait), run them with a no-op, then
//! `jobq_complete_and_checkout(worker, done, NULL, ARRAY[queue], C)` over and over: each call
//! completes the jobs in hand and takes the next C (statements prepared once). When a call
//! returns nothing, back to the waiting checkout. A heartbeat every heartbeat_timeout / 3
//! between calls.
//!
//! library: jobq-client's `Worker` with `concurrency(C)` and one no-op handler for the queue.
//!
//! Both run until SIGTERM (bench/clients.sh sends it once the queue is drained).
use std::time::{Duration, Instant};

use jobq_client::{Job, JobError, Worker};
use tokio_postgres::{types::Type, NoTls};
use uuid::Uuid;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, dsn, queue, c] = &args[..] else {
        eprintln!("usage: jobq-bench-clients raw|library DSN QUEUE CONCURRENCY");
        std::process::exit(2);
    };
    let c: i32 = c.parse()?;
    match mode.as_str() {
        "raw" => raw(dsn, queue, c).await,
        "library" => {
            Worker::builder(dsn.as_str())
                .queues([queue.clone()])
                .concurrency(c as usize)
                .name(format!("bench-rust-library-{}", std::process::id()))
                .handler(queue.clone(), |_job: Job| async move { Ok::<(), JobError>(()) })
                .build()?
                .run_until_signal()
                .await?;
            Ok(())
        }
        other => Err(format!("unknown mode {other}").into()),
    }
}

async fn raw(dsn: &str, queue: &str, c: i32) -> Result<(), Box<dyn std::error::Error>> {
    let (db, connection) = tokio_postgres::connect(dsn, NoTls).await?;
    tokio::spawn(connection);
    let row = db
        .query_one(
            "SELECT jobq_register_worker($1, bind_to_session => true),
                    extract(epoch FROM current_setting('jobq.heartbeat_timeout')::interval)::float8",
            &[&format!("bench-rust-raw-{}", std::process::id())],
        )
        .await?;
    let worker: Uuid = row.get(0);
    let beat = Duration::from_secs_f64(row.get::<_, f64>(1) / 3.0);
    let fused = db
        .prepare_typed(
            "SELECT id, queue, kind, payload, attempt
               FROM jobq_complete_and_checkout($1, $2, NULL, $3, $4)",
            &[Type::UUID, Type::INT8_ARRAY, Type::TEXT_ARRAY, Type::INT4],
        )
        .await?;
    let waiting = db
        .prepare_typed(
            "SELECT id, queue, kind, payload, attempt
               FROM jobq_checkout($1, $2, $3, wait => interval '1 s')",
            &[Type::UUID, Type::TEXT_ARRAY, Type::INT4],
        )
        .await?;
    let heartbeat = db.prepare_typed("SELECT jobq_heartbeat($1)", &[Type::UUID]).await?;
    let queues = vec![queue.to_string()];
    let mut done: Vec<i64> = Vec::new();
    let mut next_beat = Instant::now() + beat;
    loop {
        let mut rows = if done.is_empty() {
            Vec::new()
        } else {
            db.query(&fused, &[&worker, &done, &queues, &c]).await?
        };
        if rows.is_empty() {
            rows = db.query(&waiting, &[&worker, &queues, &c]).await?;
        }
        done.clear();
        for row in rows {
            let id: i64 = row.get(0);
            let _queue: &str = row.get(1);
            let _kind: Option<&str> = row.get(2);
            let _payload: serde_json::Value = row.get(3);
            let _attempt: i32 = row.get(4);
            done.push(id); // the no-op handler
        }
        if Instant::now() >= next_beat {
            db.query(&heartbeat, &[&worker]).await?;
            next_beat = Instant::now() + beat;
        }
    }
}
