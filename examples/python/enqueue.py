#!/usr/bin/env python3
"""Enqueue jobs from Python with the `jobq` library (clients/python), ids on stdout.

    JOBQ_DSN=... .venv/bin/python examples/python/enqueue.py QUEUE COUNT ['{"sleep_ms": 20}']

Each job's payload is the given JSON object plus {"n": <index>}; all of them commit together.
"""
import json
import os
import sys

import psycopg

import jobq

DSN = os.environ.get("JOBQ_DSN", "postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo")
queue, count = sys.argv[1], int(sys.argv[2])
payload = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
with psycopg.connect(DSN) as conn:  # one transaction, committed when the block ends
    ids = [jobq.enqueue(conn, queue, {**payload, "n": n}) for n in range(count)]
for job_id in ids:
    print(job_id)
