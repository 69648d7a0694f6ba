"""Enqueue-commit to checkout-return latency for jobq workers that wait for jobs, and what a
job costs them in checkouts (the herd): bench/wait.sh runs it.

    python3 bench/waitlatency.py PORT MODE WAITERS [SAMPLES]

MODE wait:   each worker loops on jobq_checkout(w, ARRAY['lat'], 1, wait => '5 s') and
             completes what it gets (the wait inside the server, src/waits.rs);
MODE listen: each worker LISTENs on jobq and, woken by a NOTIFY (or after 1 s), calls
             jobq_checkout(w, ARRAY['lat'], 1) until it gets nothing, completing each job.
A producer enqueues one job at a time, 10-50 ms apart; the latency is from just before the
enqueue call (it commits on return) to the checkout's return in the worker that got it. Prints
"p50_ms p99_ms max_ms checkouts_per_job", the last from pg_stat_user_functions (calls of
jobq_checkout, nested looks of a waiting call included, per job done).
"""
import statistics
import sys
import threading
import time

import psycopg

port, mode, waiters = sys.argv[1], sys.argv[2], int(sys.argv[3])
samples = int(sys.argv[4]) if len(sys.argv) > 4 else 300
DSN = f"host=127.0.0.1 port={port} user=postgres dbname=bench"
got = {}  # job id -> time its checkout returned
lock = threading.Lock()
stop = threading.Event()


def worker():
    with psycopg.connect(DSN, autocommit=True) as c:
        w = c.execute("SELECT jobq_register_worker()").fetchone()[0]
        if mode == "listen":
            c.execute("LISTEN jobq")
        while not stop.is_set():
            if mode == "wait":
                rows = c.execute("SELECT id FROM jobq_checkout(%s, ARRAY['lat'], 1, '5 s')", (w,)).fetchall()
            else:
                rows = c.execute("SELECT id FROM jobq_checkout(%s, ARRAY['lat'], 1)", (w,)).fetchall()
            now = time.perf_counter()
            for (job,) in rows:
                with lock:
                    got[job] = now
                c.execute("SELECT jobq_complete(%s, %s)", (job, w))
            if not rows and mode == "listen":
                for _ in c.notifies(timeout=1.0, stop_after=1):
                    pass


def calls(c):
    c.execute("SELECT pg_stat_clear_snapshot()")
    return c.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'jobq_checkout'").fetchone()[0]


with psycopg.connect(DSN, autocommit=True) as p:
    p.execute("SET track_functions = 'pl'")
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(waiters)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # let every worker reach its wait
    before = calls(p)
    sent = {}
    for _ in range(samples):
        t = time.perf_counter()  # before the call: a woken worker may return before the enqueue's reply arrives
        job = p.execute("SELECT jobq_enqueue('lat')").fetchone()[0]
        sent[job] = t
        time.sleep(0.01 + 0.04 * (hash(job) % 100) / 100)
    deadline = time.time() + 30
    while time.time() < deadline and len(got) < len(sent):
        time.sleep(0.05)
    time.sleep(0.6)  # a backend reports its function counts at most every 500 ms
    after = calls(p)
    stop.set()
lat = sorted((got[j] - sent[j]) * 1000 for j in sent if j in got)
p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
print(f"{statistics.median(lat):.2f} {p99:.2f} {lat[-1]:.2f} {(after - before) / max(1, len(lat)):.2f}")
