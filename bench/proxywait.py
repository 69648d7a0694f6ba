"""Enqueue-commit to checkout-return latency through jobq_proxy for workers that wait inside the
server (jobq_checkout(..., wait)), when their queues live on one node and when they live on
several: bench/proxy.sh runs it.

    python3 bench/proxywait.py PORT DB MODE WAITERS [SAMPLES]

MODE one: the workers wait on ARRAY['q0'] (one node: the node's own wait) and the producer
          enqueues into q0;
MODE all: the workers wait on every queue (NULL: every node, the proxy's loop of 200 ms slices)
          and the producer enqueues into q0, q1 or q2 in turn (queues pinned to nodes 0, 1, 2).
A producer enqueues one job at a time through the proxy, 10-50 ms apart; the latency is from just
before the enqueue call (it commits on the node when it returns) to the checkout's return in the
worker that got it. Prints "p50_ms p99_ms max_ms".
"""
import random
import statistics
import sys
import threading
import time

import psycopg

port, db, mode, waiters = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
samples = int(sys.argv[5]) if len(sys.argv) > 5 else 200
DSN = f"host=127.0.0.1 port={port} user=postgres dbname={db}"
got = {}  # job id -> time its checkout returned
lock = threading.Lock()
stop = threading.Event()
queues = ["q0"] if mode == "one" else None


def worker():
    with psycopg.connect(DSN, autocommit=True) as c:
        w = c.execute("SELECT jobq_register_worker()").fetchone()[0]
        beat = time.monotonic()
        while not stop.is_set():
            rows = c.execute("SELECT id FROM jobq_checkout(%s, %s, 1, '2 s')", (w, queues)).fetchall()
            now = time.perf_counter()
            for (job,) in rows:
                with lock:
                    got[job] = now
                c.execute("SELECT jobq_complete(%s, %s)", (job, w))
            if time.monotonic() - beat > 5:
                c.execute("SELECT jobq_heartbeat(%s)", (w,))
                beat = time.monotonic()
        # Leave cleanly: a waiting call cut off by the process's exit would go on in the server
        # and could claim a job of the next measurement for a client that is gone (the reaper
        # would give it back only after the heartbeat timeout).
        c.execute("SELECT jobq_unregister_worker(%s)", (w,))


with psycopg.connect(DSN, autocommit=True) as p:
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(waiters)]
    for t in threads:
        t.start()
    time.sleep(1.5)  # let every worker reach its wait
    sent = {}
    for i in range(samples):
        q = "q0" if mode == "one" else f"q{i % 3}"
        t0 = time.perf_counter()
        job = p.execute("SELECT jobq_enqueue(%s)", (q,)).fetchone()[0]
        sent[job] = t0
        time.sleep(random.uniform(0.010, 0.050))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with lock:
            if all(j in got for j in sent):
                break
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    with lock:
        missing = [j for j in sent if j not in got]
        lat = sorted((got[j] - sent[j]) * 1000 for j in sent if j in got)
    if missing:
        sys.exit(f"proxywait: {len(missing)} jobs never checked out")
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(f"{statistics.median(lat):.2f} {p99:.2f} {lat[-1]:.2f}")
