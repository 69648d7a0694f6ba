//! Durable steps for handlers ([`Durable`]): a function run once with its result kept as a
//! checkpoint, sleep, awaiting an event, fan-out and gather. Each is one or two jobq calls
//! (`jobq_checkpoint`, `jobq_snooze`, `jobq_await_event`, `jobq_await_jobs`, `jobq_results`);
//! every guarantee is the server's.
//!
//! A handler that uses them is replayed from the top on each attempt (after a crash, a
//! failure, or a suspension): what a step returned before comes back from the job's
//! checkpoints instead of running again. A call that suspends the job (`sleep`, an
//! `await_event` or `gather` that must wait) returns `Err(JobError::suspended())`; pass it on
//! with `?` and the worker reports nothing for the job, which the server makes ready again
//! when its time, event or jobs come.
//!
//! ```no_run
//! # use jobq_client::{Job, JobError};
//! # use serde_json::{json, Value};
//! async fn order(job: Job) -> Result<Value, JobError> {
//!     let steps = job.durable()?;
//!     let charge: String = steps.step("charge", || async { Ok("ch_1".to_string()) }).await?;
//!     let boxes = steps.spawn("ship", "shipments", &[json!({"box": 1}), json!({"box": 2})], Some("ship")).await?;
//!     let shipped = steps.gather(&boxes).await?; // suspends until both finish
//!     let delivered = steps.await_event("order-7:delivered", None).await?;
//!     Ok(json!({"charge": charge, "shipped": shipped.len(), "delivered": delivered}))
//! }
//! ```

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::{Client, NoTls};
use uuid::Uuid;

use crate::{await_event, await_jobs, checkpoint, results, snooze, Error, JobError, JobResult};

/// The worker's connection for durable steps: opened on first use, again after it was lost;
/// one step's statement at a time.
pub(crate) struct Steps {
    config: tokio_postgres::Config,
    conn: tokio::sync::Mutex<Option<Client>>,
}

impl std::fmt::Debug for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Steps")
    }
}

impl Steps {
    pub(crate) fn new(mut config: tokio_postgres::Config, name: &str) -> Steps {
        if config.get_application_name().is_none() {
            config.application_name(format!("{name}-steps"));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        Steps {
            config,
            conn: tokio::sync::Mutex::new(None),
        }
    }
}

/// The durable steps of one job: [`Job::durable`](crate::Job::durable) in a handler run by a
/// [`Worker`](crate::Worker).
pub struct Durable {
    steps: Arc<Steps>,
    job_id: i64,
    worker: Uuid,
    checkpoints: Mutex<serde_json::Map<String, Value>>,
}

fn lost(job_id: i64) -> JobError {
    JobError::cancelled().with_message(format!("job {job_id} is no longer this worker's"))
}

fn db(e: Error) -> JobError {
    JobError::new("DatabaseError", e.to_string())
}

impl Durable {
    pub(crate) fn new(
        steps: Arc<Steps>,
        job_id: i64,
        worker: Uuid,
        checkpoints: &Value,
    ) -> Durable {
        let map = checkpoints.as_object().cloned().unwrap_or_default();
        Durable {
            steps,
            job_id,
            worker,
            checkpoints: Mutex::new(map),
        }
    }

    fn kept(&self, name: &str) -> Option<Value> {
        self.checkpoints.lock().unwrap().get(name).cloned()
    }

    /// The steps connection, connecting first if there is none (one step at a time: the
    /// guard holds it).
    async fn client(&self) -> Result<tokio::sync::MappedMutexGuard<'_, Client>, JobError> {
        let mut conn = self.steps.conn.lock().await;
        if conn.as_ref().is_none_or(|c| c.is_closed()) {
            let (client, connection) = self
                .steps
                .config
                .connect(NoTls)
                .await
                .map_err(|e| db(e.into()))?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            *conn = Some(client);
        }
        Ok(tokio::sync::MutexGuard::map(conn, |c| {
            c.as_mut().expect("connected above")
        }))
    }

    fn failed(&self, e: Error) -> JobError {
        match e {
            Error::WorkerLost(_) => lost(self.job_id),
            e => db(e),
        }
    }

    async fn keep(&self, name: &str, value: Value) -> Result<Value, JobError> {
        let ok = checkpoint(
            &*self.client().await?,
            self.job_id,
            self.worker,
            name,
            &value,
        )
        .await
        .map_err(|e| self.failed(e))?;
        if !ok {
            return Err(lost(self.job_id));
        }
        self.checkpoints
            .lock()
            .unwrap()
            .insert(name.to_string(), value.clone());
        Ok(value)
    }

    async fn deadline(&self, key: &str, after: Duration) -> Result<SystemTime, JobError> {
        if let Some(Value::String(at)) = self.kept(key) {
            let secs: f64 = at
                .parse()
                .map_err(|_| JobError::new("BadCheckpoint", format!("{key}: {at}")))?;
            return Ok(SystemTime::UNIX_EPOCH + Duration::from_secs_f64(secs));
        }
        let at = SystemTime::now() + after;
        let secs = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        self.keep(key, Value::String(format!("{secs:.6}"))).await?;
        Ok(at)
    }

    /// `f()`'s result, computed once: kept as the checkpoint `name` (JSON) and returned from
    /// it on later attempts. `f` runs again only if an attempt ended before its checkpoint
    /// committed.
    pub async fn step<T, F, Fut>(&self, name: &str, f: F) -> Result<T, JobError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, JobError>>,
    {
        let value = match self.kept(name) {
            Some(v) => v,
            None => {
                let v = serde_json::to_value(f().await?).map_err(JobError::from)?;
                self.keep(name, v).await?
            }
        };
        serde_json::from_value(value).map_err(JobError::from)
    }

    /// Sleeps `duration` durably: the job is snoozed until then (`Err(JobError::suspended())`)
    /// and, replayed, goes past this call once the time has come.
    pub async fn sleep(&self, name: &str, duration: Duration) -> Result<(), JobError> {
        let until = self.deadline(&format!("sleep:{name}"), duration).await?;
        if SystemTime::now() >= until {
            return Ok(());
        }
        if snooze(&*self.client().await?, self.job_id, self.worker, until)
            .await
            .map_err(|e| self.failed(e))?
        {
            Err(JobError::suspended())
        } else {
            Err(lost(self.job_id))
        }
    }

    /// The payload of event `name` ([`emit_event`](crate::emit_event)): at once if it was
    /// emitted, else the job is blocked until it is (`Err(JobError::suspended())`). With
    /// `timeout` (counted from this step's first call), an error of type `"EventTimeout"` once
    /// it has passed.
    pub async fn await_event(
        &self,
        name: &str,
        timeout: Option<Duration>,
    ) -> Result<Value, JobError> {
        let key = format!("event:{name}");
        if self.kept(&key).is_none() {
            let left = match timeout {
                Some(t) => {
                    let deadline = self.deadline(&format!("await:{name}"), t).await?;
                    match deadline.duration_since(SystemTime::now()) {
                        Ok(left) if !left.is_zero() => Some(left),
                        _ => {
                            return Err(JobError::new(
                                "EventTimeout",
                                format!("event '{name}' did not come in time"),
                            ))
                        }
                    }
                }
                None => None,
            };
            let state = await_event(&*self.client().await?, self.job_id, self.worker, name, left)
                .await
                .map_err(|e| self.failed(e))?;
            match state.as_deref() {
                Some("waiting") => return Err(JobError::suspended()),
                Some("emitted") => {}
                _ => return Err(lost(self.job_id)),
            }
            let row = self
                .client()
                .await?
                .query_one(
                    "SELECT checkpoints FROM jobq.jobs WHERE id = $1",
                    &[&self.job_id],
                )
                .await
                .map_err(|e| self.failed(e.into()))?;
            let kept: Value = row.try_get(0).map_err(|e| self.failed(e.into()))?;
            if let Some(map) = kept.as_object() {
                self.checkpoints.lock().unwrap().extend(map.clone());
            }
        }
        Ok(self
            .kept(&key)
            .and_then(|v| v.get("payload").cloned())
            .unwrap_or(Value::Null))
    }

    /// Fan-out, once: one job per payload in `queue` (of kind `kind`), their ids kept as the
    /// checkpoint `name` in the same statement.
    pub async fn spawn(
        &self,
        name: &str,
        queue: &str,
        payloads: &[Value],
        kind: Option<&str>,
    ) -> Result<Vec<i64>, JobError> {
        if let Some(kept) = self.kept(name) {
            return serde_json::from_value(kept).map_err(JobError::from);
        }
        let payloads = payloads.to_vec();
        let row = self
            .client()
            .await?
            .query_one(
                "SELECT x.ids, jobq_checkpoint($1, $2, $3, to_jsonb(x.ids))
                   FROM (SELECT coalesce(array_agg(b.v ORDER BY b.v), '{}') AS ids
                           FROM jobq_enqueue_batch($4, $5::jsonb[], kind => $6) AS b(v)) x",
                &[&self.job_id, &self.worker, &name, &queue, &payloads, &kind],
            )
            .await
            .map_err(|e| self.failed(e.into()))?;
        let ids: Vec<i64> = row.try_get(0).map_err(|e| self.failed(e.into()))?;
        let ok: bool = row.try_get(1).map_err(|e| self.failed(e.into()))?;
        if !ok {
            return Err(lost(self.job_id));
        }
        self.checkpoints
            .lock()
            .unwrap()
            .insert(name.to_string(), serde_json::json!(ids));
        Ok(ids)
    }

    /// Fan-in: the results of jobs `ids` ([`results`](crate::results), in order) once every one
    /// is finished; until then the job is blocked (`Err(JobError::suspended())`).
    pub async fn gather(&self, ids: &[i64]) -> Result<Vec<JobResult>, JobError> {
        let state = await_jobs(&*self.client().await?, self.job_id, self.worker, ids)
            .await
            .map_err(|e| self.failed(e))?;
        match state.as_deref() {
            Some("finished") => results(&*self.client().await?, ids)
                .await
                .map_err(|e| self.failed(e)),
            Some("waiting") => Err(JobError::suspended()),
            _ => Err(lost(self.job_id)),
        }
    }
}
