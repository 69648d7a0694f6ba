#!/usr/bin/env bash
# Layout experiment for the performance issue: before jobq's storage changes, what do candidate
# layouts cost on this machine? jobq as it is and the hand-written baseline beside two
# prototypes written as plain SQL (bench/systems/proto_split.sh: a narrow ready table and a job
# row updated in place; bench/systems/proto_live.sh: a live table whose claim is an in-place
# update, and an append-only history). The prototypes lack what a full design must add (see
# their files): the figures are each layout's floor, to choose by, not jobq's.
#
#   bench/layouts.sh [--clients "4 16 64"] [--runs N] [--seconds N] [--systems "..."] [--jobs N] [--out FILE]
#
# Table 1: checkout+complete jobs/s (median of --runs runs of --seconds, each on a fresh backlog
# of 100,000), synchronous_commit = on. Table 2: WAL bytes per job over --jobs jobs at 4 clients
# (after a warm-up of 2,000), and the share of updates that were HOT (wrote no index entry).
# Output: bench/results/layouts.md (or --out).
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS="4 16 64"; RUNS=3; SECS=10; SYSTEMS="baseline jobq proto_split proto_live"; JOBS=20000
OUT=bench/results/layouts.md
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) CLIENTS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
. bench/lib.sh
for s in $SYSTEMS; do . "bench/systems/$s.sh"; done
start_cluster on
{
  echo "# Layout experiment: checkout+complete"
  echo
  echo "\`bench/layouts.sh --clients \"$CLIENTS\" --runs $RUNS --seconds $SECS --jobs $JOBS --systems \"$SYSTEMS\"\`, $(date -u +%Y-%m-%d), $(machine), synchronous_commit = on, jobq $(git rev-parse --short HEAD). The prototypes are plain SQL without the indexes a full design needs (executing jobs by worker, pruning): floors, not products."
  echo
  printf '| clients |'; for s in $SYSTEMS; do printf ' %s |' "$s"; done; echo
  printf '| ---: |'; for s in $SYSTEMS; do printf ' ---: |'; done; echo
} > "$OUT"
for c in $CLIENTS; do
  row="| $c |"
  for s in $SYSTEMS; do
    runs=""
    for _ in $(seq "$RUNS"); do
      "${s}_reset" 100000
      runs="$runs $(tps "${s}_checkout_complete.sql" "$c" "$SECS")"
    done
    echo "layouts: $s at $c clients:$runs" >&2
    row="$row $(echo "$runs" | median) |"
  done
  echo "$row" >> "$OUT"
done
lsn() { "${PSQL[@]}" -d bench -c "SELECT pg_current_wal_lsn()"; }
{
  echo
  echo "| system | WAL bytes / job | updates that were HOT |"
  echo "| --- | ---: | ---: |"
} >> "$OUT"
for s in $SYSTEMS; do
  "${s}_reset" 100000
  pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared -c 4 -j 4 -t 500 -f "bench/scripts/${s}_checkout_complete.sql" bench >/dev/null
  "${PSQL[@]}" -d bench -c "SELECT pg_stat_reset()" >/dev/null
  a=$(lsn)
  pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared -c 4 -j 4 -t $((JOBS / 4)) -f "bench/scripts/${s}_checkout_complete.sql" bench >/dev/null
  b=$(lsn)
  # pgbench's sessions have ended, and with them flushed their statistics.
  hot=$("${PSQL[@]}" -d bench -c "SELECT coalesce(round(100.0 * sum(n_tup_hot_upd) / nullif(sum(n_tup_upd), 0)) || ' %', '-') FROM pg_stat_user_tables")
  bytes=$("${PSQL[@]}" -d bench -c "SELECT round(pg_wal_lsn_diff('$b', '$a') / $JOBS)")
  echo "| $s | $bytes | $hot |" >> "$OUT"
done
cat "$OUT"
