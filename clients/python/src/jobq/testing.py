"""Testing your own handlers: run the due jobs of some queues inline, in the test
(:func:`drain`), look up the jobs code under test enqueued (:func:`enqueued`), and build a
job to call a handler with directly (:func:`make_job`).

Both go through jobq's SQL, never around it: :func:`drain` is a worker of its own that runs
one job at a time in the calling thread (``jobq_register_worker``, then ``jobq_checkout`` of
one job, the handler, ``jobq_complete`` or ``jobq_fail``, again until no job is due, then
``jobq_unregister_worker``), and :func:`enqueued` is one SELECT on ``jobq.live_jobs``::

    import jobq
    from jobq.testing import drain, enqueued

    def test_signup_sends_the_welcome_mail(conn):
        signup(conn, "ada@example.com")                      # the code under test enqueues
        [job] = enqueued(conn, "mail", kind="welcome", payload={"to": "ada@example.com"})
        drained = drain(conn, ["mail"], {"welcome": welcome})
        assert [d.state for d in drained.jobs] == ["completed"]

The calls run on the connection given, in its transaction (as every ``jobq.*`` function
does), so a test that enqueues and drains on one connection and rolls it back leaves nothing
behind; given a DSN, :func:`drain` opens an autocommit connection of its own. The guide is
``docs/testing.md``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Mapping, Sequence, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from . import _calls, aio, client
from .errors import RetryIn
from .types import Job
from .worker import Handler

__all__ = [
    "DEFAULT_MAX_JOBS",
    "DrainLimitReached",
    "Drained",
    "DrainedJob",
    "EnqueuedJob",
    "drain",
    "drain_async",
    "enqueued",
    "enqueued_async",
    "make_job",
]

#: How many jobs :func:`drain` runs at most unless told otherwise.
DEFAULT_MAX_JOBS = 1000

#: The name the drain's worker registers with (``jobq.workers.name``).
WORKER_NAME = "jobq.testing.drain"

T = TypeVar("T")


@dataclass(frozen=True)
class DrainedJob:
    """One job :func:`drain` ran, and what came of it.

    Attributes:
        job: the job as its handler got it (attempt, payload, ...).
        state: the job's state after the drain reported it: ``"completed"``; after a failure
            ``"ready"`` (to be retried after the backoff or ``RetryIn``'s delay),
            ``"dead"`` (attempts spent, or discarded) or ``"cancelled"``; None when the
            server answered that the job was no longer the drain's (e.g. the handler
            cancelled it elsewhere and it was finished meanwhile).
        result: what the handler returned (None after a failure).
        error: the error reported with ``jobq_fail`` (``{"type": ..., "message": ...}``, as
            a :class:`jobq.Worker` reports it), None when the handler returned.
        exception: the exception the handler raised, with its traceback, for the test to
            inspect or re-raise; None when it returned or had no handler.
    """

    job: Job
    state: str | None
    result: Any = None
    error: dict[str, Any] | None = None
    exception: BaseException | None = field(default=None, compare=False)

    @property
    def failed(self) -> bool:
        """True when the handler failed the job (or none was registered for it)."""
        return self.error is not None


@dataclass(frozen=True)
class Drained:
    """What :func:`drain` did: the jobs it ran, in the order it ran them."""

    jobs: list[DrainedJob]

    @property
    def completed(self) -> list[DrainedJob]:
        """The jobs whose handler returned (``jobq_complete``)."""
        return [d for d in self.jobs if d.error is None]

    @property
    def failed(self) -> list[DrainedJob]:
        """The jobs whose handler raised, or that had no handler (``jobq_fail``)."""
        return [d for d in self.jobs if d.error is not None]

    def __len__(self) -> int:
        return len(self.jobs)


class DrainLimitReached(Exception):
    """:func:`drain` ran ``max_jobs`` jobs and another was still due: most likely a handler
    that enqueues a job that enqueues one again, forever. The job it checked out last was not
    started: unregistering the drain's worker gave it back, its attempt not counted.

    Attributes:
        drained: the jobs it ran before stopping.
    """

    def __init__(self, max_jobs: int, drained: Drained) -> None:
        super().__init__(f"jobq.testing.drain ran {max_jobs} jobs and more are due (max_jobs={max_jobs})")
        self.max_jobs = max_jobs
        self.drained = drained


@dataclass(frozen=True)
class EnqueuedJob:
    """A job waiting to run, as :func:`enqueued` reads it from ``jobq.live_jobs``.

    Attributes:
        id, queue, kind, payload, priority: as enqueued.
        state: ``"ready"``, or ``"blocked"`` for a job waiting for the jobs it depends on
            (or for an event).
        run_at: when it is due.
        scheduled: True for a ready job not due yet (``run_at`` in the future: scheduled, or
            waiting for a retry's backoff).
        enqueued_at, attempt, max_attempts, unique_key, concurrency_key, depends_on: its
            columns.
    """

    id: int
    queue: str
    kind: str | None
    payload: Any
    priority: int
    state: str
    run_at: datetime
    scheduled: bool
    enqueued_at: datetime
    attempt: int
    max_attempts: int
    unique_key: str | None
    concurrency_key: str | None
    depends_on: list[int] | None


# -- make_job -------------------------------------------------------------------------------


def make_job(queue: str, payload: Any = None, *, kind: str | None = None, **fields: Any) -> Job:
    """A :class:`jobq.Job` for calling a handler directly in a unit test, as a checkout would
    hand it over: id 0 (no job has it), attempt 1 of 25, priority 0, due, enqueued and started
    now, no keys, no checkpoints; ``payload`` None is ``{}``, the server's default. Any other
    field of :class:`jobq.Job` may be given by name (``attempt=3``, ``last_error={...}``,
    ``checkpoints={...}``)::

        job = make_job("mail", {"to": "ada@example.com"}, kind="welcome", attempt=3)
        assert welcome(job) == {"sent": True}

    ``job.cancel_event.set()`` makes :attr:`jobq.Job.cancelled` True, for a test of a handler
    that stops; ``job.durable()`` raises, as in :func:`drain`.
    """
    now = datetime.now(timezone.utc)
    args: dict[str, Any] = {
        "id": 0,
        "queue": queue,
        "kind": kind,
        "payload": {} if payload is None else payload,
        "priority": 0,
        "attempt": 1,
        "max_attempts": 25,
        "run_at": now,
        "enqueued_at": now,
        "started_at": now,
    }
    args.update(fields)
    return Job(**args)


# -- enqueued -------------------------------------------------------------------------------

_ENQUEUED_SQL = (
    "SELECT id, queue, kind, payload, priority, state, run_at,"
    " state = 'ready' AND run_at > clock_timestamp() AS scheduled,"
    " enqueued_at, attempt, max_attempts, unique_key, concurrency_key, depends_on"
    " FROM jobq.live_jobs"
    " WHERE queue = %s AND state IN ('ready', 'blocked')"
    " AND (%s::text IS NULL OR kind = %s::text)"
    " AND (%s::jsonb IS NULL OR payload @> %s::jsonb)"
    " ORDER BY id"
)


def _enqueued_call(queue: str, kind: str | None, payload: Any) -> _calls.Call[list[EnqueuedJob]]:
    contains = None if payload is None else Jsonb(payload)
    return _calls.Call(
        _ENQUEUED_SQL,
        (queue, kind, kind, contains, contains),
        lambda rows: [EnqueuedJob(**row) for row in rows],
        dict_row,
    )


def enqueued(conn: client.Target | str, queue: str, *, kind: str | None = None, payload: Any = None) -> list[EnqueuedJob]:
    """The jobs of ``queue`` waiting to run (state ``ready``, due or scheduled, or
    ``blocked``), oldest first: what a test asserts its code enqueued.

    Args:
        conn: a connection (or cursor), read in its transaction, so a job enqueued there and
            not committed is found; or a DSN (a connection of its own, closed after).
        queue: the queue.
        kind: only jobs of this kind.
        payload: only jobs whose payload contains this JSON (``payload @> payload``): a
            subset of keys, ``{"to": "ada@example.com"}``, matches a payload with more.

    One SELECT on ``jobq.live_jobs`` (``jobq_reader``); it changes nothing.
    """
    call = _enqueued_call(queue, kind, payload)
    if isinstance(conn, str):
        with psycopg.connect(conn, autocommit=True) as own:
            return client.execute(own, call)
    return client.execute(conn, call)


async def enqueued_async(
    aconn: aio.AsyncTarget | str, queue: str, *, kind: str | None = None, payload: Any = None
) -> list[EnqueuedJob]:
    """:func:`enqueued` on an ``AsyncConnection`` (or ``AsyncCursor``, or a DSN)."""
    call = _enqueued_call(queue, kind, payload)
    if isinstance(aconn, str):
        async with await psycopg.AsyncConnection.connect(aconn, autocommit=True) as own:
            return await aio.execute(own, call)
    return await aio.execute(aconn, call)


# -- drain ----------------------------------------------------------------------------------


def _queues(queues: str | Sequence[str]) -> list[str]:
    listed = [queues] if isinstance(queues, str) else list(queues)
    if not listed:
        raise ValueError("drain needs at least one queue")
    return listed


def _check_max(max_jobs: int) -> None:
    if max_jobs < 1:
        raise ValueError("max_jobs must be at least 1")


def _metadata() -> dict[str, Any]:
    return {"lang": "python", "pid": os.getpid(), "testing": True}


class _Outcome:
    """What a handler's run comes to: the arguments of ``jobq_complete`` or ``jobq_fail``."""

    __slots__ = ("result", "error", "retry_in", "discard", "exception")

    def __init__(self) -> None:
        self.result: Any = None
        self.error: dict[str, Any] | None = None
        self.retry_in: Any = None
        self.discard = False
        self.exception: BaseException | None = None


def _no_handler(job: Job) -> _Outcome:
    what = f"kind {job.kind!r}" if job.kind is not None else f"queue {job.queue!r} (the job has no kind)"
    out = _Outcome()
    out.error = {"type": "NoHandler", "message": f"no handler for {what}"}
    out.discard = True
    return out


def _returned(result: Any) -> _Outcome:
    """A handler's return value, failed as the worker fails it when it is not JSON."""
    out = _Outcome()
    if result is not None:
        try:
            json.dumps(result)
        except (TypeError, ValueError) as e:
            out.error = {"type": type(e).__name__, "message": f"the handler's result is not JSON: {e}"}
            out.exception = e
            return out
    out.result = result
    return out


def _raised(e: Exception) -> _Outcome:
    """A handler's exception, described as :class:`jobq.Worker` describes it."""
    out = _Outcome()
    out.exception = e
    if isinstance(e, RetryIn):
        cause = e.__cause__
        out.error = (
            {"type": type(cause).__name__, "message": str(cause)}
            if cause is not None
            else {"type": "RetryIn", "message": e.message}
        )
        out.retry_in = e.delay
    else:
        out.error = {"type": type(e).__name__, "message": str(e)}
    return out


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _InEventLoop(TypeError):
    def __init__(self) -> None:
        super().__init__(
            "jobq.testing.drain cannot run an async handler inside a running event loop:"
            " use `await jobq.testing.drain_async(...)`"
        )


def _run_sync(fn: Handler, job: Job) -> _Outcome:
    if inspect.iscoroutinefunction(fn) and _in_event_loop():
        raise _InEventLoop()
    try:
        result = fn(job)
        if inspect.isawaitable(result):
            if _in_event_loop():
                if inspect.iscoroutine(result):
                    result.close()  # never to be awaited: no "was never awaited" warning
                raise _InEventLoop()
            result = asyncio.run(_awaited(result))
    except _InEventLoop:
        raise
    except Exception as e:
        return _raised(e)
    return _returned(result)


async def _awaited(result: Awaitable[T]) -> T:
    return await result


async def _run_async(fn: Handler, job: Job) -> _Outcome:
    try:
        if inspect.iscoroutinefunction(fn):
            result = await fn(job)
        else:
            # A plain function runs in a thread, as in jobq.Worker.
            result = await asyncio.to_thread(fn, job)
            if inspect.isawaitable(result):
                result = await result
    except Exception as e:
        return _raised(e)
    return _returned(result)


def _report(job: Job, state: str | None, out: _Outcome) -> DrainedJob:
    return DrainedJob(job=job, state=state, result=out.result, error=out.error, exception=out.exception)


def drain(
    conn: client.Target | str,
    queues: str | Sequence[str],
    handlers: Mapping[str, Handler],
    *,
    max_jobs: int = DEFAULT_MAX_JOBS,
) -> Drained:
    """Runs every due job of ``queues`` with ``handlers``, one at a time in the calling
    thread, until none is due, and returns what came of each.

    It is a worker of its own, through jobq's SQL: it registers (``jobq_register_worker``,
    named ``jobq.testing.drain``, not bound to the session), checks out one job
    (``jobq_checkout``), runs its handler (found by the job's kind, or by its queue for a job
    without a kind, as in :class:`jobq.Worker`), reports it (``jobq_complete`` with the
    result, or ``jobq_fail`` with the error: ``RetryIn``'s delay, ``NoHandler`` discarded),
    heartbeats, and checks out again, so that a job a handler enqueues (due now) is drained
    too; then it unregisters. Jobs not due yet (``run_at`` in the future, a retry's backoff)
    and blocked jobs are left alone, as every worker leaves them.

    Args:
        conn: a connection (or cursor): the calls run in its transaction, so jobs enqueued in
            it and not committed are drained too, and nothing is committed (a connection in
            autocommit mode commits each call). Or a DSN: an autocommit connection of its
            own, which sees committed jobs only.
        queues: the queues to drain (a name, or a list of names).
        handlers: handlers by kind (or queue), as ``jobq.Worker(handlers=...)`` takes them:
            ``def`` handlers run in this thread, ``async def`` ones in ``asyncio.run`` (from
            inside an event loop, use :func:`drain_async`).
        max_jobs: how many jobs to run at most. When another is due after that, it raises
            :class:`DrainLimitReached` (the job is given back, its attempt not counted).

    A handler's exception does not propagate: the job fails, and the :class:`DrainedJob`
    keeps the exception. Durable steps (``job.durable()``) need a :class:`jobq.Worker`: here
    they raise ``RuntimeError``, which fails the job.
    """
    names = _queues(queues)
    _check_max(max_jobs)
    if isinstance(conn, str):
        with psycopg.connect(conn, autocommit=True) as own:
            return _drain(own, names, handlers, max_jobs)
    return _drain(conn, names, handlers, max_jobs)


def _drain(conn: client.Target, queues: list[str], handlers: Mapping[str, Handler], max_jobs: int) -> Drained:
    worker = client.register_worker(conn, WORKER_NAME, _metadata())
    ran: list[DrainedJob] = []
    try:
        while True:
            if ran:
                client.heartbeat(conn, worker)  # a long drain outlives jobq.heartbeat_timeout
            jobs = client.checkout(conn, worker, queues, 1)
            if not jobs:
                break
            if len(ran) == max_jobs:
                raise DrainLimitReached(max_jobs, Drained(ran))
            job = jobs[0]
            fn = handlers.get(job.kind if job.kind is not None else job.queue)
            out = _no_handler(job) if fn is None else _run_sync(fn, job)
            if out.error is None:
                state = "completed" if client.complete(conn, job.id, worker, out.result) else None
            else:
                state = client.fail(conn, job.id, worker, out.error, retry_in=out.retry_in, discard=out.discard or None)
            ran.append(_report(job, state, out))
    except DrainLimitReached:
        client.unregister_worker(conn, worker)  # gives the job in hand back, uncounted
        raise
    except BaseException:
        try:
            client.unregister_worker(conn, worker)
        except Exception:
            pass  # e.g. the transaction is aborted: the first error is the one to see
        raise
    client.unregister_worker(conn, worker)
    return Drained(ran)


async def drain_async(
    aconn: aio.AsyncTarget | str,
    queues: str | Sequence[str],
    handlers: Mapping[str, Handler],
    *,
    max_jobs: int = DEFAULT_MAX_JOBS,
) -> Drained:
    """:func:`drain` on an ``AsyncConnection`` (or ``AsyncCursor``, or a DSN), for async
    tests: ``async def`` handlers are awaited, ``def`` handlers run in a thread
    (``asyncio.to_thread``), one job at a time."""
    names = _queues(queues)
    _check_max(max_jobs)
    if isinstance(aconn, str):
        async with await psycopg.AsyncConnection.connect(aconn, autocommit=True) as own:
            return await _drain_async(own, names, handlers, max_jobs)
    return await _drain_async(aconn, names, handlers, max_jobs)


async def _drain_async(
    conn: aio.AsyncTarget, queues: list[str], handlers: Mapping[str, Handler], max_jobs: int
) -> Drained:
    worker = await aio.register_worker(conn, WORKER_NAME, _metadata())
    ran: list[DrainedJob] = []
    try:
        while True:
            if ran:
                await aio.heartbeat(conn, worker)
            jobs = await aio.checkout(conn, worker, queues, 1)
            if not jobs:
                break
            if len(ran) == max_jobs:
                raise DrainLimitReached(max_jobs, Drained(ran))
            job = jobs[0]
            fn = handlers.get(job.kind if job.kind is not None else job.queue)
            out = _no_handler(job) if fn is None else await _run_async(fn, job)
            if out.error is None:
                state = "completed" if await aio.complete(conn, job.id, worker, out.result) else None
            else:
                state = await aio.fail(conn, job.id, worker, out.error, retry_in=out.retry_in, discard=out.discard or None)
            ran.append(_report(job, state, out))
    except DrainLimitReached:
        await aio.unregister_worker(conn, worker)
        raise
    except BaseException:
        try:
            await aio.unregister_worker(conn, worker)
        except Exception:
            pass
        raise
    await aio.unregister_worker(conn, worker)
    return Drained(ran)

