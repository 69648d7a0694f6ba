"""The producer/operator API on the caller's connection: every call, sync and async, and every
SQLSTATE mapped to its exception."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import jobq

from .conftest import DSN, dsn_as, job_row


def test_enqueue_sends_only_the_options_set(conn: psycopg.Connection[Any], admin: Any, queue: str) -> None:
    plain = jobq.enqueue(conn, queue)
    assert isinstance(plain, int)
    row = job_row(admin, plain)
    # Server defaults: payload {}, priority 0, 25 attempts, no keys.
    assert (row["payload"], row["priority"], row["max_attempts"], row["kind"]) == ({}, 0, 25, None)

    run_at = datetime.now(timezone.utc) + timedelta(hours=1)
    full = jobq.enqueue(
        conn, queue, {"to": 1}, kind="mail", priority=-5, run_at=run_at, max_attempts=3,
        unique_key=f"{queue}-u", unique_strategy="until_executing", concurrency_key=f"{queue}-c",
        concurrency_limit=2, rate_key=f"{queue}-r", fairness_key="tenant-7",
    )
    assert full is not None
    row = job_row(admin, full)
    assert row["payload"] == {"to": 1} and row["kind"] == "mail" and row["priority"] == -5
    assert row["run_at"] == run_at and row["max_attempts"] == 3
    assert (row["unique_key"], row["unique_strategy"]) == (f"{queue}-u", "until_executing")
    assert (row["concurrency_key"], row["concurrency_limit"], row["rate_key"]) == (f"{queue}-c", 2, f"{queue}-r")
    assert row["fairness_key"] == "tenant-7"


def test_unique_conflicts_discard_and_replace(conn: psycopg.Connection[Any], admin: Any, queue: str) -> None:
    key = f"{queue}-key"
    first = jobq.enqueue(conn, queue, {"v": 1}, unique_key=key)
    assert first is not None
    with pytest.raises(jobq.UniqueConflict) as caught:
        jobq.enqueue(conn, queue, {"v": 2}, unique_key=key)
    assert caught.value.job_id == first and caught.value.sqlstate == "23505"
    assert caught.value.lock_worker_id is None
    assert isinstance(caught.value.__cause__, psycopg.errors.UniqueViolation)
    assert jobq.enqueue(conn, queue, {"v": 3}, unique_key=key, on_conflict="discard") is None
    assert jobq.enqueue(conn, queue, {"v": 4}, unique_key=key, on_conflict="replace") == first
    assert job_row(admin, first)["payload"] == {"v": 4}


def test_a_unique_key_held_by_a_lock_names_the_worker(conn: psycopg.Connection[Any], queue: str) -> None:
    worker = jobq.register_worker(conn, "lock-holder")
    key = f"{queue}-lock"
    assert jobq.acquire_lock(conn, key, worker, ttl=60) is True
    with pytest.raises(jobq.UniqueConflict) as caught:
        jobq.enqueue(conn, queue, unique_key=key)
    assert caught.value.job_id is None and caught.value.lock_worker_id == worker
    jobq.unregister_worker(conn, worker)


def test_a_rolled_back_transaction_leaves_no_job(admin: Any, queue: str) -> None:
    with psycopg.connect(DSN) as conn:  # not autocommit: the calls run in its transaction
        kept = jobq.enqueue(conn, queue, {"kept": True})
        conn.commit()
        lost = jobq.enqueue(conn, queue, {"kept": False})
        assert lost is not None
        conn.rollback()
    job_row(admin, kept)  # type: ignore[arg-type]
    assert admin.execute("SELECT count(*) AS n FROM jobq.jobs WHERE id = %s", (lost,)).fetchone()["n"] == 0


def test_a_cursor_works_and_is_left_alone(admin: Any, queue: str) -> None:
    with psycopg.connect(DSN, row_factory=dict_row) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT 41 + 1 AS answer")
            job_id = jobq.enqueue(cur, queue, {"from": "cursor"})
            assert cur.fetchone() == {"answer": 42}  # the caller's result is still there
        conn.commit()
    assert job_row(admin, job_id)["payload"] == {"from": "cursor"}  # type: ignore[arg-type]


def test_batch_cancel_retry(conn: psycopg.Connection[Any], admin: Any, queue: str) -> None:
    ids = jobq.enqueue_batch(conn, queue, [{"n": 1}, [2], "three"], kind="bulk", priority=4, max_attempts=2)
    assert len(ids) == 3 and ids == sorted(ids)
    assert [job_row(admin, i)["payload"] for i in ids] == [{"n": 1}, [2], "three"]
    assert {job_row(admin, i)["kind"] for i in ids} == {"bulk"}
    assert jobq.enqueue_batch(conn, queue, []) == []
    assert jobq.cancel(conn, ids[0]) == "cancelled"
    assert jobq.cancel(conn, -1) is None
    assert jobq.retry(conn, ids[0]) is True
    assert jobq.retry(conn, ids[1]) is False  # not dead or cancelled
    assert job_row(admin, ids[0])["state"] == "ready"


def test_worker_calls_one_by_one(conn: psycopg.Connection[Any], admin: Any, queue: str) -> None:
    worker = jobq.register_worker(conn, "by-hand", {"purpose": "test"})
    assert isinstance(worker, uuid.UUID)
    ids = jobq.enqueue_batch(conn, queue, [{"i": i} for i in range(6)])
    jobs = jobq.checkout(conn, worker, [queue], 2)
    assert [j.id for j in jobs] == ids[:2] and all(j.attempt == 1 and j.worker_id == worker for j in jobs)
    assert jobs[0].payload == {"i": 0} and jobs[0].queue == queue and jobs[0].started_at is not None
    assert jobq.heartbeat(conn, worker, [j.id for j in jobs]) == []
    assert jobq.complete(conn, jobs[0].id, worker, {"ok": 1}) is True
    assert jobq.complete(conn, jobs[0].id, worker) is False  # fenced: not executing any more
    assert jobq.fail(conn, jobs[1].id, worker, {"type": "E"}, retry_in=timedelta(minutes=10)) == "ready"
    assert job_row(admin, jobs[0].id)["result"] == {"ok": 1}
    failed = job_row(admin, jobs[1].id)
    assert failed["last_error"] == {"type": "E"} and failed["run_at"] > datetime.now(timezone.utc) + timedelta(minutes=9)

    more = jobq.checkout(conn, worker, [queue], 3)
    assert [j.id for j in more] == ids[2:5]
    assert jobq.complete_many(conn, worker, [more[0].id, ids[0]], [{"r": 1}, None]) == [more[0].id]
    assert jobq.fail_many(conn, worker, [more[1].id], [{"type": "X"}]) == ["ready"]
    assert jobq.fail(conn, more[2].id, worker, {"type": "Y"}, discard=True) == "dead"

    # The one-commit protocol: nothing in hand, then the last job in hand, then none left.
    got = jobq.complete_and_checkout(conn, worker, [], queues=[queue], max_jobs=5)
    assert [j.id for j in got] == [ids[5]]
    assert jobq.fail_and_checkout(conn, worker, [ids[5]], [{"type": "Z"}], [queue]) == []
    with pytest.raises(jobq.JobsFenced) as fenced:
        jobq.complete_and_checkout(conn, worker, [ids[5]], queues=[queue])
    assert fenced.value.job_ids == [ids[5]] and fenced.value.sqlstate == "JQ002"

    # Waiting inside the server: runs out empty, or returns what comes.
    assert jobq.checkout(conn, worker, [f"{queue}-empty"], wait=0.2) == []
    assert jobq.heartbeat_timeout(conn) == timedelta(seconds=3)
    assert jobq.unregister_worker(conn, worker) == 0
    with pytest.raises(jobq.WorkerLost):
        jobq.heartbeat(conn, worker)


def test_a_checked_out_job_carries_its_row(conn: psycopg.Connection[Any], admin: Any, queue: str) -> None:
    """Every field of the Job a checkout returns is its row's (the rows become Jobs by
    position: a column out of order would put one field's value in another)."""
    worker = jobq.register_worker(conn, "fields")
    parent = jobq.enqueue(conn, queue, {"p": 1}, kind="parent")
    assert parent is not None
    [first] = jobq.checkout(conn, worker, [queue])
    assert jobq.checkpoint(conn, first.id, worker, "step-1", {"v": 2}) is True
    assert jobq.fail(conn, first.id, worker, {"type": "E", "message": "once"}, retry_in=timedelta(0)) == "ready"
    [job] = jobq.checkout(conn, worker, [queue])
    assert job.id == parent and job.worker_id == worker
    child = jobq.enqueue(
        conn, queue, {"c": [1, 2]}, kind="child", priority=-3, max_attempts=7, unique_key=f"{queue}-u",
        unique_strategy="until_executing", concurrency_key=f"{queue}-c", concurrency_limit=2, depends_on=[parent],
    )
    assert child is not None and jobq.complete(conn, parent, worker) is True
    [got] = jobq.checkout(conn, worker, [queue])
    for j in (job, got):
        row = job_row(admin, j.id)
        for name in (
            "id", "queue", "kind", "payload", "priority", "attempt", "max_attempts", "run_at", "enqueued_at",
            "unique_key", "concurrency_key", "interrupted_at", "last_error", "unique_strategy",
            "concurrency_limit", "started_at", "depends_on",
        ):
            assert getattr(j, name) == row[name], name
        assert j.checkpoints == (row["checkpoints"] or {})
    assert (job.attempt, job.last_error, job.kind) == (2, {"type": "E", "message": "once"}, "parent")
    assert job.checkpoints == {"step-1": {"v": 2}} and got.checkpoints == {}
    assert (got.kind, got.priority, got.max_attempts, got.depends_on) == ("child", -3, 7, [parent])
    assert (got.unique_strategy, got.concurrency_limit, got.payload) == ("until_executing", 2, {"c": [1, 2]})


def test_holding_returns_what_the_worker_does_not_hold(conn: psycopg.Connection[Any], admin: Any, queue: str) -> None:
    worker = jobq.register_worker(conn)
    ids = jobq.enqueue_batch(conn, queue, [{}, {}])
    jobq.checkout(conn, worker, [queue], 2)
    assert jobq.heartbeat(conn, worker, holding=[ids[0]]) == []
    back = job_row(admin, ids[1])
    assert back["state"] == "ready" and back["interrupted_at"] is not None
    assert jobq.cancel(conn, ids[0]) == "executing"
    assert jobq.heartbeat(conn, worker, []) == []  # an empty list returns it too: now cancelled
    assert job_row(admin, ids[0])["state"] == "cancelled"
    jobq.unregister_worker(conn, worker)


def test_locks(conn: psycopg.Connection[Any], queue: str) -> None:
    a, b = jobq.register_worker(conn, "a"), jobq.register_worker(conn, "b")
    key = f"{queue}-lock"
    assert jobq.lock_holder(conn, key) is None
    assert jobq.acquire_lock(conn, key, a) is True
    assert jobq.acquire_lock(conn, key, str(b), ttl=timedelta(seconds=30)) is False
    assert jobq.lock_holder(conn, key) == a
    assert jobq.release_lock(conn, key, b) is False
    assert jobq.release_lock(conn, key, a) is True
    assert jobq.acquire_lock(conn, key, b, ttl=5) is True
    for w in (a, b):
        jobq.unregister_worker(conn, w)


def test_admin_calls(jobq_admin: psycopg.Connection[Any], conn: psycopg.Connection[Any], admin: Any, queue: str) -> None:
    worker = jobq.register_worker(conn)
    job = jobq.enqueue(conn, queue, kind="k")
    jobq.pause(jobq_admin, queue)
    assert jobq.checkout(conn, worker, [queue]) == []
    jobq.resume(jobq_admin, queue)
    jobq.pause(jobq_admin, None, "k")
    assert jobq.checkout(conn, worker, [queue]) == []
    jobq.resume(jobq_admin, None, kind="k")
    assert [j.id for j in jobq.checkout(conn, worker, [queue])] == [job]

    name = f"{queue}-schedule"
    jobq.schedule(jobq_admin, name, "*/5 * * * *", queue, {"tick": True}, kind="cron", time_zone="Europe/Paris", catch_up=True)
    row = admin.execute("SELECT * FROM jobq.schedules WHERE name = %s", (name,)).fetchone()
    assert (row["cron"], row["queue"], row["kind"], row["time_zone"], row["catch_up"]) == (
        "*/5 * * * *", queue, "cron", "Europe/Paris", True)
    assert jobq.unschedule(jobq_admin, name) is True
    assert jobq.unschedule(jobq_admin, name) is False

    key = f"{queue}-rate"
    jobq.set_rate_limit(jobq_admin, key, 10, 60)
    limit = admin.execute("SELECT max_starts, per FROM jobq.rate_windows WHERE key = %s", (key,)).fetchone()
    assert limit == {"max_starts": 10, "per": timedelta(minutes=1)}
    jobq.set_rate_limit(jobq_admin, key, None)
    assert admin.execute("SELECT count(*) AS n FROM jobq.rate_windows WHERE key = %s", (key,)).fetchone()["n"] == 0

    # A worker dies holding two jobs and a lock, and a pass reaps it in the transaction that aged
    # its heartbeat, out of sight of the background worker's passes; the pass before it takes any
    # other dead worker, so that the counts are this worker's alone.
    dead = jobq.register_worker(conn)
    held = f"{queue}-reaped"
    jobs = jobq.enqueue_batch(conn, held, [{}, {}])
    assert sorted(j.id for j in jobq.checkout(conn, dead, [held], 2)) == jobs
    assert jobq.acquire_lock(conn, held, dead) is True
    with admin.transaction():
        jobq.reap(admin)
        admin.execute("UPDATE jobq.workers SET heartbeat_at = now() - interval '1 hour' WHERE id = %s", (dead,))
        assert jobq.reap(admin) == jobq.ReapResult(
            workers_reaped=1, jobs_requeued=2, jobs_dead=0, locks_released=1, jobs_pruned=0)
    jobq.unregister_worker(conn, worker)


def test_queue_stats(conn: psycopg.Connection[Any], queue: str) -> None:
    jobq.enqueue_batch(conn, queue, [{}, {}])
    jobq.enqueue(conn, queue, run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    [stats] = jobq.queue_stats(conn, queue)
    assert (stats.queue, stats.ready, stats.scheduled, stats.executing, stats.dead) == (queue, 2, 1, 0, 0)
    assert stats.oldest_ready_age is not None
    assert queue in [s.queue for s in jobq.queue_stats(conn)]


def test_every_sqlstate_becomes_its_exception(conn: psycopg.Connection[Any], jobq_admin: psycopg.Connection[Any], queue: str) -> None:
    with pytest.raises(jobq.InvalidArgument) as e22023:
        jobq.enqueue(conn, "")
    assert e22023.value.sqlstate == "22023" and e22023.value.message.startswith("jobq: ")
    with pytest.raises(jobq.InvalidArgument) as e22004:
        jobq.pause(jobq_admin, None)
    assert e22004.value.sqlstate == "22004"
    with pytest.raises(jobq.WorkerLost) as jq001:
        jobq.heartbeat(conn, uuid.uuid4())
    assert jq001.value.sqlstate == "JQ001"
    with psycopg.connect(dsn_as("jobq_test_nobody"), autocommit=True) as nobody:
        with pytest.raises(jobq.PermissionDenied) as e42501:
            jobq.enqueue(nobody, queue)
    assert e42501.value.sqlstate == "42501"
    # Another role's worker: jobq's own 42501.
    worker = jobq.register_worker(conn)
    with psycopg.connect(dsn_as("jobq_test_producer"), autocommit=True) as producer:
        with pytest.raises(jobq.PermissionDenied):
            jobq.heartbeat(producer, worker)  # a producer may not even heartbeat
    # Any other SQLSTATE: JobqError itself, with the code (here 0A000: a wait outside READ COMMITTED).
    with psycopg.connect(DSN) as c:
        c.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with pytest.raises(jobq.JobqError) as other:
            jobq.checkout(c, worker, [queue], wait=1)
    assert type(other.value) is jobq.JobqError and other.value.sqlstate == "0A000"
    assert isinstance(other.value.pg_error, psycopg.Error)
    jobq.unregister_worker(conn, worker)


async def test_the_async_api(admin: Any, queue: str) -> None:
    async with await psycopg.AsyncConnection.connect(DSN) as aconn:
        async with aconn.transaction():
            kept = await jobq.aio.enqueue(aconn, queue, {"async": True}, priority=2)
        try:
            async with aconn.transaction():
                lost = await jobq.aio.enqueue(aconn, queue, {"async": False})
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        await aconn.set_autocommit(True)
        assert kept is not None and job_row(admin, kept)["priority"] == 2
        assert admin.execute("SELECT count(*) AS n FROM jobq.jobs WHERE id = %s", (lost,)).fetchone()["n"] == 0
        with pytest.raises(jobq.UniqueConflict) as caught:
            await jobq.aio.enqueue(aconn, queue, unique_key=f"{queue}-k")
            await jobq.aio.enqueue(aconn, queue, unique_key=f"{queue}-k")
        assert caught.value.job_id is not None
        worker = await jobq.aio.register_worker(aconn, "async")
        jobs = await jobq.aio.checkout(aconn, worker, [queue], 5, wait=1)
        assert kept in [j.id for j in jobs]
        async with aconn.cursor() as cur:
            assert await jobq.aio.complete_many(cur, worker, [j.id for j in jobs]) == [j.id for j in jobs]
        assert (await jobq.aio.queue_stats(aconn, queue))[0].executing == 0
        assert await jobq.aio.unregister_worker(aconn, worker) == 0
        with pytest.raises(jobq.WorkerLost):
            await jobq.aio.heartbeat(aconn, worker)
