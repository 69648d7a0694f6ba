//! One async function per jobq SQL call, generic over [`GenericClient`], so that a
//! [`Client`](tokio_postgres::Client) or a [`Transaction`](tokio_postgres::Transaction) works:
//! a job enqueued in the caller's transaction commits with the caller's own writes, or not at
//! all.
//!
//! Optional arguments are given by name and only when set (`jobq_enqueue($1, $2, priority =>
//! $3)`), so the server's defaults stay the server's. Every statement is sent with
//! `query_typed`, as one unnamed statement: no server-side prepared statement is left behind,
//! which is what a transaction-mode pooler (PgBouncer) needs. (The [`Worker`](crate::Worker)
//! alone, on its own job connection and not behind a pooler, prepares its two checkout
//! statements once.)

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row, Statement};
use uuid::Uuid;

use crate::job::JOB_COLUMNS;
use crate::{Error, Job, JobError, JobState};

type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// The argument list of one call: positional arguments first, then named ones.
struct Args<'a> {
    sql: Vec<String>,
    params: Vec<Param<'a>>,
}

impl<'a> Args<'a> {
    fn new() -> Self {
        Args {
            sql: Vec::new(),
            params: Vec::new(),
        }
    }

    fn next(&self) -> String {
        format!("${}", self.params.len() + 1)
    }

    fn arg(mut self, value: &'a (dyn ToSql + Sync), ty: Type) -> Self {
        self.sql.push(self.next());
        self.params.push((value, ty));
        self
    }

    /// `name => $n`, when the value is set.
    fn named<T: ToSql + Sync + 'a>(self, name: &str, value: &'a Option<T>, ty: Type) -> Self {
        self.named_expr(name, "{}", value, ty)
    }

    /// `name => <expr>` with `{}` in `expr` standing for the parameter, when the value is set.
    fn named_expr<T: ToSql + Sync + 'a>(
        mut self,
        name: &str,
        expr: &str,
        value: &'a Option<T>,
        ty: Type,
    ) -> Self {
        if let Some(v) = value {
            self.sql
                .push(format!("{name} => {}", expr.replace("{}", &self.next())));
            self.params.push((v, ty));
        }
        self
    }

    fn call(&self, function: &str) -> String {
        format!("{function}({})", self.sql.join(", "))
    }
}

/// An interval parameter: seconds as a float8, turned into an interval by the server.
const INTERVAL: &str = "make_interval(secs => {})";

fn secs(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64())
}

async fn query<C: GenericClient>(
    client: &C,
    sql: &str,
    args: &Args<'_>,
) -> Result<Vec<Row>, Error> {
    Ok(client.query_typed(sql, &args.params).await?)
}

/// Statements prepared on one connection, by SQL text: a worker's job connection, when it is
/// not behind a pooler, parses and plans its checkout statements once instead of at every
/// call. Belongs to one connection: a new connection starts a new one.
#[derive(Default)]
pub(crate) struct Prepared(Mutex<HashMap<String, Statement>>);

/// As [`query`], with the statement prepared once on `client` when `prepared` is given.
async fn query_with<C: GenericClient>(
    client: &C,
    prepared: Option<&Prepared>,
    sql: &str,
    args: &Args<'_>,
) -> Result<Vec<Row>, Error> {
    let Some(prepared) = prepared else {
        return query(client, sql, args).await;
    };
    let cached = prepared.0.lock().expect("statements").get(sql).cloned();
    let statement = match cached {
        Some(statement) => statement,
        None => {
            let types: Vec<Type> = args.params.iter().map(|(_, t)| t.clone()).collect();
            let statement = client.prepare_typed(sql, &types).await?;
            let mut map = prepared.0.lock().expect("statements");
            map.insert(sql.to_string(), statement.clone());
            statement
        }
    };
    let params: Vec<&(dyn ToSql + Sync)> = args.params.iter().map(|(v, _)| *v).collect();
    Ok(client.query(&statement, &params).await?)
}

async fn one<C: GenericClient>(client: &C, sql: &str, args: &Args<'_>) -> Result<Row, Error> {
    let mut rows = query(client, sql, args).await?;
    // Every scalar call returns exactly one row.
    Ok(rows.swap_remove(0))
}

/// The strategy of a unique key (`jobq_enqueue`'s `unique_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UniqueStrategy {
    /// At most one job with the key exists from enqueue until it completes, dies or is
    /// cancelled (the server's default).
    UntilExecuted,
    /// At most one job with the key waits; the key is released when it starts executing.
    UntilExecuting,
    /// Any number may wait, at most one executes at a time.
    WhileExecuting,
}

impl UniqueStrategy {
    /// The name jobq knows it by.
    pub fn as_str(self) -> &'static str {
        match self {
            UniqueStrategy::UntilExecuted => "until_executed",
            UniqueStrategy::UntilExecuting => "until_executing",
            UniqueStrategy::WhileExecuting => "while_executing",
        }
    }
}

/// What an enqueue does when its unique key is taken (`jobq_enqueue`'s `on_conflict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// Refuse with `23505` ([`Error::UniqueConflict`], with the holder's id); the server's
    /// default.
    Reject,
    /// Return `None` silently.
    Discard,
    /// Return `None` and emit a NOTICE naming the holder.
    Log,
    /// Debounce: a holder still `ready` takes the new payload, priority and run_at, and its id
    /// is returned; otherwise as `Reject`.
    Replace,
}

impl OnConflict {
    /// The name jobq knows it by.
    pub fn as_str(self) -> &'static str {
        match self {
            OnConflict::Reject => "reject",
            OnConflict::Discard => "discard",
            OnConflict::Log => "log",
            OnConflict::Replace => "replace",
        }
    }
}

/// The optional arguments of [`enqueue`]; each left unset keeps the server's default.
///
/// ```
/// use std::time::Duration;
/// use jobq_client::{EnqueueOptions, OnConflict};
///
/// let options = EnqueueOptions::new()
///     .kind("welcome")
///     .priority(-1)
///     .run_in(Duration::from_secs(60))
///     .unique_key("welcome:42")
///     .on_conflict(OnConflict::Discard);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
pub struct EnqueueOptions {
    kind: Option<String>,
    priority: Option<i32>,
    run_at: Option<SystemTime>,
    run_in: Option<Duration>,
    max_attempts: Option<i32>,
    unique_key: Option<String>,
    unique_strategy: Option<UniqueStrategy>,
    on_conflict: Option<OnConflict>,
    concurrency_key: Option<String>,
    concurrency_limit: Option<i32>,
    rate_key: Option<String>,
    depends_on: Option<Vec<i64>>,
    on_parent_failure: Option<&'static str>,
    fairness_key: Option<String>,
}

impl EnqueueOptions {
    /// No option set: every argument takes the server's default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The job's kind (class name): routes it to a [`Worker`](crate::Worker)'s handler, and
    /// can be paused on its own.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Its priority: lower runs first (server default 0).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// When it becomes due (server default: now). Replaces an earlier [`run_in`](Self::run_in).
    pub fn run_at(mut self, at: SystemTime) -> Self {
        self.run_at = Some(at);
        self.run_in = None;
        self
    }

    /// Due `delay` after the server's clock at the call (`clock_timestamp() + delay`), so the
    /// client's clock does not matter. Replaces an earlier [`run_at`](Self::run_at).
    pub fn run_in(mut self, delay: Duration) -> Self {
        self.run_in = Some(delay);
        self.run_at = None;
        self
    }

    /// Attempts before the job becomes `dead` (server default 25).
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// A key at most one job may hold, as the [`UniqueStrategy`] says.
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// How the unique key is held (server default [`UniqueStrategy::UntilExecuted`]).
    pub fn unique_strategy(mut self, strategy: UniqueStrategy) -> Self {
        self.unique_strategy = Some(strategy);
        self
    }

    /// What to do when the unique key is taken (server default [`OnConflict::Reject`]).
    pub fn on_conflict(mut self, on_conflict: OnConflict) -> Self {
        self.on_conflict = Some(on_conflict);
        self
    }

    /// A key limiting how many jobs sharing it execute at once, across all workers.
    pub fn concurrency_key(mut self, key: impl Into<String>) -> Self {
        self.concurrency_key = Some(key.into());
        self
    }

    /// How many jobs of the concurrency key may execute at once (server default 1).
    pub fn concurrency_limit(mut self, limit: i32) -> Self {
        self.concurrency_limit = Some(limit);
        self
    }

    /// The rate key whose limit ([`set_rate_limit`]) this job's start counts against.
    pub fn rate_key(mut self, key: impl Into<String>) -> Self {
        self.rate_key = Some(key.into());
        self
    }

    /// The jobs this one depends on (its parents): it starts `blocked` and becomes ready when
    /// the last of them finishes.
    pub fn depends_on(mut self, parents: impl IntoIterator<Item = i64>) -> Self {
        self.depends_on = Some(parents.into_iter().collect());
        self
    }

    /// A parent that ends `dead` or `cancelled` lets this job run (`on_parent_failure =>
    /// 'run'`) instead of cancelling it (the server's default).
    pub fn run_on_parent_failure(mut self) -> Self {
        self.on_parent_failure = Some("run");
        self
    }

    /// The job's key in its queue's fair checkout (a tenant, a customer): the queue's keys are
    /// served in turns.
    pub fn fairness_key(mut self, key: impl Into<String>) -> Self {
        self.fairness_key = Some(key.into());
        self
    }
}

/// Adds one job (`jobq_enqueue`) and returns its id; `None` when its unique key was taken and
/// [`OnConflict::Discard`] or [`OnConflict::Log`] said to let it go.
///
/// In the caller's transaction when `client` is a [`Transaction`](tokio_postgres::Transaction):
/// the job exists, and runs, only if that transaction commits.
///
/// Role: `jobq_producer`. Errors: [`Error::UniqueConflict`] (`23505`),
/// [`Error::InvalidArgument`] (`22023`, `22004`), [`Error::PermissionDenied`] (`42501`).
pub async fn enqueue<C, P>(
    client: &C,
    queue: &str,
    payload: &P,
    options: EnqueueOptions,
) -> Result<Option<i64>, Error>
where
    C: GenericClient,
    P: Serialize + ?Sized,
{
    let payload = serde_json::to_value(payload)?;
    let o = &options;
    let run_in = secs(o.run_in);
    let strategy = o.unique_strategy.map(UniqueStrategy::as_str);
    let on_conflict = o.on_conflict.map(OnConflict::as_str);
    let args = Args::new()
        .arg(&queue, Type::TEXT)
        .arg(&payload, Type::JSONB)
        .named("kind", &o.kind, Type::TEXT)
        .named("priority", &o.priority, Type::INT4)
        .named("run_at", &o.run_at, Type::TIMESTAMPTZ)
        .named_expr(
            "run_at",
            "clock_timestamp() + make_interval(secs => {})",
            &run_in,
            Type::FLOAT8,
        )
        .named("max_attempts", &o.max_attempts, Type::INT4)
        .named("unique_key", &o.unique_key, Type::TEXT)
        .named("unique_strategy", &strategy, Type::TEXT)
        .named("on_conflict", &on_conflict, Type::TEXT)
        .named("concurrency_key", &o.concurrency_key, Type::TEXT)
        .named("concurrency_limit", &o.concurrency_limit, Type::INT4)
        .named("rate_key", &o.rate_key, Type::TEXT)
        .named("depends_on", &o.depends_on, Type::INT8_ARRAY)
        .named("on_parent_failure", &o.on_parent_failure, Type::TEXT)
        .named("fairness_key", &o.fairness_key, Type::TEXT);
    let sql = format!("SELECT {}", args.call("jobq_enqueue"));
    Ok(one(client, &sql, &args).await?.try_get(0)?)
}

/// The optional arguments of [`enqueue_batch`]; each left unset keeps the server's default.
#[derive(Debug, Clone, Default)]
pub struct BatchOptions {
    kind: Option<String>,
    priority: Option<i32>,
    run_at: Option<SystemTime>,
    run_in: Option<Duration>,
    max_attempts: Option<i32>,
    fairness_key: Option<String>,
}

impl BatchOptions {
    /// No option set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The kind of every job.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// The priority of every job.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// When the jobs become due. Replaces an earlier [`run_in`](Self::run_in).
    pub fn run_at(mut self, at: SystemTime) -> Self {
        self.run_at = Some(at);
        self.run_in = None;
        self
    }

    /// Due `delay` after the server's clock at the call. Replaces an earlier
    /// [`run_at`](Self::run_at).
    pub fn run_in(mut self, delay: Duration) -> Self {
        self.run_in = Some(delay);
        self.run_at = None;
        self
    }

    /// Attempts before each job becomes `dead`.
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// Every job's key in the queue's fair checkout.
    pub fn fairness_key(mut self, key: impl Into<String>) -> Self {
        self.fairness_key = Some(key.into());
        self
    }
}

/// Adds one job per payload in one call (`jobq_enqueue_batch`), all in `queue` with the same
/// options and no keys, and returns their ids in payload order.
///
/// Role: `jobq_producer`. Errors: [`Error::InvalidArgument`], [`Error::PermissionDenied`].
pub async fn enqueue_batch<C, P>(
    client: &C,
    queue: &str,
    payloads: &[P],
    options: BatchOptions,
) -> Result<Vec<i64>, Error>
where
    C: GenericClient,
    P: Serialize,
{
    let payloads = payloads
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<Value>, _>>()?;
    let o = &options;
    let run_in = secs(o.run_in);
    let args = Args::new()
        .arg(&queue, Type::TEXT)
        .arg(&payloads, Type::JSONB_ARRAY)
        .named("kind", &o.kind, Type::TEXT)
        .named("priority", &o.priority, Type::INT4)
        .named("run_at", &o.run_at, Type::TIMESTAMPTZ)
        .named_expr(
            "run_at",
            "clock_timestamp() + make_interval(secs => {})",
            &run_in,
            Type::FLOAT8,
        )
        .named("max_attempts", &o.max_attempts, Type::INT4)
        .named("fairness_key", &o.fairness_key, Type::TEXT);
    let sql = format!("SELECT id FROM {} AS id", args.call("jobq_enqueue_batch"));
    query(client, &sql, &args)
        .await?
        .iter()
        .map(|r| Ok(r.try_get(0)?))
        .collect()
}

/// Cancels a job (`jobq_cancel`): a waiting job becomes `cancelled` at once; a running one gets
/// a cancellation request its worker sees at its next heartbeat (a [`Worker`](crate::Worker)
/// fires the job's [cancellation token](Job::cancellation_token)). Returns the job's state
/// after the call (`Executing` for a running job), `None` for an unknown id.
///
/// Role: `jobq_producer`.
pub async fn cancel<C: GenericClient>(client: &C, job_id: i64) -> Result<Option<JobState>, Error> {
    let args = Args::new().arg(&job_id, Type::INT8);
    let state: Option<String> = one(client, "SELECT jobq_cancel($1)", &args)
        .await?
        .try_get(0)?;
    Ok(state.as_deref().map(JobState::from_name))
}

/// Makes a `dead` or `cancelled` job `ready` again, with `attempt` back to 0 (`jobq_retry`);
/// false when its unique key is taken meanwhile or the job is in another state.
///
/// Role: `jobq_producer`.
pub async fn retry<C: GenericClient>(client: &C, job_id: i64) -> Result<bool, Error> {
    let args = Args::new().arg(&job_id, Type::INT8);
    Ok(one(client, "SELECT jobq_retry($1)", &args)
        .await?
        .try_get(0)?)
}

/// Makes checkout skip a queue (`kind` `None`), a kind within a queue (both), or a kind in
/// every queue (`queue` `None`) (`jobq_pause`). Both `None`: [`Error::InvalidArgument`]
/// (`22004`).
///
/// Role: `jobq_admin`.
pub async fn pause<C: GenericClient>(
    client: &C,
    queue: Option<&str>,
    kind: Option<&str>,
) -> Result<(), Error> {
    let args = Args::new()
        .arg(&queue, Type::TEXT)
        .named("kind", &kind, Type::TEXT);
    query(
        client,
        &format!("SELECT {}", args.call("jobq_pause")),
        &args,
    )
    .await?;
    Ok(())
}

/// Undoes the [`pause`] made with the same arguments (`jobq_resume`).
///
/// Role: `jobq_admin`.
pub async fn resume<C: GenericClient>(
    client: &C,
    queue: Option<&str>,
    kind: Option<&str>,
) -> Result<(), Error> {
    let args = Args::new()
        .arg(&queue, Type::TEXT)
        .named("kind", &kind, Type::TEXT);
    query(
        client,
        &format!("SELECT {}", args.call("jobq_resume")),
        &args,
    )
    .await?;
    Ok(())
}

/// The optional arguments of [`schedule`]; each left unset keeps the server's default.
#[derive(Debug, Clone, Default)]
pub struct ScheduleOptions {
    payload: Option<Value>,
    kind: Option<String>,
    priority: Option<i32>,
    max_attempts: Option<i32>,
    time_zone: Option<String>,
    catch_up: Option<bool>,
}

impl ScheduleOptions {
    /// No option set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The payload of every job the schedule enqueues (server default `{}`).
    pub fn payload(mut self, payload: Value) -> Self {
        self.payload = Some(payload);
        self
    }

    /// The kind of its jobs.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// The priority of its jobs.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// The attempts of its jobs.
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// The IANA time zone the cron expression is read in (server default `UTC`).
    pub fn time_zone(mut self, time_zone: impl Into<String>) -> Self {
        self.time_zone = Some(time_zone.into());
        self
    }

    /// Whether ticks missed while nothing ran are all enqueued (true) or only the latest
    /// (server default false).
    pub fn catch_up(mut self, catch_up: bool) -> Self {
        self.catch_up = Some(catch_up);
        self
    }
}

/// Creates or replaces the recurring schedule `name` (`jobq_schedule`): one job in `queue` per
/// tick of `cron` (five fields, or six with seconds first; `@hourly`, `@daily`, …).
///
/// Role: `jobq_admin`. Errors: [`Error::InvalidArgument`] for an invalid expression or time
/// zone.
pub async fn schedule<C: GenericClient>(
    client: &C,
    name: &str,
    cron: &str,
    queue: &str,
    options: ScheduleOptions,
) -> Result<(), Error> {
    let o = &options;
    let args = Args::new()
        .arg(&name, Type::TEXT)
        .arg(&cron, Type::TEXT)
        .arg(&queue, Type::TEXT)
        .named("payload", &o.payload, Type::JSONB)
        .named("kind", &o.kind, Type::TEXT)
        .named("priority", &o.priority, Type::INT4)
        .named("max_attempts", &o.max_attempts, Type::INT4)
        .named("time_zone", &o.time_zone, Type::TEXT)
        .named("catch_up", &o.catch_up, Type::BOOL);
    query(
        client,
        &format!("SELECT {}", args.call("jobq_schedule")),
        &args,
    )
    .await?;
    Ok(())
}

/// Removes the schedule `name` (`jobq_unschedule`); false when there was none. Jobs it
/// enqueued stay.
///
/// Role: `jobq_admin`.
pub async fn unschedule<C: GenericClient>(client: &C, name: &str) -> Result<bool, Error> {
    let args = Args::new().arg(&name, Type::TEXT);
    Ok(one(client, "SELECT jobq_unschedule($1)", &args)
        .await?
        .try_get(0)?)
}

/// At most `max_starts` jobs of rate key `key` start within any window of length `per`
/// (`jobq_set_rate_limit`); `max_starts` `None` removes the limit.
///
/// Role: `jobq_admin`. Errors: [`Error::InvalidArgument`] (`22023` for a bound out of range,
/// `22004` for `per` `None` with `max_starts` given).
pub async fn set_rate_limit<C: GenericClient>(
    client: &C,
    key: &str,
    max_starts: Option<i32>,
    per: Option<Duration>,
) -> Result<(), Error> {
    let per = secs(per);
    let args = Args::new()
        .arg(&key, Type::TEXT)
        .arg(&max_starts, Type::INT4)
        .arg(&per, Type::FLOAT8);
    query(
        client,
        "SELECT jobq_set_rate_limit($1, $2, make_interval(secs => $3))",
        &args,
    )
    .await?;
    Ok(())
}

/// The optional arguments of [`register_worker`].
#[derive(Debug, Clone, Default)]
pub struct RegisterOptions {
    name: Option<String>,
    metadata: Option<Value>,
    bind_to_session: Option<bool>,
}

impl RegisterOptions {
    /// No option set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A name for the worker, shown in `jobq.workers` and the dashboard.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Free JSON for the application (host, version, …).
    pub fn metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Whether the worker is also dead the moment this database session ends. Not behind a
    /// transaction-mode pooler.
    pub fn bind_to_session(mut self, bind: bool) -> Self {
        self.bind_to_session = Some(bind);
        self
    }
}

/// Registers a worker (`jobq_register_worker`) and returns its id.
///
/// Role: `jobq_worker`.
pub async fn register_worker<C: GenericClient>(
    client: &C,
    options: RegisterOptions,
) -> Result<Uuid, Error> {
    let o = &options;
    let args = Args::new()
        .named("name", &o.name, Type::TEXT)
        .named("metadata", &o.metadata, Type::JSONB)
        .named("bind_to_session", &o.bind_to_session, Type::BOOL);
    let sql = format!("SELECT {}", args.call("jobq_register_worker"));
    Ok(one(client, &sql, &args).await?.try_get(0)?)
}

/// Refreshes the worker's heartbeat (`jobq_heartbeat`) and returns the ids of its jobs whose
/// cancellation was requested. With `holding` (the ids really in flight), every job executing
/// under the worker that the list lacks goes back to `ready` at once.
///
/// Role: `jobq_worker`. Errors: [`Error::WorkerLost`] (`JQ001`) for a reaped or unknown worker.
pub async fn heartbeat<C: GenericClient>(
    client: &C,
    worker: Uuid,
    holding: Option<&[i64]>,
) -> Result<Vec<i64>, Error> {
    let args = Args::new()
        .arg(&worker, Type::UUID)
        .named("holding", &holding, Type::INT8_ARRAY);
    let sql = format!("SELECT {}", args.call("jobq_heartbeat"));
    Ok(one(client, &sql, &args).await?.try_get(0)?)
}

/// The first step of a graceful shutdown (`jobq_stop_checkouts`): the worker's checkouts
/// claim nothing more. One waiting now, on any connection, returns at once with no job, and so
/// does every later one, until the worker unregisters; its jobs in hand, heartbeats and
/// completions go on. No statement is cancelled, so the server logs no error.
///
/// Role: `jobq_worker`. Errors: [`Error::WorkerLost`].
pub async fn stop_checkouts<C: GenericClient>(client: &C, worker: Uuid) -> Result<(), Error> {
    let args = Args::new().arg(&worker, Type::UUID);
    one(client, "SELECT jobq_stop_checkouts($1)::text", &args).await?;
    Ok(())
}

/// Graceful shutdown of a worker (`jobq_unregister_worker`): its executing jobs go back to
/// `ready` without counting the attempt, its locks are released; returns how many jobs went
/// back.
///
/// Role: `jobq_worker`. Errors: [`Error::WorkerLost`].
pub async fn unregister_worker<C: GenericClient>(client: &C, worker: Uuid) -> Result<i32, Error> {
    let args = Args::new().arg(&worker, Type::UUID);
    Ok(one(client, "SELECT jobq_unregister_worker($1)", &args)
        .await?
        .try_get(0)?)
}

/// The optional arguments of [`checkout`] and of the fused calls
/// ([`complete_and_checkout`], [`fail_and_checkout`]).
#[derive(Debug, Clone, Default)]
pub struct CheckoutOptions {
    queues: Option<Vec<String>>,
    max_jobs: Option<i32>,
    wait: Option<Duration>,
}

impl CheckoutOptions {
    /// No option set: one job, from any queue, without waiting.
    pub fn new() -> Self {
        Self::default()
    }

    /// The queues to take jobs from (server default: every queue).
    pub fn queues<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.queues = Some(queues.into_iter().map(Into::into).collect());
        self
    }

    /// At most this many jobs (server default 1).
    pub fn max_jobs(mut self, max_jobs: i32) -> Self {
        self.max_jobs = Some(max_jobs);
        self
    }

    /// When nothing is available, wait inside the server up to `wait` (more than 0, at most
    /// an hour) for a job. [`checkout`] only: the fused calls have no `wait`, and the server
    /// refuses them one (`42883`).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }
}

fn jobs(rows: Vec<Row>, worker: Uuid) -> Result<Vec<Job>, Error> {
    rows.iter().map(|r| Ok(Job::from_row(r, worker)?)).collect()
}

/// Claims up to `max_jobs` due jobs for `worker` (`jobq_checkout`), optionally waiting inside
/// the server for one; returns them in claim order, none when nothing was available.
///
/// Role: `jobq_worker`. Errors: [`Error::WorkerLost`]; [`Error::Db`] with SQLSTATE `57014`
/// when a waiting call is cancelled, `0A000` for a wait outside READ COMMITTED.
pub async fn checkout<C: GenericClient>(
    client: &C,
    worker: Uuid,
    options: CheckoutOptions,
) -> Result<Vec<Job>, Error> {
    checkout_with(client, None, worker, options).await
}

/// [`checkout`], with its statement prepared once when `prepared` is given.
pub(crate) async fn checkout_with<C: GenericClient>(
    client: &C,
    prepared: Option<&Prepared>,
    worker: Uuid,
    options: CheckoutOptions,
) -> Result<Vec<Job>, Error> {
    let o = &options;
    let wait = secs(o.wait);
    let args = Args::new()
        .arg(&worker, Type::UUID)
        .named("queues", &o.queues, Type::TEXT_ARRAY)
        .named("max_jobs", &o.max_jobs, Type::INT4)
        .named_expr("wait", INTERVAL, &wait, Type::FLOAT8);
    let sql = format!("SELECT {JOB_COLUMNS} FROM {}", args.call("jobq_checkout"));
    jobs(query_with(client, prepared, &sql, &args).await?, worker)
}

/// Marks a job `completed` with `result` (`jobq_complete`); false, changing nothing, when the
/// job is no longer executing under `worker` (reaped, cancelled, finished): drop it.
///
/// Role: `jobq_worker`.
pub async fn complete<C: GenericClient>(
    client: &C,
    job_id: i64,
    worker: Uuid,
    result: Option<&Value>,
) -> Result<bool, Error> {
    let args = Args::new()
        .arg(&job_id, Type::INT8)
        .arg(&worker, Type::UUID)
        .named("result", &result, Type::JSONB);
    let sql = format!("SELECT {}", args.call("jobq_complete"));
    Ok(one(client, &sql, &args).await?.try_get(0)?)
}

/// The optional arguments of [`fail`]. A [`JobError`] converts into them.
#[derive(Debug, Clone, Default)]
pub struct FailOptions {
    error: Option<Value>,
    retry_in: Option<Duration>,
    discard: Option<bool>,
}

impl FailOptions {
    /// No option set: no error recorded, the default backoff.
    pub fn new() -> Self {
        Self::default()
    }

    /// The error to record (`last_error`, and the job's error history).
    pub fn error(mut self, error: Value) -> Self {
        self.error = Some(error);
        self
    }

    /// Retry after `delay` instead of the default backoff.
    pub fn retry_in(mut self, delay: Duration) -> Self {
        self.retry_in = Some(delay);
        self
    }

    /// Never retry: the job becomes `dead`.
    pub fn discard(mut self, discard: bool) -> Self {
        self.discard = Some(discard);
        self
    }
}

impl From<&JobError> for FailOptions {
    fn from(e: &JobError) -> Self {
        FailOptions {
            error: Some(e.to_json()),
            retry_in: e.retry_delay(),
            discard: e.is_discard().then_some(true),
        }
    }
}

/// Records a failed attempt (`jobq_fail`): the job goes back to `ready` (after `retry_in` or
/// the default backoff) while attempts remain, else `dead`; `cancelled` when its cancellation
/// was requested. Returns the new state, `None` when the job was not executing under `worker`.
///
/// Role: `jobq_worker`.
pub async fn fail<C: GenericClient>(
    client: &C,
    job_id: i64,
    worker: Uuid,
    options: FailOptions,
) -> Result<Option<JobState>, Error> {
    let o = &options;
    let retry_in = secs(o.retry_in);
    let args = Args::new()
        .arg(&job_id, Type::INT8)
        .arg(&worker, Type::UUID)
        .named("error", &o.error, Type::JSONB)
        .named_expr("retry_in", INTERVAL, &retry_in, Type::FLOAT8)
        .named("discard", &o.discard, Type::BOOL);
    let sql = format!("SELECT {}", args.call("jobq_fail"));
    let state: Option<String> = one(client, &sql, &args).await?.try_get(0)?;
    Ok(state.as_deref().map(JobState::from_name))
}

/// Completes many jobs of one worker in one call (`jobq_complete_many`), `results[i]` for
/// `job_ids[i]`; returns the ids it completed (an id left out was no longer this worker's).
///
/// Role: `jobq_worker`.
pub async fn complete_many<C: GenericClient>(
    client: &C,
    worker: Uuid,
    job_ids: &[i64],
    results: Option<&[Value]>,
) -> Result<Vec<i64>, Error> {
    let args = Args::new()
        .arg(&worker, Type::UUID)
        .arg(&job_ids, Type::INT8_ARRAY)
        .named("results", &results, Type::JSONB_ARRAY);
    let sql = format!("SELECT {}", args.call("jobq_complete_many"));
    Ok(one(client, &sql, &args).await?.try_get(0)?)
}

/// Fails many jobs of one worker in one call (`jobq_fail_many`), `errors[i]` for `job_ids[i]`,
/// with the default backoff; returns the new states aligned with `job_ids` (`None` where the
/// job was no longer this worker's).
///
/// Role: `jobq_worker`.
pub async fn fail_many<C: GenericClient>(
    client: &C,
    worker: Uuid,
    job_ids: &[i64],
    errors: Option<&[Value]>,
) -> Result<Vec<Option<JobState>>, Error> {
    let args = Args::new()
        .arg(&worker, Type::UUID)
        .arg(&job_ids, Type::INT8_ARRAY)
        .named("errors", &errors, Type::JSONB_ARRAY);
    let sql = format!("SELECT {}", args.call("jobq_fail_many"));
    let states: Vec<Option<String>> = one(client, &sql, &args).await?.try_get(0)?;
    Ok(states
        .iter()
        .map(|s| s.as_deref().map(JobState::from_name))
        .collect())
}

async fn fused<C: GenericClient>(
    client: &C,
    prepared: Option<&Prepared>,
    function: &str,
    worker: Uuid,
    job_ids: &[i64],
    per_job: Option<&[Value]>,
    options: &CheckoutOptions,
) -> Result<Vec<Job>, Error> {
    let wait = secs(options.wait);
    let per_job_name = if function == "jobq_complete_and_checkout" {
        "results"
    } else {
        "errors"
    };
    let args = Args::new()
        .arg(&worker, Type::UUID)
        .arg(&job_ids, Type::INT8_ARRAY)
        .named(per_job_name, &per_job, Type::JSONB_ARRAY)
        .named("queues", &options.queues, Type::TEXT_ARRAY)
        .named("max_jobs", &options.max_jobs, Type::INT4)
        .named_expr("wait", INTERVAL, &wait, Type::FLOAT8);
    let sql = format!("SELECT {JOB_COLUMNS} FROM {}", args.call(function));
    jobs(query_with(client, prepared, &sql, &args).await?, worker)
}

/// The one-commit worker protocol (`jobq_complete_and_checkout`): completes the jobs in hand
/// (`results[i]` for `job_ids[i]`) and checks out the next ones, in one call and one
/// transaction. All or nothing: if a job in hand is no longer executing under the worker, it
/// fails with [`Error::Db`] SQLSTATE `JQ002` and nothing is completed or checked out; report
/// the others with [`complete_many`].
///
/// Role: `jobq_worker`. Errors: `JQ002`, [`Error::WorkerLost`].
pub async fn complete_and_checkout<C: GenericClient>(
    client: &C,
    worker: Uuid,
    job_ids: &[i64],
    results: Option<&[Value]>,
    options: CheckoutOptions,
) -> Result<Vec<Job>, Error> {
    complete_and_checkout_with(client, None, worker, job_ids, results, options).await
}

/// [`complete_and_checkout`], with its statement prepared once when `prepared` is given.
pub(crate) async fn complete_and_checkout_with<C: GenericClient>(
    client: &C,
    prepared: Option<&Prepared>,
    worker: Uuid,
    job_ids: &[i64],
    results: Option<&[Value]>,
    options: CheckoutOptions,
) -> Result<Vec<Job>, Error> {
    fused(
        client,
        prepared,
        "jobq_complete_and_checkout",
        worker,
        job_ids,
        results,
        &options,
    )
    .await
}

/// As [`complete_and_checkout`], failing the jobs in hand (`jobq_fail_and_checkout`, default
/// backoff) instead.
///
/// Role: `jobq_worker`. Errors: `JQ002`, [`Error::WorkerLost`].
pub async fn fail_and_checkout<C: GenericClient>(
    client: &C,
    worker: Uuid,
    job_ids: &[i64],
    errors: Option<&[Value]>,
    options: CheckoutOptions,
) -> Result<Vec<Job>, Error> {
    fused(
        client,
        None,
        "jobq_fail_and_checkout",
        worker,
        job_ids,
        errors,
        &options,
    )
    .await
}

/// Takes or extends the named lock `key` for `worker` (`jobq_acquire_lock`) for `ttl` (server
/// default 5 minutes); false when another live worker or a job holds it.
///
/// Role: `jobq_worker`. Errors: [`Error::WorkerLost`].
pub async fn acquire_lock<C: GenericClient>(
    client: &C,
    key: &str,
    worker: Uuid,
    ttl: Option<Duration>,
) -> Result<bool, Error> {
    let ttl = secs(ttl);
    let args = Args::new()
        .arg(&key, Type::TEXT)
        .arg(&worker, Type::UUID)
        .named_expr("ttl", INTERVAL, &ttl, Type::FLOAT8);
    let sql = format!("SELECT {}", args.call("jobq_acquire_lock"));
    Ok(one(client, &sql, &args).await?.try_get(0)?)
}

/// Releases the named lock `key` if `worker` holds it (`jobq_release_lock`).
///
/// Role: `jobq_worker`. Errors: [`Error::WorkerLost`].
pub async fn release_lock<C: GenericClient>(
    client: &C,
    key: &str,
    worker: Uuid,
) -> Result<bool, Error> {
    let args = Args::new().arg(&key, Type::TEXT).arg(&worker, Type::UUID);
    Ok(one(client, "SELECT jobq_release_lock($1, $2)", &args)
        .await?
        .try_get(0)?)
}

/// The live worker holding the named lock `key` (`jobq_lock_holder`); `None` when it is free,
/// expired, or held by a job's unique key.
///
/// Role: `jobq_worker`.
pub async fn lock_holder<C: GenericClient>(client: &C, key: &str) -> Result<Option<Uuid>, Error> {
    let args = Args::new().arg(&key, Type::TEXT);
    Ok(one(client, "SELECT jobq_lock_holder($1)", &args)
        .await?
        .try_get(0)?)
}

/// What one reap pass did ([`reap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ReapStats {
    /// Dead workers removed.
    pub workers_reaped: i32,
    /// Their jobs returned to `ready`.
    pub jobs_requeued: i32,
    /// Their jobs made `dead` (attempts spent).
    pub jobs_dead: i32,
    /// Locks released (dead workers' and expired ones).
    pub locks_released: i32,
    /// Finished jobs deleted past `jobq.retention`.
    pub jobs_pruned: i32,
}

/// One pass of crash recovery (`jobq_reap`). The background worker runs it by itself with
/// `shared_preload_libraries = 'jobq'`.
///
/// Role: `jobq_admin`.
pub async fn reap<C: GenericClient>(client: &C) -> Result<ReapStats, Error> {
    let row = one(
        client,
        "SELECT workers_reaped, jobs_requeued, jobs_dead, locks_released, jobs_pruned FROM jobq_reap()",
        &Args::new(),
    )
    .await?;
    Ok(ReapStats {
        workers_reaped: row.try_get(0)?,
        jobs_requeued: row.try_get(1)?,
        jobs_dead: row.try_get(2)?,
        locks_released: row.try_get(3)?,
        jobs_pruned: row.try_get(4)?,
    })
}

/// One row of the view `jobq.queue_stats` ([`queue_stats`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QueueStats {
    /// The queue.
    pub queue: String,
    /// Jobs `ready` and due now.
    pub ready: i64,
    /// Jobs `ready` but not yet due.
    pub scheduled: i64,
    /// Jobs `executing`.
    pub executing: i64,
    /// Jobs `dead`, not yet pruned.
    pub dead: i64,
    /// How long the oldest due job has waited; `None` when none waits.
    pub oldest_ready_age: Option<Duration>,
}

/// The view `jobq.queue_stats`: one row per queue with a job not yet pruned, by queue name.
///
/// Role: `jobq_reader`.
pub async fn queue_stats<C: GenericClient>(client: &C) -> Result<Vec<QueueStats>, Error> {
    let rows = query(
        client,
        "SELECT queue, ready, scheduled, executing, dead, \
                extract(epoch FROM oldest_ready_age)::float8 \
           FROM jobq.queue_stats ORDER BY queue",
        &Args::new(),
    )
    .await?;
    rows.iter()
        .map(|r| {
            let age: Option<f64> = r.try_get(5)?;
            Ok(QueueStats {
                queue: r.try_get(0)?,
                ready: r.try_get(1)?,
                scheduled: r.try_get(2)?,
                executing: r.try_get(3)?,
                dead: r.try_get(4)?,
                oldest_ready_age: age.map(|s| Duration::from_secs_f64(s.max(0.0))),
            })
        })
        .collect()
}

/// The server's `jobq.heartbeat_timeout`; `None` when the setting is not defined in this
/// session (jobq's library not loaded yet).
pub async fn heartbeat_timeout<C: GenericClient>(client: &C) -> Result<Option<Duration>, Error> {
    let row = one(
        client,
        "SELECT extract(epoch FROM current_setting('jobq.heartbeat_timeout', true)::interval)::float8",
        &Args::new(),
    )
    .await?;
    let secs: Option<f64> = row.try_get(0)?;
    Ok(secs.map(|s| Duration::from_secs_f64(s.max(0.0))))
}

/// The server's jobq edition (`jobq_version()`): `"extension"` or `"sql"`. A server without
/// `jobq_version` (jobq before 0.4: `42883`) has the extension. For the worker.
pub(crate) async fn server_edition<C: GenericClient>(client: &C) -> Result<String, Error> {
    match one(client, "SELECT edition FROM jobq_version()", &Args::new()).await {
        Ok(row) => Ok(row.try_get(0)?),
        Err(e) if e.sqlstate() == Some("42883") => Ok("extension".to_string()),
        Err(e) => Err(e),
    }
}

/// The server's `jobq.reap_interval`, 1 s when the setting is not defined or empty (as the SQL
/// edition reads it). For the worker.
pub(crate) async fn reap_interval<C: GenericClient>(client: &C) -> Result<Duration, Error> {
    let row = one(
        client,
        "SELECT extract(epoch FROM coalesce(nullif(current_setting('jobq.reap_interval', true), ''), '1s')::interval)::float8",
        &Args::new(),
    )
    .await?;
    let secs: f64 = row.try_get(0)?;
    Ok(Duration::from_secs_f64(secs.max(0.0)))
}

// ---------------------------------------------------------------------------------------
// Workflows

/// A row of [`results`]: a job's state and outcome.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobResult {
    /// The job's id.
    pub id: i64,
    /// Its kind, or `None`.
    pub kind: Option<String>,
    /// Its state.
    pub state: JobState,
    /// Its attempt number.
    pub attempt: i32,
    /// What its handler returned, or `None`.
    pub result: Option<Value>,
    /// The error of its last failed attempt, or `None`.
    pub last_error: Option<Value>,
}

/// The state and outcome of each listed job that exists (`jobq_results`), in the order of
/// `job_ids`: what parents or awaited jobs produced (fan-in). At most 10,000 ids.
///
/// Role: `jobq_reader`.
pub async fn results<C: GenericClient>(
    client: &C,
    job_ids: &[i64],
) -> Result<Vec<JobResult>, Error> {
    let ids = job_ids.to_vec();
    let args = Args::new().arg(&ids, Type::INT8_ARRAY);
    let rows = query(
        client,
        "SELECT id, kind, state, attempt, result, last_error FROM jobq_results($1)",
        &args,
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(JobResult {
                id: r.try_get(0)?,
                kind: r.try_get(1)?,
                state: JobState::from_name(r.try_get(2)?),
                attempt: r.try_get(3)?,
                result: r.try_get(4)?,
                last_error: r.try_get(5)?,
            })
        })
        .collect()
}

/// A whole graph of jobs in one call and one transaction (`jobq_enqueue_graph`): `jobs` is a
/// JSON array whose elements have `jobq_enqueue`'s arguments by their SQL names (`queue`,
/// `payload`, `kind`, `priority`, `run_at`, `unique_key`, ..., `depends_on`,
/// `on_parent_failure`) and `after`, the 0-based positions of earlier elements each depends
/// on. Returns the ids in order (`None` where a unique key's conflict discarded the job).
///
/// Role: `jobq_producer`.
pub async fn enqueue_graph<C: GenericClient>(
    client: &C,
    jobs: &Value,
) -> Result<Vec<Option<i64>>, Error> {
    let args = Args::new().arg(&jobs, Type::JSONB);
    let rows = query(client, "SELECT id FROM jobq_enqueue_graph($1) AS id", &args).await?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}

/// Emits the event `name` (`jobq_emit_event`): every job awaiting it becomes ready, with the
/// payload in its checkpoints. The first emit of a name wins; a later one changes nothing.
/// Returns how many jobs it woke.
///
/// Role: `jobq_producer`.
pub async fn emit_event<C: GenericClient>(
    client: &C,
    name: &str,
    payload: Option<&Value>,
) -> Result<i32, Error> {
    let args = Args::new()
        .arg(&name, Type::TEXT)
        .named("payload", &payload, Type::JSONB);
    let sql = format!("SELECT {}", args.call("jobq_emit_event"));
    Ok(one(client, &sql, &args).await?.try_get(0)?)
}

/// Records `value` under `step` in the running job's checkpoints (`jobq_checkpoint`), in the
/// caller's transaction; false when the job is not executing under `worker`.
///
/// Role: `jobq_worker`.
pub async fn checkpoint<C: GenericClient>(
    client: &C,
    job_id: i64,
    worker: Uuid,
    step: &str,
    value: &Value,
) -> Result<bool, Error> {
    let args = Args::new()
        .arg(&job_id, Type::INT8)
        .arg(&worker, Type::UUID)
        .arg(&step, Type::TEXT)
        .arg(&value, Type::JSONB);
    Ok(one(client, "SELECT jobq_checkpoint($1, $2, $3, $4)", &args)
        .await?
        .try_get(0)?)
}

/// Durable sleep (`jobq_snooze`): the running job goes back to ready, due at `until`; its
/// attempt does not count. False when the job is not executing under `worker`.
///
/// Role: `jobq_worker`.
pub async fn snooze<C: GenericClient>(
    client: &C,
    job_id: i64,
    worker: Uuid,
    until: SystemTime,
) -> Result<bool, Error> {
    let args = Args::new()
        .arg(&job_id, Type::INT8)
        .arg(&worker, Type::UUID)
        .arg(&until, Type::TIMESTAMPTZ);
    Ok(one(client, "SELECT jobq_snooze($1, $2, $3)", &args)
        .await?
        .try_get(0)?)
}

/// Fan-in (`jobq_await_jobs`): `Some("finished")` when every listed job is finished (the job
/// keeps running), `Some("waiting")` when it is now blocked until the last one finishes,
/// `None` when the job is not executing under `worker`.
///
/// Role: `jobq_worker`.
pub async fn await_jobs<C: GenericClient>(
    client: &C,
    job_id: i64,
    worker: Uuid,
    job_ids: &[i64],
) -> Result<Option<String>, Error> {
    let ids = job_ids.to_vec();
    let args = Args::new()
        .arg(&job_id, Type::INT8)
        .arg(&worker, Type::UUID)
        .arg(&ids, Type::INT8_ARRAY);
    Ok(one(client, "SELECT jobq_await_jobs($1, $2, $3)", &args)
        .await?
        .try_get(0)?)
}

/// Waits for an event (`jobq_await_event`): `Some("emitted")` when it was emitted already (its
/// payload is now the checkpoint `event:<name>`; the job keeps running), `Some("waiting")`
/// when the job is now blocked until the event is emitted or `timeout` passes, `None` when
/// the job is not executing under `worker`.
///
/// Role: `jobq_worker`.
pub async fn await_event<C: GenericClient>(
    client: &C,
    job_id: i64,
    worker: Uuid,
    event: &str,
    timeout: Option<Duration>,
) -> Result<Option<String>, Error> {
    let timeout = secs(timeout);
    let args = Args::new()
        .arg(&job_id, Type::INT8)
        .arg(&worker, Type::UUID)
        .arg(&event, Type::TEXT)
        .named_expr(
            "timeout",
            "make_interval(secs => {})",
            &timeout,
            Type::FLOAT8,
        );
    let sql = format!("SELECT {}", args.call("jobq_await_event"));
    Ok(one(client, &sql, &args).await?.try_get(0)?)
}
