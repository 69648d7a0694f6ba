/**
 * Durable steps for handlers: a function run once with its result kept as a checkpoint,
 * sleep, awaiting an event, fan-out and gather. Each is one or two jobq calls
 * (`jobq_checkpoint`, `jobq_snooze`, `jobq_await_event`, `jobq_await_jobs`, `jobq_results`);
 * every guarantee is the server's.
 *
 * A handler that uses them is replayed from the top on each attempt (after a crash, a
 * failure, or a suspension): what a step returned before comes back from the job's
 * checkpoints instead of running again. A call that suspends the job (`sleep`, an
 * `awaitEvent` or `gather` that must wait) throws {@link Suspended}; the worker then reports
 * nothing for the job, which the server makes ready again when its time, event or jobs come.
 *
 * ```ts
 * worker.handle('order', async (job) => {
 *   const steps = job.durable();
 *   const charge = await steps.step('charge', () => payments.charge(job.payload));
 *   const boxes = await steps.spawn('ship', 'shipments', [{ box: 1 }, { box: 2 }]);
 *   const shipped = await steps.gather(boxes);          // suspends until both finish
 *   const delivered = await steps.awaitEvent('order-7:delivered', 86_400_000);
 *   return { charge, shipped: shipped.length, delivered };
 * });
 * ```
 *
 * @packageDocumentation
 */
import {
  awaitEvent, awaitJobs, checkpoint, enqueueBatch, results, snooze,
  type EnqueueBatchOptions, type Job, type JobResult, type Queryable,
} from './client';
import { Cancelled } from './errors';

/** Runs `f` in one transaction on the worker's steps connection, one step at a time. */
export type StepRunner = <T>(f: (db: Queryable) => Promise<T>) => Promise<T>;

/**
 * The job was suspended (asleep, or blocked on an event or on other jobs): its handler stops
 * here and the worker reports nothing; the job runs again, from the top, when it is ready.
 * Let it propagate.
 */
export class Suspended extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'Suspended';
  }
}

/** {@link Durable.awaitEvent}'s timeout passed before the event came. */
export class EventTimeout extends Error {
  constructor(readonly event: string) {
    super(`jobq: event "${event}" did not come in time`);
    this.name = 'EventTimeout';
  }
}

/** The durable steps of one job: `job.durable()` in a handler run by a {@link Worker}. */
export class Durable {
  constructor(private readonly job: Job & { workerId: string }, private readonly run: StepRunner) {}

  private lost(): Cancelled {
    return new Cancelled(`jobq: job ${this.job.id} is no longer this worker's`);
  }

  private async keep<T>(name: string, value: T, db?: Queryable): Promise<T> {
    const write = (d: Queryable) => checkpoint(d, this.job.id, this.job.workerId, name, value);
    const ok = db ? await write(db) : await this.run(write);
    if (!ok) throw this.lost();
    this.job.checkpoints[name] = value;
    return value;
  }

  private async deadline(key: string, afterMs: number): Promise<Date> {
    const kept = this.job.checkpoints[key];
    if (typeof kept === 'string') return new Date(kept);
    const at = new Date(Date.now() + afterMs);
    await this.keep(key, at.toISOString());
    return at;
  }

  /**
   * `fn()`'s result, computed once: kept as the checkpoint `name` (JSON) and returned from it
   * on later attempts. `fn` runs again only if an attempt ended before its checkpoint
   * committed.
   */
  async step<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    if (name in this.job.checkpoints) return this.job.checkpoints[name] as T;
    return this.keep(name, await fn());
  }

  /**
   * Sleeps `ms` milliseconds durably: the job is snoozed until then ({@link Suspended}) and,
   * replayed, goes past this call once the time has come.
   */
  async sleep(name: string, ms: number): Promise<void> {
    const until = await this.deadline(`sleep:${name}`, ms);
    if (Date.now() >= until.getTime()) return;
    if (!(await this.run((db) => snooze(db, this.job.id, this.job.workerId, until)))) throw this.lost();
    throw new Suspended(`jobq: job ${this.job.id} sleeps until ${until.toISOString()}`);
  }

  /**
   * The payload of event `name` ({@link emitEvent}): at once if it was emitted, else the job
   * is blocked until it is ({@link Suspended}). With `timeoutMs` (counted from this step's
   * first call), {@link EventTimeout} once it has passed.
   */
  async awaitEvent(name: string, timeoutMs?: number): Promise<unknown> {
    const key = `event:${name}`;
    if (!(key in this.job.checkpoints)) {
      let left: number | undefined;
      if (timeoutMs !== undefined) {
        const deadline = await this.deadline(`await:${name}`, timeoutMs);
        left = deadline.getTime() - Date.now();
        if (left <= 0) throw new EventTimeout(name);
      }
      const [state, kept] = await this.run(async (db) => {
        const s = await awaitEvent(db, this.job.id, this.job.workerId, name, left);
        const { rows } = await db.query('SELECT checkpoints FROM jobq.jobs WHERE id = $1::bigint', [this.job.id]);
        return [s, (rows[0] as { checkpoints?: Record<string, unknown> } | undefined)?.checkpoints ?? {}] as const;
      });
      if (state === 'waiting') throw new Suspended(`jobq: job ${this.job.id} awaits event "${name}"`);
      if (state !== 'emitted') throw this.lost();
      Object.assign(this.job.checkpoints, kept);
    }
    return (this.job.checkpoints[key] as { payload?: unknown }).payload ?? null;
  }

  /**
   * Fan-out, once: one job per payload in `queue` ({@link enqueueBatch}'s options), their ids
   * kept as the checkpoint `name` in the same transaction.
   */
  async spawn(name: string, queue: string, payloads: unknown[], options: EnqueueBatchOptions = {}): Promise<string[]> {
    const kept = this.job.checkpoints[name];
    if (Array.isArray(kept)) return kept.map(String);
    return this.run(async (db) => this.keep(name, await enqueueBatch(db, queue, payloads, options), db));
  }

  /**
   * Fan-in: the results of jobs `ids` ({@link results}, in order) once every one is finished;
   * until then the job is blocked ({@link Suspended}).
   */
  async gather(ids: string[]): Promise<JobResult[]> {
    const [state, rows] = await this.run(async (db) =>
      [await awaitJobs(db, this.job.id, this.job.workerId, ids), await results(db, ids)] as const);
    if (state === 'waiting') throw new Suspended(`jobq: job ${this.job.id} awaits ${ids.length} jobs`);
    if (state !== 'finished') throw this.lost();
    return rows;
  }
}
