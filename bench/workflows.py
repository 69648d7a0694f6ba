"""Workflows at scale (bench/workflows.sh runs it): a fan-in of many jobs into one, and a chain
of steps, against the same work as plain jobs.

    python3 bench/workflows.py PORT fanin CHILDREN WORKERS
    python3 bench/workflows.py PORT plain CHILDREN WORKERS
    python3 bench/workflows.py PORT chain STEPS

fanin: one job checks out, enqueues CHILDREN jobs (jobq_enqueue_batch) and awaits them
       (jobq_await_jobs: it becomes blocked); WORKERS workers run the children with the
       one-commit protocol (jobq_complete_and_checkout, up to 10 jobs a call); the last
       child's completion makes the awaiting job ready, and a worker waiting on its queue
       takes it. Prints "children_per_s wake_ms": children completed per second, and the time
       from the commit of the last child's completion to the awaiting job's checkout.
plain: the same children without anyone awaiting them. Prints "children_per_s -".
chain: STEPS jobs, each depending on the one before (enqueued up front); one worker takes
       each step as it becomes ready (jobq_checkout with wait) and completes it. Prints
       "steps_per_s step_ms_p50 step_ms_p99": steps per second, and the time from a step's
       completion commit to the next step's checkout.
"""
import statistics
import sys
import threading
import time

import psycopg

port, mode = sys.argv[1], sys.argv[2]
n = int(sys.argv[3])
workers = int(sys.argv[4]) if len(sys.argv) > 4 else 1
DSN = f"host=127.0.0.1 port={port} user=postgres dbname=bench"


def connect():
    return psycopg.connect(DSN, autocommit=True)


def run_children(queue, count, done_at):
    """WORKERS workers completing `count` jobs of `queue` with the one-commit protocol; the
    time of the last completion's commit goes to done_at[0]."""
    left = [count]
    lock = threading.Lock()

    def work():
        with connect() as c:
            w = c.execute("SELECT jobq_register_worker()").fetchone()[0]
            hand = []
            while True:
                rows = c.execute(
                    "SELECT id FROM jobq_complete_and_checkout(%s, %s, NULL, ARRAY[%s], 10)", (w, hand, queue)
                ).fetchall()
                now = time.perf_counter()
                with lock:
                    left[0] -= len(hand)
                    if hand and left[0] == 0:
                        done_at[0] = now
                    finished = left[0] <= 0
                hand = [r[0] for r in rows]
                if finished and not hand:
                    return
                if not hand:
                    time.sleep(0.001)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return start


if mode in ("fanin", "plain"):
    with connect() as c:
        got = []
        waiter_ready = threading.Event()

        def gatherer():
            # Waits on the gather queue for the awaiting job to come back.
            with connect() as g:
                w2 = g.execute("SELECT jobq_register_worker()").fetchone()[0]
                waiter_ready.set()
                while not got:
                    rows = g.execute("SELECT id FROM jobq_checkout(%s, ARRAY['gather'], 1, '5 s')", (w2,)).fetchall()
                    if rows:
                        got.append(time.perf_counter())

        if mode == "fanin":
            w = c.execute("SELECT jobq_register_worker()").fetchone()[0]
            c.execute("SELECT jobq_enqueue('gather')")
            parent = c.execute("SELECT id FROM jobq_checkout(%s, ARRAY['gather'])", (w,)).fetchone()[0]
            ids = [r[0] for r in c.execute("SELECT * FROM jobq_enqueue_batch('kids', array_fill('{}'::jsonb, ARRAY[%s]))", (n,)).fetchall()]
            state = c.execute("SELECT jobq_await_jobs(%s, %s, %s)", (parent, w, ids)).fetchone()[0]
            assert state == "waiting", state
            t = threading.Thread(target=gatherer)
            t.start()
            waiter_ready.wait()
        else:
            c.execute("SELECT count(*) FROM jobq_enqueue_batch('kids', array_fill('{}'::jsonb, ARRAY[%s]))", (n,))
        done_at = [None]
        start = run_children("kids", n, done_at)
        rate = n / (done_at[0] - start)
        if mode == "fanin":
            t.join()
            print(f"{rate:.0f} {(got[0] - done_at[0]) * 1000:.1f}")
        else:
            print(f"{rate:.0f} -")
elif mode == "chain":
    with connect() as c:
        prev = None
        for _ in range(n):
            prev = c.execute(
                "SELECT jobq_enqueue('chain', depends_on => %s)", ([prev] if prev is not None else None,)
            ).fetchone()[0]
        w = c.execute("SELECT jobq_register_worker()").fetchone()[0]
        gaps = []
        done = None
        start = time.perf_counter()
        for _ in range(n):
            row = c.execute("SELECT id FROM jobq_checkout(%s, ARRAY['chain'], 1, '5 s')", (w,)).fetchone()
            now = time.perf_counter()
            assert row is not None, "a step did not come"
            if done is not None:
                gaps.append((now - done) * 1000)
            c.execute("SELECT jobq_complete(%s, %s)", (row[0], w))
            done = time.perf_counter()
        rate = n / (done - start)
        gaps.sort()
        print(f"{rate:.0f} {statistics.median(gaps):.2f} {gaps[int(len(gaps) * 0.99) - 1]:.2f}")
else:
    sys.exit(f"unknown mode {mode}")
