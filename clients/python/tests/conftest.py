"""Fixtures for the jobq client's tests, against the server scripts/test-clients.sh starts.

It exports JOBQ_TEST_DSN (role jobq_test_app, granted jobq_worker), JOBQ_TEST_ADMIN_DSN (the
superuser) and JOBQ_TEST_POOLER_DSN (jobq_test_app through PgBouncer in transaction mode), with
jobq.heartbeat_timeout = 3s and jobq.reap_interval = 200ms, and JOBQ_TEST_EDITION: "extension",
or "sql" when the database has the SQL edition (no background worker: the workers' heartbeats
run the passes).
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from typing import Any, Callable, Iterator, Literal, TypeVar

import psycopg
import pytest
from psycopg.rows import dict_row

import jobq

T = TypeVar("T")


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set: run the suite with scripts/test-clients.sh python")
    return value


DSN = _env("JOBQ_TEST_DSN")
ADMIN_DSN = _env("JOBQ_TEST_ADMIN_DSN")
POOLER_DSN = _env("JOBQ_TEST_POOLER_DSN")
SERVER_LOG = _env("JOBQ_TEST_SERVER_LOG")
EDITION = os.environ.get("JOBQ_TEST_EDITION", "extension")
#: What a waiting checkout waits on, in pg_stat_activity.wait_event: the extension's latch, or
#: in the SQL edition the pg_sleep of the call that polls, or the advisory lock it holds, on
#: which the others sleep (docs/sql-edition.md, "Waiting checkout polls").
WAITING_EVENTS = ["PgSleep", "advisory"] if EDITION == "sql" else ["Extension"]


class ServerLog:
    """What the server logs from now on (its log file, read from the offset it had)."""

    def __init__(self) -> None:
        self.offset = os.path.getsize(SERVER_LOG)

    def since(self) -> str:
        with open(SERVER_LOG, "rb") as f:
            f.seek(self.offset)
            return f.read().decode(errors="replace")


def await_waiting_checkout(admin: psycopg.Connection[Any], worker_name: str) -> None:
    """Until the worker named ``worker_name`` is inside a waiting checkout on the server."""
    wait_until(
        lambda: admin.execute(
            "SELECT count(*) = 1 AS yes FROM pg_stat_activity"
            " WHERE application_name = %s AND state = 'active' AND wait_event = ANY(%s)",
            (f"{worker_name}-jobs", WAITING_EVENTS),
        ).fetchone()["yes"],  # type: ignore[index]
        what=f"worker {worker_name} to wait inside the server",
    )


def dsn_as(role: str, dsn: str = DSN) -> str:
    """The DSN with another login role."""
    return re.sub(r"^(postgresql://)[^@/]+@", rf"\g<1>{role}@", dsn)


def wait_until(check: Callable[[], T | None | Literal[False]], timeout: float = 20.0, what: str = "a condition") -> T:
    """Polls ``check`` until it returns something truthy, which it returns; fails after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="session", autouse=True)
def handler_runs_table() -> None:
    """A table the handlers of the process tests write one row to per run."""
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS public.handler_runs"
            " (job_id bigint NOT NULL, pid integer NOT NULL, attempt integer NOT NULL,"
            "  at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        conn.execute("GRANT SELECT, INSERT ON public.handler_runs TO PUBLIC")


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    """A queue name of this test's own (the database is shared by the suite)."""
    name = re.sub(r"[^a-z0-9_]+", "_", request.node.name.lower())[:40]
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def conn() -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection as jobq_test_app (a worker's role)."""
    with psycopg.connect(DSN, autocommit=True) as c:
        yield c


@pytest.fixture
def admin() -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """An autocommit superuser connection, for reading jobq's tables and forcing states."""
    with psycopg.connect(ADMIN_DSN, autocommit=True, row_factory=dict_row) as c:
        yield c


@pytest.fixture
def jobq_admin() -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection as jobq_test_admin (granted jobq_admin)."""
    with psycopg.connect(dsn_as("jobq_test_admin"), autocommit=True) as c:
        yield c


def job_row(admin: psycopg.Connection[dict[str, Any]], job_id: int) -> dict[str, Any]:
    row = admin.execute("SELECT * FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None, f"job {job_id} does not exist"
    return row


def wait_state(admin: psycopg.Connection[dict[str, Any]], ids: list[int], state: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    """Waits until every job of ``ids`` is in ``state``; returns their rows in id order."""

    def check() -> list[dict[str, Any]] | None:
        rows = admin.execute("SELECT * FROM jobq.jobs WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall()
        return rows if len(rows) == len(ids) and all(r["state"] == state for r in rows) else None

    return wait_until(check, timeout, f"jobs {ids} to be {state}")


class RunningWorker:
    """A :class:`jobq.Worker` running in a thread of the test process."""

    def __init__(self, worker: jobq.Worker) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="jobq-test-worker", daemon=True)

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as e:  # surfaced by stop()
            self.error = e

    def start(self) -> RunningWorker:
        self.thread.start()
        wait_until(lambda: self.worker.worker_id is not None or not self.thread.is_alive(), 10, "the worker to register")
        assert self.error is None, self.error
        return self

    def stop(self, timeout: float = 20.0) -> None:
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        assert self.error is None, self.error


@pytest.fixture
def start_worker() -> Iterator[Callable[[jobq.Worker], RunningWorker]]:
    """Starts workers in threads; each is stopped (and must stop cleanly) at the end."""
    running: list[RunningWorker] = []

    def start(worker: jobq.Worker) -> RunningWorker:
        r = RunningWorker(worker)
        running.append(r)
        return r.start()

    yield start
    for r in running:
        if r.thread.is_alive():
            r.stop()
