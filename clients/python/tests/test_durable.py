"""Workflows through the Python client: the calls (dependencies, results, events, checkpoints,
snooze, awaits) and the durable steps of jobq.durable run by a jobq.Worker, sync and async."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

import jobq

from .conftest import DSN, RunningWorker, wait_state, wait_until

Start = Callable[[jobq.Worker], RunningWorker]


def test_the_workflow_calls(conn: Any, admin: Any, queue: str) -> None:
    parent = jobq.enqueue(conn, queue, {"n": 1})
    assert parent is not None
    child = jobq.enqueue(conn, queue, {"n": 2}, depends_on=[parent], on_parent_failure="run")
    assert child is not None
    w = jobq.register_worker(conn, "calls")
    [job] = jobq.checkout(conn, w, [queue], 10)
    assert job.id == parent and job.checkpoints == {} and job.depends_on is None
    assert jobq.checkpoint(conn, parent, w, "one", {"x": 1})
    assert jobq.await_event(conn, parent, w, f"{queue}:ev") == "waiting"
    assert jobq.emit_event(conn, f"{queue}:ev", {"p": 1}) == 1
    assert jobq.emit_event(conn, f"{queue}:ev", {"p": 2}) == 0
    [again] = jobq.checkout(conn, w, [queue], 10)
    assert again.id == parent and again.attempt == 1
    assert again.checkpoints["one"] == {"x": 1} and again.checkpoints[f"event:{queue}:ev"]["payload"] == {"p": 1}
    assert jobq.snooze(conn, parent, w, datetime.now(timezone.utc) - timedelta(seconds=1))
    [third] = jobq.checkout(conn, w, [queue], 10)
    assert third.id == parent
    assert jobq.await_jobs(conn, parent, w, []) == "finished"
    assert jobq.complete(conn, parent, w, "done")
    [kid] = jobq.checkout(conn, w, [queue], 10)
    assert kid.id == child and kid.depends_on == [parent]
    [r] = jobq.results(conn, [parent])
    assert (r.id, r.state, r.result, r.attempt) == (parent, "completed", "done", 1)
    # Fenced like completion: another worker changes nothing.
    other = jobq.register_worker(conn, "other")
    assert not jobq.checkpoint(conn, child, other, "x", 1)
    assert jobq.await_event(conn, child, other, "e") is None
    with pytest.raises(jobq.InvalidArgument):
        jobq.enqueue(conn, queue, depends_on=[987654321])


def test_durable_steps_in_a_sync_handler(start_worker: Start, conn: Any, admin: Any, queue: str) -> None:
    runs: list[str] = []
    worker = jobq.Worker(DSN, [queue, f"{queue}-kids"], concurrency=4)

    @worker.handler("kid")
    def kid(job: jobq.Job) -> int:
        return int(job.payload["n"]) * 10

    @worker.handler("order")
    def order(job: jobq.Job) -> dict[str, Any]:
        steps = job.durable()
        runs.append("run")

        def charge() -> str:
            runs.append("charged")
            return "ch_1"

        charged = steps.step("charge", charge)
        steps.sleep("cool-off", 0.2)
        ids = steps.spawn("ship", f"{queue}-kids", [{"n": n} for n in range(3)], kind="kid")
        shipped = steps.gather(ids)
        delivered = steps.await_event(f"{queue}:delivered")
        return {"charge": charged, "shipped": [r.result for r in shipped], "delivered": delivered}

    start_worker(worker)
    oid = jobq.enqueue(conn, queue, {}, kind="order")
    wait_until(lambda: admin.execute("SELECT state FROM jobq.jobs WHERE id = %s", (oid,)).fetchone()["state"] == "blocked"
               and admin.execute("SELECT count(*) AS n FROM jobq.jobs WHERE queue = %s AND state = 'completed'", (f"{queue}-kids",)).fetchone()["n"] == 3
               and admin.execute("SELECT checkpoints ? 'ship' AS ok FROM jobq.jobs WHERE id = %s", (oid,)).fetchone()["ok"]
               and admin.execute("SELECT b.event IS NOT NULL AS ok FROM jobq.blocked b WHERE b.job_id = %s", (oid,)).fetchone() is not None,
               what="the order to await its event")
    assert jobq.emit_event(conn, f"{queue}:delivered", {"by": "van"}) == 1
    [row] = wait_state(admin, [oid], "completed")  # type: ignore[list-item]
    assert row["result"] == {"charge": "ch_1", "shipped": [0, 10, 20], "delivered": {"by": "van"}}
    assert runs.count("charged") == 1, "the step ran once across the replays"
    assert row["attempt"] == 1, "suspensions did not count as attempts"
    assert admin.execute("SELECT count(*) AS n FROM jobq.jobs WHERE queue = %s", (f"{queue}-kids",)).fetchone()["n"] == 3, "spawned once"


def test_durable_steps_in_an_async_handler(start_worker: Start, conn: Any, admin: Any, queue: str) -> None:
    worker = jobq.Worker(DSN, [queue], concurrency=2)
    computed: list[int] = []

    @worker.handler("flow")
    async def flow(job: jobq.Job) -> Any:
        steps = job.durable_async()

        async def compute() -> int:
            computed.append(1)
            return 42

        value = await steps.step("answer", compute)
        try:
            await steps.await_event(f"{queue}:never", timeout=0.3)
        except jobq.EventTimeout:
            return {"answer": value, "timed_out": True}
        return {"answer": value, "timed_out": False}

    start_worker(worker)
    fid = jobq.enqueue(conn, queue, {}, kind="flow")
    [row] = wait_state(admin, [fid], "completed", timeout=30)  # type: ignore[list-item]
    assert row["result"] == {"answer": 42, "timed_out": True}
    assert computed == [1]


def test_a_graph_in_one_call(conn: Any, queue: str) -> None:
    ids = jobq.enqueue_graph(conn, [{"queue": queue, "kind": "a"}, {"queue": queue, "kind": "b", "after": [0]}])
    assert len(ids) == 2 and all(i is not None for i in ids)
    [a, b] = jobq.results(conn, [i for i in ids if i is not None])
    assert (a.state, b.state) == ("ready", "blocked")
    with pytest.raises(jobq.InvalidArgument):
        jobq.enqueue_graph(conn, [{"queue": queue, "after": [0]}])
