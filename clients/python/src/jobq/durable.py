"""Durable steps for handlers: a function run once with its result kept as a checkpoint, sleep,
awaiting an event, fan-out and gather. Each is one or two jobq calls (``jobq_checkpoint``,
``jobq_snooze``, ``jobq_await_event``, ``jobq_await_jobs``, ``jobq_results``); every guarantee
is the server's.

A handler that uses them is replayed from the top on each attempt (after a crash, a failure,
or a suspension): what a step returned before comes back from the job's checkpoints instead of
running again. A call that suspends the job (``sleep``, an ``await_event`` or ``gather`` that
must wait) raises :class:`Suspended`; the worker then reports nothing for the job, which the
server makes ready again when its time, event or jobs come::

    @worker.handler("order")
    def order(job: jobq.Job) -> dict:
        steps = job.durable()
        charge = steps.step("charge", lambda: payments.charge(job.payload["order"]))
        boxes = steps.spawn("ship", "shipments", [{"box": b} for b in range(3)])
        shipped = steps.gather(boxes)                       # suspends until all three finish
        delivered = steps.await_event(f"order-{job.payload['order']}:delivered", timeout=86400)
        return {"charge": charge, "shipped": len(shipped), "delivered": delivered}

``job.durable()`` is for plain ``def`` handlers (they run in threads); ``async def`` handlers
use ``job.durable_async()``, whose methods are coroutines.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
import inspect
from typing import Any, Awaitable, Callable, Generator, Sequence, TypeVar, Union

from . import _calls
from .errors import Cancelled
from .types import Job, JobResult

__all__ = ["Durable", "DurableAsync", "EventTimeout", "Suspended"]

T = TypeVar("T")

#: Runs a list of calls in one transaction and returns their results (the worker provides it).
Runner = Callable[[Sequence["_calls.Call[Any]"]], list[Any]]
AsyncRunner = Callable[[Sequence["_calls.Call[Any]"]], Awaitable[list[Any]]]


class Suspended(Exception):
    """The job was suspended (asleep, or blocked on an event or on other jobs): its handler
    stops here and the worker reports nothing; the job runs again, from the top, when it is
    ready. Raised by :class:`Durable`'s methods; let it propagate."""


class EventTimeout(Exception):
    """:meth:`Durable.await_event`'s ``timeout`` passed before the event came."""

    def __init__(self, event: str) -> None:
        super().__init__(f"event {event!r} did not come in time")
        self.event = event


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _seconds(d: float | timedelta) -> timedelta:
    return d if isinstance(d, timedelta) else timedelta(seconds=float(d))


class _Compute:
    """A step's own function, to be run (and awaited if it returns an awaitable) by the driver."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn


#: What a plan yields: calls to run in one transaction (their results are sent back), or a
#: function to run (its value is sent back).
_Ask = Union[list["_calls.Call[Any]"], _Compute]
_Gen = Generator[_Ask, Any, T]


class _Plan:
    """Each helper as a generator of what it asks (calls, or the step's function), shared by the
    sync and async forms: one definition of what is sent, driven two ways."""

    def __init__(self, job: Job) -> None:
        if job.worker_id is None:
            raise RuntimeError("durable steps need a job checked out by a worker")
        self.job = job
        self.worker: uuid.UUID = job.worker_id

    def _lost(self) -> Cancelled:
        return Cancelled(f"job {self.job.id} is no longer this worker's")

    def _keep(self, name: str, value: Any) -> _Gen[Any]:
        (ok,) = yield [_calls.checkpoint(self.job.id, self.worker, name, value)]
        if not ok:
            raise self._lost()
        self.job.checkpoints[name] = value
        return value

    def _deadline(self, key: str, after: float | timedelta) -> _Gen[datetime]:
        kept = self.job.checkpoints.get(key)
        if kept is not None:
            return datetime.fromisoformat(str(kept))
        at = _now() + _seconds(after)
        yield from self._keep(key, at.isoformat())
        return at

    def step(self, name: str, fn: Callable[[], Any]) -> _Gen[Any]:
        if name in self.job.checkpoints:
            return self.job.checkpoints[name]
        value = yield _Compute(fn)
        return (yield from self._keep(name, value))

    def sleep(self, name: str, duration: float | timedelta) -> _Gen[None]:
        until = yield from self._deadline(f"sleep:{name}", duration)
        if _now() >= until:
            return None
        (ok,) = yield [_calls.snooze(self.job.id, self.worker, until)]
        raise Suspended(f"job {self.job.id} sleeps until {until.isoformat()}") if ok else self._lost()

    def await_event(self, name: str, timeout: float | timedelta | None) -> _Gen[Any]:
        key = f"event:{name}"
        if key not in self.job.checkpoints:
            left: timedelta | None = None
            if timeout is not None:
                deadline = yield from self._deadline(f"await:{name}", timeout)
                left = deadline - _now()
                if left <= timedelta(0):
                    raise EventTimeout(name)
            read = _calls.Call(
                "SELECT checkpoints FROM jobq.jobs WHERE id = %s",
                (self.job.id,),
                lambda rows: dict(rows[0]["checkpoints"]) if rows else {},
            )
            state, checkpoints = yield [_calls.await_event(self.job.id, self.worker, name, left), read]
            if state == "waiting":
                raise Suspended(f"job {self.job.id} awaits event {name!r}")
            if state != "emitted":
                raise self._lost()
            self.job.checkpoints.update(checkpoints)
        return self.job.checkpoints[key].get("payload")

    def spawn(self, name: str, queue: str, payloads: Sequence[Any], options: dict[str, Any]) -> _Gen[list[int]]:
        if name in self.job.checkpoints:
            return list(self.job.checkpoints[name])
        batch = _calls.enqueue_batch(queue, payloads, **options)
        # The jobs and the checkpoint of their ids in one statement: on a replay either both
        # exist or neither.
        both = _calls.Call(
            "SELECT x.ids, jobq_checkpoint(%s, %s, %s, to_jsonb(x.ids)) AS ok"
            f" FROM (SELECT coalesce(array_agg(b.v ORDER BY b.v), '{{}}') AS ids FROM ({batch.sql}) b) x",
            (self.job.id, self.worker, name, *batch.params),
            lambda rows: (list(rows[0]["ids"]), bool(rows[0]["ok"])),
        )
        ((ids, ok),) = yield [both]
        if not ok:
            raise self._lost()
        spawned: list[int] = ids
        self.job.checkpoints[name] = spawned
        return spawned

    def gather(self, ids: Sequence[int]) -> _Gen[list[JobResult]]:
        state, results = yield [_calls.await_jobs(self.job.id, self.worker, ids), _calls.results(ids)]
        if state == "waiting":
            raise Suspended(f"job {self.job.id} awaits {len(ids)} jobs")
        if state != "finished":
            raise self._lost()
        return results  # type: ignore[no-any-return]


def _drive(gen: _Gen[T], run: Runner) -> T:
    try:
        ask = next(gen)
        while True:
            if isinstance(ask, _Compute):
                answer: Any = ask.fn()
            else:
                answer = run(ask)
            ask = gen.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _drive_async(gen: _Gen[T], run: AsyncRunner) -> T:
    try:
        ask = next(gen)
        while True:
            if isinstance(ask, _Compute):
                answer: Any = ask.fn()
                if inspect.isawaitable(answer):
                    answer = await answer
            else:
                answer = await run(ask)
            ask = gen.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class Durable:
    """Durable steps of one job, for a plain ``def`` handler: ``job.durable()``."""

    def __init__(self, job: Job, run: Runner) -> None:
        self._p = _Plan(job)
        self._run = run

    def step(self, name: str, fn: Callable[[], T]) -> T:
        """``fn()``'s result, computed once: kept as the checkpoint ``name`` (JSON) and returned
        from it on later attempts. ``fn`` runs again only if an attempt ended before its
        checkpoint committed."""
        return _drive(self._p.step(name, fn), self._run)  # type: ignore[no-any-return]

    def sleep(self, name: str, duration: float | timedelta) -> None:
        """Sleeps ``duration`` (seconds or a timedelta) durably: the job is snoozed until then
        (:class:`Suspended`) and, replayed, goes past this call once the time has come."""
        _drive(self._p.sleep(name, duration), self._run)

    def await_event(self, name: str, timeout: float | timedelta | None = None) -> Any:
        """The payload of event ``name`` (see :func:`jobq.emit_event`): at once if it was
        emitted, else the job is blocked until it is (:class:`Suspended`). With ``timeout``
        (counted from this step's first call), :class:`EventTimeout` once it has passed."""
        return _drive(self._p.await_event(name, timeout), self._run)

    def spawn(self, name: str, queue: str, payloads: Sequence[Any], **options: Any) -> list[int]:
        """Fan-out, once: one job per payload in ``queue`` (:func:`jobq.enqueue_batch`'s
        options), their ids kept as the checkpoint ``name`` in the same statement."""
        return _drive(self._p.spawn(name, queue, payloads, options), self._run)

    def gather(self, ids: Sequence[int]) -> list[JobResult]:
        """Fan-in: the results of jobs ``ids`` (:func:`jobq.results`, in order) once every one
        is finished; until then the job is blocked (:class:`Suspended`)."""
        return _drive(self._p.gather(ids), self._run)


class DurableAsync:
    """The same steps for an ``async def`` handler: ``job.durable_async()``; ``step``'s
    function may be a coroutine function."""

    def __init__(self, job: Job, run: AsyncRunner) -> None:
        self._p = _Plan(job)
        self._run = run

    async def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """As :meth:`Durable.step`."""
        return await _drive_async(self._p.step(name, fn), self._run)

    async def sleep(self, name: str, duration: float | timedelta) -> None:
        """As :meth:`Durable.sleep`."""
        await _drive_async(self._p.sleep(name, duration), self._run)

    async def await_event(self, name: str, timeout: float | timedelta | None = None) -> Any:
        """As :meth:`Durable.await_event`."""
        return await _drive_async(self._p.await_event(name, timeout), self._run)

    async def spawn(self, name: str, queue: str, payloads: Sequence[Any], **options: Any) -> list[int]:
        """As :meth:`Durable.spawn`."""
        return await _drive_async(self._p.spawn(name, queue, payloads, options), self._run)

    async def gather(self, ids: Sequence[int]) -> list[JobResult]:
        """As :meth:`Durable.gather`."""
        return await _drive_async(self._p.gather(ids), self._run)
