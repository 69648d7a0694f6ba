#!/usr/bin/env python3
"""jobq reference worker in Python (psycopg 3).

What it does
    Registers a jobq worker, then loops: check out up to JOBQ_BATCH jobs, run a
    handler on each in turn, and report the batch's successes (the handler's return
    value is the result) in the same call that checks out the next batch,
    jobq_complete_and_checkout: one round trip and one commit per batch. A failure
    is reported at once with jobq_fail (error = {"message", "type"} of the
    exception). JQ002 from the fused call (a job in hand was finished elsewhere)
    makes it report the others with jobq_complete_many. When the queue is empty it
    waits inside the server: jobq_checkout(..., wait => JOBQ_WAIT_S), which returns
    as soon as a commit makes a job available (no LISTEN, no polling; works through
    a transaction-mode pooler). With JOBQ_WAIT_S=0 it waits for NOTIFY jobq instead,
    polling every JOBQ_POLL_S (or only polls, when pooled). A background thread heartbeats on its own connection every
    heartbeat_timeout / 3, sending the ids of the jobs in hand (`holding`: the
    server puts back any job executing under this worker that the list lacks, e.g.
    a checkout whose reply was lost), and logs cancellation requests; a cancelled
    job that has not started yet is failed (it becomes `cancelled`) instead of run.

    SIGTERM / SIGINT: take no more work, finish the jobs in hand, unregister, exit 0.
    SQLSTATE JQ001 (this worker was reaped or unregistered): drop the jobs in hand
    without reporting them (they run again elsewhere), register again, go on.
    Connection lost: the worker is registered with bind_to_session, so the server
    treats it as dead as soon as its session ends and the reaper requeues its jobs;
    the worker reconnects with exponential backoff (1 s .. 30 s) and registers again.

    Behind a pooler in transaction mode (JOBQ_POOLED=1, e.g. PgBouncer with
    pool_mode = transaction), where consecutive calls may run in different server
    sessions: no LISTEN (with JOBQ_WAIT_S=0 it polls every JOBQ_POLL_S), no bind_to_session (its
    liveness is its heartbeats alone, so a crash is noticed after jobq.heartbeat_timeout),
    no server-side prepared statements; a lost connection keeps the registration, which
    is not tied to a session.

How to run
    pip install -r examples/python/requirements.txt
    JOBQ_DSN=postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo python3 examples/python/worker.py

    Enqueue from psql:  SELECT jobq_enqueue('default', '{"sleep_ms": 200}');

Environment
    JOBQ_DSN          libpq connection string   (postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo)
    JOBQ_QUEUES       comma-separated queues     (empty: every queue)
    JOBQ_BATCH        jobs per checkout          (10)
    JOBQ_HEARTBEAT_S  heartbeat period, seconds  (the server's jobq.heartbeat_timeout / 3)
    JOBQ_HANDLER      "module:function" to run instead of the demo handler
    JOBQ_LOG_JSON     1: one JSON line per event on stdout, flushed (for test harnesses)
    JOBQ_POOLED       1: behind a pooler in transaction mode (above)
    JOBQ_WAIT_S       how long an idle checkout waits inside the server, seconds (5; 0: LISTEN/poll instead)
    JOBQ_POLL_S       with JOBQ_WAIT_S=0: how long an idle worker waits before it looks again (1)

The handler is any callable taking the job (a dict: id, queue, kind, payload,
attempt, ...) and returning a JSON-serialisable result; raising fails the job.
The demo handler reads the payload: {"sleep_ms": N} sleeps N ms, {"fail": true}
raises, anything else (e.g. {"crash_hint": true}) just completes; its result is
{"worker": <name>, "lang": "python"}.
"""

import importlib
import json
import os
import signal
import socket
import sys
import threading
import time

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

DSN = os.environ.get("JOBQ_DSN", "postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo")
QUEUES = [q.strip() for q in os.environ.get("JOBQ_QUEUES", "").split(",") if q.strip()] or None
BATCH = int(os.environ.get("JOBQ_BATCH", "10"))
HEARTBEAT_S = float(os.environ["JOBQ_HEARTBEAT_S"]) if os.environ.get("JOBQ_HEARTBEAT_S") else None
LOG_JSON = os.environ.get("JOBQ_LOG_JSON") == "1"
NAME = f"py-{socket.gethostname()}-{os.getpid()}"
POLL_S = float(os.environ.get("JOBQ_POLL_S") or 1.0)
WAIT_S = float(os.environ.get("JOBQ_WAIT_S") or 5.0) if os.environ.get("JOBQ_WAIT_S") != "0" else 0.0
POOLED = os.environ.get("JOBQ_POOLED") == "1"
# A pooler in transaction mode may run a statement prepared in one server session in another:
# never prepare server-side there.
CONNECT = {"autocommit": True, "connect_timeout": 5} | ({"prepare_threshold": None} if POOLED else {})

_log_lock = threading.Lock()


def log(event, **fields):
    if LOG_JSON:
        record = {"ts": round(time.time(), 3), "event": event, "worker": NAME, "lang": "python", **fields}
        line = json.dumps(record, default=str)
        out = sys.stdout
    else:
        line = f"{time.strftime('%H:%M:%S')} {NAME} {event} " + " ".join(f"{k}={v}" for k, v in fields.items())
        out = sys.stderr
    with _log_lock:
        out.write(line + "\n")
        out.flush()


def demo_handler(job):
    payload = job["payload"] if isinstance(job["payload"], dict) else {}
    if payload.get("sleep_ms"):
        time.sleep(payload["sleep_ms"] / 1000)
    if payload.get("fail"):
        raise RuntimeError(f"job {job['id']} failed on purpose")
    return {"worker": NAME, "lang": "python"}


class Worker:
    def __init__(self, handler):
        self.handler = handler
        self.stopping = threading.Event()  # SIGTERM/SIGINT: take no more work
        self.done = threading.Event()  # unregistered: stop heartbeating
        self.worker_id = None  # current registration; None while (re)connecting
        self.reaped_id = None  # a worker id that got JQ001
        self.cancelled = set()  # job ids whose cancellation was requested
        # The jobs in hand, and the checkouts sent and not answered yet (their jobs may be
        # claimed but not listed: meanwhile a heartbeat sends no list). A heartbeat keeps
        # the lock for its whole call, so no checkout starts between reading the list and
        # the server applying it.
        self.hand_lock = threading.Lock()
        self.in_hand = set()
        self.checkouts = 0
        self.waiting_conn = None  # the connection of a waiting checkout, cancelled on SIGTERM
        self.heartbeat_s = None
        self.heartbeat = threading.Thread(target=self.heartbeat_loop, daemon=True)

    def reaped(self):
        return self.worker_id is not None and self.reaped_id == self.worker_id

    # -- main loop ---------------------------------------------------------
    def run(self):
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        signal.signal(signal.SIGINT, lambda *_: self.stop())
        backoff = 1
        while not self.stopping.is_set():
            try:
                conn = psycopg.connect(DSN, row_factory=dict_row, application_name=NAME, **CONNECT)
                with conn:
                    if not POOLED and not WAIT_S:
                        conn.execute("LISTEN jobq")
                    if self.worker_id is None:
                        self.register(conn, "registered")
                    backoff = 1
                    self.work(conn)
                    self.unregister(conn)
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                if not POOLED:
                    self.worker_id = None  # our session is gone, so is the registration
                log("disconnected", error=str(e).strip(), retry_in=backoff)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 30)
        self.done.set()
        log("stopped")
        return 0

    def work(self, conn):
        # One round trip and one commit per batch: the jobs of a batch that succeeded are
        # completed by the call that checks out the next batch (jobq_complete_and_checkout).
        done = []  # (id, result) of jobs finished here, not yet reported
        waited = []  # jobs a waiting checkout returned: run them next
        while not self.stopping.is_set():
            jobs, waited = waited, []  # jobs a waiting checkout returned need no checkout
            if not jobs:
                with self.hand_lock:
                    self.checkouts += 1
                try:
                    jobs = conn.execute(
                        "SELECT * FROM jobq_complete_and_checkout(%s, %s::bigint[], %s::jsonb[], %s, %s)",
                        (self.worker_id, [i for i, _ in done], [r for _, r in done], QUEUES, BATCH),
                    ).fetchall()
                    for i, _ in done:
                        log("completed", id=i)
                except psycopg.Error as e:
                    if e.sqlstate == "JQ002":  # some were finished elsewhere: report the others alone
                        self.complete_alone(conn, done)
                    elif e.sqlstate == "JQ001":
                        self.reaped_id = self.worker_id
                    else:
                        raise
                finally:
                    with self.hand_lock:
                        self.checkouts -= 1
                        self.in_hand.difference_update(i for i, _ in done)
                        self.in_hand.update(job["id"] for job in jobs)
            done = []
            for job in jobs:
                log("claimed", id=job["id"], attempt=job["attempt"])
            for job in jobs:
                finished = self.run_one(conn, job)
                if finished is not None:
                    done.append(finished)
                else:
                    with self.hand_lock:
                        self.in_hand.discard(job["id"])
            if self.reaped():  # JQ001 from checkout or heartbeat: our jobs run elsewhere
                if done:
                    log("dropped", ids=[i for i, _ in done])
                done = []
                self.register(conn, "reregistered")
            elif not jobs and not done and WAIT_S:  # idle: wait inside the server for a job
                waited = self.checkout_waiting(conn)
            elif not jobs and not done:  # idle: wait for an enqueue's NOTIFY, or poll after POLL_S
                if POOLED:
                    self.stopping.wait(POLL_S)
                else:
                    for _ in conn.notifies(timeout=POLL_S, stop_after=1):
                        pass
        self.complete_alone(conn, done)  # stopping: report what finished before unregistering

    def checkout_waiting(self, conn):
        """jobq_checkout with wait: the jobs it claimed, or none when the wait ran out (or a
        SIGTERM cancelled it)."""
        jobs = []
        with self.hand_lock:
            self.checkouts += 1
        self.waiting_conn = conn
        try:
            if not self.stopping.is_set():
                jobs = conn.execute(
                    "SELECT * FROM jobq_checkout(%s, %s, %s, wait => make_interval(secs => %s))",
                    (self.worker_id, QUEUES, BATCH, WAIT_S),
                ).fetchall()
        except psycopg.errors.QueryCanceled:
            pass  # stop() cancelled the wait
        except psycopg.Error as e:
            if e.sqlstate != "JQ001":
                raise
            self.reaped_id = self.worker_id
        finally:
            self.waiting_conn = None
            with self.hand_lock:
                self.checkouts -= 1
                self.in_hand.update(job["id"] for job in jobs)
        return jobs

    def stop(self):
        """SIGTERM: take no more work; cancel a waiting checkout, unless behind a pooler (the
        cancel may reach the pooled session after the wait returned: there a stop waits out
        the wait)."""
        self.stopping.set()
        conn = self.waiting_conn
        if conn is not None and not POOLED:
            try:
                conn.cancel()  # a waiting checkout returns at once
            except Exception:
                pass

    def complete_alone(self, conn, done):
        if not done or self.reaped():
            return
        ok = set(conn.execute(
            "SELECT jobq_complete_many(%s, %s::bigint[], %s::jsonb[]) AS ok",
            (self.worker_id, [i for i, _ in done], [r for _, r in done]),
        ).fetchone()["ok"])
        for i, _ in done:
            log("completed" if i in ok else "lost", id=i)  # lost: not ours any more
        with self.hand_lock:
            self.in_hand.difference_update(i for i, _ in done)

    def run_one(self, conn, job):
        """Runs one job: (id, result) to complete with the next checkout, or None when it
        was failed (reported at once) or dropped."""
        if self.reaped():
            return log("dropped", id=job["id"])
        if job["id"] in self.cancelled:
            state = self.fail(conn, job, {"message": "cancelled before start", "type": "Cancelled"})
            return log("failed", id=job["id"], state=state)
        try:
            result = self.handler(job)
        except Exception as e:
            if self.reaped():
                return log("dropped", id=job["id"])
            state = self.fail(conn, job, {"message": str(e), "type": type(e).__name__})
            return log("failed", id=job["id"], state=state, error=str(e))
        if self.reaped():
            return log("dropped", id=job["id"])
        return (job["id"], None if result is None else Jsonb(result))

    def fail(self, conn, job, error):
        state = conn.execute(
            "SELECT jobq_fail(%s, %s, %s) AS state", (job["id"], self.worker_id, Jsonb(error))
        ).fetchone()["state"]
        self.cancelled.discard(job["id"])
        return state  # ready (retried later), dead, cancelled, or None (not ours any more)

    # -- registration ------------------------------------------------------
    def register(self, conn, event):
        row = conn.execute(
            """SELECT jobq_register_worker(%s, %s, bind_to_session => %s) AS id,
                      extract(epoch FROM current_setting('jobq.heartbeat_timeout', true)::interval) AS timeout""",
            (NAME, Jsonb({"lang": "python", "pid": os.getpid(), "host": socket.gethostname()}), not POOLED),
        ).fetchone()
        self.heartbeat_s = HEARTBEAT_S or float(row["timeout"] or 30) / 3
        self.cancelled.clear()
        with self.hand_lock:
            self.in_hand.clear()  # the old registration's jobs run elsewhere
        self.worker_id = row["id"]
        log(event, worker_id=self.worker_id)
        if not self.heartbeat.is_alive():
            self.heartbeat.start()

    def unregister(self, conn, attempt=1):
        try:
            n = conn.execute("SELECT jobq_unregister_worker(%s) AS n", (self.worker_id,)).fetchone()["n"]
            log("unregistered", worker_id=self.worker_id, returned=n)
        except psycopg.errors.QueryCanceled:
            # stop()'s cancel, meant for a wait that had just returned, landed here.
            if attempt > 1:
                raise
            return self.unregister(conn, attempt + 1)
        except psycopg.Error as e:
            if e.sqlstate != "JQ001":
                raise
        self.worker_id = None

    # -- heartbeat thread: its own connection, independent of the job loop --
    def heartbeat_loop(self):
        conn = None
        while not self.done.wait(self.heartbeat_s):
            wid = self.worker_id
            if wid is None or wid == self.reaped_id:
                continue
            try:
                if conn is None:
                    conn = psycopg.connect(DSN, application_name=f"{NAME}-hb", **CONNECT)
                with self.hand_lock:
                    holding = None if self.checkouts else sorted(self.in_hand)
                    ids = set(conn.execute("SELECT jobq_heartbeat(%s, %s::bigint[])", (wid, holding)).fetchone()[0])
                if ids - self.cancelled:
                    log("cancel_requested", ids=sorted(ids - self.cancelled))
                    self.cancelled.update(ids)
            except psycopg.Error as e:
                if e.sqlstate == "JQ001":
                    self.reaped_id = wid  # the main loop drops its jobs and registers again
                    log("heartbeat_reaped", worker_id=wid)
                else:
                    log("heartbeat_error", error=str(e).strip())
                    if conn is not None:
                        conn.close()
                    conn = None


def load_handler():
    spec = os.environ.get("JOBQ_HANDLER")
    if not spec:
        return demo_handler
    module, _, func = spec.partition(":")
    return getattr(importlib.import_module(module), func)


if __name__ == "__main__":
    sys.exit(Worker(load_handler()).run())
