#!/usr/bin/env bash
# Workflows at scale: a fan-in of 10,000 jobs into one (jobq_await_jobs) against the same
# 10,000 jobs with no one awaiting them, and a chain of 1,000 steps (each depending on the one
# before). bench/workflows.py says what each measures. Medians of --runs runs.
#   bench/workflows.sh [--runs N] [--children N] [--steps N] [--workers N]
# Writes bench/results/workflows.md.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=3; CHILDREN=10000; STEPS=1000; WORKERS=16
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --children) CHILDREN=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
. bench/lib.sh
start_cluster on
OUT=bench/results/workflows.md
col() { tr ' ' '\n' | sed -n "$1p"; }
run() {  # run MODE ARGS...: the median of each printed column over RUNS runs
  local a=() b=() c=()
  for _ in $(seq "$RUNS"); do
    reset_jobq >/dev/null
    read -r x y z < <("$PY" bench/workflows.py "$PORT" "$@")
    a+=("$x"); b+=("$y"); c+=("${z:--}")
  done
  echo "$(echo "${a[*]}" | median) $(echo "${b[*]}" | median) $(echo "${c[*]}" | median)"
}
{
  echo "# Workflows: fan-in and chains"
  echo
  echo "\`bench/workflows.sh --runs $RUNS --children $CHILDREN --steps $STEPS --workers $WORKERS\`, $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d), $(machine), synchronous_commit = on. Medians of $RUNS runs."
  echo
  echo "| workload | jobs/s | wake-up ms (p50) | p99 ms |"
  echo "| --- | ---: | ---: | ---: |"
} > "$OUT"
read -r rate _ _ < <(run plain "$CHILDREN" "$WORKERS")
echo "| $CHILDREN plain jobs, $WORKERS workers | $rate | - | - |" | tee -a "$OUT"
read -r rate wake _ < <(run fanin "$CHILDREN" "$WORKERS")
echo "| the same $CHILDREN jobs awaited by one job (fan-in) | $rate | $wake | - |" | tee -a "$OUT"
read -r rate p50 p99 < <(run chain "$STEPS")
echo "| a chain of $STEPS steps, one worker | $rate | $p50 | $p99 |" | tee -a "$OUT"
echo "wrote $OUT"
