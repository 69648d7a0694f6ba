#!/usr/bin/env python3
"""Runs the integration suites of tests/ (one test binary each) two at a time.

Each suite starts its own PostgreSQL clusters on free ports (tests/common), so two suites never
share a server. Much of a suite's time is spent waiting (for a heartbeat to expire, a pass to run,
a worker to be killed), so a second suite beside it uses the idle core. The longest suites start
first, so that the last to finish is a short one. The suites that assert a wake-up latency
(WAITS_ALONE) run afterwards, one at a time, with no other suite beside them. Each suite's output
is printed whole when it ends; the run fails if any suite failed, after all have run.

  scripts/run-suites.py [--jobs N] CARGO_ARGS... [-- TEST_ARGS...]

CARGO_ARGS go to `cargo test --tests --no-run` (features, profile, `--test SUITE` to choose
suites); TEST_ARGS to every test binary (a name filter, --skip NAME).
"""
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

# The longest first, as measured in CI's run; the others follow by name. keys and compact keep
# both cores busy (many sessions claiming, tens of thousands of jobs churned) and take no less
# time side by side than one after the other, so suites that mostly wait (for workers to start
# and be killed, for passes) run beside keys, and compact starts when keys is about done.
LONGEST = ["keys", "cross_language", "reaper", "compact", "sql_edition", "workflows", "checkout", "fairness"]
# Their tests assert how soon a waiting checkout wakes after a commit (hundreds of milliseconds):
# a second suite's load on the two cores would be measured with it.
WAITS_ALONE = ["waits", "wakes"]


def binaries(cargo_args):
    out = subprocess.run(
        # Every suite, unless `--test` names some.
        ["cargo", "test", *([] if "--test" in cargo_args else ["--tests"]), "--no-run", "--message-format=json", *cargo_args],
        check=True, stdout=subprocess.PIPE, text=True,
    ).stdout
    found = {}
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["kind"] == ["test"] and msg.get("executable"):
            found[msg["target"]["name"]] = msg["executable"]
    return found


def run(name, exe, test_args):
    start = time.monotonic()
    proc = subprocess.run([exe, *test_args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took = time.monotonic() - start
    sys.stdout.write(f"---- tests/{name}.rs ({took:.1f} s, exit {proc.returncode})\n{proc.stdout}")
    sys.stdout.flush()
    return name, proc.returncode


def main():
    args = sys.argv[1:]
    jobs = 2
    if args[:1] == ["--jobs"]:
        jobs, args = int(args[1]), args[2:]
    cargo_args, test_args = (args[: args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, [])
    found = binaries(cargo_args)
    together = sorted((n for n in found if n not in WAITS_ALONE), key=lambda n: (LONGEST.index(n) if n in LONGEST else len(LONGEST), n))
    alone = [n for n in WAITS_ALONE if n in found]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda n: run(n, found[n], test_args), together))
    results += [run(n, found[n], test_args) for n in alone]
    failed = [n for n, rc in results if rc != 0]
    if failed:
        print(f"run-suites: failed: {' '.join(failed)}", file=sys.stderr)
        sys.exit(1)
    print(f"run-suites: {len(results)} suites passed")


if __name__ == "__main__":
    main()
