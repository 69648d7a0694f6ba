/**
 * jobq for Node.js: the client library of jobq, the PostgreSQL job queue extension.
 *
 * - Server errors arrive as {@link JobqError} and its subclasses, by SQLSTATE.
 *
 * @packageDocumentation
 */
export {
  JobqError, UniqueConflict, WorkerLost, InvalidArgument, PermissionDenied, Cancelled,
  RetryIn, retryIn,
} from './errors';
