"""bench/clients.sh, Python: one worker process over one queue of no-op jobs, C jobs in flight.

    python3 bench/clients/python/worker.py raw     DSN QUEUE C
    python3 bench/clients/python/worker.py shaped  DSN QUEUE C
    python3 bench/clients/python/worker.py threads DSN QUEUE C
    python3 bench/clients/python/worker.py library DSN QUEUE C

raw: the hand-written loop on psycopg 3 (autocommit): register, wait inside the server for up
to C jobs (jobq_checkout with wait), run them with a no-op, then
jobq_complete_and_checkout(worker, done, NULL, ARRAY[queue], C) over and over: each call
completes the jobs in hand and takes the next C (psycopg prepares the statement server-side
after its fifth run). When a call returns nothing, back to the waiting checkout. A heartbeat
every heartbeat_timeout / 3 between calls.

shaped: the raw loop in the library's shape, with none of its machinery: the same calls on
psycopg's asyncio connection (an asyncio event loop, as the library runs), reading the job
columns the library reads (jobq._calls._JOB_COLUMNS). What a worker of this model costs before
any of the library's own work.

threads: the raw loop with a threaded worker's handoff and none of its bookkeeping: the same
calls on the same synchronous connection, reading the library's columns, each job submitted to
a thread pool of C threads and the next call made once all C have ended.

library: the jobq package's Worker (clients/python, on PYTHONPATH) with concurrency=C and one
no-op `async def` handler for the queue.

Each runs until SIGTERM (bench/clients.sh sends it once the queue is drained).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

import psycopg

RAW_COLUMNS = "id, queue, kind, payload, attempt"
# The loops' calls: registration (and the heartbeat period), then the two checkouts, reading {columns}.
REGISTER = (
    "SELECT jobq_register_worker(%s, bind_to_session => true),"
    " extract(epoch FROM current_setting('jobq.heartbeat_timeout')::interval)::float8"
)
FUSED = "SELECT {columns} FROM jobq_complete_and_checkout(%s, %s::bigint[], NULL, %s::text[], %s)"
WAITING = "SELECT {columns} FROM jobq_checkout(%s, %s::text[], %s, wait => interval '1 s')"


def sync_loop(dsn: str, queue: str, c: int, mode: str, columns: str, run: Callable[[list[Any]], list[int]]) -> None:
    """The synchronous loop of raw and threads: `run` takes a call's rows and returns the ids
    of the jobs it ran, which the next call completes."""
    fused, waiting = FUSED.format(columns=columns), WAITING.format(columns=columns)
    with psycopg.connect(dsn, autocommit=True) as conn:
        worker, timeout = conn.execute(REGISTER, (f"bench-python-{mode}-{os.getpid()}",)).fetchone()  # type: ignore[misc]
        beat = timeout / 3
        next_beat = time.monotonic() + beat
        queues = [queue]
        done: list[int] = []
        while True:
            rows = conn.execute(fused, (worker, done, queues, c)).fetchall() if done else []
            if not rows:
                rows = conn.execute(waiting, (worker, queues, c)).fetchall()
            done = run(rows)
            if time.monotonic() >= next_beat:
                conn.execute("SELECT jobq_heartbeat(%s)", (worker,))
                next_beat = time.monotonic() + beat


def raw(dsn: str, queue: str, c: int) -> None:
    def run(rows: list[Any]) -> list[int]:
        return [row[0] for row in rows]  # the no-op handler, inline

    sync_loop(dsn, queue, c, "raw", RAW_COLUMNS, run)


def shaped(dsn: str, queue: str, c: int) -> None:
    import asyncio

    from jobq._calls import _JOB_COLUMNS

    fused, waiting = FUSED.format(columns=_JOB_COLUMNS), WAITING.format(columns=_JOB_COLUMNS)

    async def loop() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            cur = await conn.execute(REGISTER, (f"bench-python-shaped-{os.getpid()}",))
            worker, timeout = await cur.fetchone()  # type: ignore[misc]
            beat = timeout / 3
            next_beat = time.monotonic() + beat
            queues = [queue]
            done: list[int] = []
            while True:
                rows = await (await conn.execute(fused, (worker, done, queues, c))).fetchall() if done else []
                if not rows:
                    rows = await (await conn.execute(waiting, (worker, queues, c))).fetchall()
                done = [row[0] for row in rows]  # the no-op handler
                if time.monotonic() >= next_beat:
                    await conn.execute("SELECT jobq_heartbeat(%s)", (worker,))
                    next_beat = time.monotonic() + beat

    asyncio.run(loop())


def threads(dsn: str, queue: str, c: int) -> None:
    import queue as queues_
    from concurrent.futures import ThreadPoolExecutor

    from jobq._calls import _JOB_COLUMNS

    ended: queues_.SimpleQueue[int] = queues_.SimpleQueue()

    def noop(job_id: int) -> None:
        ended.put(job_id)  # the no-op handler, in a thread of the pool

    with ThreadPoolExecutor(c) as pool:

        def run(rows: list[Any]) -> list[int]:
            for row in rows:
                pool.submit(noop, row[0])
            return [ended.get() for _ in rows]

        sync_loop(dsn, queue, c, "threads", _JOB_COLUMNS, run)


def library(dsn: str, queue: str, c: int) -> None:
    import jobq

    worker = jobq.Worker(dsn, queues=[queue], concurrency=c, name=f"bench-python-library-{os.getpid()}")

    @worker.handler(queue)
    async def noop(job: jobq.Job) -> None:
        return None

    worker.run()


if __name__ == "__main__":
    modes = {"raw": raw, "shaped": shaped, "threads": threads, "library": library}
    if len(sys.argv) != 5 or sys.argv[1] not in modes:
        sys.exit("usage: worker.py raw|shaped|threads|library DSN QUEUE CONCURRENCY")
    mode, dsn, queue, c = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    modes[mode](dsn, queue, c)
