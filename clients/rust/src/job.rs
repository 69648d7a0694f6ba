//! A checked-out job ([`Job`]) and the states a job can be in ([`JobState`]).

use std::fmt;
use std::future::Future;
use std::time::SystemTime;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_postgres::Row;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::durable::{Durable, Steps};
use crate::JobError;
use std::sync::Arc;

/// The columns of `jobq.job` a checkout returns, in the order [`Job::from_row`] reads them.
pub(crate) const JOB_COLUMNS: &str = "id, queue, kind, payload, priority, attempt, max_attempts, \
     run_at, enqueued_at, unique_key, concurrency_key, interrupted_at, last_error, \
     unique_strategy, concurrency_limit, started_at, depends_on, checkpoints";

/// A job checked out by a worker: a row of `jobq.job`, with the cancellation signal of the run.
///
/// A [`Worker`](crate::Worker) hands one to its handler. The [cancellation
/// token](Job::cancellation_token) fires when the job's cancellation is requested
/// (`jobq_cancel` while it runs) or when the worker lost the job (it was reaped, `JQ001`, and
/// the job will run again elsewhere); a handler that stops then should return
/// `Err(JobError::cancelled())`. A job returned by [`checkout`](crate::checkout) has a token
/// nobody fires but you.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Job {
    /// The job's id.
    pub id: i64,
    /// Its queue.
    pub queue: String,
    /// Its kind (class name), or `None`.
    pub kind: Option<String>,
    /// What the enqueuer gave.
    pub payload: Value,
    /// Its priority; lower runs first.
    pub priority: i32,
    /// This attempt's number, from 1.
    pub attempt: i32,
    /// The attempts allowed before the job becomes `dead`.
    pub max_attempts: i32,
    /// When it became due.
    pub run_at: SystemTime,
    /// When it was enqueued.
    pub enqueued_at: SystemTime,
    /// Its unique key, or `None`.
    pub unique_key: Option<String>,
    /// Its concurrency key, or `None`.
    pub concurrency_key: Option<String>,
    /// When an earlier attempt was cut off (its worker reaped, or the job returned by a
    /// heartbeat's `holding`); `None` otherwise.
    pub interrupted_at: Option<SystemTime>,
    /// The error of the last failed attempt, or `None`.
    pub last_error: Option<Value>,
    /// The strategy of its unique key, `None` without one.
    pub unique_strategy: Option<String>,
    /// The limit of its concurrency key, `None` without one.
    pub concurrency_limit: Option<i32>,
    /// When this attempt started.
    pub started_at: Option<SystemTime>,
    /// The jobs it depends on, as enqueued, or `None`.
    pub depends_on: Option<Vec<i64>>,
    /// What its steps recorded ([`checkpoint`](crate::checkpoint)) in earlier attempts or
    /// before a suspension: a JSON object, empty when none.
    pub checkpoints: Value,
    /// The worker the job is checked out to.
    pub worker_id: Uuid,
    cancel: CancellationToken,
    steps: Option<Arc<Steps>>,
}

impl Job {
    /// Reads a row whose columns are those of `jobq.job`, in the type's order, as a job
    /// checked out by `worker_id`.
    pub fn from_row(row: &Row, worker_id: Uuid) -> Result<Job, tokio_postgres::Error> {
        Ok(Job {
            id: row.try_get(0)?,
            queue: row.try_get(1)?,
            kind: row.try_get(2)?,
            payload: row.try_get(3)?,
            priority: row.try_get(4)?,
            attempt: row.try_get(5)?,
            max_attempts: row.try_get(6)?,
            run_at: row.try_get(7)?,
            enqueued_at: row.try_get(8)?,
            unique_key: row.try_get(9)?,
            concurrency_key: row.try_get(10)?,
            interrupted_at: row.try_get(11)?,
            last_error: row.try_get(12)?,
            unique_strategy: row.try_get(13)?,
            concurrency_limit: row.try_get(14)?,
            started_at: row.try_get(15)?,
            depends_on: row.try_get(16)?,
            checkpoints: row
                .try_get::<_, Option<Value>>(17)?
                .unwrap_or_else(|| Value::Object(Default::default())),
            worker_id,
            cancel: CancellationToken::new(),
            steps: None,
        })
    }

    /// A job no checkout returned: id 0, attempt 1 of 25, priority 0, due, enqueued and
    /// started now, no keys, no checkpoints, the nil worker id, a token of its own.
    /// [`testing::make_job`](crate::testing::make_job) hands it out for unit tests.
    pub(crate) fn made(queue: &str, kind: Option<&str>, payload: Value) -> Job {
        let now = SystemTime::now();
        Job {
            id: 0,
            queue: queue.to_string(),
            kind: kind.map(str::to_string),
            payload,
            priority: 0,
            attempt: 1,
            max_attempts: 25,
            run_at: now,
            enqueued_at: now,
            unique_key: None,
            concurrency_key: None,
            interrupted_at: None,
            last_error: None,
            unique_strategy: None,
            concurrency_limit: None,
            started_at: Some(now),
            depends_on: None,
            checkpoints: Value::Object(Default::default()),
            worker_id: Uuid::nil(),
            cancel: CancellationToken::new(),
            steps: None,
        }
    }

    pub(crate) fn with_token(mut self, token: CancellationToken) -> Job {
        self.cancel = token;
        self
    }

    pub(crate) fn with_steps(mut self, steps: Arc<Steps>) -> Job {
        self.steps = Some(steps);
        self
    }

    /// Durable steps for this job ([`Durable`]): step, sleep, await_event, spawn, gather.
    /// An error for a job not run by a [`Worker`](crate::Worker).
    pub fn durable(&self) -> Result<Durable, JobError> {
        match &self.steps {
            Some(steps) => Ok(Durable::new(
                steps.clone(),
                self.id,
                self.worker_id,
                &self.checkpoints,
            )),
            None => Err(JobError::new(
                "NoWorker",
                "durable steps need a job run by a jobq_client::Worker",
            )),
        }
    }

    /// The payload deserialised into `T`.
    pub fn parse_payload<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.payload)
    }

    /// The token that fires when the job is to stop: its cancellation was requested, or the
    /// worker lost it.
    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the job is to stop (see [`Job::cancellation_token`]).
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves when the job is to stop (see [`Job::cancellation_token`]).
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// Runs `work` until it ends or the job is to stop, whichever comes first: its output, or
    /// `Err(JobError::cancelled())` (and `work` is dropped).
    ///
    /// ```no_run
    /// # use jobq_client::{Job, JobError};
    /// # async fn send(_: &serde_json::Value) -> Result<String, std::io::Error> { Ok(String::new()) }
    /// async fn mail(job: Job) -> Result<serde_json::Value, JobError> {
    ///     let id = job.cancellable(send(&job.payload)).await??;
    ///     Ok(serde_json::json!({"message_id": id}))
    /// }
    /// ```
    pub async fn cancellable<F: Future>(&self, work: F) -> Result<F::Output, JobError> {
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(JobError::cancelled()),
            out = work => Ok(out),
        }
    }
}

/// The state of a job, as `jobq_fail` and `jobq_cancel` return it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobState {
    /// Waiting: due now, scheduled, or waiting for a retry's backoff.
    Ready,
    /// Checked out by a live worker.
    Executing,
    /// Waiting for other jobs or for an event (workflows): checkout does not take it.
    Blocked,
    /// Finished successfully.
    Completed,
    /// Attempts spent, or discarded.
    Dead,
    /// Cancelled.
    Cancelled,
    /// A state this version of the library does not know, as the server named it.
    Other(String),
}

impl JobState {
    /// The state's name in the database (`"ready"`, `"executing"`, …).
    pub fn as_str(&self) -> &str {
        match self {
            JobState::Ready => "ready",
            JobState::Executing => "executing",
            JobState::Blocked => "blocked",
            JobState::Completed => "completed",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
            JobState::Other(s) => s,
        }
    }

    /// The state a name from the database stands for.
    pub fn from_name(name: &str) -> JobState {
        match name {
            "ready" => JobState::Ready,
            "executing" => JobState::Executing,
            "blocked" => JobState::Blocked,
            "completed" => JobState::Completed,
            "dead" => JobState::Dead,
            "cancelled" => JobState::Cancelled,
            other => JobState::Other(other.to_string()),
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
