/**
 * The producer and operator calls: one function per `jobq_*` SQL function, each taking the
 * connection to run it on. Pass a `pg.Client`, a `pg.PoolClient` inside your own
 * `BEGIN`/`COMMIT` (the job then commits with your writes, or not at all), or a `pg.Pool`.
 * Only the options you set are sent (as named arguments), so the server's defaults stay the
 * server's.
 *
 * @packageDocumentation
 */
import { fromDriverError } from './errors';

/**
 * Anything with `pg`'s `query(text, values)`: a `pg.Client`, a `pg.PoolClient` (inside a
 * transaction of yours or not) or a `pg.Pool`.
 */
export interface Queryable {
  /** Runs one parameterised statement (sent unnamed, so it also works through a pooler). */
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/**
 * A job id. jobq's ids are `bigint`; `pg` returns them as strings, and so does this library.
 * A number or a `bigint` is accepted wherever an id is passed.
 */
export type JobId = string | number | bigint;

/**
 * A length of time: a number of milliseconds, or a PostgreSQL interval literal such as
 * `'5 minutes'`.
 */
export type Duration = number | string;

/** A point in time: a `Date`, or a string PostgreSQL reads as a `timestamptz`. */
export type Timestamp = Date | string;

/** The states of a job. */
export type JobState = 'ready' | 'executing' | 'completed' | 'dead' | 'cancelled';

/** What `jobq_fail` makes of a job: retried later, dead, or cancelled. */
export type FailState = 'ready' | 'dead' | 'cancelled';

/** How a `uniqueKey` is held (see the SQL contract's `jobq_enqueue`). */
export type UniqueStrategy = 'until_executed' | 'until_executing' | 'while_executing';

/** What `enqueue` does when the unique key is taken. */
export type OnConflict = 'reject' | 'discard' | 'log' | 'replace';

/** Options of {@link enqueue}; each one left out takes the server's default. */
export interface EnqueueOptions {
  /** The job's class name (for routing to a handler, pausing and statistics). Default none. */
  kind?: string | null;
  /** Lower runs first. Default 0. */
  priority?: number;
  /** When the job becomes due. Default now. */
  runAt?: Timestamp | null;
  /** Attempts before the job becomes `dead`. Default 25. */
  maxAttempts?: number;
  /** A key at most one job may hold, as `uniqueStrategy` says. */
  uniqueKey?: string | null;
  /** How `uniqueKey` is held. Default `'until_executed'`. */
  uniqueStrategy?: UniqueStrategy;
  /** What to do when the key is taken. Default `'reject'` ({@link UniqueConflict}). */
  onConflict?: OnConflict;
  /** At most `concurrencyLimit` jobs sharing this key execute at once, across all workers. */
  concurrencyKey?: string | null;
  /** The limit of `concurrencyKey`. Default 1. */
  concurrencyLimit?: number;
  /** The job's starts count against the limit {@link setRateLimit} set for this key. */
  rateKey?: string | null;
  /**
   * The jobs this one depends on (its parents): it starts `blocked` and becomes ready when
   * the last of them finishes.
   */
  dependsOn?: JobId[] | null;
  /** What a parent ending `dead` or `cancelled` does: `'cancel'` (default) this job, or `'run'`. */
  onParentFailure?: 'cancel' | 'run';
  /** Its key in the queue's fair checkout (a tenant, a customer): the keys are served in turns. */
  fairnessKey?: string | null;
}

/** A row of {@link results}: a job's state and outcome. */
export interface JobResult {
  /** The job's id. */
  id: string;
  /** Its class name, or null. */
  kind: string | null;
  /** Its state. */
  state: JobState;
  /** Its attempt number. */
  attempt: number;
  /** What its handler returned (parsed JSON), or null. */
  result: unknown;
  /** The error of its last failed attempt, or null. */
  lastError: unknown;
}

/** Options of {@link enqueueBatch}; each one left out takes the server's default. */
export interface EnqueueBatchOptions {
  /** The jobs' class name. */
  kind?: string | null;
  /** Lower runs first. Default 0. */
  priority?: number;
  /** When the jobs become due. Default now. */
  runAt?: Timestamp | null;
  /** Attempts before a job becomes `dead`. Default 25. */
  maxAttempts?: number;
  /** Every job's key in the queue's fair checkout. */
  fairnessKey?: string | null;
}

/** Options of {@link schedule}; each one left out takes the server's default. */
export interface ScheduleOptions {
  /** The jobs' class name. */
  kind?: string | null;
  /** Lower runs first. Default 0. */
  priority?: number;
  /** Attempts before a job becomes `dead`. Default 25. */
  maxAttempts?: number;
  /** The IANA time zone the cron expression is evaluated in. Default `'UTC'`. */
  timeZone?: string;
  /** Enqueue every tick missed while nothing ran (true), or only the latest (false, default). */
  catchUp?: boolean;
}

/** Options of {@link registerWorker}. */
export interface RegisterOptions {
  /** A name shown in `jobq.workers` and the dashboard. */
  name?: string | null;
  /** Free-form JSON shown in `jobq.workers`. Default `{}`. */
  metadata?: unknown;
  /**
   * The worker is also dead the moment this session ends, not only when its heartbeat
   * expires. Never through a transaction-mode pooler. Default false.
   */
  bindToSession?: boolean;
}

/** Options of {@link checkout}. */
export interface CheckoutOptions {
  /** Take jobs of these queues only. Default: every queue. */
  queues?: string[] | null;
  /** Take up to this many jobs. Default 1. */
  maxJobs?: number;
  /**
   * When nothing is available, wait inside the server up to this long for a job
   * (more than 0, at most 1 hour). Default: return at once.
   */
  wait?: Duration | null;
}

/** Options of {@link fail}. */
export interface FailOptions {
  /** The error, as JSON; becomes the job's `last_error`. */
  error?: unknown;
  /** Retry after this long instead of the default backoff. */
  retryIn?: Duration | null;
  /** Make the job `dead` now, whatever attempts remain. Default false. */
  discard?: boolean;
}

/** Options of {@link completeAndCheckout}. */
export interface CompleteAndCheckoutOptions {
  /** The results of the jobs in hand, aligned with their ids. */
  results?: unknown[] | null;
  /** Take jobs of these queues only. Default: every queue. */
  queues?: string[] | null;
  /** Take up to this many jobs. Default 1. */
  maxJobs?: number;
}

/** Options of {@link failAndCheckout}. */
export interface FailAndCheckoutOptions {
  /** The errors of the jobs in hand, aligned with their ids. */
  errors?: unknown[] | null;
  /** Take jobs of these queues only. Default: every queue. */
  queues?: string[] | null;
  /** Take up to this many jobs. Default 1. */
  maxJobs?: number;
}

/** A checked-out job: the columns of `jobq.job` that a worker uses. */
export interface Job {
  /** The job's id. */
  id: string;
  /** Its queue. */
  queue: string;
  /** Its class name, or null. */
  kind: string | null;
  /** What the enqueuer gave (parsed JSON). */
  payload: unknown;
  /** Lower runs first. */
  priority: number;
  /** This attempt's number, from 1. */
  attempt: number;
  /** Attempts allowed before the job becomes `dead`. */
  maxAttempts: number;
  /** When it became due. */
  runAt: Date;
  /** When it was enqueued. */
  enqueuedAt: Date;
  /** Its unique key, or null. */
  uniqueKey: string | null;
  /** Its concurrency key, or null. */
  concurrencyKey: string | null;
  /** When an earlier attempt was cut off (reaped, or returned by a heartbeat), else null. */
  interruptedAt: Date | null;
  /** The error of the last failed attempt (parsed JSON), or null. */
  lastError: unknown;
  /** The jobs it depends on, as enqueued, or null. */
  dependsOn: string[] | null;
  /** What its steps recorded ({@link checkpoint}) in earlier attempts; `{}` when none. */
  checkpoints: Record<string, unknown>;
}

/** What one {@link reap} pass did. */
export interface ReapResult {
  /** Dead workers removed. */
  workersReaped: number;
  /** Their jobs put back to `ready`. */
  jobsRequeued: number;
  /** Their jobs that had no attempt left and became `dead`. */
  jobsDead: number;
  /** Locks released (dead holders and expired ttls). */
  locksReleased: number;
  /** Finished jobs deleted after `jobq.retention`. */
  jobsPruned: number;
}

/** One row of the view `jobq.queue_stats`. */
export interface QueueStats {
  /** The queue. */
  queue: string;
  /** Jobs `ready` and due now. */
  ready: number;
  /** Jobs `ready` but not yet due. */
  scheduled: number;
  /** Jobs `executing`. */
  executing: number;
  /** Jobs `dead`, not yet pruned. */
  dead: number;
  /** Milliseconds since the oldest due `ready` job became due; null when none. */
  oldestReadyAgeMs: number | null;
}

// ---------------------------------------------------------------------------------------
// Building calls

type Arg = readonly [value: unknown, cast: string];

/**
 * `fn($1::cast, ..., name => $k::cast, ...)` with the named arguments whose value is not
 * undefined (so the server's defaults apply to the others), and its parameter values.
 */
function call(fn: string, positional: Arg[], named: Record<string, Arg> = {}): { sql: string; values: unknown[] } {
  const values: unknown[] = [];
  const parts: string[] = [];
  const param = ([value, cast]: Arg): string => {
    values.push(value);
    return `$${values.length}::${cast}`;
  };
  for (const arg of positional) parts.push(param(arg));
  for (const [name, arg] of Object.entries(named)) {
    if (arg[0] !== undefined) parts.push(`${name} => ${param(arg)}`);
  }
  return { sql: `${fn}(${parts.join(', ')})`, values };
}

async function run<R>(db: Queryable, sql: string, values: unknown[]): Promise<R[]> {
  try {
    const { rows } = await db.query(sql, values);
    return rows as R[];
  } catch (e) {
    throw fromDriverError(e);
  }
}

async function scalar<T>(db: Queryable, c: { sql: string; values: unknown[] }): Promise<T> {
  const rows = await run<{ r: T }>(db, `SELECT ${c.sql} AS r`, c.values);
  return rows[0]!.r;
}

/** JSON text for a jsonb parameter; undefined stays undefined (argument not sent). */
function json(value: unknown): string | undefined {
  return value === undefined ? undefined : JSON.stringify(value);
}

/** JSON texts for a jsonb[] parameter; an undefined element is SQL NULL. */
function jsonArray(values: unknown[] | null | undefined): (string | null)[] | null | undefined {
  if (values === undefined || values === null) return values;
  return values.map((v) => (v === undefined ? null : JSON.stringify(v)));
}

function interval(d: Duration | null | undefined): string | null | undefined {
  if (d === undefined || d === null) return d;
  return typeof d === 'number' ? `${d} milliseconds` : d;
}

function id(jobId: JobId): string {
  return String(jobId);
}

function ids(jobIds: JobId[] | null | undefined): string[] | null | undefined {
  return jobIds === undefined || jobIds === null ? jobIds : jobIds.map(String);
}

const JOB_COLUMNS =
  'id, queue, kind, payload, priority, attempt, max_attempts, run_at, enqueued_at, unique_key, ' +
  'concurrency_key, interrupted_at, last_error, depends_on, checkpoints';

interface JobRow {
  id: string;
  queue: string;
  kind: string | null;
  payload: unknown;
  priority: number;
  attempt: number;
  max_attempts: number;
  run_at: Date;
  enqueued_at: Date;
  unique_key: string | null;
  concurrency_key: string | null;
  interrupted_at: Date | null;
  last_error: unknown;
  depends_on: string[] | null;
  checkpoints: Record<string, unknown> | null;
}

function toJob(r: JobRow): Job {
  return {
    id: r.id,
    queue: r.queue,
    kind: r.kind,
    payload: r.payload,
    priority: r.priority,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    runAt: r.run_at,
    enqueuedAt: r.enqueued_at,
    uniqueKey: r.unique_key,
    concurrencyKey: r.concurrency_key,
    interruptedAt: r.interrupted_at,
    lastError: r.last_error,
    dependsOn: r.depends_on,
    checkpoints: r.checkpoints ?? {},
  };
}

async function jobs(db: Queryable, c: { sql: string; values: unknown[] }): Promise<Job[]> {
  return (await run<JobRow>(db, `SELECT ${JOB_COLUMNS} FROM ${c.sql}`, c.values)).map(toJob);
}

// ---------------------------------------------------------------------------------------
// Jobs

/**
 * Adds one job (`jobq_enqueue`) and returns its id; null when `onConflict` is `'discard'`
 * or `'log'` and the unique key was taken. Run it on your own transaction's client to make
 * the job commit (and wake workers) with your writes, or not at all.
 *
 * @param db - the connection (or transaction, or pool) to run it on
 * @param queue - the queue
 * @param payload - any JSON value; default `{}`
 * @param options - see {@link EnqueueOptions}
 * @throws {@link UniqueConflict} when the unique key is taken and `onConflict` is `'reject'`
 * @throws {@link InvalidArgument} for a bad value (an empty queue, `maxAttempts < 1`, ...)
 * @throws {@link PermissionDenied} for a role without `jobq_producer`
 */
export async function enqueue(db: Queryable, queue: string, payload?: unknown, options: EnqueueOptions = {}): Promise<string | null> {
  return scalar<string | null>(db, call('jobq_enqueue', [[queue, 'text']], {
    payload: [json(payload), 'jsonb'],
    kind: [options.kind, 'text'],
    priority: [options.priority, 'integer'],
    run_at: [options.runAt, 'timestamptz'],
    max_attempts: [options.maxAttempts, 'integer'],
    unique_key: [options.uniqueKey, 'text'],
    unique_strategy: [options.uniqueStrategy, 'text'],
    on_conflict: [options.onConflict, 'text'],
    concurrency_key: [options.concurrencyKey, 'text'],
    concurrency_limit: [options.concurrencyLimit, 'integer'],
    rate_key: [options.rateKey, 'text'],
    depends_on: [ids(options.dependsOn), 'bigint[]'],
    on_parent_failure: [options.onParentFailure, 'text'],
    fairness_key: [options.fairnessKey, 'text'],
  }));
}

/**
 * Adds one job per payload, all alike, in one call (`jobq_enqueue_batch`); returns their ids
 * in payload order.
 *
 * @param db - the connection (or transaction, or pool) to run it on
 * @param queue - the queue
 * @param payloads - one JSON value per job
 * @param options - see {@link EnqueueBatchOptions}
 */
export async function enqueueBatch(db: Queryable, queue: string, payloads: unknown[], options: EnqueueBatchOptions = {}): Promise<string[]> {
  const c = call('jobq_enqueue_batch', [[queue, 'text'], [jsonArray(payloads), 'jsonb[]']], {
    kind: [options.kind, 'text'],
    priority: [options.priority, 'integer'],
    run_at: [options.runAt, 'timestamptz'],
    max_attempts: [options.maxAttempts, 'integer'],
    fairness_key: [options.fairnessKey, 'text'],
  });
  return (await run<{ id: string }>(db, `SELECT id FROM ${c.sql} AS id`, c.values)).map((r) => r.id);
}

/**
 * Cancels a job (`jobq_cancel`): a waiting job becomes `cancelled` at once; a running one
 * gets a request its worker sees at its next heartbeat. Returns the job's state after the
 * call (`'executing'` when the request was recorded), or null for an unknown id.
 *
 * @param db - the connection to run it on
 * @param jobId - the job
 */
export async function cancel(db: Queryable, jobId: JobId): Promise<JobState | null> {
  return scalar<JobState | null>(db, call('jobq_cancel', [[id(jobId), 'bigint']]));
}

/**
 * Makes a `dead` or `cancelled` job `ready` again, with `attempt` back to 0 (`jobq_retry`).
 * False when its unique key is taken meanwhile or the job is in another state.
 *
 * @param db - the connection to run it on
 * @param jobId - the job
 */
export async function retry(db: Queryable, jobId: JobId): Promise<boolean> {
  return scalar<boolean>(db, call('jobq_retry', [[id(jobId), 'bigint']]));
}

// ---------------------------------------------------------------------------------------
// Workflows

/**
 * A whole graph of jobs in one call and one transaction (`jobq_enqueue_graph`): each element
 * has `jobq_enqueue`'s arguments by their SQL names (`queue`, `payload`, `kind`, `priority`,
 * `run_at`, `unique_key`, ..., `depends_on`, `on_parent_failure`) and `after`, the 0-based
 * positions of earlier elements it depends on. Returns the ids in order (null where a unique
 * key's conflict discarded the job).
 *
 * @param db - the connection (or transaction) to run it on
 * @param jobs - the graph's jobs, parents before children
 */
export async function enqueueGraph(db: Queryable, jobs: Record<string, unknown>[]): Promise<(string | null)[]> {
  return (await run<{ id: string | null }>(db, 'SELECT id FROM jobq_enqueue_graph($1::jsonb) AS id', [JSON.stringify(jobs)])).map((r) => r.id);
}

/**
 * The state and outcome of each listed job that exists (`jobq_results`), in the order of
 * `jobIds`: what parents or awaited jobs produced (fan-in). At most 10,000 ids.
 *
 * @param db - the connection to run it on
 * @param jobIds - the jobs
 */
export async function results(db: Queryable, jobIds: JobId[]): Promise<JobResult[]> {
  const rows = await run<{ id: string; kind: string | null; state: JobState; attempt: number; result: unknown; last_error: unknown }>(
    db, 'SELECT * FROM jobq_results($1::bigint[])', [ids(jobIds)]);
  return rows.map((r) => ({ id: r.id, kind: r.kind, state: r.state, attempt: r.attempt, result: r.result, lastError: r.last_error }));
}

/**
 * Emits the event `name` (`jobq_emit_event`): every job awaiting it becomes ready, with the
 * payload in its checkpoints. The first emit of a name wins. Returns how many jobs it woke.
 *
 * @param db - the connection to run it on
 * @param name - the event
 * @param payload - any JSON value, or left out
 */
export async function emitEvent(db: Queryable, name: string, payload?: unknown): Promise<number> {
  return scalar<number>(db, call('jobq_emit_event', [[name, 'text']], { payload: [json(payload), 'jsonb'] }));
}

/**
 * Records `value` under `step` in the running job's checkpoints (`jobq_checkpoint`), in the
 * connection's transaction. False when the job is not executing under `workerId`.
 */
export async function checkpoint(db: Queryable, jobId: JobId, workerId: string, step: string, value: unknown): Promise<boolean> {
  return scalar<boolean>(db, call('jobq_checkpoint', [[id(jobId), 'bigint'], [workerId, 'uuid'], [step, 'text'], [JSON.stringify(value ?? null), 'jsonb']]));
}

/**
 * Durable sleep (`jobq_snooze`): the running job goes back to ready, due at `until`; its
 * attempt does not count. False when the job is not executing under `workerId`.
 */
export async function snooze(db: Queryable, jobId: JobId, workerId: string, until: Timestamp): Promise<boolean> {
  return scalar<boolean>(db, call('jobq_snooze', [[id(jobId), 'bigint'], [workerId, 'uuid'], [until, 'timestamptz']]));
}

/**
 * Fan-in (`jobq_await_jobs`): `'finished'` when every listed job is finished (the job keeps
 * running), else `'waiting'`: the job is blocked until the last one finishes. Null when the
 * job is not executing under `workerId`.
 */
export async function awaitJobs(db: Queryable, jobId: JobId, workerId: string, jobIds: JobId[]): Promise<'finished' | 'waiting' | null> {
  return scalar(db, call('jobq_await_jobs', [[id(jobId), 'bigint'], [workerId, 'uuid'], [ids(jobIds), 'bigint[]']]));
}

/**
 * Waits for an event (`jobq_await_event`): `'emitted'` when it was emitted already (its
 * payload is now the checkpoint `event:<name>`; the job keeps running), else `'waiting'`:
 * the job is blocked until the event is emitted or `timeout` passes. Null when the job is not
 * executing under `workerId`.
 */
export async function awaitEvent(db: Queryable, jobId: JobId, workerId: string, event: string, timeout?: Duration | null): Promise<'emitted' | 'waiting' | null> {
  return scalar(db, call('jobq_await_event', [[id(jobId), 'bigint'], [workerId, 'uuid'], [event, 'text']], { timeout: [interval(timeout), 'interval'] }));
}

/**
 * Makes checkout skip a queue (`kind` left out), a kind within a queue, or a kind in every
 * queue (`queue` null) (`jobq_pause`; `jobq_admin`).
 *
 * @param db - the connection to run it on
 * @param queue - the queue, or null for `kind` in every queue
 * @param kind - the kind, or left out for the whole queue
 */
export async function pause(db: Queryable, queue: string | null, kind?: string | null): Promise<void> {
  await scalar(db, call('jobq_pause', [[queue, 'text']], { kind: [kind, 'text'] }));
}

/**
 * Undoes the {@link pause} made with the same arguments (`jobq_resume`; `jobq_admin`).
 *
 * @param db - the connection to run it on
 * @param queue - as given to {@link pause}
 * @param kind - as given to {@link pause}
 */
export async function resume(db: Queryable, queue: string | null, kind?: string | null): Promise<void> {
  await scalar(db, call('jobq_resume', [[queue, 'text']], { kind: [kind, 'text'] }));
}

// ---------------------------------------------------------------------------------------
// Workers (the low-level calls the Worker class makes for you)

/**
 * Registers a worker and returns its id (`jobq_register_worker`).
 *
 * @param db - the connection to run it on (the session `bindToSession` binds to)
 * @param options - see {@link RegisterOptions}
 */
export async function registerWorker(db: Queryable, options: RegisterOptions = {}): Promise<string> {
  return scalar<string>(db, call('jobq_register_worker', [], {
    name: [options.name, 'text'],
    metadata: [json(options.metadata), 'jsonb'],
    bind_to_session: [options.bindToSession, 'boolean'],
  }));
}

/**
 * Refreshes a worker's heartbeat (`jobq_heartbeat`) and returns the ids of its jobs whose
 * cancellation was requested. With `holding` (every job whose checkout has returned to the
 * worker), its other executing jobs go back to `ready` at once.
 *
 * @param db - the connection to run it on
 * @param workerId - the worker
 * @param holding - the jobs the worker really runs; left out or null: change no job
 * @throws {@link WorkerLost} when the worker was reaped or unregistered
 */
export async function heartbeat(db: Queryable, workerId: string, holding?: JobId[] | null): Promise<string[]> {
  return scalar<string[]>(db, call('jobq_heartbeat', [[workerId, 'uuid']], { holding: [ids(holding), 'bigint[]'] }));
}

/**
 * The first step of a graceful shutdown (`jobq_stop_checkouts`): the worker's checkouts claim
 * nothing more. One waiting now, on any connection, returns at once with no job, and so does
 * every later one, until the worker unregisters; its jobs in hand, heartbeats and completions
 * go on. No statement is cancelled, so the server logs no error.
 *
 * @throws {@link WorkerLost} when the worker is unknown or reaped (`JQ001`)
 */
export async function stopCheckouts(db: Queryable, workerId: string): Promise<void> {
  await run(db, 'SELECT jobq_stop_checkouts($1::uuid)::text AS r', [workerId]);
}

/**
 * Graceful shutdown of a worker (`jobq_unregister_worker`): its executing jobs go back to
 * `ready` (the attempt does not count), its locks are released. Returns how many jobs went
 * back.
 *
 * @param db - the connection to run it on
 * @param workerId - the worker
 * @throws {@link WorkerLost} when the worker is already gone
 */
export async function unregisterWorker(db: Queryable, workerId: string): Promise<number> {
  return scalar<number>(db, call('jobq_unregister_worker', [[workerId, 'uuid']]));
}

/**
 * Claims up to `maxJobs` due jobs for a worker (`jobq_checkout`), optionally waiting inside
 * the server for one. An empty array means nothing was available.
 *
 * @param db - the connection to run it on (a waiting call must be a statement of its own in
 *   READ COMMITTED)
 * @param workerId - the worker
 * @param options - see {@link CheckoutOptions}
 * @throws {@link WorkerLost} when the worker was reaped or unregistered
 */
export async function checkout(db: Queryable, workerId: string, options: CheckoutOptions = {}): Promise<Job[]> {
  return jobs(db, call('jobq_checkout', [[workerId, 'uuid']], {
    queues: [options.queues, 'text[]'],
    max_jobs: [options.maxJobs, 'integer'],
    wait: [interval(options.wait), 'interval'],
  }));
}

/**
 * Marks a job `completed` with `result` (`jobq_complete`). False, changing nothing, when the
 * job is no longer executing under this worker (reaped, cancelled, finished): drop it.
 *
 * @param db - the connection to run it on
 * @param jobId - the job
 * @param workerId - the worker that runs it
 * @param result - any JSON value, stored as the job's result; left out: NULL
 */
export async function complete(db: Queryable, jobId: JobId, workerId: string, result?: unknown): Promise<boolean> {
  return scalar<boolean>(db, call('jobq_complete', [[id(jobId), 'bigint'], [workerId, 'uuid']], { result: [json(result), 'jsonb'] }));
}

/**
 * Records a failed attempt (`jobq_fail`) and returns the job's new state: `'ready'` (it runs
 * again after `retryIn` or the default backoff), `'dead'`, or `'cancelled'` (its
 * cancellation was requested); null when the job is no longer executing under this worker.
 *
 * @param db - the connection to run it on
 * @param jobId - the job
 * @param workerId - the worker that runs it
 * @param options - see {@link FailOptions}
 */
export async function fail(db: Queryable, jobId: JobId, workerId: string, options: FailOptions = {}): Promise<FailState | null> {
  return scalar<FailState | null>(db, call('jobq_fail', [[id(jobId), 'bigint'], [workerId, 'uuid']], {
    error: [json(options.error), 'jsonb'],
    retry_in: [interval(options.retryIn), 'interval'],
    discard: [options.discard, 'boolean'],
  }));
}

/**
 * Completes many jobs of one worker in one call (`jobq_complete_many`); returns the ids it
 * completed (an id left out was no longer this worker's).
 *
 * @param db - the connection to run it on
 * @param workerId - the worker
 * @param jobIds - the jobs
 * @param results - their results, aligned with `jobIds`
 */
export async function completeMany(db: Queryable, workerId: string, jobIds: JobId[], results?: unknown[] | null): Promise<string[]> {
  return scalar<string[]>(db, call('jobq_complete_many', [[workerId, 'uuid'], [ids(jobIds), 'bigint[]']], {
    results: [jsonArray(results), 'jsonb[]'],
  }));
}

/**
 * Fails many jobs of one worker in one call, with the default backoff (`jobq_fail_many`);
 * returns their new states aligned with `jobIds` (null where the job was not this worker's).
 *
 * @param db - the connection to run it on
 * @param workerId - the worker
 * @param jobIds - the jobs
 * @param errors - their errors, aligned with `jobIds`
 */
export async function failMany(db: Queryable, workerId: string, jobIds: JobId[], errors?: unknown[] | null): Promise<(FailState | null)[]> {
  return scalar<(FailState | null)[]>(db, call('jobq_fail_many', [[workerId, 'uuid'], [ids(jobIds), 'bigint[]']], {
    errors: [jsonArray(errors), 'jsonb[]'],
  }));
}

/**
 * The one-commit worker protocol (`jobq_complete_and_checkout`): completes the jobs in hand
 * and claims the next ones in one call. All or nothing: if a job in hand is no longer this
 * worker's, it raises `JQ002` (a {@link JobqError}) and changes nothing; report the others
 * with {@link completeMany}.
 *
 * @param db - the connection to run it on
 * @param workerId - the worker
 * @param jobIds - the jobs in hand (`[]` on the first call)
 * @param options - see {@link CompleteAndCheckoutOptions}
 */
export async function completeAndCheckout(db: Queryable, workerId: string, jobIds: JobId[], options: CompleteAndCheckoutOptions = {}): Promise<Job[]> {
  return jobs(db, call('jobq_complete_and_checkout', [[workerId, 'uuid'], [ids(jobIds), 'bigint[]']], {
    results: [jsonArray(options.results), 'jsonb[]'],
    queues: [options.queues, 'text[]'],
    max_jobs: [options.maxJobs, 'integer'],
  }));
}

/**
 * As {@link completeAndCheckout}, failing the jobs in hand with the default backoff
 * (`jobq_fail_and_checkout`).
 *
 * @param db - the connection to run it on
 * @param workerId - the worker
 * @param jobIds - the jobs in hand
 * @param options - see {@link FailAndCheckoutOptions}
 */
export async function failAndCheckout(db: Queryable, workerId: string, jobIds: JobId[], options: FailAndCheckoutOptions = {}): Promise<Job[]> {
  return jobs(db, call('jobq_fail_and_checkout', [[workerId, 'uuid'], [ids(jobIds), 'bigint[]']], {
    errors: [jsonArray(options.errors), 'jsonb[]'],
    queues: [options.queues, 'text[]'],
    max_jobs: [options.maxJobs, 'integer'],
  }));
}

// ---------------------------------------------------------------------------------------
// Locks

/**
 * Takes the named lock `key` for a worker until `ttl` from now, or extends it if the worker
 * holds it (`jobq_acquire_lock`). True when the worker holds it after the call.
 *
 * @param db - the connection to run it on
 * @param key - the lock's name (shares its namespace with unique keys)
 * @param workerId - the worker
 * @param options - `ttl`: how long the lock lasts; default 5 minutes
 */
export async function acquireLock(db: Queryable, key: string, workerId: string, options: { ttl?: Duration } = {}): Promise<boolean> {
  return scalar<boolean>(db, call('jobq_acquire_lock', [[key, 'text'], [workerId, 'uuid']], { ttl: [interval(options.ttl), 'interval'] }));
}

/**
 * Releases the named lock if this worker holds it (`jobq_release_lock`). True if released.
 *
 * @param db - the connection to run it on
 * @param key - the lock's name
 * @param workerId - the worker
 */
export async function releaseLock(db: Queryable, key: string, workerId: string): Promise<boolean> {
  return scalar<boolean>(db, call('jobq_release_lock', [[key, 'text'], [workerId, 'uuid']]));
}

/**
 * The live worker holding the named lock (`jobq_lock_holder`); null when it is free or held
 * by a unique job.
 *
 * @param db - the connection to run it on
 * @param key - the lock's name
 */
export async function lockHolder(db: Queryable, key: string): Promise<string | null> {
  return scalar<string | null>(db, call('jobq_lock_holder', [[key, 'text']]));
}

// ---------------------------------------------------------------------------------------
// Schedules, rate limits, reaping, statistics

/**
 * Creates or replaces the recurring schedule `name` (`jobq_schedule`; `jobq_admin`): one job
 * per tick of `cron`.
 *
 * @param db - the connection to run it on
 * @param name - the schedule's name
 * @param cron - five fields (minute hour day-of-month month day-of-week), six with leading
 *   seconds, or `@hourly`, `@daily`, ...
 * @param queue - the queue its jobs go to
 * @param payload - their payload; default `{}`
 * @param options - see {@link ScheduleOptions}
 */
export async function schedule(db: Queryable, name: string, cron: string, queue: string, payload?: unknown, options: ScheduleOptions = {}): Promise<void> {
  await scalar(db, call('jobq_schedule', [[name, 'text'], [cron, 'text'], [queue, 'text']], {
    payload: [json(payload), 'jsonb'],
    kind: [options.kind, 'text'],
    priority: [options.priority, 'integer'],
    max_attempts: [options.maxAttempts, 'integer'],
    time_zone: [options.timeZone, 'text'],
    catch_up: [options.catchUp, 'boolean'],
  }));
}

/**
 * Removes the schedule `name` (`jobq_unschedule`; `jobq_admin`); false when there was none.
 *
 * @param db - the connection to run it on
 * @param name - the schedule's name
 */
export async function unschedule(db: Queryable, name: string): Promise<boolean> {
  return scalar<boolean>(db, call('jobq_unschedule', [[name, 'text']]));
}

/**
 * At most `maxStarts` jobs with `rateKey: key` start within any window of length `per`
 * (`jobq_set_rate_limit`; `jobq_admin`). `maxStarts` null removes the limit.
 *
 * @param db - the connection to run it on
 * @param key - the rate key
 * @param maxStarts - starts per window, or null to remove the limit
 * @param per - the window's length
 */
export async function setRateLimit(db: Queryable, key: string, maxStarts: number | null, per: Duration | null): Promise<void> {
  await scalar(db, call('jobq_set_rate_limit', [[key, 'text'], [maxStarts, 'integer'], [interval(per), 'interval']]));
}

/**
 * One pass of crash recovery (`jobq_reap`; `jobq_admin`). The background worker runs it by
 * itself when jobq is preloaded.
 *
 * @param db - the connection to run it on
 */
export async function reap(db: Queryable): Promise<ReapResult> {
  const rows = await run<Record<string, number>>(db, 'SELECT * FROM jobq_reap()', []);
  const r = rows[0]!;
  return {
    workersReaped: r['workers_reaped']!,
    jobsRequeued: r['jobs_requeued']!,
    jobsDead: r['jobs_dead']!,
    locksReleased: r['locks_released']!,
    jobsPruned: r['jobs_pruned']!,
  };
}

/**
 * The rows of the view `jobq.queue_stats` (`jobq_reader`), ordered by queue; only `queue`'s
 * when given.
 *
 * @param db - the connection to run it on
 * @param queue - one queue, or left out for all
 */
export async function queueStats(db: Queryable, queue?: string): Promise<QueueStats[]> {
  const rows = await run<{ queue: string; ready: string; scheduled: string; executing: string; dead: string; age: number | null }>(db,
    `SELECT queue, ready, scheduled, executing, dead,
            (extract(epoch FROM oldest_ready_age) * 1000)::float8 AS age
       FROM jobq.queue_stats WHERE $1::text IS NULL OR queue = $1::text ORDER BY queue`,
    [queue ?? null]);
  return rows.map((r) => ({
    queue: r.queue,
    ready: Number(r.ready),
    scheduled: Number(r.scheduled),
    executing: Number(r.executing),
    dead: Number(r.dead),
    oldestReadyAgeMs: r.age,
  }));
}
