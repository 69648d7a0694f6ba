#!/usr/bin/env bash
# Fair checkout under a tenant's backlog (docs/performance.md, "Fair checkout"). Two runs on one
# cluster, each with a backlog of 1,000,000 jobs in queue 'bench', 900,000 of them enqueued first
# by one tenant, then 100 for each of 999 other tenants:
#   plain  the jobs carry no fairness key: checkout takes them in enqueue order;
#   fair   each job carries its tenant as its fairness_key: 1,000 active keys take turns.
# In each, 16 pgbench clients check out and complete (bench/scripts/jobq_checkout_complete.sql)
# for SECONDS while one more client enqueues a job for a random small tenant 50 times a second
# (kind 'probe'). Reported: jobs/s of the 16 clients, fair / plain, and how long the probes
# waited from enqueue to checkout (p50, p99, max; and how many were still waiting at the end,
# behind the backlog).
#   bench/fairness.sh [SECONDS (default 30)]
# Output: bench/results/fairness.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_RUN=${1:-30}
. bench/lib.sh
start_cluster on
OUT=bench/results/fairness.md

run() {  # run plain|fair: one row of the table
  local mode=$1 key="NULL" small="NULL"
  [ "$mode" = fair ] && key="'big'" && small="'t' || t"
  reset_jobq >/dev/null
  "${PSQL[@]}" -d bench >/dev/null <<SQL
SELECT count(*) FROM jobq_enqueue_batch('bench', array_fill('{}'::jsonb, ARRAY[900000]), fairness_key => $key);
SELECT count(*) FROM generate_series(1, 999) t,
       LATERAL jobq_enqueue_batch('bench', array_fill('{}'::jsonb, ARRAY[100]), fairness_key => $small);
VACUUM ANALYZE;
SQL
  local probe
  probe=$(mktemp)
  if [ "$mode" = fair ]; then
    echo "\\set t random(1, 999)" >"$probe"
    echo "SELECT jobq_enqueue('bench', '{}', kind => 'probe', fairness_key => 't' || :t);" >>"$probe"
  else
    echo "SELECT jobq_enqueue('bench', '{}', kind => 'probe');" >"$probe"
  fi
  chmod 644 "$probe"
  pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -c 1 -R 50 -T "$SECONDS_RUN" -f "$probe" bench >/dev/null 2>&1 &
  local prober=$!
  local rate
  rate=$(tps jobq_checkout_complete.sql 16 "$SECONDS_RUN")
  wait "$prober"
  rm -f "$probe"
  local waits
  waits=$("${PSQL[@]}" -d bench -F ' | ' <<'SQL'
SELECT round(1000 * extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY started_at - enqueued_at))),
       round(1000 * extract(epoch FROM percentile_disc(0.99) WITHIN GROUP (ORDER BY started_at - enqueued_at))),
       round(1000 * extract(epoch FROM max(started_at - enqueued_at))),
       count(*) FILTER (WHERE started_at IS NULL) || ' of ' || count(*)
  FROM (SELECT j.enqueued_at, j.started_at FROM jobq.jobs j WHERE j.kind = 'probe') p;
SQL
)
  echo "| $mode | $rate | $waits |"
}

plain=$(run plain)
fair=$(run fair)
ratio_=$(ratio "$(echo "$fair" | awk -F'|' '{print $3}' | tr -d ' ')" "$(echo "$plain" | awk -F'|' '{print $3}' | tr -d ' ')")
{
  echo "# Fair checkout under a tenant's backlog"
  echo
  echo "\`bench/fairness.sh $SECONDS_RUN\`, $(date -u +%F), $(machine), $(jobq_version). A backlog of 1,000,000 jobs"
  echo "(900,000 of one tenant enqueued first, then 100 for each of 999 others); 16 clients check out and"
  echo "complete for $SECONDS_RUN s while one more enqueues a probe job for a random small tenant 50 times a second."
  echo "The probes' wait is from enqueue to checkout, in ms; \"waiting\" counts those not checked out at the end."
  echo
  echo "| run | jobs/s (16 clients) | probe p50 ms | probe p99 ms | probe max ms | waiting at the end |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
  echo "$plain"
  echo "$fair"
  echo
  echo "fair / plain: $ratio_"
} >"$OUT"
cat "$OUT"
