//! jobq reference worker in Rust (tokio-postgres).
//!
//! What it does
//!   Registers a jobq worker, then loops: check out up to JOBQ_BATCH jobs, run `handle` on
//!   each in turn, and report the batch's successes (the handler's value is the result) in the
//!   same call that checks out the next batch, jobq_complete_and_checkout: one round trip and
//!   one commit per batch. A failure is reported at once with jobq_fail (error = {"message",
//!   "type"}); JQ002 from the fused call (a job in hand was finished elsewhere) makes it report
//!   the others with jobq_complete_many. When the queue is empty it waits inside the server:
//!   jobq_checkout(..., wait => JOBQ_WAIT_S), which returns as soon as a commit makes a job
//!   available (no LISTEN, no polling; works through a transaction-mode pooler). With
//!   JOBQ_WAIT_S=0 it waits for NOTIFY jobq instead, polling every JOBQ_POLL_S (or only polls,
//!   when pooled). A task heartbeats on its own connection every
//!   heartbeat_timeout / 3, sending the ids of the jobs in hand (`holding`: the server puts
//!   back any job executing under this worker that the list lacks, e.g. a checkout whose
//!   reply was lost), and logs cancellation requests; a cancelled job that has not started
//!   yet is failed (it becomes `cancelled`) instead of run.
//!
//!   SIGTERM / SIGINT: take no more work, finish the jobs in hand, unregister, exit 0.
//!   SQLSTATE JQ001 (this worker was reaped or unregistered): drop the jobs in hand without
//!   reporting them (they run again elsewhere), register again, go on.
//!   Connection lost: the worker is registered with bind_to_session, so the server treats it
//!   as dead as soon as its session ends and the reaper requeues its jobs; the worker
//!   reconnects with exponential backoff (1 s .. 30 s) and registers again.
//!
//!   Behind a pooler in transaction mode (JOBQ_POOLED=1, e.g. PgBouncer with pool_mode =
//!   transaction), where consecutive calls may run in different server sessions: no LISTEN
//!   (it polls every JOBQ_POLL_S instead), no bind_to_session (its liveness is its heartbeats
//!   alone, so a crash is noticed after jobq.heartbeat_timeout); a lost connection keeps the
//!   registration, which is not tied to a session. Every statement is sent with
//!   `query_typed` (one unnamed statement, one round trip) in either mode: tokio-postgres'
//!   `query` prepares a named statement in a round trip of its own, which a pooler may run
//!   in another server session than the one that executes it.
//!
//! How to run
//!   cargo run --release --manifest-path examples/rust/Cargo.toml
//!   Enqueue from psql:  SELECT jobq_enqueue('default', '{"sleep_ms": 200}');
//!
//! Environment
//!   JOBQ_DSN          connection string          (postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo)
//!   JOBQ_QUEUES       comma-separated queues     (empty: every queue)
//!   JOBQ_BATCH        jobs per checkout          (10)
//!   JOBQ_HEARTBEAT_S  heartbeat period, seconds  (the server's jobq.heartbeat_timeout / 3)
//!   JOBQ_LOG_JSON     1: one JSON line per event on stdout (for test harnesses)
//!   JOBQ_POOLED       1: behind a pooler in transaction mode (above)
//!   JOBQ_WAIT_S       how long an idle checkout waits inside the server, seconds (5; 0: LISTEN/poll instead)
//!   JOBQ_POLL_S       with JOBQ_WAIT_S=0: how long an idle worker waits before it looks again (1)
//!
//! The handler is `handle` below: replace it with your own. The demo one reads the payload:
//! {"sleep_ms": N} sleeps N ms, {"fail": true} fails, anything else completes; its result is
//! {"worker": <name>, "lang": "rust"}.
use futures_util::{stream, StreamExt};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client, Error, NoTls};
use uuid::Uuid;


struct Job {
    id: i64,
    attempt: i32,
    payload: Value,
}

/// The work. Ok(result) completes the job, Err((type, message)) fails it.
async fn handle(job: &Job, name: &str) -> Result<Value, (String, String)> {
    if let Some(ms) = job.payload.get("sleep_ms").and_then(Value::as_u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if job.payload.get("fail").and_then(Value::as_bool) == Some(true) {
        return Err(("DemoFailure".into(), format!("job {} failed on purpose", job.id)));
    }
    Ok(json!({"worker": name, "lang": "rust"}))
}

struct Shared {
    name: String,
    log_json: bool,
    pooled: bool,
    poll: Duration,
    wait: f64, // seconds an idle checkout waits inside the server; 0: LISTEN/poll instead
    worker: Mutex<Option<Uuid>>,      // the current registration
    reaped: Mutex<Option<Uuid>>,      // a registration that got JQ001
    cancelled: Mutex<HashSet<i64>>,   // jobs whose cancellation was requested
    heartbeat: Mutex<Duration>,
    /// The jobs in hand. An async mutex: a heartbeat keeps it for its whole call, so no
    /// checkout starts between reading the list and the server applying it.
    hand: tokio::sync::Mutex<Hand>,
}

#[derive(Default)]
struct Hand {
    jobs: HashSet<i64>,
    /// Checkouts sent and not answered yet: their jobs may be claimed already but are not in
    /// `jobs`, so meanwhile a heartbeat sends no list (NULL: nothing is put back).
    checkouts: u32,
}

impl Shared {
    fn log(&self, event: &str, fields: Value) {
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
        let mut line = json!({"ts": ts, "event": event, "worker": self.name, "lang": "rust"});
        line.as_object_mut().unwrap().extend(fields.as_object().cloned().unwrap_or_default());
        if self.log_json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        } else {
            eprintln!("{} {event} {fields}", self.name);
        }
    }
    fn reaped(&self) -> bool {
        let w = *self.worker.lock().unwrap();
        w.is_some() && w == *self.reaped.lock().unwrap()
    }
}

fn is_reaped(e: &Error) -> bool {
    e.code().map(|c| c.code()) == Some("JQ001")
}

/// A connection whose notifications go to `notify` (LISTEN works on it).
async fn connect(dsn: &str, app: &str, notify: Option<mpsc::UnboundedSender<()>>) -> Result<Client, Error> {
    let mut config: tokio_postgres::Config = dsn.parse()?;
    config.application_name(app).connect_timeout(Duration::from_secs(5));
    let (client, mut connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let (AsyncMessage::Notification(_), Some(tx)) = (message, &notify) {
                let _ = tx.send(());
            }
        }
    });
    Ok(client)
}

async fn register(db: &Client, s: &Shared, event: &str, fixed_heartbeat: Option<Duration>) -> Result<(), Error> {
    let row = db
        .query_typed(
            "SELECT jobq_register_worker($1, $2, bind_to_session => $3),
                    extract(epoch FROM current_setting('jobq.heartbeat_timeout', true)::interval)::float8",
            &[(&s.name, Type::TEXT), (&json!({"lang": "rust", "pid": std::process::id()}), Type::JSONB), (&!s.pooled, Type::BOOL)],
        )
        .await?
        .remove(0);
    let id: Uuid = row.get(0);
    let timeout: Option<f64> = row.get(1);
    *s.heartbeat.lock().unwrap() = fixed_heartbeat.unwrap_or(Duration::from_secs_f64(timeout.unwrap_or(30.0) / 3.0));
    s.cancelled.lock().unwrap().clear();
    s.hand.lock().await.jobs.clear(); // the old registration's jobs run elsewhere
    *s.worker.lock().unwrap() = Some(id);
    s.log(event, json!({"worker_id": id}));
    Ok(())
}

/// One connection's life: register, work until stopped, unregister.
async fn session(dsn: &str, queues: &Option<Vec<String>>, batch: i32, s: &Shared, fixed_hb: Option<Duration>,
                 stop: &mut watch::Receiver<bool>) -> Result<(), Error> {
    let (tx, mut notified) = mpsc::unbounded_channel();
    let db = connect(dsn, &s.name, Some(tx)).await?;
    if !s.pooled && s.wait == 0.0 {
        db.batch_execute("LISTEN jobq").await?;
    }
    if s.worker.lock().unwrap().is_none() {
        register(&db, s, "registered", fixed_hb).await?;
    }
    // One round trip and one commit per batch: the jobs of a batch that succeeded are
    // completed by the call that checks out the next batch (jobq_complete_and_checkout).
    let mut done: Vec<(i64, Value)> = Vec::new(); // finished here, not yet reported
    let mut waited: Vec<Job> = Vec::new(); // claimed by a waiting checkout, run next
    while !*stop.borrow() {
        let worker = s.worker.lock().unwrap().unwrap();
        // Jobs a waiting checkout returned need no checkout (and nothing is done then).
        let jobs: Vec<Job> = if !waited.is_empty() {
            std::mem::take(&mut waited)
        } else {
            s.hand.lock().await.checkouts += 1;
            let (ids, results): (Vec<i64>, Vec<Value>) = done.iter().cloned().unzip();
            let claimed = db
                .query_typed(
                    "SELECT id, attempt, payload FROM jobq_complete_and_checkout($1, $2, $3, $4, $5)",
                    &[(&worker, Type::UUID), (&ids, Type::INT8_ARRAY), (&results, Type::JSONB_ARRAY), (queues, Type::TEXT_ARRAY), (&batch, Type::INT4)],
                )
                .await;
            {
                let mut hand = s.hand.lock().await;
                hand.checkouts -= 1;
                for id in &ids {
                    hand.jobs.remove(id);
                }
                if let Ok(rows) = &claimed {
                    hand.jobs.extend(rows.iter().map(|r| r.get::<_, i64>(0)));
                }
            }
            match claimed {
                Ok(rows) => {
                    for id in &ids {
                        s.log("completed", json!({"id": id}));
                    }
                    rows.iter().map(|r| Job { id: r.get(0), attempt: r.get(1), payload: r.get(2) }).collect()
                }
                Err(e) if is_reaped(&e) => {
                    *s.reaped.lock().unwrap() = Some(worker);
                    vec![]
                }
                Err(e) if e.code().map(|c| c.code()) == Some("JQ002") => {
                    complete_alone(&db, s, worker, &done).await?; // some were finished elsewhere
                    vec![]
                }
                Err(e) => return Err(e),
            }
        };
        done.clear();
        for job in &jobs {
            s.log("claimed", json!({"id": job.id, "attempt": job.attempt}));
        }
        for job in &jobs {
            match run_one(&db, s, worker, job).await? {
                Some(result) => done.push((job.id, result)),
                None => {
                    s.hand.lock().await.jobs.remove(&job.id);
                }
            }
        }
        if s.reaped() {
            if !done.is_empty() {
                s.log("dropped", json!({"ids": done.iter().map(|(id, _)| *id).collect::<Vec<_>>()}));
            }
            done.clear();
            register(&db, s, "reregistered", fixed_hb).await?;
        } else if jobs.is_empty() && done.is_empty() && s.wait > 0.0 {
            waited = checkout_waiting(&db, s, worker, queues, batch, stop).await?; // wait inside the server
        } else if jobs.is_empty() && done.is_empty() {
            while notified.try_recv().is_ok() {} // wake-ups from before this checkout
            tokio::select! {
                _ = notified.recv() => {}
                _ = tokio::time::sleep(s.poll) => {}
                _ = stop.changed() => {}
            }
        }
    }
    let worker = s.worker.lock().unwrap().take().unwrap();
    complete_alone(&db, s, worker, &done).await?; // stopping: report what finished first
    let sql = "SELECT jobq_unregister_worker($1)";
    let mut result = db.query_typed(sql, &[(&worker, Type::UUID)]).await;
    if result.as_ref().is_err_and(|e| e.code().map(|c| c.code()) == Some("57014")) {
        // A stop's cancel, meant for a wait that had just returned, landed here.
        result = db.query_typed(sql, &[(&worker, Type::UUID)]).await;
    }
    match result {
        Ok(rows) => s.log("unregistered", json!({"worker_id": worker, "returned": rows[0].get::<_, i32>(0)})),
        Err(e) if is_reaped(&e) => {}
        Err(e) => return Err(e),
    }
    Ok(())
}

/// jobq_checkout with wait: the jobs it claimed, or none when the wait ran out or a stop
/// cancelled it.
async fn checkout_waiting(db: &Client, s: &Shared, worker: Uuid, queues: &Option<Vec<String>>, batch: i32,
                          stop: &mut watch::Receiver<bool>) -> Result<Vec<Job>, Error> {
    s.hand.lock().await.checkouts += 1;
    let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 4] =
        [(&worker, Type::UUID), (queues, Type::TEXT_ARRAY), (&batch, Type::INT4), (&s.wait, Type::FLOAT8)];
    let call = db.query_typed("SELECT id, attempt, payload FROM jobq_checkout($1, $2, $3, wait => make_interval(secs => $4))", &params);
    tokio::pin!(call);
    let result = tokio::select! {
        r = &mut call => r,
        // Not behind a pooler, where the cancel may reach the pooled session after the wait
        // has returned: there a stop waits out the wait.
        _ = stop.changed(), if !s.pooled => {
            let _ = db.cancel_token().cancel_query(NoTls).await;
            call.await
        }
    };
    let jobs: Vec<Job> = match result {
        Ok(rows) => rows.iter().map(|r| Job { id: r.get(0), attempt: r.get(1), payload: r.get(2) }).collect(),
        Err(e) if is_reaped(&e) => {
            *s.reaped.lock().unwrap() = Some(worker);
            vec![]
        }
        Err(e) if e.code().map(|c| c.code()) == Some("57014") => vec![], // cancelled by a stop
        Err(e) => {
            s.hand.lock().await.checkouts -= 1;
            return Err(e);
        }
    };
    let mut hand = s.hand.lock().await;
    hand.checkouts -= 1;
    hand.jobs.extend(jobs.iter().map(|j| j.id));
    Ok(jobs)
}

/// Reports finished jobs without a checkout (after JQ002, or when stopping).
async fn complete_alone(db: &Client, s: &Shared, worker: Uuid, done: &[(i64, Value)]) -> Result<(), Error> {
    if done.is_empty() || s.reaped() {
        return Ok(());
    }
    let (ids, results): (Vec<i64>, Vec<Value>) = done.iter().cloned().unzip();
    let ok: Vec<i64> = db
        .query_typed("SELECT jobq_complete_many($1, $2, $3)", &[(&worker, Type::UUID), (&ids, Type::INT8_ARRAY), (&results, Type::JSONB_ARRAY)])
        .await?[0]
        .get(0);
    let mut hand = s.hand.lock().await;
    for id in &ids {
        s.log(if ok.contains(id) { "completed" } else { "lost" }, json!({"id": id})); // lost: not ours any more
        hand.jobs.remove(id);
    }
    Ok(())
}

/// Runs one job: its result to complete with the next checkout, or None when it was failed
/// (reported at once) or dropped.
async fn run_one(db: &Client, s: &Shared, worker: Uuid, job: &Job) -> Result<Option<Value>, Error> {
    if s.reaped() {
        s.log("dropped", json!({"id": job.id}));
        return Ok(None);
    }
    let outcome = if s.cancelled.lock().unwrap().contains(&job.id) {
        Err(("Cancelled".to_string(), "cancelled before start".to_string()))
    } else {
        handle(job, &s.name).await
    };
    if s.reaped() {
        s.log("dropped", json!({"id": job.id}));
        return Ok(None);
    }
    match outcome {
        Ok(result) => Ok(Some(result)),
        Err((kind, message)) => {
            let error = json!({"type": kind, "message": message});
            let state: Option<String> = db
                .query_typed("SELECT jobq_fail($1, $2, $3)", &[(&job.id, Type::INT8), (&worker, Type::UUID), (&error, Type::JSONB)])
                .await?[0]
                .get(0);
            s.cancelled.lock().unwrap().remove(&job.id);
            s.log("failed", json!({"id": job.id, "state": state, "error": message}));
            Ok(None)
        }
    }
}

/// Heartbeats on its own connection, so a long job never starves them.
async fn heartbeat_loop(dsn: String, s: Arc<Shared>, mut done: watch::Receiver<bool>) {
    let mut db: Option<Client> = None;
    loop {
        let period = *s.heartbeat.lock().unwrap();
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = done.changed() => return,
        }
        let Some(worker) = *s.worker.lock().unwrap() else { continue };
        if Some(worker) == *s.reaped.lock().unwrap() {
            continue;
        }
        if db.as_ref().is_none_or(|c| c.is_closed()) {
            db = connect(&dsn, &format!("{}-hb", s.name), None).await.ok();
        }
        let Some(c) = &db else { continue };
        let hand = s.hand.lock().await;
        let holding: Option<Vec<i64>> = (hand.checkouts == 0).then(|| hand.jobs.iter().copied().collect());
        let beat = c.query_typed("SELECT jobq_heartbeat($1, $2)", &[(&worker, Type::UUID), (&holding, Type::INT8_ARRAY)]).await;
        drop(hand);
        match beat {
            Ok(rows) => {
                let ids: Vec<i64> = rows[0].get(0);
                let mut cancelled = s.cancelled.lock().unwrap();
                let new: Vec<i64> = ids.into_iter().filter(|id| cancelled.insert(*id)).collect();
                drop(cancelled);
                if !new.is_empty() {
                    s.log("cancel_requested", json!({"ids": new}));
                }
            }
            Err(e) if is_reaped(&e) => {
                *s.reaped.lock().unwrap() = Some(worker); // the main loop drops its jobs and registers again
                s.log("heartbeat_reaped", json!({"worker_id": worker}));
            }
            Err(e) => {
                s.log("heartbeat_error", json!({"error": e.to_string()}));
                db = None;
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let dsn = env("JOBQ_DSN").unwrap_or_else(|| "postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo".into());
    let queues: Option<Vec<String>> = env("JOBQ_QUEUES").map(|q| q.split(',').map(|x| x.trim().to_string()).collect());
    let batch: i32 = env("JOBQ_BATCH").map_or(10, |b| b.parse().expect("JOBQ_BATCH"));
    let fixed_hb = env("JOBQ_HEARTBEAT_S").map(|h| Duration::from_secs_f64(h.parse().expect("JOBQ_HEARTBEAT_S")));
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "host".into());
    let s = Arc::new(Shared {
        name: format!("rust-{host}-{}", std::process::id()),
        log_json: env("JOBQ_LOG_JSON").as_deref() == Some("1"),
        pooled: env("JOBQ_POOLED").as_deref() == Some("1"),
        poll: Duration::from_secs_f64(env("JOBQ_POLL_S").map_or(1.0, |p| p.parse().expect("JOBQ_POLL_S"))),
        wait: env("JOBQ_WAIT_S").map_or(5.0, |w| w.parse().expect("JOBQ_WAIT_S")),
        worker: Mutex::new(None),
        reaped: Mutex::new(None),
        cancelled: Mutex::new(HashSet::new()),
        // The first period: the heartbeat task starts sleeping before the registration sets it.
        heartbeat: Mutex::new(fixed_hb.unwrap_or(Duration::from_secs(10))),
        hand: tokio::sync::Mutex::new(Hand::default()),
    });

    let (stop_tx, mut stop) = watch::channel(false);
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (mut term, mut int) = (signal(SignalKind::terminate()).unwrap(), signal(SignalKind::interrupt()).unwrap());
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        let _ = stop_tx.send(true);
    });
    let (done_tx, done) = watch::channel(false);
    let hb = tokio::spawn(heartbeat_loop(dsn.clone(), s.clone(), done));

    let mut backoff = 1;
    while !*stop.borrow() {
        match session(&dsn, &queues, batch, &s, fixed_hb, &mut stop).await {
            Ok(()) => break,
            Err(e) if e.code().is_some() => {
                s.log("error", json!({"error": e.to_string()}));
                std::process::exit(1); // a database error that is not a lost connection: a bug
            }
            Err(e) => {
                if !s.pooled {
                    *s.worker.lock().unwrap() = None; // our session is gone, so is the registration
                }
                s.log("disconnected", json!({"error": e.to_string(), "retry_in": backoff}));
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(backoff)) => {}
                    _ = stop.changed() => {}
                }
                backoff = (backoff * 2).min(30);
            }
        }
    }
    let _ = done_tx.send(true);
    let _ = hb.await;
    s.log("stopped", json!({}));
}
