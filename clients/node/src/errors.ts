/**
 * The errors of the jobq client. Every error the server raises through a jobq call is
 * rethrown as a {@link JobqError} (or one of its subclasses, chosen by SQLSTATE), with the
 * driver's original error as `cause`.
 *
 * @packageDocumentation
 */

/** The fields of a server error that the `pg` driver reports (a `DatabaseError`). */
interface ServerErrorLike {
  message: string;
  code: string;
  severity?: string;
  detail?: string;
  hint?: string;
}

/**
 * Base class of every error a jobq call raises for a server error. `sqlstate` is the
 * five-character SQLSTATE (`"40001"`, `"JQ002"`, ...); codes without a class of their own
 * (a serialization failure under REPEATABLE READ, a cancelled statement, ...) arrive as a
 * plain `JobqError` carrying it.
 */
export class JobqError extends Error {
  /** The SQLSTATE the server reported, e.g. `"22023"`. */
  readonly sqlstate: string;
  /** The server's DETAIL line, when it sent one. */
  readonly detail: string | undefined;
  /** The server's HINT line, when it sent one. */
  readonly hint: string | undefined;

  /**
   * @param message - the server's message (jobq's own start with `jobq: `)
   * @param sqlstate - the SQLSTATE
   * @param options - DETAIL, HINT and the driver's error as `cause`
   */
  constructor(message: string, sqlstate: string, options: { detail?: string; hint?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.sqlstate = sqlstate;
    this.detail = options.detail;
    this.hint = options.hint;
  }
}

/**
 * SQLSTATE `23505`: `enqueue` with a `uniqueKey` that another job (or a named lock) holds,
 * and `onConflict: 'reject'` (the default; `'replace'` too when the holder is no longer
 * waiting). Not an error to retry: the job exists. The holder is parsed from the error's
 * DETAIL, which jobq writes as `existing job id: <id>` or
 * `held by the lock of worker <uuid>`.
 */
export class UniqueConflict extends JobqError {
  /** The id of the job holding the key; null when a named lock holds it. */
  readonly existingJobId: string | null;
  /** The worker whose named lock holds the key; null when a job holds it. */
  readonly lockWorkerId: string | null;

  /**
   * @param message - the server's message
   * @param options - DETAIL (parsed for the holder), HINT and the driver's error
   */
  constructor(message: string, options: { detail?: string; hint?: string; cause?: unknown } = {}) {
    super(message, '23505', options);
    const job = /existing job id: (-?\d+)/.exec(options.detail ?? '');
    const lock = /held by the lock of worker ([0-9a-f-]{36})/i.exec(options.detail ?? '');
    this.existingJobId = job ? job[1]! : null;
    this.lockWorkerId = lock ? lock[1]! : null;
  }
}

/**
 * SQLSTATE `JQ001`: the worker named by the call is unknown, unregistered, reaped, or its
 * heartbeat expired. Its jobs are (or will be) requeued and its locks are lost: stop working
 * on them and register again. The {@link Worker} does this by itself; it also uses this
 * class as the abort reason of the handlers whose jobs it dropped.
 */
export class WorkerLost extends JobqError {
  /**
   * @param message - the server's message
   * @param options - DETAIL, HINT and the driver's error
   */
  constructor(message: string, options: { detail?: string; hint?: string; cause?: unknown } = {}) {
    super(message, 'JQ001', options);
  }
}

/**
 * SQLSTATE `22023` (invalid_parameter_value: an empty queue, `maxAttempts < 1`, an unknown
 * strategy, a bad cron expression, ...) or `22004` (null_value_not_allowed: a NULL where a
 * value is required). A bug in the caller; the call changed nothing. `sqlstate` says which.
 */
export class InvalidArgument extends JobqError {}

/**
 * SQLSTATE `42501`: the login role lacks the jobq role the call needs (`jobq_producer`,
 * `jobq_worker`, `jobq_admin`, `jobq_reader`), or the call names a worker registered by
 * another role. A deployment error, not one to retry.
 */
export class PermissionDenied extends JobqError {
  /**
   * @param message - the server's message
   * @param options - DETAIL, HINT and the driver's error
   */
  constructor(message: string, options: { detail?: string; hint?: string; cause?: unknown } = {}) {
    super(message, '42501', options);
  }
}

/**
 * The `reason` of a job's `AbortSignal` when the job's cancellation was requested with
 * `cancel()` while a {@link Worker} ran it. A handler that
 * stops because of it (e.g. `job.signal.throwIfAborted()`) has its job failed with error
 * type `"Cancelled"`, which makes the job `cancelled`.
 */
export class Cancelled extends Error {
  /** The id of the job whose cancellation was requested. */
  readonly jobId: string;

  /** @param jobId - the job whose cancellation was requested */
  constructor(jobId: string) {
    super(`jobq: cancellation of job ${jobId} was requested`);
    this.name = 'Cancelled';
    this.jobId = jobId;
  }
}

/**
 * A handler's request to retry its job after a delay of its choosing (`jobq_fail`'s
 * `retry_in`) instead of the server's default backoff. Throw it or return it from a handler
 * (see {@link retryIn}); the job is failed with error type `"RetryIn"` and, if attempts
 * remain, runs again after `delayMs`.
 */
export class RetryIn extends Error {
  /** The delay before the next attempt, in milliseconds. */
  readonly delayMs: number;

  /**
   * @param delayMs - the delay before the next attempt, in milliseconds (>= 0)
   * @param message - recorded as the failed attempt's error message
   */
  constructor(delayMs: number, message?: string) {
    super(message ?? `retry in ${delayMs} ms`);
    this.name = 'RetryIn';
    this.delayMs = delayMs;
  }
}

/**
 * Makes a {@link RetryIn}: `throw retryIn(30_000)` or `return retryIn(30_000)` from a
 * handler retries its job in 30 seconds.
 *
 * @param delayMs - the delay before the next attempt, in milliseconds (>= 0)
 * @param message - recorded as the failed attempt's error message
 */
export function retryIn(delayMs: number, message?: string): RetryIn {
  return new RetryIn(delayMs, message);
}

function isServerError(e: unknown): e is ServerErrorLike {
  if (typeof e !== 'object' || e === null) return false;
  const code = (e as { code?: unknown }).code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && 'severity' in e;
}

/**
 * The jobq error for a driver error: a server error becomes the class of its SQLSTATE,
 * anything else (a connection error, a bug) is returned unchanged.
 *
 * @param e - what a `pg` query rejected with
 */
export function fromDriverError(e: unknown): unknown {
  if (e instanceof JobqError || !isServerError(e)) return e;
  const options: { detail?: string; hint?: string; cause?: unknown } = { cause: e };
  if (e.detail !== undefined) options.detail = e.detail;
  if (e.hint !== undefined) options.hint = e.hint;
  switch (e.code) {
    case '23505':
      return new UniqueConflict(e.message, options);
    case 'JQ001':
      return new WorkerLost(e.message, options);
    case '22023':
    case '22004':
      return new InvalidArgument(e.message, e.code, options);
    case '42501':
      return new PermissionDenied(e.message, options);
    default:
      return new JobqError(e.message, e.code, options);
  }
}
