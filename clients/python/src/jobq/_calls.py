"""Every jobq call as SQL text, parameters and a decoder of its rows.

One builder per SQL function; :mod:`jobq.client` runs them on a psycopg ``Connection`` /
``Cursor`` and :mod:`jobq.aio` on an ``AsyncConnection`` / ``AsyncCursor``, so both APIs
send exactly the same statements. Arguments after the first are passed by name and only
when the caller set them (not None), so the server's defaults stay the server's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Generic, Mapping, Sequence, TypeVar

from psycopg.rows import RowFactory, dict_row
from psycopg.types.json import Jsonb

from .types import Job, JobResult, QueueStats, ReapResult

T = TypeVar("T")
Row = Mapping[str, Any]


@dataclass(frozen=True)
class Call(Generic[T]):
    """One statement: its SQL, its parameters, how psycopg builds its rows (mappings unless
    the call says otherwise) and how those rows become the result."""

    sql: str
    params: tuple[Any, ...]
    decode: Callable[[Sequence[Any]], T]
    row_factory: RowFactory[Any] = dict_row


class _Args:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.params: list[Any] = []

    def pos(self, value: Any, cast: str) -> _Args:
        self.parts.append(f"%s::{cast}")
        self.params.append(value)
        return self

    def opt(self, name: str, value: Any, cast: str) -> _Args:
        if value is not None:
            self.parts.append(f"{name} => %s::{cast}")
            self.params.append(value)
        return self

    def call(self, function: str) -> str:
        return f"{function}({', '.join(self.parts)})"


def _uuid(value: uuid.UUID | str) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _interval(value: float | timedelta | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=float(value))


def _json(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def _scalar(rows: Sequence[Row]) -> Any:
    return rows[0]["v"] if rows else None


def _scalar_call(function: str, args: _Args, decode: Callable[[Any], T]) -> Call[T]:
    return Call(f"SELECT {args.call(function)} AS v", tuple(args.params), lambda rows: decode(_scalar(rows)))


# The columns of ``jobq.job`` a Job reads, in the order of Job's fields: the rows of a checkout
# become Jobs by position (test_a_checked_out_job_carries_its_row, in tests/test_client.py,
# checks each field against the job's row). Checkpoints come as NULL when there are none (nearly
# every job): one JSON document less to decode per job a worker takes.
_JOB_COLUMNS = (
    "id, queue, kind, payload, priority, attempt, max_attempts, run_at, enqueued_at, unique_key,"
    " concurrency_key, interrupted_at, last_error, unique_strategy, concurrency_limit, started_at,"
    " depends_on, NULLIF(checkpoints, '{}') AS checkpoints"
)


def _job_rows(worker: uuid.UUID) -> RowFactory[Job]:
    """Rows of :data:`_JOB_COLUMNS` straight into Jobs checked out by ``worker``: no mapping
    per row on a worker's hot path."""

    def factory(cursor: Any) -> Callable[[Sequence[Any]], Job]:
        # v: the 18 columns; mypy cannot count a slice's length.
        return lambda v: Job(*v[:17], checkpoints=v[17] or {}, worker_id=worker)  # type: ignore[misc]

    return factory


def _jobs_call(function: str, args: _Args, worker: uuid.UUID) -> Call[list[Job]]:
    return Call(f"SELECT {_JOB_COLUMNS} FROM {args.call(function)}", tuple(args.params), list, _job_rows(worker))


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


def _opt_uuid(v: Any) -> uuid.UUID | None:
    return None if v is None else _uuid(v)


def _none(v: Any) -> None:
    return None


# -- jobs -------------------------------------------------------------------------------


def enqueue(
    queue: str,
    payload: Any = None,
    *,
    kind: str | None = None,
    priority: int | None = None,
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    unique_key: str | None = None,
    unique_strategy: str | None = None,
    on_conflict: str | None = None,
    concurrency_key: str | None = None,
    concurrency_limit: int | None = None,
    rate_key: str | None = None,
    depends_on: Sequence[int] | None = None,
    on_parent_failure: str | None = None,
    fairness_key: str | None = None,
) -> Call[int | None]:
    """Adds one job to ``queue`` (``jobq_enqueue``) and returns its id.

    ``payload`` is any JSON-serialisable value (None: the server's default, ``{}``).
    Options left None are not sent, so the server's defaults apply: ``priority`` 0 (lower
    runs first), ``run_at`` now, ``max_attempts`` 25, ``unique_strategy``
    ``"until_executed"`` (or ``"until_executing"``, ``"while_executing"``), ``on_conflict``
    ``"reject"`` (or ``"discard"``, ``"log"``, ``"replace"``), ``concurrency_limit`` 1.
    ``depends_on`` names the job's parents: it starts ``blocked`` and becomes ready when the
    last of them finishes; ``on_parent_failure`` ``"cancel"`` (the default: a parent that
    ends dead or cancelled cancels it) or ``"run"``. ``fairness_key`` (a tenant, a customer)
    makes the queue's checkout serve the keys in turns (fair checkout).

    Returns the new job's id; with ``on_conflict="replace"`` the id of the waiting job that
    took the new payload; None when ``on_conflict`` is ``"discard"`` or ``"log"`` and the key
    was taken. Raises :class:`~jobq.UniqueConflict` (with the holder's ``job_id``) when the
    key is taken and ``on_conflict`` is ``"reject"``; :class:`~jobq.InvalidArgument` for bad
    values. Runs in the connection's transaction: the job exists once that commits.
    """
    a = _Args().pos(queue, "text")
    a.opt("payload", _json(payload), "jsonb").opt("kind", kind, "text").opt("priority", priority, "integer")
    a.opt("run_at", run_at, "timestamptz").opt("max_attempts", max_attempts, "integer")
    a.opt("unique_key", unique_key, "text").opt("unique_strategy", unique_strategy, "text")
    a.opt("on_conflict", on_conflict, "text").opt("concurrency_key", concurrency_key, "text")
    a.opt("concurrency_limit", concurrency_limit, "integer").opt("rate_key", rate_key, "text")
    a.opt("depends_on", None if depends_on is None else list(depends_on), "bigint[]")
    a.opt("on_parent_failure", on_parent_failure, "text").opt("fairness_key", fairness_key, "text")
    return _scalar_call("jobq_enqueue", a, _opt_int)


def enqueue_batch(
    queue: str,
    payloads: Sequence[Any],
    *,
    kind: str | None = None,
    priority: int | None = None,
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    fairness_key: str | None = None,
) -> Call[list[int]]:
    """Adds one job per payload to ``queue`` in one call (``jobq_enqueue_batch``), all with the
    same options (``fairness_key`` included) and no other keys, and returns their ids in
    payload order."""
    a = _Args().pos(queue, "text").pos([Jsonb(p) for p in payloads], "jsonb[]")
    a.opt("kind", kind, "text").opt("priority", priority, "integer")
    a.opt("run_at", run_at, "timestamptz").opt("max_attempts", max_attempts, "integer")
    a.opt("fairness_key", fairness_key, "text")
    return Call(
        f"SELECT v FROM {a.call('jobq_enqueue_batch')} AS v",
        tuple(a.params),
        lambda rows: [int(r["v"]) for r in rows],
    )


def cancel(job_id: int) -> Call[str | None]:
    """Cancels a job (``jobq_cancel``): a ready job becomes ``cancelled`` at once; a running
    one gets a cancellation request its worker sees at its next heartbeat. Returns the job's
    state after the call (``"cancelled"``, ``"executing"``, or a finished job's state), None
    for an unknown id."""
    return _scalar_call("jobq_cancel", _Args().pos(job_id, "bigint"), _opt_str)


def retry(job_id: int) -> Call[bool]:
    """Makes a ``dead`` or ``cancelled`` job ``ready`` again, attempt 0 (``jobq_retry``). False
    when its unique key was taken meanwhile or the job is in another state."""
    return _scalar_call("jobq_retry", _Args().pos(job_id, "bigint"), bool)


def enqueue_graph(jobs: Sequence[Mapping[str, Any]]) -> Call[list[int | None]]:
    """A whole graph of jobs in one call and one transaction (``jobq_enqueue_graph``): each
    element has :func:`enqueue`'s arguments by their SQL names (``queue``, ``payload``,
    ``kind``, ``priority``, ``run_at`` as ISO text, ``unique_key``, ..., ``depends_on``,
    ``on_parent_failure``) and ``after``, the 0-based positions of earlier elements it depends
    on. Returns the ids in order (None where a unique key's conflict discarded the job)."""
    return Call(
        "SELECT v FROM jobq_enqueue_graph(%s::jsonb) AS v",
        (Jsonb(list(jobs)),),
        lambda rows: [_opt_int(r["v"]) for r in rows],
    )


def results(ids: Sequence[int]) -> Call[list[JobResult]]:
    """The state and outcome of each listed job that exists (``jobq_results``), in the order
    of ``ids``: what parents or awaited jobs produced (fan-in). At most 10,000 ids."""
    return Call(
        "SELECT * FROM jobq_results(%s::bigint[])",
        (list(ids),),
        lambda rows: [JobResult(**r) for r in rows],
    )


def emit_event(name: str, payload: Any = None) -> Call[int]:
    """Emits the event ``name`` (``jobq_emit_event``): every job awaiting it becomes ready,
    with the event's payload in its checkpoints. The first emit of a name wins; a later one
    changes nothing. Returns how many jobs it woke."""
    return _scalar_call("jobq_emit_event", _Args().pos(name, "text").opt("payload", _json(payload), "jsonb"), int)


def pause(queue: str | None, kind: str | None = None) -> Call[None]:
    """Makes checkout skip a queue (``kind`` None), a kind within a queue, or a kind in every
    queue (``queue`` None) (``jobq_pause``; ``jobq_admin``). Undone by :func:`resume` with the
    same arguments."""
    return _scalar_call("jobq_pause", _Args().pos(queue, "text").opt("kind", kind, "text"), _none)


def resume(queue: str | None, kind: str | None = None) -> Call[None]:
    """Removes the pause made with the same arguments (``jobq_resume``; ``jobq_admin``)."""
    return _scalar_call("jobq_resume", _Args().pos(queue, "text").opt("kind", kind, "text"), _none)


# -- schedules and rate limits -------------------------------------------------------------


def schedule(
    name: str,
    cron: str,
    queue: str,
    payload: Any = None,
    *,
    kind: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    time_zone: str | None = None,
    catch_up: bool | None = None,
) -> Call[None]:
    """Creates or replaces the recurring schedule ``name`` (``jobq_schedule``; ``jobq_admin``):
    one job in ``queue`` per tick of the five- or six-field ``cron`` expression, evaluated in
    ``time_zone`` (server default ``"UTC"``); ``catch_up`` enqueues every missed tick."""
    a = _Args().pos(name, "text").pos(cron, "text").pos(queue, "text")
    a.opt("payload", _json(payload), "jsonb").opt("kind", kind, "text").opt("priority", priority, "integer")
    a.opt("max_attempts", max_attempts, "integer").opt("time_zone", time_zone, "text")
    a.opt("catch_up", catch_up, "boolean")
    return _scalar_call("jobq_schedule", a, _none)


def unschedule(name: str) -> Call[bool]:
    """Removes the schedule ``name`` (``jobq_unschedule``); False when there was none. Jobs it
    enqueued stay."""
    return _scalar_call("jobq_unschedule", _Args().pos(name, "text"), bool)


def set_rate_limit(key: str, max_starts: int | None, per: float | timedelta | None = None) -> Call[None]:
    """At most ``max_starts`` jobs enqueued with ``rate_key=key`` start in any window of length
    ``per`` (seconds or a timedelta) (``jobq_set_rate_limit``; ``jobq_admin``).
    ``max_starts=None`` removes the limit."""
    a = _Args().pos(key, "text").pos(max_starts, "integer").pos(_interval(per), "interval")
    return _scalar_call("jobq_set_rate_limit", a, _none)


# -- locks ---------------------------------------------------------------------------------


def acquire_lock(key: str, worker: uuid.UUID | str, ttl: float | timedelta | None = None) -> Call[bool]:
    """Takes the named lock ``key`` for ``worker``, or extends it, for ``ttl`` (seconds or a
    timedelta; server default 5 minutes) (``jobq_acquire_lock``). True when held after the
    call, False when another live worker or a job holds it. Never waits."""
    a = _Args().pos(key, "text").pos(_uuid(worker), "uuid").opt("ttl", _interval(ttl), "interval")
    return _scalar_call("jobq_acquire_lock", a, bool)


def release_lock(key: str, worker: uuid.UUID | str) -> Call[bool]:
    """Releases the lock ``key`` if ``worker`` holds it (``jobq_release_lock``)."""
    return _scalar_call("jobq_release_lock", _Args().pos(key, "text").pos(_uuid(worker), "uuid"), bool)


def lock_holder(key: str) -> Call[uuid.UUID | None]:
    """The live worker holding the lock ``key`` (``jobq_lock_holder``), None when it is free
    or held by a job's unique key."""
    return _scalar_call("jobq_lock_holder", _Args().pos(key, "text"), _opt_uuid)


# -- reaping and observing ---------------------------------------------------------------------


def reap() -> Call[ReapResult]:
    """Runs one reap pass (``jobq_reap``; ``jobq_admin``); the background worker does this by
    itself every ``jobq.reap_interval``."""

    def decode(rows: Sequence[Row]) -> ReapResult:
        r = rows[0]
        return ReapResult(
            int(r["workers_reaped"]), int(r["jobs_requeued"]), int(r["jobs_dead"]),
            int(r["locks_released"]), int(r["jobs_pruned"]),
        )

    return Call("SELECT * FROM jobq_reap()", (), decode)


def queue_stats(queue: str | None = None) -> Call[list[QueueStats]]:
    """The rows of the view ``jobq.queue_stats`` (``jobq_reader``), ordered by queue; only
    ``queue``'s when given."""

    def decode(rows: Sequence[Row]) -> list[QueueStats]:
        return [
            QueueStats(r["queue"], int(r["ready"]), int(r["scheduled"]), int(r["executing"]),
                       int(r["dead"]), r["oldest_ready_age"])
            for r in rows
        ]

    sql = "SELECT queue, ready, scheduled, executing, dead, oldest_ready_age FROM jobq.queue_stats"
    if queue is None:
        return Call(sql + " ORDER BY queue", (), decode)
    return Call(sql + " WHERE queue = %s::text", (queue,), decode)


# -- workers -------------------------------------------------------------------------------


def register_worker(
    name: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    *,
    bind_to_session: bool | None = None,
) -> Call[uuid.UUID]:
    """Registers a worker (``jobq_register_worker``) and returns its id. With
    ``bind_to_session=True`` the worker is dead as soon as this session ends (not through a
    transaction-mode pooler)."""
    a = _Args().opt("name", name, "text").opt("metadata", _json(metadata), "jsonb")
    a.opt("bind_to_session", bind_to_session, "boolean")
    return _scalar_call("jobq_register_worker", a, _uuid)


def heartbeat(worker: uuid.UUID | str, holding: Sequence[int] | None = None) -> Call[list[int]]:
    """Keeps ``worker`` alive (``jobq_heartbeat``) and returns the ids of its jobs whose
    cancellation was requested. With ``holding`` (the ids really in flight, possibly empty),
    every job executing under the worker and not listed goes back to ``ready`` at once.
    Raises :class:`~jobq.WorkerLost` when the worker was reaped."""
    a = _Args().pos(_uuid(worker), "uuid").opt("holding", None if holding is None else list(holding), "bigint[]")
    return _scalar_call("jobq_heartbeat", a, lambda v: [int(x) for x in (v or [])])


def unregister_worker(worker: uuid.UUID | str) -> Call[int]:
    """Graceful shutdown (``jobq_unregister_worker``): the worker's executing jobs go back to
    ``ready`` (the attempt not counted), its locks are released, it is removed. Returns how
    many jobs went back."""
    return _scalar_call("jobq_unregister_worker", _Args().pos(_uuid(worker), "uuid"), lambda v: int(v or 0))


def stop_checkouts(worker: uuid.UUID | str) -> Call[None]:
    """The first step of a graceful shutdown (``jobq_stop_checkouts``): the worker's checkouts
    claim nothing more. One waiting now, on any connection, returns at once with no job, and
    so does every later one, until the worker unregisters; its jobs in hand, heartbeats and
    completions go on."""
    return _scalar_call("jobq_stop_checkouts", _Args().pos(_uuid(worker), "uuid"), lambda v: None)


def checkout(
    worker: uuid.UUID | str,
    queues: Sequence[str] | None = None,
    max_jobs: int | None = None,
    *,
    wait: float | timedelta | None = None,
) -> Call[list[Job]]:
    """Claims up to ``max_jobs`` (server default 1) due jobs of ``queues`` (None: every queue)
    for ``worker`` (``jobq_checkout``), in claim order. With ``wait`` (seconds or a
    timedelta, at most an hour) a call that finds nothing waits inside the server until a
    job it can take is committed, or ``wait`` runs out (then it returns ``[]``); run it in
    autocommit mode or a READ COMMITTED transaction of its own."""
    w = _uuid(worker)
    a = _Args().pos(w, "uuid").opt("queues", None if queues is None else list(queues), "text[]")
    a.opt("max_jobs", max_jobs, "integer").opt("wait", _interval(wait), "interval")
    return _jobs_call("jobq_checkout", a, w)


def complete(job_id: int, worker: uuid.UUID | str, result: Any = None) -> Call[bool]:
    """Marks the job ``completed`` with ``result`` (any JSON value; None stores NULL)
    (``jobq_complete``). False, changing nothing, when the job is not executing under this
    worker (reaped, cancelled, finished): drop it."""
    a = _Args().pos(job_id, "bigint").pos(_uuid(worker), "uuid").opt("result", _json(result), "jsonb")
    return _scalar_call("jobq_complete", a, bool)


def fail(
    job_id: int,
    worker: uuid.UUID | str,
    error: Any = None,
    *,
    retry_in: float | timedelta | None = None,
    discard: bool | None = None,
) -> Call[str | None]:
    """Records a failed attempt (``jobq_fail``) with ``error`` (JSON, conventionally
    ``{"type", "message"}``). The job goes back to ``ready`` after ``retry_in`` (seconds or a
    timedelta; default: the server's exponential backoff) while attempts remain and not
    ``discard``, else it is ``dead``. Returns the new state (``"ready"``, ``"dead"``, or
    ``"cancelled"`` when cancellation was requested), None when the job is not executing
    under this worker."""
    a = _Args().pos(job_id, "bigint").pos(_uuid(worker), "uuid").opt("error", _json(error), "jsonb")
    a.opt("retry_in", _interval(retry_in), "interval").opt("discard", discard, "boolean")
    return _scalar_call("jobq_fail", a, _opt_str)


def complete_many(
    worker: uuid.UUID | str, job_ids: Sequence[int], results: Sequence[Any] | None = None
) -> Call[list[int]]:
    """Completes each job of ``job_ids`` executing under ``worker`` (``jobq_complete_many``),
    with ``results[i]`` as the result of ``job_ids[i]`` when given; one round trip and one
    commit. Returns the ids it completed; one left out was not this worker's to complete."""
    a = _Args().pos(_uuid(worker), "uuid").pos(list(job_ids), "bigint[]")
    a.opt("results", None if results is None else [_json(r) for r in results], "jsonb[]")
    return _scalar_call("jobq_complete_many", a, lambda v: [int(x) for x in (v or [])])


def fail_many(
    worker: uuid.UUID | str, job_ids: Sequence[int], errors: Sequence[Any] | None = None
) -> Call[list[str | None]]:
    """Fails each job of ``job_ids`` executing under ``worker`` with the default backoff
    (``jobq_fail_many``), ``errors[i]`` as the error of ``job_ids[i]`` when given. Returns the
    new states aligned with ``job_ids``, None where the job was not this worker's."""
    a = _Args().pos(_uuid(worker), "uuid").pos(list(job_ids), "bigint[]")
    a.opt("errors", None if errors is None else [_json(e) for e in errors], "jsonb[]")
    return _scalar_call("jobq_fail_many", a, lambda v: [None if x is None else str(x) for x in (v or [])])


def complete_and_checkout(
    worker: uuid.UUID | str,
    job_ids: Sequence[int],
    results: Sequence[Any] | None = None,
    queues: Sequence[str] | None = None,
    max_jobs: int | None = None,
) -> Call[list[Job]]:
    """The one-commit worker protocol (``jobq_complete_and_checkout``): completes the jobs in
    hand and checks out the next ones in one call and one transaction. All or nothing: raises
    :class:`~jobq.JobsFenced` (JQ002) when a job in hand is no longer this worker's; then
    report the others with :func:`complete_many`."""
    w = _uuid(worker)
    a = _Args().pos(w, "uuid").pos(list(job_ids), "bigint[]")
    a.opt("results", None if results is None else [_json(r) for r in results], "jsonb[]")
    a.opt("queues", None if queues is None else list(queues), "text[]").opt("max_jobs", max_jobs, "integer")
    return _jobs_call("jobq_complete_and_checkout", a, w)


def fail_and_checkout(
    worker: uuid.UUID | str,
    job_ids: Sequence[int],
    errors: Sequence[Any] | None = None,
    queues: Sequence[str] | None = None,
    max_jobs: int | None = None,
) -> Call[list[Job]]:
    """As :func:`complete_and_checkout`, failing the jobs in hand with the default backoff
    (``jobq_fail_and_checkout``)."""
    w = _uuid(worker)
    a = _Args().pos(w, "uuid").pos(list(job_ids), "bigint[]")
    a.opt("errors", None if errors is None else [_json(e) for e in errors], "jsonb[]")
    a.opt("queues", None if queues is None else list(queues), "text[]").opt("max_jobs", max_jobs, "integer")
    return _jobs_call("jobq_fail_and_checkout", a, w)


def checkpoint(job_id: int, worker: uuid.UUID | str, step: str, value: Any) -> Call[bool]:
    """Records ``value`` under ``step`` in the running job's checkpoints
    (``jobq_checkpoint``), in the connection's transaction. False when the job is not
    executing under ``worker`` (nothing changed)."""
    a = _Args().pos(job_id, "bigint").pos(_uuid(worker), "uuid").pos(step, "text").pos(Jsonb(value), "jsonb")
    return _scalar_call("jobq_checkpoint", a, bool)


def snooze(job_id: int, worker: uuid.UUID | str, until: datetime) -> Call[bool]:
    """Durable sleep (``jobq_snooze``): the running job goes back to ready, due at ``until``;
    its attempt does not count. False when the job is not executing under ``worker``."""
    a = _Args().pos(job_id, "bigint").pos(_uuid(worker), "uuid").pos(until, "timestamptz")
    return _scalar_call("jobq_snooze", a, bool)


def await_jobs(job_id: int, worker: uuid.UUID | str, jobs: Sequence[int]) -> Call[str | None]:
    """Fan-in (``jobq_await_jobs``): ``"finished"`` when every listed job is finished (the job
    keeps running), else ``"waiting"``: the job is blocked until the last one finishes. None
    when the job is not executing under ``worker``."""
    a = _Args().pos(job_id, "bigint").pos(_uuid(worker), "uuid").pos(list(jobs), "bigint[]")
    return _scalar_call("jobq_await_jobs", a, _opt_str)


def await_event(
    job_id: int, worker: uuid.UUID | str, event: str, timeout: float | timedelta | None = None
) -> Call[str | None]:
    """Waits for an event (``jobq_await_event``): ``"emitted"`` when it was emitted already
    (its payload is now the checkpoint ``event:<name>``; the job keeps running), else
    ``"waiting"``: the job is blocked until the event is emitted or ``timeout`` passes. None
    when the job is not executing under ``worker``."""
    a = _Args().pos(job_id, "bigint").pos(_uuid(worker), "uuid").pos(event, "text")
    a.opt("timeout", _interval(timeout), "interval")
    return _scalar_call("jobq_await_event", a, _opt_str)


def heartbeat_timeout() -> Call[timedelta]:
    """The server's ``jobq.heartbeat_timeout`` (30 s when the setting is not defined)."""
    return Call(
        "SELECT current_setting('jobq.heartbeat_timeout', true)::interval AS v",
        (),
        lambda rows: _scalar(rows) or timedelta(seconds=30),
    )


def server_edition() -> Call[str]:
    """Which edition of jobq the database has (``jobq_version()``): ``"extension"`` or
    ``"sql"``. A server older than 0.4 has no ``jobq_version`` (``42883``): the caller takes
    that for ``"extension"``."""
    return Call("SELECT edition AS v FROM jobq_version()", (), lambda rows: str(_scalar(rows)))


def reap_interval() -> Call[timedelta]:
    """The server's ``jobq.reap_interval`` (1 s when the setting is not defined or empty, as
    the SQL edition reads it)."""
    return Call(
        "SELECT nullif(current_setting('jobq.reap_interval', true), '')::interval AS v",
        (),
        lambda rows: timedelta(seconds=1) if _scalar(rows) is None else _scalar(rows),
    )
