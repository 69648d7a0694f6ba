#!/usr/bin/env bash
# Changes of a rate limit never deadlock with the starts taken meanwhile, and no start waits
# for a change (src/sql/rate_limits.sql). For --seconds (default 120): 16 pgbench
# clients each take two starts of one key per transaction (bench/scripts/jobq_rate_take.sql,
# what a checkout of two rate-limited jobs calls), while 2 clients change that key's limit as
# fast as they can (bench/scripts/jobq_rate_change.sql: 40 to 60 starts per 20 ms, so slots
# are added, dropped and taken all the time). pgbench counts each side's deadlock and
# serialization failures (--max-tries=1: none is retried); the server logs every lock wait
# longer than 100 ms (log_lock_waits, deadlock_timeout = 100ms), and the report counts them
# by the statement that waited.
#
#   bench/rate-changes.sh [--seconds N]
#
# Output: bench/results/rate-changes.md. Exits 1 when any transaction failed, a deadlock was
# logged or a start waited over 100 ms (shorter waits are not logged: a start can wait briefly
# for another start, PostgreSQL's own wait in SKIP LOCKED, docs/reference/rate-limits.md).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=120
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
. bench/lib.sh
BENCH_CONF="log_lock_waits = on
deadlock_timeout = 100ms" start_cluster on
"${PSQL[@]}" -d bench -c "CREATE EXTENSION jobq" -c "SELECT jobq_set_rate_limit('flip', 50, '20 ms')" >/dev/null
RAW=target/bench-rate-changes; rm -rf "$RAW"; mkdir -p "$RAW"
log_from=$(wc -l < "$DATA/server.log")
pb() { pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -T "$SECS" --max-tries=1 --failures-detailed "$@" bench 2>&1 || true; }
echo "rate-changes: ${SECS}s, 16 clients taking starts, 2 changing the limit" >&2
pb -c 16 -j 2 -f bench/scripts/jobq_rate_take.sql > "$RAW/take.out" &
pb -c 2 -j 1 -f bench/scripts/jobq_rate_change.sql > "$RAW/change.out"
wait
tail -n +"$((log_from + 1))" "$DATA/server.log" > "$RAW/server.log"
status=0
python3 - "$RAW" "$SECS" "$(git rev-parse --short HEAD)" "$(date -u +%Y-%m-%d)" "$(machine)" > bench/results/rate-changes.md <<'PY' || status=$?
import re, sys
raw, secs, rev, day, machine = sys.argv[1:]
def counts(name):
    text = open(f"{raw}/{name}.out").read()
    grab = lambda pat: int(m.group(1)) if (m := re.search(pat, text)) else None
    return {"done": grab(r"actually processed: (\d+)"), "failed": grab(r"failed transactions: (\d+)"),
            "deadlock": grab(r"deadlock failures: (\d+)"), "serialization": grab(r"serialization failures: (\d+)"),
            "aborted": "aborted" in text}
take, change = counts("take"), counts("change")
log = open(f"{raw}/server.log").read()
# Each "still waiting" entry is followed by its CONTEXT/STATEMENT lines; the waiter is a start
# when its statement is the take, a change otherwise.
waits = {"start": 0, "change": 0}
for block in re.findall(r"still waiting for.*?STATEMENT:\s+([^\n]*)", log, re.S):
    waits["start" if "_take_rate" in block else "change"] += 1
deadlocks_logged = log.count("deadlock detected")
print("# Changes of a rate limit against the starts taken meanwhile\n")
print(f"`bench/rate-changes.sh --seconds {secs}`, {machine}, jobq {rev}, {day}. 16 clients take two starts "
      "of key 'flip' per transaction (`bench/scripts/jobq_rate_take.sql`) while 2 clients change its limit "
      "between 40 and 60 starts per 20 ms as fast as they can (`bench/scripts/jobq_rate_change.sql`); "
      "pgbench with `--max-tries=1` (no failure retried); the server logs every lock wait over 100 ms.\n")
print("| side | transactions | failed | deadlock failures | serialization failures | lock waits over 100 ms |")
print("|---|---:|---:|---:|---:|---:|")
for name, c, w in (("starts (2 per transaction)", take, waits["start"]), ("limit changes", change, waits["change"])):
    print(f"| {name} | {c['done']} | {c['failed']} | {c['deadlock']} | {c['serialization']} | {w} |")
ok = not take["aborted"] and not change["aborted"] and take["failed"] == 0 and change["failed"] == 0 \
     and deadlocks_logged == 0 and waits["start"] == 0 and take["done"] and change["done"]
print(f"\nDeadlocks in the server log: {deadlocks_logged}. " + (
      "A change waits for the starts in flight and for the other change (its waits above are those); no start "
      "waited over 100 ms: a start passes the key over while a change holds the key's lock." if ok else
      "FAILED: a transaction failed, a deadlock was logged or a start waited over 100 ms."))
sys.exit(0 if ok else 1)
PY
cat bench/results/rate-changes.md
exit $status
