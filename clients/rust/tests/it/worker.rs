//! The `Worker` in this process: transactions, concurrency, results and errors, cancellation,
//! re-registration after JQ001, and pooled mode behind PgBouncer.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobq_client::tokio_postgres::Client;
use jobq_client::*;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Barrier};
use tokio::task::JoinHandle;

use crate::common::*;

/// Starts the worker; the test calls `stop` at its end, which checks that the drain returns
/// `Ok` and that the worker unregistered.
fn start(worker: Worker) -> (WorkerHandle, JoinHandle<Result<(), Error>>) {
    let handle = worker.handle();
    (handle, tokio::spawn(worker.run()))
}

async fn stop(handle: WorkerHandle, run: JoinHandle<Result<(), Error>>, admin: &Client) {
    let id = handle.worker_id().expect("registered");
    handle.shutdown();
    tokio::time::timeout(Duration::from_secs(15), run)
        .await
        .expect("the drain ends")
        .unwrap()
        .expect("run returns Ok");
    assert_eq!(handle.worker_id(), None);
    let left: i64 = admin
        .query_one("SELECT count(*) FROM jobq.workers WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "unregistered");
}

async fn result(admin: &Client, id: i64) -> Option<Value> {
    admin
        .query_one("SELECT result FROM jobq.jobs WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_job_enqueued_in_a_rolled_back_transaction_never_runs() {
    let (mut app, admin) = (app().await, admin().await);
    let queue = unique("tx");
    let ran = Arc::new(Mutex::new(Vec::new()));
    let seen = ran.clone();
    let (handle, run) = start(
        Worker::builder(dsn())
            .queues([&queue])
            .handler(&queue, move |job: Job| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(job.id);
                    Ok(json!("done"))
                }
            })
            .build()
            .unwrap(),
    );

    let tx = app.transaction().await.unwrap();
    let rolled_back = enqueue(&tx, &queue, &json!({"n": 1}), EnqueueOptions::new())
        .await
        .unwrap()
        .unwrap();
    tx.rollback().await.unwrap();
    let tx = app.transaction().await.unwrap();
    let committed = enqueue(&tx, &queue, &json!({"n": 2}), EnqueueOptions::new())
        .await
        .unwrap()
        .unwrap();
    tx.commit().await.unwrap();

    wait_for(
        "the committed job to complete",
        Duration::from_secs(10),
        || async { state(&admin, committed).await == "completed" },
    )
    .await;
    assert_eq!(result(&admin, committed).await, Some(json!("done")));
    let exists: i64 = admin
        .query_one(
            "SELECT count(*) FROM jobq.jobs WHERE id = $1 OR queue = $2 AND id <> $3",
            &[&rolled_back, &queue, &committed],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(exists, 0, "the rolled-back job does not exist");
    stop(handle, run, &admin).await;
    assert_eq!(*ran.lock().unwrap(), vec![committed]);
}

#[tokio::test]
async fn n_handlers_run_at_once_and_never_more() {
    let (app, admin) = (app().await, admin().await);
    let queue = unique("concurrency");
    const N: usize = 6;
    let barrier = Arc::new(Barrier::new(N));
    let (now, max) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (b, n, m) = (barrier.clone(), now.clone(), max.clone());
    let (handle, run) = start(
        Worker::builder(dsn())
            .queues([&queue])
            .concurrency(N)
            .handler(&queue, move |job: Job| {
                let (b, n, m) = (b.clone(), n.clone(), m.clone());
                async move {
                    let running = n.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(running, Ordering::SeqCst);
                    // Passes only when N handlers are here at once.
                    job.cancellable(b.wait()).await?;
                    n.fetch_sub(1, Ordering::SeqCst);
                    Ok(json!({"n": job.payload["n"]}))
                }
            })
            .build()
            .unwrap(),
    );
    let payloads: Vec<Value> = (0..2 * N).map(|n| json!({"n": n})).collect();
    let ids = enqueue_batch(&app, &queue, &payloads, BatchOptions::new())
        .await
        .unwrap();
    wait_for(
        "two rounds of N jobs in flight together",
        Duration::from_secs(20),
        || async { count_in_state(&admin, &ids, "completed").await == ids.len() as i64 },
    )
    .await;
    assert_eq!(
        max.load(Ordering::SeqCst),
        N,
        "at most N at once, and N reached"
    );
    stop(handle, run, &admin).await;
}

#[tokio::test]
async fn results_errors_panics_routing_and_retry_delays() {
    let (app, admin) = (app().await, admin().await);
    let queue = unique("outcomes");
    let (handle, run) = start(
        Worker::builder(dsn())
            .queues([&queue])
            .concurrency(4)
            // Jobs without a kind go to the handler named after their queue.
            .handler(&queue, |job: Job| async move {
                Ok(json!({"by": "queue", "n": job.payload["n"]}))
            })
            .handler("ok", |job: Job| async move {
                Ok(json!({"by": "kind", "attempt": job.attempt}))
            })
            .handler("boom", |_job: Job| async move {
                Err::<Value, _>(JobError::new("Boom", "went wrong"))
            })
            .handler("parse", |job: Job| async move {
                let n: i32 = job.payload["n"].as_str().unwrap_or("").parse()?;
                Ok(json!(n))
            })
            .handler("panic", |job: Job| async move {
                if job.payload["explode"] == json!(true) {
                    panic!("handler exploded");
                }
                Ok(json!(null))
            })
            .handler("later", |job: Job| async move {
                if job.attempt == 1 {
                    return Err(JobError::retry_in(Duration::from_millis(3500)));
                }
                Ok(json!({"attempt": job.attempt}))
            })
            .build()
            .unwrap(),
    );
    let once = || EnqueueOptions::new().max_attempts(1);
    let by_queue = enqueue(&app, &queue, &json!({"n": 7}), once())
        .await
        .unwrap()
        .unwrap();
    let by_kind = enqueue(&app, &queue, &json!({}), once().kind("ok"))
        .await
        .unwrap()
        .unwrap();
    let boom = enqueue(&app, &queue, &json!({}), once().kind("boom"))
        .await
        .unwrap()
        .unwrap();
    let parse = enqueue(&app, &queue, &json!({"n": "x"}), once().kind("parse"))
        .await
        .unwrap()
        .unwrap();
    let panic = enqueue(
        &app,
        &queue,
        &json!({"explode": true}),
        once().kind("panic"),
    )
    .await
    .unwrap()
    .unwrap();
    let nobody = enqueue(
        &app,
        &queue,
        &json!({}),
        EnqueueOptions::new().kind("nobody"),
    )
    .await
    .unwrap()
    .unwrap();
    let later = enqueue(
        &app,
        &queue,
        &json!({}),
        EnqueueOptions::new().kind("later"),
    )
    .await
    .unwrap()
    .unwrap();

    let finished = [by_queue, by_kind, boom, parse, panic, nobody];
    wait_for("six jobs finished", Duration::from_secs(10), || async {
        count_in_state(&admin, &finished, "completed").await
            + count_in_state(&admin, &finished, "dead").await
            == 6
    })
    .await;
    assert_eq!(
        result(&admin, by_queue).await,
        Some(json!({"by": "queue", "n": 7}))
    );
    assert_eq!(
        result(&admin, by_kind).await,
        Some(json!({"by": "kind", "attempt": 1}))
    );
    let error = |id: i64| {
        let admin = &admin;
        async move {
            let row = admin
                .query_one(
                    "SELECT state, attempt, last_error FROM jobq.jobs WHERE id = $1",
                    &[&id],
                )
                .await
                .unwrap();
            (
                row.get::<_, String>(0),
                row.get::<_, i32>(1),
                row.get::<_, Value>(2),
            )
        }
    };
    assert_eq!(
        error(boom).await,
        (
            "dead".into(),
            1,
            json!({"type": "Boom", "message": "went wrong"})
        )
    );
    assert_eq!(
        error(parse).await,
        (
            "dead".into(),
            1,
            json!({"type": "ParseIntError", "message": "invalid digit found in string"})
        )
    );
    assert_eq!(
        error(panic).await,
        (
            "dead".into(),
            1,
            json!({"type": "Panic", "message": "handler exploded"})
        )
    );
    let (nobody_state, attempt, last_error) = error(nobody).await;
    assert_eq!(
        (nobody_state.as_str(), attempt),
        ("dead", 1),
        "NoHandler is discarded, not retried"
    );
    assert_eq!(last_error["type"], "NoHandler");

    // The retry waits for the handler's delay, measured from the failure the server recorded.
    wait_for(
        "the first attempt to fail",
        Duration::from_secs(10),
        || async {
            let row = admin
                .query_one(
                    "SELECT state = 'ready' AND attempt = 1 FROM jobq.jobs WHERE id = $1",
                    &[&later],
                )
                .await
                .unwrap();
            row.get::<_, bool>(0)
        },
    )
    .await;
    let delay: f64 = admin
        .query_one(
            "SELECT extract(epoch FROM run_at - (errors->0->>'at')::timestamptz)::float8 FROM jobq.jobs WHERE id = $1",
            &[&later],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        (3.4..3.6).contains(&delay),
        "retry_in 3.5 s, run_at {delay} s after the failure"
    );
    wait_for("the retry to complete", Duration::from_secs(10), || async {
        state(&admin, later).await == "completed"
    })
    .await;
    let waited: bool = admin
        .query_one(
            "SELECT started_at >= run_at FROM jobq.jobs WHERE id = $1",
            &[&later],
        )
        .await
        .unwrap()
        .get(0);
    assert!(waited, "the second attempt started once due");
    assert_eq!(result(&admin, later).await, Some(json!({"attempt": 2})));
    stop(handle, run, &admin).await;
}

#[tokio::test]
async fn a_cancel_reaches_the_running_handler() {
    let (app, admin) = (app().await, admin().await);
    let queue = unique("cancel");
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let stopped = Arc::new(AtomicBool::new(false));
    let flag = stopped.clone();
    let (handle, run) = start(
        Worker::builder(dsn())
            .queues([&queue])
            .handler(&queue, move |job: Job| {
                let (started_tx, flag) = (started_tx.clone(), flag.clone());
                async move {
                    started_tx.send(job.id).unwrap();
                    job.cancelled().await;
                    flag.store(true, Ordering::SeqCst);
                    Err::<Value, _>(JobError::cancelled())
                }
            })
            .build()
            .unwrap(),
    );
    let id = enqueue(&app, &queue, &json!({}), EnqueueOptions::new())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), started.recv())
            .await
            .unwrap(),
        Some(id)
    );
    assert_eq!(cancel(&app, id).await.unwrap(), Some(JobState::Executing));
    wait_for(
        "the job to be cancelled",
        Duration::from_secs(10),
        || async { state(&admin, id).await == "cancelled" },
    )
    .await;
    assert!(
        stopped.load(Ordering::SeqCst),
        "the handler saw its token fire"
    );
    let error: Value = admin
        .query_one("SELECT last_error FROM jobq.jobs WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(error["type"], "Cancelled");
    stop(handle, run, &admin).await;
}

#[tokio::test]
async fn a_reaped_worker_registers_again_and_drops_what_it_held() {
    let (app, admin) = (app().await, admin().await);
    let queue = unique("reaped");
    let runs = Arc::new(AtomicUsize::new(0));
    let first_run_stopped = Arc::new(AtomicBool::new(false));
    let events = Arc::new(Mutex::new(Vec::new()));
    let (r, f, e) = (runs.clone(), first_run_stopped.clone(), events.clone());
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (handle, run) = start(
        Worker::builder(dsn())
            .queues([&queue])
            .concurrency(1)
            .on_event(move |event| e.lock().unwrap().push(event.clone()))
            .handler(&queue, move |job: Job| {
                let (r, f, started_tx) = (r.clone(), f.clone(), started_tx.clone());
                async move {
                    let run = r.fetch_add(1, Ordering::SeqCst) + 1;
                    if run == 1 {
                        started_tx.send(job.worker_id).unwrap();
                        job.cancelled().await;
                        f.store(true, Ordering::SeqCst);
                        // A dropped run's outcome is never reported.
                        return Err(JobError::msg("the first run must not be reported"));
                    }
                    Ok(json!({"run": run}))
                }
            })
            .build()
            .unwrap(),
    );
    let id = enqueue(&app, &queue, &json!({}), EnqueueOptions::new())
        .await
        .unwrap()
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), started.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(handle.worker_id(), Some(first));

    // An administrator unregisters the worker under its feet: its next call gets JQ001.
    assert_eq!(unregister_worker(&admin, first).await.unwrap(), 1);
    wait_for(
        "the job to run again and complete",
        Duration::from_secs(15),
        || async { state(&admin, id).await == "completed" },
    )
    .await;
    assert!(
        first_run_stopped.load(Ordering::SeqCst),
        "the dropped run's token fired"
    );
    assert_eq!(result(&admin, id).await, Some(json!({"run": 2})));
    let row = admin
        .query_one(
            "SELECT worker_id, errors FROM jobq.jobs WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    let second: uuid::Uuid = row.get(0);
    assert_ne!(second, first, "completed by the new registration");
    assert_eq!(
        row.get::<_, Option<Value>>(1),
        None,
        "the dropped run's error was not reported"
    );
    assert_eq!(handle.worker_id(), Some(second));
    let events = events.lock().unwrap().clone();
    for expected in [
        WorkerEvent::Registered { worker: first },
        WorkerEvent::Reaped { worker: first },
        WorkerEvent::Dropped { jobs: vec![id] },
        WorkerEvent::Registered { worker: second },
        WorkerEvent::Completed { jobs: vec![id] },
    ] {
        assert!(
            events.contains(&expected),
            "{expected:?} missing from {events:?}"
        );
    }
    stop(handle, run, &admin).await;
}

#[tokio::test]
async fn a_lost_connection_is_reopened_and_the_worker_registers_again() {
    let (app, admin) = (app().await, admin().await);
    let (queue, name) = (unique("reconnect"), unique("reconnect-worker"));
    let events = Arc::new(Mutex::new(Vec::new()));
    let e = events.clone();
    let (handle, run) = start(
        Worker::builder(dsn())
            .name(&name)
            .queues([&queue])
            .on_event(move |event| e.lock().unwrap().push(event.clone()))
            .handler(&queue, |job: Job| async move {
                Ok(json!({"n": job.payload["n"]}))
            })
            .build()
            .unwrap(),
    );
    wait_for("the registration", Duration::from_secs(10), || async {
        handle.worker_id().is_some()
    })
    .await;
    let first = handle.worker_id().unwrap();

    // The job loop's session (its application_name is the worker's name) is terminated.
    let killed: i64 = admin
        .query_one(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    wait_for("a new registration", Duration::from_secs(15), || async {
        handle.worker_id().is_some_and(|w| w != first)
    })
    .await;
    assert!(events.lock().unwrap().iter().any(|e| matches!(e, WorkerEvent::Disconnected { retry_in, .. } if *retry_in == Duration::from_secs(1))));
    let gone = || async {
        let left: i64 = admin
            .query_one("SELECT count(*) FROM jobq.workers WHERE id = $1", &[&first])
            .await
            .unwrap()
            .get(0);
        left == 0
    };
    if edition() == "sql" {
        // The SQL edition finds a bound worker whose session ended dead at the next pass, not
        // at once (docs/sql-edition.md, "Bound workers"): here the pass a heartbeat of the new
        // registration runs.
        wait_for(
            "the old registration to be reaped at the next pass",
            Duration::from_secs(10),
            gone,
        )
        .await;
    } else {
        assert!(gone().await, "the old registration went with its session");
    }

    let id = enqueue(&app, &queue, &json!({"n": 1}), EnqueueOptions::new())
        .await
        .unwrap()
        .unwrap();
    wait_for("the job to complete", Duration::from_secs(10), || async {
        state(&admin, id).await == "completed"
    })
    .await;
    assert_eq!(result(&admin, id).await, Some(json!({"n": 1})));
    stop(handle, run, &admin).await;
}

/// The pid of the worker `name`'s job connection once it waits inside the server.
async fn waiting_pid(admin: &Client, name: &str) -> i32 {
    let pid = || async {
        admin
            .query_opt(
                "SELECT pid FROM pg_stat_activity
                  WHERE application_name = $1 AND state = 'active' AND wait_event = ANY($2)",
                &[&name, &waiting_events()],
            )
            .await
            .unwrap()
            .map(|r| r.get::<_, i32>(0))
    };
    wait_for("the worker waiting in its checkout", Duration::from_secs(10), || async {
        pid().await.is_some()
    })
    .await;
    pid().await.expect("still waiting")
}

#[tokio::test]
async fn a_stop_ends_the_wait_without_an_error_on_the_server() {
    // The waiting checkout is ended by jobq_stop_checkouts, not cancelled: nothing the
    // worker's session did is logged as an error. (The wait is longer than `stop` waits for
    // the drain: a worker whose wait ran out instead would fail there.)
    let admin = admin().await;
    let offset = std::fs::metadata(server_log()).unwrap().len();
    let (queue, name) = (unique("idle"), unique("idle-worker"));
    let (handle, run) = start(
        Worker::builder(dsn())
            .name(&name)
            .queues([&queue])
            .wait(Duration::from_secs(60))
            .handler(&queue, |_job: Job| async move { Ok(json!(null)) })
            .build()
            .unwrap(),
    );
    let pid = waiting_pid(&admin, &name).await;
    stop(handle, run, &admin).await;
    let log = std::fs::read(server_log()).unwrap();
    let written = String::from_utf8_lossy(&log[offset as usize..]);
    // The default log_line_prefix names the backend's pid: "... [pid] ERROR: ...".
    let mine: Vec<&str> = written.lines().filter(|l| l.contains(&format!("[{pid}]"))).collect();
    assert!(
        mine.iter().all(|l| !l.contains("ERROR") && !l.contains("canceling statement")),
        "{mine:#?}"
    );
}

#[tokio::test]
async fn a_job_committed_as_the_worker_stops_is_never_started() {
    // A stop and a job's commit at the same moment, many times: whichever reaches the server
    // first, the job is not started; it is left ready, its attempt not counted.
    let (admin, app) = (admin().await, app().await);
    let queue = unique("stopping");
    for round in 0..12 {
        let ran = Arc::new(AtomicUsize::new(0));
        let name = unique("stopping-worker");
        let counter = ran.clone();
        let (handle, run) = start(
            Worker::builder(dsn())
                .name(&name)
                .queues([&queue])
                .wait(Duration::from_secs(60))
                .handler(&queue, move |_job: Job| {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, Ordering::SeqCst);
                        Ok(json!(null))
                    }
                })
                .build()
                .unwrap(),
        );
        waiting_pid(&admin, &name).await;
        handle.shutdown();
        let id = enqueue(&app, &queue, &json!({"round": round}), EnqueueOptions::new())
            .await
            .unwrap()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(15), run)
            .await
            .expect("the drain ends")
            .unwrap()
            .expect("run returns Ok");
        assert_eq!(ran.load(Ordering::SeqCst), 0, "round {round}: the stopping worker started a job");
        let row = admin
            .query_one(
                "SELECT state, attempt, interrupted_at IS NULL FROM jobq.jobs WHERE id = $1",
                &[&id],
            )
            .await
            .unwrap();
        assert_eq!(
            (row.get::<_, String>(0), row.get::<_, i32>(1), row.get::<_, bool>(2)),
            ("ready".to_string(), 0, true),
            "round {round}"
        );
        assert_eq!(cancel(&app, id).await.unwrap(), Some(JobState::Cancelled));
    }
}

#[tokio::test]
async fn pooled_mode_runs_jobs_through_pgbouncer() {
    let (app, admin) = (app().await, admin().await);
    let queue = unique("pooled");
    let (handle, run) = start(
        Worker::builder(pooler_dsn())
            .queues([&queue])
            .concurrency(4)
            .pooled(true)
            .wait(Duration::from_secs(1))
            .handler(&queue, |job: Job| async move {
                Ok(json!({"n": job.payload["n"]}))
            })
            .build()
            .unwrap(),
    );
    let payloads: Vec<Value> = (0..20).map(|n| json!({"n": n})).collect();
    let ids = enqueue_batch(&app, &queue, &payloads, BatchOptions::new())
        .await
        .unwrap();
    wait_for(
        "20 jobs through the pooler",
        Duration::from_secs(20),
        || async { count_in_state(&admin, &ids, "completed").await == 20 },
    )
    .await;
    let worker = handle.worker_id().unwrap();
    let bound: bool = admin
        .query_one(
            "SELECT backend_pid IS NOT NULL FROM jobq.workers WHERE id = $1",
            &[&worker],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!bound, "pooled: not bound to a session");
    // Idle now: jobs enqueued later reach it through its waiting checkouts.
    let more = enqueue_batch(&app, &queue, &payloads[..5], BatchOptions::new())
        .await
        .unwrap();
    wait_for("5 more jobs", Duration::from_secs(20), || async {
        count_in_state(&admin, &more, "completed").await == 5
    })
    .await;
    assert_eq!(result(&admin, more[4]).await, Some(json!({"n": 4})));
    stop(handle, run, &admin).await;
}

#[tokio::test]
async fn a_claim_the_worker_never_received_goes_back_while_it_idles() {
    let (app, admin) = (app().await, admin().await);
    let (queue, other) = (unique("holding"), unique("holding-elsewhere"));
    let (handle, run) = start(
        Worker::builder(dsn())
            .queues([&queue])
            .concurrency(4)
            .wait(Duration::from_secs(1))
            .handler(&queue, |job: Job| async move {
                Ok(json!({"n": job.payload["n"]}))
            })
            .build()
            .unwrap(),
    );
    wait_for("the registration", Duration::from_secs(10), || async {
        handle.worker_id().is_some()
    })
    .await;
    let worker = handle.worker_id().unwrap();

    // A checkout committed for the worker whose reply it never got: the superuser claims, for
    // it, a job of a queue it does not take, while it idles in waiting checkouts.
    let stray = enqueue(&admin, &other, &json!({}), EnqueueOptions::new())
        .await
        .unwrap()
        .unwrap();
    let claimed: Vec<i64> = admin
        .query(
            "SELECT id FROM jobq_checkout($1::uuid, ARRAY[$2])",
            &[&worker, &other],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(claimed, vec![stray]);
    assert_eq!(state(&admin, stray).await, "executing");

    // Its heartbeats' `holding` (without the stray job) puts it back.
    wait_for(
        "the stray claim back in ready, interrupted",
        Duration::from_secs(10),
        || async {
            admin
                .query_one(
                    "SELECT state = 'ready' AND interrupted_at IS NOT NULL FROM jobq.jobs
                      WHERE id = $1",
                    &[&stray],
                )
                .await
                .unwrap()
                .get::<_, bool>(0)
        },
    )
    .await;

    // The worker went on as before.
    let id = enqueue(&app, &queue, &json!({"n": 1}), EnqueueOptions::new())
        .await
        .unwrap()
        .unwrap();
    wait_for("the job to complete", Duration::from_secs(10), || async {
        state(&admin, id).await == "completed"
    })
    .await;
    assert_eq!(result(&admin, id).await, Some(json!({"n": 1})));
    assert_eq!(handle.worker_id(), Some(worker), "the same registration");
    cancel(&admin, stray).await.unwrap();
    stop(handle, run, &admin).await;
}

#[tokio::test]
async fn builder_refuses_bad_settings() {
    let ok = || Worker::builder(dsn()).handler("q", |_job: Job| async move { Ok(json!(null)) });
    for (builder, what) in [
        (ok().concurrency(0), "concurrency"),
        (ok().wait(Duration::ZERO), "wait"),
        (ok().wait(Duration::from_secs(3601)), "wait"),
        (Worker::builder(dsn()), "handler"),
        (
            Worker::builder("postgresql://[bad")
                .handler("q", |_job: Job| async move { Ok(json!(null)) }),
            "connection string",
        ),
    ] {
        match builder.build() {
            Err(Error::Config(message)) => assert!(message.contains(what), "{message}"),
            other => panic!("expected a Config error about {what}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn durable_steps_replay_across_suspensions() {
    let (app, admin) = (app().await, admin().await);
    let queue = unique("durable");
    let kids = format!("{queue}-kids");
    let charged = Arc::new(AtomicUsize::new(0));
    let counter = charged.clone();
    let event = format!("{queue}:delivered");
    let awaited = event.clone();
    let kid_queue = kids.clone();
    let (handle, run) = start(
        Worker::builder(dsn())
            .queues([&queue, &kids])
            .concurrency(4)
            .handler("kid", |job: Job| async move {
                Ok(job.payload["n"].as_i64().unwrap_or(0) * 10)
            })
            .handler("order", move |job: Job| {
                let (counter, awaited, kid_queue) =
                    (counter.clone(), awaited.clone(), kid_queue.clone());
                async move {
                    let steps = job.durable()?;
                    let charge: String = steps
                        .step("charge", || async {
                            counter.fetch_add(1, Ordering::SeqCst);
                            Ok("ch_1".to_string())
                        })
                        .await?;
                    steps.sleep("cool-off", Duration::from_millis(200)).await?;
                    let payloads: Vec<Value> = (0..3).map(|n| json!({"n": n})).collect();
                    let ids = steps
                        .spawn("ship", &kid_queue, &payloads, Some("kid"))
                        .await?;
                    let shipped = steps.gather(&ids).await?;
                    let delivered = steps.await_event(&awaited, None).await?;
                    Ok(json!({
                        "charge": charge,
                        "shipped": shipped.iter().map(|r| r.result.clone()).collect::<Vec<_>>(),
                        "delivered": delivered,
                    }))
                }
            })
            .build()
            .unwrap(),
    );
    let id = enqueue(
        &app,
        &queue,
        &json!({}),
        EnqueueOptions::new().kind("order"),
    )
    .await
    .unwrap()
    .unwrap();
    wait_for(
        "the order to await its event",
        Duration::from_secs(20),
        || async {
            admin
                .query_opt(
                    "SELECT 1 FROM jobq.blocked WHERE job_id = $1 AND event IS NOT NULL",
                    &[&id],
                )
                .await
                .unwrap()
                .is_some()
        },
    )
    .await;
    assert_eq!(
        emit_event(&app, &event, Some(&json!({"by": "van"})))
            .await
            .unwrap(),
        1
    );
    wait_for("the order to complete", Duration::from_secs(20), || async {
        state(&admin, id).await == "completed"
    })
    .await;
    assert_eq!(
        result(&admin, id).await,
        Some(json!({"charge": "ch_1", "shipped": [0, 10, 20], "delivered": {"by": "van"}}))
    );
    let attempt: i32 = admin
        .query_one("SELECT attempt FROM jobq.jobs WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(attempt, 1, "suspensions did not count as attempts");
    assert_eq!(
        charged.load(Ordering::SeqCst),
        1,
        "the step ran once across the replays"
    );
    let spawned: i64 = admin
        .query_one("SELECT count(*) FROM jobq.jobs WHERE queue = $1", &[&kids])
        .await
        .unwrap()
        .get(0);
    assert_eq!(spawned, 3, "spawned once");
    stop(handle, run, &admin).await;
}

#[tokio::test]
async fn a_dead_workers_job_comes_back_to_a_running_worker_with_nobody_reaping() {
    // The SQL edition has no background worker: the passes that reap dead workers are run by
    // the workers' heartbeats (at least every jobq.reap_interval there), so a database whose
    // only activity is this library's worker is served; nothing here calls jobq_reap(). (The
    // other tests of this binary run meanwhile: their workers beat too, and one of them calls
    // jobq_reap() once.) On the extension its background worker reaps too: the same holds in
    // both editions.
    let (app, admin) = (app().await, admin().await);
    let queue = unique("served");
    // A second worker, registered in SQL and not bound to its session, takes a job of the
    // queue and dies: it never beats again.
    let doomed = register_worker(
        &app,
        RegisterOptions::new().name("doomed").bind_to_session(false),
    )
    .await
    .unwrap();
    let id = enqueue(&app, &queue, &json!({"n": 1}), EnqueueOptions::new())
        .await
        .unwrap()
        .unwrap();
    let taken = checkout(&app, doomed, CheckoutOptions::new().queues([&queue]))
        .await
        .unwrap();
    assert_eq!(taken.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id]);
    let (handle, run) = start(
        Worker::builder(dsn())
            .queues([&queue])
            .concurrency(2)
            .handler(&queue, |job: Job| async move {
                Ok(json!({"attempt": job.attempt}))
            })
            .build()
            .unwrap(),
    );
    wait_for("the registration", Duration::from_secs(10), || async {
        handle.worker_id().is_some()
    })
    .await;
    assert_eq!(handle.server_edition(), Some(edition()));
    // Once jobq.heartbeat_timeout (3 s) has passed, a pass reaps the dead worker and requeues
    // its job, which the running worker then takes and completes.
    wait_for("the job to complete", Duration::from_secs(20), || async {
        state(&admin, id).await == "completed"
    })
    .await;
    let row = admin
        .query_one(
            "SELECT result, worker_id, interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<Value>>(0), Some(json!({"attempt": 2})));
    assert_eq!(row.get::<_, Option<uuid::Uuid>>(1), handle.worker_id());
    assert!(row.get::<_, bool>(2), "interrupted_at is set");
    let left: i64 = admin
        .query_one(
            "SELECT count(*) FROM jobq.workers WHERE id = $1",
            &[&doomed],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the dead worker was reaped");
    stop(handle, run, &admin).await;
}
