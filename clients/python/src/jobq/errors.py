"""The errors jobq calls raise, and the two exceptions a handler raises to steer its job.

Every error the database answers a jobq call with (one that carries a SQLSTATE) is raised as
a :class:`JobqError`, or as the subclass its SQLSTATE maps to:

=========  ===================================  ==========================================
SQLSTATE   class                                raised when
=========  ===================================  ==========================================
``23505``  :class:`UniqueConflict`              ``enqueue`` with a taken ``unique_key`` and
                                                ``on_conflict="reject"`` (the default)
``JQ001``  :class:`WorkerLost`                  the worker is unknown, unregistered, reaped
                                                or its heartbeat expired
``JQ002``  :class:`JobsFenced`                  a fused call's job in hand is no longer
                                                executing under the worker
``22023``  :class:`InvalidArgument`             a value out of its domain
``22004``  :class:`InvalidArgument`             a NULL where a value is required
``42501``  :class:`PermissionDenied`            the role lacks the jobq role for the call,
                                                or names another role's worker
other      :class:`JobqError`                   e.g. ``40001`` under REPEATABLE READ /
                                                SERIALIZABLE, ``57014`` a cancelled wait
=========  ===================================  ==========================================

The original psycopg exception is kept as ``__cause__`` and :attr:`JobqError.pg_error`.
Errors without a SQLSTATE (a lost connection, a closed connection) are psycopg's own
``OperationalError`` / ``InterfaceError`` and pass through unchanged.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import psycopg

__all__ = [
    "JobqError",
    "UniqueConflict",
    "WorkerLost",
    "JobsFenced",
    "InvalidArgument",
    "PermissionDenied",
    "RetryIn",
    "Cancelled",
    "from_psycopg",
]


class JobqError(Exception):
    """A jobq call refused by the database.

    Attributes:
        sqlstate: the five-character SQLSTATE (``"40001"``, ``"JQ001"``, ...).
        message: the server's primary message (jobq's own start with ``"jobq: "``).
        detail: the server's DETAIL, or None.
        hint: the server's HINT, or None.
        pg_error: the psycopg exception this was made from (also ``__cause__``), or None.
    """

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        detail: str | None = None,
        hint: str | None = None,
        pg_error: psycopg.Error | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint
        self.pg_error = pg_error
        self._parse()

    def _parse(self) -> None:
        """Reads what a subclass needs from the message and DETAIL."""

    def __str__(self) -> str:
        text = self.message
        if self.detail:
            text += f" (DETAIL: {self.detail})"
        return f"[{self.sqlstate}] {text}" if self.sqlstate else text


class UniqueConflict(JobqError):
    """SQLSTATE 23505: the job's ``unique_key`` is held already; nothing was enqueued.

    jobq names the holder in the error's DETAIL, parsed here:

    Attributes:
        job_id: the id of the job holding the key (``existing job id: <id>``), or None when
            a worker's named lock holds it.
        lock_worker_id: the worker whose named lock holds the key
            (``held by the lock of worker <uuid>``), or None when a job holds it.

    Not an error to retry: the job exists.
    """

    job_id: int | None
    lock_worker_id: uuid.UUID | None

    def _parse(self) -> None:
        self.job_id = None
        self.lock_worker_id = None
        detail = self.detail or ""
        m = re.search(r"existing job id: (-?\d+)", detail)
        if m:
            self.job_id = int(m.group(1))
        m = re.search(r"held by the lock of worker ([0-9a-fA-F-]{36})", detail)
        if m:
            self.lock_worker_id = uuid.UUID(m.group(1))


class WorkerLost(JobqError):
    """SQLSTATE JQ001: the worker is unknown, unregistered, reaped, or its heartbeat expired.

    Its jobs are (or will be) back in their queue; stop working on them and register again.
    :class:`jobq.Worker` does this by itself.
    """


class JobsFenced(JobqError):
    """SQLSTATE JQ002: a job handed to ``complete_and_checkout`` / ``fail_and_checkout`` is no
    longer executing under the worker (cancelled and finished, or returned); nothing was
    finished or checked out. Report the other jobs alone (``complete_many``/``fail_many``).

    Attributes:
        job_ids: the ids the server named, parsed from its message.
    """

    job_ids: list[int]

    def _parse(self) -> None:
        m = re.search(r"jobs \{([-\d,]*)\}", self.message)
        self.job_ids = [int(x) for x in m.group(1).split(",") if x] if m else []


class InvalidArgument(JobqError):
    """SQLSTATE 22023 (a value out of its domain) or 22004 (a NULL where a value is required).

    A bug in the caller: the call changed nothing; do not retry it as it is.
    """


class PermissionDenied(JobqError):
    """SQLSTATE 42501: the login role lacks the jobq role the call needs (``jobq_reader``,
    ``jobq_producer``, ``jobq_worker``, ``jobq_admin``), or names a worker registered by
    another role. A deployment error: grant the role."""


_CLASSES: dict[str, type[JobqError]] = {
    "23505": UniqueConflict,
    "JQ001": WorkerLost,
    "JQ002": JobsFenced,
    "22023": InvalidArgument,
    "22004": InvalidArgument,
    "42501": PermissionDenied,
}


def from_psycopg(error: psycopg.Error) -> JobqError:
    """The :class:`JobqError` (or subclass) for a psycopg error that carries a SQLSTATE."""
    diag = error.diag
    message = diag.message_primary or str(error).strip()
    cls = _CLASSES.get(error.sqlstate or "", JobqError)
    return cls(
        message,
        sqlstate=error.sqlstate,
        detail=diag.message_detail,
        hint=diag.message_hint,
        pg_error=error,
    )


class RetryIn(Exception):
    """Raised by a handler to fail its job and have it retried after ``delay``.

    ``delay`` is seconds (int or float) or a :class:`datetime.timedelta`; it becomes
    ``jobq_fail``'s ``retry_in``, so the server schedules the retry (when attempts remain;
    otherwise the job is ``dead``). The error recorded is ``{"type", "message"}`` of the
    exception this one was raised ``from`` if any, else ``{"type": "RetryIn", "message":
    message}``::

        except TimeoutError as e:
            raise jobq.RetryIn(30) from e
    """

    def __init__(self, delay: float | timedelta, message: str | None = None) -> None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        if seconds < 0:
            raise ValueError("RetryIn: delay must not be negative")
        super().__init__(message or f"retry in {seconds:g} s")
        self.delay = timedelta(seconds=seconds)
        self.message = message or f"retry in {seconds:g} s"


class Cancelled(Exception):
    """A job's cancellation was requested (``jobq_cancel``) while its handler ran.

    A synchronous handler raises it, usually through :meth:`jobq.Job.raise_if_cancelled`,
    when it sees :attr:`jobq.Job.cancelled`; the worker then fails the job, which becomes
    ``cancelled``. (An ``async def`` handler is cancelled as an asyncio task instead: it sees
    ``asyncio.CancelledError`` at its next ``await``.)
    """
