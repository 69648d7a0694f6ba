#!/usr/bin/env bash
# Nothing grows without bound: jobq at a steady 5,000 jobs/s for 10 minutes,
# every job with its own per-user concurrency key (so slot rows come and go) and a short
# retention (so pruning must keep up), with the background worker reaping every second. Every
# 30 s it samples the size of jobq's tables and indexes, their live rows and the backlog.
#
#   bench/soak.sh [--rate JOBS_PER_S] [--seconds N] [--retention INTERVAL]
#
# Producers: pgbench at a fixed rate (--rate), 10 jobs per transaction, one of them with
# concurrency key 'user-<random of 1,000,000>' and limit 2 (so a tenth of the rate creates and
# drops slot rows: with every job keyed, the keyed claim path tops out near 1,500 jobs/s on
# 2 cores, measured, below the rate). Workers: 8 pgbench clients, each a registered worker
# that checks out up to 10 jobs and completes them in one transaction (the protocol is not what
# is measured here; table growth is). synchronous_commit = off so that 2 cores reach the rate:
# the question is whether history and slots stay flat, not durability. Output:
# bench/results/soak.md (the samples) and the command line at its top.
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=5000; SECS=600; RETENTION=1min
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) RATE=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --retention) RETENTION=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
. bench/lib.sh
start_cluster off
"${PSQL[@]}" -d postgres -c "ALTER SYSTEM SET jobq.retention = '$RETENTION'" -c "SELECT pg_reload_conf()" >/dev/null
reset_jobq >/dev/null
OUT=bench/results/soak.md
TMP=$(mktemp -d)
cat > "$TMP/produce.sql" <<'SQL'
SELECT count(jobq_enqueue('soak', '{}', concurrency_key => CASE WHEN g = 1 THEN 'user-' || (random() * 1000000)::int END, concurrency_limit => 2)) FROM generate_series(1, 10) g;
SQL
cat > "$TMP/work.sql" <<'SQL'
SELECT count(jobq_complete(j.id, w.w)) FROM bench_workers w, jobq_checkout(w.w, ARRAY['soak'], 10) j WHERE w.client = :client_id;
SQL
SAMPLE="SELECT concat_ws(' | ', to_char(now(), 'HH24:MI:SS'),
  (SELECT last_value FROM jobq.jobs_id_seq),
  (SELECT count(*) FROM jobq.jobs WHERE state = 'ready'),
  (SELECT count(*) FROM jobq.jobs WHERE state = 'completed'),
  (SELECT count(*) FROM jobq.slots),
  pg_size_pretty(pg_table_size('jobq.live_jobs') + pg_table_size('jobq.finished_jobs')),
  pg_size_pretty(pg_indexes_size('jobq.live_jobs') + pg_indexes_size('jobq.finished_jobs')),
  pg_size_pretty(pg_total_relation_size('jobq.slots')), pg_size_pretty(pg_total_relation_size('jobq.locks')),
  (SELECT sum(n_dead_tup) FROM pg_stat_user_tables WHERE relid IN ('jobq.live_jobs'::regclass, 'jobq.finished_jobs'::regclass)))"
{
  echo "# Soak: $RATE jobs/s for $SECS s, a tenth of them with per-user concurrency keys, jobq.retention = $RETENTION"
  echo
  echo "\`bench/soak.sh --rate $RATE --seconds $SECS --retention $RETENTION\`, $(date -u +%Y-%m-%d), $(machine), synchronous_commit = off, jobq $(git rev-parse --short HEAD)."
  echo
  echo "| time | jobs enqueued | ready | completed (kept) | slot rows | jobs heap | jobs indexes | slots | locks | dead tuples in jobs |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
} > "$OUT"
PG=(pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared -T "$SECS" bench)
"${PG[@]}" -c 4 -j 2 -R $((RATE / 10)) -f "$TMP/produce.sql" > "$TMP/produce.log" 2>&1 &
P1=$!
"${PG[@]}" -c 8 -j 2 -f "$TMP/work.sql" > "$TMP/work.log" 2>&1 &
P2=$!
start=$(date +%s)
while kill -0 $P1 2>/dev/null || kill -0 $P2 2>/dev/null; do
  echo "| $("${PSQL[@]}" -d bench -c "$SAMPLE") |" | tee -a "$OUT"
  # The next sample 30 s after the start of this one, or when both pgbench runs ended.
  next=$(( start + ( ($(date +%s) - start) / 30 + 1) * 30 ))
  while [ "$(date +%s)" -lt $next ] && { kill -0 $P1 2>/dev/null || kill -0 $P2 2>/dev/null; }; do sleep 1; done
done
wait $P1 $P2 || true
echo "| $("${PSQL[@]}" -d bench -c "$SAMPLE") |" | tee -a "$OUT"
{
  echo
  echo "Producers (pgbench, 10 jobs per transaction): $(awk '/^tps = /{printf "%d jobs/s", $3 * 10}' "$TMP/produce.log"); workers (checkout of up to 10 + complete, one transaction): $(awk '/^tps = /{printf "%d transactions/s", $3}' "$TMP/work.log")."
} | tee -a "$OUT"
grep -E "aborted|ERROR" "$TMP"/*.log >&2 && exit 1
rm -rf "$TMP"
