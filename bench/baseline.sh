#!/usr/bin/env bash
# jobq against a hand-written SKIP LOCKED queue, checkout+complete with a pre-filled backlog.
#   bench/baseline.sh [--seconds N] [--runs N] [--clients "1 4 16 64"] [--backlog N] [--async]
# The baseline is the smallest queue that works: one table, one partial index,
# UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING, then DELETE.
# It has no workers, heartbeats, fencing, keys or history. Both run as two transactions per
# job (claim, then finish), driven by pgbench -M prepared. Writes bench/results/baseline.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=10; RUNS=3; CLIENTS="1 4 16 64"; SYNC=on; BACKLOG=300000
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --backlog) BACKLOG=$2; shift 2 ;;
    --async) SYNC=off; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
. bench/lib.sh
start_cluster "$SYNC"

reset_baseline() {
  "${PSQL[@]}" -d bench <<SQL
DROP TABLE IF EXISTS baseline_jobs;
CREATE TABLE baseline_jobs (
    id bigserial PRIMARY KEY, queue text NOT NULL, payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
    state text NOT NULL DEFAULT 'ready', attempts integer NOT NULL DEFAULT 0);
CREATE INDEX ON baseline_jobs (queue, priority, run_at, id) WHERE state = 'ready';
INSERT INTO baseline_jobs (queue, payload) SELECT 'bench', '{}' FROM generate_series(1, $BACKLOG);
VACUUM ANALYZE baseline_jobs;
SQL
}
reset_jobq_backlog() {
  reset_jobq
  "${PSQL[@]}" -d bench -c "SELECT count(*) FROM jobq_enqueue_batch('bench', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, $BACKLOG)))" >/dev/null
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE" >/dev/null
}

OUT=bench/results/baseline.md
mkdir -p bench/results
{
  echo "# jobq against a hand-written SKIP LOCKED queue: checkout+complete"
  echo
  echo "\`bench/baseline.sh --seconds $SECONDS_PER_RUN --runs $RUNS --clients \"$CLIENTS\" --backlog $BACKLOG$( [ $SYNC = off ] && echo ' --async')\`, $(date -u +%Y-%m-%d), $(machine), synchronous_commit=$SYNC, shared_buffers=1GB, pgbench -M prepared on the same machine. Median jobs/s over $RUNS runs of ${SECONDS_PER_RUN}s, backlog of $BACKLOG ready jobs."
  echo
  echo "| clients | baseline | jobq | jobq / baseline |"
  echo "| ---: | ---: | ---: | ---: |"
} > "$OUT"
for c in $CLIENTS; do
  b=""; j=""
  for _ in $(seq "$RUNS"); do
    reset_baseline >/dev/null; b="$b $(tps baseline_checkout_complete.sql "$c" "$SECONDS_PER_RUN")"
    reset_jobq_backlog; j="$j $(tps checkout_complete.sql "$c" "$SECONDS_PER_RUN")"
  done
  bm=$(echo "$b" | median); jm=$(echo "$j" | median)
  echo "clients=$c baseline:$b -> $bm  jobq:$j -> $jm" >&2
  echo "| $c | $bm | $jm | $(ratio "$jm" "$bm") |" >> "$OUT"
done
cat "$OUT"
