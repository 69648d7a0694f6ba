"""The asyncio producer and operator API: the functions of :mod:`jobq.client` as coroutines,
each taking a psycopg ``AsyncConnection`` or ``AsyncCursor`` first::

    async with await psycopg.AsyncConnection.connect(dsn) as aconn:
        async with aconn.transaction():
            await aconn.execute("INSERT INTO orders ...")
            await jobq.aio.enqueue(aconn, "mail", {"order": 42}, priority=5)

Same arguments, same statements, same results and errors as the synchronous functions.
(The worker for asyncio handlers is :class:`jobq.Worker` itself: ``await worker.run_async()``.)
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Concatenate, Coroutine, ParamSpec, TypeVar, Union

import psycopg

from . import _calls
from .errors import from_psycopg

__all__ = [
    "AsyncTarget",
    "enqueue", "enqueue_batch", "cancel", "retry", "pause", "resume",
    "schedule", "unschedule", "set_rate_limit",
    "acquire_lock", "release_lock", "lock_holder", "reap", "queue_stats",
    "register_worker", "heartbeat", "unregister_worker", "stop_checkouts",
    "checkout", "complete", "fail", "complete_many", "fail_many",
    "complete_and_checkout", "fail_and_checkout", "heartbeat_timeout",
    "results", "enqueue_graph", "emit_event", "checkpoint", "snooze", "await_jobs", "await_event",
]

#: What the coroutines run on: a psycopg async connection or a cursor of one.
AsyncTarget = Union["psycopg.AsyncConnection[Any]", "psycopg.AsyncCursor[Any]"]

T = TypeVar("T")
P = ParamSpec("P")


async def execute(target: AsyncTarget, call: _calls.Call[T]) -> T:
    """Runs one built call on ``target`` and decodes its rows."""
    conn = target if isinstance(target, psycopg.AsyncConnection) else target.connection
    try:
        async with conn.cursor(row_factory=call.row_factory) as cur:
            await cur.execute(call.sql, call.params)
            rows = await cur.fetchall()
    except psycopg.Error as e:
        if e.sqlstate:
            raise from_psycopg(e) from e
        raise
    return call.decode(rows)


def _result(annotation: Any) -> Any:
    """``"Call[X]"`` -> ``"X"``: what the bound function returns."""
    text = str(annotation)
    return text[5:-1] if text.startswith("Call[") and text.endswith("]") else annotation


def _bind(builder: Callable[P, _calls.Call[T]]) -> Callable[Concatenate[AsyncTarget, P], Coroutine[Any, Any, T]]:
    async def run(conn: AsyncTarget, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await execute(conn, builder(*args, **kwargs))

    functools.update_wrapper(run, builder)
    run.__module__ = __name__
    signature = inspect.signature(builder)
    conn = inspect.Parameter("conn", inspect.Parameter.POSITIONAL_ONLY, annotation="AsyncTarget")
    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[conn, *signature.parameters.values()], return_annotation=_result(signature.return_annotation)
    )
    del run.__wrapped__  # type: ignore[attr-defined]
    return run


enqueue = _bind(_calls.enqueue)
enqueue_batch = _bind(_calls.enqueue_batch)
cancel = _bind(_calls.cancel)
retry = _bind(_calls.retry)
results = _bind(_calls.results)
enqueue_graph = _bind(_calls.enqueue_graph)
emit_event = _bind(_calls.emit_event)
pause = _bind(_calls.pause)
resume = _bind(_calls.resume)
schedule = _bind(_calls.schedule)
unschedule = _bind(_calls.unschedule)
set_rate_limit = _bind(_calls.set_rate_limit)
acquire_lock = _bind(_calls.acquire_lock)
release_lock = _bind(_calls.release_lock)
lock_holder = _bind(_calls.lock_holder)
reap = _bind(_calls.reap)
queue_stats = _bind(_calls.queue_stats)
register_worker = _bind(_calls.register_worker)
heartbeat = _bind(_calls.heartbeat)
unregister_worker = _bind(_calls.unregister_worker)
stop_checkouts = _bind(_calls.stop_checkouts)
checkout = _bind(_calls.checkout)
complete = _bind(_calls.complete)
fail = _bind(_calls.fail)
complete_many = _bind(_calls.complete_many)
fail_many = _bind(_calls.fail_many)
complete_and_checkout = _bind(_calls.complete_and_checkout)
fail_and_checkout = _bind(_calls.fail_and_checkout)
checkpoint = _bind(_calls.checkpoint)
snooze = _bind(_calls.snooze)
await_jobs = _bind(_calls.await_jobs)
await_event = _bind(_calls.await_event)
heartbeat_timeout = _bind(_calls.heartbeat_timeout)
