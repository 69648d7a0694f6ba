//! The two error types: [`Error`], what a jobq call can fail with, and [`JobError`], what a
//! handler fails a job with.

use std::fmt;
use std::time::Duration;

use serde_json::{json, Value};
use tokio_postgres::error::DbError;
use uuid::Uuid;

/// An error from a jobq call: the SQLSTATEs jobq raises become variants, everything else is
/// [`Error::Db`] with its [`sqlstate`](Error::sqlstate).
///
/// | SQLSTATE | variant |
/// | --- | --- |
/// | `23505` | [`Error::UniqueConflict`], with the holder of the key |
/// | `JQ001` | [`Error::WorkerLost`] |
/// | `22023`, `22004` | [`Error::InvalidArgument`] |
/// | `42501` | [`Error::PermissionDenied`] |
/// | any other (`40001`, `JQ002`, `57014`, …), or none (connection errors) | [`Error::Db`] |
///
/// A refused call changed nothing in the database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `23505`: `enqueue` with a `unique_key` another job or a named lock holds, and
    /// `on_conflict` `reject` (the default). Not an error to retry: the job exists.
    #[error("jobq: unique key taken ({}): {}", holder(*existing_job, *held_by_worker), db_message(source))]
    UniqueConflict {
        /// The id of the job holding the key, read from the error's DETAIL
        /// (`existing job id: <id>`); `None` when a named lock holds it.
        existing_job: Option<i64>,
        /// The worker whose named lock holds the key (DETAIL `held by the lock of worker
        /// <uuid>`); `None` when a job holds it.
        held_by_worker: Option<Uuid>,
        /// The database error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// `JQ001`: the worker is unknown, unregistered, reaped, or its heartbeat expired. Stop
    /// working on its jobs (they run again elsewhere) and register again; [`Worker`](crate::Worker)
    /// does so by itself.
    #[error("jobq: worker unknown or reaped: {}", db_message(.0))]
    WorkerLost(#[source] tokio_postgres::Error),
    /// `22023` (a value out of its domain) or `22004` (a NULL where a value is required): a bug
    /// in the caller; do not retry.
    #[error("jobq: invalid argument: {}", db_message(.0))]
    InvalidArgument(#[source] tokio_postgres::Error),
    /// `42501`: the login role lacks the jobq role the call needs (`jobq_producer`,
    /// `jobq_worker`, `jobq_admin`), or names a worker of another role. A deployment error.
    #[error("jobq: permission denied: {}", db_message(.0))]
    PermissionDenied(#[source] tokio_postgres::Error),
    /// Any other database error, with its SQLSTATE (see [`Error::sqlstate`]): `40001` under
    /// REPEATABLE READ or SERIALIZABLE (retry the transaction), `JQ002` from the fused calls,
    /// `57014` for a cancelled waiting checkout, … A lost connection has no SQLSTATE.
    #[error("jobq: {}", db_message(.0))]
    Db(#[source] tokio_postgres::Error),
    /// A payload, result or metadata value that could not be turned into JSON.
    #[error("jobq: value is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A [`WorkerBuilder`](crate::WorkerBuilder) setting out of its range, or a connection
    /// string that does not parse.
    #[error("jobq: invalid worker configuration: {0}")]
    Config(String),
}

fn holder(job: Option<i64>, worker: Option<Uuid>) -> String {
    match (job, worker) {
        (Some(id), _) => format!("existing job {id}"),
        (None, Some(w)) => format!("held by the lock of worker {w}"),
        (None, None) => "holder unknown".to_string(),
    }
}

fn db_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => e.to_string(),
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        let code = e.code().map(|c| c.code().to_string());
        match code.as_deref() {
            Some("23505") => {
                let detail = e.as_db_error().and_then(DbError::detail).unwrap_or("");
                let existing_job = detail
                    .strip_prefix("existing job id: ")
                    .and_then(|id| id.trim().parse().ok());
                let held_by_worker = detail
                    .strip_prefix("held by the lock of worker ")
                    .and_then(|id| id.trim().parse().ok());
                Error::UniqueConflict {
                    existing_job,
                    held_by_worker,
                    source: e,
                }
            }
            Some("JQ001") => Error::WorkerLost(e),
            Some("22023" | "22004") => Error::InvalidArgument(e),
            Some("42501") => Error::PermissionDenied(e),
            _ => Error::Db(e),
        }
    }
}

impl Error {
    /// The SQLSTATE of a database error (`"23505"`, `"JQ001"`, `"40001"`, …); `None` for a
    /// connection error or an error that did not come from the server.
    pub fn sqlstate(&self) -> Option<&str> {
        self.postgres().and_then(|e| e.code()).map(|c| c.code())
    }

    /// The server's error, with its message, DETAIL and HINT, when there is one.
    pub fn db_error(&self) -> Option<&DbError> {
        self.postgres().and_then(|e| e.as_db_error())
    }

    /// The underlying `tokio_postgres` error, for every variant that has one.
    pub fn postgres(&self) -> Option<&tokio_postgres::Error> {
        match self {
            Error::UniqueConflict { source, .. } => Some(source),
            Error::WorkerLost(e)
            | Error::InvalidArgument(e)
            | Error::PermissionDenied(e)
            | Error::Db(e) => Some(e),
            Error::Json(_) | Error::Config(_) => None,
        }
    }

    /// True when the connection is lost or unusable rather than a statement refused: no
    /// SQLSTATE at all, a connection exception (class `08`), the server shutting down or
    /// terminating the session (`57P01`..`57P03`), or too many connections (`53300`).
    /// [`Worker`](crate::Worker) reconnects after these.
    pub fn is_connection_error(&self) -> bool {
        let Some(e) = self.postgres() else {
            return false;
        };
        if e.is_closed() {
            return true;
        }
        match e.code().map(|c| c.code()) {
            None => true,
            Some(code) => {
                code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300")
            }
        }
    }
}

/// Why a handler failed its job: stored as the job's error `{"type": …, "message": …}`, with an
/// optional retry delay (`jobq_fail`'s `retry_in`) or no retry at all (`discard`).
///
/// Any `std::error::Error` converts into it, so `?` works in a handler; its `type` is the
/// error's type name (`Error` for `std::io::Error`, `ParseIntError`, …). Build one yourself
/// for a type of your own, a retry delay, or a discard:
///
/// ```
/// use std::time::Duration;
/// use jobq_client::JobError;
///
/// let busy = JobError::retry_in(Duration::from_secs(30));   // run again in 30 s
/// let bad = JobError::new("BadAddress", "no @ in 'bob'").discard(); // never retried
/// assert_eq!(bad.to_json()["type"], "BadAddress");
/// ```
pub struct JobError {
    type_name: String,
    message: String,
    retry_in: Option<Duration>,
    discard: bool,
    suspended: bool,
}

impl JobError {
    /// A failure of type `type_name` (the error's class, e.g. `"Timeout"`) with a message.
    /// The job is retried after jobq's default backoff while attempts remain.
    pub fn new(type_name: impl Into<String>, message: impl Into<String>) -> Self {
        JobError {
            type_name: type_name.into(),
            message: message.into(),
            retry_in: None,
            discard: false,
            suspended: false,
        }
    }

    /// Not a failure: a durable step ([`Durable`](crate::Durable)) suspended the job (asleep,
    /// or blocked on an event or on other jobs). Its handler returns this, and the worker
    /// reports nothing: the server has the job and makes it ready again when it is due.
    pub fn suspended() -> Self {
        JobError {
            suspended: true,
            ..JobError::new("Suspended", "the job was suspended")
        }
    }

    /// Whether this is [`JobError::suspended`].
    pub fn is_suspended(&self) -> bool {
        self.suspended
    }

    /// The same error with another message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// A failure with a message and the type `"Error"`.
    pub fn msg(message: impl Into<String>) -> Self {
        JobError::new("Error", message)
    }

    /// Asks for the job to run again after `delay` instead of the default backoff (type
    /// `"RetryIn"`). It still counts as an attempt: with no attempts left the job is `dead`.
    pub fn retry_in(delay: Duration) -> Self {
        JobError::new(
            "RetryIn",
            format!("retry requested in {:.3} s", delay.as_secs_f64()),
        )
        .with_retry_in(delay)
    }

    /// The failure reported for a handler that stopped because its job was cancelled (type
    /// `"Cancelled"`); the job then becomes `cancelled`.
    pub fn cancelled() -> Self {
        JobError::new("Cancelled", "the job was cancelled while it ran")
    }

    /// The same failure, retried after `delay` instead of the default backoff.
    pub fn with_retry_in(mut self, delay: Duration) -> Self {
        self.retry_in = Some(delay);
        self
    }

    /// The same failure, never retried: the job becomes `dead` at once (`jobq_fail`'s
    /// `discard`).
    pub fn discard(mut self) -> Self {
        self.discard = true;
        self
    }

    /// The error's type, as stored under `"type"`.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// The error's message, as stored under `"message"`.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The retry delay asked for, if any.
    pub fn retry_delay(&self) -> Option<Duration> {
        self.retry_in
    }

    /// Whether the job is to be discarded (no retry).
    pub fn is_discard(&self) -> bool {
        self.discard
    }

    /// The JSON stored as the job's error: `{"type": …, "message": …}`.
    pub fn to_json(&self) -> Value {
        json!({"type": self.type_name, "message": self.message})
    }
}

/// The last segment of a type's path, without generic arguments: `std::io::error::Error` is
/// `Error`, `core::num::error::ParseIntError` is `ParseIntError`.
fn short_type_name<E: ?Sized>() -> String {
    let full = std::any::type_name::<E>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_string()
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for JobError {
    /// The error's type name and its message, with the messages of its sources after `: `.
    fn from(e: E) -> Self {
        let mut message = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            let text = s.to_string();
            if !message.ends_with(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            source = s.source();
        }
        JobError::new(short_type_name::<E>(), message)
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.type_name, self.message)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("type_name", &self.type_name)
            .field("message", &self.message)
            .field("retry_in", &self.retry_in)
            .field("discard", &self.discard)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_std_error_keeps_its_type_name_and_message() {
        let e: JobError = "x".parse::<i32>().unwrap_err().into();
        assert_eq!(e.type_name(), "ParseIntError");
        assert_eq!(e.message(), "invalid digit found in string");
        assert_eq!(e.retry_delay(), None);
        assert!(!e.is_discard());
    }

    #[test]
    fn retry_in_and_discard_are_carried() {
        let e = JobError::retry_in(Duration::from_millis(1500));
        assert_eq!(e.type_name(), "RetryIn");
        assert_eq!(e.retry_delay(), Some(Duration::from_millis(1500)));
        let d = JobError::new("Bad", "input").discard();
        assert!(d.is_discard());
        assert_eq!(d.to_json(), json!({"type": "Bad", "message": "input"}));
    }
}
