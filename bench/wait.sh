#!/usr/bin/env bash
# Workers that wait for jobs: LISTEN + checkout against jobq_checkout(..., wait), at 1, 16 and
# 64 waiting workers: enqueue-commit to checkout-return latency (p50/p99/max) and checkouts
# per job (the herd: how many looks one job costs the waiting workers). bench/waitlatency.py.
# Then what 64 idle waiting workers cost the server's CPU (bench/idlecost.py).
#   bench/wait.sh [--samples N]           the extension; writes bench/results/wait.md
#   bench/wait.sh --sql [--samples N]     the SQL edition's waits (bench/systems/jobq_sql.sh);
#                                         writes bench/results/wait-sql.md
set -euo pipefail
cd "$(dirname "$0")/.."
SAMPLES=300 EDITION=extension
while [ $# -gt 0 ]; do
  case "$1" in
    --samples) SAMPLES=$2; shift 2 ;;
    --sql) EDITION=sql; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
. bench/lib.sh
start_cluster on
# track_functions for the checkouts-per-job column ('all': jobq_checkout is a C function); the
# workers are plain sessions.
"${PSQL[@]}" -d postgres -c "ALTER SYSTEM SET track_functions = 'all'" -c "SELECT pg_reload_conf()" >/dev/null
if [ $EDITION = sql ]; then
  . bench/systems/jobq_sql.sh; jobq_sql_install
  OUT=bench/results/wait-sql.md MODES=wait TITLE="the SQL edition's jobq_checkout(..., wait)" ARGS="--sql "
  reset() { jobq_sql_reset 0; }
else
  OUT=bench/results/wait.md MODES="listen wait" TITLE="LISTEN + checkout vs jobq_checkout(..., wait)" ARGS=""
  reset() { reset_jobq; }
fi
{
  echo "# Waiting for jobs: $TITLE"
  echo
  echo "\`bench/wait.sh ${ARGS}--samples $SAMPLES\` at $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d), $(machine). One job at a time, 10-50 ms apart; latency from just before the enqueue call (which commits) to the checkout's return; checkouts per job counts jobq_checkout calls (a waiting call's looks included)."
  echo
  echo "| mode | waiting workers | p50 ms | p99 ms | max ms | checkouts per job |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
} > "$OUT"
for n in 1 16 64; do
  for mode in $MODES; do
    reset >/dev/null
    read -r p50 p99 mx per < <(PYTHONPATH=target/bench-py "$PY" bench/waitlatency.py "$PORT" "$mode" "$n" "$SAMPLES")
    echo "| $mode | $n | $p50 | $p99 | $mx | $per |" | tee -a "$OUT"
  done
done
reset >/dev/null
idle=$(PYTHONPATH=target/bench-py "$PY" bench/idlecost.py "$PORT" 64 20)
{ echo; echo "64 idle waiting workers (\`bench/idlecost.py\`, 20 s once all wait): their server processes used $idle % of one core."; } | tee -a "$OUT"
echo "wrote $OUT"
