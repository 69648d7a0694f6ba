//! Testing your own handlers: run the due jobs of some queues inline, in the test
//! ([`drain`]), look up the jobs code under test enqueued ([`enqueued`]), and build a job to
//! call a handler with directly ([`make_job`]).
//!
//! Both go through jobq's SQL, never around it: [`drain`] is a worker of its own that runs one
//! job at a time in the calling task (`jobq_register_worker`, then `jobq_checkout` of one job,
//! the handler, `jobq_complete` or `jobq_fail`, again until no job is due, then
//! `jobq_unregister_worker`), and [`enqueued`] is one SELECT on `jobq.live_jobs`.
//!
//! ```no_run
//! use jobq_client::testing::{drain, enqueued, DrainOptions, EnqueuedFilter};
//! use jobq_client::{Job, JobError, JobState};
//! use serde_json::{json, Value};
//!
//! async fn welcome(job: Job) -> Result<Value, JobError> {
//!     Ok(json!({ "sent_to": job.payload["to"] }))
//! }
//!
//! # async fn sign_up(_: &tokio_postgres::Client, _: &str) {}
//! # async fn test(db: &tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
//! sign_up(db, "ada@example.com").await; // the code under test enqueues
//! let waiting = enqueued(db, "mail", EnqueuedFilter::new().kind("welcome")
//!     .payload(json!({ "to": "ada@example.com" }))).await?;
//! assert_eq!(waiting.len(), 1);
//! let drained = drain(db, DrainOptions::new(["mail"]).handler("welcome", welcome)).await?;
//! assert_eq!(drained.jobs[0].state, Some(JobState::Completed));
//! # Ok(())
//! # }
//! ```
//!
//! The calls run on the client given: on a [`Transaction`](tokio_postgres::Transaction) (or a
//! `Client` inside `BEGIN`) they join it, so a test that enqueues and drains there and rolls
//! back leaves nothing behind. The guide is `docs/testing.md`.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::SystemTime;

use futures_util::FutureExt;
use serde::Serialize;
use serde_json::{json, Value};
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use crate::calls::{self, CheckoutOptions, FailOptions, RegisterOptions};
use crate::{Error, Job, JobError, JobState};

/// How many jobs [`drain`] runs at most unless [`DrainOptions::max_jobs`] says otherwise.
pub const DEFAULT_MAX_JOBS: usize = 1000;

/// The name the drain's worker registers with (`jobq.workers.name`).
pub const WORKER_NAME: &str = "jobq.testing.drain";


/// A job for calling a handler directly in a unit test, as a checkout would hand it over: id
/// 0 (no job has it), attempt 1 of 25, priority 0, due, enqueued and started now, no keys, no
/// checkpoints, the nil worker id. Its fields are public: set the ones the handler reads.
/// Its [cancellation token](Job::cancellation_token) is its own, so a test can fire it; its
/// [`durable`](Job::durable) steps are an error, as in [`drain`].
///
/// ```
/// use jobq_client::testing::make_job;
/// use jobq_client::{Job, JobError};
/// use serde_json::{json, Value};
///
/// async fn welcome(job: Job) -> Result<Value, JobError> {
///     let to = job.payload["to"].as_str().ok_or_else(|| JobError::msg("no 'to'").discard())?;
///     Ok(json!({ "sent_to": to, "attempt": job.attempt }))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut job = make_job("mail", Some("welcome"), json!({ "to": "ada@example.com" }));
/// job.attempt = 3;
/// assert_eq!(welcome(job).await.unwrap(), json!({ "sent_to": "ada@example.com", "attempt": 3 }));
/// let error = welcome(make_job("mail", Some("welcome"), json!({}))).await.unwrap_err();
/// assert!(error.is_discard());
/// # }
/// ```
pub fn make_job(queue: &str, kind: Option<&str>, payload: Value) -> Job {
    Job::made(queue, kind, payload)
}

/// What [`drain`] drains and with which handlers.
///
/// ```
/// use jobq_client::testing::DrainOptions;
/// use jobq_client::{Job, JobError};
///
/// let options = DrainOptions::new(["mail"])
///     .handler("welcome", |job: Job| async move { Ok::<_, JobError>(job.payload) })
///     .max_jobs(50);
/// ```
#[derive(Clone)]
pub struct DrainOptions {
    queues: Vec<String>,
    handlers: HashMap<String, crate::worker::DynHandler>,
    max_jobs: usize,
}

impl fmt::Debug for DrainOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds: Vec<&String> = self.handlers.keys().collect();
        kinds.sort();
        f.debug_struct("DrainOptions")
            .field("queues", &self.queues)
            .field("handlers", &kinds)
            .field("max_jobs", &self.max_jobs)
            .finish()
    }
}

impl DrainOptions {
    /// Drain these queues (at least one), with no handler yet and
    /// [`DEFAULT_MAX_JOBS`].
    pub fn new<I, S>(queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        DrainOptions {
            queues: queues.into_iter().map(Into::into).collect(),
            handlers: HashMap::new(),
            max_jobs: DEFAULT_MAX_JOBS,
        }
    }

    /// Runs `handler` for jobs of kind `kind`, and for jobs without a kind in the queue named
    /// `kind`: the handler type of [`WorkerBuilder::handler`](crate::WorkerBuilder::handler),
    /// so the application's handlers are drained as they are.
    pub fn handler<F, Fut, T>(mut self, kind: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, JobError>> + Send + 'static,
        T: Serialize + 'static,
    {
        self.handlers.insert(kind.into(), crate::worker::erase(handler));
        self
    }

    /// Runs at most `jobs` jobs (at least 1); when another is due after that, [`drain`]
    /// returns [`DrainError::LimitReached`]. Default [`DEFAULT_MAX_JOBS`].
    pub fn max_jobs(mut self, jobs: usize) -> Self {
        self.max_jobs = jobs;
        self
    }
}

/// One job [`drain`] ran, and what came of it.
#[derive(Debug)]
#[non_exhaustive]
pub struct DrainedJob {
    /// The job as its handler got it.
    pub job: Job,
    /// Its state after the drain reported it: `Completed`; after a failure `Ready` (retried
    /// after the backoff or the error's `retry_in`), `Dead` (attempts spent, or discarded) or
    /// `Cancelled`; `None` when the server answered that the job was no longer the drain's.
    pub state: Option<JobState>,
    /// What the handler returned (`None` after a failure, and for `()` / `Value::Null`, which
    /// are stored as NULL).
    pub result: Option<Value>,
    /// The error reported with `jobq_fail` (`error.to_json()` is what was stored); `None` when
    /// the handler returned `Ok`.
    pub error: Option<JobError>,
}

impl DrainedJob {
    /// True when the handler failed the job (an error, a panic, or no handler).
    pub fn is_failed(&self) -> bool {
        self.error.is_some()
    }
}

/// What [`drain`] did: the jobs it ran, in the order it ran them.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Drained {
    /// The jobs it ran.
    pub jobs: Vec<DrainedJob>,
}

impl Drained {
    /// The jobs whose handler returned `Ok` (`jobq_complete`).
    pub fn completed(&self) -> Vec<&DrainedJob> {
        self.jobs.iter().filter(|d| !d.is_failed()).collect()
    }

    /// The jobs whose handler failed, panicked, or that had no handler (`jobq_fail`).
    pub fn failed(&self) -> Vec<&DrainedJob> {
        self.jobs.iter().filter(|d| d.is_failed()).collect()
    }
}

/// Why [`drain`] stopped short.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DrainError {
    /// A jobq call failed (or the options were refused: [`Error::Config`]).
    #[error(transparent)]
    Jobq(#[from] Error),
    /// It ran `max_jobs` jobs and another was still due: most likely a handler that enqueues
    /// a job that enqueues one again, forever. The job it checked out last was not started:
    /// unregistering the drain's worker gave it back, its attempt not counted.
    #[error("jobq: testing::drain ran {max_jobs} jobs and more are due (max_jobs = {max_jobs})")]
    LimitReached {
        /// The limit.
        max_jobs: usize,
        /// The jobs it ran before stopping.
        drained: Drained,
    },
}

fn no_handler(job: &Job) -> JobError {
    let what = match &job.kind {
        Some(kind) => format!("kind '{kind}'"),
        None => format!("queue '{}' (the job has no kind)", job.queue),
    };
    JobError::new("NoHandler", format!("no handler for {what}")).discard()
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "the handler panicked".to_string()
    }
}

/// Runs every due job of the options' queues with their handlers, one at a time in the
/// calling task, until none is due, and returns what came of each.
///
/// It is a worker of its own, through jobq's SQL: it registers (`jobq_register_worker`, named
/// [`WORKER_NAME`], not bound to the session), checks out one job (`jobq_checkout`), runs its
/// handler (found by the job's kind, or its queue for a job without a kind, as in a
/// [`Worker`](crate::Worker)), reports it (`jobq_complete` with the result, or `jobq_fail`
/// with the [`JobError`]: its `retry_in` or `discard`; a panic fails the job with type
/// `"Panic"`, a job without a handler with `"NoHandler"`, discarded), heartbeats, and checks
/// out again, so that a job a handler enqueues (due now) is drained too; then it unregisters.
/// Jobs not due yet (`run_at` in the future, a retry's backoff) and blocked jobs are left
/// alone, as every worker leaves them.
///
/// `db` is where the calls run: a `Client` (each call commits; committed jobs only), or a
/// [`Transaction`](tokio_postgres::Transaction) (the calls join it: jobs enqueued in it are
/// drained, nothing is committed). A handler's error does not end the drain: the job fails
/// and its [`DrainedJob`] keeps the error. The job's cancellation token never fires, and
/// [`Job::durable`] is an error (durable steps need a `Worker`).
///
/// Errors: [`DrainError::LimitReached`] when more than `max_jobs` jobs were due;
/// [`DrainError::Jobq`] for a refused call, or [`Error::Config`] for no queue or a `max_jobs`
/// of 0.
pub async fn drain<C: GenericClient>(db: &C, options: DrainOptions) -> Result<Drained, DrainError> {
    if options.queues.is_empty() {
        return Err(Error::Config("testing::drain needs at least one queue".into()).into());
    }
    if options.max_jobs == 0 {
        return Err(Error::Config("testing::drain's max_jobs must be at least 1".into()).into());
    }
    let metadata = json!({"lang": "rust", "pid": std::process::id(), "testing": true});
    let worker = calls::register_worker(
        db,
        RegisterOptions::new().name(WORKER_NAME).metadata(metadata),
    )
    .await?;
    match drain_as(db, &options, worker).await {
        Ok(drained) => {
            calls::unregister_worker(db, worker).await?;
            Ok(drained)
        }
        Err(e @ DrainError::LimitReached { .. }) => {
            calls::unregister_worker(db, worker).await?; // gives the job in hand back, uncounted
            Err(e)
        }
        Err(e) => {
            let _ = calls::unregister_worker(db, worker).await; // the first error is the one to see
            Err(e)
        }
    }
}

async fn drain_as<C: GenericClient>(
    db: &C,
    options: &DrainOptions,
    worker: uuid::Uuid,
) -> Result<Drained, DrainError> {
    let mut drained = Drained::default();
    loop {
        if !drained.jobs.is_empty() {
            calls::heartbeat(db, worker, None).await?; // a long drain outlives jobq.heartbeat_timeout
        }
        let checkout = CheckoutOptions::new()
            .queues(options.queues.iter().cloned())
            .max_jobs(1);
        let Some(job) = calls::checkout(db, worker, checkout).await?.pop() else {
            return Ok(drained);
        };
        if drained.jobs.len() == options.max_jobs {
            return Err(DrainError::LimitReached {
                max_jobs: options.max_jobs,
                drained,
            });
        }
        let route = job.kind.as_ref().unwrap_or(&job.queue);
        let outcome = match options.handlers.get(route) {
            None => Err(no_handler(&job)),
            // A panic in the handler is its job's failure, as in a Worker.
            Some(handler) => match AssertUnwindSafe(handler(job.clone())).catch_unwind().await {
                Ok(result) => result,
                Err(panic) => Err(JobError::new("Panic", panic_message(panic))),
            },
        };
        let (state, result, error) = match outcome {
            Ok(value) => {
                let result = (!value.is_null()).then_some(value);
                let done = calls::complete(db, job.id, worker, result.as_ref()).await?;
                (done.then_some(JobState::Completed), result, None)
            }
            Err(error) => {
                let state = calls::fail(db, job.id, worker, FailOptions::from(&error)).await?;
                (state, None, Some(error))
            }
        };
        drained.jobs.push(DrainedJob {
            job,
            state,
            result,
            error,
        });
    }
}

/// Which jobs [`enqueued`] lists, besides their queue.
#[derive(Debug, Clone, Default)]
pub struct EnqueuedFilter {
    kind: Option<String>,
    payload: Option<Value>,
}

impl EnqueuedFilter {
    /// Every waiting job of the queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only jobs of this kind.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only jobs whose payload contains this JSON (`payload @> $payload`): a subset of keys,
    /// `{"to": "ada@example.com"}`, matches a payload with more.
    pub fn payload(mut self, contains: Value) -> Self {
        self.payload = Some(contains);
        self
    }
}

/// A job waiting to run, as [`enqueued`] reads it from `jobq.live_jobs`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EnqueuedJob {
    /// The job's id.
    pub id: i64,
    /// Its queue.
    pub queue: String,
    /// Its kind, or `None`.
    pub kind: Option<String>,
    /// What the enqueuer gave.
    pub payload: Value,
    /// Its priority; lower runs first.
    pub priority: i32,
    /// `Ready`, or `Blocked` for a job waiting for the jobs it depends on (or an event).
    pub state: JobState,
    /// When it is due.
    pub run_at: SystemTime,
    /// A ready job not due yet (scheduled, or waiting for a retry's backoff).
    pub scheduled: bool,
    /// When it was enqueued.
    pub enqueued_at: SystemTime,
    /// Attempts started so far.
    pub attempt: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Its unique key, or `None`.
    pub unique_key: Option<String>,
    /// Its concurrency key, or `None`.
    pub concurrency_key: Option<String>,
    /// The jobs it depends on, or `None`.
    pub depends_on: Option<Vec<i64>>,
}

const ENQUEUED_SQL: &str = "SELECT id, queue, kind, payload, priority, state, run_at, \
       state = 'ready' AND run_at > clock_timestamp() AS scheduled, \
       enqueued_at, attempt, max_attempts, unique_key, concurrency_key, depends_on \
  FROM jobq.live_jobs \
 WHERE queue = $1 AND state IN ('ready', 'blocked') \
   AND ($2::text IS NULL OR kind = $2::text) \
   AND ($3::jsonb IS NULL OR payload @> $3::jsonb) \
 ORDER BY id";

/// The jobs of `queue` waiting to run (state `ready`, due or scheduled, or `blocked`), oldest
/// first: what a test asserts its code enqueued. One SELECT on `jobq.live_jobs`
/// (`jobq_reader`), on `db` (in its transaction, when it is one); it changes nothing.
pub async fn enqueued<C: GenericClient>(
    db: &C,
    queue: &str,
    filter: EnqueuedFilter,
) -> Result<Vec<EnqueuedJob>, Error> {
    let rows = db
        .query_typed(
            ENQUEUED_SQL,
            &[
                (&queue, Type::TEXT),
                (&filter.kind, Type::TEXT),
                (&filter.payload, Type::JSONB),
            ],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(EnqueuedJob {
                id: row.try_get(0)?,
                queue: row.try_get(1)?,
                kind: row.try_get(2)?,
                payload: row.try_get(3)?,
                priority: row.try_get(4)?,
                state: JobState::from_name(row.try_get::<_, &str>(5)?),
                run_at: row.try_get(6)?,
                scheduled: row.try_get(7)?,
                enqueued_at: row.try_get(8)?,
                attempt: row.try_get(9)?,
                max_attempts: row.try_get(10)?,
                unique_key: row.try_get(11)?,
                concurrency_key: row.try_get(12)?,
                depends_on: row.try_get(13)?,
            })
        })
        .collect()
}
