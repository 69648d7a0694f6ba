"""Enqueue-to-checkout latency for a worker that waits with LISTEN (workload e of bench/compare.sh).

    python3 bench/latency.py SYSTEM PORT [SAMPLES]

At low load: a producer enqueues one job, the worker (another connection, LISTENing on the
system's channel, polling only as a 1 s fallback) wakes up on the notification, fetches the
job and finishes it; the latency is from just before the enqueue call to the fetch's return.
Then the producer waits 10-50 ms and enqueues the next. Prints "p50_ms p99_ms max_ms polls".

The SQL is the system's own pgbench scripts, bench/scripts/<system>_enqueue.sql and
<system>_checkout_complete.sql, run statement by statement with pgbench's variables (\\set,
\\gset, :client_id) evaluated here, so latency and throughput measure the same statements.
"""
import random
import re
import sys
import threading
import time

import psycopg

CHANNELS = {
    "jobq": "jobq",                              # jobq_enqueue: NOTIFY jobq, '<queue>'
    "jobq_r0": "jobq",
    "jobq_im": "jobq",
    "baseline": "baseline",                      # NOTIFY added after its INSERT, below
    "procrastinate": "procrastinate_any_queue_v1",  # its insert trigger
    "graphile": "jobs:insert",                   # add_job's pg_notify
}
VAR = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def load(path):
    """pgbench script -> list of steps: ('set', name, expr) or ('sql', text, gset_prefix)."""
    steps, buf = [], []
    for line in open(path):
        s = line.strip()
        if not s or s.startswith("--"):
            continue
        if s.startswith("\\set "):
            _, name, expr = s.split(None, 2)
            steps.append(("set", name, expr))
            continue
        m = re.search(r"\\gset(?:\s+(\w+))?\s*$", s)
        if m:
            buf.append(s[: m.start()])
            steps.append(("sql", "\n".join(buf), m.group(1) or ""))
            buf = []
        elif s.endswith(";"):
            buf.append(s)
            steps.append(("sql", "\n".join(buf), None))
            buf = []
        else:
            buf.append(s)
    return steps


def run(conn, steps, env):
    """Runs the steps; returns False if a \\gset query returned no row (nothing to fetch)."""
    for kind, a, b in steps:
        if kind == "set":
            env[a] = eval(VAR.sub(lambda m: repr(env[m.group(1)]), b))
            continue
        sql = VAR.sub(lambda m: str(env[m.group(1)]), a).replace("%", "%%")
        cur = conn.execute(sql)
        if b is not None:
            row = cur.fetchone() if cur.description else None
            # No row, or a row of NULLs (procrastinate_fetch_job_v2 returns one when idle).
            if row is None or all(v is None for v in row):
                return False
            for col, val in zip((d.name for d in cur.description), row):
                env[b + col] = val if isinstance(val, (int, float)) else "'" + str(val).replace("'", "''") + "'"
    return True


def main():
    system, port = sys.argv[1], sys.argv[2]
    samples = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=bench"
    enqueue = load(f"bench/scripts/{system}_enqueue.sql")
    if system == "baseline":
        enqueue.append(("sql", "NOTIFY baseline;", None))
    work = load(f"bench/scripts/{system}_checkout_complete.sql")
    fetch, finish = work[:-1], work[-1:]

    producer = psycopg.connect(dsn, autocommit=True)
    worker = psycopg.connect(dsn, autocommit=True)
    worker.execute(f'LISTEN "{CHANNELS[system]}"')
    got = threading.Event()
    stop = threading.Event()
    stamp = {}
    polls = [0]

    def work_loop():
        env = {"client_id": 0}
        while not stop.is_set():
            woke = any(True for _ in worker.notifies(timeout=1.0, stop_after=1))
            if not woke:
                polls[0] += 1          # the fallback poll: counted, should stay 0
            while run(worker, fetch, env):
                stamp["t1"] = time.perf_counter()
                run(worker, finish, env)
                got.set()

    t = threading.Thread(target=work_loop, daemon=True)
    t.start()
    lat = []
    env = {"client_id": 0}
    for _ in range(samples):
        got.clear()
        t0 = time.perf_counter()
        run(producer, enqueue, env)
        if not got.wait(10):
            sys.exit(f"{system}: a job was not fetched within 10 s")
        lat.append((stamp["t1"] - t0) * 1000)
        time.sleep(random.uniform(0.01, 0.05))
    stop.set()
    lat.sort()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    print(f"{pick(0.50):.2f} {pick(0.99):.2f} {lat[-1]:.2f} {polls[0]}")


if __name__ == "__main__":
    main()
