"""A worker process for the process tests, built on jobq.Worker:

    python3 -m tests.worker_proc --dsn DSN --queue QUEUE [--concurrency N] [--pooled]

Its handler serves the jobs of QUEUE (jobs with no kind are routed by their queue). Each run
inserts a row into public.handler_runs (job id, pid, attempt) first, then, as the payload says:

- {"block_first_attempt": true}: the first attempt never returns (it waits until cancelled);
- {"hold_until_file": PATH}: waits until PATH exists;

and returns {"pid": <this process>}. Logs go to stderr, one line per event.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from typing import Any

import psycopg

import jobq


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--pooled", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")

    local = threading.local()

    def record(job: jobq.Job) -> None:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = psycopg.connect(args.dsn, autocommit=True, prepare_threshold=None)
        conn.execute(
            "INSERT INTO public.handler_runs (job_id, pid, attempt) VALUES (%s, %s, %s)",
            (job.id, os.getpid(), job.attempt),
        )

    worker = jobq.Worker(args.dsn, [args.queue], concurrency=args.concurrency, pooled=args.pooled)

    @worker.handler(args.queue)
    def handle(job: jobq.Job) -> dict[str, Any]:
        record(job)
        payload = job.payload if isinstance(job.payload, dict) else {}
        if payload.get("block_first_attempt") and job.attempt == 1:
            job.wait_cancelled()
            job.raise_if_cancelled()
        if payload.get("hold_until_file"):
            while not os.path.exists(payload["hold_until_file"]):
                time.sleep(0.02)
        return {"pid": os.getpid()}

    worker.run()


if __name__ == "__main__":
    main()
