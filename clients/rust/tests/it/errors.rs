//! Every SQLSTATE jobq raises becomes its variant of `Error`; the rest keep their SQLSTATE.

use std::time::Duration;

use jobq_client::*;
use serde_json::json;
use uuid::Uuid;

use crate::common::*;

#[tokio::test]
async fn unique_conflict_carries_the_existing_job_or_the_lock_holder() {
    let app = app().await;
    let (queue, key) = (unique("unique"), unique("key"));
    let first = enqueue(
        &app,
        &queue,
        &json!({}),
        EnqueueOptions::new().unique_key(&key),
    )
    .await
    .unwrap()
    .unwrap();
    let err = enqueue(
        &app,
        &queue,
        &json!({}),
        EnqueueOptions::new().unique_key(&key),
    )
    .await
    .unwrap_err();
    assert_eq!(err.sqlstate(), Some("23505"));
    match &err {
        Error::UniqueConflict {
            existing_job,
            held_by_worker,
            ..
        } => {
            assert_eq!(*existing_job, Some(first));
            assert_eq!(*held_by_worker, None);
        }
        other => panic!("expected UniqueConflict, got {other:?}"),
    }
    assert!(
        err.to_string().contains(&format!("existing job {first}")),
        "{err}"
    );

    // A named lock holds a key too; the error names its worker.
    let lock = unique("lock");
    let worker = register_worker(&app, RegisterOptions::new()).await.unwrap();
    assert!(acquire_lock(&app, &lock, worker, None).await.unwrap());
    match enqueue(
        &app,
        &queue,
        &json!({}),
        EnqueueOptions::new().unique_key(&lock),
    )
    .await
    {
        Err(Error::UniqueConflict {
            existing_job: None,
            held_by_worker: Some(w),
            ..
        }) => assert_eq!(w, worker),
        other => panic!("expected UniqueConflict held by {worker}, got {other:?}"),
    }
    unregister_worker(&app, worker).await.unwrap();
}

#[tokio::test]
async fn worker_lost_invalid_argument_and_permission_denied() {
    let (app, admin) = (app().await, admin().await);
    let err = heartbeat(&app, Uuid::from_u128(0x5eed), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WorkerLost(_)), "{err:?}");
    assert_eq!(err.sqlstate(), Some("JQ001"));

    let err = enqueue(&app, "", &json!({}), EnqueueOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert_eq!(err.sqlstate(), Some("22023"));
    assert!(err.db_error().unwrap().message().starts_with("jobq: "));

    let err = pause(&admin, None, None).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert_eq!(err.sqlstate(), Some("22004"));

    let err = set_rate_limit(&admin, &unique("rate"), Some(5), None)
        .await
        .unwrap_err();
    assert_eq!(err.sqlstate(), Some("22004"));

    let nobody = connect(&dsn_as("jobq_test_nobody")).await;
    let err = enqueue(
        &nobody,
        &unique("nobody"),
        &json!({}),
        EnqueueOptions::new(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    assert_eq!(err.sqlstate(), Some("42501"));

    // A producer may enqueue but not run a worker.
    let producer = connect(&dsn_as("jobq_test_producer")).await;
    let err = register_worker(&producer, RegisterOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    assert!(!err.is_connection_error());
}

#[tokio::test]
async fn other_sqlstates_pass_through_and_a_lost_connection_is_recognised() {
    let (mut app, admin) = (app().await, admin().await);
    let worker = register_worker(&app, RegisterOptions::new()).await.unwrap();
    // A waiting checkout outside READ COMMITTED: 0A000, as Error::Db with its code.
    let tx = app
        .build_transaction()
        .isolation_level(jobq_client::tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    let err = checkout(
        &tx,
        worker,
        CheckoutOptions::new()
            .queues([unique("rr")])
            .wait(Duration::from_millis(100)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Db(_)), "{err:?}");
    assert_eq!(err.sqlstate(), Some("0A000"));
    tx.rollback().await.unwrap();
    unregister_worker(&app, worker).await.unwrap();

    let pid: i32 = app
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    admin
        .execute("SELECT pg_terminate_backend($1, 5000)", &[&pid])
        .await
        .unwrap();
    let err = enqueue(&app, &unique("gone"), &json!({}), EnqueueOptions::new())
        .await
        .unwrap_err();
    assert!(err.is_connection_error(), "{err:?}");
}
