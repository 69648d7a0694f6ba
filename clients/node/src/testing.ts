/**
 * Testing your own handlers: run the due jobs of some queues inline, in the test
 * ({@link drain}), look up the jobs code under test enqueued ({@link enqueued}), and build a
 * job to call a handler with directly ({@link makeJob}).
 *
 * Both go through jobq's SQL, never around it: `drain` is a worker of its own that runs one
 * job at a time in the caller's flow (`jobq_register_worker`, then `jobq_checkout` of one job,
 * the handler, `jobq_complete` or `jobq_fail`, again until no job is due, then
 * `jobq_unregister_worker`), and `enqueued` is one SELECT on `jobq.live_jobs`:
 *
 * ```ts
 * import { testing } from 'jobq';
 *
 * test('sign-up sends the welcome mail', async () => {
 *   await signUp(db, 'ada@example.com');                   // the code under test enqueues
 *   const [job] = await testing.enqueued(db, 'mail', { kind: 'welcome', payload: { to: 'ada@example.com' } });
 *   const drained = await testing.drain(db, { queues: ['mail'], handlers: { welcome } });
 *   assert.deepEqual(drained.jobs.map((d) => d.state), ['completed']);
 * });
 * ```
 *
 * The calls run on the connection given, in its transaction if it has one open, so a test
 * that enqueues and drains on one client inside `BEGIN` and rolls back leaves nothing behind.
 * The guide is `docs/testing.md`.
 *
 * @packageDocumentation
 */
import * as os from 'node:os';
import {
  checkout, complete, fail, heartbeat, registerWorker, unregisterWorker,
  type FailState, type Job, type Queryable,
} from './client';
import { RetryIn, fromDriverError } from './errors';
import type { Durable } from './durable';
import type { Handler, JobContext } from './worker';

/** How many jobs {@link drain} runs at most unless `maxJobs` says otherwise. */
export const DEFAULT_MAX_JOBS = 1000;

/** The name the drain's worker registers with (`jobq.workers.name`). */
export const WORKER_NAME = 'jobq.testing.drain';

/** Options of {@link drain}. */
export interface DrainOptions {
  /** The queues to drain (at least one). */
  queues: string[];
  /** Handlers by kind (or by queue, for jobs without a kind), as a `Worker` takes them. */
  handlers: Record<string, Handler>;
  /**
   * How many jobs to run at most. When another is due after that, `drain` rejects with
   * {@link DrainLimitReached} (that job is given back, its attempt not counted). Default
   * {@link DEFAULT_MAX_JOBS}.
   */
  maxJobs?: number;
}

/** One job {@link drain} ran, and what came of it. */
export interface DrainedJob {
  /** The job as its handler got it. */
  job: Job;
  /**
   * Its state after the drain reported it: `'completed'`; after a failure `'ready'` (retried
   * after the backoff or the `retryIn` delay), `'dead'` (attempts spent, or discarded) or
   * `'cancelled'`; null when the server answered that the job was no longer the drain's.
   */
  state: 'completed' | FailState | null;
  /** What the handler returned (`undefined` is null); null after a failure. */
  result: unknown;
  /**
   * The error reported with `jobq_fail` (`{type, message}`, as a `Worker` reports it); null
   * when the handler returned a value.
   */
  error: { type: string; message: string } | null;
  /** What the handler threw (or the `RetryIn` it returned); undefined when it returned. */
  thrown?: unknown;
}

/** What {@link drain} did. */
export interface Drained {
  /** The jobs it ran, in the order it ran them. */
  jobs: DrainedJob[];
  /** Those whose handler returned a value (`jobq_complete`). */
  completed: DrainedJob[];
  /** Those whose handler threw, or that had no handler (`jobq_fail`). */
  failed: DrainedJob[];
}

/**
 * {@link drain} ran `maxJobs` jobs and another was still due: most likely a handler that
 * enqueues a job that enqueues one again, forever. The job it checked out last was not
 * started: unregistering the drain's worker gave it back, its attempt not counted.
 */
export class DrainLimitReached extends Error {
  /**
   * @param maxJobs - the limit
   * @param drained - the jobs it ran before stopping
   */
  constructor(readonly maxJobs: number, readonly drained: Drained) {
    super(`jobq: testing.drain ran ${maxJobs} jobs and more are due (maxJobs: ${maxJobs})`);
    this.name = 'DrainLimitReached';
  }
}

/** A job waiting to run, as {@link enqueued} reads it from `jobq.live_jobs`. */
export interface EnqueuedJob {
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
  /** `'ready'`, or `'blocked'` for a job waiting for the jobs it depends on (or an event). */
  state: 'ready' | 'blocked';
  /** When it is due. */
  runAt: Date;
  /** A ready job not due yet (scheduled, or waiting for a retry's backoff). */
  scheduled: boolean;
  /** When it was enqueued. */
  enqueuedAt: Date;
  /** Attempts started so far. */
  attempt: number;
  /** Attempts allowed. */
  maxAttempts: number;
  /** Its unique key, or null. */
  uniqueKey: string | null;
  /** Its concurrency key, or null. */
  concurrencyKey: string | null;
  /** The jobs it depends on, or null. */
  dependsOn: string[] | null;
}

/** Options of {@link enqueued}. */
export interface EnqueuedFilter {
  /** Only jobs of this kind. */
  kind?: string | null;
  /**
   * Only jobs whose payload contains this JSON (`payload @> $payload`): a subset of keys,
   * `{ to: 'ada@example.com' }`, matches a payload with more.
   */
  payload?: unknown;
}

interface EnqueuedRow {
  id: string;
  queue: string;
  kind: string | null;
  payload: unknown;
  priority: number;
  state: 'ready' | 'blocked';
  run_at: Date;
  scheduled: boolean;
  enqueued_at: Date;
  attempt: number;
  max_attempts: number;
  unique_key: string | null;
  concurrency_key: string | null;
  depends_on: string[] | null;
}

const ENQUEUED_SQL = `SELECT id, queue, kind, payload, priority, state, run_at,
       state = 'ready' AND run_at > clock_timestamp() AS scheduled,
       enqueued_at, attempt, max_attempts, unique_key, concurrency_key, depends_on
  FROM jobq.live_jobs
 WHERE queue = $1 AND state IN ('ready', 'blocked')
   AND ($2::text IS NULL OR kind = $2::text)
   AND ($3::jsonb IS NULL OR payload @> $3::jsonb)
 ORDER BY id`;

/**
 * The jobs of `queue` waiting to run (state `ready`, due or scheduled, or `blocked`), oldest
 * first: what a test asserts its code enqueued. One SELECT on `jobq.live_jobs`
 * (`jobq_reader`), in `db`'s transaction if it has one open; it changes nothing.
 *
 * @param db - the connection (or transaction, or pool) to read on
 * @param queue - the queue
 * @param filter - see {@link EnqueuedFilter}
 */
export async function enqueued(db: Queryable, queue: string, filter: EnqueuedFilter = {}): Promise<EnqueuedJob[]> {
  let rows: EnqueuedRow[];
  try {
    const payload = filter.payload === undefined || filter.payload === null ? null : JSON.stringify(filter.payload);
    rows = (await db.query(ENQUEUED_SQL, [queue, filter.kind ?? null, payload])).rows as EnqueuedRow[];
  } catch (e) {
    throw fromDriverError(e);
  }
  return rows.map((r) => ({
    id: r.id,
    queue: r.queue,
    kind: r.kind,
    payload: r.payload,
    priority: r.priority,
    state: r.state,
    runAt: r.run_at,
    scheduled: r.scheduled,
    enqueuedAt: r.enqueued_at,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    uniqueKey: r.unique_key,
    concurrencyKey: r.concurrency_key,
    dependsOn: r.depends_on,
  }));
}

// ---------------------------------------------------------------------------------------
// drain

/** `{type, message}` of what a handler threw, as the Worker describes it. */
function describe(e: unknown): { type: string; message: string } {
  if (e instanceof Error) return { type: e.constructor?.name || e.name, message: e.message };
  return { type: typeof e, message: String(e) };
}

interface Outcome {
  result: unknown;
  error: { type: string; message: string } | null;
  retryInMs: number | null;
  discard: boolean;
  thrown?: unknown;
}

/** The context a handler gets: the job's columns, a signal, no durable steps. */
function contextOf(job: Job, workerId: string, signal: AbortSignal = new AbortController().signal): JobContext {
  return {
    ...job,
    workerId,
    signal,
    durable(): Durable {
      throw new Error('jobq: durable steps need a job run by a Worker (testing.drain runs none)');
    },
  };
}

/** Fields of {@link makeJob}: any column of a {@link Job}, and the handler's `signal`. */
export type MakeJobFields = Partial<Job> & {
  /** The signal the handler gets: abort it to test a handler that stops. Default: never aborted. */
  signal?: AbortSignal;
  /** The worker id the handler sees. Default the nil uuid. */
  workerId?: string;
};

/**
 * A {@link JobContext} for calling a handler directly in a unit test, as a checkout would hand
 * it over: id `'0'` (no job has it), attempt 1 of 25, priority 0, due, enqueued now, no kind,
 * keys or checkpoints, unless `fields` sets them. `durable()` throws, as in {@link drain}.
 *
 * ```ts
 * const result = await welcome(testing.makeJob('mail', { to: 'ada@example.com' }, { kind: 'welcome', attempt: 3 }));
 * ```
 *
 * @param queue - the job's queue
 * @param payload - its payload; default `{}`, the server's default
 * @param fields - see {@link MakeJobFields}
 */
export function makeJob(queue: string, payload: unknown = {}, fields: MakeJobFields = {}): JobContext {
  const { signal, workerId, ...columns } = fields;
  const now = new Date();
  const job: Job = {
    id: '0',
    queue,
    kind: null,
    payload,
    priority: 0,
    attempt: 1,
    maxAttempts: 25,
    runAt: now,
    enqueuedAt: now,
    uniqueKey: null,
    concurrencyKey: null,
    interruptedAt: null,
    lastError: null,
    dependsOn: null,
    checkpoints: {},
    ...columns,
  };
  return contextOf(job, workerId ?? '00000000-0000-0000-0000-000000000000', signal);
}

async function run(handler: Handler | undefined, job: Job, workerId: string): Promise<Outcome> {
  if (!handler) {
    const what = job.kind === null ? `queue "${job.queue}"` : `kind "${job.kind}"`;
    return { result: null, error: { type: 'NoHandler', message: `jobq: no handler for ${what}` }, retryInMs: null, discard: true };
  }
  let value: unknown;
  try {
    value = await handler(contextOf(job, workerId));
  } catch (e) {
    return failed(e);
  }
  if (value instanceof RetryIn) return failed(value);
  try {
    JSON.stringify(value); // what complete() sends: a value it cannot send fails the job
  } catch (e) {
    return failed(e);
  }
  return { result: value, error: null, retryInMs: null, discard: false }; // undefined: stored as NULL
}

function failed(e: unknown): Outcome {
  return {
    result: null,
    error: describe(e),
    retryInMs: e instanceof RetryIn ? e.delayMs : null,
    discard: false,
    thrown: e,
  };
}

function summary(jobs: DrainedJob[]): Drained {
  return { jobs, completed: jobs.filter((d) => d.error === null), failed: jobs.filter((d) => d.error !== null) };
}

/**
 * Runs every due job of `queues` with `handlers`, one at a time, until none is due, and
 * resolves with what came of each.
 *
 * It is a worker of its own, through jobq's SQL: it registers (`jobq_register_worker`, named
 * `jobq.testing.drain`, not bound to the session), checks out one job (`jobq_checkout`), runs
 * its handler (found by the job's kind, or its queue for a job without a kind, as in a
 * `Worker`), reports it (`jobq_complete` with the result, or `jobq_fail` with the error:
 * `retryIn`'s delay, `NoHandler` discarded), heartbeats, and checks out again, so that a job
 * a handler enqueues (due now) is drained too; then it unregisters. Jobs not due yet (`runAt`
 * in the future, a retry's backoff) and blocked jobs are left alone, as every worker leaves
 * them.
 *
 * A handler's error does not reject `drain`: the job fails and its {@link DrainedJob} keeps
 * what was thrown. The handler's `signal` never aborts, and `durable()` throws (durable steps
 * need a `Worker`).
 *
 * @param db - where the calls run: a `pg.Client` or `PoolClient` (inside your `BEGIN`, the
 *   calls join your transaction: jobs enqueued in it are drained, nothing is committed), or
 *   a `pg.Pool` (each call commits; committed jobs only)
 * @param options - see {@link DrainOptions}
 * @throws {@link DrainLimitReached} when more than `maxJobs` jobs were due
 */
export async function drain(db: Queryable, options: DrainOptions): Promise<Drained> {
  const { queues, handlers } = options;
  const maxJobs = options.maxJobs ?? DEFAULT_MAX_JOBS;
  if (!Array.isArray(queues) || queues.length === 0) throw new TypeError('jobq: testing.drain needs at least one queue');
  if (!Number.isInteger(maxJobs) || maxJobs < 1) throw new RangeError('jobq: maxJobs must be an integer of at least 1');
  const workerId = await registerWorker(db, {
    name: WORKER_NAME,
    metadata: { lang: 'node', pid: process.pid, host: os.hostname(), testing: true },
  });
  const ran: DrainedJob[] = [];
  try {
    for (;;) {
      if (ran.length > 0) await heartbeat(db, workerId); // a long drain outlives jobq.heartbeat_timeout
      const [job] = await checkout(db, workerId, { queues, maxJobs: 1 });
      if (!job) break;
      if (ran.length === maxJobs) throw new DrainLimitReached(maxJobs, summary(ran));
      const handler = Object.prototype.hasOwnProperty.call(handlers, job.kind ?? job.queue)
        ? handlers[job.kind ?? job.queue] : undefined;
      const out = await run(handler, job, workerId);
      let state: DrainedJob['state'];
      if (out.error === null) {
        state = (await complete(db, job.id, workerId, out.result)) ? 'completed' : null;
      } else {
        state = await fail(db, job.id, workerId, {
          error: out.error, retryIn: out.retryInMs, discard: out.discard || undefined,
        });
      }
      const drained: DrainedJob = { job, state, result: out.result === undefined ? null : out.result, error: out.error };
      if ('thrown' in out) drained.thrown = out.thrown;
      ran.push(drained);
    }
  } catch (e) {
    if (e instanceof DrainLimitReached) {
      await unregisterWorker(db, workerId); // gives the job in hand back, uncounted
    } else {
      await unregisterWorker(db, workerId).catch(() => {}); // the first error is the one to see
    }
    throw e;
  }
  await unregisterWorker(db, workerId);
  return summary(ran);
}
