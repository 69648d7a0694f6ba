#!/usr/bin/env python3
"""Enqueue jobs from Python (psycopg 3): one jobq_enqueue call per job, ids on stdout.

    JOBQ_DSN=... python3 examples/python/enqueue.py QUEUE COUNT ['{"sleep_ms": 20}']

Each job's payload is the given JSON object plus {"n": <index>}.
"""
import json
import os
import sys

import psycopg
from psycopg.types.json import Jsonb

DSN = os.environ.get("JOBQ_DSN", "postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo")
queue, count = sys.argv[1], int(sys.argv[2])
payload = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
with psycopg.connect(DSN, autocommit=True) as conn:
    for n in range(count):
        (job_id,) = conn.execute("SELECT jobq_enqueue(%s, %s)", (queue, Jsonb({**payload, "n": n}))).fetchone()
        print(job_id)
