//! A client for jobq, the PostgreSQL job queue whose coordination logic lives in the database.
//!
//! One async function per jobq function ([`enqueue`], [`cancel`], [`checkout`],
//! [`complete`], …), generic over [`tokio_postgres::GenericClient`], so that they run on a
//! [`Client`](tokio_postgres::Client) or inside the caller's
//! [`Transaction`](tokio_postgres::Transaction): a job enqueued there commits with the
//! application's own writes, or not at all. Optional arguments are option structs with builder
//! methods ([`EnqueueOptions`]), sent by name only when set.
//!
//! Errors are [`Error`], whose variants name jobq's SQLSTATEs; a handler fails its job with a
//! [`JobError`].
#![warn(missing_docs)]

mod calls;
mod error;
mod job;

pub use calls::{
    acquire_lock, cancel, checkout, complete, complete_and_checkout, complete_many, enqueue,
    enqueue_batch, fail, fail_and_checkout, fail_many, heartbeat, heartbeat_timeout, lock_holder,
    pause, queue_stats, reap, register_worker, release_lock, resume, retry, schedule,
    set_rate_limit, unregister_worker, unschedule, BatchOptions, CheckoutOptions,
    EnqueueOptions, FailOptions, OnConflict, QueueStats, ReapStats, RegisterOptions,
    ScheduleOptions, UniqueStrategy,
};
pub use error::{Error, JobError};
pub use job::{Job, JobState};

/// Re-exported: the driver whose clients and transactions the calls take.
pub use tokio_postgres;
