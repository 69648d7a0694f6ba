"""What handing a job to its own unit of concurrency costs in Python, with no database.

    python3 bench/clients/python/handoff.py [N]

For C = 1, 4 and 16 in flight, N no-op jobs (default 20,000) go C at a time either to a
thread pool (submit, then wait until all C have ended: what a synchronous threaded worker does
per job) or to asyncio tasks (create_task, then wait until all C have ended: what jobq's
asyncio worker does per job), and the process's CPU time per job is printed. The least of 5
runs of each, so a busy machine inflates neither side. Writes bench/results/handoff.md.

docs/performance.md ("Client libraries") uses it to weigh a synchronous worker against the
asyncio one.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import platform
import queue
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def noop(job: int) -> None:
    return None


def threads(c: int, n: int) -> float:
    ended: queue.SimpleQueue[int] = queue.SimpleQueue()

    def run(job: int) -> None:
        try:
            noop(job)
        finally:
            ended.put(job)

    with ThreadPoolExecutor(c) as pool:
        t0 = time.process_time()
        for _ in range(n // c):
            for job in range(c):
                pool.submit(run, job)
            for _ in range(c):
                ended.get()
        return (time.process_time() - t0) / (n // c * c)


def tasks(c: int, n: int) -> float:
    async def main() -> float:
        ended = asyncio.Event()
        running = 0

        async def run(job: int) -> None:
            nonlocal running
            try:
                noop(job)
            finally:
                running -= 1
                if running == 0:
                    ended.set()

        t0 = time.process_time()
        for _ in range(n // c):
            ended.clear()
            running = c
            for job in range(c):
                asyncio.create_task(run(job))
            await ended.wait()
        return (time.process_time() - t0) / (n // c * c)

    return asyncio.run(main())


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [
        "# A job through a thread pool against an asyncio task",
        "",
        f"`python3 bench/clients/python/handoff.py {n}`, commit {commit}, {datetime.date.today()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; no database.",
        "",
        f"{n} no-op jobs, C at a time: submitted to a thread pool of C threads, or started as C",
        "asyncio tasks, then waited for until all C have ended. CPU µs per job (user + system), the",
        "least of 5 runs of each.",
        "",
        "| in flight | thread pool | asyncio tasks |",
        "| ---: | ---: | ---: |",
    ]
    for c in (1, 4, 16):
        t = min(threads(c, n) for _ in range(5))
        a = min(tasks(c, n) for _ in range(5))
        lines.append(f"| {c} | {t * 1e6:.1f} | {a * 1e6:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    with open(os.path.join(root, "bench", "results", "handoff.md"), "w") as out:
        out.write(text)


if __name__ == "__main__":
    main()
