"""bench/clients.sh: waits, from one connection, for the state a run needs next.

    python3 bench/clients/watch.py waiting DSN ROLE TIMEOUT_S
        until a session of ROLE runs jobq_checkout (a worker waiting inside the server)
    python3 bench/clients/watch.py drained DSN QUEUE TIMEOUT_S
        until no job of QUEUE is live (ready or executing) any more

One cheap query every 20 ms (so that watching costs the measured worker next to nothing).
Exit 0 once the state is reached, 1 when TIMEOUT_S ran out first.
"""

import sys
import time

import psycopg

QUERIES = {
    "waiting": "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE usename = %s AND state = 'active'"
    " AND query LIKE '%%jobq_checkout(%%')",
    "drained": "SELECT NOT EXISTS (SELECT FROM jobq.live_jobs WHERE queue = %s)",
}

what, dsn, arg, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
deadline = time.monotonic() + timeout
with psycopg.connect(dsn, autocommit=True) as conn:
    while True:
        (reached,) = conn.execute(QUERIES[what], (arg,)).fetchone()  # type: ignore[misc]
        if reached:
            sys.exit(0)
        if time.monotonic() > deadline:
            sys.exit(1)
        time.sleep(0.02)
