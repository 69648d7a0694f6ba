//! [`Worker`]: runs handlers for checked-out jobs, N at a time, with the whole worker protocol.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio_postgres::{Client, NoTls};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::calls::{self, CheckoutOptions, RegisterOptions};
use crate::{Error, Job, JobError, JobState};

pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, JobError>> + Send>>;
pub(crate) type DynHandler = Arc<dyn Fn(Job) -> HandlerFuture + Send + Sync>;

/// A handler as the worker (and [`crate::testing::drain`]) stores it: its `Ok` value turned into
/// JSON, whatever its type.
pub(crate) fn erase<F, Fut, T>(handler: F) -> DynHandler
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, JobError>> + Send + 'static,
    T: Serialize + 'static,
{
    let handler = Arc::new(handler);
    Arc::new(move |job: Job| {
        let handler = handler.clone();
        Box::pin(async move {
            let value = handler(job).await?;
            Ok(serde_json::to_value(value)?)
        }) as HandlerFuture
    })
}
type EventFn = Arc<dyn Fn(&WorkerEvent) + Send + Sync>;

const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long the job loop lets finishing handlers finish before a call that reports jobs
/// ([`Dispatcher::gather`]): about a tenth of a round trip to a local server.
const GATHER_FOR: Duration = Duration::from_micros(50);

/// Something a [`Worker`] did or met, for logs and metrics ([`WorkerBuilder::on_event`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum WorkerEvent {
    /// Registered with this id (at start, after `JQ001`, after a lost connection).
    Registered {
        /// The new worker id.
        worker: Uuid,
    },
    /// The server no longer knows this registration (`JQ001`: reaped or unregistered); its
    /// jobs are dropped and the worker registers again.
    Reaped {
        /// The lost worker id.
        worker: Uuid,
    },
    /// Jobs dropped without being reported, their handlers' tokens fired: they run again
    /// elsewhere.
    Dropped {
        /// The job ids.
        jobs: Vec<i64>,
    },
    /// A durable step suspended this job (asleep, or blocked on an event or on other jobs):
    /// nothing is reported, the server makes it ready again.
    Suspended {
        /// The job id.
        job: i64,
    },
    /// The server asked to cancel these running jobs; their handlers' tokens fired.
    CancelRequested {
        /// The job ids.
        jobs: Vec<i64>,
    },
    /// Jobs completed with their handlers' results.
    Completed {
        /// The job ids the server accepted.
        jobs: Vec<i64>,
    },
    /// Jobs whose results the server refused because they were no longer this worker's
    /// (cancelled and finished elsewhere, reaped): dropped.
    Lost {
        /// The job ids.
        jobs: Vec<i64>,
    },
    /// A job failed: its handler returned an error, panicked, or no handler took it.
    Failed {
        /// The job id.
        job: i64,
        /// The error stored (`{"type", "message"}`).
        error: Value,
        /// The job's new state; `None` when it was no longer this worker's.
        state: Option<JobState>,
    },
    /// The connection was lost; the worker reconnects after `retry_in`.
    Disconnected {
        /// What happened.
        error: String,
        /// The wait before the next attempt (1 s, doubling up to 30 s).
        retry_in: Duration,
    },
    /// A heartbeat failed for another reason than `JQ001`; the next one tries again.
    HeartbeatFailed {
        /// What happened.
        error: String,
    },
    /// A stop could not end the waiting checkout (`jobq_stop_checkouts` failed): the wait
    /// runs out by itself, at most the worker's `wait`, and the drain goes on.
    StopFailed {
        /// What happened.
        error: String,
    },
    /// Unregistered at the end of a drain.
    Unregistered {
        /// The worker id.
        worker: Uuid,
    },
}

/// Builds a [`Worker`]: where to connect, which queues, how many jobs at once, and a handler
/// per job kind.
///
/// ```no_run
/// use jobq_client::{Job, Worker};
/// use serde_json::json;
///
/// # async fn doc() -> Result<(), jobq_client::Error> {
/// let worker = Worker::builder("postgresql://app@localhost/app")
///     .queues(["mail"])
///     .concurrency(8)
///     .handler("mail", |job: Job| async move {
///         Ok(json!({"sent_to": job.payload["to"]}))
///     })
///     .build()?;
/// worker.run_until_signal().await
/// # }
/// ```
pub struct WorkerBuilder {
    dsn: String,
    queues: Option<Vec<String>>,
    concurrency: usize,
    wait: Duration,
    pooled: bool,
    name: Option<String>,
    metadata: Option<Value>,
    handlers: HashMap<String, DynHandler>,
    on_event: Option<EventFn>,
}

impl fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds: Vec<&String> = self.handlers.keys().collect();
        kinds.sort();
        f.debug_struct("WorkerBuilder")
            .field("queues", &self.queues)
            .field("concurrency", &self.concurrency)
            .field("wait", &self.wait)
            .field("pooled", &self.pooled)
            .field("name", &self.name)
            .field("handlers", &kinds)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// The queues to take jobs from. Default: every queue.
    pub fn queues<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.queues = Some(queues.into_iter().map(Into::into).collect());
        self
    }

    /// How many jobs run at once in this process (1 to 10,000). Default 10. The jobs one
    /// checkout returned run together in one tokio task, concurrently but not in parallel;
    /// those of other checkouts in other tasks. A handler that computes for long should do
    /// it in [`tokio::task::spawn_blocking`] (or a task of its own), as in any async code.
    pub fn concurrency(mut self, jobs: usize) -> Self {
        self.concurrency = jobs;
        self
    }

    /// How long an idle checkout waits inside the server for a job before it looks again
    /// (more than 0, at most an hour). Default 5 s. In [pooled](Self::pooled) mode a shutdown
    /// waits for the current wait to end, so keep it short there.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Behind a transaction-mode pooler (PgBouncer `pool_mode = transaction`): register
    /// without `bind_to_session` (liveness is heartbeats alone, so a crashed process is noticed
    /// after `jobq.heartbeat_timeout`) and keep the registration across a lost connection.
    /// Statements are unnamed in either mode. Default false.
    pub fn pooled(mut self, pooled: bool) -> Self {
        self.pooled = pooled;
        self
    }

    /// The worker's name in `jobq.workers` and the dashboard, and its connections'
    /// `application_name` (unless the connection string sets one). Default
    /// `rust-<hostname>-<pid>`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The worker's metadata in `jobq.workers`. Default `{"lang": "rust", "pid": <pid>,
    /// "library": "jobq-client <version>"}`.
    pub fn metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Runs `handler` for jobs of kind `kind`, and for jobs without a kind in the queue named
    /// `kind`. Its `Ok` value (any `Serialize`) is stored as the job's result; its
    /// [`JobError`] fails the job (retried after the default backoff or
    /// [`JobError::retry_in`], or `dead` with [`JobError::discard`]); a panic fails it with
    /// type `"Panic"`. A job no handler takes fails with type `"NoHandler"`, discarded: it is
    /// `dead` at once, and [`retry`](crate::retry) runs it again once a handler exists.
    pub fn handler<F, Fut, T>(mut self, kind: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, JobError>> + Send + 'static,
        T: Serialize + 'static,
    {
        self.handlers.insert(kind.into(), erase(handler));
        self
    }

    /// Calls `f` for every [`WorkerEvent`], from the worker's tasks: keep it short.
    pub fn on_event(mut self, f: impl Fn(&WorkerEvent) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(f));
        self
    }

    /// The worker, after checking the settings: [`Error::Config`] for a connection string
    /// that does not parse, a concurrency or wait out of range, or no handler.
    pub fn build(self) -> Result<Worker, Error> {
        let config: tokio_postgres::Config = self
            .dsn
            .parse()
            .map_err(|e| Error::Config(format!("connection string: {e}")))?;
        if !(1..=10_000).contains(&self.concurrency) {
            return Err(Error::Config(format!(
                "concurrency must be 1 to 10000, got {}",
                self.concurrency
            )));
        }
        if self.wait.is_zero() || self.wait > Duration::from_secs(3600) {
            return Err(Error::Config(format!(
                "wait must be more than 0 and at most 1 hour, got {:?}",
                self.wait
            )));
        }
        if self.handlers.is_empty() {
            return Err(Error::Config("no handler registered".into()));
        }
        let pid = std::process::id();
        let name = self
            .name
            .unwrap_or_else(|| format!("rust-{}-{pid}", hostname()));
        let metadata = self.metadata.unwrap_or_else(|| {
            json!({"lang": "rust", "pid": pid,
                   "library": concat!("jobq-client ", env!("CARGO_PKG_VERSION"))})
        });
        let steps = Arc::new(crate::durable::Steps::new(config.clone(), &name));
        Ok(Worker {
            shared: Arc::new(Shared {
                config,
                queues: self.queues,
                concurrency: self.concurrency,
                wait: self.wait,
                pooled: self.pooled,
                name,
                metadata,
                handlers: self.handlers,
                on_event: self.on_event,
                stop: CancellationToken::new(),
                reg: Mutex::new(Registration {
                    worker: None,
                    reaped: None,
                    period: Duration::from_secs(1),
                    beat: Duration::from_secs(1),
                    edition: None,
                }),
                hand: tokio::sync::Mutex::new(Hand::default()),
                reaped_notify: Notify::new(),
                steps,
            }),
        })
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// A jobq worker: checks jobs out of its queues and runs a handler for each, up to
/// [`concurrency`](WorkerBuilder::concurrency) at once, until it is shut down.
///
/// What it does, all through jobq's SQL calls (no guarantee is kept client-side):
/// - registers (`bind_to_session` unless [pooled](WorkerBuilder::pooled)), and heartbeats on
///   a connection of its own every third of the server's `jobq.heartbeat_timeout` (read from
///   the server), with `holding` = the jobs really in hand. While a checkout is under way
///   that heartbeat sends no list (the checkout may have claimed jobs not in hand yet), so the
///   job loop sends one itself when a checkout returns, on its side connection: at least once
///   a heartbeat period, and after every failed checkout (its reply may be lost). A claim
///   whose reply never arrived goes back to `ready` within a period or a `wait`;
/// - reports a finished job in the call that checks out the next ones
///   (`jobq_complete_and_checkout`: one round trip and one commit), falling back to
///   `jobq_complete_many` on `JQ002`; reports failures with `jobq_fail` (with the handler's
///   retry delay or discard);
/// - when idle, waits inside the server (`jobq_checkout(..., wait)`), never polling; results
///   that arrive meanwhile are reported on another connection;
/// - fires a job's [cancellation token](Job::cancellation_token) when a heartbeat returns its
///   cancellation request;
/// - on `JQ001` (reaped or unregistered): fires the tokens of the jobs in hand, drops them
///   without reporting (they run again elsewhere), registers again, goes on;
/// - on a lost connection: reconnects with exponential backoff (1 s to 30 s);
/// - on [`shutdown`](WorkerHandle::shutdown) (or SIGTERM / SIGINT with
///   [`run_until_signal`](Worker::run_until_signal)): takes no more jobs (its waiting
///   checkout is ended by `jobq_stop_checkouts` on the side connection, so no statement is
///   cancelled and the server logs no error; jobs a checkout claimed as the stop came are
///   held unstarted, and unregistering returns them, their attempt not counted), finishes
///   and reports those in hand, unregisters, and returns `Ok(())`.
///
/// On the SQL edition (`jobq_version()` says `sql`, learnt at the first registration:
/// [`WorkerHandle::server_edition`]) there is no background worker: each heartbeat runs the
/// maintenance pass (reaping dead workers and requeueing their jobs, pruning, firing
/// schedules) when the last one is older than `jobq.reap_interval`. There the worker beats
/// every min(`heartbeat_timeout / 3`, `jobq.reap_interval`), the latter read at each
/// registration (1 s when unset), so a database whose workers run needs no pg_cron. On the
/// extension nothing changes.
pub struct Worker {
    shared: Arc<Shared>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("name", &self.shared.name)
            .field("worker_id", &self.shared.reg().worker)
            .finish_non_exhaustive()
    }
}

/// Controls a running [`Worker`] from elsewhere: cheap to clone, usable from any task.
#[derive(Clone)]
pub struct WorkerHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for WorkerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerHandle")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl WorkerHandle {
    /// Starts a graceful drain: no more jobs are taken (a waiting checkout is ended by
    /// `jobq_stop_checkouts`, pooled or not; jobs claimed as the stop came are not started),
    /// those in hand finish and are reported, the worker unregisters, and [`Worker::run`]
    /// returns.
    pub fn shutdown(&self) {
        self.shared.stop.cancel();
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.stop.is_cancelled()
    }

    /// The current registration's worker id; `None` before the first registration and after
    /// the worker unregistered.
    pub fn worker_id(&self) -> Option<Uuid> {
        self.shared.reg().worker
    }

    /// The server's jobq edition, `"extension"` or `"sql"` (`jobq_version()`; a server
    /// without it has the extension), learnt at the first registration; `None` before it.
    pub fn server_edition(&self) -> Option<String> {
        self.shared.reg().edition.clone()
    }
}

impl Worker {
    /// A builder for a worker connecting with `dsn` (a `postgresql://` URL or
    /// `key=value` string, without TLS).
    pub fn builder(dsn: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder {
            dsn: dsn.into(),
            queues: None,
            concurrency: 10,
            wait: Duration::from_secs(5),
            pooled: false,
            name: None,
            metadata: None,
            handlers: HashMap::new(),
            on_event: None,
        }
    }

    /// A handle to shut the worker down from another task.
    pub fn handle(&self) -> WorkerHandle {
        WorkerHandle {
            shared: self.shared.clone(),
        }
    }

    /// Runs until [`WorkerHandle::shutdown`], then drains and returns `Ok(())`. Returns an
    /// error for a database error that is not a lost connection (a missing privilege, a
    /// refused argument, a failed authentication), after firing the tokens of the jobs in
    /// hand; or when the connection is lost during a drain.
    ///
    /// Dropping the future before it returns abandons the jobs in hand: their tokens fire, the
    /// heartbeats stop, and the server gives the jobs to other workers once this one is dead
    /// to it.
    pub async fn run(self) -> Result<(), Error> {
        let s = self.shared;
        let hb_stop = CancellationToken::new();
        // Dropping this future (a timeout, an aborted task) stops the heartbeats too, so that
        // the server reclaims the abandoned jobs instead of seeing them held forever.
        let _stop_heartbeats = hb_stop.clone().drop_guard();
        let heartbeats = tokio::spawn(heartbeat_loop(s.clone(), hb_stop.clone()));
        let (tx, rx) = mpsc::unbounded_channel();
        let mut d = Dispatcher {
            s: s.clone(),
            tx,
            rx,
            running: 0,
            seq: 0,
            done: Vec::new(),
            failed: Vec::new(),
            stopping: false,
            idle: false,
            prepared: None,
        };
        let mut backoff = MIN_BACKOFF;
        let result = loop {
            match d.session(&mut backoff).await {
                Ok(()) => break Ok(()),
                Err(e) if e.is_connection_error() => {
                    let was_stopping = d.stopping;
                    if !s.pooled {
                        // The registration was bound to the lost session: it is gone, and the
                        // server puts its jobs back.
                        d.drop_hand().await;
                        s.reg().worker = None;
                    }
                    s.emit(WorkerEvent::Disconnected {
                        error: e.to_string(),
                        retry_in: backoff,
                    });
                    if was_stopping {
                        break Err(e);
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = s.stop.cancelled() => d.stopping = true,
                    }
                    if d.stopping && s.reg().worker.is_none() {
                        break Ok(()); // nothing held, nothing to unregister
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(e) => break Err(e),
            }
        };
        if result.is_ok() {
            d.wait_all().await;
        } else {
            d.drop_hand().await;
        }
        hb_stop.cancel();
        let _ = heartbeats.await;
        result
    }

    /// [`run`](Self::run), with SIGTERM and SIGINT (Ctrl-C) calling
    /// [`shutdown`](WorkerHandle::shutdown): the way to run a worker process, which then
    /// exits 0 after draining.
    pub async fn run_until_signal(self) -> Result<(), Error> {
        let handle = self.handle();
        let signals = tokio::spawn(async move {
            wait_for_signal().await;
            handle.shutdown();
        });
        let result = self.run().await;
        signals.abort();
        result
    }
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

struct Shared {
    config: tokio_postgres::Config,
    queues: Option<Vec<String>>,
    concurrency: usize,
    wait: Duration,
    pooled: bool,
    name: String,
    metadata: Value,
    handlers: HashMap<String, DynHandler>,
    on_event: Option<EventFn>,
    stop: CancellationToken,
    reg: Mutex<Registration>,
    /// The jobs in hand. An async mutex: a heartbeat keeps it for its whole call, so that no
    /// checkout starts between reading the list and the server applying it.
    hand: tokio::sync::Mutex<Hand>,
    /// Rung by the heartbeat task when it meets `JQ001`.
    reaped_notify: Notify,
    /// The connection of durable steps (src/durable.rs), opened on first use.
    steps: Arc<crate::durable::Steps>,
}

struct Registration {
    worker: Option<Uuid>,
    /// A registration that got `JQ001`.
    reaped: Option<Uuid>,
    /// The heartbeat period: a third of the server's `jobq.heartbeat_timeout`. The job loop
    /// sends `holding` at least this often, and a heartbeat call is given up after two.
    period: Duration,
    /// How often the heartbeat task beats: `period`, or on the SQL edition at most the
    /// server's `jobq.reap_interval` (its heartbeats run the passes).
    beat: Duration,
    /// The server's edition (`jobq_version()`), learnt at the first registration.
    edition: Option<String>,
}

#[derive(Default)]
struct Hand {
    jobs: HashMap<i64, Held>,
    /// Checkouts sent and not answered yet: the jobs they claim are not in `jobs` yet, so
    /// meanwhile a heartbeat sends no `holding` (NULL: nothing is put back). Only the job loop
    /// checks out, one call at a time: this is 0 or 1.
    checkouts: u32,
    /// When the last heartbeat with a `holding` list was sent (and answered).
    holding_sent: Option<Instant>,
}

impl Hand {
    /// Fires the tokens of the jobs among `ids` (a heartbeat's cancellation requests) and
    /// returns those whose token had not fired yet.
    fn cancel_requested(&self, ids: Vec<i64>) -> Vec<i64> {
        let mut requested = Vec::new();
        for id in ids {
            if let Some(held) = self.jobs.get(&id) {
                if !held.token.is_cancelled() {
                    held.token.cancel();
                    requested.push(id);
                }
            }
        }
        requested
    }
}

struct Held {
    /// Which run of the job this is: a dropped run's outcome must not be reported for a later
    /// run of the same job.
    seq: u64,
    token: CancellationToken,
}

struct Outcome {
    id: i64,
    seq: u64,
    result: Result<Value, JobError>,
}

impl Shared {
    fn reg(&self) -> MutexGuard<'_, Registration> {
        self.reg.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn emit(&self, event: WorkerEvent) {
        if let Some(f) = &self.on_event {
            f(&event);
        }
    }

    /// The registration to act for: registered and not reaped.
    fn current_worker(&self) -> Option<Uuid> {
        let reg = self.reg();
        reg.worker.filter(|w| reg.reaped != Some(*w))
    }

    fn is_reaped(&self) -> bool {
        let reg = self.reg();
        reg.worker.is_some() && reg.reaped == reg.worker
    }

    async fn connect(&self, suffix: &str) -> Result<Client, Error> {
        let mut config = self.config.clone();
        if config.get_application_name().is_none() {
            config.application_name(format!("{}{suffix}", self.name));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }
}

/// The job loop: one connection (`c1`) that registers, checks out and reports, a second one
/// (`c2`) that reports while `c1` waits inside the server, and the handlers' outcomes.
struct Dispatcher {
    s: Arc<Shared>,
    tx: mpsc::UnboundedSender<Outcome>,
    rx: mpsc::UnboundedReceiver<Outcome>,
    /// Handler tasks not finished, dropped runs included.
    running: usize,
    seq: u64,
    /// Finished jobs of the current registration, not reported yet.
    done: Vec<(i64, Value)>,
    failed: Vec<(i64, JobError)>,
    stopping: bool,
    /// The last checkout found fewer jobs than it asked for: the next one waits.
    idle: bool,
    /// The checkout statements prepared on `c1` (None behind a pooler).
    prepared: Option<Arc<calls::Prepared>>,
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        // Whatever is still in hand is abandoned: tell the handlers.
        if let Ok(hand) = self.s.hand.try_lock() {
            for held in hand.jobs.values() {
                held.token.cancel();
            }
        }
    }
}

impl Dispatcher {
    /// One connection's life: register if needed, run jobs until stopped, drain, unregister.
    async fn session(&mut self, backoff: &mut Duration) -> Result<(), Error> {
        if self.s.stop.is_cancelled() && self.s.reg().worker.is_none() {
            return Ok(());
        }
        let c1 = self.s.connect("").await?;
        self.prepared = (!self.s.pooled).then(Arc::default);
        let mut c2: Option<Client> = None;
        if self.s.reg().worker.is_none() {
            self.register(&c1).await?;
        }
        *backoff = MIN_BACKOFF;
        self.idle = false;
        loop {
            if self.s.stop.is_cancelled() {
                self.stopping = true;
            }
            self.collect().await;
            if self.s.is_reaped() {
                self.drop_hand().await;
                self.register(&c1).await?;
                continue;
            }
            self.report_failures(&c1).await?;
            if self.stopping {
                self.report_done(&c1).await?;
                if self.running == 0 {
                    return self.unregister(&c1).await;
                }
                self.next_event().await;
                continue;
            }
            let capacity = self.s.concurrency.saturating_sub(self.running);
            if capacity == 0 {
                self.next_event().await;
                continue;
            }
            let capacity = if self.done.is_empty() {
                capacity
            } else {
                self.gather().await;
                self.s.concurrency.saturating_sub(self.running)
            };
            // The only place that checks out: no other checkout is in flight from here until
            // the next one starts.
            let checkout = if !self.idle || !self.done.is_empty() {
                self.checkout_fused(&c1, capacity).await
            } else {
                self.checkout_waiting(&c1, &mut c2, capacity).await
            };
            self.send_holding(&mut c2, checkout.is_err()).await;
            checkout?;
        }
    }

    /// Right after a checkout returned, and before the next one: sends the jobs really in
    /// hand as `holding` on `c2`, when no heartbeat has sent a list for a period (the
    /// heartbeat task sends none while a checkout is in flight, which is nearly always when
    /// the worker idles in waiting checkouts) or when the checkout failed (its claims may
    /// have committed with the reply lost). The server puts back what it lacks. Errors go the
    /// heartbeat task's way: `JQ001` marks the registration reaped, a connection error drops
    /// `c2`, anything else is a [`WorkerEvent::HeartbeatFailed`] and the next return tries
    /// again.
    async fn send_holding(&mut self, c2: &mut Option<Client>, checkout_failed: bool) {
        let Some(worker) = self.s.current_worker() else {
            return;
        };
        let period = self.s.reg().period;
        let recent = |hand: &Hand| hand.holding_sent.is_some_and(|t| t.elapsed() < period);
        if !checkout_failed && recent(&*self.s.hand.lock().await) {
            return;
        }
        if c2.as_ref().is_none_or(Client::is_closed) {
            match self.s.connect("-report").await {
                Ok(c) => *c2 = Some(c),
                Err(e) => {
                    self.s.emit(WorkerEvent::HeartbeatFailed {
                        error: e.to_string(),
                    });
                    return;
                }
            }
        }
        let Some(c) = c2.as_ref() else { return };
        // Kept for the call, as the heartbeat task does, so that the list stays true.
        let mut hand = self.s.hand.lock().await;
        debug_assert_eq!(hand.checkouts, 0, "no checkout in flight");
        let holding: Vec<i64> = hand.jobs.keys().copied().collect();
        let sent = Instant::now();
        let beat =
            tokio::time::timeout(period * 2, calls::heartbeat(c, worker, Some(&holding))).await;
        let failure = match beat {
            Ok(Ok(ids)) => {
                hand.holding_sent = Some(sent);
                let requested = hand.cancel_requested(ids);
                drop(hand);
                if !requested.is_empty() {
                    self.s
                        .emit(WorkerEvent::CancelRequested { jobs: requested });
                }
                return;
            }
            Ok(Err(Error::WorkerLost(_))) => {
                drop(hand);
                self.mark_reaped(worker);
                return;
            }
            Ok(Err(e)) => {
                if e.is_connection_error() {
                    *c2 = None;
                }
                e.to_string()
            }
            Err(_) => {
                *c2 = None;
                format!("no answer within {:?}", period * 2)
            }
        };
        drop(hand);
        self.s.emit(WorkerEvent::HeartbeatFailed { error: failure });
    }

    async fn register(&mut self, c1: &Client) -> Result<(), Error> {
        let options = RegisterOptions::new()
            .name(self.s.name.clone())
            .metadata(self.s.metadata.clone())
            .bind_to_session(!self.s.pooled);
        let id = calls::register_worker(c1, options).await?;
        let timeout = calls::heartbeat_timeout(c1)
            .await?
            .unwrap_or(Duration::from_secs(30));
        let known = self.s.reg().edition.clone();
        let edition = match known {
            Some(edition) => edition,
            None => calls::server_edition(c1).await?,
        };
        let period = (timeout / 3).max(Duration::from_millis(10));
        // The SQL edition has no background worker: the heartbeats run the passes, each when
        // the last one is older than jobq.reap_interval, so beat at least that often. (The
        // `holding` list keeps `period`: it is about heartbeat_timeout, not the passes.)
        let beat = if edition == "sql" {
            let reap = calls::reap_interval(c1).await?;
            period.min(reap.max(Duration::from_millis(10)))
        } else {
            period
        };
        {
            let mut reg = self.s.reg();
            reg.worker = Some(id);
            reg.reaped = None;
            reg.period = period;
            reg.beat = beat;
            reg.edition = Some(edition);
        }
        // The new registration's first checkout is followed by its first `holding`.
        self.s.hand.lock().await.holding_sent = None;
        self.idle = false;
        self.s.emit(WorkerEvent::Registered { worker: id });
        Ok(())
    }

    async fn unregister(&mut self, c1: &Client) -> Result<(), Error> {
        let Some(worker) = self.s.reg().worker.take() else {
            return Ok(());
        };
        match calls::unregister_worker(c1, worker).await {
            Ok(_) | Err(Error::WorkerLost(_)) => {
                self.s.emit(WorkerEvent::Unregistered { worker });
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Waits for a handler to finish, a stop, or a `JQ001` from the heartbeat task.
    async fn next_event(&mut self) {
        tokio::select! {
            outcome = self.rx.recv() => {
                if let Some(outcome) = outcome {
                    self.accept(outcome).await;
                }
            }
            _ = self.s.stop.cancelled(), if !self.stopping => self.stopping = true,
            _ = self.s.reaped_notify.notified() => {}
        }
    }

    /// Before a call that reports finished jobs: lets the handlers that are finishing at this
    /// moment (queued on this thread, or on another runtime thread that is just waking up)
    /// finish first, so that one call and one commit carry them all instead of one call each.
    /// It yields to the scheduler for at most [`GATHER_FOR`]: a handler that is really working
    /// is not waited for.
    async fn gather(&mut self) {
        let start = Instant::now();
        while self.running > 0 && start.elapsed() < GATHER_FOR {
            tokio::task::yield_now().await;
            self.collect().await;
        }
    }

    /// Takes the outcomes that are there, without waiting.
    async fn collect(&mut self) {
        while let Ok(outcome) = self.rx.try_recv() {
            self.accept(outcome).await;
        }
    }

    async fn accept(&mut self, outcome: Outcome) {
        self.running -= 1;
        let hand = self.s.hand.lock().await;
        let current = hand.jobs.get(&outcome.id).map(|h| h.seq) == Some(outcome.seq);
        drop(hand);
        if !current {
            return; // a dropped run: the job is not this registration's any more
        }
        match outcome.result {
            Ok(value) => self.done.push((outcome.id, value)),
            // A durable step suspended the job: the server has it, nothing to report.
            Err(e) if e.is_suspended() => {
                self.forget(&[outcome.id]).await;
                self.s.emit(WorkerEvent::Suspended { job: outcome.id });
            }
            Err(e) => self.failed.push((outcome.id, e)),
        }
    }

    /// Waits until every handler task has ended (their outcomes are not reported).
    async fn wait_all(&mut self) {
        while self.running > 0 {
            match self.rx.recv().await {
                Some(_) => self.running -= 1,
                None => break,
            }
        }
    }

    /// Fires the tokens of the jobs in hand and forgets them and their outcomes.
    async fn drop_hand(&mut self) {
        let mut hand = self.s.hand.lock().await;
        let mut jobs: Vec<i64> = hand.jobs.keys().copied().collect();
        for held in hand.jobs.values() {
            held.token.cancel();
        }
        hand.jobs.clear();
        drop(hand);
        self.done.clear();
        self.failed.clear();
        if !jobs.is_empty() {
            jobs.sort_unstable();
            self.s.emit(WorkerEvent::Dropped { jobs });
        }
    }

    async fn forget(&self, ids: &[i64]) {
        let mut hand = self.s.hand.lock().await;
        for id in ids {
            hand.jobs.remove(id);
        }
    }

    /// Reports the failures, one `jobq_fail` each (each may carry its own retry delay).
    async fn report_failures(&mut self, c: &Client) -> Result<(), Error> {
        let Some(worker) = self.s.current_worker() else {
            return Ok(());
        };
        while let Some((id, error)) = self.failed.first() {
            let (id, options) = (*id, calls::FailOptions::from(error));
            let stored = error.to_json();
            let state = calls::fail(c, id, worker, options).await?;
            self.failed.remove(0);
            self.forget(&[id]).await;
            self.s.emit(WorkerEvent::Failed {
                job: id,
                error: stored,
                state,
            });
        }
        Ok(())
    }

    /// Reports the finished jobs without a checkout (`jobq_complete_many`).
    async fn report_done(&mut self, c: &Client) -> Result<(), Error> {
        let Some(worker) = self.s.current_worker() else {
            return Ok(());
        };
        if self.done.is_empty() {
            return Ok(());
        }
        let (ids, results): (Vec<i64>, Vec<Value>) = self.done.iter().cloned().unzip();
        let completed = calls::complete_many(c, worker, &ids, Some(&results)).await?;
        self.done.clear();
        self.forget(&ids).await;
        self.report_completed(&ids, completed);
        Ok(())
    }

    fn report_completed(&self, ids: &[i64], completed: Vec<i64>) {
        let lost: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| !completed.contains(id))
            .collect();
        if !completed.is_empty() {
            self.s.emit(WorkerEvent::Completed { jobs: completed });
        }
        if !lost.is_empty() {
            self.s.emit(WorkerEvent::Lost { jobs: lost });
        }
    }

    /// Reports what finished while `c1` waits, on `c2` (connected when first needed). A
    /// connection problem there leaves the outcomes for `c1` to report after its wait.
    async fn report_aside(&mut self, c2: &mut Option<Client>) -> Result<(), Error> {
        if (self.done.is_empty() && self.failed.is_empty()) || self.s.current_worker().is_none() {
            return Ok(());
        }
        if c2.as_ref().is_none_or(Client::is_closed) {
            *c2 = self.s.connect("-report").await.ok();
        }
        let Some(c) = c2.as_ref() else {
            return Ok(());
        };
        let result = match self.report_failures(c).await {
            Ok(()) => self.report_done(c).await,
            Err(e) => Err(e),
        };
        match result {
            Err(e) if e.is_connection_error() => {
                *c2 = None;
                Ok(())
            }
            other => other,
        }
    }

    /// `jobq_complete_and_checkout`: reports the finished jobs and takes up to `capacity`
    /// more, in one call.
    async fn checkout_fused(&mut self, c1: &Client, capacity: usize) -> Result<(), Error> {
        let Some(worker) = self.s.current_worker() else {
            return Ok(());
        };
        let (ids, results): (Vec<i64>, Vec<Value>) = self.done.iter().cloned().unzip();
        // Every result null: no array to send.
        let results = results.iter().any(|r| !r.is_null()).then_some(&results[..]);
        let options = self.checkout_options(capacity, None);
        self.s.hand.lock().await.checkouts += 1;
        let prepared = self.prepared.clone();
        let result = calls::complete_and_checkout_with(
            c1,
            prepared.as_deref(),
            worker,
            &ids,
            results,
            options,
        )
        .await;
        let s = self.s.clone();
        let mut hand = s.hand.lock().await;
        hand.checkouts -= 1;
        match result {
            Ok(jobs) => {
                for id in &ids {
                    hand.jobs.remove(id);
                }
                self.done.clear();
                self.idle = jobs.len() < capacity;
                self.start(&mut hand, jobs);
                drop(hand);
                if !ids.is_empty() {
                    self.s.emit(WorkerEvent::Completed { jobs: ids });
                }
                Ok(())
            }
            Err(e) => {
                drop(hand);
                match e {
                    Error::WorkerLost(_) => self.mark_reaped(worker),
                    // A job in hand is no longer this worker's: report each alone.
                    e if e.sqlstate() == Some("JQ002") => self.report_done(c1).await?,
                    e => return Err(e),
                }
                Ok(())
            }
        }
    }

    /// `jobq_checkout(..., wait)`: waits inside the server for up to `capacity` jobs, while
    /// reporting on `c2` what finishes meanwhile and watching for a stop.
    async fn checkout_waiting(
        &mut self,
        c1: &Client,
        c2: &mut Option<Client>,
        capacity: usize,
    ) -> Result<(), Error> {
        let Some(worker) = self.s.current_worker() else {
            return Ok(());
        };
        let options = self.checkout_options(capacity, Some(self.s.wait));
        self.s.hand.lock().await.checkouts += 1;
        let prepared = self.prepared.clone();
        let call = calls::checkout_with(c1, prepared.as_deref(), worker, options);
        tokio::pin!(call);
        let result = loop {
            tokio::select! {
                result = &mut call => break result,
                outcome = self.rx.recv() => {
                    if let Some(outcome) = outcome {
                        self.accept(outcome).await;
                    }
                    self.collect().await;
                    if let Err(e) = self.report_aside(c2).await {
                        self.s.hand.lock().await.checkouts -= 1;
                        return Err(e);
                    }
                }
                _ = self.s.stop.cancelled(), if !self.stopping => {
                    self.stopping = true;
                    // The server ends the wait, empty (no cancel: that would log an error on
                    // the server, and behind a pooler could reach another client's session).
                    self.stop_checkouts(c2, worker).await;
                }
                _ = self.s.reaped_notify.notified() => {
                    if self.s.is_reaped() {
                        self.drop_hand().await;
                    }
                }
            }
        };
        let s = self.s.clone();
        let mut hand = s.hand.lock().await;
        hand.checkouts -= 1;
        match result {
            // Claimed for a registration that is gone: the server gives them back.
            Ok(_) if self.s.current_worker() != Some(worker) => Ok(()),
            Ok(jobs) => {
                self.idle = jobs.is_empty();
                self.start(&mut hand, jobs);
                Ok(())
            }
            Err(Error::WorkerLost(_)) => {
                drop(hand);
                self.mark_reaped(worker);
                Ok(())
            }
            // statement_timeout shorter than the wait: nothing was claimed
            Err(e) if e.sqlstate() == Some("57014") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `jobq_stop_checkouts` on `c2`: `c1`'s waiting checkout returns, empty. When it cannot
    /// be sent, the wait runs out by itself.
    async fn stop_checkouts(&mut self, c2: &mut Option<Client>, worker: Uuid) {
        if c2.as_ref().is_none_or(Client::is_closed) {
            *c2 = self.s.connect("-report").await.ok();
        }
        let Some(c) = c2.as_ref() else { return };
        match calls::stop_checkouts(c, worker).await {
            Ok(()) => {}
            Err(Error::WorkerLost(_)) => self.mark_reaped(worker),
            Err(e) => {
                if e.is_connection_error() {
                    *c2 = None;
                }
                self.s.emit(WorkerEvent::StopFailed { error: e.to_string() });
            }
        }
    }

    fn checkout_options(&self, capacity: usize, wait: Option<Duration>) -> CheckoutOptions {
        let mut options = CheckoutOptions::new().max_jobs(capacity as i32);
        if let Some(queues) = &self.s.queues {
            options = options.queues(queues.iter().cloned());
        }
        if let Some(wait) = wait {
            options = options.wait(wait);
        }
        options
    }

    fn mark_reaped(&self, worker: Uuid) {
        let mut reg = self.s.reg();
        if reg.worker == Some(worker) {
            reg.reaped = Some(worker);
            drop(reg);
            self.s.emit(WorkerEvent::Reaped { worker });
        }
    }

    /// Puts the claimed jobs in hand and starts one task that runs their handlers; a job no
    /// handler takes is failed (discarded) at the next report.
    fn start(&mut self, hand: &mut Hand, jobs: Vec<Job>) {
        if self.s.stop.is_cancelled() {
            // Claimed as the stop came: in hand (no `holding` gives them back as interrupted)
            // but not started; unregistering returns them, their attempt not counted.
            for job in jobs {
                self.seq += 1;
                hand.jobs.insert(job.id, Held { seq: self.seq, token: CancellationToken::new() });
            }
            return;
        }
        let mut batch = Vec::with_capacity(jobs.len());
        for job in jobs {
            self.seq += 1;
            let (id, seq, token) = (job.id, self.seq, CancellationToken::new());
            hand.jobs.insert(
                id,
                Held {
                    seq,
                    token: token.clone(),
                },
            );
            let route = job.kind.clone().unwrap_or_else(|| job.queue.clone());
            let Some(handler) = self.s.handlers.get(&route).cloned() else {
                let what = match &job.kind {
                    Some(kind) => format!("kind '{kind}'"),
                    None => format!("queue '{}' (the job has no kind)", job.queue),
                };
                let error = JobError::new("NoHandler", format!("no handler for {what}"));
                self.failed.push((id, error.discard()));
                continue;
            };
            self.running += 1;
            let job = job.with_token(token).with_steps(self.s.steps.clone());
            batch.push(async move {
                // A panic in the handler is its job's failure.
                let result = match (CatchUnwind(handler(job))).await {
                    Ok(result) => result,
                    Err(panic) => Err(JobError::new("Panic", panic_message(panic))),
                };
                Outcome { id, seq, result }
            });
        }
        if batch.is_empty() {
            return;
        }
        // One task for the jobs of one checkout, each outcome sent as its handler ends. A task
        // per job cost a runtime thread's wake-up per job on a multi-threaded runtime: at 4 no-op
        // jobs in flight the worker kept 0.61 of the raw loop's rate that way, 0.88 to 1.17 so
        // (bench/clients.sh).
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut running: FuturesUnordered<_> = batch.into_iter().collect();
            while let Some(outcome) = running.next().await {
                let _ = tx.send(outcome);
            }
        });
    }
}

/// A handler's future, with a panic while it is polled caught as an `Err` (in its batch's task,
/// where a task of its own for the handler would cost a second task and wake-up).
struct CatchUnwind<F>(F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(inner).poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
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

/// Heartbeats on a connection of its own, every third of `jobq.heartbeat_timeout` (on the SQL
/// edition, at most every `jobq.reap_interval`), with the jobs in hand as `holding` (none
/// while a checkout is in flight: then the job loop sends the list when the checkout returns,
/// [`Dispatcher::send_holding`]); fires the tokens of jobs whose cancellation was requested,
/// and tells the job loop about `JQ001`.
async fn heartbeat_loop(s: Arc<Shared>, stop: CancellationToken) {
    let mut db: Option<Client> = None;
    loop {
        let (period, beat) = {
            let reg = s.reg();
            (reg.period, reg.beat)
        };
        tokio::select! {
            _ = tokio::time::sleep(beat) => {}
            _ = stop.cancelled() => return,
        }
        let Some(worker) = s.current_worker() else {
            continue;
        };
        if db.as_ref().is_none_or(Client::is_closed) {
            match s.connect("-heartbeat").await {
                Ok(c) => db = Some(c),
                Err(e) => {
                    s.emit(WorkerEvent::HeartbeatFailed {
                        error: e.to_string(),
                    });
                    continue;
                }
            }
        }
        let Some(c) = db.as_ref() else { continue };
        let mut hand = s.hand.lock().await;
        let holding: Option<Vec<i64>> =
            (hand.checkouts == 0).then(|| hand.jobs.keys().copied().collect());
        let sent = Instant::now();
        // A heartbeat keeps the hand locked: one that hangs (a dead link) must not stall the
        // job loop, so it is given up after two periods and its connection dropped.
        let beat =
            tokio::time::timeout(period * 2, calls::heartbeat(c, worker, holding.as_deref())).await;
        let failure = match beat {
            Ok(Ok(ids)) => {
                if holding.is_some() {
                    hand.holding_sent = Some(sent);
                }
                let requested = hand.cancel_requested(ids);
                drop(hand);
                if !requested.is_empty() {
                    s.emit(WorkerEvent::CancelRequested { jobs: requested });
                }
                continue;
            }
            Ok(Err(Error::WorkerLost(_))) => {
                drop(hand);
                let mut reg = s.reg();
                if reg.worker == Some(worker) {
                    reg.reaped = Some(worker);
                    drop(reg);
                    s.emit(WorkerEvent::Reaped { worker });
                    s.reaped_notify.notify_one();
                }
                continue;
            }
            Ok(Err(e)) => {
                if e.is_connection_error() {
                    db = None;
                }
                e.to_string()
            }
            Err(_) => {
                db = None;
                format!("no answer within {:?}", period * 2)
            }
        };
        drop(hand);
        s.emit(WorkerEvent::HeartbeatFailed { error: failure });
    }
}
