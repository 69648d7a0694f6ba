#!/usr/bin/env python3
"""A jobq worker in Python: the `jobq` library (clients/python) with the demo handler.

    JOBQ_DSN=postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo .venv/bin/python examples/python/worker.py

The library does the protocol (heartbeats with what it holds, the one-commit complete-and-checkout,
waiting inside the server, SIGTERM draining, re-registration, reconnection, pooled mode). The demo
handler reads the payload: {"sleep_ms": N} sleeps N ms (a cancel cuts it short), {"fail": true}
raises, anything else completes; the result is {"worker": <name>, "lang": "python"}. It handles
the demo's kinds, and the queues of JOBQ_QUEUES for jobs without a kind. The "order" handler is
a workflow of durable steps (jobq.durable): charge, pack, three shipments fanned out and
gathered, then a "delivered" event awaited.

Environment: JOBQ_DSN, JOBQ_QUEUES (comma-separated; empty: every queue), JOBQ_CONCURRENCY (jobs
at once, 10), JOBQ_NAME (py-<host>-<pid>), JOBQ_POOLED=1 (behind a transaction-mode pooler),
JOBQ_WAIT_S (an idle checkout's wait inside the server, 5), JOBQ_LOG_JSON=1 (one JSON line per
event on stdout: the handler's "started"/"finished", the library's log records as "log").
"""
import json, logging, os, socket, sys, threading, time

import jobq

env = lambda key, default="": os.environ.get(key) or default
NAME = env("JOBQ_NAME", f"py-{socket.gethostname()}-{os.getpid()}")
QUEUES = [q for q in env("JOBQ_QUEUES").split(",") if q] or None
LOCK = threading.Lock()
KINDS = ["send_mail", "build_report", "sync_inventory", "call_partner", "transcode", "tick", "ship"]


def say(event, **fields):  # handlers run in threads: one whole line at a time
    line = {"ts": round(time.time(), 3), "event": event, "worker": NAME, "lang": "python", **fields}
    with LOCK:
        print(json.dumps(line, default=str) if env("JOBQ_LOG_JSON") == "1" else line, flush=True)


def demo(job: jobq.Job) -> dict:
    say("started", id=job.id, attempt=job.attempt)
    payload = job.payload if isinstance(job.payload, dict) else {}
    if payload.get("sleep_ms") and job.wait_cancelled(payload["sleep_ms"] / 1000):
        raise jobq.Cancelled(f"job {job.id} was cancelled")
    if payload.get("fail"):
        raise RuntimeError(f"job {job.id} failed on purpose")
    say("finished", id=job.id)
    return {"worker": NAME, "lang": "python"}


def order(job: jobq.Job) -> dict:  # a workflow: each step once, across crashes and suspensions
    say("started", id=job.id, attempt=job.attempt)
    steps, n = job.durable(), job.payload["order"]
    charge = steps.step("charge", lambda: {"charged_by": NAME})
    say("step", id=job.id, step="pack")
    steps.step("pack", lambda: time.sleep(job.payload["pack_ms"] / 1000) or {"packed_by": NAME})
    boxes = steps.spawn("ship", "shipments", [{"sleep_ms": 200, "order": n, "box": b} for b in range(3)], kind="ship")
    shipped = steps.gather(boxes)  # suspends the order until the three are done
    delivered = steps.await_event(f"order-{n}:delivered")  # suspends it until the event comes
    say("finished", id=job.id)
    return {"worker": NAME, "lang": "python", **charge, "shipped": len(shipped), "delivered": delivered}


class JsonLines(logging.Handler):  # the library's log records (jobq.worker) as event lines
    def emit(self, record):
        say("log", level=record.levelname.lower(), message=record.getMessage())


logging.getLogger("jobq.worker").addHandler(JsonLines())
logging.getLogger("jobq.worker").setLevel(logging.INFO)
worker = jobq.Worker(env("JOBQ_DSN", "postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo"), QUEUES,
                     name=NAME, concurrency=int(env("JOBQ_CONCURRENCY", "10")), pooled=env("JOBQ_POOLED") == "1",
                     wait=float(env("JOBQ_WAIT_S", "5")), handlers={**{k: demo for k in KINDS + (QUEUES or [])}, "order": order})
worker.run()
sys.exit(0)
