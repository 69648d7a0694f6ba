#!/usr/bin/env bash
# Workers that wait for jobs: LISTEN + checkout against jobq_checkout(..., wait), at 1, 16 and
# 64 waiting workers: enqueue-commit to checkout-return latency (p50/p99/max) and checkouts
# per job (the herd: how many looks one job costs the waiting workers). bench/waitlatency.py.
#   bench/wait.sh [--samples N]
# Writes bench/results/wait.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SAMPLES=300
while [ $# -gt 0 ]; do
  case "$1" in
    --samples) SAMPLES=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
. bench/lib.sh
start_cluster on
# track_functions for the checkouts-per-job column ('all': jobq_checkout is a C function); the
# workers are plain sessions.
"${PSQL[@]}" -d postgres -c "ALTER SYSTEM SET track_functions = 'all'" -c "SELECT pg_reload_conf()" >/dev/null
OUT=bench/results/wait.md
{
  echo "# Waiting for jobs: LISTEN + checkout vs jobq_checkout(..., wait)"
  echo
  echo "\`bench/wait.sh --samples $SAMPLES\`, $(date -u +%Y-%m-%d), $(machine). One job at a time, 10-50 ms apart; latency from just before the enqueue call (which commits) to the checkout's return; checkouts per job counts jobq_checkout calls (a waiting call's looks included)."
  echo
  echo "| mode | waiting workers | p50 ms | p99 ms | max ms | checkouts per job |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
} > "$OUT"
for n in 1 16 64; do
  for mode in listen wait; do
    reset_jobq >/dev/null
    read -r p50 p99 mx per < <(PYTHONPATH=target/bench-py "$PY" bench/waitlatency.py "$PORT" "$mode" "$n" "$SAMPLES")
    echo "| $mode | $n | $p50 | $p99 | $mx | $per |" | tee -a "$OUT"
  done
done
echo "wrote $OUT"
