/**
 * The worker: runs handlers for jobs, `concurrency` at a time, with the whole protocol done
 * for you (heartbeats with `holding`, waiting inside the server, the one-commit
 * completion, cancellation, draining, re-registration, reconnection, pooled mode).
 *
 * @packageDocumentation
 */
import * as os from 'node:os';
import { Client } from 'pg';
import {
  checkout, completeAndCheckout, completeMany, fail, heartbeat, unregisterWorker, stopCheckouts,
  type Job, type Queryable,
} from './client';
import { Cancelled, JobqError, RetryIn, WorkerLost, fromDriverError } from './errors';
import { Durable, Suspended, type StepRunner } from './durable';
import { toClientConfig } from './conninfo';

/** A job as its handler sees it: the job's columns, plus what the handler needs to stop. */
export interface JobContext extends Job {
  /**
   * Aborted when the job's cancellation is requested (reason: a {@link Cancelled}) or when
   * the worker lost the job (reason: a {@link WorkerLost}: it was reaped, or its session
   * ended). Pass it on to what the handler awaits (`fetch(url, { signal })`), or check
   * `signal.aborted` / `signal.throwIfAborted()`.
   */
  signal: AbortSignal;
  /** The id of the worker registration running the job. */
  workerId: string;
  /** Durable steps for this job: step, sleep, awaitEvent, spawn, gather ({@link Durable}). */
  durable(): Durable;
}

/**
 * A job handler. Its return value (any JSON value; `undefined` is stored as NULL) becomes
 * the job's result. Throwing (or rejecting) fails the job with
 * `{"type": <the error's class name>, "message": <its message>}`; the job is retried after
 * the server's backoff while attempts remain. Throwing or returning a {@link RetryIn}
 * (see `retryIn(ms)`) retries it after that delay instead.
 */
export type Handler = (job: JobContext) => unknown;

/** One thing that happened in a worker, as given to {@link WorkerOptions.log}. */
export interface WorkerEvent {
  /**
   * What happened: `registered`, `reregistered`, `unregistered`, `completed`, `failed`,
   * `lost` (a completion the server refused: the job was no longer this worker's),
   * `dropped` (a job abandoned after `JQ001` or a lost session), `suspended` (a durable
   * step suspended the job: the server has it), `cancel_requested`,
   * `reaped` (`JQ001`), `disconnected`, `heartbeat_error`, `report_error`, `stopping`,
   * `stopped`.
   */
  event: string;
  /** The worker's current registration, when it has one. */
  workerId: string | null;
  /** Further fields of the event (`id`, `state`, `error`, `retryInMs`, ...). */
  [field: string]: unknown;
}

/** Options of a {@link Worker}. */
export interface WorkerOptions {
  /** The queues to take jobs from. Default: every queue. */
  queues?: string[] | null;
  /** How many jobs run at once in this process. Default 10. */
  concurrency?: number;
  /**
   * Behind a transaction-mode pooler (PgBouncer `pool_mode = transaction`): registers
   * without `bind_to_session` (a crash is noticed after `jobq.heartbeat_timeout`), keeps its
   * registration across a lost connection. Every statement is a single unnamed one either
   * way: no LISTEN, no session state, no named prepared statements. Default false.
   */
  pooled?: boolean;
  /** The worker's name in `jobq.workers`. Default `node-<host>-<pid>`. */
  name?: string;
  /** Free-form JSON stored with the registration. Default `{lang, pid, host}`. */
  metadata?: unknown;
  /** How long an idle checkout waits inside the server for a job, in ms. Default 5000. */
  waitMs?: number;
  /**
   * The heartbeat period, in ms. Default: a third of the server's
   * `jobq.heartbeat_timeout`, read at each registration. On the SQL edition, at most the
   * server's `jobq.reap_interval`: its heartbeats run the maintenance passes there.
   */
  heartbeatMs?: number;
  /** Handlers by kind (or by queue, for jobs without a kind); see {@link Worker.handle}. */
  handlers?: Record<string, Handler>;
  /** Stop gracefully on SIGTERM and SIGINT while `run()` runs. Default true. */
  handleSignals?: boolean;
  /**
   * Receives every {@link WorkerEvent}. Default: connection trouble and reporting errors
   * are written to stderr, nothing else.
   */
  log?: (event: WorkerEvent) => void;
}

/**
 * What a `pg.Client` is made from: a connection string (a `postgresql://` URL or libpq
 * key=value pairs, see {@link parseConninfo}) or a `pg.ClientConfig` object.
 */
export type ConnectionConfig = string | { [option: string]: unknown };

interface Running {
  job: Job;
  /** Made when the handler first reads `signal` (most never do: one object fewer per job). */
  controller: AbortController | null;
  /** Set by abort(): the reason the signal carries, now or when it is made. */
  aborted: { reason: unknown } | null;
  workerId: string;
  dropped: boolean;
  cancelRequested: boolean;
}

/** Aborts the run's signal (made already or not). */
function abort(r: Running, reason: unknown): void {
  if (r.aborted) return;
  r.aborted = { reason };
  r.controller?.abort(reason);
}

/** The run's signal, made on first use (already aborted if the run was). */
function signalOf(r: Running): AbortSignal {
  if (r.controller === null) {
    r.controller = new AbortController();
    if (r.aborted) r.controller.abort(r.aborted.reason);
  }
  return r.controller.signal;
}

/**
 * The {@link JobContext} a handler receives: the job's columns copied onto an instance whose
 * `signal` and `durable` live on the prototype. An object literal with a getter and a method
 * per job cost 9 µs where this costs under 1 (Node 20).
 */
interface Context extends Job {}
class Context implements JobContext {
  readonly workerId: string;
  readonly #run: Running;
  readonly #steps: StepRunner;

  constructor(run: Running, steps: StepRunner) {
    Object.assign(this, run.job);
    this.workerId = run.workerId;
    this.#run = run;
    this.#steps = steps;
  }

  get signal(): AbortSignal {
    return signalOf(this.#run);
  }

  durable(): Durable {
    return new Durable(this, this.#steps);
  }
}

const WARNINGS = new Set(['disconnected', 'heartbeat_error', 'report_error']);

function defaultLog(e: WorkerEvent): void {
  if (!WARNINGS.has(e.event)) return;
  const { event, ...fields } = e;
  process.stderr.write(`jobq worker: ${event} ${JSON.stringify(fields)}\n`);
}

/**
 * `client` as a {@link Queryable} whose statements are named: `pg` prepares a named statement
 * on its first use, so the server parses and plans each statement once per connection instead
 * of at every call. For the worker's own job connection, and not behind a pooler (where a
 * statement prepared in one server session could be run in another).
 */
function preparing(client: Client): Queryable {
  const names = new Map<string, string>();
  return {
    query(text: string, values?: unknown[]) {
      let name = names.get(text);
      if (name === undefined) {
        name = `jobq_${names.size + 1}`;
        names.set(text, name);
      }
      return client.query({ name, text, values });
    },
  };
}

/** The server said the connection is gone, or the socket did. */
function isConnectionError(e: unknown): boolean {
  if (e instanceof JobqError) return /^(08|57P)/.test(e.sqlstate);
  if (typeof e !== 'object' || e === null) return false;
  const code = (e as { code?: unknown }).code;
  if (typeof code === 'string') {
    if ('severity' in e) return /^(08|57P)/.test(code);
    if (/^E[A-Z]+$/.test(code)) return true; // ECONNREFUSED, ECONNRESET, EPIPE, ...
  }
  const message = String((e as { message?: unknown }).message ?? '');
  return /Connection terminated|connection timeout|Client was closed|connection error|not queryable|timeout expired/i.test(message);
}

function sqlstate(e: unknown): string | undefined {
  if (e instanceof JobqError) return e.sqlstate;
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/**
 * The server's jobq edition (`jobq_version()`): `'extension'` or `'sql'`. A server without
 * `jobq_version` (jobq before 0.4: `42883`) has the extension.
 */
async function serverEdition(db: Client): Promise<string> {
  try {
    const { rows } = await db.query('SELECT edition FROM jobq_version()');
    return (rows[0] as { edition: string }).edition;
  } catch (e) {
    if (sqlstate(e) === '42883') return 'extension';
    throw fromDriverError(e);
  }
}

/** `{type, message}` of what a handler threw. */
function describe(e: unknown): { type: string; message: string } {
  if (e instanceof Error) return { type: e.constructor?.name || e.name, message: e.message };
  return { type: typeof e, message: String(e) };
}

/**
 * A jobq worker: registers, takes jobs from its queues and runs the handler of each job's
 * kind (or, for a job without a kind, of its queue), up to `concurrency` at once.
 *
 * ```ts
 * const worker = new Worker(process.env.DATABASE_URL!, { queues: ['mail'], concurrency: 8 });
 * worker.handle('welcome', async (job) => sendMail(job.payload, { signal: job.signal }));
 * await worker.run(); // until SIGTERM / SIGINT / worker.stop()
 * ```
 *
 * - Idle, it waits inside the server (`jobq_checkout(..., wait)`), never polls.
 * - Results are reported in the call that takes the next jobs
 *   (`jobq_complete_and_checkout`, one commit for both); on `JQ002` (a job in hand was
 *   finished elsewhere) the others are completed with `jobq_complete_many`. While a
 *   checkout waits, results go out at once on the heartbeat connection.
 * - Heartbeats run on their own connection every `jobq.heartbeat_timeout / 3`, with
 *   `holding` = the jobs really in hand (NULL while a checkout is in flight, whose claims
 *   are not in hand yet); between two checkouts, once a heartbeat period has passed without
 *   a `holding` sent, or after a failed checkout, the checkout loop sends one itself, so a
 *   claim whose reply was lost goes back to the queue within max(heartbeat period, `waitMs`)
 *   even while the worker idles in waiting checkouts. Their cancellation requests abort the
 *   job's `signal`. A handler that then throws has its job failed, so it becomes
 *   `cancelled`; one that returns a result anyway has its job completed.
 * - A job whose kind (or queue) has no handler is failed with error type `"NoHandler"` and
 *   `discard`: it becomes `dead` at once, never retried (register the handler, then
 *   `retry()` it).
 * - On the SQL edition (`jobq_version()` says `sql`, learnt at the first registration:
 *   {@link Worker.serverEdition}) there is no background worker: each heartbeat runs the
 *   maintenance pass (reaping dead workers and requeueing their jobs, pruning, firing
 *   schedules) when the last one is older than `jobq.reap_interval`. There the worker beats
 *   every min(`heartbeat_timeout / 3` or `heartbeatMs`, `jobq.reap_interval`), the latter read
 *   at each registration (1 s when unset), so a database whose workers run needs no pg_cron.
 *   On the extension nothing changes.
 * - `stop()`, SIGTERM or SIGINT: takes no more jobs, lets those in flight finish, reports
 *   them, unregisters; `run()` then resolves.
 * - `JQ001` (the worker was reaped or unregistered): aborts the signals of the jobs in hand
 *   and drops them unreported (they run again elsewhere), registers again, goes on.
 * - A lost connection: reconnects with exponential backoff (1 s to 30 s). Unpooled, the
 *   registration was bound to the session, so its jobs are dropped and it registers again;
 *   pooled, it keeps its registration and its jobs.
 */
export class Worker {
  /** The connection as `pg` options (a keyword/value string parsed: src/conninfo.ts). */
  private readonly connection: { [option: string]: unknown };
  private readonly queues: string[] | null;
  private readonly concurrency: number;
  private readonly pooled: boolean;
  private readonly name: string;
  private readonly metadata: unknown;
  private readonly waitMs: number;
  private readonly heartbeatOverride: number | undefined;
  private readonly handleSignals: boolean;
  private readonly emit: (event: WorkerEvent) => void;
  private readonly handlers = new Map<string, Handler>();

  private running = false;
  private stopping = false;
  private finished: Promise<void> = Promise.resolve();
  private workerId: string | null = null;
  private reapedId: string | null = null;
  /** The period of the heartbeat timer. */
  private heartbeatMs = 10_000;
  /** The longest the checkout loop leaves `holding` unsent: the usual heartbeat period. */
  private holdingMs = 10_000;
  private edition: string | null = null;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private heartbeatBusy: Promise<void> | null = null;
  private mainPid: number | null = null;
  private cancelIssued = false;
  private side: Promise<Client> | null = null;
  /** Jobs whose handler runs, by id. */
  private readonly inFlight = new Map<string, Running>();
  /** Jobs whose checkout returned and whose end the server has not confirmed: `holding`. */
  private readonly inHand = new Set<string>();
  /** The steps connection (durable steps), and the chain that runs them one at a time. */
  private steps: Promise<Client> | null = null;
  private stepsQueue: Promise<unknown> = Promise.resolve();
  /** Results of finished handlers not reported yet: [id, JSON text or null]. */
  private pending: [string, string | null][] = [];
  /** Checkouts sent and not answered: their jobs may be claimed but not in `inHand`. */
  private checkouts = 0;
  /** The main connection is in a waiting checkout. */
  private waiting = false;
  /** When (performance.now()) the last heartbeat with a non-NULL `holding` was sent. */
  private holdingSentAt = 0;
  /** A checkout failed since the last `holding` sent: its claims may be lost. */
  private checkoutFailed = false;
  private flushing = false;
  /** Reports and flushes running on the side connection. */
  private readonly sideWork = new Set<Promise<void>>();
  private readonly stopHooks = new Set<() => void>();
  private woken = false;
  private wakeUp: (() => void) | null = null;

  /**
   * @param connection - a connection string, as a URL (`postgresql://user@host/db`) or as
   *   libpq key=value pairs (`host=/var/run/postgresql dbname=app user=app`), or a
   *   `pg.ClientConfig`; the worker opens two connections with it (jobs, and heartbeats)
   * @param options - see {@link WorkerOptions}
   * @throws {@link ConnectionStringError} at once for a malformed key=value string or one
   *   with an unknown keyword (see {@link parseConninfo})
   */
  constructor(connection: ConnectionConfig, options: WorkerOptions = {}) {
    this.connection = toClientConfig(connection);
    this.queues = options.queues && options.queues.length > 0 ? [...options.queues] : null;
    this.concurrency = options.concurrency ?? 10;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) throw new RangeError('jobq: concurrency must be an integer >= 1');
    this.pooled = options.pooled ?? false;
    this.name = options.name ?? `node-${os.hostname()}-${process.pid}`;
    this.metadata = options.metadata ?? { lang: 'node', pid: process.pid, host: os.hostname() };
    this.waitMs = options.waitMs ?? 5000;
    if (!(this.waitMs > 0 && this.waitMs <= 3_600_000)) throw new RangeError('jobq: waitMs must be more than 0 and at most one hour');
    this.heartbeatOverride = options.heartbeatMs;
    this.handleSignals = options.handleSignals ?? true;
    this.emit = options.log ?? defaultLog;
    for (const [kind, fn] of Object.entries(options.handlers ?? {})) this.handle(kind, fn);
  }

  /**
   * Registers the handler of a kind, or of a queue for the jobs without a kind. Returns the
   * worker, for chaining.
   *
   * @param kindOrQueue - the job kind (`enqueue(..., { kind })`), or the queue name
   * @param handler - the function that runs such a job
   */
  handle(kindOrQueue: string, handler: Handler): this {
    this.handlers.set(kindOrQueue, handler);
    return this;
  }

  /** The worker's current registration id; null before `run()` registers it and after it ends. */
  get id(): string | null {
    return this.workerId;
  }

  /**
   * The server's jobq edition, `'extension'` or `'sql'` (`jobq_version()`), learnt at the
   * first registration; null before it.
   */
  get serverEdition(): string | null {
    return this.edition;
  }

  /** How many handlers are running now. */
  get active(): number {
    return this.inFlight.size;
  }

  /**
   * Runs the worker until {@link Worker.stop} (or SIGTERM / SIGINT, with `handleSignals`),
   * then drains: the jobs in flight finish and are reported, the worker unregisters, and the
   * promise resolves. It rejects on an error that reconnecting cannot cure (a role without
   * `jobq_worker`, a bad option), after giving up the jobs in hand.
   */
  async run(): Promise<void> {
    if (this.running) throw new Error('jobq: this worker is already running');
    this.running = true;
    this.stopping = false;
    let done!: () => void;
    this.finished = new Promise((resolve) => { done = resolve; });
    const onSignal = (): void => { void this.stop(); };
    if (this.handleSignals) {
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
    }
    try {
      await this.serve();
    } finally {
      if (this.heartbeatTimer) clearTimeout(this.heartbeatTimer);
      this.heartbeatTimer = null;
      this.running = false;
      const side = this.side;
      this.side = null;
      if (side) await side.then((c) => c.end()).catch(() => {});
      const steps = this.steps;
      this.steps = null;
      if (steps) await steps.then((c) => c.end()).catch(() => {});
      if (this.handleSignals) {
        process.removeListener('SIGTERM', onSignal);
        process.removeListener('SIGINT', onSignal);
      }
      this.log('stopped');
      done();
    }
  }

  /**
   * Stops the worker gracefully: it takes no more jobs (its waiting checkout is ended by
   * `jobq_stop_checkouts` on the side connection, so no statement is cancelled and the server
   * logs no error, pooled or not), lets the jobs in flight finish, reports them and
   * unregisters. A job a checkout claimed as the stop came stays in hand, unstarted, and
   * unregistering returns it, its attempt not counted.
   * The promise resolves when `run()` has ended.
   */
  stop(): Promise<void> {
    if (this.running && !this.stopping) {
      this.stopping = true;
      this.log('stopping', { inFlight: this.inFlight.size });
      this.stopCheckouts();
      this.wake();
      for (const hook of [...this.stopHooks]) hook();
    }
    return this.finished;
  }

  // -------------------------------------------------------------------------------------
  // Connections

  private log(event: string, fields: Record<string, unknown> = {}): void {
    if (this.emit === defaultLog && !WARNINGS.has(event)) return; // nothing to build
    try {
      this.emit({ event, workerId: this.workerId, ...fields });
    } catch {
      // a logger's failure is not the worker's
    }
  }

  private newClient(suffix: string): Client {
    const client = new Client({
      application_name: `${this.name}${suffix}`.slice(0, 63),
      connectionTimeoutMillis: 10_000,
      ...this.connection,
    });
    client.on('error', () => {}); // a dead connection also fails its next query, handled there
    return client;
  }

  /**
   * Runs `f` in one transaction on the steps connection (durable steps, src/durable.ts), one
   * at a time, opened on demand and again after it was lost.
   */
  private readonly runSteps = <T>(f: (db: Queryable) => Promise<T>): Promise<T> => {
    const next = this.stepsQueue.then(async () => {
      if (!this.steps) {
        const client = this.newClient('-steps');
        this.steps = client.connect().then(() => client);
      }
      const pending = this.steps;
      let db: Client;
      try {
        db = await pending;
      } catch (e) {
        if (this.steps === pending) this.steps = null;
        throw fromDriverError(e);
      }
      try {
        await db.query('BEGIN');
        const value = await f(db);
        await db.query('COMMIT');
        return value;
      } catch (e) {
        await db.query('ROLLBACK').catch(() => {
          if (this.steps === pending) this.steps = null;
        });
        throw e;
      }
    });
    this.stepsQueue = next.catch(() => {});
    return next;
  };

  /** The side connection (heartbeats, reports while the main one waits), opened on demand. */
  private async withSide<T>(f: (db: Client) => Promise<T>): Promise<T> {
    if (!this.side) {
      const client = this.newClient('-hb');
      this.side = client.connect().then(() => client);
      this.side.catch(() => {});
    }
    const side = this.side;
    let client: Client;
    try {
      client = await side;
    } catch (e) {
      if (this.side === side) this.side = null;
      throw e;
    }
    try {
      return await f(client);
    } catch (e) {
      if (isConnectionError(e)) {
        if (this.side === side) this.side = null;
        void side.then((c) => c.end()).catch(() => {});
      }
      throw e;
    }
  }

  private track(work: Promise<void>): void {
    this.sideWork.add(work);
    void work.finally(() => this.sideWork.delete(work));
  }

  /**
   * Ends the main connection's waiting checkout, if any, with `jobq_stop_checkouts` on the side
   * connection: the server returns it with no job, and no later checkout of this registration
   * claims one. When the call fails the wait runs out by itself, within `waitMs`.
   */
  private stopCheckouts(): void {
    const wid = this.workerId;
    if (wid === null || this.reapedId === wid) return;
    this.track(this.withSide((db) => stopCheckouts(db, wid))
      .catch((e: unknown) => this.log('heartbeat_error', { error: String(e) })));
  }

  /**
   * Cancels the main connection's waiting checkout of a registration the server no longer
   * knows (`JQ001`; unpooled only: behind a pooler the cancel could reach another client's
   * session).
   */
  private cancelWait(): void {
    const pid = this.mainPid;
    if (this.pooled || !this.waiting || pid === null) return;
    this.cancelIssued = true;
    this.track(this.withSide(async (db) => { await db.query('SELECT pg_cancel_backend($1::int)', [pid]); })
      .catch((e: unknown) => this.log('heartbeat_error', { error: String(e) })));
  }

  /** A statement on the main connection, sent again once if a cancel meant for a wait hit it. */
  private async onMain<T>(f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (e) {
      if (sqlstate(e) !== '57014' || !this.cancelIssued) throw e;
      this.cancelIssued = false;
      return f();
    }
  }

  private wake(): void {
    this.woken = true;
    const f = this.wakeUp;
    this.wakeUp = null;
    f?.();
  }

  /** Resolves at the next wake() (a handler settled, a JQ001, stop()), or after `ms`. */
  private nextWake(ms?: number): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const timer = ms === undefined ? null : setTimeout(() => this.wake(), ms);
      this.wakeUp = () => {
        if (timer) clearTimeout(timer);
        this.woken = false;
        resolve();
      };
    });
  }

  /** Resolves after `ms`, or at once when stop() is called. */
  private sleepUnlessStopped(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const hook = (): void => {
        clearTimeout(timer);
        this.stopHooks.delete(hook);
        resolve();
      };
      const timer = setTimeout(hook, ms);
      this.stopHooks.add(hook);
    });
  }

  // -------------------------------------------------------------------------------------
  // The session loop

  private async serve(): Promise<void> {
    let backoff = 1000;
    for (;;) {
      const main = this.newClient('');
      try {
        await main.connect();
        if (this.workerId === null) await this.register(main, 'registered');
        backoff = 1000;
        await this.loop(main);
        await Promise.all([...this.sideWork]);
        if (this.workerId !== null) await this.unregister(main);
        return;
      } catch (e) {
        if (!isConnectionError(e)) {
          this.dropAll(e instanceof Error ? e : new Error(String(e)));
          if (this.workerId !== null) await this.unregister(main).catch(() => {});
          throw e;
        }
        this.log('disconnected', { error: String((e as Error).message ?? e), retryInMs: backoff });
        if (!this.pooled || this.stopping) {
          // Unpooled, the registration was bound to that session: the server has dropped it.
          // Stopping, nothing can be reported: the server returns the jobs when it reaps.
          this.dropAll(new WorkerLost('jobq: the connection to the server was lost'));
          this.workerId = null;
        }
        if (this.stopping) return;
        await this.sleepUnlessStopped(backoff);
        backoff = Math.min(backoff * 2, 30_000);
      } finally {
        this.mainPid = null;
        await main.end().catch(() => {});
      }
    }
  }

  private async register(main: Client, event: string): Promise<void> {
    const { rows } = await this.onMain(() => main.query(
      `WITH w AS MATERIALIZED (
         SELECT jobq_register_worker($1::text, $2::jsonb, bind_to_session => $3::boolean) AS id)
       SELECT w.id, pg_backend_pid() AS pid,
              (extract(epoch FROM coalesce(current_setting('jobq.heartbeat_timeout', true), '30s')::interval)
               * 1000)::float8 AS timeout_ms,
              (extract(epoch FROM coalesce(nullif(current_setting('jobq.reap_interval', true), ''), '1s')::interval)
               * 1000)::float8 AS reap_ms
         FROM w`,
      [this.name, JSON.stringify(this.metadata ?? {}), !this.pooled],
    ).catch((e: unknown) => { throw fromDriverError(e); }));
    const row = rows[0] as { id: string; pid: number; timeout_ms: number; reap_ms: number };
    if (this.edition === null) this.edition = await this.onMain(() => serverEdition(main));
    this.holdingMs = this.heartbeatMs = this.heartbeatOverride ?? Math.max(100, row.timeout_ms / 3);
    // The SQL edition has no background worker: the heartbeats run the passes, each when the
    // last one is older than jobq.reap_interval, so beat at least that often. (`holding` keeps
    // its own period: it is about heartbeat_timeout, not the passes.)
    if (this.edition === 'sql') this.heartbeatMs = Math.min(this.heartbeatMs, Math.max(100, row.reap_ms));
    this.mainPid = this.pooled ? null : row.pid;
    this.inHand.clear();
    this.pending = [];
    this.workerId = row.id;
    this.holdingSentAt = performance.now(); // a new registration holds nothing
    this.log(event);
    if (this.heartbeatTimer === null) this.heartbeatTimer = setTimeout(() => void this.beat(), this.heartbeatMs);
  }

  private async unregister(main: Client): Promise<void> {
    const wid = this.workerId!;
    try {
      const returned = await this.onMain(() => unregisterWorker(main, wid));
      this.log('unregistered', { returned });
    } catch (e) {
      if (!(e instanceof WorkerLost)) throw e;
    }
    this.workerId = null;
    this.inHand.clear();
  }

  /** Aborts every job in hand and forgets it, unreported. */
  private dropAll(reason: Error): void {
    for (const r of this.inFlight.values()) {
      r.dropped = true;
      this.log('dropped', { id: r.job.id });
      abort(r, reason);
    }
    this.inFlight.clear();
    this.inHand.clear();
    this.pending = [];
  }

  private async loop(main: Client): Promise<void> {
    const checkouts = this.pooled ? main : preparing(main); // the two checkout statements
    for (;;) {
      if (this.workerId !== null && this.reapedId === this.workerId) {
        this.dropAll(new WorkerLost('jobq: this worker was reaped or unregistered'));
        this.workerId = null;
        if (this.stopping) return;
        await this.register(main, 'reregistered');
        continue;
      }
      if (this.stopping) {
        if (this.inFlight.size > 0) {
          await this.nextWake();
          continue;
        }
        await Promise.all([...this.sideWork]);
        const done = this.pending.splice(0);
        if (done.length > 0) await this.onMain(() => this.completeBatch(main, this.workerId!, done));
        return;
      }
      const free = this.concurrency - this.inFlight.size;
      if (free <= 0) {
        await this.nextWake();
        continue;
      }
      if (this.checkoutFailed || performance.now() - this.holdingSentAt >= this.holdingMs) {
        await this.reconcile();
        if (this.stopping || this.reapedId === this.workerId) continue;
      }
      const jobs = this.pending.length > 0 ? await this.fusedCheckout(main, checkouts, free) : await this.waitingCheckout(checkouts, free);
      // Stopping: the jobs just claimed stay in hand, unstarted; unregistering returns them.
      if (this.stopping || this.reapedId === this.workerId) continue;
      for (const job of jobs) this.start(job);
    }
  }

  /**
   * A heartbeat with `holding` = the jobs in hand, sent by the checkout loop between two
   * checkouts: the periodic heartbeat sends NULL while a checkout is in flight, and with
   * free slots one nearly always is (a waiting one), so without this a claim whose reply
   * never reached the worker (pooled, a lost connection does not end the server session)
   * could stay `executing` under a live worker. Only this loop issues checkouts
   * (`beginCheckout`), so none is in flight now and `inHand` is complete.
   */
  private async reconcile(): Promise<void> {
    const wid = this.workerId;
    if (wid === null || this.checkouts > 0) return;
    if (await this.sendHeartbeat(wid, [...this.inHand])) this.checkoutFailed = false;
  }

  /** Waits for the heartbeat in flight, so that none reads `inHand` while a checkout runs. */
  private async beginCheckout(): Promise<void> {
    while (this.heartbeatBusy) await this.heartbeatBusy;
    this.checkouts += 1;
  }

  private endCheckout(jobs: Job[]): void {
    this.checkouts -= 1;
    for (const job of jobs) this.inHand.add(job.id);
  }

  /** Reports the finished jobs and takes the next ones in one call. */
  private async fusedCheckout(main: Client, db: Queryable, free: number): Promise<Job[]> {
    const wid = this.workerId!;
    const done = this.pending.splice(0);
    let jobs: Job[] = [];
    await this.beginCheckout();
    try {
      jobs = await completeAndCheckout(db, wid, done.map(([id]) => id), {
        // Every result null: no array to send.
        results: done.some(([, r]) => r !== null) ? done.map(([, r]) => (r === null ? null : JSON.parse(r))) : undefined,
        queues: this.queues,
        maxJobs: free,
      });
      for (const [id] of done) {
        this.inHand.delete(id);
        this.log('completed', { id });
      }
    } catch (e) {
      this.checkoutFailed = true; // its reply may be lost: the loop sends `holding` before the next one
      if (e instanceof WorkerLost) this.reapedId = wid;
      else if (sqlstate(e) === 'JQ002') await this.completeBatch(main, wid, done); // some were finished elsewhere
      else {
        if (this.pooled && isConnectionError(e)) this.pending.unshift(...done); // still ours: report later
        throw e;
      }
    } finally {
      this.endCheckout(jobs);
    }
    return jobs;
  }

  /** A checkout that waits inside the server, up to `waitMs`, for a job. */
  private async waitingCheckout(db: Queryable, free: number): Promise<Job[]> {
    const wid = this.workerId!;
    let jobs: Job[] = [];
    await this.beginCheckout();
    this.waiting = true;
    try {
      // A handler that finished meanwhile is reported by the next (fused) call instead.
      if (!this.stopping && this.reapedId !== wid && this.pending.length === 0) {
        jobs = await checkout(db, wid, { queues: this.queues, maxJobs: free, wait: this.waitMs });
      }
    } catch (e) {
      this.checkoutFailed = true; // its reply may be lost: the loop sends `holding` before the next one
      if (e instanceof WorkerLost) this.reapedId = wid;
      else if (sqlstate(e) === '57014') this.cancelIssued = false; // cancelled (stop, JQ001) or statement_timeout: nothing claimed
      else throw e;
    } finally {
      this.waiting = false;
      this.endCheckout(jobs);
    }
    return jobs;
  }

  /** jobq_complete_many for finished jobs; logs those the server refused as lost. */
  private async completeBatch(db: Queryable, wid: string, done: [string, string | null][]): Promise<void> {
    if (done.length === 0) return;
    const ok = new Set(await completeMany(db, wid, done.map(([id]) => id), done.map(([, r]) => (r === null ? null : JSON.parse(r)))));
    for (const [id] of done) {
      this.inHand.delete(id);
      this.log(ok.has(id) ? 'completed' : 'lost', { id });
    }
  }

  /** While the main connection waits, results go out on the side connection at once. */
  private flushSide(): void {
    if (this.flushing || !this.waiting || this.pending.length === 0) return;
    this.flushing = true;
    const work = (async () => {
      try {
        while (this.waiting && this.pending.length > 0 && this.workerId !== null) {
          const wid = this.workerId;
          const done = this.pending.splice(0);
          try {
            await this.withSide((db) => this.completeBatch(db, wid, done));
          } catch (e) {
            if (isConnectionError(e)) {
              if (this.workerId === wid) this.pending.unshift(...done); // the main connection reports them
            } else {
              for (const [id] of done) this.inHand.delete(id);
              this.log('report_error', { ids: done.map(([id]) => id), error: String(e) });
            }
            return;
          }
        }
      } finally {
        this.flushing = false;
        this.wake();
      }
    })();
    this.track(work);
  }

  // -------------------------------------------------------------------------------------
  // Running jobs

  private start(job: Job): void {
    const r: Running = { job, controller: null, aborted: null, workerId: this.workerId!, dropped: false, cancelRequested: false };
    this.inFlight.set(job.id, r);
    void this.execute(r);
  }

  private async execute(r: Running): Promise<void> {
    const { job } = r;
    const handler = this.handlers.get(job.kind ?? job.queue);
    let ok = false;
    let value: unknown;
    let error: unknown;
    if (!handler) {
      error = undefined;
    } else {
      try {
        value = await handler(new Context(r, this.runSteps));
        ok = !(value instanceof RetryIn);
        if (!ok) error = value;
      } catch (e) {
        error = e;
      }
    }
    if (r.dropped) return; // JQ001 or a lost session: the job runs again elsewhere
    this.inFlight.delete(job.id);
    if (error instanceof Suspended) {
      // The server has the job (snoozed, or blocked on an event or on other jobs): nothing to
      // report, and its slot is free.
      this.inHand.delete(job.id);
      this.log('suspended', { id: job.id, reason: error.message });
      this.wake();
      return;
    }
    let text: string | null = null;
    if (ok) {
      try {
        text = value === undefined ? null : (JSON.stringify(value) ?? null);
      } catch (e) {
        ok = false;
        error = e;
      }
    }
    if (ok) {
      this.pending.push([job.id, text]);
      this.flushSide();
    } else if (!handler) {
      this.report(r, { type: 'NoHandler', message: `jobq: no handler for ${job.kind === null ? `queue "${job.queue}"` : `kind "${job.kind}"`}` }, null, true);
    } else if (r.cancelRequested && r.aborted) {
      this.report(r, { type: 'Cancelled', message: describe(error).message }, null, false);
    } else if (error instanceof RetryIn) {
      this.report(r, describe(error), error.delayMs, false);
    } else {
      this.report(r, describe(error), null, false);
    }
    this.wake();
  }

  /** jobq_fail on the side connection, retried while the connection comes back. */
  private report(r: Running, error: { type: string; message: string }, retryInMs: number | null, discard: boolean): void {
    const id = r.job.id;
    const work = (async () => {
      for (let backoff = 1000; ; backoff = Math.min(backoff * 2, 30_000)) {
        if (this.workerId !== r.workerId) return; // the registration is gone, and the job with it
        try {
          const state = await this.withSide((db) => fail(db, id, r.workerId, { error, retryIn: retryInMs, discard }));
          this.log('failed', { id, state, error: error.message, type: error.type, ...(retryInMs === null ? {} : { retryInMs }) });
          break;
        } catch (e) {
          this.log('report_error', { id, error: String(e) });
          if (!isConnectionError(e) || this.stopping) break;
          await this.sleepUnlessStopped(backoff);
        }
      }
      this.inHand.delete(id);
    })();
    this.track(work);
  }

  // -------------------------------------------------------------------------------------
  // Heartbeats

  private async beat(): Promise<void> {
    const wid = this.workerId;
    if (wid !== null && wid !== this.reapedId) {
      let release!: () => void;
      this.heartbeatBusy = new Promise((resolve) => { release = resolve; });
      try {
        await this.sendHeartbeat(wid, this.checkouts > 0 ? null : [...this.inHand]);
      } finally {
        this.heartbeatBusy = null;
        release();
      }
    }
    if (this.running) this.heartbeatTimer = setTimeout(() => void this.beat(), this.heartbeatMs);
  }

  /**
   * jobq_heartbeat on the side connection; delivers the cancellation requests it returns.
   * JQ001 starts the re-registration, other errors are logged (a broken side connection is
   * opened again by the next call). Returns whether the server took it.
   */
  private async sendHeartbeat(wid: string, holding: string[] | null): Promise<boolean> {
    const sentAt = performance.now();
    try {
      const ids = await this.withSide((db) => heartbeat(db, wid, holding));
      if (holding !== null && this.workerId === wid) this.holdingSentAt = Math.max(this.holdingSentAt, sentAt);
      for (const id of ids) {
        const r = this.inFlight.get(id);
        if (r && r.workerId === wid && !r.cancelRequested) {
          r.cancelRequested = true;
          this.log('cancel_requested', { id });
          abort(r, new Cancelled(id));
        }
      }
      return true;
    } catch (e) {
      if (e instanceof WorkerLost) {
        if (this.workerId === wid) {
          this.reapedId = wid;
          this.log('reaped');
          this.cancelWait();
          this.wake();
        }
      } else {
        this.log('heartbeat_error', { error: String(e) });
      }
      return false;
    }
  }
}
