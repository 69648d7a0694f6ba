#!/usr/bin/env bash
# Fair checkout under a tenant's backlog (docs/performance.md, "Fair checkout"). Two runs on one
# cluster, each with a backlog of 1,000,000 jobs in queue 'bench', 900,000 of them enqueued first
# by one tenant, then 100 for each of 999 other tenants (the tenant in each job's payload):
#   plain  the jobs carry no fairness key: checkout takes them in enqueue order;
#   fair   each job carries its tenant as its fairness_key: 1,000 active keys take turns.
# In each, 16 pgbench clients check out and complete (bench/scripts/jobq_checkout_complete.sql)
# for SECONDS while one more client enqueues, 20 times a second, a job for a new tenant (kind
# 'probe', a key of its own in the fair run). Reported: jobs/s of the 16 clients (and in each 5 s
# of the run: the small tenants' 100 jobs each run out partway through a fair run), fair / plain;
# how long each small tenant of the backlog waited for its first job to be checked out, from
# the start of the run (p50, p99, max over those served, and how many were served); and how
# long the new tenants' jobs waited from enqueue to checkout (and how many were still waiting
# at the end, behind the backlog).
# Each run starts from a checkpoint: a backlog's WAL (about half a GB) would otherwise start one
# during the run after it, writing tens of thousands of buffers under one run and not the other.
# RUNS pairs of runs (plain then fair, each on a fresh backlog) are made, the table shows every
# run, and fair / plain is the ratio of the two medians.
#   bench/fairness.sh [--sql | --ab] [SECONDS (default 30)] [RUNS (default 3)]
# With --sql, the same runs against jobq's SQL edition (bench/systems/jobq_sql.sh), whose passes
# one more client runs as a worker of a client library would: `SELECT jobq_reap()` at 1 a second
# on average (jobq.reap_interval; `pgbench -R 1` spaces its starts at random around that rate).
# Output: bench/results/fairness-sql.md.
# With --ab, the rates only, in slices: each of RUNS builds both backlogs afresh in one cluster
# (plain in database bench, fair in bench_fair, each vacuumed, analysed and checkpointed; the
# background worker serves both), then runs the 16 clients for 5 s at a time, plain and fair in
# turn, SECONDS / 5 slices of each, the new tenants' client beside each slice. The machine's
# speed, which moves by tens of percent from one minute to the next here, reaches both alike:
# each run's fair / plain is the sum of its fair slices over the sum of its plain ones.
# Output: bench/results/fairness-ab.md.
# Output: bench/results/fairness.md. With FAIRNESS_PROFILE=1, the same runs with pg_stat_statements
# (track = all; it slows them) and where a fair checkout's time goes, the statements it runs that
# took the most of it, to bench/results/fairness-profile.md instead. BENCH_CONF (bench/lib.sh)
# changes the cluster's settings, e.g. BENCH_CONF="synchronous_commit = off".
set -euo pipefail
cd "$(dirname "$0")/.."
SQL_EDITION=0; [ "${1:-}" = --sql ] && SQL_EDITION=1 && shift
AB=0; [ "${1:-}" = --ab ] && AB=1 && shift
SECONDS_RUN=${1:-30}
RUNS=${2:-3}
. bench/lib.sh
. bench/systems/jobq.sh
PROFILE=${FAIRNESS_PROFILE:-0}
CMD="bench/fairness.sh $SECONDS_RUN $RUNS"
OUT=bench/results/fairness.md
if [ $SQL_EDITION = 1 ]; then
  . bench/systems/jobq_sql.sh
  jobq_sql_install
  CMD="bench/fairness.sh --sql $SECONDS_RUN $RUNS"
  OUT=bench/results/fairness-sql.md
fi
[ -n "${BENCH_CONF:-}" ] && CMD="BENCH_CONF=\"$BENCH_CONF\" $CMD"
if [ $AB = 1 ]; then
  CMD="bench/fairness.sh --ab $SECONDS_RUN $RUNS"
  OUT=bench/results/fairness-ab.md
  BENCH_CONF="${BENCH_CONF:-}
jobq.database = ''"  # the background worker serves bench_fair too
fi
if [ "$PROFILE" = 1 ]; then
  CMD="FAIRNESS_PROFILE=1 $CMD"
  OUT=bench/results/fairness-profile.md
  BENCH_CONF="${BENCH_CONF:-}
shared_preload_libraries = 'jobq, pg_stat_statements'
pg_stat_statements.track = all"
fi
start_cluster on
[ "$PROFILE" = 1 ] && "${PSQL[@]}" -d bench -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null

rates() {  # the 16 clients' run: its jobs/s, then the rate of each 5 s of it (pgbench -P 5)
  pgbench_run jobq_checkout_complete.sql 16 "$SECONDS_RUN" -P 5 \
    | awk '/^tps = /{tps = int($3)} /^progress: /{every = every (n++ ? ", " : "") int($4)} END{print tps, every}'
}

# backlog DB plain|fair: a fresh jobq in database DB with the backlog of a run, vacuumed,
# analysed and checkpointed.
backlog() {
  local db=$1 key="NULL" small="NULL"
  [ "$2" = fair ] && key="'big'" && small="'t' || t"
  if [ $SQL_EDITION = 1 ]; then jobq_sql_reset 0; else reset_jobq "$db" >/dev/null; fi
  "${PSQL[@]}" -d "$db" >/dev/null <<SQL
SELECT count(*) FROM jobq_enqueue_batch('bench', array_fill('{"t": 0}'::jsonb, ARRAY[900000]), fairness_key => $key);
SELECT count(*) FROM generate_series(1, 999) t,
       LATERAL jobq_enqueue_batch('bench', array_fill(jsonb_build_object('t', t), ARRAY[100]), fairness_key => $small);
VACUUM ANALYZE;
CHECKPOINT;
SQL
}

# prober plain|fair DB SECONDS: one client that enqueues a job for a new tenant 20 times a second
# in database DB, for SECONDS (callers run it beside the 16 clients, in the background).
prober() {
  local probe
  probe=$(mktemp)
  echo "\\set n random(1, 1000000000)" >"$probe"
  if [ "$1" = fair ]; then
    echo "SELECT jobq_enqueue('bench', '{}', kind => 'probe', fairness_key => 'new' || :n);" >>"$probe"
  else
    echo "SELECT jobq_enqueue('bench', '{}', kind => 'probe');" >>"$probe"
  fi
  chmod 644 "$probe"
  pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -c 1 -R 20 -T "$3" -f "$probe" "$2" >/dev/null 2>&1
  rm -f "$probe"
}

# slice plain|fair DB: the 16 clients' jobs/s over 5 s in database DB, the new tenants' client beside.
slice() {
  local rate
  prober "$1" "$2" 5 &
  rate=$(BENCH_DB=$2 tps jobq_checkout_complete.sql 16 5)
  wait $!
  echo "${rate:-0}"
}

listed() { local IFS=,; echo "$*" | sed 's/,/, /g'; }  # listed A B C: "A, B, C"

if [ $AB = 1 ]; then
  [ $SQL_EDITION = 0 ] || { echo "fairness.sh: --ab runs the extension only" >&2; exit 2; }
  "${PSQL[@]}" -d postgres -c "CREATE DATABASE bench_fair TEMPLATE bench"  # with bench_worker()
  rows=() ratios=()
  for i in $(seq 1 "$RUNS"); do
    backlog bench plain
    backlog bench_fair fair
    plains=() fairs=()
    for _ in $(seq 1 $((SECONDS_RUN / 5))); do
      plains+=("$(slice plain bench)")
      fairs+=("$(slice fair bench_fair)")
    done
    sum_p=$(IFS=+; echo $((${plains[*]})))
    sum_f=$(IFS=+; echo $((${fairs[*]})))
    ratios+=("$(ratio "$sum_f" "$sum_p")")
    rows+=("| $i | $(listed "${plains[@]}") | $(listed "${fairs[@]}") | ${ratios[-1]} |")
  done
  {
    echo "# Fair checkout against plain, in interleaved slices"
    echo
    echo "\`$CMD\`, $(date -u +%F), $(machine), $(jobq_version). The backlog of bench/fairness.sh (1,000,000"
    echo "jobs, 900,000 of one tenant enqueued first, then 100 for each of 999 others) twice in one cluster:"
    echo "without fairness keys in one database, with them (1,000 keys) in another, each fresh and from a"
    echo "checkpoint. Then 16 clients check out and complete for 5 s at a time, plain and fair in turn,"
    echo "$((SECONDS_RUN / 5)) slices of each, while one more client enqueues a job for a new tenant 20 times a"
    echo "second. Jobs/s of each slice; a run's fair / plain is the sum of its fair slices over the sum of its"
    echo "plain ones."
    echo
    echo "| run | plain: jobs/s in each slice | fair: jobs/s in each slice | fair / plain |"
    echo "| ---: | --- | --- | ---: |"
    printf '%s\n' "${rows[@]}"
    echo
    echo "fair / plain: $(echo "${ratios[*]}" | median) (median of the runs; each run: $(listed "${ratios[@]}"))"
  } >"$OUT"
  cat "$OUT"
  exit 0
fi

run() {  # run plain|fair: one row of the table
  local mode=$1
  backlog bench "$mode"
  [ "$PROFILE" = 1 ] && "${PSQL[@]}" -d bench -c "SELECT pg_stat_statements_reset(), pg_stat_reset()" >/dev/null
  local start
  start=$("${PSQL[@]}" -d bench -c "SELECT clock_timestamp()")
  prober "$mode" bench "$SECONDS_RUN" &
  local probes=$! passes=
  if [ $SQL_EDITION = 1 ]; then
    pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -c 1 -R 1 -T "$SECONDS_RUN" -f bench/scripts/jobq_sql_pass.sql bench >/dev/null 2>&1 &
    passes=$!
  fi
  local rate every
  read -r rate every <<<"$(rates)"
  wait "$probes" $passes
  local waits
  waits=$("${PSQL[@]}" -d bench -F ' | ' <<SQL
WITH firsts AS (
  SELECT (j.payload ->> 't')::int AS t, min(j.started_at) - '$start'::timestamptz AS wait
    FROM jobq.jobs j WHERE j.kind IS NULL AND j.payload ->> 't' <> '0' AND j.started_at IS NOT NULL
   GROUP BY 1
), probes AS (
  SELECT j.started_at - j.enqueued_at AS wait FROM jobq.jobs j WHERE j.kind = 'probe'
)
SELECT coalesce(round(1000 * extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY f.wait)))::text, '-'),
       coalesce(round(1000 * extract(epoch FROM percentile_disc(0.99) WITHIN GROUP (ORDER BY f.wait)))::text, '-'),
       coalesce(round(1000 * extract(epoch FROM max(f.wait)))::text, '-'),
       count(*) || ' of 999',
       (SELECT coalesce(round(1000 * extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY p.wait)))::text, '-')
               || ' / ' || coalesce(round(1000 * extract(epoch FROM percentile_disc(0.99) WITHIN GROUP (ORDER BY p.wait)))::text, '-')
               || ' / ' || coalesce(round(1000 * extract(epoch FROM max(p.wait)))::text, '-')
          FROM probes p WHERE p.wait IS NOT NULL),
       (SELECT count(*) FILTER (WHERE p.wait IS NULL) || ' of ' || count(*) FROM probes p)
  FROM firsts f;
SQL
)
  echo "| $mode | $rate | $waits | $every |"
  if [ "$PROFILE" = 1 ]; then
    # Buffer visits per job checked out, by table and index of schema jobq, and each index's
    # scans (descents), entries read and rows fetched per job (the statistics of the run;
    # pg_stat_reset above).
    sleep 1  # (the backends report their statistics at the end of their transactions, then at most every second)
    "${PSQL[@]}" -d bench -F ' | ' >"bench/results/fairness-profile.$mode.blocks" <<'SQL'
WITH n AS (SELECT sum(calls) AS jobs FROM pg_stat_statements WHERE toplevel AND query LIKE '%jobq_checkout(%'),
     b AS (SELECT relname AS rel, heap_blks_hit + heap_blks_read AS blocks, NULL::bigint AS scans, NULL::bigint AS tup_read,
                  NULL::bigint AS tup_fetch
             FROM pg_statio_user_tables WHERE schemaname = 'jobq'
           UNION ALL
           SELECT s.indexrelname, s.idx_blks_hit + s.idx_blks_read, i.idx_scan, i.idx_tup_read, i.idx_tup_fetch
             FROM pg_statio_user_indexes s JOIN pg_stat_user_indexes i USING (indexrelid) WHERE s.schemaname = 'jobq')
SELECT '| `' || b.rel || '`', round(b.blocks / n.jobs, 1), coalesce(round(b.scans / n.jobs, 1)::text, '-'),
       coalesce(round(b.tup_read / n.jobs, 1)::text, '-'), coalesce(round(b.tup_fetch / n.jobs, 1)::text, '-') || ' |'
  FROM b, n WHERE b.blocks / n.jobs >= 0.5 ORDER BY b.blocks DESC;
SQL
  fi
  if [ "$PROFILE" = 1 ] && [ "$mode" = fair ]; then
    "${PSQL[@]}" -d bench -F ' | ' >bench/results/fairness-profile.rows <<'SQL'

WITH s AS (SELECT * FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'bench')),
     top AS (SELECT total_exec_time AS t, calls AS n FROM s WHERE toplevel AND query LIKE '%jobq_checkout(%')
SELECT '| ' || s.calls, round((1000 * s.total_exec_time / top.n)::numeric), round((100 * s.total_exec_time / top.t)::numeric),
       '`' || left(regexp_replace(s.query, '\s+', ' ', 'g'), 100) || '...` |'
  FROM s, top
 WHERE NOT s.toplevel AND s.calls >= top.n / 2
 ORDER BY s.total_exec_time DESC LIMIT 10;
SQL
  fi
}

rows=() plains=() fairs=()
for i in $(seq 1 "$RUNS"); do
  for mode in plain fair; do
    row=$(run $mode)
    rows+=("${row/| $mode |/| $mode $i |}")
    rate=$(echo "$row" | awk -F'|' '{print $3}' | tr -d ' ')
    if [ "$mode" = plain ]; then plains+=("$rate"); else fairs+=("$rate"); fi
  done
done
plain_median=$(echo "${plains[*]}" | median)
fair_median=$(echo "${fairs[*]}" | median)
ratio_=$(ratio "$fair_median" "$plain_median")
pairs=()
for i in $(seq 0 $((RUNS - 1))); do pairs+=("$(ratio "${fairs[$i]}" "${plains[$i]}")"); done
{
  echo "# Fair checkout under a tenant's backlog"
  echo
  [ $SQL_EDITION = 1 ] && echo "jobq's SQL edition, installed by a role that is no superuser; one more client runs its passes at 1 a second on average (pgbench -R 1)." && echo
  echo "\`$CMD\`, $(date -u +%F), $(machine), $(jobq_version). A backlog of 1,000,000 jobs"
  echo "(900,000 of one tenant enqueued first, then 100 for each of 999 others); 16 clients check out and"
  echo "complete for $SECONDS_RUN s while one more enqueues a job for a new tenant 20 times a second."
  echo "$RUNS runs of each, plain then fair, each on a fresh backlog and from a checkpoint."
  echo "Small tenants: each one's wait for its first job, from the start of the run, in ms (p50, p99, max"
  echo "over those served), and how many were served. New tenants: each job's wait from enqueue to"
  echo "checkout, in ms (p50 / p99 / max over those served), and how many were still waiting at the end."
  echo "Jobs/s in each 5 s: the 16 clients' rate over each 5 s of the run (pgbench -P 5): in the fair runs,"
  echo "the small tenants' jobs run out partway through, and from then on every checkout takes the large one's."
  echo
  echo "| run | jobs/s (16 clients) | small p50 | small p99 | small max | small served | new tenants' wait | new still waiting | jobs/s in each 5 s |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
  printf '%s\n' "${rows[@]}"
  echo
  echo "fair / plain: $ratio_ (medians: fair $fair_median, plain $plain_median jobs/s; each pair: $(listed "${pairs[@]}"))"
} >"$OUT"
if [ "$PROFILE" = 1 ]; then
  {
    echo
    echo "Where the fair run's checkout time goes: the statements run inside a checkout at least once every"
    echo "two claims (pg_stat_statements, track = all), by time: calls, microseconds per checkout (wall time at"
    echo "16 clients on $(nproc) cores), and that time as a percentage of the whole checkout's. A statement's time"
    echo "includes the statements it runs (the first rows are the functions that hold the rest)."
    echo
    echo "| calls | us per checkout | % of a checkout | statement |"
    echo "| ---: | ---: | ---: | --- |"
    cat bench/results/fairness-profile.rows
    [ -s bench/results/fairness-profile.rows ] || echo "| - | - | - | none: the checkouts ran no nested statement that often (the fast path's) |"
    echo
    echo "Buffer visits per job checked out (checkout and complete, and the passes of the run), by"
    echo "table and index of schema jobq (pg_statio_user_tables and _indexes), at least half a visit;"
    echo "for an index, its scans (each a descent), the entries they read and the rows fetched through"
    echo "them, per job (pg_stat_user_indexes):"
    echo
    for mode in plain fair; do
      echo "$mode:"
      echo
      echo "| relation | visits per job | scans per job | entries read per job | rows fetched per job |"
      echo "| --- | ---: | ---: | ---: | ---: |"
      cat "bench/results/fairness-profile.$mode.blocks"
      echo
    done
  } >>"$OUT"
  rm -f bench/results/fairness-profile.rows bench/results/fairness-profile.*.blocks
fi
cat "$OUT"
