#!/usr/bin/env bash
# Throughput under a snapshot held elsewhere: checkout+complete at 16 clients while a
# REPEATABLE READ transaction in the same database holds its snapshot for the whole run, so
# vacuum can remove none of the row versions the run leaves behind. jobq beside the
# hand-written SKIP LOCKED baseline under the same held snapshot; throughput every 30 s.
#
#   bench/snapshot.sh [--seconds N] [--clients N] [--backlog N] [--systems "jobq baseline"]
#
# Output: bench/results/snapshot.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=300; CLIENTS=16; BACKLOG=2000000; SYSTEMS="jobq baseline"
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECS=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --backlog) BACKLOG=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
. bench/lib.sh
for s in $SYSTEMS; do . "bench/systems/$s.sh"; done
start_cluster on
OUT=bench/results/snapshot.md
TMP=$(mktemp -d)
for s in $SYSTEMS; do
  echo "snapshot: $s: filling a backlog of $BACKLOG" >&2
  "${s}_reset" "$BACKLOG"
  # The long transaction: its snapshot is taken by its first query and held until it ends.
  "${PSQL[@]}" -d bench -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM pg_class" \
    -c "SELECT pg_sleep($SECS + 60)" >/dev/null 2>&1 &
  HOLDER=$!
  until [ "$("${PSQL[@]}" -d bench -c "SELECT count(*) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND query LIKE 'SELECT pg_sleep%'")" = 1 ]; do sleep 0.2; done
  echo "snapshot: $s: checkout+complete at $CLIENTS clients for $SECS s under the held snapshot" >&2
  pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared -c "$CLIENTS" -j 2 -T "$SECS" -P 30 \
    -f "bench/scripts/${s}_checkout_complete.sql" bench > "$TMP/$s.out" 2> "$TMP/$s.progress" || true
  kill $HOLDER 2>/dev/null || true
  "${PSQL[@]}" -d bench -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND pid <> pg_backend_pid()" >/dev/null
  wait $HOLDER 2>/dev/null || true
  grep -qE "aborted|ERROR" "$TMP/$s.out" "$TMP/$s.progress" && { cat "$TMP/$s.out" "$TMP/$s.progress" >&2; exit 1; }
  awk '/^progress:/{print int($4)}' "$TMP/$s.progress" > "$TMP/$s.tps"
done
{
  echo "# Checkout+complete under a snapshot held for the whole run"
  echo
  echo "\`bench/snapshot.sh --seconds $SECS --clients $CLIENTS --backlog $BACKLOG\`, $(date -u +%Y-%m-%d), $(machine), synchronous_commit = on, jobq $(git rev-parse --short HEAD). A REPEATABLE READ transaction in the same database took its snapshot before the run and held it to the end. Jobs/s in each 30 s interval (pgbench --progress):"
  echo
  printf '| seconds |'; for s in $SYSTEMS; do printf ' %s |' "$s"; done; echo
  printf '| ---: |'; for s in $SYSTEMS; do printf ' ---: |'; done; echo
  paste -d' ' $(for s in $SYSTEMS; do echo "$TMP/$s.tps"; done) | awk '{printf "| %d |", NR * 30; for (i = 1; i <= NF; i++) printf " %s |", $i; print ""}'
  echo
  printf 'Last interval / first:'; for s in $SYSTEMS; do printf ' %s %s;' "$s" "$(awk 'NR==1{f=$1} {l=$1} END{ if (f > 0) printf "%.2f", l/f }' "$TMP/$s.tps")"; done; echo
} | tee "$OUT"
rm -rf "$TMP"
