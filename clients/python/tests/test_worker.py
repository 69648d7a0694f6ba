"""jobq.Worker in the test process: handlers, concurrency, results and errors, retries,
cancellation, reaping, the JQ002 fallback, and pooled mode behind PgBouncer."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import timedelta
from typing import Any, Callable

import psycopg
import pytest

import jobq

from .conftest import (
    DSN,
    EDITION,
    POOLER_DSN,
    WAITING_EVENTS,
    RunningWorker,
    ServerLog,
    await_waiting_checkout,
    dsn_as,
    job_row,
    wait_state,
    wait_until,
)

Start = Callable[[jobq.Worker], RunningWorker]


def test_a_committed_job_runs_and_a_rolled_back_one_never_does(
    start_worker: Start, admin: Any, queue: str
) -> None:
    seen: list[Any] = []
    worker = jobq.Worker(DSN, [queue], concurrency=2)

    def ran(job: jobq.Job) -> dict[str, Any]:
        seen.append(job.payload)
        return {"ran": job.payload["n"]}

    worker.add_handler(queue, ran)
    start_worker(worker)
    with psycopg.connect(DSN) as conn:
        lost = jobq.enqueue(conn, queue, {"n": "rolled back"})
        conn.rollback()
        kept = jobq.enqueue(conn, queue, {"n": "committed"})
        conn.commit()
    [row] = wait_state(admin, [kept], "completed")  # type: ignore[list-item]
    assert row["result"] == {"ran": "committed"} and row["attempt"] == 1
    assert admin.execute("SELECT count(*) AS n FROM jobq.jobs WHERE id = %s", (lost,)).fetchone()["n"] == 0
    assert seen == [{"n": "committed"}]


def test_n_sync_handlers_run_at_once(start_worker: Start, conn: Any, admin: Any, queue: str) -> None:
    n = 6
    barrier = threading.Barrier(n, timeout=15)  # breaks unless all n are in flight together
    worker = jobq.Worker(DSN, [queue], concurrency=n)

    @worker.handler("meet")
    def meet(job: jobq.Job) -> dict[str, int]:
        return {"arrived": barrier.wait()}

    start_worker(worker)
    ids = jobq.enqueue_batch(conn, queue, [{}] * n, kind="meet")
    rows = wait_state(admin, ids, "completed")
    assert all(r["attempt"] == 1 and r["last_error"] is None for r in rows)
    assert sorted(r["result"]["arrived"] for r in rows) == list(range(n))


def test_n_async_handlers_run_at_once(start_worker: Start, conn: Any, admin: Any, queue: str) -> None:
    n = 8
    arrived: list[int] = []
    everyone: list[asyncio.Event] = []
    worker = jobq.Worker(DSN, [queue], concurrency=n)

    @worker.handler("meet")
    async def meet(job: jobq.Job) -> int:
        if not everyone:
            everyone.append(asyncio.Event())
        arrived.append(job.id)
        if len(arrived) == n:
            everyone[0].set()
        await asyncio.wait_for(everyone[0].wait(), 15)  # times out unless all n are in flight
        return len(arrived)

    start_worker(worker)
    ids = jobq.enqueue_batch(conn, queue, [{}] * n, kind="meet")
    rows = wait_state(admin, ids, "completed")
    assert all(r["attempt"] == 1 and r["result"] == n for r in rows)


def test_results_errors_no_handler_and_retry_delays(start_worker: Start, conn: Any, admin: Any, queue: str) -> None:
    worker = jobq.Worker(DSN, [queue], concurrency=4)

    @worker.handler("add")
    def add(job: jobq.Job) -> dict[str, int]:
        return {"sum": job.payload["a"] + job.payload["b"]}

    @worker.handler("broken")
    def broken(job: jobq.Job) -> None:
        raise ValueError(f"bad input {job.payload}")

    @worker.handler("flaky")
    def flaky(job: jobq.Job) -> dict[str, int]:
        if job.attempt == 1:
            try:
                raise TimeoutError("upstream timed out")
            except TimeoutError as e:
                raise jobq.RetryIn(1.5) from e
        return {"attempt": job.attempt}

    @worker.handler("later")
    async def later(job: jobq.Job) -> None:
        raise jobq.RetryIn(timedelta(minutes=5), "not yet")

    start_worker(worker)
    added = jobq.enqueue(conn, queue, {"a": 1, "b": 2}, kind="add")
    failed = jobq.enqueue(conn, queue, {"x": 1}, kind="broken", max_attempts=1)
    nobody = jobq.enqueue(conn, queue, kind="unknown")
    retried = jobq.enqueue(conn, queue, kind="flaky")
    delayed = jobq.enqueue(conn, queue, kind="later")
    assert added is not None and failed is not None and nobody is not None and retried is not None and delayed is not None

    assert wait_state(admin, [added], "completed")[0]["result"] == {"sum": 3}
    dead = wait_state(admin, [failed], "dead")[0]
    assert dead["last_error"] == {"type": "ValueError", "message": "bad input {'x': 1}"}
    # No handler: failed as NoHandler and discarded, though attempts remain.
    unhandled = wait_state(admin, [nobody], "dead")[0]
    assert unhandled["last_error"]["type"] == "NoHandler" and unhandled["attempt"] == 1
    assert unhandled["max_attempts"] == 25
    # RetryIn(1.5) from a TimeoutError: the cause is recorded, the failure made the job due
    # 1.5 s after it (both times are the server's clock at the failure), and the second attempt
    # started no sooner.
    done = wait_state(admin, [retried], "completed")[0]
    assert done["result"] == {"attempt": 2}
    assert done["last_error"] == {"type": "TimeoutError", "message": "upstream timed out"}
    gap = admin.execute(
        "SELECT run_at - (errors->0->>'at')::timestamptz AS delay, started_at >= run_at AS after"
        " FROM jobq.jobs WHERE id = %s",
        (retried,),
    ).fetchone()
    assert (gap["delay"], gap["after"]) == (timedelta(seconds=1.5), True)
    # RetryIn(5 minutes): back to ready, due in five minutes.
    row = wait_until(lambda: (r := job_row(admin, delayed))["last_error"] is not None and r, what="the delayed failure")
    assert row["state"] == "ready" and row["last_error"] == {"type": "RetryIn", "message": "not yet"}
    wait = admin.execute(
        "SELECT run_at - (errors->0->>'at')::timestamptz AS wait FROM jobq.jobs WHERE id = %s", (delayed,)
    ).fetchone()["wait"]
    assert wait == timedelta(minutes=5)


def test_a_job_without_kind_is_routed_by_its_queue(start_worker: Start, conn: Any, admin: Any, queue: str) -> None:
    worker = jobq.Worker(DSN, [queue], concurrency=1, handlers={queue: lambda job: "by queue"})
    start_worker(worker)
    job = jobq.enqueue(conn, queue)
    assert job is not None
    assert wait_state(admin, [job], "completed")[0]["result"] == "by queue"


def test_a_cancel_reaches_a_running_sync_handler(start_worker: Start, conn: Any, admin: Any, queue: str) -> None:
    started = threading.Event()
    worker = jobq.Worker(DSN, [queue], concurrency=1)

    @worker.handler(queue)
    def long(job: jobq.Job) -> str:
        started.set()
        if job.wait_cancelled(30):
            job.raise_if_cancelled()
        return "ran to the end"

    start_worker(worker)
    job = jobq.enqueue(conn, queue)
    assert job is not None
    assert started.wait(10)
    assert jobq.cancel(conn, job) == "executing"
    row = wait_state(admin, [job], "cancelled")[0]
    assert row["last_error"]["type"] == "Cancelled" and row["result"] is None


def test_a_cancel_reaches_a_running_async_handler(start_worker: Start, conn: Any, admin: Any, queue: str) -> None:
    started = threading.Event()
    worker = jobq.Worker(DSN, [queue], concurrency=2)

    @worker.handler(queue)
    async def long(job: jobq.Job) -> str:
        started.set()
        await asyncio.sleep(30)
        return "ran to the end"

    start_worker(worker)
    job = jobq.enqueue(conn, queue)
    assert job is not None
    assert started.wait(10)
    assert jobq.cancel(conn, job) == "executing"
    row = wait_state(admin, [job], "cancelled")[0]
    assert row["last_error"]["type"] == "Cancelled"


def test_a_reaped_worker_drops_its_jobs_and_registers_again(start_worker: Start, conn: Any, admin: Any, queue: str) -> None:
    runs: list[tuple[int, int, bool]] = []  # (job, attempt, saw the signal)
    worker = jobq.Worker(DSN, [queue], concurrency=2)

    @worker.handler(queue)
    def handle(job: jobq.Job) -> dict[str, Any]:
        if len([r for r in runs if r[0] == job.id]) == 0:
            aborted = job.wait_cancelled(30)  # the first run waits for the worker to lose it
            runs.append((job.id, job.attempt, aborted))
            return {"run": "first"}  # must not be reported
        runs.append((job.id, job.attempt, job.cancelled))
        return {"run": "second", "worker": str(job.worker_id)}

    running = start_worker(worker)
    first_id = worker.worker_id
    ids = jobq.enqueue_batch(conn, queue, [{}, {}])
    wait_state(admin, ids, "executing")
    # As an administrator, unregister the worker behind its back: its jobs go back to the
    # queue, and its next call gets JQ001.
    assert admin.execute("SELECT jobq_unregister_worker(%s) AS n", (first_id,)).fetchone()["n"] == 2
    rows = wait_state(admin, ids, "completed")
    second_id = worker.worker_id
    assert second_id is not None and second_id != first_id
    assert [r["result"] for r in rows] == [{"run": "second", "worker": str(second_id)}] * 2
    assert all(r["worker_id"] == second_id for r in rows)
    assert sorted(r for r in runs if r[2]) == sorted((i, 1, True) for i in ids)  # both first runs were told
    assert admin.execute("SELECT count(*) AS n FROM jobq.workers WHERE id = %s", (first_id,)).fetchone()["n"] == 0
    running.stop()
    assert admin.execute("SELECT count(*) AS n FROM jobq.workers WHERE id = %s", (second_id,)).fetchone()["n"] == 0


def test_a_job_finished_elsewhere_takes_the_jq002_fallback(
    start_worker: Start, conn: Any, admin: Any, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobq.worker")
    release = threading.Event()
    worker = jobq.Worker(DSN, [queue], concurrency=1)

    @worker.handler(queue)
    def handle(job: jobq.Job) -> dict[str, int]:
        if job.attempt == 1:
            assert release.wait(20)
        return {"attempt": job.attempt}

    start_worker(worker)
    job = jobq.enqueue(conn, queue)
    wait_state(admin, [job], "executing")  # type: ignore[list-item]
    # The server takes the job back while its handler runs (a heartbeat holding nothing), so
    # the worker's complete-and-checkout of it is refused with JQ002.
    admin.execute("SELECT jobq_heartbeat(%s, '{}')", (worker.worker_id,))
    assert job_row(admin, job)["state"] == "ready"  # type: ignore[arg-type]
    release.set()
    row = wait_state(admin, [job], "completed")[0]  # type: ignore[list-item]
    assert row["result"] == {"attempt": 2}
    assert any("no longer this worker's" in r.getMessage() for r in caplog.records)


def test_pooled_mode_behind_pgbouncer(start_worker: Start, admin: Any, queue: str) -> None:
    worker = jobq.Worker(POOLER_DSN, [queue], concurrency=3, pooled=True, wait=1)

    @worker.handler("quick")
    def quick(job: jobq.Job) -> dict[str, Any]:
        return {"n": job.payload["n"]}

    @worker.handler("slow")
    def slow(job: jobq.Job) -> str:
        time.sleep(3.5)  # longer than jobq.heartbeat_timeout: only heartbeats keep it
        return "slow"

    @worker.handler("fails")
    def fails(job: jobq.Job) -> None:
        raise RuntimeError("through the pooler")

    running = start_worker(worker)
    wid = worker.worker_id
    bound = admin.execute("SELECT backend_pid FROM jobq.workers WHERE id = %s", (wid,)).fetchone()
    assert bound == {"backend_pid": None}  # not bound to a session
    with psycopg.connect(POOLER_DSN, autocommit=True, prepare_threshold=None) as pooled:
        slow_id = jobq.enqueue(pooled, queue, kind="slow")
        ids = jobq.enqueue_batch(pooled, queue, [{"n": n} for n in range(20)], kind="quick")
        failing = jobq.enqueue(pooled, queue, kind="fails", max_attempts=1)
    rows = wait_state(admin, ids, "completed")
    assert [r["result"] for r in rows] == [{"n": n} for n in range(20)]
    assert wait_state(admin, [failing], "dead")[0]["last_error"] == {"type": "RuntimeError", "message": "through the pooler"}  # type: ignore[list-item]
    slow_row = wait_state(admin, [slow_id], "completed")[0]  # type: ignore[list-item]
    assert slow_row["attempt"] == 1 and slow_row["interrupted_at"] is None and slow_row["worker_id"] == wid
    running.stop()
    assert admin.execute("SELECT count(*) AS n FROM jobq.workers WHERE id = %s", (wid,)).fetchone()["n"] == 0


def test_stop_drains_the_jobs_in_flight(conn: Any, admin: Any, queue: str) -> None:
    started = threading.Barrier(3, timeout=10)
    release = threading.Event()
    worker = jobq.Worker(DSN, [queue], concurrency=3)

    @worker.handler(queue)
    def hold(job: jobq.Job) -> str:
        started.wait()
        assert release.wait(20)
        return "drained"

    running = RunningWorker(worker).start()
    wid = worker.worker_id
    ids = jobq.enqueue_batch(conn, queue, [{}, {}])
    # All handlers are in (not only claimed: a job claimed as the stop comes is never started);
    # then the stop, which lets them finish.
    started.wait()
    worker.stop()
    release.set()
    running.thread.join(20)
    assert not running.thread.is_alive() and running.error is None
    assert [r["result"] for r in wait_state(admin, ids, "completed", timeout=1)] == ["drained", "drained"]
    assert admin.execute("SELECT count(*) AS n FROM jobq.workers WHERE id = %s", (wid,)).fetchone()["n"] == 0


@pytest.mark.parametrize("pooled", [False, True])
def test_stopping_an_idle_worker_logs_no_error_on_the_server(admin: Any, queue: str, pooled: bool) -> None:
    """The waiting checkout is ended by jobq_stop_checkouts, not cancelled: a clean shutdown
    leaves no ERROR in the server's log. (The wait is longer than RunningWorker.stop waits:
    a worker whose wait ran out instead would fail there.)"""
    log = ServerLog()
    name = f"idle-{queue[-8:]}"
    worker = jobq.Worker(POOLER_DSN if pooled else DSN, [queue], name=name, wait=60, handle_signals=False)
    running = RunningWorker(worker).start()
    if not pooled:  # through PgBouncer the server's session carries PgBouncer's name
        await_waiting_checkout(admin, name)
    else:
        wait_until(lambda: admin.execute(
            "SELECT count(*) > 0 AS yes FROM pg_stat_activity WHERE state = 'active' AND wait_event = ANY(%s)"
            " AND usename = 'jobq_test_app'", (WAITING_EVENTS,)).fetchone()["yes"],
            what="the pooled worker to wait inside the server")
    running.stop()
    written = log.since()
    assert "ERROR" not in written and "canceling statement" not in written, written


def test_a_job_committed_as_the_worker_stops_is_never_started(conn: Any, admin: Any, queue: str) -> None:
    """stop() and a job's commit at the same moment, many times: whichever reaches the server
    first, the job is not started; it is left ready, its attempt not counted, for another
    worker."""
    for round_ in range(12):
        ran: list[int] = []
        name = f"stopping-{round_}-{queue[-8:]}"
        worker = jobq.Worker(DSN, [queue], name=name, wait=60, handle_signals=False)
        worker.add_handler(queue, lambda job: ran.append(job.id))
        running = RunningWorker(worker).start()
        await_waiting_checkout(admin, name)
        worker.stop()
        job_id = jobq.enqueue(conn, queue, {"round": round_})
        assert job_id is not None
        running.thread.join(20)
        assert not running.thread.is_alive() and running.error is None
        assert ran == [], f"round {round_}: the stopping worker started {ran}"
        row = job_row(admin, job_id)
        assert (row["state"], row["attempt"], row["interrupted_at"]) == ("ready", 0, None), f"round {round_}: {row}"
        assert jobq.cancel(conn, job_id) == "cancelled"  # not for the next round's worker


def test_a_worker_of_a_role_without_jobq_worker_fails_to_start() -> None:
    worker = jobq.Worker(dsn_as("jobq_test_producer"), ["anything"], handle_signals=False)
    running = RunningWorker(worker)
    running.thread.start()
    running.thread.join(20)
    assert not running.thread.is_alive()
    assert isinstance(running.error, jobq.PermissionDenied) and running.error.sqlstate == "42501"


def test_a_lost_connection_reconnects_and_registers_again(start_worker: Start, conn: Any, admin: Any, queue: str) -> None:
    worker = jobq.Worker(DSN, [queue], concurrency=1, name=f"{queue}-w")
    worker.add_handler(queue, lambda job: job.payload)
    start_worker(worker)
    first_id = worker.worker_id
    before = jobq.enqueue(conn, queue, "before")
    assert wait_state(admin, [before], "completed")[0]["result"] == "before"  # type: ignore[list-item]
    # The server ends the session that registered the worker: bound to it, the worker is dead
    # at once; the worker reconnects (after 1 s) and registers again.
    killed = admin.execute(
        "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity WHERE application_name = %s",
        (f"{queue}-w-jobs",),
    ).fetchone()["n"]
    assert killed == 1
    wait_until(lambda: worker.worker_id not in (None, first_id), what="the worker to register again")
    after = jobq.enqueue(conn, queue, "after")
    row = wait_state(admin, [after], "completed")[0]  # type: ignore[list-item]
    assert row["result"] == "after" and row["worker_id"] == worker.worker_id


def test_holding_reaches_the_server_while_the_worker_idles_in_waiting_checkouts(
    start_worker: Start, conn: Any, admin: Any, queue: str
) -> None:
    # Free slots: the worker is nearly always inside a waiting checkout, when its periodic
    # heartbeat carries no list. A claim made for it whose reply it never got must still go
    # back to the queue, through the list it sends between two checkouts.
    worker = jobq.Worker(DSN, [queue], concurrency=4, wait=1)
    worker.add_handler(queue, lambda job: "ran")
    start_worker(worker)
    wid = worker.worker_id
    other = f"{queue}-other"  # a queue this worker does not take
    stray = jobq.enqueue(conn, other)
    claimed = admin.execute(
        "SELECT id FROM jobq_checkout(%s::uuid, ARRAY[%s])", (worker.worker_id, other)
    ).fetchall()
    assert [r["id"] for r in claimed] == [stray]
    assert job_row(admin, stray)["state"] == "executing"  # type: ignore[arg-type]
    row = wait_until(
        lambda: (r := job_row(admin, stray))["state"] == "ready" and r,  # type: ignore[arg-type]
        timeout=10,
        what="the claim the worker never received to go back to ready",
    )
    assert row["interrupted_at"] is not None and row["attempt"] == 1
    # The worker goes on as it was: the same registration runs the next job of its queue.
    after = jobq.enqueue(conn, queue)
    done = wait_state(admin, [after], "completed")[0]  # type: ignore[list-item]
    assert done["result"] == "ran" and done["worker_id"] == wid == worker.worker_id


def test_a_dead_workers_job_comes_back_to_a_running_worker_with_nobody_reaping(
    start_worker: Start, conn: Any, admin: Any, queue: str
) -> None:
    """The SQL edition has no background worker: the passes that reap dead workers are run by
    the heartbeats of the workers (at least every jobq.reap_interval there), so a database
    whose only activity is this library's worker is served. Nothing here calls jobq_reap().
    On the extension its background worker reaps too: the same holds, in both editions."""
    # A second worker, registered in SQL and not bound to its session, takes a job of the
    # queue and dies: it never beats again.
    doomed = jobq.register_worker(conn, "doomed", bind_to_session=False)
    job = jobq.enqueue(conn, queue, {"n": 1})
    assert [j.id for j in jobq.checkout(conn, doomed, [queue])] == [job]
    worker = jobq.Worker(DSN, [queue], concurrency=2)
    worker.add_handler(queue, lambda j: {"attempt": j.attempt})
    start_worker(worker)
    assert worker.server_edition == EDITION
    # Once jobq.heartbeat_timeout (3 s) has passed, a pass reaps the dead worker and requeues
    # its job, which the running worker then takes and completes.
    row = wait_state(admin, [job], "completed")[0]  # type: ignore[list-item]
    assert row["result"] == {"attempt": 2} and row["worker_id"] == worker.worker_id
    assert row["interrupted_at"] is not None
    assert admin.execute("SELECT count(*) AS n FROM jobq.workers WHERE id = %s", (doomed,)).fetchone()["n"] == 0
