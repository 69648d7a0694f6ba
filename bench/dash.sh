#!/usr/bin/env bash
# jobq-dash at scale: every page's response time (and a Prometheus scrape of /metrics) with
# 10,000,000 finished jobs in
# history (1% dead, 0.5% cancelled, over the last 23 hours, 20 queues) and 100,000 ready, a day
# of per-minute counters for each queue, a few workers, locks, schedules and rate limits. The
# dashboard (release build) connects as a role granted jobq_reader only, and as one granted
# jobq_admin (whose pages show the actions); each page is fetched REQUESTS times one after the
# other (after 3 warm-up fetches) with curl; p50 and p95 of the total time per page.
# Then the per-queue depth views themselves over the same history (jobq.queue_stats, jobq.queue_depths):
# p50 and p95 of REQUESTS executions each, as EXPLAIN ANALYZE times them on the server.
# Writes bench/results/dash.md. About 10 minutes, most of it the fill.
#   bench/dash.sh [--jobs N (default 10000000)] [--requests N (default 40)]
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=10000000; REQUESTS=40
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) JOBS=$2; shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
export BENCH_PORT=${BENCH_PORT:-5491} BENCH_DATA=${BENCH_DATA:-$PWD/target/bench-dash-data}
. bench/lib.sh
cargo build --release -q -p jobq-dash
start_cluster on
echo "dash: filling $JOBS finished jobs and 100,000 ready" >&2
"${PSQL[@]}" -d bench <<SQL
CREATE EXTENSION jobq;
CREATE ROLE dash_reader LOGIN; GRANT jobq_reader TO dash_reader;
CREATE ROLE dash_admin LOGIN; GRANT jobq_admin TO dash_admin;
-- History: straight into the table (the functions would take an hour), as jobq_complete,
-- jobq_fail and jobq_cancel leave them.
INSERT INTO jobq.finished_jobs (id, queue, kind, payload, priority, run_at, enqueued_at, state, attempt,
                                max_attempts, worker_id, started_at, finished_at, last_error, result, checkpoints)
SELECT nextval('jobq.jobs_id_seq'), 'q' || (g % 20), 'kind' || (g % 7), jsonb_build_object('n', g % 1000),
       0, t, t, s, 1, 25, '00000000-0000-0000-0000-000000000001', t + interval '5 ms', t + interval '40 ms',
       CASE WHEN s = 'dead' THEN '{"error": "boom"}'::jsonb END, CASE WHEN s = 'completed' THEN '{"ok": true}'::jsonb END, '{}'
  FROM generate_series(1, $JOBS) g,
       LATERAL (SELECT now() - interval '23 hours' + g * (interval '23 hours' / $JOBS) AS t,
                       CASE WHEN g % 100 = 0 THEN 'dead' WHEN g % 200 = 1 THEN 'cancelled' ELSE 'completed' END AS s) x;
SELECT count(*) FROM generate_series(0, 19) q,
       LATERAL jobq_enqueue_batch('q' || q, ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 5000) g), 'kind1');
-- A day of counters per queue, as the reap pass would have written them.
INSERT INTO jobq.queue_minutes
SELECT 'q' || q, date_trunc('minute', now()) - m * interval '1 minute', 430, 430, 425, 5, 1,
       '{300,100,20,5,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0}', '{0,0,0,0,0,400,25,5,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0}'
  FROM generate_series(0, 19) q, generate_series(0, 1439) m;
-- And the totals that only go up (/metrics reads them), as the same passes would have added.
INSERT INTO jobq.queue_totals
SELECT queue, sum(enqueued), sum(started), sum(completed), sum(failed), sum(dead),
       jobq.histogram_sum(wait_ms), jobq.histogram_sum(run_ms), sum(wait_us), sum(run_us)
  FROM jobq.queue_minutes GROUP BY queue
ON CONFLICT (queue) DO UPDATE
   SET enqueued = excluded.enqueued, started = excluded.started, completed = excluded.completed,
       failed = excluded.failed, dead = excluded.dead, wait_ms = excluded.wait_ms, run_ms = excluded.run_ms,
       wait_us = excluded.wait_us, run_us = excluded.run_us;
-- Workers with jobs in hand, locks, schedules, rate limits.
SELECT count(*) FROM (SELECT jobq_register_worker('w' || g) AS w FROM generate_series(1, 20) g) w,
       LATERAL jobq_checkout(w.w, NULL, 5) j;
SELECT count(jobq_acquire_lock('lock' || g, (SELECT id FROM jobq.workers LIMIT 1))) FROM generate_series(1, 20) g;
SELECT count(jobq_schedule('s' || g, '*/5 * * * *', 'q' || g)) FROM generate_series(1, 20) g;
SELECT count(jobq_set_rate_limit('api' || g, 100, '1 minute')) FROM generate_series(1, 20) g;
VACUUM ANALYZE;
SQL
JOB=$("${PSQL[@]}" -d bench -c "SELECT max(id) FROM jobq.finished_jobs WHERE state = 'dead'")
PAGES=(
  "/" "/fragments/overview" "/queues/q7" "/jobs" "/jobs?state=dead" "/jobs?state=ready&queue=q3"
  "/jobs?queue=q7" "/jobs?state=cancelled&queue=q11" "/jobs?kind=kind3&state=completed" "/jobs/$JOB"
  "/workers" "/locks" "/schedules" "/rate-limits" "/health" "/metrics"
  # Payload containment (no index on payloads): one job in 1,000 matches; then none.
  "/jobs?payload=%7B%22n%22%3A5%7D" "/jobs?payload=%7B%22x%22%3A1%7D"
)
out=bench/results/dash.md
{
  echo "## jobq-dash at scale"
  echo
  echo "\`bench/dash.sh --jobs $JOBS --requests $REQUESTS\`, $(date +%F), $(machine); jobq $(git rev-parse --short HEAD). $JOBS finished jobs (1% dead, 0.5% cancelled), 100,000 ready, a day of per-minute counters for 20 queues; each page fetched $REQUESTS times after 3 warm-ups, one at a time; ms."
  echo
  echo "| page | reader p50 | reader p95 | admin p50 | admin p95 |"
  echo "| --- | ---: | ---: | ---: | ---: |"
} >"$out"
declare -A P50 P95
BAD=""
for who in reader admin; do
  port=$((PORT + 1)); [ $who = admin ] && port=$((PORT + 2))
  ./target/release/jobq-dash --database-url "host=127.0.0.1 port=$PORT user=dash_$who dbname=bench" \
    --listen "127.0.0.1:$port" --query-timeout 5s >"target/dash-$who.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$port/health" && break; sleep 0.1; done
  for page in "${PAGES[@]}"; do
    url="http://127.0.0.1:$port$page"
    for _ in 1 2 3; do curl -s -o /dev/null "$url"; done
    # A page that answers 200 but shows an error or a timeout warning does not count as fast.
    if curl -s "$url" | grep -q 'class="msg bad"'; then
      echo "dash: $who $page shows an error: not a valid measurement" >&2; BAD="$BAD $who$page"
    fi
    times=$(for _ in $(seq "$REQUESTS"); do
      curl -s -o /dev/null -w '%{http_code} %{time_total}\n' "$url"
    done)
    if echo "$times" | grep -vq '^200 '; then
      echo "dash: $who $page answered $(echo "$times" | grep -v '^200 ' | head -1)" >&2
    fi
    sorted=$(echo "$times" | awk '{printf "%.1f\n", $2 * 1000}' | sort -n)
    P50[$who$page]=$(echo "$sorted" | awk -v n="$REQUESTS" 'NR == int((n + 1) / 2)')
    P95[$who$page]=$(echo "$sorted" | awk -v n="$REQUESTS" 'NR == int(n * 0.95 + 0.999)')
  done
  kill $pid; wait $pid 2>/dev/null || true
done
for page in "${PAGES[@]}"; do
  echo "| \`$page\` | ${P50[reader$page]} | ${P95[reader$page]} | ${P50[admin$page]} | ${P95[admin$page]} |" >>"$out"
done
[ -z "$BAD" ] || echo "Pages that showed an error (their times are not valid):$BAD" >>"$out"
# The views a depth check reads, over the same history: the server's execution time.
view_times() {
  for _ in $(seq "$REQUESTS"); do
    "${PSQL[@]}" -d bench -c "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM $1" \
      | python3 -c 'import json, sys; print("%.2f" % json.load(sys.stdin)[0]["Execution Time"])'
  done | sort -n
}
{
  echo
  echo "The per-queue depth views over the same history, as the server times them (EXPLAIN ANALYZE), $REQUESTS executions each; ms."
  echo
  echo "| view | p50 | p95 |"
  echo "| --- | ---: | ---: |"
  for view in jobq.queue_stats jobq.queue_depths; do
    sorted=$(view_times "$view")
    echo "| \`$view\` | $(echo "$sorted" | awk -v n="$REQUESTS" 'NR == int((n + 1) / 2)') | $(echo "$sorted" | awk -v n="$REQUESTS" 'NR == int(n * 0.95 + 0.999)') |"
  done
} >>"$out"
cat "$out"
