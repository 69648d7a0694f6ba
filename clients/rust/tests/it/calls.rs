//! Every call with its arguments: what the server stores and answers.

use std::time::{Duration, Instant, SystemTime};

use jobq_client::tokio_postgres::Client;
use jobq_client::*;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::common::*;

async fn register(c: &Client, name: &str) -> Uuid {
    register_worker(c, RegisterOptions::new().name(name))
        .await
        .unwrap()
}

#[tokio::test]
async fn enqueue_sends_every_option_by_name() {
    let (app, admin) = (app().await, admin().await);
    let queue = unique("enqueue");
    let at = SystemTime::now() + Duration::from_secs(3600);
    let id = enqueue(
        &app,
        &queue,
        &json!({"to": 1}),
        EnqueueOptions::new()
            .kind("welcome")
            .priority(-3)
            .run_at(at)
            .max_attempts(7)
            .unique_key(unique("uk"))
            .unique_strategy(UniqueStrategy::UntilExecuting)
            .concurrency_key(unique("ck"))
            .concurrency_limit(4)
            .rate_key(unique("rk"))
            .fairness_key("tenant-7"),
    )
    .await
    .unwrap()
    .expect("an id");
    let row = admin
        .query_one(
            "SELECT queue, payload, kind, priority, abs(extract(epoch FROM run_at - $2::timestamptz)) < 0.001,
                    max_attempts, unique_strategy, concurrency_limit, rate_key IS NOT NULL, state, fairness_key
               FROM jobq.jobs WHERE id = $1",
            &[&id, &at],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), queue);
    assert_eq!(row.get::<_, Value>(1), json!({"to": 1}));
    assert_eq!(row.get::<_, String>(2), "welcome");
    assert_eq!(row.get::<_, i32>(3), -3);
    assert!(row.get::<_, bool>(4), "run_at is the one given");
    assert_eq!(row.get::<_, i32>(5), 7);
    assert_eq!(row.get::<_, String>(6), "until_executing");
    assert_eq!(row.get::<_, i32>(7), 4);
    assert!(row.get::<_, bool>(8));
    assert_eq!(row.get::<_, String>(9), "ready");
    assert_eq!(row.get::<_, String>(10), "tenant-7");

    // Unset options keep the server's defaults; run_in counts on the server's clock.
    let id = enqueue(
        &app,
        &queue,
        &json!({}),
        EnqueueOptions::new().run_in(Duration::from_secs(600)),
    )
    .await
    .unwrap()
    .unwrap();
    let row = admin
        .query_one(
            "SELECT kind, priority, max_attempts, unique_key,
                    extract(epoch FROM run_at - clock_timestamp())::float8
               FROM jobq.jobs WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<String>>(0), None);
    assert_eq!(row.get::<_, i32>(1), 0);
    assert_eq!(row.get::<_, i32>(2), 25);
    assert_eq!(row.get::<_, Option<String>>(3), None);
    let due_in: f64 = row.get(4);
    assert!((590.0..=600.0).contains(&due_in), "due in {due_in} s");
}

#[tokio::test]
async fn on_conflict_discard_and_replace() {
    let app = app().await;
    let (queue, key) = (unique("conflict"), unique("key"));
    let first = enqueue(
        &app,
        &queue,
        &json!({"v": 1}),
        EnqueueOptions::new().unique_key(&key),
    )
    .await
    .unwrap()
    .unwrap();
    let discarded = enqueue(
        &app,
        &queue,
        &json!({"v": 2}),
        EnqueueOptions::new()
            .unique_key(&key)
            .on_conflict(OnConflict::Discard),
    )
    .await
    .unwrap();
    assert_eq!(discarded, None);
    let logged = enqueue(
        &app,
        &queue,
        &json!({"v": 3}),
        EnqueueOptions::new()
            .unique_key(&key)
            .on_conflict(OnConflict::Log),
    )
    .await
    .unwrap();
    assert_eq!(logged, None);
    let replaced = enqueue(
        &app,
        &queue,
        &json!({"v": 4}),
        EnqueueOptions::new()
            .unique_key(&key)
            .on_conflict(OnConflict::Replace),
    )
    .await
    .unwrap();
    assert_eq!(replaced, Some(first));
    let payload: Value = app
        .query_one("SELECT payload FROM jobq.jobs WHERE id = $1", &[&first])
        .await
        .unwrap()
        .get(0);
    assert_eq!(payload, json!({"v": 4}));
}

#[tokio::test]
async fn enqueue_batch_returns_ids_in_payload_order() {
    let (app, admin) = (app().await, admin().await);
    let queue = unique("batch");
    let payloads = [json!({"n": 1}), json!({"n": 2}), json!({"n": 3})];
    let ids = enqueue_batch(
        &app,
        &queue,
        &payloads,
        BatchOptions::new()
            .kind("thumb")
            .priority(2)
            .max_attempts(3),
    )
    .await
    .unwrap();
    assert_eq!(ids.len(), 3);
    for (id, payload) in ids.iter().zip(&payloads) {
        let row = admin
            .query_one(
                "SELECT payload, kind, priority, max_attempts FROM jobq.jobs WHERE id = $1",
                &[id],
            )
            .await
            .unwrap();
        assert_eq!(&row.get::<_, Value>(0), payload);
        assert_eq!(row.get::<_, String>(1), "thumb");
        assert_eq!(row.get::<_, i32>(2), 2);
        assert_eq!(row.get::<_, i32>(3), 3);
    }
    let later = enqueue_batch(
        &app,
        &queue,
        &[json!({})],
        BatchOptions::new().run_in(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    assert_eq!(later.len(), 1);
    let stats = queue_stats(&app)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.queue == queue)
        .unwrap();
    assert_eq!(
        (stats.ready, stats.scheduled),
        (3, 1),
        "run_in made it scheduled"
    );
}

#[tokio::test]
async fn a_job_goes_through_checkout_complete_fail_cancel_and_retry() {
    let (app, admin) = (app().await, admin().await);
    let queue = unique("lifecycle");
    let worker = register(&app, "calls-lifecycle").await;
    let a = enqueue(
        &app,
        &queue,
        &json!({"a": 1}),
        EnqueueOptions::new().kind("k"),
    )
    .await
    .unwrap()
    .unwrap();
    let b = enqueue(
        &app,
        &queue,
        &json!({"b": 1}),
        EnqueueOptions::new().max_attempts(2),
    )
    .await
    .unwrap()
    .unwrap();

    let jobs = checkout(
        &app,
        worker,
        CheckoutOptions::new().queues([&queue]).max_jobs(2),
    )
    .await
    .unwrap();
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![a, b]);
    let job = &jobs[0];
    assert_eq!(
        (
            job.queue.as_str(),
            job.kind.as_deref(),
            job.attempt,
            job.max_attempts
        ),
        (queue.as_str(), Some("k"), 1, 25)
    );
    assert_eq!(job.payload, json!({"a": 1}));
    assert_eq!(job.worker_id, worker);
    assert!(job.interrupted_at.is_none() && job.last_error.is_none() && job.started_at.is_some());

    assert!(complete(&app, a, worker, Some(&json!({"sent": true})))
        .await
        .unwrap());
    assert!(
        !complete(&app, a, worker, None).await.unwrap(),
        "a finished job is no longer this worker's"
    );
    let result: Value = admin
        .query_one("SELECT result FROM jobq.jobs WHERE id = $1", &[&a])
        .await
        .unwrap()
        .get(0);
    assert_eq!(result, json!({"sent": true}));

    let failed = fail(
        &app,
        b,
        worker,
        FailOptions::new()
            .error(json!({"type": "T", "message": "m"}))
            .retry_in(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    assert_eq!(failed, Some(JobState::Ready));
    let row = admin
        .query_one("SELECT last_error, extract(epoch FROM run_at - clock_timestamp())::float8 FROM jobq.jobs WHERE id = $1", &[&b])
        .await
        .unwrap();
    assert_eq!(row.get::<_, Value>(0), json!({"type": "T", "message": "m"}));
    let due_in: f64 = row.get(1);
    assert!(
        (55.0..=60.0).contains(&due_in),
        "retry_in 60 s: due in {due_in} s"
    );
    assert_eq!(
        fail(&app, b, worker, FailOptions::new()).await.unwrap(),
        None,
        "not executing: NULL"
    );

    assert_eq!(cancel(&app, b).await.unwrap(), Some(JobState::Cancelled));
    assert_eq!(
        cancel(&app, a).await.unwrap(),
        Some(JobState::Completed),
        "a finished job keeps its state"
    );
    assert_eq!(cancel(&app, -1).await.unwrap(), None);
    assert!(retry(&app, b).await.unwrap());
    assert!(!retry(&app, a).await.unwrap());
    assert_eq!(state(&admin, b).await, "ready");

    let jobs = checkout(&app, worker, CheckoutOptions::new().queues([&queue]))
        .await
        .unwrap();
    assert_eq!(jobs[0].id, b);
    assert_eq!(jobs[0].attempt, 1, "retry put the attempt back to 0");
    assert_eq!(
        fail(&app, b, worker, FailOptions::new().discard(true))
            .await
            .unwrap(),
        Some(JobState::Dead)
    );
    assert_eq!(unregister_worker(&app, worker).await.unwrap(), 0);
}

#[tokio::test]
async fn heartbeat_reports_cancel_requests_and_holding_returns_the_rest() {
    let (app, admin) = (app().await, admin().await);
    let queue = unique("heartbeat");
    let worker = register_worker(
        &app,
        RegisterOptions::new()
            .name("calls-hb")
            .metadata(json!({"v": 2}))
            .bind_to_session(true),
    )
    .await
    .unwrap();
    let row = admin
        .query_one(
            "SELECT name, metadata, backend_pid IS NOT NULL FROM jobq.workers WHERE id = $1",
            &[&worker],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "calls-hb");
    assert_eq!(row.get::<_, Value>(1), json!({"v": 2}));
    assert!(row.get::<_, bool>(2), "bound to its session");

    let ids = enqueue_batch(&app, &queue, &[json!({}), json!({})], BatchOptions::new())
        .await
        .unwrap();
    checkout(
        &app,
        worker,
        CheckoutOptions::new().queues([&queue]).max_jobs(2),
    )
    .await
    .unwrap();
    assert_eq!(
        heartbeat(&app, worker, None).await.unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(
        cancel(&app, ids[0]).await.unwrap(),
        Some(JobState::Executing)
    );
    assert_eq!(heartbeat(&app, worker, None).await.unwrap(), vec![ids[0]]);
    assert_eq!(
        fail(&app, ids[0], worker, FailOptions::new())
            .await
            .unwrap(),
        Some(JobState::Cancelled)
    );

    // holding without the second job: it goes back to ready, interrupted.
    assert_eq!(
        heartbeat(&app, worker, Some(&[])).await.unwrap(),
        Vec::<i64>::new()
    );
    let row = admin
        .query_one(
            "SELECT state, interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1",
            &[&ids[1]],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0).as_str(), row.get::<_, bool>(1)),
        ("ready", true)
    );

    checkout(&app, worker, CheckoutOptions::new().queues([&queue]))
        .await
        .unwrap();
    assert_eq!(
        unregister_worker(&app, worker).await.unwrap(),
        1,
        "the job in hand goes back"
    );
    assert_eq!(state(&admin, ids[1]).await, "ready");
}

#[tokio::test]
async fn batch_and_fused_calls() {
    let (app, admin) = (app().await, admin().await);
    let queue = unique("fused");
    let worker = register(&app, "calls-fused").await;
    let ids = enqueue_batch(
        &app,
        &queue,
        &[json!(1), json!(2), json!(3), json!(4), json!(5), json!(6)],
        BatchOptions::new(),
    )
    .await
    .unwrap();
    let options = || CheckoutOptions::new().queues([&queue]).max_jobs(2);

    let first = complete_and_checkout(&app, worker, &[], None, options())
        .await
        .unwrap();
    assert_eq!(first.iter().map(|j| j.id).collect::<Vec<_>>(), &ids[0..2]);
    let second = complete_and_checkout(
        &app,
        worker,
        &ids[0..2],
        Some(&[json!("r1"), json!("r2")]),
        options(),
    )
    .await
    .unwrap();
    assert_eq!(second.iter().map(|j| j.id).collect::<Vec<_>>(), &ids[2..4]);
    assert_eq!(count_in_state(&admin, &ids[0..2], "completed").await, 2);
    let third = fail_and_checkout(
        &app,
        worker,
        &ids[2..4],
        Some(&[json!({"m": 3}), json!({"m": 4})]),
        options(),
    )
    .await
    .unwrap();
    assert_eq!(third.iter().map(|j| j.id).collect::<Vec<_>>(), &ids[4..6]);
    assert_eq!(count_in_state(&admin, &ids[2..4], "ready").await, 2);

    // JQ002: a job in hand was cancelled and finished elsewhere; nothing is done.
    cancel(&app, ids[4]).await.unwrap();
    fail(&app, ids[4], worker, FailOptions::new())
        .await
        .unwrap();
    let err = complete_and_checkout(&app, worker, &ids[4..6], None, options())
        .await
        .unwrap_err();
    assert_eq!(err.sqlstate(), Some("JQ002"));
    assert!(matches!(err, Error::Db(_)));
    assert_eq!(state(&admin, ids[5]).await, "executing");

    assert_eq!(
        complete_many(&app, worker, &ids[4..6], Some(&[json!(5), json!(6)]))
            .await
            .unwrap(),
        vec![ids[5]]
    );
    let states = fail_many(&app, worker, &ids[0..2], None).await.unwrap();
    assert_eq!(
        states,
        vec![None, None],
        "completed jobs are not this worker's to fail"
    );

    let wait = CheckoutOptions::new()
        .queues([&queue])
        .wait(Duration::from_secs(1));
    let err = complete_and_checkout(&app, worker, &[], None, wait)
        .await
        .unwrap_err();
    assert_eq!(
        err.sqlstate(),
        Some("42883"),
        "the fused calls take no wait"
    );
    unregister_worker(&app, worker).await.unwrap();
}

#[tokio::test]
async fn checkout_waits_inside_the_server() {
    let app = app().await;
    let queue = unique("wait");
    let worker = register(&app, "calls-wait").await;
    let started = Instant::now();
    let none = checkout(
        &app,
        worker,
        CheckoutOptions::new()
            .queues([&queue])
            .wait(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    assert!(none.is_empty());
    assert!(
        started.elapsed() >= Duration::from_millis(290),
        "returned after {:?}",
        started.elapsed()
    );

    let id = enqueue(&app, &queue, &json!({}), EnqueueOptions::new())
        .await
        .unwrap()
        .unwrap();
    let started = Instant::now();
    let jobs = checkout(
        &app,
        worker,
        CheckoutOptions::new()
            .queues([&queue])
            .wait(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id]);
    // Told a minute, it returns at once with the job already there: half the minute tells
    // the two apart on any machine.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "a job was available at once, returned after {:?}",
        started.elapsed()
    );
    unregister_worker(&app, worker).await.unwrap();
}

#[tokio::test]
async fn pause_resume_and_rate_limits() {
    let (app, admin) = (app().await, admin().await);
    let queue = unique("pause");
    let worker = register(&app, "calls-pause").await;
    let take = |max: i32| {
        checkout(
            &app,
            worker,
            CheckoutOptions::new().queues([&queue]).max_jobs(max),
        )
    };

    let kind = unique("kind");
    enqueue(&app, &queue, &json!({}), EnqueueOptions::new().kind(&kind))
        .await
        .unwrap();
    pause(&admin, Some(&queue), None).await.unwrap();
    assert!(take(1).await.unwrap().is_empty(), "paused queue");
    resume(&admin, Some(&queue), None).await.unwrap();
    pause(&admin, None, Some(&kind)).await.unwrap();
    assert!(take(1).await.unwrap().is_empty(), "paused kind");
    resume(&admin, None, Some(&kind)).await.unwrap();
    assert_eq!(take(1).await.unwrap().len(), 1);

    let key = unique("rate");
    set_rate_limit(&admin, &key, Some(1), Some(Duration::from_secs(3600)))
        .await
        .unwrap();
    for _ in 0..2 {
        enqueue(
            &app,
            &queue,
            &json!({}),
            EnqueueOptions::new().rate_key(&key),
        )
        .await
        .unwrap();
    }
    assert_eq!(take(5).await.unwrap().len(), 1, "one start an hour");
    set_rate_limit(&admin, &key, None, None).await.unwrap();
    assert_eq!(take(5).await.unwrap().len(), 1, "limit removed");
    unregister_worker(&app, worker).await.unwrap();
}

#[tokio::test]
async fn named_locks() {
    let app = app().await;
    let key = unique("lock");
    let (w1, w2) = (
        register(&app, "calls-lock-1").await,
        register(&app, "calls-lock-2").await,
    );
    assert!(acquire_lock(&app, &key, w1, Some(Duration::from_secs(60)))
        .await
        .unwrap());
    assert!(!acquire_lock(&app, &key, w2, None).await.unwrap());
    assert_eq!(lock_holder(&app, &key).await.unwrap(), Some(w1));
    assert!(!release_lock(&app, &key, w2).await.unwrap());
    assert!(release_lock(&app, &key, w1).await.unwrap());
    assert_eq!(lock_holder(&app, &key).await.unwrap(), None);
    assert!(acquire_lock(&app, &key, w2, None).await.unwrap());
    unregister_worker(&app, w1).await.unwrap();
    unregister_worker(&app, w2).await.unwrap();
}

#[tokio::test]
async fn schedules_enqueue_their_ticks() {
    let admin = admin().await;
    let (name, queue) = (unique("schedule"), unique("ticks"));
    schedule(
        &admin,
        &name,
        "* * * * * *",
        &queue,
        ScheduleOptions::new()
            .payload(json!({"tick": true}))
            .kind("tick")
            .priority(1)
            .max_attempts(2)
            .time_zone("Europe/Paris")
            .catch_up(false),
    )
    .await
    .unwrap();
    let row = admin
        .query_one(
            "SELECT cron, time_zone, queue, kind FROM jobq.schedules WHERE name = $1",
            &[&name],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "* * * * * *");
    assert_eq!(row.get::<_, String>(1), "Europe/Paris");
    assert_eq!(row.get::<_, String>(2), queue);
    assert_eq!(row.get::<_, String>(3), "tick");
    wait_for("a tick's job", Duration::from_secs(10), || async {
        admin
            .query_one("SELECT count(*) FROM jobq.jobs WHERE queue = $1 AND payload = '{\"tick\": true}' AND max_attempts = 2", &[&queue])
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0
    })
    .await;
    assert!(unschedule(&admin, &name).await.unwrap());
    assert!(!unschedule(&admin, &name).await.unwrap());
}

#[tokio::test]
async fn reap_stats_and_heartbeat_timeout() {
    let (app, mut admin) = (app().await, admin().await);
    let queue = unique("stats");
    enqueue_batch(&app, &queue, &[json!({}), json!({})], BatchOptions::new())
        .await
        .unwrap();
    enqueue(
        &app,
        &queue,
        &json!({}),
        EnqueueOptions::new().run_in(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let worker = register(&app, "calls-stats").await;
    checkout(&app, worker, CheckoutOptions::new().queues([&queue]))
        .await
        .unwrap();
    let stats = queue_stats(&app)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.queue == queue)
        .expect("a row for the queue");
    assert_eq!(
        (stats.ready, stats.scheduled, stats.executing, stats.dead),
        (1, 1, 1, 0)
    );
    assert!(stats.oldest_ready_age.is_some());

    unregister_worker(&app, worker).await.unwrap();

    // A worker dies holding two jobs and a lock, and a pass reaps it in the transaction that
    // aged its heartbeat, out of sight of the background worker's passes. The tests running
    // alongside may leave dead workers of their own to the same pass: its counts are at least
    // this worker's, whose jobs it put back. The call is jobq_admin's alone.
    let dead = register(&app, "calls-reaped").await;
    let held = unique("reaped");
    let jobs = enqueue_batch(&app, &held, &[json!({}), json!({})], BatchOptions::new())
        .await
        .unwrap();
    let mut got: Vec<i64> = checkout(
        &app,
        dead,
        CheckoutOptions::new().queues([&held]).max_jobs(2),
    )
    .await
    .unwrap()
    .iter()
    .map(|j| j.id)
    .collect();
    got.sort();
    assert_eq!(got, jobs);
    assert!(acquire_lock(&app, &held, dead, None).await.unwrap());
    let tx = admin.transaction().await.unwrap();
    tx.execute(
        "UPDATE jobq.workers SET heartbeat_at = now() - interval '1 hour' WHERE id = $1",
        &[&dead],
    )
    .await
    .unwrap();
    let r = reap(&tx).await.unwrap();
    tx.commit().await.unwrap();
    assert!(
        r.workers_reaped >= 1 && r.jobs_requeued >= 2 && r.locks_released >= 1,
        "{r:?}"
    );
    let requeued: i64 = admin
        .query_one(
            "SELECT count(*) FROM jobq.jobs WHERE id = ANY($1) AND state = 'ready' AND interrupted_at IS NOT NULL",
            &[&jobs],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(requeued, 2);
    assert!(matches!(reap(&app).await, Err(Error::PermissionDenied(_))));
    assert_eq!(
        heartbeat_timeout(&app).await.unwrap(),
        Some(Duration::from_secs(3))
    );
}

#[tokio::test]
async fn the_workflow_calls() {
    let app = app().await;
    let queue = unique("wf");
    let parent = enqueue(&app, &queue, &json!({"n": 1}), EnqueueOptions::new())
        .await
        .unwrap()
        .unwrap();
    let child = enqueue(
        &app,
        &queue,
        &json!({"n": 2}),
        EnqueueOptions::new()
            .depends_on([parent])
            .run_on_parent_failure(),
    )
    .await
    .unwrap()
    .unwrap();
    let w = register(&app, "wf").await;
    let got = checkout(
        &app,
        w,
        CheckoutOptions::new().queues([queue.as_str()]).max_jobs(10),
    )
    .await
    .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].id, &got[0].checkpoints, &got[0].depends_on),
        (parent, &json!({}), &None)
    );
    assert!(checkpoint(&app, parent, w, "one", &json!({"x": 1}))
        .await
        .unwrap());
    let event = format!("{queue}:ev");
    assert_eq!(
        await_event(&app, parent, w, &event, None)
            .await
            .unwrap()
            .as_deref(),
        Some("waiting")
    );
    assert_eq!(
        emit_event(&app, &event, Some(&json!({"p": 1})))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        emit_event(&app, &event, Some(&json!({"p": 2})))
            .await
            .unwrap(),
        0
    );
    let again = checkout(
        &app,
        w,
        CheckoutOptions::new().queues([queue.as_str()]).max_jobs(10),
    )
    .await
    .unwrap();
    assert_eq!((again[0].id, again[0].attempt), (parent, 1));
    assert_eq!(again[0].checkpoints["one"], json!({"x": 1}));
    assert_eq!(
        again[0].checkpoints[format!("event:{event}")]["payload"],
        json!({"p": 1})
    );
    assert!(
        snooze(&app, parent, w, SystemTime::now() - Duration::from_secs(1))
            .await
            .unwrap()
    );
    let third = checkout(
        &app,
        w,
        CheckoutOptions::new().queues([queue.as_str()]).max_jobs(10),
    )
    .await
    .unwrap();
    assert_eq!(third[0].id, parent);
    assert_eq!(
        await_jobs(&app, parent, w, &[]).await.unwrap().as_deref(),
        Some("finished")
    );
    assert!(complete(&app, parent, w, Some(&json!("done")))
        .await
        .unwrap());
    let kid = checkout(
        &app,
        w,
        CheckoutOptions::new().queues([queue.as_str()]).max_jobs(10),
    )
    .await
    .unwrap();
    assert_eq!(
        (kid[0].id, kid[0].depends_on.clone()),
        (child, Some(vec![parent]))
    );
    let r = results(&app, &[parent]).await.unwrap();
    assert_eq!(
        (r[0].id, &r[0].state, &r[0].result, r[0].attempt),
        (parent, &JobState::Completed, &Some(json!("done")), 1)
    );
    // Fenced as completion: another worker changes nothing.
    let other = register(&app, "other").await;
    assert!(!checkpoint(&app, child, other, "x", &json!(1))
        .await
        .unwrap());
    assert_eq!(
        await_event(&app, child, other, "e", Some(Duration::from_secs(1)))
            .await
            .unwrap(),
        None
    );
    let e = enqueue(
        &app,
        &queue,
        &json!({}),
        EnqueueOptions::new().depends_on([987_654_321]),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
}

#[tokio::test]
async fn a_graph_in_one_call() {
    let app = app().await;
    let queue = unique("graph");
    let ids = enqueue_graph(
        &app,
        &json!([{"queue": queue, "kind": "a"}, {"queue": queue, "kind": "b", "after": [0]}]),
    )
    .await
    .unwrap();
    let ids: Vec<i64> = ids.into_iter().map(|i| i.expect("enqueued")).collect();
    let states: Vec<JobState> = results(&app, &ids)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.state)
        .collect();
    assert_eq!(states, [JobState::Ready, JobState::Blocked]);
    let e = enqueue_graph(&app, &json!([{"queue": queue, "after": [0]}]))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
}
