//! A client for jobq, the PostgreSQL job queue whose coordination logic lives in the database.
//!
//! Two halves, both thin layers over jobq's SQL functions (every guarantee stays in the
//! database):
//!
//! - **Calls** ([`enqueue`], [`cancel`], [`checkout`], [`complete`], …): one async function per
//!   jobq function, generic over [`tokio_postgres::GenericClient`], so that they run on a
//!   [`Client`](tokio_postgres::Client) or inside the caller's
//!   [`Transaction`](tokio_postgres::Transaction): a job enqueued there commits with the
//!   application's own writes, or not at all. Optional arguments are option structs with
//!   builder methods ([`EnqueueOptions`]), sent by name only when set.
//! - **[`Worker`]**: registers, checks out, runs one handler per job kind, N jobs at once,
//!   heartbeats, reports results, delivers cancellations, re-registers after `JQ001`,
//!   reconnects, and drains on shutdown.
//!
//! Errors are [`Error`], whose variants name jobq's SQLSTATEs; a handler fails its job with a
//! [`JobError`].
//!
//! Testing your own handlers: [`testing::drain`] runs the due jobs of some queues inline in a
//! test, [`testing::enqueued`] lists the jobs waiting in a queue.
//!
//! ```no_run
//! use jobq_client::{enqueue, EnqueueOptions, Job, JobError, Worker};
//! use serde_json::json;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let dsn = "postgresql://app@localhost/app";
//!
//!     // Producer: enqueue in the application's own transaction.
//!     let (mut client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls).await?;
//!     tokio::spawn(connection);
//!     let tx = client.transaction().await?;
//!     // ... the application's own writes on `tx` ...
//!     enqueue(&tx, "mail", &json!({"to": "ada@example.com"}), EnqueueOptions::new().priority(5)).await?;
//!     tx.commit().await?;
//!
//!     // Worker: runs until SIGTERM, then drains and returns.
//!     Worker::builder(dsn)
//!         .queues(["mail"])
//!         .concurrency(8)
//!         .handler("mail", |job: Job| async move {
//!             let to = job.payload["to"].as_str().ok_or_else(|| JobError::msg("no address").discard())?;
//!             Ok(json!({"sent_to": to}))
//!         })
//!         .build()?
//!         .run_until_signal()
//!         .await?;
//!     Ok(())
//! }
//! ```
#![warn(missing_docs)]

mod calls;
mod durable;
mod error;
mod job;
pub mod testing;
mod worker;

pub use calls::{
    acquire_lock, await_event, await_jobs, cancel, checkout, checkpoint, complete,
    complete_and_checkout, complete_many, emit_event, enqueue, enqueue_batch, enqueue_graph, fail,
    fail_and_checkout, fail_many, heartbeat, heartbeat_timeout, lock_holder, pause, queue_stats,
    reap, register_worker, release_lock, results, resume, retry, schedule, set_rate_limit, snooze,
    stop_checkouts, unregister_worker, unschedule, BatchOptions, CheckoutOptions, EnqueueOptions, FailOptions,
    JobResult, OnConflict, QueueStats, ReapStats, RegisterOptions, ScheduleOptions, UniqueStrategy,
};
pub use durable::Durable;
pub use error::{Error, JobError};
pub use job::{Job, JobState};
pub use worker::{Worker, WorkerBuilder, WorkerEvent, WorkerHandle};

/// Re-exported: the driver whose clients and transactions the calls take.
pub use tokio_postgres;

/// The README's examples, compiled as doc tests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
