//! `jobq_client::testing`: `drain` (the due jobs of some queues run inline, through the SQL
//! calls) and `enqueued` (the jobs waiting in a queue), against the real server.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jobq_client::testing::{drain, enqueued, make_job, DrainError, DrainOptions, EnqueuedFilter};
use jobq_client::tokio_postgres::{self, Client};
use jobq_client::*;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::common::*;

async fn put<C: tokio_postgres::GenericClient>(
    c: &C,
    queue: &str,
    payload: Value,
    options: EnqueueOptions,
) -> i64 {
    enqueue(c, queue, &payload, options)
        .await
        .unwrap()
        .expect("an id")
}

/// Whether the worker that ran job `id` last is still registered.
async fn runner_registered(admin: &Client, id: i64) -> bool {
    let worker: Uuid = admin
        .query_one("SELECT worker_id FROM jobq.jobs WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    admin
        .query_one(
            "SELECT count(*) > 0 FROM jobq.workers WHERE id = $1",
            &[&worker],
        )
        .await
        .unwrap()
        .get(0)
}

#[derive(Debug)]
struct PaymentDeclined(i64);

impl std::fmt::Display for PaymentDeclined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad {}", self.0)
    }
}

impl std::error::Error for PaymentDeclined {}

#[tokio::test]
async fn drain_completes_fails_and_discards_each_job_as_a_worker_would() {
    let (app, admin) = (app().await, admin().await);
    let q = unique("drain");
    let ok = put(
        &app,
        &q,
        json!({"n": 2}),
        EnqueueOptions::new().kind("double"),
    )
    .await;
    let boom = put(
        &app,
        &q,
        json!({"n": 3}),
        EnqueueOptions::new().kind("boom"),
    )
    .await;
    let last = put(
        &app,
        &q,
        json!({"n": 4}),
        EnqueueOptions::new().kind("boom").max_attempts(1),
    )
    .await;
    let orphan = put(&app, &q, json!({}), EnqueueOptions::new().kind("nobody")).await;
    let panics = put(&app, &q, json!({}), EnqueueOptions::new().kind("panics")).await;
    let plain = put(&app, &q, json!({"n": 5}), EnqueueOptions::new()).await; // routed by its queue

    let options = DrainOptions::new([q.clone()])
        .handler("double", |job: Job| async move {
            Ok(json!({"n": job.payload["n"].as_i64().unwrap_or_default() * 2}))
        })
        .handler("boom", |job: Job| async move {
            let n = job.payload["n"].as_i64().unwrap_or_default();
            Err::<(), _>(PaymentDeclined(n).into())
        })
        .handler("panics", |_job: Job| async move {
            if true {
                panic!("the handler broke");
            }
            Ok(())
        })
        .handler(q.clone(), |_job: Job| async move { Ok(()) });
    let drained = drain(&app, options).await.unwrap();

    let ids: Vec<i64> = drained.jobs.iter().map(|d| d.job.id).collect();
    assert_eq!(ids, [ok, boom, last, orphan, panics, plain]);
    let states: Vec<Option<JobState>> = drained.jobs.iter().map(|d| d.state.clone()).collect();
    use JobState::*;
    assert_eq!(
        states,
        [
            Some(Completed),
            Some(Ready),
            Some(Dead),
            Some(Dead),
            Some(Ready),
            Some(Completed)
        ]
    );
    let completed: Vec<i64> = drained.completed().iter().map(|d| d.job.id).collect();
    assert_eq!(completed, [ok, plain]);
    let failed: Vec<i64> = drained.failed().iter().map(|d| d.job.id).collect();
    assert_eq!(failed, [boom, last, orphan, panics]);
    assert_eq!(drained.jobs[0].result, Some(json!({"n": 4})));
    assert_eq!(drained.jobs[0].job.attempt, 1);
    let error = |i: usize| drained.jobs[i].error.as_ref().unwrap().to_json();
    assert_eq!(
        error(1),
        json!({"type": "PaymentDeclined", "message": "bad 3"})
    );
    assert_eq!(
        error(3),
        json!({"type": "NoHandler", "message": "no handler for kind 'nobody'"})
    );
    assert_eq!(
        error(4),
        json!({"type": "Panic", "message": "the handler broke"})
    );
    assert_eq!(drained.jobs[5].result, None); // () is stored as NULL

    // The server holds the same story: the calls were jobq_complete and jobq_fail.
    let row = admin
        .query_one("SELECT result FROM jobq.jobs WHERE id = $1", &[&ok])
        .await
        .unwrap();
    assert_eq!(row.get::<_, Value>(0), json!({"n": 4}));
    let row = admin
        .query_one(
            "SELECT state, attempt, run_at > now(), last_error FROM jobq.jobs WHERE id = $1",
            &[&boom],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "ready");
    assert_eq!(row.get::<_, i32>(1), 1);
    assert!(row.get::<_, bool>(2), "retried after the backoff");
    assert_eq!(
        row.get::<_, Value>(3),
        json!({"type": "PaymentDeclined", "message": "bad 3"})
    );
    assert_eq!(state(&admin, plain).await, "completed");
    assert!(
        !runner_registered(&admin, ok).await,
        "the drain unregistered"
    );
}

#[tokio::test]
async fn a_job_a_handler_enqueues_is_drained_in_the_same_call() {
    let (app, admin) = (app().await, admin().await);
    let q = unique("follow");
    let first = put(
        &app,
        &q,
        json!({"step": 1}),
        EnqueueOptions::new().kind("step"),
    )
    .await;
    let queue = q.clone();
    let options = DrainOptions::new([q.clone()]).handler("step", move |job: Job| {
        let queue = queue.clone();
        async move {
            let step = job.payload["step"].as_i64().unwrap_or_default();
            if step < 3 {
                // The follow-up, committed on a connection of the handler's own.
                let own = connect(&dsn()).await;
                enqueue(
                    &own,
                    &queue,
                    &json!({"step": step + 1}),
                    EnqueueOptions::new().kind("step"),
                )
                .await?;
            }
            Ok(step)
        }
    });
    let drained = drain(&app, options).await.unwrap();
    let results: Vec<Option<Value>> = drained.jobs.iter().map(|d| d.result.clone()).collect();
    assert_eq!(results, [Some(json!(1)), Some(json!(2)), Some(json!(3))]);
    assert_eq!(drained.jobs[0].job.id, first);
    assert!(drained
        .jobs
        .iter()
        .all(|d| d.state == Some(JobState::Completed)));
    assert!(enqueued(&app, &q, EnqueuedFilter::new())
        .await
        .unwrap()
        .is_empty());
    assert!(!runner_registered(&admin, first).await);
}

#[tokio::test]
async fn max_jobs_stops_a_runaway_drain_and_gives_the_next_job_back() {
    let (app, admin) = (app().await, admin().await);
    let q = unique("runaway");
    let first = put(
        &app,
        &q,
        json!({"n": 0}),
        EnqueueOptions::new().kind("again"),
    )
    .await;
    let queue = q.clone();
    let options = DrainOptions::new([q.clone()])
        .handler("again", move |job: Job| {
            let queue = queue.clone();
            async move {
                let own = connect(&dsn()).await; // enqueues its successor, forever
                let n = job.payload["n"].as_i64().unwrap_or_default();
                enqueue(
                    &own,
                    &queue,
                    &json!({"n": n + 1}),
                    EnqueueOptions::new().kind("again"),
                )
                .await?;
                Ok(())
            }
        })
        .max_jobs(4);
    let error = drain(&app, options.clone()).await.unwrap_err();
    let DrainError::LimitReached { max_jobs, drained } = error else {
        panic!("not the limit: {error}");
    };
    assert_eq!(max_jobs, 4);
    let ns: Vec<i64> = drained
        .jobs
        .iter()
        .map(|d| d.job.payload["n"].as_i64().unwrap())
        .collect();
    assert_eq!(ns, [0, 1, 2, 3]);
    // The fifth was checked out but not run: unregistering gave it back, its attempt uncounted.
    let waiting = enqueued(&app, &q, EnqueuedFilter::new()).await.unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].payload, json!({"n": 4}));
    assert_eq!(
        (waiting[0].state.clone(), waiting[0].attempt),
        (JobState::Ready, 0)
    );
    let interrupted: bool = admin
        .query_one(
            "SELECT interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1",
            &[&waiting[0].id],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!interrupted);
    assert!(!runner_registered(&admin, first).await);

    let refused = drain(&app, options.max_jobs(0)).await.unwrap_err();
    assert!(
        matches!(refused, DrainError::Jobq(Error::Config(_))),
        "{refused}"
    );
    let none: [&str; 0] = [];
    let refused = drain(&app, DrainOptions::new(none)).await.unwrap_err();
    assert!(
        matches!(refused, DrainError::Jobq(Error::Config(_))),
        "{refused}"
    );
}

#[tokio::test]
async fn jobs_not_due_are_left_alone_and_retry_in_is_reported() {
    let (app, admin) = (app().await, admin().await);
    let q = unique("retry");
    let later = put(
        &app,
        &q,
        json!({"later": true}),
        EnqueueOptions::new()
            .kind("mail")
            .run_at(SystemTime::now() + Duration::from_secs(3600)),
    )
    .await;
    let now = put(
        &app,
        &q,
        json!({"later": false}),
        EnqueueOptions::new().kind("mail"),
    )
    .await;
    let options = DrainOptions::new([q.clone()]).handler("mail", |_job: Job| async move {
        Err::<(), _>(
            JobError::new("Busy", "the API is busy").with_retry_in(Duration::from_secs(600)),
        )
    });
    let drained = drain(&app, options).await.unwrap();
    assert_eq!(
        drained.jobs.len(),
        1,
        "the retry is due in 10 minutes: not again in this drain"
    );
    let only = &drained.jobs[0];
    assert_eq!(
        (only.job.id, only.state.clone()),
        (now, Some(JobState::Ready))
    );
    assert_eq!(
        only.error.as_ref().unwrap().to_json(),
        json!({"type": "Busy", "message": "the API is busy"})
    );
    let retried_late: bool = admin
        .query_one(
            "SELECT run_at > now() + interval '9 minutes' FROM jobq.jobs WHERE id = $1",
            &[&now],
        )
        .await
        .unwrap()
        .get(0);
    assert!(retried_late);
    let untouched: i32 = admin
        .query_one("SELECT attempt FROM jobq.jobs WHERE id = $1", &[&later])
        .await
        .unwrap()
        .get(0);
    assert_eq!(untouched, 0);
}

#[tokio::test]
async fn inside_begin_a_drain_sees_uncommitted_jobs_and_a_rollback_undoes_everything() {
    let admin = admin().await;
    let q = unique("tx");
    // One client in a transaction of the test's own, shared with the handlers: their
    // follow-up jobs join the transaction too.
    let db = Arc::new(app().await);
    db.batch_execute("BEGIN").await.unwrap();
    put(
        &*db,
        &q,
        json!({"order": 7}),
        EnqueueOptions::new().kind("charge"),
    )
    .await;
    let (shared, queue) = (db.clone(), q.clone());
    let options = DrainOptions::new([q.clone()])
        .handler("charge", move |job: Job| {
            let (db, queue) = (shared.clone(), queue.clone());
            async move {
                enqueue(
                    &*db,
                    &queue,
                    &job.payload,
                    EnqueueOptions::new().kind("receipt"),
                )
                .await?;
                Ok(json!({"charged": true}))
            }
        })
        .handler("receipt", |_job: Job| async move { Ok("sent") });
    let drained = drain(&*db, options).await.unwrap();
    let seen: Vec<(Option<String>, Option<JobState>)> = drained
        .jobs
        .iter()
        .map(|d| (d.job.kind.clone(), d.state.clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (Some("charge".into()), Some(JobState::Completed)),
            (Some("receipt".into()), Some(JobState::Completed))
        ]
    );
    // Nothing is committed: another session sees neither the jobs nor the drain's worker.
    let count = "SELECT count(*) FROM jobq.jobs WHERE queue = $1";
    let visible: i64 = admin.query_one(count, &[&q]).await.unwrap().get(0);
    assert_eq!(visible, 0);
    db.batch_execute("ROLLBACK").await.unwrap();
    let left: i64 = db.query_one(count, &[&q]).await.unwrap().get(0);
    assert_eq!(left, 0);
}

#[tokio::test]
async fn enqueued_filters_by_kind_and_payload_containment() {
    let app = app().await;
    let q = unique("enqueued");
    let mail = put(
        &app,
        &q,
        json!({"to": "ada@example.com", "lang": "en"}),
        EnqueueOptions::new().kind("welcome").priority(3),
    )
    .await;
    let other = put(
        &app,
        &q,
        json!({"to": "bob@example.com", "lang": "en"}),
        EnqueueOptions::new().kind("welcome"),
    )
    .await;
    let later = put(
        &app,
        &q,
        json!({"to": "ada@example.com"}),
        EnqueueOptions::new()
            .kind("reminder")
            .run_at(SystemTime::now() + Duration::from_secs(86_400)),
    )
    .await;
    let child = put(
        &app,
        &q,
        json!({"after": mail}),
        EnqueueOptions::new().kind("audit").depends_on([mail]),
    )
    .await;
    put(
        &app,
        &format!("{q}-other"),
        json!({"to": "ada@example.com"}),
        EnqueueOptions::new().kind("welcome"),
    )
    .await;

    let ids = |filter: EnqueuedFilter| {
        let (app, q) = (&app, &q);
        async move {
            enqueued(app, q, filter)
                .await
                .unwrap()
                .iter()
                .map(|j| j.id)
                .collect::<Vec<i64>>()
        }
    };
    assert_eq!(
        ids(EnqueuedFilter::new()).await,
        [mail, other, later, child]
    );
    assert_eq!(
        ids(EnqueuedFilter::new().kind("welcome")).await,
        [mail, other]
    );
    let ada = json!({"to": "ada@example.com"});
    assert_eq!(
        ids(EnqueuedFilter::new().payload(ada.clone())).await,
        [mail, later]
    );
    let eve = json!({"to": "eve@example.com"});
    assert!(ids(EnqueuedFilter::new().kind("welcome").payload(eve))
        .await
        .is_empty());
    let found = enqueued(&app, &q, EnqueuedFilter::new().kind("welcome").payload(ada))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    let f = &found[0];
    assert_eq!(
        (f.id, f.queue.as_str(), f.kind.as_deref(), f.priority),
        (mail, q.as_str(), Some("welcome"), 3)
    );
    assert_eq!(f.payload, json!({"to": "ada@example.com", "lang": "en"}));
    assert_eq!(
        (f.state.clone(), f.scheduled, f.attempt, f.max_attempts),
        (JobState::Ready, false, 0, 25)
    );
    let reminder = &enqueued(&app, &q, EnqueuedFilter::new().kind("reminder"))
        .await
        .unwrap()[0];
    assert!(reminder.scheduled);
    let audit = &enqueued(&app, &q, EnqueuedFilter::new().kind("audit"))
        .await
        .unwrap()[0];
    assert_eq!(
        (audit.state.clone(), audit.depends_on.clone()),
        (JobState::Blocked, Some(vec![mail]))
    );

    // Drained jobs are no longer waiting; the child, ready once its parent completed, is
    // drained in the same call; the scheduled one stays.
    let options = DrainOptions::new([q.clone()])
        .handler("welcome", |_job: Job| async move { Ok(()) })
        .handler("audit", |_job: Job| async move { Ok(()) });
    let drained = drain(&app, options).await.unwrap();
    let ran: Vec<i64> = drained.jobs.iter().map(|d| d.job.id).collect();
    assert_eq!(ran, [other, mail, child]); // priority 0 before 3
    assert_eq!(ids(EnqueuedFilter::new()).await, [later]);
}

#[tokio::test]
async fn a_transaction_is_read_and_drained_in_place() {
    let mut app = app().await;
    let q = unique("enqueued-tx");
    let tx = app.transaction().await.unwrap();
    let id = put(&tx, &q, json!({"x": 1}), EnqueueOptions::new().kind("k")).await;
    let found = enqueued(&tx, &q, EnqueuedFilter::new().kind("k"))
        .await
        .unwrap();
    assert_eq!(found.iter().map(|j| j.id).collect::<Vec<_>>(), [id]);
    let other = admin().await;
    assert!(
        enqueued(&other, &q, EnqueuedFilter::new())
            .await
            .unwrap()
            .is_empty(),
        "not committed"
    );
    let options =
        DrainOptions::new([q.clone()]).handler("k", |job: Job| async move { Ok(job.payload) });
    let drained = drain(&tx, options).await.unwrap();
    assert_eq!(drained.jobs[0].result, Some(json!({"x": 1})));
    tx.rollback().await.unwrap();
    assert!(enqueued(&app, &q, EnqueuedFilter::new())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn make_job_builds_a_job_to_call_a_handler_with() {
    async fn welcome(job: Job) -> Result<Value, JobError> {
        let to = job.payload["to"].clone();
        job.cancellable(async move { json!({ "to": to, "attempt": job.attempt }) })
            .await
    }
    let mut job = make_job("mail", Some("welcome"), json!({"to": "ada@example.com"}));
    assert_eq!(
        (
            job.id,
            job.queue.as_str(),
            job.kind.as_deref(),
            job.priority,
            job.max_attempts
        ),
        (0, "mail", Some("welcome"), 0, 25)
    );
    assert_eq!(job.checkpoints, json!({}));
    job.attempt = 3;
    let stopping = job.clone();
    assert_eq!(
        welcome(job).await.unwrap(),
        json!({"to": "ada@example.com", "attempt": 3})
    );
    stopping.cancellation_token().cancel(); // a handler that stops when its job is cancelled
    assert_eq!(
        welcome(stopping).await.unwrap_err().type_name(),
        "Cancelled"
    );
    let Err(durable) = make_job("q", None, json!({})).durable() else {
        panic!("durable steps without a Worker");
    };
    assert_eq!(durable.type_name(), "NoWorker");
}
