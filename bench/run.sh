#!/usr/bin/env bash
# jobq benchmarks, driven at the SQL level by pgbench on a throwaway PostgreSQL 15 cluster.
#   bench/run.sh [--seconds N] [--runs N] [--clients "1 4 16"] [--async]
# Prints a markdown table (median jobs/s over the runs) and writes it to bench/results/keys.md.
#
# Workloads (issue 3: the cost of uniqueness and concurrency keys):
#   enqueue          jobq_enqueue, autocommit, one job per transaction
#   enqueue+unique   the same with a unique_key (until_executed)
#   checkout         jobq_checkout + jobq_complete against a pre-filled backlog (two transactions)
#   checkout+ckey    the same, every job with a concurrency key (100 keys, limit 5)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=10; RUNS=3; CLIENTS="1 4 16"; SYNC=on
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --async) SYNC=off; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

. bench/lib.sh
start_cluster "$SYNC"

reset_db() {  # a fresh extension, workers for every client, and a backlog
  reset_jobq
  case "$1" in
    plain) "${PSQL[@]}" -d bench -c "SELECT count(*) FROM jobq_enqueue_batch('bench', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, $2)))" >/dev/null ;;
    ckey)  "${PSQL[@]}" -d bench -c "SELECT count(jobq_enqueue('bench', concurrency_key => 'k' || (g % 100), concurrency_limit => 5)) FROM generate_series(1, $2) g" >/dev/null ;;
  esac
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE" >/dev/null
}

OUT=bench/results/keys.md
mkdir -p bench/results
{
  echo "# jobq: the cost of unique and concurrency keys"
  echo
  echo "\`bench/run.sh --seconds $SECONDS_PER_RUN --runs $RUNS --clients \"$CLIENTS\"$( [ $SYNC = off ] && echo ' --async')\`, $(date -u +%Y-%m-%d), $(machine), synchronous_commit=$SYNC, shared_buffers=1GB, pgbench -M prepared on the same machine. Median jobs/s over $RUNS runs of ${SECONDS_PER_RUN}s."
  echo
  echo "| clients | enqueue | enqueue+unique | ratio | checkout+complete | checkout+complete, concurrency keys | ratio |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
} > "$OUT"
for c in $CLIENTS; do
  declare -A r=()
  for w in enqueue_plain enqueue_unique checkout_plain checkout_ckey; do
    vals=""
    for _ in $(seq "$RUNS"); do
      case $w in
        enqueue_plain)  reset_db none 0; v=$(tps enqueue_plain.sql "$c" "$SECONDS_PER_RUN") ;;
        enqueue_unique) reset_db none 0; v=$(tps enqueue_unique.sql "$c" "$SECONDS_PER_RUN") ;;
        checkout_plain) reset_db plain 300000; v=$(tps checkout_complete.sql "$c" "$SECONDS_PER_RUN") ;;
        checkout_ckey)  reset_db ckey 300000; v=$(tps checkout_complete.sql "$c" "$SECONDS_PER_RUN") ;;
      esac
      vals="$vals $v"
    done
    r[$w]=$(echo "$vals" | median)
    echo "clients=$c $w runs:$vals -> ${r[$w]}" >&2
  done
  echo "| $c | ${r[enqueue_plain]} | ${r[enqueue_unique]} | $(ratio "${r[enqueue_unique]}" "${r[enqueue_plain]}") | ${r[checkout_plain]} | ${r[checkout_ckey]} | $(ratio "${r[checkout_ckey]}" "${r[checkout_plain]}") |" >> "$OUT"
done
cat "$OUT"
