//! A jobq worker in Rust: the `jobq-client` library (clients/rust) with the demo handler.
//!
//!     JOBQ_DSN=postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo examples/rust/target/release/jobq-worker
//!
//! The library does the protocol (heartbeats with what it holds, the one-commit
//! complete-and-checkout, waiting inside the server, SIGTERM draining, re-registration,
//! reconnection, pooled mode). The demo handler reads the payload: {"sleep_ms": N} sleeps N ms
//! (a cancel cuts it short), {"fail": true} fails, anything else completes; the result is
//! {"worker": <name>, "lang": "rust"}. It handles the demo's kinds, and the queues of
//! JOBQ_QUEUES for jobs without a kind.
//!
//! Environment: JOBQ_DSN, JOBQ_QUEUES (comma-separated; empty: every queue), JOBQ_CONCURRENCY
//! (jobs at once, 10), JOBQ_NAME (rust-<host>-<pid>), JOBQ_POOLED=1 (behind a transaction-mode
//! pooler), JOBQ_WAIT_S (an idle checkout's wait inside the server, 5), JOBQ_LOG_JSON=1 (one JSON
//! line per event on stdout: the handler's "started"/"finished", the library's events as "log").
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jobq_client::{Job, JobError, Worker};
use serde_json::{json, Value};

fn env(key: &str, default: &str) -> String {
    std::env::var(key).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string())
}

fn say(name: &str, event: &str, fields: Value) {
    let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let mut line = json!({"ts": ts, "event": event, "worker": name, "lang": "rust"});
    line.as_object_mut().unwrap().extend(fields.as_object().cloned().unwrap_or_default());
    match env("JOBQ_LOG_JSON", "") == "1" {
        true => println!("{line}"),
        false => eprintln!("{line}"),
    }
}

async fn demo(name: String, job: Job) -> Result<Value, JobError> {
    say(&name, "started", json!({"id": job.id, "attempt": job.attempt}));
    if let Some(ms) = job.payload.get("sleep_ms").and_then(Value::as_u64) {
        job.cancellable(tokio::time::sleep(Duration::from_millis(ms))).await?;
    }
    if job.payload.get("fail").and_then(Value::as_bool) == Some(true) {
        return Err(JobError::msg(format!("job {} failed on purpose", job.id)));
    }
    say(&name, "finished", json!({"id": job.id}));
    Ok(json!({"worker": name, "lang": "rust"}))
}

#[tokio::main]
async fn main() -> Result<(), jobq_client::Error> {
    let name = env("JOBQ_NAME", &format!("rust-{}-{}", env("HOSTNAME", "localhost"), std::process::id()));
    let queues: Vec<String> = env("JOBQ_QUEUES", "").split(',').filter(|q| !q.is_empty()).map(String::from).collect();
    let kinds = ["send_mail", "build_report", "sync_inventory", "call_partner", "transcode", "tick"].map(String::from);
    let (n, log) = (name.clone(), name.clone());
    let mut worker = Worker::builder(env("JOBQ_DSN", "postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo"))
        .name(&name)
        .concurrency(env("JOBQ_CONCURRENCY", "10").parse().expect("JOBQ_CONCURRENCY"))
        .pooled(env("JOBQ_POOLED", "") == "1")
        .wait(Duration::from_secs_f64(env("JOBQ_WAIT_S", "5").parse().expect("JOBQ_WAIT_S")))
        .on_event(move |e| say(&log, "log", json!({"message": format!("{e:?}")})));
    if !queues.is_empty() {
        worker = worker.queues(queues.clone());
    }
    for kind in kinds.into_iter().chain(queues) {
        let n = n.clone();
        worker = worker.handler(kind, move |job| demo(n.clone(), job));
    }
    worker.build()?.run_until_signal().await
}
