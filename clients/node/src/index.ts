/**
 * jobq for Node.js: the client library of jobq, the PostgreSQL job queue extension.
 *
 * - Producer and operator calls ({@link enqueue}, {@link cancel}, {@link schedule}, ...)
 *   take any `pg` queryable, so a job commits with the caller's own transaction.
 * - {@link Worker} runs handlers with the whole worker protocol done for it.
 * - Server errors arrive as {@link JobqError} and its subclasses, by SQLSTATE.
 * - Connection strings are `postgresql://` URLs or libpq key=value pairs ({@link parseConninfo}).
 * - `testing.drain` runs the due jobs of some queues inline in a test, `testing.enqueued` lists
 *   the jobs waiting in a queue.
 *
 * @packageDocumentation
 */
export {
  enqueue, enqueueBatch, cancel, retry, pause, resume,
  registerWorker, heartbeat, unregisterWorker, stopCheckouts,
  checkout, complete, fail, completeMany, failMany, completeAndCheckout, failAndCheckout,
  acquireLock, releaseLock, lockHolder,
  schedule, unschedule, setRateLimit, reap, queueStats,
  results, enqueueGraph, emitEvent, checkpoint, snooze, awaitJobs, awaitEvent,
} from './client';
export type {
  Queryable, JobId, Duration, Timestamp, JobState, FailState, UniqueStrategy, OnConflict,
  EnqueueOptions, EnqueueBatchOptions, ScheduleOptions, RegisterOptions, CheckoutOptions,
  FailOptions, CompleteAndCheckoutOptions, FailAndCheckoutOptions, Job, JobResult, ReapResult, QueueStats,
} from './client';
export {
  JobqError, UniqueConflict, WorkerLost, InvalidArgument, PermissionDenied, Cancelled,
  RetryIn, retryIn,
} from './errors';
export { Worker } from './worker';
export {
  ConnectionStringError, CONNINFO_KEYWORDS, isConnectionUrl, parseConninfo, splitConninfo, toClientConfig,
} from './conninfo';
export type { ConninfoConfig, SslMode } from './conninfo';
export { Durable, Suspended, EventTimeout } from './durable';
export type { StepRunner } from './durable';
export type { Handler, JobContext, WorkerEvent, WorkerOptions, ConnectionConfig } from './worker';
/** Testing your own handlers: `testing.drain` and `testing.enqueued` (docs/testing.md). */
export * as testing from './testing';
