"""The records jobq calls return: :class:`Job`, :class:`QueueStats`, :class:`ReapResult`."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Mapping

from .errors import Cancelled

if TYPE_CHECKING:
    from .durable import Durable, DurableAsync

__all__ = ["Job", "JobResult", "QueueStats", "ReapResult"]

# Guards the making of a job's cancel event: a handler's thread and the worker may ask at once.
_CANCEL_EVENTS = threading.Lock()


@dataclass(eq=False)
class Job:
    """A job checked out by a worker: a row of the composite type ``jobq.job``.

    A :class:`jobq.Worker` passes one to each handler call; it is also what
    :func:`jobq.checkout` returns.

    Attributes:
        id: the job's id.
        queue: its queue.
        kind: its class name, or None (the worker then routes it by its queue).
        payload: what the enqueuer gave (decoded JSON).
        priority: lower runs first.
        attempt: this attempt's number, from 1.
        max_attempts: attempts allowed before the job becomes ``dead``.
        run_at: when it became due.
        enqueued_at: when it was enqueued.
        unique_key: its unique key, or None.
        concurrency_key: its concurrency key, or None.
        interrupted_at: when an earlier attempt was cut off (its worker reaped, or the job
            returned by a heartbeat's ``holding``), else None.
        last_error: the error of the last failed attempt (decoded JSON), or None.
        unique_strategy: the strategy of its unique key, or None.
        concurrency_limit: the limit of its concurrency key, or None.
        started_at: when this attempt started.
        depends_on: the jobs it depends on, as enqueued, or None.
        checkpoints: what its steps recorded (:func:`jobq.checkpoint`, :meth:`Job.step`) in
            earlier attempts or before a suspension; ``{}`` when none.
        worker_id: the worker registration that checked it out.
    """

    id: int
    queue: str
    kind: str | None
    payload: Any
    priority: int
    attempt: int
    max_attempts: int
    run_at: datetime
    enqueued_at: datetime
    unique_key: str | None = None
    concurrency_key: str | None = None
    interrupted_at: datetime | None = None
    last_error: Any = None
    unique_strategy: str | None = None
    concurrency_limit: int | None = None
    started_at: datetime | None = None
    depends_on: list[int] | None = None
    checkpoints: dict[str, Any] = field(default_factory=dict)
    worker_id: uuid.UUID | None = None
    _cancel: threading.Event | None = field(default=None, repr=False)  # made on first use: _cancel_event()
    _runner: Any = field(default=None, repr=False)  # set by jobq.Worker: runs durable steps' calls
    _arunner: Any = field(default=None, repr=False)

    @classmethod
    def from_row(cls, row: Mapping[str, Any], worker_id: uuid.UUID | None = None) -> Job:
        """A Job from a ``jobq.job`` row read as a mapping (columns it does not know are
        ignored, so a server that adds columns keeps working)."""
        return cls(
            id=row["id"],
            queue=row["queue"],
            kind=row.get("kind"),
            payload=row.get("payload"),
            priority=row.get("priority", 0),
            attempt=row.get("attempt", 0),
            max_attempts=row.get("max_attempts", 0),
            run_at=row["run_at"],
            enqueued_at=row["enqueued_at"],
            unique_key=row.get("unique_key"),
            concurrency_key=row.get("concurrency_key"),
            interrupted_at=row.get("interrupted_at"),
            last_error=row.get("last_error"),
            unique_strategy=row.get("unique_strategy"),
            concurrency_limit=row.get("concurrency_limit"),
            started_at=row.get("started_at"),
            depends_on=row.get("depends_on"),
            checkpoints=dict(row.get("checkpoints") or {}),
            worker_id=worker_id,
        )

    def durable(self) -> Durable:
        """Durable steps for this job (:mod:`jobq.durable`), in a plain ``def`` handler run by
        a :class:`jobq.Worker`."""
        from .durable import Durable

        if self._runner is None:
            raise RuntimeError("durable steps need a job run by a jobq.Worker")
        return Durable(self, self._runner)

    def durable_async(self) -> DurableAsync:
        """Durable steps for this job in an ``async def`` handler run by a :class:`jobq.Worker`."""
        from .durable import DurableAsync

        if self._arunner is None:
            raise RuntimeError("durable steps need a job run by a jobq.Worker")
        return DurableAsync(self, self._arunner)

    def _cancel_event(self) -> threading.Event:
        """The job's cancel event, made on first use (most jobs never need one: a
        ``threading.Event`` per job was a tenth of the worker's own cost per no-op job)."""
        event = self._cancel
        if event is None:
            with _CANCEL_EVENTS:
                if self._cancel is None:
                    self._cancel = threading.Event()
                event = self._cancel
        return event

    @property
    def cancelled(self) -> bool:
        """True once the worker was asked to stop this job: its cancellation was requested
        (``jobq_cancel``), or the worker lost it (reaped: the job runs again elsewhere, and
        whatever this handler returns is not reported)."""
        event = self._cancel
        return event is not None and event.is_set()

    @property
    def cancel_event(self) -> threading.Event:
        """The :class:`threading.Event` behind :attr:`cancelled`, to wait on."""
        return self._cancel_event()

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Sleeps up to ``timeout`` seconds, returning early (True) when the job is cancelled.

        For handlers that pace themselves: ``if job.wait_cancelled(1.0): raise Cancelled``."""
        return self._cancel_event().wait(timeout)

    def raise_if_cancelled(self) -> None:
        """Raises :class:`jobq.Cancelled` when :attr:`cancelled` is set."""
        if self.cancelled:
            raise Cancelled(f"job {self.id} was cancelled")


@dataclass(frozen=True)
class QueueStats:
    """A row of the view ``jobq.queue_stats``.

    Attributes:
        queue: the queue.
        ready: jobs ready and due now.
        scheduled: jobs ready but not due yet.
        executing: jobs executing.
        dead: dead jobs not yet pruned.
        oldest_ready_age: now minus the ``run_at`` of the oldest due job, None when none.
    """

    queue: str
    ready: int
    scheduled: int
    executing: int
    dead: int
    oldest_ready_age: timedelta | None


@dataclass(frozen=True)
class JobResult:
    """A row of :func:`jobq.results`: a job's state and outcome."""

    id: int
    kind: str | None
    state: str
    attempt: int
    result: Any
    last_error: Any


@dataclass(frozen=True)
class ReapResult:
    """What one pass of :func:`jobq.reap` did."""

    workers_reaped: int
    jobs_requeued: int
    jobs_dead: int
    locks_released: int
    jobs_pruned: int
