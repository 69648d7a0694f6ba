#!/usr/bin/env bash
# What one job costs in WAL, per system: checkout+complete (each system's own pgbench script) over
# a backlog, or with --workload mixed its whole life, enqueue+checkout+complete (each system's
# `_mixed` script, over the same backlog so that it stays put), with pg_waldump's per-record
# breakdown. With synchronous_commit = on every commit
# waits for its WAL to be flushed, so at 16 clients on 2 cores WAL per job is what bounds jobs/s
# (wait events there are mostly LWLock:WALWrite).
#   bench/walcost.sh [--jobs N] [--systems "jobq jobq_r0 baseline procrastinate graphile"] [--workload mixed] [--out FILE]
# A system's scripts are bench/scripts/SYSTEM_WORKLOAD.sql, or another system's where its file in
# bench/systems sets SYSTEM_SCRIPTS (jobq_fair: jobq's).
# Writes bench/results/walcost.md (walcost-mixed.md with --workload mixed; FILE with --out): a row per system, then per system what each kind of record
# costs per job (pg_waldump --stats=record), so that each byte can be traced to the write that
# made it.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=20000; SYSTEMS="jobq jobq_r0 baseline procrastinate graphile"; WORKLOAD=checkout_complete
while [ $# -gt 0 ]; do
  case "$1" in
    --workload) WORKLOAD=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    --out) OUT_ARG=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
. bench/lib.sh
for s in $SYSTEMS; do . "bench/systems/$s.sh"; "${s}_install"; done
start_cluster on
case $WORKLOAD in
  checkout_complete) OUT=bench/results/walcost.md; WHAT="checkout+complete"; ARGS="--jobs $JOBS" ;;
  mixed) OUT=bench/results/walcost-mixed.md; WHAT="enqueue+checkout+complete"; ARGS="--jobs $JOBS --workload mixed" ;;
  *) echo "unknown workload $WORKLOAD" >&2; exit 2 ;;
esac
[ -n "${OUT_ARG:-}" ] && OUT=$OUT_ARG && ARGS="$ARGS --systems \"$SYSTEMS\" --out $OUT_ARG"
COMMIT=$(git rev-parse --short HEAD)
{
  echo "# WAL per job, $WHAT"
  echo
  echo "\`bench/walcost.sh $ARGS\`, commit $COMMIT, $(date -u +%Y-%m-%d), $(machine). $JOBS jobs ($WHAT) by 4 pgbench clients over a backlog of 100,000 after a warm-up of 2,000; WAL between the two LSNs, full-page images included (a backlog is worked page by page, and each page's first change after a checkpoint writes it whole)."
  echo
  echo "| system | WAL bytes / job | records / job | full-page image bytes / job | heap records / job | btree records / job | transaction (commit) records / job |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
} > "$OUT"
RECORDS=$(mktemp)
lsn() { "${PSQL[@]}" -d bench -c "SELECT pg_current_wal_lsn()"; }
for s in $SYSTEMS; do
  "${s}_reset" 100000
  opts="${s}_PGOPTIONS"
  vars="${s}_PGBENCH"  # the script's variables (jobq_w, jobq_sql_w: the job in hand, batch 1)
  scripts="${s}_SCRIPTS"
  script="bench/scripts/${!scripts:-$s}_${WORKLOAD}.sql"
  PGOPTIONS="${!opts:-}" pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared -c 4 -j 4 -t 500 ${!vars:-} -f "$script" bench >/dev/null
  a=$(lsn)
  PGOPTIONS="${!opts:-}" pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared -c 4 -j 4 -t $((JOBS / 4)) ${!vars:-} -f "$script" bench >/dev/null
  b=$(lsn)
  "${PSQL[@]}" -d bench -c "SELECT pg_switch_wal()" >/dev/null
  # pg_waldump --stats: per resource manager "Type N (%) record-size (%) FPI-size (%) combined (%)";
  # with the percentages dropped: Type N record FPI combined.
  stats=$(as_pg "$PGBIN/pg_waldump" --stats -p "$DATA/pg_wal" -s "$a" -e "$b" 2>/dev/null | sed 's/\[[^]]*\]//g; s/([^)]*)//g')
  row() { echo "$stats" | awk -v t="$1" '$1 == t {print $2; f=1} END {if (!f) print 0}'; }
  fpi=$(echo "$stats" | awk '$1 == "Total" {print $4}')
  total=$(echo "$stats" | awk '$1 == "Total" {print $2}')
  bytes=$("${PSQL[@]}" -d bench -c "SELECT pg_wal_lsn_diff('$b', '$a')")
  per() { awk -v x="${1:-0}" -v n="$JOBS" 'BEGIN { printf "%.1f", x / n }'; }
  heap=$(( $(row Heap) + $(row Heap2) ))
  echo "| $s | $(per "$bytes") | $(per "$total") | $(per "$fpi") | $(per "$heap") | $(per "$(row Btree)") | $(per "$(row Transaction)") |" >> "$OUT"
  # Per record type: "Type N record FPI combined", bytes without full-page images.
  as_pg "$PGBIN/pg_waldump" --stats=record -p "$DATA/pg_wal" -s "$a" -e "$b" 2>/dev/null \
    | sed 's/\[[^]]*\]//g; s/([^)]*)//g' | awk -v n="$JOBS" -v s="$s" \
      '$1 ~ /\// && $2 + 0 >= n / 100 { printf "| %s | %s | %.2f | %.1f |\n", s, $1, $2 / n, $3 / n }' >> "$RECORDS"
  echo "walcost: $s done" >&2
done
{
  echo
  echo "Per record type (at least one record per 100 jobs), bytes per job without full-page images:"
  echo
  echo "| system | record | records / job | bytes / job |"
  echo "| --- | --- | ---: | ---: |"
  cat "$RECORDS"
} >> "$OUT"
rm -f "$RECORDS"
cat "$OUT"
