#!/usr/bin/env bash
# Throughput that a long transaction elsewhere cannot take away:
# checkout+complete by 16 workers (batch 10, 1 ms of work per job, each job completed in its
# own transaction) while a producer keeps ~4,000 jobs ready, clean for --clean seconds, then
# under pressure for --pressure seconds, then --after seconds more; jobq beside the
# hand-written baseline under the same pressure. Scenarios (bench/pressure.py):
#   xid      one session idle in a transaction that holds an xid
#   readers  four REPEATABLE READ sessions looping SELECT count(*) over the tables checkout reads
#   static   the readers' control: the same four sessions over a 4,000-row table nothing writes
#
#   bench/pressure.sh [--clean S] [--pressure S] [--after S] [--scenarios "xid readers"] [--systems "jobq baseline"]
#                     [--only "jobq:xid ..."]   run only these system:scenario pairs again; the
#                                               report still covers every pair (earlier runs' data)
#                     [--out FILE]              the report's file (default bench/results/pressure.md)
#
# Output: bench/results/pressure.md: per system and scenario, jobs/s and the checkout calls'
# p99 every 5 s, the hot tables' size and dead tuples, and the summary ratios (pressure /
# clean jobs/s, worst p99 / clean p99, the first 10 s after / clean); and the
# buffers checkpoints wrote in each 5 s, with the rates split by whether a checkpoint was
# writing (a held horizon makes each checkpoint write more: docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."
CLEAN=60; PRESSURE=300; AFTER=30; SCENARIOS="xid readers"; SYSTEMS="jobq baseline"; ONLY=""; OUT=bench/results/pressure.md
while [ $# -gt 0 ]; do
  case "$1" in
    --clean) CLEAN=$2; shift 2 ;;
    --pressure) PRESSURE=$2; shift 2 ;;
    --after) AFTER=$2; shift 2 ;;
    --scenarios) SCENARIOS=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
. bench/lib.sh
for s in $SYSTEMS; do . "bench/systems/$s.sh"; done
start_cluster on
RAW=target/bench-pressure; mkdir -p "$RAW"
DSN="host=127.0.0.1 port=$PORT user=postgres dbname=bench"
for sc in $SCENARIOS; do
  for s in $SYSTEMS; do
    [ -z "$ONLY" ] || [[ " $ONLY " == *" $s:$sc "* ]] || continue
    "${s}_reset" 4000 >/dev/null
    echo "pressure: $s, $sc: ${CLEAN}s clean, ${PRESSURE}s under pressure, ${AFTER}s after" >&2
    "$PY" bench/pressure.py "$s" "$sc" "$DSN" --clean "$CLEAN" --pressure "$PRESSURE" --after "$AFTER" > "$RAW/$s-$sc.jsonl"
  done
done
python3 - "$RAW" "$CLEAN" "$PRESSURE" "$AFTER" "$SCENARIOS" "$SYSTEMS" "$(git rev-parse --short HEAD)" "$(machine)" "${BENCH_CONF:-}" > "$OUT" <<'PY'
import json, sys
raw, clean, pressure, after, scenarios, systems, rev, machine, conf = sys.argv[1:]
clean, pressure, after = int(clean), int(pressure), int(after)
names = {"xid": "one session idle in a transaction holding an xid",
         "readers": "four REPEATABLE READ sessions looping SELECT count(*) over the tables checkout reads",
         "static": "control: the same four sessions looping SELECT count(*) over a 4,000-row table nothing writes"}
print("# Throughput under pressure from elsewhere\n")
print(f"`bench/pressure.sh --clean {clean} --pressure {pressure} --after {after}`, {machine}, synchronous_commit = on"
      + (f", {conf}" if conf else "") + f", jobq {rev}. "
      "16 workers (batch 10, 1 ms of work per job, each job completed in its own transaction), ~4,000 jobs kept ready "
      "(the producer counts enqueued minus completed itself). Empty checkouts: calls that found nothing (workers starved).\n")
for sc in scenarios.split():
    rows = {s: [json.loads(l) for l in open(f"{raw}/{s}-{sc}.jsonl")] for s in systems.split()}
    print(f"## {names[sc]}\n")
    print("| system | clean jobs/s | under pressure | ratio | checkout p99 clean → worst (ms) | first 10 s after / clean | hot tables MB, end of pressure | dead tuples, end of pressure | empty checkouts under pressure |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    ck = []  # the same rates split by whether a checkpoint was writing
    for s, r in rows.items():
        c = [x for x in r if x["phase"] == "clean" and x["t"] > 10]  # past the warm-up
        p = [x for x in r if x["phase"] == "pressure"]
        a = [x for x in r if x["phase"] == "after"][:2]
        mean = lambda xs, k: sum(x[k] for x in xs) / len(xs) if xs else float("nan")
        cj, pj, aj = mean(c, "jobs_per_s"), mean(p, "jobs_per_s"), mean(a, "jobs_per_s")
        cp = sorted(x["checkout_p99_ms"] for x in c if x["checkout_p99_ms"] is not None)
        cp99 = cp[len(cp) // 2] if cp else float("nan")
        worst = max((x["checkout_p99_ms"] or 0) for x in p) if p else float("nan")
        print(f"| {s} | {cj:.0f} | {pj:.0f} | {pj / cj:.2f} | {cp99:.1f} → {worst:.1f} | {aj / cj:.2f} | {p[-1]['hot_mb']} | {p[-1]['dead_tuples']} | {sum(x.get('empty_checkouts', 0) for x in p)} |")
        split = lambda xs, w: [x for x in xs if (x.get("checkpoint_buffers", 0) > 0) == w]
        ck.append((s, [(len(split(xs, w)), mean(split(xs, w), "jobs_per_s")) for xs in (c, p) for w in (False, True)]))
    print("\nThe same 5-second windows split by whether a checkpoint was writing buffers in them (windows, mean jobs/s):\n")
    print("| system | clean, no checkpoint | clean, checkpoint writing | pressure, no checkpoint | pressure, checkpoint writing |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for s, cells in ck:
        print(f"| {s} | " + " | ".join(f"{n}: {m:.0f}" if n else "0: -" for n, m in cells) + " |")
    print("\nEvery 5 s (jobs/s, checkout p99 ms, buffers written by a checkpoint in the window, MB of WAL "
          "written in it and its full-page images; '-' where a run predates the column):\n")
    print("| s | phase | " + " | ".join(f"{s} jobs/s | {s} p99 | {s} checkpoint buffers | {s} WAL MB | {s} FPIs" for s in rows) + " |")
    print("| ---: | --- | " + " | ".join("---: | ---: | ---: | ---: | ---:" for _ in rows) + " |")
    for i, x in enumerate(next(iter(rows.values()))):
        cells = []
        for s in rows:
            y = rows[s][i] if i < len(rows[s]) else None
            cells.append(f"{y['jobs_per_s']:.0f} | {y['checkout_p99_ms'] or 0:.1f} | {y.get('checkpoint_buffers', '-')} | "
                         f"{y.get('wal_mb', '-')} | {y.get('wal_fpi', '-')}" if y else "- | - | - | - | -")
        print(f"| {x['t']} | {x['phase']} | " + " | ".join(cells) + " |")
    print()
PY
cat "$OUT"
