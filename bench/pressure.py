#!/usr/bin/env python3
"""Throughput under pressure from elsewhere (a long transaction in another session): one
system, one scenario, on a running bench cluster (bench/pressure.sh starts it and runs every cell).

16 workers (one connection each) loop: check out a batch of 10, then for each job 1 ms of work
and its completion in its own transaction. A producer keeps about 4,000 jobs ready. After
--clean seconds the pressure starts for --pressure seconds, then --after seconds more:
  xid      one session idle in a transaction that holds an xid (BEGIN; SELECT txid_current();)
  readers  four REPEATABLE READ sessions, each in one transaction for the whole pressure,
           looping SELECT count(*) over the tables the system's checkout reads
  static   the control for `readers`: the same four sessions looping the same count(*) over a
           table of 4,000 rows that nothing writes (bench_static): what four busy readers cost
           the workers on this machine whatever the queue's layout, so that `readers` can be
           split into that share and the part the queue's own design loses
Every 5 s it prints a JSON line: completions/s, the checkout calls' p99 (ms) in that
interval, and the hot tables' sizes (tables + indexes, MB) and dead tuples.

  python3 bench/pressure.py SYSTEM SCENARIO DSN [--clean S] [--pressure S] [--after S]
"""
import argparse
import json
import multiprocessing
import threading
import time

import psycopg
from collections import deque

SYSTEMS = {
    "jobq": {
        "checkout": "SELECT id FROM jobq_checkout(%(w)s, ARRAY['bench'], 10)",
        "complete": "SELECT jobq_complete(%(id)s, %(w)s)",
        "ready": "SELECT count(*) FROM jobq.ready WHERE queue = 'bench'",
        "enqueue": "SELECT count(*) FROM jobq_enqueue_batch('bench', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, %(n)s)))",
        "tables": ["jobq.ready", "jobq.live_jobs"],
    },
    # jobq with every job keyed (one of 100 concurrency keys, limit 5): each attempt also inserts
    # and deletes a row of jobq.slots.
    "jobq_ckey": {
        "checkout": "SELECT id FROM jobq_checkout(%(w)s, ARRAY['bench'], 10)",
        "complete": "SELECT jobq_complete(%(id)s, %(w)s)",
        "ready": "SELECT count(*) FROM jobq.ready WHERE queue = 'bench'",
        "enqueue": "SELECT count(jobq_enqueue('bench', concurrency_key => 'k' || (g %% 100), concurrency_limit => 5)) "
        "FROM generate_series(1, %(n)s) g",
        "tables": ["jobq.ready", "jobq.live_jobs", "jobq.slots"],
    },
    "baseline": {
        "checkout": "UPDATE baseline_jobs SET state = 'running', attempts = attempts + 1 WHERE id IN ("
        "SELECT id FROM baseline_jobs WHERE state = 'ready' AND queue = 'bench' AND run_at <= now() "
        "ORDER BY priority, run_at, id LIMIT 10 FOR UPDATE SKIP LOCKED) RETURNING id",
        "complete": "DELETE FROM baseline_jobs WHERE id = %(id)s",
        "ready": "SELECT count(*) FROM baseline_jobs WHERE state = 'ready'",
        "enqueue": "INSERT INTO baseline_jobs (queue, payload) SELECT 'bench', '{}' FROM generate_series(1, %(n)s)",
        "tables": ["baseline_jobs"],
    },
}


def reader(dsn, tables, seconds):
    """One of the readers: a REPEATABLE READ transaction for `seconds`, looping count(*)."""
    with psycopg.connect(dsn) as c:
        c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for t in tables:
                c.execute(f"SELECT count(*) FROM {t}").fetchone()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("system", choices=SYSTEMS)
    ap.add_argument("scenario", choices=["xid", "readers", "static"])
    ap.add_argument("dsn")
    ap.add_argument("--clean", type=int, default=60)
    ap.add_argument("--pressure", type=int, default=300)
    ap.add_argument("--after", type=int, default=30)
    ap.add_argument("--workers", type=int, default=16)
    a = ap.parse_args()
    sql = SYSTEMS[a.system]
    total = a.clean + a.pressure + a.after
    start = time.monotonic()
    stop = threading.Event()
    lock = threading.Lock()
    # The last seconds' completion times and checkout calls (time, seconds, empty), pruned by
    # the monitor at each sample: whole-run lists made each sample longer (0.24 s under the
    # lock the workers take, by the end of a 390 s run), slowing the later phases more.
    done = deque()
    checkouts = deque()
    completed = 0    # jobs completed since the start, for the producer

    def worker(i):
        nonlocal completed
        with psycopg.connect(a.dsn, autocommit=True) as c:
            w = c.execute("SELECT w FROM bench_workers WHERE client = %s", (i,)).fetchone()[0] if a.system.startswith("jobq") else None
            while not stop.is_set():
                t0 = time.monotonic()
                ids = [r[0] for r in c.execute(sql["checkout"], {"w": w}).fetchall()]
                t1 = time.monotonic()
                with lock:
                    checkouts.append((t1, t1 - t0, not ids))
                if not ids:
                    time.sleep(0.01)
                for job in ids:
                    time.sleep(0.001)  # the work
                    c.execute(sql["complete"], {"id": job, "w": w})
                    with lock:
                        done.append(time.monotonic())
                        completed += 1

    def producer():
        # Keeps ~4,000 jobs not yet completed, counted here (enqueued minus completed) rather
        # than by a count(*) in the database: under a held horizon that count walks every dead
        # index entry since the snapshot, and a producer slowed by it starves the workers of
        # either system, measuring the harness instead of the queue.
        with psycopg.connect(a.dsn, autocommit=True) as c:
            enqueued = c.execute(sql["ready"]).fetchone()[0]
            while not stop.is_set():
                with lock:
                    n = enqueued - completed
                if n < 4000:
                    c.execute(sql["enqueue"], {"n": min(1000, 4000 - n)})
                    enqueued += min(1000, 4000 - n)
                else:
                    time.sleep(0.005)

    def pressure():
        time.sleep(a.clean)
        if stop.is_set():
            return
        conns = []
        try:
            if a.scenario == "xid":
                c = psycopg.connect(a.dsn)
                c.execute("SELECT txid_current()")  # idle in transaction, holding an xid
                conns.append(c)
                time.sleep(a.pressure)
            else:
                tables = sql["tables"] if a.scenario == "readers" else ["bench_static"]

                # Each reader in a process of its own, so that the readers' client side (thousands
                # of calls a second over a small table) never competes with the workers' for this
                # interpreter's lock: what is measured is the database's share, not the harness's.
                ctx = multiprocessing.get_context("spawn")
                readers = [ctx.Process(target=reader, args=(a.dsn, tables, a.pressure)) for _ in range(4)]
                for r in readers:
                    r.start()
                for r in readers:
                    r.join()
        finally:
            for c in conns:
                c.close()

    with psycopg.connect(a.dsn, autocommit=True) as mon:
        if a.scenario == "static":
            mon.execute("DROP TABLE IF EXISTS bench_static")
            mon.execute("CREATE TABLE bench_static AS SELECT g AS id, '{}'::jsonb AS payload FROM generate_series(1, 4000) g")
            mon.execute("VACUUM ANALYZE bench_static")
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(a.workers)]
        threads += [threading.Thread(target=producer), threading.Thread(target=pressure)]
        for t in threads:
            t.start()
        rels = ", ".join(f"'{t}'::regclass" for t in sql["tables"])

        def checkpoint_buffers():
            # Buffers written by checkpoints so far (PostgreSQL 15/16: pg_stat_bgwriter; 17+:
            # pg_stat_checkpointer): a window in which it grew had a checkpoint writing.
            try:
                return mon.execute("SELECT buffers_checkpoint FROM pg_stat_bgwriter").fetchone()[0]
            except psycopg.errors.UndefinedColumn:
                return mon.execute("SELECT buffers_written FROM pg_stat_checkpointer").fetchone()[0]

        def wal():
            # WAL written so far: bytes (the insert position) and full-page images (pg_stat_wal,
            # which backends report at most once a second).
            return mon.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn, wal_fpi FROM pg_stat_wal").fetchone()

        ckpt = checkpoint_buffers()
        walpos = wal()
        for k in range(5, total + 1, 5):
            time.sleep(max(0, start + k - time.monotonic()))
            now = time.monotonic()
            with lock:
                while done and done[0] <= now - 10:
                    done.popleft()
                while checkouts and checkouts[0][0] <= now - 10:
                    checkouts.popleft()
                n = sum(1 for t in done if t > now - 5)
                lat = sorted(s for t, s, _ in checkouts if t > now - 5)
                empty = sum(1 for t, _, e in checkouts if t > now - 5 and e)
            p99 = lat[int(len(lat) * 0.99)] * 1000 if lat else None
            size, dead = mon.execute(
                f"SELECT round(sum(pg_total_relation_size(r)) / 1048576.0, 1), sum(pg_stat_get_dead_tuples(r)) "
                f"FROM unnest(ARRAY[{rels}]) r"
            ).fetchone()
            phase = "clean" if k <= a.clean else "pressure" if k <= a.clean + a.pressure else "after"
            before, ckpt = ckpt, checkpoint_buffers()
            wal_before, walpos = walpos, wal()
            print(json.dumps({"t": k, "phase": phase, "jobs_per_s": n / 5, "checkout_p99_ms": p99,
                              "hot_mb": float(size), "dead_tuples": int(dead),
                              "empty_checkouts": empty, "checkpoint_buffers": ckpt - before,
                              "wal_mb": round(float(walpos[0] - wal_before[0]) / 1048576, 1),
                              "wal_fpi": int(walpos[1] - wal_before[1])}), flush=True)
        stop.set()
        for t in threads:
            t.join()


if __name__ == "__main__":
    main()
