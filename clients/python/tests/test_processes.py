"""The library's worker as real OS processes (tests/worker_proc.py): exactly once under 8 of
them, a SIGKILLed worker's jobs run elsewhere, SIGTERM drains."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import psycopg
import pytest

import jobq

from .conftest import DSN, wait_state, wait_until

ROOT = Path(__file__).resolve().parent.parent


class WorkerProcess:
    """``python3 -m tests.worker_proc`` with its stderr collected line by line."""

    def __init__(self, queue: str, concurrency: int = 4, dsn: str = DSN, pooled: bool = False) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
        cmd = [sys.executable, "-m", "tests.worker_proc", "--dsn", dsn, "--queue", queue, "--concurrency", str(concurrency)]
        if pooled:
            cmd.append("--pooled")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_for_line(self, text: str, timeout: float = 20.0) -> str:
        """Waits for a line of its log containing ``text``."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: next((l for l in self.lines if text in l), None) or self.proc.poll() is not None, timeout
            )
            line = next((l for l in self.lines if text in l), None)
        assert line is not None, f"worker {self.pid} logged no {text!r} (exited: {found}):\n" + "\n".join(self.lines)
        return line

    def exit_code(self, timeout: float = 20.0) -> int:
        """Waits for the process to end; fails with its log when it does not."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.pid} did not exit within {timeout} s:\n" + "\n".join(self.lines)) from None

    def worker_id(self, admin: psycopg.Connection[dict[str, Any]]) -> Any:
        """Its current registration, as jobq.workers shows it (polled until there)."""
        return wait_until(
            lambda: (r := admin.execute(
                "SELECT id FROM jobq.workers WHERE (metadata->>'pid')::int = %s", (self.pid,)
            ).fetchone()) and r["id"],
            what=f"worker process {self.pid} to register",
        )


@pytest.fixture
def spawn() -> Iterator[Callable[..., WorkerProcess]]:
    procs: list[WorkerProcess] = []

    def start(*args: Any, **kwargs: Any) -> WorkerProcess:
        p = WorkerProcess(*args, **kwargs)
        procs.append(p)
        return p

    yield start
    for p in procs:  # whatever a failed test left running
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()


def runs_per_job(admin: psycopg.Connection[dict[str, Any]], ids: list[int]) -> dict[int, list[int]]:
    rows = admin.execute(
        "SELECT job_id, array_agg(pid ORDER BY at) AS pids FROM public.handler_runs WHERE job_id = ANY(%s) GROUP BY job_id",
        (ids,),
    ).fetchall()
    return {r["job_id"]: r["pids"] for r in rows}


def test_exactly_once_under_8_worker_processes(
    spawn: Callable[..., WorkerProcess], conn: Any, admin: psycopg.Connection[dict[str, Any]], queue: str
) -> None:
    workers = [spawn(queue, concurrency=4) for _ in range(8)]
    for w in workers:
        w.worker_id(admin)
    ids = jobq.enqueue_batch(conn, queue, [{"n": n} for n in range(400)])
    rows = wait_state(admin, ids, "completed", timeout=60)
    pids = {w.pid for w in workers}
    assert all(r["attempt"] == 1 and r["result"]["pid"] in pids for r in rows)
    runs = runs_per_job(admin, ids)
    assert sorted(runs) == sorted(ids)
    twice = {j: p for j, p in runs.items() if len(p) != 1}
    assert twice == {}, f"jobs run more than once: {twice}"
    assert all(runs[r["id"]] == [r["result"]["pid"]] for r in rows)  # completed by the process that ran it
    assert len({r["result"]["pid"] for r in rows}) > 1  # the processes shared the work
    for w in workers:
        w.proc.send_signal(signal.SIGTERM)
    assert [w.exit_code() for w in workers] == [0] * 8


def test_a_sigkilled_workers_jobs_run_again_elsewhere(
    spawn: Callable[..., WorkerProcess], conn: Any, admin: psycopg.Connection[dict[str, Any]], queue: str
) -> None:
    doomed = spawn(queue, concurrency=2)
    doomed_id = doomed.worker_id(admin)
    ids = jobq.enqueue_batch(conn, queue, [{"block_first_attempt": True}] * 2)
    rows = wait_state(admin, ids, "executing")
    assert all(r["worker_id"] == doomed_id for r in rows)
    wait_until(lambda: len(runs_per_job(admin, ids)) == 2, what="both handlers to start")
    doomed.proc.kill()
    assert doomed.proc.wait(10) == -signal.SIGKILL
    rescuer = spawn(queue, concurrency=2)
    rows = wait_state(admin, ids, "completed", timeout=30)
    assert all(r["result"] == {"pid": rescuer.pid} for r in rows)
    assert all(r["attempt"] == 2 and r["interrupted_at"] is not None for r in rows)
    assert runs_per_job(admin, ids) == {i: [doomed.pid, rescuer.pid] for i in ids}
    assert admin.execute("SELECT count(*) AS n FROM jobq.workers WHERE id = %s", (doomed_id,)).fetchone() == {"n": 0}
    rescuer.proc.send_signal(signal.SIGTERM)
    assert rescuer.exit_code() == 0


@pytest.mark.parametrize("pooled", [False, True], ids=["direct", "pooled"])
def test_sigterm_drains_and_exits_0(
    spawn: Callable[..., WorkerProcess], conn: Any, admin: psycopg.Connection[dict[str, Any]],
    queue: str, tmp_path: Path, pooled: bool,
) -> None:
    from .conftest import POOLER_DSN

    release = tmp_path / "release"
    worker = spawn(queue, concurrency=4, dsn=POOLER_DSN if pooled else DSN, pooled=pooled)
    wid = worker.worker_id(admin)
    held = jobq.enqueue_batch(conn, queue, [{"hold_until_file": str(release)}] * 3)
    # Their handlers run (not only claimed: a job claimed as the stop comes is never started).
    wait_until(lambda: len(runs_per_job(admin, held)) == 3, what="the three handlers to start")
    worker.proc.send_signal(signal.SIGTERM)
    worker.wait_for_line("draining")  # it has stopped checking out, one slot still free
    late = jobq.enqueue(conn, queue)
    assert worker.proc.poll() is None  # the jobs in flight hold it
    release.touch()
    assert worker.exit_code() == 0
    rows = wait_state(admin, held, "completed", timeout=1)
    assert all(r["result"] == {"pid": worker.pid} and r["attempt"] == 1 for r in rows)
    late_row = admin.execute("SELECT state, attempt FROM jobq.jobs WHERE id = %s", (late,)).fetchone()
    assert late_row == {"state": "ready", "attempt": 0}  # never taken
    assert admin.execute("SELECT count(*) AS n FROM jobq.workers WHERE id = %s", (wid,)).fetchone() == {"n": 0}
    assert any("unregistered" in line for line in worker.lines)
