#!/usr/bin/env bash
# The worker protocol: jobs/s of checkout+complete when a worker
# takes jobs one by one or in batches, with two transactions per batch (checkout, then
# complete) or one (complete the batch in hand and check out the next in the same call):
#
#   jobq two calls   jobq_checkout(max_jobs => B), then jobq_complete_many   (bench/scripts/jobq_twocalls.sql)
#   jobq one call    jobq_complete_and_checkout(in hand, max_jobs => B)       (bench/scripts/jobq_fused.sql)
#   baseline one     the hand-written queue, one statement per job            (bench/scripts/baseline_fused.sql)
#   graphile batch   Graphile Worker's get_job with a batch size, then complete_jobs (bench/scripts/graphile_batch.sql)
#
#   bench/protocol.sh [--clients "1 4 16 64"] [--batches "1 10"] [--runs N] [--seconds N]
#
# Same throwaway cluster as bench/compare.sh (synchronous_commit = on), each run on a fresh
# backlog of 200,000; jobs/s = pgbench transactions/s x jobs per transaction (medians of --runs).
# Output: bench/results/protocol.md.
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS="1 4 16 64"; BATCHES="1 10"; RUNS=3; SECS=10
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) CLIENTS=$2; shift 2 ;;
    --batches) BATCHES=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
. bench/lib.sh
for s in jobq baseline graphile; do . "bench/systems/$s.sh"; done
graphile_install >/dev/null
start_cluster on
OUT=bench/results/protocol.md
# rate SCRIPT CLIENTS JOBS_PER_TX [-D ...]: jobs/s of one run, empty if a client failed. A
# transaction that deadlocks (the one-statement baseline can) is retried, as a worker would.
rate() {
  local script=$1 c=$2 per=$3; shift 3
  local out
  out=$(pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared --max-tries 10 -c "$c" -j "$c" -T "$SECS" "$@" -f "bench/scripts/$script" bench 2>&1) || true
  if echo "$out" | grep -qE 'aborted|ERROR|^number of failed transactions: [1-9]'; then echo "$out" >&2; return 0; fi
  echo "$out" | awk -v per="$per" '/^tps = /{print int($3 * per)}'
}
# row NAME RESET SCRIPT PER_TX [-D ...]: one table row over CLIENTS.
row() {
  local name=$1 reset=$2 script=$3 per=$4; shift 4
  local line="| $name |"
  for c in $CLIENTS; do
    local runs=""
    for _ in $(seq "$RUNS"); do
      $reset 200000 >/dev/null
      runs="$runs $(rate "$script" "$c" "$per" "$@")"
    done
    echo "protocol: $name at $c clients:$runs" >&2
    line="$line $(echo "$runs" | median) |"
  done
  echo "$line" >> "$OUT"
}
{
  echo "# The worker protocol: jobs/s by transactions per job and batch size"
  echo
  echo "\`bench/protocol.sh --clients \"$CLIENTS\" --batches \"$BATCHES\" --runs $RUNS --seconds $SECS\`, $(date -u +%Y-%m-%d), $(machine), synchronous_commit = on, $(jobq_version), $(graphile_version)."
  echo
  printf '| protocol |'; for c in $CLIENTS; do printf ' %s clients |' "$c"; done; echo
  printf '| --- |'; for c in $CLIENTS; do printf ' ---: |'; done; echo
} > "$OUT"
row "baseline, two statements per job" baseline_reset baseline_checkout_complete.sql 1
row "baseline, one statement per job" baseline_reset baseline_fused.sql 1 -D jid=0
for b in $BATCHES; do
  row "jobq, checkout + complete_many, batch $b" jobq_reset jobq_twocalls.sql "$b" -D batch="$b"
  row "jobq, complete_and_checkout, batch $b" jobq_reset jobq_fused.sql "$b" -D batch="$b" -D ids='{}'
  row "Graphile Worker, get_job + complete_jobs, batch $b" graphile_reset graphile_batch.sql "$b" -D batch="$b"
done
cat "$OUT"
