"""jobq.testing: drain (the due jobs of some queues run inline, through the SQL calls) and
enqueued (the jobs waiting in a queue), against the real server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

import jobq
from jobq.testing import DrainLimitReached, drain, drain_async, enqueued, enqueued_async, make_job

from .conftest import DSN, job_row


def drain_workers(admin: Any) -> int:
    """Registrations of the drain's worker still in jobq.workers."""
    return int(admin.execute("SELECT count(*) AS n FROM jobq.workers WHERE name = 'jobq.testing.drain'").fetchone()["n"])


def test_drain_completes_fails_and_discards_each_job_as_a_worker_would(conn: psycopg.Connection[Any], admin: Any, queue: str) -> None:
    ok = jobq.enqueue(conn, queue, {"n": 2}, kind="double")
    boom = jobq.enqueue(conn, queue, {"n": 3}, kind="boom")
    last = jobq.enqueue(conn, queue, {"n": 4}, kind="boom", max_attempts=1)
    orphan = jobq.enqueue(conn, queue, {}, kind="nobody")
    plain = jobq.enqueue(conn, queue, {"n": 5})  # no kind: routed by its queue
    assert ok is not None and boom is not None and orphan is not None and plain is not None

    def double(job: jobq.Job) -> dict[str, int]:
        return {"n": job.payload["n"] * 2}

    def explode(job: jobq.Job) -> None:
        raise ValueError(f"bad {job.payload['n']}")

    drained = drain(conn, [queue], {"double": double, "boom": explode, queue: lambda job: "by queue"})

    assert [d.job.id for d in drained.jobs] == [ok, boom, last, orphan, plain]
    assert [d.state for d in drained.jobs] == ["completed", "ready", "dead", "dead", "completed"]
    assert [d.job.id for d in drained.completed] == [ok, plain]
    assert [d.job.id for d in drained.failed] == [boom, last, orphan]
    assert drained.jobs[0].result == {"n": 4} and drained.jobs[0].error is None
    assert drained.jobs[1].error == {"type": "ValueError", "message": "bad 3"}
    assert isinstance(drained.jobs[1].exception, ValueError) and drained.jobs[1].failed
    assert drained.jobs[3].error == {"type": "NoHandler", "message": "no handler for kind 'nobody'"}
    assert drained.jobs[3].exception is None
    assert drained.jobs[0].job.attempt == 1

    # The server holds the same story: the calls were jobq_complete and jobq_fail.
    assert job_row(admin, ok)["result"] == {"n": 4}
    retried = job_row(admin, boom)
    assert retried["state"] == "ready" and retried["attempt"] == 1 and retried["run_at"] > datetime.now(timezone.utc)
    assert retried["last_error"] == {"type": "ValueError", "message": "bad 3"}
    assert job_row(admin, orphan)["attempt"] == 1  # discarded at its first attempt
    assert job_row(admin, plain)["result"] == "by queue"
    assert drain_workers(admin) == 0  # unregistered


def test_a_job_a_handler_enqueues_is_drained_in_the_same_call(admin: Any, queue: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as conn:
        first = jobq.enqueue(conn, queue, {"step": 1}, kind="step")

        def step(job: jobq.Job) -> int:
            n: int = job.payload["step"]
            if n < 3:  # the follow-up, committed on a connection of the handler's own
                with psycopg.connect(DSN, autocommit=True) as own:
                    jobq.enqueue(own, queue, {"step": n + 1}, kind="step")
            return n

        drained = drain(DSN, queue, {"step": step})  # a DSN: a connection of the drain's own
    assert [d.result for d in drained.jobs] == [1, 2, 3]
    assert drained.jobs[0].job.id == first
    assert all(d.state == "completed" for d in drained.jobs)
    assert enqueued(DSN, queue) == []
    assert drain_workers(admin) == 0


def test_max_jobs_stops_a_runaway_drain_and_gives_the_next_job_back(conn: psycopg.Connection[Any], admin: Any, queue: str) -> None:
    jobq.enqueue(conn, queue, {"n": 0}, kind="again")

    def again(job: jobq.Job) -> None:  # enqueues its successor forever
        with psycopg.connect(DSN, autocommit=True) as own:
            jobq.enqueue(own, queue, {"n": job.payload["n"] + 1}, kind="again")

    with pytest.raises(DrainLimitReached) as caught:
        drain(conn, [queue], {"again": again}, max_jobs=4)
    assert caught.value.max_jobs == 4
    assert [d.job.payload["n"] for d in caught.value.drained.jobs] == [0, 1, 2, 3]
    # The fifth was checked out but not run: unregistering gave it back, its attempt uncounted.
    [waiting] = enqueued(conn, queue)
    assert waiting.payload == {"n": 4} and waiting.state == "ready" and waiting.attempt == 0
    assert job_row(admin, waiting.id)["interrupted_at"] is None
    assert drain_workers(admin) == 0
    with pytest.raises(ValueError):
        drain(conn, [queue], {"again": again}, max_jobs=0)


def test_jobs_not_due_are_left_alone_and_retry_in_is_reported(conn: psycopg.Connection[Any], admin: Any, queue: str) -> None:
    later = jobq.enqueue(conn, queue, {"later": True}, kind="mail", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    now = jobq.enqueue(conn, queue, {"later": False}, kind="mail")
    assert later is not None and now is not None

    def busy(job: jobq.Job) -> None:
        try:
            raise TimeoutError("the API is busy")
        except TimeoutError as e:
            raise jobq.RetryIn(timedelta(minutes=10)) from e

    drained = drain(conn, [queue], {"mail": busy})
    [only] = drained.jobs  # the retry is due in 10 minutes: not again in this drain
    assert only.job.id == now and only.state == "ready"
    assert only.error == {"type": "TimeoutError", "message": "the API is busy"}
    row = job_row(admin, now)
    assert row["run_at"] > datetime.now(timezone.utc) + timedelta(minutes=9)
    assert job_row(admin, later)["state"] == "ready" and job_row(admin, later)["attempt"] == 0


def test_a_result_that_is_not_json_fails_the_job(conn: psycopg.Connection[Any], queue: str) -> None:
    jobq.enqueue(conn, queue, kind="odd")
    [d] = drain(conn, [queue], {"odd": lambda job: {1, 2}}).jobs
    assert d.state == "ready" and d.error is not None and d.error["type"] == "TypeError"
    assert "not JSON" in d.error["message"]


def test_drain_in_a_transaction_sees_uncommitted_jobs_and_a_rollback_undoes_everything(admin: Any, queue: str) -> None:
    with psycopg.connect(DSN) as conn:  # not autocommit: every call runs in its transaction
        jobq.enqueue(conn, queue, {"order": 7}, kind="charge")

        def charge(job: jobq.Job) -> dict[str, Any]:
            # The same connection, between the drain's calls: the follow-up joins the transaction.
            jobq.enqueue(conn, queue, {"order": job.payload["order"]}, kind="receipt")
            return {"charged": True}

        drained = drain(conn, [queue], {"charge": charge, "receipt": lambda job: "sent"})
        assert [(d.job.kind, d.state) for d in drained.jobs] == [("charge", "completed"), ("receipt", "completed")]
        # Nothing is committed: another session sees neither the jobs nor the drain's worker.
        assert admin.execute("SELECT count(*) AS n FROM jobq.jobs WHERE queue = %s", (queue,)).fetchone()["n"] == 0
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM jobq.jobs WHERE queue = %s", (queue,)).fetchone() == (0,)
    assert drain_workers(admin) == 0


def test_enqueued_filters_by_kind_and_payload_containment(conn: psycopg.Connection[Any], queue: str) -> None:
    mail = jobq.enqueue(conn, queue, {"to": "ada@example.com", "lang": "en"}, kind="welcome", priority=3)
    other = jobq.enqueue(conn, queue, {"to": "bob@example.com", "lang": "en"}, kind="welcome")
    later = jobq.enqueue(conn, queue, {"to": "ada@example.com"}, kind="reminder", run_at=datetime.now(timezone.utc) + timedelta(days=1))
    assert mail is not None and other is not None and later is not None
    child = jobq.enqueue(conn, queue, {"after": mail}, kind="audit", depends_on=[mail])
    jobq.enqueue(conn, f"{queue}-other", {"to": "ada@example.com"}, kind="welcome")

    assert [j.id for j in enqueued(conn, queue)] == [mail, other, later, child]
    assert [j.id for j in enqueued(conn, queue, kind="welcome")] == [mail, other]
    assert [j.id for j in enqueued(conn, queue, payload={"to": "ada@example.com"})] == [mail, later]
    [found] = enqueued(conn, queue, kind="welcome", payload={"to": "ada@example.com"})
    assert (found.id, found.queue, found.kind, found.payload, found.priority) == (mail, queue, "welcome", {"to": "ada@example.com", "lang": "en"}, 3)
    assert (found.state, found.scheduled, found.attempt, found.max_attempts) == ("ready", False, 0, 25)
    [reminder] = enqueued(conn, queue, kind="reminder")
    assert reminder.scheduled and reminder.state == "ready"
    [audit] = enqueued(conn, queue, kind="audit")
    assert audit.state == "blocked" and audit.depends_on == [mail]
    assert enqueued(conn, queue, kind="welcome", payload={"to": "eve@example.com"}) == []

    # A drained job is no longer waiting; the child, ready once its parent completed, is
    # drained in the same call; the scheduled one stays.
    drained = drain(conn, [queue], {"welcome": lambda job: None, "audit": lambda job: None})
    assert [d.job.id for d in drained.jobs] == [other, mail, child]  # priority 0 before 3
    assert [j.id for j in enqueued(conn, queue)] == [later]


def test_enqueued_sees_what_the_callers_transaction_enqueued(admin: Any, queue: str) -> None:
    with psycopg.connect(DSN) as conn:
        job_id = jobq.enqueue(conn, queue, {"x": 1}, kind="k")
        assert [j.id for j in enqueued(conn, queue, kind="k")] == [job_id]
        assert enqueued(DSN, queue) == []  # not committed: another session sees nothing
        conn.rollback()


def test_the_sync_drain_runs_async_handlers_too(conn: psycopg.Connection[Any], queue: str) -> None:
    jobq.enqueue(conn, queue, {"n": 1}, kind="a")

    async def handler(job: jobq.Job) -> int:
        return int(job.payload["n"]) + 1

    [d] = drain(conn, [queue], {"a": handler}).jobs
    assert (d.state, d.result) == ("completed", 2)


async def test_drain_async_runs_async_and_plain_handlers(queue: str) -> None:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as aconn:
        first = await jobq.aio.enqueue(aconn, queue, {"n": 1}, kind="async")

        async def follow(job: jobq.Job) -> int:
            await jobq.aio.enqueue(aconn, queue, {"n": 2}, kind="plain")  # drained too
            return 1

        def plain(job: jobq.Job) -> int:
            raise KeyError("missing")

        assert [j.id for j in await enqueued_async(aconn, queue, kind="async")] == [first]
        drained = await drain_async(aconn, queue, {"async": follow, "plain": plain})
        assert [(d.job.kind, d.state) for d in drained.jobs] == [("async", "completed"), ("plain", "ready")]
        assert drained.jobs[1].error == {"type": "KeyError", "message": "'missing'"}

        # The sync drain refuses an async handler inside a running loop, and unregisters.
        await jobq.aio.enqueue(aconn, queue, {}, kind="async")
        with psycopg.connect(DSN, autocommit=True) as conn:
            with pytest.raises(TypeError, match="drain_async"):
                drain(conn, queue, {"async": follow})
        assert [j.kind for j in await enqueued_async(aconn, queue, kind="async")] == ["async"]


def test_make_job_builds_a_job_to_call_a_handler_with() -> None:
    def welcome(job: jobq.Job) -> dict[str, Any]:
        job.raise_if_cancelled()
        return {"to": job.payload["to"], "attempt": job.attempt}

    job = make_job("mail", {"to": "ada@example.com"}, kind="welcome", attempt=3)
    assert (job.id, job.queue, job.kind, job.priority, job.max_attempts, job.checkpoints) == (0, "mail", "welcome", 0, 25, {})
    assert job.run_at <= datetime.now(timezone.utc) and job.last_error is None
    assert welcome(job) == {"to": "ada@example.com", "attempt": 3}
    job.cancel_event.set()  # a handler that stops when its job is cancelled
    with pytest.raises(jobq.Cancelled):
        welcome(job)
    assert make_job("q").payload == {}
    with pytest.raises(RuntimeError, match="durable steps need a job run by a jobq.Worker"):
        make_job("q").durable()
