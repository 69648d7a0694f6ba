//! The worker process the crate's own tests start (tests/it/processes.rs): the library's
//! `Worker`, run until SIGTERM, with a handler that records every run in the table
//! `client_runs` and then returns `{"pid": <its pid>}`. `cargo test` builds it into
//! target/<profile>/examples/, where the tests find it.
//!
//! Environment:
//!   JOBQ_DSN          connection string (required)
//!   JOBQ_QUEUE        the queue it serves; its handler is registered under that name (required)
//!   JOBQ_NAME         the worker's name (default: the library's)
//!   JOBQ_CONCURRENCY  jobs at once (default 4)
//!   JOBQ_POOLED       1: pooled mode
//!   JOBQ_BLOCK        1: the handler, after recording its run, waits for its job's
//!                     cancellation token instead of finishing
//!
//! A payload `{"sleep_ms": N}` makes the handler take N ms. One JSON line per worker event is
//! written to stdout.
use std::sync::Arc;
use std::time::Duration;

use jobq_client::tokio_postgres::{self, types::Type, NoTls};
use jobq_client::{Job, JobError, Worker};
use serde_json::{json, Value};

fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

#[tokio::main]
async fn main() {
    let dsn = env("JOBQ_DSN").expect("JOBQ_DSN");
    let queue = env("JOBQ_QUEUE").expect("JOBQ_QUEUE");
    let concurrency: usize =
        env("JOBQ_CONCURRENCY").map_or(4, |c| c.parse().expect("JOBQ_CONCURRENCY"));
    let block = env("JOBQ_BLOCK").as_deref() == Some("1");
    let pid = std::process::id() as i32;

    let (db, connection) = tokio_postgres::connect(&dsn, NoTls).await.expect("connect");
    tokio::spawn(connection);
    let db = Arc::new(db);

    let mut builder = Worker::builder(&dsn)
        .queues([queue.clone()])
        .concurrency(concurrency)
        .pooled(env("JOBQ_POOLED").as_deref() == Some("1"))
        .on_event(|event| println!("{}", json!({"event": format!("{event:?}")})))
        .handler(queue, move |job: Job| {
            let db = db.clone();
            async move {
                db.query_typed(
                    "INSERT INTO client_runs (job_id, pid, attempt, worker) VALUES ($1, $2, $3, $4)",
                    &[(&job.id, Type::INT8), (&pid, Type::INT4), (&job.attempt, Type::INT4), (&job.worker_id, Type::UUID)],
                )
                .await?;
                if block {
                    job.cancelled().await;
                    return Err(JobError::cancelled());
                }
                if let Some(ms) = job.payload.get("sleep_ms").and_then(Value::as_u64) {
                    job.cancellable(tokio::time::sleep(Duration::from_millis(ms))).await?;
                }
                Ok(json!({"pid": pid}))
            }
        });
    if let Some(name) = env("JOBQ_NAME") {
        builder = builder.name(name);
    }
    let worker = builder.build().expect("worker settings");
    if let Err(e) = worker.run_until_signal().await {
        eprintln!("test_worker: {e}");
        std::process::exit(1);
    }
}
