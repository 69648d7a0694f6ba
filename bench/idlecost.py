"""What idle waiting workers cost the server: WAITERS sessions each loop on
jobq_checkout(w, ARRAY['idle'], 1, wait => '30 s') on a queue that stays empty, and the CPU
time of their server processes (utime + stime of /proc/PID/stat) is counted over SECONDS, once
they all wait. bench/wait.sh runs it.

    python3 bench/idlecost.py PORT WAITERS SECONDS

Prints the share of one core they used, in percent.
"""
import os
import sys
import threading
import time

import psycopg

port, waiters, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
DSN = f"host=127.0.0.1 port={port} user=postgres dbname=bench"
pids = []
lock = threading.Lock()
stop = threading.Event()


def waiter():
    with psycopg.connect(DSN, autocommit=True) as c:
        w = c.execute("SELECT jobq_register_worker()").fetchone()[0]
        with lock:
            pids.append(c.execute("SELECT pg_backend_pid()").fetchone()[0])
        while not stop.is_set():
            c.execute("SELECT id FROM jobq_checkout(%s, ARRAY['idle'], 1, '30 s')", (w,)).fetchall()


def ticks():
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total


threads = [threading.Thread(target=waiter, daemon=True) for _ in range(waiters)]
for t in threads:
    t.start()
with psycopg.connect(DSN, autocommit=True) as c:
    while c.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%jobq_checkout(%'"
                    " AND pid <> pg_backend_pid()").fetchone()[0] < waiters:
        time.sleep(0.05)
start, t0 = ticks(), time.monotonic()
time.sleep(seconds)
used = (ticks() - start) / os.sysconf("SC_CLK_TCK")
elapsed = time.monotonic() - t0
stop.set()
print(f"{100 * used / elapsed:.2f}")
os._exit(0)
