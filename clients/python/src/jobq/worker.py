"""The worker: runs handlers for the jobs of some queues, N at a time, with everything the jobq
protocol asks of a worker done for you.

A whole worker::

    import jobq

    worker = jobq.Worker("postgresql://app@db/app", queues=["mail"], concurrency=8)

    @worker.handler("welcome_mail")           # jobs of kind "welcome_mail"
    def welcome(job: jobq.Job) -> dict:
        send(job.payload["to"])
        return {"sent": True}                 # the job's result

    worker.run()                              # until SIGTERM / SIGINT / worker.stop()

What it does, all of it through the SQL functions (no guarantee is kept client-side):

- Registers (``jobq_register_worker``; with ``bind_to_session`` unless ``pooled``) and reads
  ``jobq.heartbeat_timeout`` from the server. At its first registration it learns the
  server's edition (``jobq_version()``; :attr:`Worker.server_edition`).
- Keeps up to ``concurrency`` jobs in flight: plain ``def`` handlers run in a thread pool,
  ``async def`` handlers as asyncio tasks, all in the process that calls :meth:`Worker.run`.
- Checks out as many jobs as it has free slots. When it has finished jobs to report it does
  both in one call and one commit (``jobq_complete_and_checkout``); if a job in hand was
  finished elsewhere meanwhile (``JQ002``) it reports the others with ``jobq_complete_many``.
  When there is nothing to do it waits inside the server (``jobq_checkout(..., wait)``),
  never polling; jobs that finish meanwhile are reported by a second connection
  (``jobq_complete_many``), and failures at once (``jobq_fail``).
- Heartbeats on a third connection every ``heartbeat_timeout / 3`` with ``holding`` = the ids
  really in flight (none while a checkout is on its way). Since an idle worker is nearly
  always inside a waiting checkout, the checkout loop itself sends the list between two
  checkouts when none has been sent for a heartbeat interval, and after a failed checkout:
  a claim whose reply never reached the worker goes back to the queue within
  ``max(heartbeat interval, wait)``. It delivers cancellation requests to their handlers:
  :attr:`jobq.Job.cancelled` turns True, and an ``async def`` handler's task is cancelled.
  A cancelled handler that raises fails its job, which becomes ``cancelled``.
- On the SQL edition (``jobq_version()`` says ``sql``) there is no background worker: each
  heartbeat runs the server's maintenance pass (reaping dead workers and requeueing their
  jobs, pruning, firing schedules) when the last one is older than ``jobq.reap_interval``. So
  there the worker heartbeats every min(``heartbeat_timeout / 3`` or ``heartbeat_interval``,
  ``jobq.reap_interval``), ``jobq.reap_interval`` read at each registration (1 s when unset),
  and a database whose workers run is served without pg_cron. On the extension nothing
  changes.
- On ``JQ001`` (this worker was reaped or unregistered) it drops the jobs in hand without
  reporting them (their handlers see :attr:`~jobq.Job.cancelled`; what they return is
  ignored: the jobs run again), registers again, and goes on.
- On a lost connection it reconnects with exponential backoff (1 s .. 30 s); when bound to
  its session (not ``pooled``) the server already counts it dead, so it drops its jobs and
  registers again.
- On SIGTERM / SIGINT (when :meth:`run` is called from the main thread) or :meth:`stop`, it
  takes no more jobs: it ends its waiting checkout with ``jobq_stop_checkouts`` on its
  heartbeat connection (no statement is cancelled, so the server logs no error, pooled or
  not); jobs a checkout claimed as the stop came are held unstarted, and unregistering
  returns them, their attempt not counted. It lets the jobs in flight finish, reports them,
  unregisters and returns.

A handler's return value is the job's result (JSON). An exception fails the job with
``{"type": <exception class name>, "message": str(exception)}`` and the server's backoff;
:class:`jobq.RetryIn` asks for a delay of its own. A job whose kind (or, for a job with no
kind, queue) has no handler fails with type ``"NoHandler"`` and is discarded (``dead``, not
retried).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import signal
import socket
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Awaitable, Callable, Mapping, Sequence, TypeVar, Union

import psycopg

from . import _calls, aio
from .durable import Suspended
from .errors import JobqError, JobsFenced, RetryIn, WorkerLost
from .types import Job

__all__ = ["Worker", "Handler"]

#: A handler: a function or coroutine function taking the :class:`~jobq.Job` and returning
#: its JSON-serialisable result.
Handler = Union[Callable[[Job], Any], Callable[[Job], Awaitable[Any]]]
H = TypeVar("H", bound=Callable[..., Any])

log = logging.getLogger("jobq.worker")

_MAX_BACKOFF = 30.0


class _Slot:
    """A job in hand: checked out under registration ``wid`` and not yet reported."""

    __slots__ = ("job", "wid", "task", "inner", "cancel_requested", "dropped")

    def __init__(self, job: Job, wid: uuid.UUID) -> None:
        self.job = job
        self.wid = wid
        self.task: asyncio.Task[None] | None = None  # the job's task, which runs its handler
        self.inner: asyncio.Future[Any] | None = None  # what a cancel cancels: the job's task (async) or thread future
        self.cancel_requested = False
        self.dropped = False


class _Failure:
    __slots__ = ("slot", "error", "retry_in", "discard")

    def __init__(self, slot: _Slot, error: dict[str, str], retry_in: timedelta | None, discard: bool) -> None:
        self.slot = slot
        self.error = error
        self.retry_in = retry_in
        self.discard = discard


def _lost(error: BaseException, conn: psycopg.AsyncConnection[Any] | None) -> bool:
    """Whether ``error`` means the connection is gone (so: reconnect), not a refused call."""
    if conn is not None and (conn.closed or conn.broken):
        return True
    pg = error.pg_error if isinstance(error, JobqError) else error
    return isinstance(pg, (psycopg.OperationalError, psycopg.InterfaceError)) and (
        conn is None or pg.sqlstate is None or pg.sqlstate.startswith(("08", "57P"))
    )


class Worker:
    """Runs the jobs of ``queues`` through the handlers registered for their kinds.

    Args:
        dsn: libpq connection string of a role granted ``jobq_worker``.
        queues: the queues to take jobs from; None: every queue.
        concurrency: jobs in flight at once (threads for ``def`` handlers, tasks for
            ``async def`` ones).
        name: the worker's name in ``jobq.workers`` (default ``py-<host>-<pid>``).
        metadata: extra JSON for ``jobq.workers.metadata`` (``lang``, ``pid`` and ``host``
            are added).
        pooled: behind a transaction-mode pooler (PgBouncer ``pool_mode = transaction``): no
            ``bind_to_session``, no LISTEN, no session state, no server-side prepared
            statements (``prepare_threshold=None``); liveness is the heartbeats alone.
        wait: how long an idle checkout waits inside the server, seconds (at most 3600).
        heartbeat_interval: seconds between heartbeats; default the server's
            ``jobq.heartbeat_timeout`` / 3, read at each registration. On the SQL edition,
            at most the server's ``jobq.reap_interval``: its heartbeats run the passes.
        handlers: handlers by kind, as :meth:`add_handler` takes them.
        connect_kwargs: more keyword arguments for ``psycopg.AsyncConnection.connect``.
        handle_signals: stop gracefully on SIGTERM and SIGINT when :meth:`run` /
            :meth:`run_async` runs in the main thread.
    """

    def __init__(
        self,
        dsn: str,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 10,
        name: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        pooled: bool = False,
        wait: float = 5.0,
        heartbeat_interval: float | None = None,
        handlers: Mapping[str, Handler] | None = None,
        connect_kwargs: Mapping[str, Any] | None = None,
        handle_signals: bool = True,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 0 < wait <= 3600:
            raise ValueError("wait must be more than 0 and at most 3600 seconds")
        self.dsn = dsn
        self.queues = list(queues) if queues is not None else None
        self.concurrency = concurrency
        self.name = name or f"py-{socket.gethostname()}-{os.getpid()}"
        self.metadata = {"lang": "python", "pid": os.getpid(), "host": socket.gethostname(), **(metadata or {})}
        self.pooled = pooled
        self.wait = wait
        self.heartbeat_interval = heartbeat_interval
        self.connect_kwargs = dict(connect_kwargs or {})
        self.handle_signals = handle_signals
        self._handlers: dict[str, tuple[Handler, bool]] = {}  # by kind: (handler, is a coroutine function)
        for kind, fn in (handlers or {}).items():
            self.add_handler(kind, fn)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = threading.Event()
        # The current registration. Each registration is its own UUID object (the one
        # jobq_register_worker returned), so registrations are compared with ``is``.
        self._wid: uuid.UUID | None = None
        self._edition: str | None = None  # jobq_version()'s, learnt at the first registration

    # -- public API --------------------------------------------------------------------

    def handler(self, name: str) -> Callable[[H], H]:
        """Decorator: registers the function as the handler of jobs of kind ``name`` (and of
        jobs with no kind in queue ``name``)::

            @worker.handler("resize")
            def resize(job: jobq.Job) -> dict: ...
        """

        def register(fn: H) -> H:
            self.add_handler(name, fn)
            return fn

        return register

    def add_handler(self, name: str, fn: Handler) -> None:
        """Registers ``fn`` for jobs of kind ``name``; a job whose kind is NULL is routed by its
        queue name instead. A plain function runs in the worker's thread pool, a coroutine
        function as an asyncio task; either takes the :class:`~jobq.Job` and returns its
        result."""
        self._handlers[name] = (fn, inspect.iscoroutinefunction(fn))

    @property
    def worker_id(self) -> uuid.UUID | None:
        """The current registration's worker id (it changes when the worker registers again),
        or None when not registered."""
        return self._wid

    @property
    def server_edition(self) -> str | None:
        """The server's jobq edition, ``"extension"`` or ``"sql"`` (``jobq_version()``; a
        server without it has the extension), learnt at the first registration; None before
        it."""
        return self._edition

    def run(self) -> None:
        """Runs the worker until :meth:`stop`, SIGTERM or SIGINT, then drains and returns.

        Blocks the calling thread (it runs its own asyncio event loop). Raises what a
        deployment error raises, e.g. :class:`jobq.PermissionDenied` when the role may not
        register a worker."""
        asyncio.run(self.run_async())

    def stop(self) -> None:
        """Asks the worker to stop: it takes no more jobs, finishes and reports those in
        flight, unregisters, and :meth:`run` returns. Safe from any thread and from a signal
        handler; returns at once."""
        self._stop_requested.set()
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._begin_stop()
        else:
            try:
                loop.call_soon_threadsafe(self._begin_stop)
            except RuntimeError:
                pass  # the loop has closed: the worker has stopped already

    async def run_async(self) -> None:
        """:meth:`run` as a coroutine, for an application that has its event loop already."""
        self._stopping = asyncio.Event()
        self._wake_dispatcher = asyncio.Event()
        self._wake_reporter = asyncio.Event()
        self._reporter_exit = asyncio.Event()
        self._reporter_done = asyncio.Event()
        self._wake_heartbeat = asyncio.Event()
        self._heartbeat_exit = False
        self._hand_lock = asyncio.Lock()
        self._heartbeat_lock = asyncio.Lock()  # one call at a time on the heartbeat connection
        self._heartbeat_conn: psycopg.AsyncConnection[Any] | None = None
        self._steps_lock = asyncio.Lock()  # one durable step at a time on the steps connection
        self._steps_conn: psycopg.AsyncConnection[Any] | None = None
        self._holding_at = 0.0  # loop time of the last list sent (or tried by the checkout loop)
        self._holding_due = False  # a checkout failed: its claims may be lost on the way
        self._checkouts = 0
        self._in_hand: dict[int, _Slot] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # tasks of jobs whose handlers have not ended: the slots taken
        self._done: list[tuple[_Slot, Any]] = []
        self._failed: list[_Failure] = []
        self._reaped: uuid.UUID | None = None
        self._dispatcher_waiting = False
        self._cancelling: asyncio.Future[None] | None = None
        self._heartbeat_s = self.heartbeat_interval or 10.0  # between periodic heartbeats
        self._holding_s = self._heartbeat_s  # the longest the checkout loop leaves a list unsent
        self._executor = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="jobq-handler")
        self._loop = asyncio.get_running_loop()
        signals = self._install_signals()
        if self._stop_requested.is_set():
            self._stopping.set()
        heartbeat = asyncio.create_task(self._heartbeat_loop(), name="jobq-heartbeat")
        reporter = asyncio.create_task(self._report_loop(), name="jobq-reporter")
        try:
            await self._dispatch_loop()
        finally:
            self._reporter_exit.set()
            self._wake_reporter.set()
            self._heartbeat_exit = True
            self._wake_heartbeat.set()
            for task in (reporter, heartbeat):
                if not task.done():
                    try:
                        await task
                    except Exception:  # pragma: no cover - logged by the loops themselves
                        log.exception("jobq worker %s: %s ended with an error", self.name, task.get_name())
            for task in list(self._tasks):
                task.cancel()
            if self._steps_conn is not None:
                await self._steps_conn.close()
                self._steps_conn = None
            self._executor.shutdown(wait=False)
            for sig in signals:
                self._loop.remove_signal_handler(sig)
            self._loop = None
            self._stop_requested.clear()
            log.info("jobq worker %s: stopped", self.name)

    # -- connections, registration, signals ---------------------------------------------

    async def _connect(self, role: str) -> psycopg.AsyncConnection[Any]:
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": 10, "application_name": f"{self.name}-{role}"}
        if self.pooled:
            kwargs["prepare_threshold"] = None  # a pooler may run a prepared name in another session
        kwargs.update(self.connect_kwargs)
        return await psycopg.AsyncConnection.connect(self.dsn, **kwargs)

    async def _register(self, conn: psycopg.AsyncConnection[Any]) -> None:
        again = self._reaped is not None
        wid = await aio.register_worker(conn, self.name, self.metadata, bind_to_session=not self.pooled)
        timeout = await aio.heartbeat_timeout(conn)
        self._holding_s = self._heartbeat_s = self.heartbeat_interval or max(timeout.total_seconds() / 3, 0.05)
        if self._edition is None:
            try:
                self._edition = await aio.execute(conn, _calls.server_edition())
            except JobqError as e:
                if e.sqlstate != "42883":  # no jobq_version(): a jobq older than 0.4, an extension
                    raise
                self._edition = "extension"
        if self._edition == "sql":
            # No background worker: the heartbeats run the passes, each when the last one is
            # older than jobq.reap_interval, so beat at least that often. (The list of jobs in
            # hand keeps its own period: it is about heartbeat_timeout, not the passes.)
            reap = await aio.execute(conn, _calls.reap_interval())
            self._heartbeat_s = min(self._heartbeat_s, max(reap.total_seconds(), 0.05))
        self._wid = wid
        self._holding_at = asyncio.get_running_loop().time()  # a new registration holds nothing
        self._holding_due = False
        self._wake_heartbeat.set()  # the next heartbeat is one interval from now
        log.info("jobq worker %s: %s as %s", self.name, "registered again" if again else "registered", wid)

    def _install_signals(self) -> list[int]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return []
        assert self._loop is not None
        installed: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._loop.add_signal_handler(sig, self.stop)
            except (NotImplementedError, RuntimeError, ValueError):  # not on this platform / loop
                continue
            installed.append(sig)
        return installed

    def _begin_stop(self) -> None:
        if self._stopping.is_set():
            return
        log.info("jobq worker %s: stopping", self.name)
        self._stopping.set()
        self._wake_dispatcher.set()
        self._wake_reporter.set()
        if self._wid is not None:
            self._cancelling = asyncio.ensure_future(self._stop_checkouts(self._wid))

    async def _stop_checkouts(self, wid: uuid.UUID) -> None:
        """Ends the waiting checkout, if any, by ``jobq_stop_checkouts`` on the heartbeat
        connection: the server returns it with no job, and no later checkout of ``wid``
        claims one (a registration made after the stop never checks out: the job loop sees
        the stop first)."""
        async with self._heartbeat_lock:
            try:
                if self._heartbeat_conn is None:
                    self._heartbeat_conn = await self._connect("heartbeat")
                await aio.stop_checkouts(self._heartbeat_conn, wid)
            except WorkerLost:
                self._reaped = wid
            except Exception as e:  # the wait ends by itself at worst, within ``wait``
                log.warning("jobq worker %s: could not end the waiting checkout: %s", self.name, str(e).strip())
                if self._heartbeat_conn is not None and (self._heartbeat_conn.closed or self._heartbeat_conn.broken):
                    self._heartbeat_conn = None

    # -- jobs in hand --------------------------------------------------------------------

    def _take(self, jobs: list[Job], wid: uuid.UUID) -> list[_Slot]:
        """Jobs a checkout returned become jobs in hand (called with no await since the
        checkout's answer, so a heartbeat never sees the one without the other)."""
        if self._reaped is wid or self._wid is not wid:
            if jobs:
                log.warning("jobq worker %s: dropped %s claimed by a lost registration", self.name, [j.id for j in jobs])
            return []
        slots = [_Slot(job, wid) for job in jobs]
        for slot in slots:
            self._in_hand[slot.job.id] = slot
            slot.job._runner = self._run_steps_sync
            slot.job._arunner = self._run_steps
        return slots

    async def _run_steps(self, calls: Sequence[Any]) -> list[Any]:
        """A durable step's calls (:mod:`jobq.durable`), in one transaction on the worker's
        steps connection (opened on first use, again after it was lost)."""
        async with self._steps_lock:
            conn = self._steps_conn
            if conn is None or conn.closed or conn.broken:
                conn = self._steps_conn = await self._connect("steps")
            async with conn.transaction():
                return [await aio.execute(conn, call) for call in calls]

    def _run_steps_sync(self, calls: Sequence[Any]) -> list[Any]:
        """:meth:`_run_steps` from a handler's thread."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the worker is not running")
        return asyncio.run_coroutine_threadsafe(self._run_steps(calls), loop).result()

    def _start(self, slots: list[_Slot]) -> None:
        for slot in slots:
            task = asyncio.create_task(self._run_job(slot), name=f"jobq-job-{slot.job.id}")
            slot.task = task
            if not task.done():  # an eager task factory may have run it to its end already
                self._tasks.add(task)

    def _drop_all(self, why: str) -> None:
        """Drops every job in hand without reporting it: the server has returned them, or
        will, and they run again. Their handlers are told through their cancel signal."""
        dropped = sorted(self._in_hand)
        for slot in self._in_hand.values():
            slot.dropped = True
            slot.job._cancel_event().set()
            if slot.inner is not None and isinstance(slot.inner, asyncio.Task):
                slot.inner.cancel()
        self._in_hand.clear()
        self._done.clear()
        self._failed.clear()
        if dropped:
            log.warning("jobq worker %s: %s: dropped jobs %s without reporting them", self.name, why, dropped)

    def _release(self, slots: Sequence[_Slot]) -> None:
        """Reported (or lost): no longer in hand."""
        for slot in slots:
            if self._in_hand.get(slot.job.id) is slot:
                del self._in_hand[slot.job.id]

    # -- running one job -----------------------------------------------------------------

    async def _run_job(self, slot: _Slot) -> None:
        """The job's task: runs its handler, then frees its slot and leaves ``_tasks`` itself.
        (A task cancelled before it ran never gets here; only the worker's own end does that,
        and :meth:`_wait_tasks` does not wait for such a task.)"""
        if slot.task is None:  # an eager task factory runs this before create_task returns
            slot.task = asyncio.current_task()
        try:
            await self._run_handler(slot)
        except Exception:
            log.exception("jobq worker %s: job %d: the worker failed running it", self.name, slot.job.id)
        finally:
            self._tasks.discard(slot.task)  # its slot is free
            self._wake_dispatcher.set()

    async def _run_handler(self, slot: _Slot) -> None:
        job = slot.job
        key = job.kind if job.kind is not None else job.queue
        handler = self._handlers.get(key)
        if handler is None:
            what = f"kind {job.kind!r}" if job.kind is not None else f"queue {job.queue!r} (the job has no kind)"
            self._failure(slot, {"type": "NoHandler", "message": f"no handler for {what}"}, None, discard=True)
            return
        result: Any = None
        error: BaseException | None = None
        fn, is_async = handler
        if is_async:
            # Awaited in this job's own task (no task of its own: one fewer per job); a
            # cancellation request cancels this task.
            slot.inner = slot.task
            try:
                result = await fn(job)
            except asyncio.CancelledError as e:
                if not (slot.cancel_requested or slot.dropped):
                    raise  # the worker itself is ending
                error = e
            except Exception as e:
                error = e
        else:
            inner = asyncio.get_running_loop().run_in_executor(self._executor, fn, job)
            slot.inner = inner
            try:
                await asyncio.wait([inner])
            except asyncio.CancelledError:
                inner.cancel()
                raise
            if inner.cancelled():
                self._failure(slot, {"type": "Cancelled", "message": f"job {job.id} was cancelled"}, None)
                return
            error = inner.exception()
            if error is None:
                result = inner.result()
                if inspect.isawaitable(result):  # a plain function that returned a coroutine
                    try:
                        result = await result
                    except Exception as e:
                        error = e
        if error is None:
            self._success(slot, result)
        elif isinstance(error, Suspended):
            # The server has the job (snoozed, or blocked on an event or on other jobs): nothing
            # to report, and its slot is free.
            log.debug("jobq worker %s: job %d suspended: %s", self.name, job.id, error)
        elif isinstance(error, RetryIn):
            cause = error.__cause__
            described = (
                {"type": type(cause).__name__, "message": str(cause)}
                if cause is not None
                else {"type": "RetryIn", "message": error.message}
            )
            self._failure(slot, described, error.delay)
        elif isinstance(error, asyncio.CancelledError):
            self._failure(slot, {"type": "Cancelled", "message": f"job {job.id} was cancelled"}, None)
        else:
            self._failure(slot, {"type": type(error).__name__, "message": str(error)}, None)

    def _success(self, slot: _Slot, result: Any) -> None:
        if slot.dropped:
            return
        if result is not None:
            try:
                json.dumps(result)
            except (TypeError, ValueError) as e:
                self._failure(slot, {"type": type(e).__name__, "message": f"the handler's result is not JSON: {e}"}, None)
                return
        log.debug("jobq worker %s: job %d succeeded", self.name, slot.job.id)
        self._done.append((slot, result))
        self._wake_dispatcher.set()
        if self._dispatcher_waiting or self._stopping.is_set():
            self._wake_reporter.set()  # otherwise the job loop reports it with its next call

    def _failure(self, slot: _Slot, error: dict[str, str], retry_in: timedelta | None, discard: bool = False) -> None:
        if slot.dropped:
            return
        log.info("jobq worker %s: job %d failed: %s: %s", self.name, slot.job.id, error["type"], error["message"])
        self._failed.append(_Failure(slot, error, retry_in, discard))
        self._wake_reporter.set()

    # -- the job connection: checkouts, the one-commit protocol, the drain -------------------

    async def _dispatch_loop(self) -> None:
        backoff = 1.0
        while True:
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                conn = await self._connect("jobs")
                await self._work(conn)
                backoff = 1.0
                await self._drain(conn)
                return
            except Exception as e:
                if not _lost(e, conn):
                    raise
                if conn is not None:
                    await conn.close()
                log.warning("jobq worker %s: connection lost (%s); again in %g s", self.name, str(e).strip(), backoff)
                if not self.pooled and self._wid is not None:
                    # The registration was bound to the session that ended: the server has
                    # reaped it, and its jobs run again.
                    self._drop_all("its session ended")
                    self._wid = None
                if self._stopping.is_set() and (conn is None or not self.pooled or self._wid is None):
                    # Nothing left to report on this registration, or no way to: let the
                    # handlers end; the server returns whatever is still held.
                    await self._wait_tasks()
                    if self.pooled and self._wid is not None:
                        log.warning("jobq worker %s: stopped without unregistering %s", self.name, self._wid)
                    return
                try:
                    await asyncio.wait_for(self._stopping.wait(), backoff)
                except asyncio.TimeoutError:
                    pass
                backoff = min(backoff * 2, _MAX_BACKOFF)
            finally:
                if conn is not None:
                    await conn.close()

    async def _work(self, conn: psycopg.AsyncConnection[Any]) -> None:
        while not self._stopping.is_set():
            if self._wid is None or self._reaped is self._wid:
                self._drop_all("this worker was reaped")
                await self._register(conn)
                continue
            wid = self._wid
            free = self.concurrency - len(self._tasks)
            if free <= 0:
                self._wake_dispatcher.clear()
                await self._wake_dispatcher.wait()
                continue
            if self._holding_due or asyncio.get_running_loop().time() - self._holding_at >= self._holding_s:
                # The periodic heartbeat sends no list while a checkout is on its way, and an
                # idle worker is nearly always inside one: send it here, where this loop (the
                # only one that checks out) has none on its way, so that a claim whose reply
                # never reached this worker goes back to the queue.
                self._holding_due = False
                self._holding_at = asyncio.get_running_loop().time()  # tried: next try one interval on
                await self._heartbeat(wid)
                continue  # reaped, stopping or a slot taken meanwhile: look again
            done, self._done = [(s, r) for s, r in self._done if s.wid is wid], []
            try:
                if done:
                    slots = await self._complete_and_checkout(conn, wid, done, free)
                else:
                    slots = await self._checkout_waiting(conn, wid, free)
            except BaseException:
                self._holding_due = True  # it may have claimed jobs whose reply was lost
                raise
            if self._stopping.is_set():
                # Claimed as the stop came: held unstarted (in hand, so no heartbeat gives them
                # back as interrupted); unregistering returns them, their attempt not counted.
                if slots:
                    log.info("jobq worker %s: stopping: jobs %s claimed meanwhile are not started", self.name, [sl.job.id for sl in slots])
                continue
            self._start(slots)
            if slots:
                # Let the jobs just started take their first step before looking again: a
                # handler that ends without waiting frees its slot in this same pass of the
                # event loop (rather than waking this loop in the next one).
                await asyncio.sleep(0)

    async def _complete_and_checkout(
        self, conn: psycopg.AsyncConnection[Any], wid: uuid.UUID, done: list[tuple[_Slot, Any]], free: int
    ) -> list[_Slot]:
        ids = [s.job.id for s, _ in done]
        results: list[Any] | None = [r for _, r in done]
        if all(r is None for r in results):  # type: ignore[union-attr]
            results = None  # every result NULL: send no array
        jobs: list[Job] = []
        async with self._hand_lock:
            self._checkouts += 1
        try:
            try:
                jobs = await aio.complete_and_checkout(conn, wid, ids, results, self.queues, free)
                log.debug("jobq worker %s: completed %s", self.name, ids)
                self._release([s for s, _ in done])
            except JobsFenced as e:  # some were finished elsewhere: report the others alone
                log.info("jobq worker %s: jobs %s are no longer this worker's", self.name, e.job_ids)
                await self._complete_alone(conn, wid, done)
            except WorkerLost:
                self._reaped = wid
        except BaseException:
            self._done[:0] = done  # not reported: report them with the next call
            raise
        finally:
            self._checkouts -= 1
            slots = self._take(jobs, wid)
        return slots

    async def _checkout_waiting(self, conn: psycopg.AsyncConnection[Any], wid: uuid.UUID, free: int) -> list[_Slot]:
        jobs: list[Job] = []
        async with self._hand_lock:
            self._checkouts += 1
        self._dispatcher_waiting = True
        self._wake_reporter.set()  # jobs that finish while this waits are the reporter's to report
        try:
            if not self._stopping.is_set():
                jobs = await aio.checkout(conn, wid, self.queues, free, wait=self.wait)
        except WorkerLost:
            self._reaped = wid
        except JobqError as e:
            if e.sqlstate != "57014":  # statement_timeout shorter than the wait: nothing claimed
                raise
        finally:
            self._dispatcher_waiting = False
            self._checkouts -= 1
            slots = self._take(jobs, wid)
        return slots

    async def _complete_alone(self, conn: psycopg.AsyncConnection[Any], wid: uuid.UUID, done: list[tuple[_Slot, Any]]) -> None:
        ids = [s.job.id for s, _ in done]
        ok = set(await aio.complete_many(conn, wid, ids, [r for _, r in done]))
        lost = [i for i in ids if i not in ok]
        if lost:
            log.info("jobq worker %s: jobs %s were not this worker's to complete any more", self.name, lost)
        self._release([s for s, _ in done])

    async def _wait_tasks(self) -> None:
        while self._tasks:
            await asyncio.wait(set(self._tasks))
            self._tasks = {t for t in self._tasks if not t.done()}

    async def _drain(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Stopping: the jobs in flight finish, their outcomes are reported, the worker
        unregisters."""
        log.info("jobq worker %s: draining: no more checkouts, %d jobs in flight", self.name, len(self._tasks))
        await self._wait_tasks()
        self._reporter_exit.set()
        self._wake_reporter.set()
        await self._reporter_done.wait()
        wid = self._wid
        done, self._done = self._done, []
        failed, self._failed = self._failed, []
        if wid is None or self._reaped is wid:
            return
        try:
            for f in failed:
                if f.slot.wid is wid:
                    await self._fail_one(conn, wid, f)
            mine = [(s, r) for s, r in done if s.wid is wid]
            if mine:
                await self._complete_alone(conn, wid, mine)
            returned = await aio.unregister_worker(conn, wid)
            log.info("jobq worker %s: unregistered %s (%d jobs returned)", self.name, wid, returned)
        except WorkerLost:
            log.info("jobq worker %s: %s was reaped before it unregistered", self.name, wid)
        self._wid = None

    async def _fail_one(self, conn: psycopg.AsyncConnection[Any], wid: uuid.UUID, f: _Failure) -> None:
        state = await aio.fail(conn, f.slot.job.id, wid, f.error, retry_in=f.retry_in, discard=f.discard or None)
        log.debug("jobq worker %s: job %d is %s", self.name, f.slot.job.id, state)
        self._release([f.slot])

    # -- the report connection: failures at once, completions while the job connection waits --

    async def _report_loop(self) -> None:
        conn: psycopg.AsyncConnection[Any] | None = None
        backoff = 1.0
        try:
            while True:
                self._wake_reporter.clear()
                wid = self._wid
                failed = [f for f in self._failed if f.slot.wid is wid] if wid else []
                self._failed = []
                done: list[tuple[_Slot, Any]] = []
                if self._dispatcher_waiting or self._stopping.is_set():
                    done = [(s, r) for s, r in self._done if s.wid is wid] if wid else []
                    self._done = []
                if not failed and not done:
                    if self._reporter_exit.is_set():
                        return
                    await self._wake_reporter.wait()
                    continue
                assert wid is not None
                try:
                    if conn is None:
                        conn = await self._connect("reports")
                    while failed:
                        try:
                            await self._fail_one(conn, wid, failed[0])
                        except WorkerLost:
                            raise
                        except JobqError as e:
                            if _lost(e, conn):
                                raise
                            # Refused (e.g. a retry_in out of range): leave the job to the
                            # heartbeat's holding, which returns it to the queue.
                            log.error("jobq worker %s: could not fail job %d: %s", self.name, failed[0].slot.job.id, e)
                            self._release([failed[0].slot])
                        failed.pop(0)
                    if done:
                        await self._complete_alone(conn, wid, done)
                        done = []
                    backoff = 1.0
                except WorkerLost:
                    if self._wid is wid:
                        self._reaped = wid
                        self._drop_all("this worker was reaped")
                        self._wake_dispatcher.set()
                except Exception as e:
                    self._failed[:0] = failed
                    self._done[:0] = done
                    if not _lost(e, conn):
                        raise
                    log.warning("jobq worker %s: report connection lost (%s); again in %g s", self.name, str(e).strip(), backoff)
                    if conn is not None:
                        await conn.close()
                    conn = None
                    if self._reporter_exit.is_set():
                        return  # the drain reports what is left on the job connection
                    try:
                        await asyncio.wait_for(self._reporter_exit.wait(), backoff)
                    except asyncio.TimeoutError:
                        pass
                    backoff = min(backoff * 2, _MAX_BACKOFF)
        finally:
            self._reporter_done.set()
            if conn is not None:
                await conn.close()

    # -- the heartbeat connection ----------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        try:
            while not self._heartbeat_exit:
                self._wake_heartbeat.clear()
                try:
                    await asyncio.wait_for(self._wake_heartbeat.wait(), self._heartbeat_s)
                    continue  # exit, or registered (which was a heartbeat: wait a full interval)
                except asyncio.TimeoutError:
                    pass
                wid = self._wid
                if wid is None or wid is self._reaped:
                    continue
                await self._heartbeat(wid)
        finally:
            async with self._heartbeat_lock:
                if self._heartbeat_conn is not None:
                    await self._heartbeat_conn.close()
                    self._heartbeat_conn = None

    async def _heartbeat(self, wid: uuid.UUID) -> None:
        """One ``jobq_heartbeat`` for ``wid`` on the heartbeat connection, with ``holding`` = the
        jobs in hand unless a checkout is on its way; delivers the cancellation requests it
        returns. JQ001 drops the jobs in hand (the job connection's loop registers again); a
        lost connection is opened again by the next heartbeat."""
        async with self._heartbeat_lock:
            try:
                if self._heartbeat_conn is None:
                    self._heartbeat_conn = await self._connect("heartbeat")
                async with self._hand_lock:
                    # No list while a checkout is on its way: its jobs are claimed but not
                    # in hand yet, and the list would give them back.
                    holding = None if self._checkouts else sorted(i for i, s in self._in_hand.items() if s.wid is wid)
                    cancel = await aio.heartbeat(self._heartbeat_conn, wid, holding)
                    if holding is not None:
                        self._holding_at = asyncio.get_running_loop().time()
                for job_id in cancel:
                    slot = self._in_hand.get(job_id)
                    if slot is not None and not slot.cancel_requested:
                        log.info("jobq worker %s: job %d: cancellation requested", self.name, job_id)
                        slot.cancel_requested = True
                        slot.job._cancel_event().set()
                        if isinstance(slot.inner, asyncio.Task):
                            slot.inner.cancel()
            except WorkerLost:
                if self._wid is wid:
                    log.warning("jobq worker %s: %s was reaped (JQ001)", self.name, wid)
                    self._reaped = wid
                    self._drop_all("this worker was reaped")
                    self._wake_dispatcher.set()
            except Exception as e:
                log.warning("jobq worker %s: heartbeat failed: %s", self.name, str(e).strip())
                conn = self._heartbeat_conn
                if conn is not None and _lost(e, conn):
                    await conn.close()
                    self._heartbeat_conn = None
