"""jobq: the Python client of the jobq PostgreSQL job queue.

- Producer and operator calls on your own psycopg connection or transaction:
  ``jobq.enqueue(conn, "mail", {"to": 1})`` (synchronous, :mod:`jobq.client`) and
  ``await jobq.aio.enqueue(aconn, ...)`` (asyncio, :mod:`jobq.aio`).
- A worker: :class:`jobq.Worker`, with handlers registered by job kind.
- Errors: :class:`jobq.JobqError` and its subclasses, one per SQLSTATE jobq raises.
- Testing your handlers: :func:`jobq.testing.drain` runs the due jobs of some queues inline,
  :func:`jobq.testing.enqueued` lists the jobs a test's code enqueued (:mod:`jobq.testing`).

Every guarantee (exactly once, uniqueness, limits, retries, reaping) lives in the database;
this package only sends the calls.
"""

from . import aio
from .client import (
    Target,
    acquire_lock,
    await_event,
    await_jobs,
    cancel,
    checkout,
    checkpoint,
    complete,
    complete_and_checkout,
    complete_many,
    emit_event,
    enqueue,
    enqueue_batch,
    enqueue_graph,
    fail,
    fail_and_checkout,
    fail_many,
    heartbeat,
    heartbeat_timeout,
    lock_holder,
    pause,
    queue_stats,
    reap,
    register_worker,
    release_lock,
    results,
    resume,
    retry,
    schedule,
    set_rate_limit,
    snooze,
    unregister_worker,
    stop_checkouts,
    unschedule,
)
from .errors import (
    Cancelled,
    InvalidArgument,
    JobqError,
    JobsFenced,
    PermissionDenied,
    RetryIn,
    UniqueConflict,
    WorkerLost,
)
from .durable import Durable, DurableAsync, EventTimeout, Suspended
from .types import Job, JobResult, QueueStats, ReapResult
from .worker import Handler, Worker
from . import testing

__version__ = "0.5.0"

__all__ = [
    "aio",
    "testing",
    "Target",
    "acquire_lock",
    "await_event",
    "await_jobs",
    "cancel",
    "checkout",
    "checkpoint",
    "complete",
    "complete_and_checkout",
    "complete_many",
    "emit_event",
    "enqueue",
    "enqueue_batch",
    "enqueue_graph",
    "fail",
    "fail_and_checkout",
    "fail_many",
    "heartbeat",
    "heartbeat_timeout",
    "lock_holder",
    "pause",
    "queue_stats",
    "reap",
    "register_worker",
    "release_lock",
    "results",
    "resume",
    "retry",
    "schedule",
    "set_rate_limit",
    "snooze",
    "unregister_worker",
    "stop_checkouts",
    "unschedule",
    "Cancelled",
    "InvalidArgument",
    "JobqError",
    "JobsFenced",
    "PermissionDenied",
    "RetryIn",
    "UniqueConflict",
    "WorkerLost",
    "Job",
    "JobResult",
    "QueueStats",
    "ReapResult",
    "Durable",
    "DurableAsync",
    "EventTimeout",
    "Suspended",
    "Worker",
    "Handler",
    "__version__",
]
