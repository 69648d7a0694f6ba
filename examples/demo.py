#!/usr/bin/env python3
"""The jobq demo (what scripts/demo.sh runs): a worker pool in three languages, a stream of jobs,
a worker killed mid-job and its job rescued by the background worker inside PostgreSQL (or, on the SQL edition, by the passes the workers' heartbeats run), and a
workflow (an order of durable steps) that resumes after its last checkpoint when its worker is
killed.

    JOBQ_DSN=postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo \
    JOBQ_ADMIN_DSN=postgresql://postgres@127.0.0.1:5499/jobq_demo .venv/bin/python examples/demo.py [SECONDS]

Everything runs as JOBQ_DSN's role, which holds jobq_worker only (as an application's role
would), except the reset at the start: jobq is dropped and created again in that database
through JOBQ_ADMIN_DSN, the extension's owner. Then it starts two Python, two Node and two Ruby
example workers (examples/python/worker.py, examples/node/worker.js, examples/ruby/worker.rb: a
few lines each over the jobq client libraries of clients/), enqueues a steady
stream of jobs for SECONDS (default 20) from this process, kills one worker with SIGKILL while
it runs a long job, prints one live progress line, and ends with a summary checked against the
database and the workers' own logs.
"""
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg

DSN = os.environ.get("JOBQ_DSN", "postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo")
ADMIN_DSN = os.environ.get("JOBQ_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5499/jobq_demo")
SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
ROOT = Path(__file__).resolve().parent
REPORT_LIMIT = 2
API_LIMIT = 5        # 'partner-api' calls: at most 5 starts in any second (a rate limit)
TICK_CRON = "*/3 * * * * *"  # the recurring job: every 3 s (six fields, seconds first)
TTY = sys.stdout.isatty()
# scripts/demo.sh --sql: jobq is the SQL edition, its passes run by the workers' heartbeats.
SQL_EDITION = os.environ.get("JOBQ_EDITION") == "sql"
RESCUER = "the workers' passes" if SQL_EDITION else "the background worker"
STARTED = []  # every worker process, killed if the demo itself fails


def say(msg=""):
    """A narrative line, printed above the live progress line."""
    sys.stdout.write(("\r\033[K" if TTY else "") + msg + "\n")
    sys.stdout.flush()


class Worker:
    """An example worker process, two jobs at a time, and the lines its handler prints:
    "started" when it begins a job, "finished" when it returns the job's result."""

    def __init__(self, lang, n):
        # The Python workers run under this interpreter (.venv's: psycopg and clients/python).
        cmd = {"python": [sys.executable, str(ROOT / "python/worker.py")], "node": ["node", str(ROOT / "node/worker.js")],
               "ruby": ["ruby", f"-I{ROOT.parent / 'clients/ruby/lib'}", str(ROOT / "ruby/worker.rb")]}[lang]
        self.name = f"{ {'python': 'py', 'node': 'node', 'ruby': 'rb'}[lang]}-demo-{n}"
        # Heartbeat cadence: the library's, a third of the server's jobq.heartbeat_timeout.
        env = dict(os.environ, JOBQ_DSN=DSN, JOBQ_LOG_JSON="1", JOBQ_CONCURRENCY="2", JOBQ_NAME=self.name)
        env.pop("JOBQ_QUEUES", None)
        self.lang, self.proc, self.events = lang, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True), []
        STARTED.append(self.proc)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            self.events.append(e)

    def ids(self, event):
        return [e["id"] for e in list(self.events) if e.get("event") == event]

    def holds(self, job_id):
        return job_id in self.ids("started") and job_id not in self.ids("finished")


def wait_for(what, cond, timeout=30):
    end = time.time() + timeout
    while not cond():
        if time.time() > end:
            sys.exit(f"\ndemo: PROBLEM: gave up waiting for {what}")
        time.sleep(0.05)


def producer(stop, counts):
    """A steady stream of five kinds of jobs (see the banner in main), about 30 jobs/s."""
    with psycopg.connect(DSN, autocommit=True) as db:
        tick = 0
        while not stop.is_set():
            tick += 1
            db.execute("SELECT jobq_enqueue('mail', %s, kind => 'send_mail')",
                       (json.dumps({"sleep_ms": random.randint(10, 100)}),))
            counts["mail"] += 1
            if tick % 20 == 0:   # reports: at most REPORT_LIMIT at once, across all workers
                db.execute("SELECT jobq_enqueue('reports', '{\"sleep_ms\": 1200}', kind => 'build_report', "
                           "concurrency_key => 'reporting-db', concurrency_limit => %s)", (REPORT_LIMIT,))
                counts["reports"] += 1
            if tick % 5 == 0:    # the same sync asked for again and again: one at a time exists
                (got,) = db.execute("SELECT jobq_enqueue('sync', '{\"sleep_ms\": 300}', kind => 'sync_inventory', "
                                    "unique_key => 'sync:inventory', on_conflict => 'discard')").fetchone()
                counts["sync asked"] += 1
                counts["sync queued" if got else "sync discarded"] += 1
            if tick % 3 == 0:    # partner API calls, a little faster than their rate limit lets them start
                db.execute("SELECT jobq_enqueue('api', '{\"sleep_ms\": 20}', kind => 'call_partner', rate_key => 'partner-api')")
                counts["api"] += 1
            if tick % 40 == 0:   # a job that always fails: retried once, then dead
                db.execute("SELECT jobq_enqueue('mail', '{\"fail\": true}', kind => 'send_mail', max_attempts => 2)")
                counts["failing"] += 1
            time.sleep(0.05)


def main():
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute("SET client_min_messages = warning")
        if SQL_EDITION:
            # scripts/demo.sh --sql made the database afresh and installed the SQL edition in it.
            bgw = False
        else:
            admin.execute("DROP EXTENSION IF EXISTS jobq CASCADE")
            admin.execute("CREATE EXTENSION jobq")
            # The launcher starts this database's reaper when CREATE EXTENSION commits: with the
            # preload, wait for it (the contract: within 10 s) rather than report what is not there yet.
            # (The superuser looks: the application's role may not read these settings.)
            preloaded = "jobq" in admin.execute("SHOW shared_preload_libraries").fetchone()[0].replace(" ", "").split(",")
            reaper = lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'jobq reaper'"
                                           " AND datname = current_database()").fetchone()[0] > 0
            if preloaded:
                wait_for("the background worker to serve this database", reaper, timeout=10)
            bgw = reaper()
        # What only an administrator sets (the application's role holds jobq_worker): a
        # recurring job, fired by the background worker, and the partner API's rate limit.
        admin.execute("SELECT jobq_schedule('tick', %s, 'cron', '{\"sleep_ms\": 10}', kind => 'tick')", (TICK_CRON,))
        admin.execute("SELECT jobq_set_rate_limit('partner-api', %s, '1 second')", (API_LIMIT,))
    with psycopg.connect(DSN, autocommit=True) as db:
        hb, reap = db.execute("SELECT coalesce(current_setting('jobq.heartbeat_timeout', true), '30s'),"
                              " coalesce(current_setting('jobq.reap_interval', true), '1s')").fetchone()
        version, edition = db.execute("SELECT version, edition FROM jobq_version()").fetchone()
    say(f"jobq {version} ({edition} edition) demo: every coordination step below is a SQL function call; the workers")
    say("are plain programs using their language's jobq client library, and the reaping of dead workers")
    if SQL_EDITION:
        say("is done by the passes the workers' heartbeats run (the SQL edition: no library, no background"
            f" worker; heartbeat_timeout {hb}, reap_interval {reap}).")
    else:
        say(f"is done by a background worker inside PostgreSQL ({'running' if bgw else 'NOT running: preload jobq'};"
            f" heartbeat_timeout {hb}, reap_interval {reap}).")
    say()
    workers = [Worker(lang, n) for n, lang in enumerate(("python", "node", "ruby") * 2, 1)]
    with psycopg.connect(DSN, autocommit=True) as db:
        wait_for("the workers to register", lambda: db.execute("SELECT count(*) FROM jobq.workers WHERE name = ANY(%s)",
                                                               ([w.name for w in workers],)).fetchone()[0] == len(workers))
    say(f"▶ started {len(workers)} workers: " + ", ".join(w.name for w in workers))
    say(f"▶ enqueueing for {SECONDS:.0f} s: ~20 mails/s (10-100 ms each); a report every second (1.2 s each, at most")
    say(f"  {REPORT_LIMIT} at once: concurrency key 'reporting-db'); an inventory sync asked 4 times a second (unique key")
    say("  'sync:inventory': asked again while one exists, it is discarded); every 2 s a mail that always fails;")
    say(f"  ~6 partner API calls/s (rate key 'partner-api': at most {API_LIMIT} start in any second, the rest wait)")
    say(f"▶ and a recurring job: schedule 'tick' ('{TICK_CRON}', every 3 s), enqueued by {RESCUER}")
    say("▶ and a workflow: order 1 (durable steps in the worker's handler): charge, pack (3 s), three shipments")
    say("  fanned out and gathered, then it waits for the event 'order-1:delivered', which this demo emits")
    say()
    with psycopg.connect(DSN, autocommit=True) as db:
        (order,) = db.execute("SELECT jobq_enqueue('orders', '{\"order\": 1, \"pack_ms\": 3000}', kind => 'order')").fetchone()
    stop, counts = threading.Event(), Counter()
    threading.Thread(target=producer, args=(stop, counts), daemon=True).start()

    db = psycopg.connect(DSN, autocommit=True)
    start, last_done, last_t, rate = time.time(), 0, time.time(), 0.0
    max_reports, victim, video, requeued, rescued, printed = 0, None, None, False, False, 0.0
    packer, said, order_done = None, set(), False  # the workflow's progress
    deadline = SECONDS + 120  # the drain takes seconds; past this something is wrong
    while True:
        now = time.time() - start
        if now > deadline:
            sys.exit(f"\ndemo: PROBLEM: not drained {deadline:.0f} s after the start (video job rescued: {rescued})")
        if now > SECONDS and not stop.is_set():
            stop.set()
            with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
                admin.execute("SELECT jobq_unschedule('tick')")
            say(f"■ stream stopped after {SECONDS:.0f} s, schedule 'tick' removed; the workers drain what is left")
        if victim is None and now > SECONDS / 4:
            (video,) = db.execute("SELECT jobq_enqueue('video', '{\"sleep_ms\": 4000}', kind => 'transcode')").fetchone()
            wait_for("a worker to take the video job", lambda: any(w.holds(video) for w in workers))
            victim = next(w for w in workers if w.holds(video))
            time.sleep(0.5)
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait()
            killed_at = time.time()
            say(f"✖ killed {victim.name} ({victim.lang}) with SIGKILL, 0.5 s into job {video} (a 4 s 'transcode').")
            say(f"  Its session is gone, so {RESCUER} will requeue the job; nobody calls anything.")
        if packer is None:
            packer = next((w for w in workers if order in w.ids("step") and order not in w.ids("finished")), None)
            if packer is not None:
                time.sleep(0.5)
                packer.proc.send_signal(signal.SIGKILL)
                packer.proc.wait()
                say(f"✖ killed {packer.name} ({packer.lang}) with SIGKILL in the middle of order {order}'s 'pack' step")
                say("  ('charge' is done and kept as a checkpoint: the order resumes after it, on another worker)")
        elif not order_done:
            o = db.execute("SELECT j.state, j.attempt, b.waiting, b.event, j.result FROM jobq.jobs j"
                           " LEFT JOIN jobq.blocked b ON b.job_id = j.id WHERE j.id = %s", (order,)).fetchone()
            if o[0] == "blocked" and o[2] and "gather" not in said:
                said.add("gather")
                say(f"⧗ order {order} blocked: it awaits its {o[2]} shipments (attempt {o[1] + 1} resumed after 'charge')")
            if o[0] == "blocked" and o[3] and "emit" not in said:
                said.add("emit")
                (woken,) = db.execute("SELECT jobq_emit_event('order-1:delivered', '{\"by\": \"courier\"}')").fetchone()
                say(f"✉ order {order} blocked on its event: emitted 'order-1:delivered', which woke {woken} job")
            if o[0] == "completed":
                order_done = True
                say(f"✔ order {order} completed on attempt {o[1]} by {o[4]['worker']}: charged by {o[4]['charged_by']},"
                    f" {o[4]['shipped']} shipments, delivered by {o[4]['delivered']['by']}")
            elif o[0] not in ("ready", "executing", "blocked"):
                sys.exit(f"\ndemo: PROBLEM: the order ended {o[0]}")
        if victim is not None and not rescued:
            row = db.execute("SELECT state, attempt, interrupted_at, result->>'worker' FROM jobq.jobs WHERE id = %s",
                             (video,)).fetchone()
            if row[2] is not None and not requeued:
                requeued = True
                say(f"↻ job {video} requeued by {RESCUER} {row[2].timestamp() - killed_at:.1f} s after the kill"
                    " (attempt 1 marked interrupted)")
            if row[0] == "completed":
                rescued = True
                say(f"✔ job {video} completed on attempt {row[1]} by {row[3]}")
            elif row[0] not in ("ready", "executing", "scheduled"):
                sys.exit(f"\ndemo: PROBLEM: the killed worker's job ended {row[0]} instead of being completed")
        r = db.execute("""SELECT coalesce(sum(ready), 0)::int, coalesce(sum(executing), 0)::int, coalesce(sum(dead), 0)::int,
                                 coalesce(sum(scheduled), 0)::int,
                                 (SELECT count(*) FROM jobq.jobs WHERE state = 'completed')::int,
                                 (SELECT count(*) FROM jobq.jobs WHERE state = 'executing' AND concurrency_key = 'reporting-db')::int,
                                 (SELECT count(*) FROM jobq.jobs WHERE rate_key = 'partner-api'
                                     AND started_at > clock_timestamp() - interval '1 second')::int,
                                 (SELECT count(*) FROM jobq.jobs WHERE queue = 'cron')::int
                            FROM jobq.queue_stats""").fetchone()
        ready, executing, dead, scheduled, done, reports, api_rate, ticks = r
        max_reports = max(max_reports, reports)
        if time.time() - last_t >= 1:
            rate, last_done, last_t = (done - last_done) / (time.time() - last_t), done, time.time()
        line = (f"t={now:4.0f}s  done {done:5d} ({rate:4.0f}/s)  ready {ready:4d}  executing {executing:3d}  dead {dead:2d}"
                f"  reports running {reports}/{REPORT_LIMIT}  api starts {api_rate}/{API_LIMIT} per s  ticks {ticks}")
        if TTY:
            sys.stdout.write("\r\033[K" + line)
            sys.stdout.flush()
        elif now - printed >= 2:
            printed = now
            print(line, flush=True)
        if stop.is_set() and ready == 0 and executing == 0 and scheduled == 0 and rescued and order_done:
            break
        time.sleep(0.1)

    killed = (victim, packer)
    for w in workers:
        if w not in killed:
            w.proc.send_signal(signal.SIGTERM)
    codes = [w.proc.wait() for w in workers if w not in killed]
    say()
    say("Summary")
    jobs = db.execute("SELECT state, count(*) FROM jobq.jobs GROUP BY 1 ORDER BY 1").fetchall()
    say("  jobs by state:   " + ", ".join(f"{s} {n}" for s, n in jobs))
    by_lang = db.execute("SELECT result->>'lang', count(*) FROM jobq.jobs WHERE state = 'completed' GROUP BY 1 ORDER BY 1").fetchall()
    say("  completed by:    " + ", ".join(f"{lang} workers {n}" for lang, n in by_lang))
    # A job whose handler returned twice ran to the end twice. (The killed worker's are left
    # out: what it finished and had not reported yet runs again.)
    finished = {w.name: set(w.ids("finished")) for w in workers}
    twice = [i for i, n in Counter(i for w in workers if w not in killed for i in w.ids("finished")).items() if n > 1]
    completed = db.execute("SELECT id, result->>'worker' FROM jobq.jobs WHERE state = 'completed'").fetchall()
    unlogged = [i for i, by in completed if i not in finished.get(by, ())]
    say(f"  exactly once:    {len(completed)} jobs completed, each by the worker its handler finished it in"
        f" ({len(unlogged)} not), {len(twice)} job(s) run to the end twice")
    say(f"  concurrency:     at most {max_reports} 'reporting-db' reports executing at once (limit {REPORT_LIMIT},"
        " sampled every 0.1 s)")
    say(f"  uniqueness:      'sync:inventory' asked {counts['sync asked']} times, queued {counts['sync queued']},"
        f" discarded {counts['sync discarded']} while one existed")
    # Any second, from each start on: how many starts of the key it holds (exact, by started_at).
    (api_max, api_done) = db.execute("""SELECT coalesce(max((SELECT count(*) FROM jobq.jobs b WHERE b.rate_key = 'partner-api'
                                                   AND b.started_at >= a.started_at
                                                   AND b.started_at < a.started_at + interval '1 second')), 0)::int,
                                     count(*)::int
                                FROM jobq.jobs a WHERE a.rate_key = 'partner-api' AND a.state = 'completed'""").fetchone()
    say(f"  rate limit:      {api_done} of {counts['api']} partner API calls done, at most {api_max} started in any second"
        f" (limit {API_LIMIT}/s)")
    ticks = [r[0] for r in db.execute("SELECT extract(epoch FROM run_at)::float8 FROM jobq.jobs WHERE queue = 'cron' ORDER BY run_at")]
    steps = {round(b - a, 3) for a, b in zip(ticks, ticks[1:])}
    one_per_tick = len(ticks) >= 2 and steps == {3.0}
    say(f"  schedule:        'tick' ({TICK_CRON}) enqueued {len(ticks)} jobs, one per tick, 3 s apart"
        + ("" if one_per_tick else f": PROBLEM, steps {sorted(steps)}"))
    dead_rows = db.execute("SELECT count(*), min(last_error->>'message') FROM jobq.jobs WHERE state = 'dead'").fetchone()
    say(f"  dead:            {dead_rows[0]} always-failing mail(s) after 2 attempts, e.g. \"{dead_rows[1]}\"")
    say(f"  crash rescue:    job {video}: {victim.name} killed mid-job, requeued by {RESCUER},"
        " completed by another worker")
    o = db.execute("SELECT attempt, result, checkpoints FROM jobq.jobs WHERE id = %s", (order,)).fetchone()
    ships = db.execute("SELECT count(*) FROM jobq.jobs WHERE kind = 'ship' AND state = 'completed'").fetchone()[0]
    workflow_ok = (o[1]["charged_by"] == packer.name and o[0] == 2 and ships == 3 and o[1]["shipped"] == 3
                   and o[1]["delivered"] == {"by": "courier"})
    say(f"  workflow:        order {order}: charged once by {o[1]['charged_by']} (killed in 'pack'; the charge was not"
        f" redone), {ships} shipments spawned once and gathered, 'delivered' awaited and emitted; completed on attempt"
        f" {o[0]} by {o[1]['worker']}" + ("" if workflow_ok else ": PROBLEM"))
    (registered,) = db.execute("SELECT count(*) FROM jobq.workers WHERE name = ANY(%s)",
                               ([w.name for w in workers if w not in killed],)).fetchone()
    say(f"  shutdown:        the other workers got SIGTERM, finished their jobs, unregistered (exit codes {codes},"
        f" {registered} still registered)")
    ok = (not twice and not unlogged and registered == 0 and all(c == 0 for c in codes) and max_reports <= REPORT_LIMIT and rescued
          and api_max <= API_LIMIT and api_done == counts["api"] and one_per_tick and workflow_ok)
    say("  result:          " + ("OK" if ok else "PROBLEM: see above"))
    return 0 if ok else 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("demo: terminated"))  # still stop the workers
    try:
        sys.exit(main())
    finally:
        for p in STARTED:
            if p.poll() is None:
                p.kill()
