#!/usr/bin/env bash
# The ActiveJob race: ActiveJob jobs that do nothing (bench/rails/race_app.rb's NoopJob)
# through jobq (clients/ruby), DelayedJob (Debian's delayed_job_active_record 4.1) and Sidekiq
# 6.4 on Redis 7 (Debian's; Redis with its default persistence: RDB snapshots, no AOF), on one
# machine in one run, with the same process and thread counts: 1 process x 10 threads, then
# 2 x 10. PostgreSQL 15 (bench/lib.sh's cluster, jobq preloaded, synchronous_commit = on)
# holds jobq's and DelayedJob's jobs. For each backend and process count:
#   - enqueue: perform_later, one job per call (10,000 per process), and the backend's bulk
#     call where it has one (jobq: the adapter's enqueue_all, one jobq_enqueue_graph per 1,000;
#     Sidekiq: push_bulk per 1,000; DelayedJob: none), 50,000 per process; jobs/s summed over
#     the processes;
#   - drain: a backlog of BACKLOG (100,000) jobs, then the worker processes (jobq-worker
#     --threads 10; sidekiq -c 10; DelayedJob: race.rb delayed_job_worker, 10 threads each
#     running Delayed::Worker#work_off, as DelayedJob's own worker runs one job at a time);
#     jobs/s from 90 % left to 10 % left (boot and tail excluded), and the whole drain's time;
#     a backend that needs more than MAX_WINDOW (60) seconds for that window is measured over
#     the first MAX_WINDOW seconds of it and stopped (DelayedJob);
#   - each of the above ROUNDS (3) times, the backends taking turns within each round (so that a
#     slower or faster spell of the machine falls on all of them), and the median reported,
#     with every round's drain rate beside it;
#   - where the time goes: CPU seconds per 1,000 jobs of the workers' Ruby processes and of
#     the server side (all PostgreSQL processes; for Sidekiq, redis-server and PostgreSQL)
#     over that same window (from /proc), and ActiveJob's own execution of a job alone
#     (race.rb execute_cost), which every backend's worker pays.
# Writes bench/results/rails-race.md.
#   bench/rails/race.sh                  the race as above
#   BACKLOG=20000 bench/rails/race.sh    a shorter one (the results file says which)
#   BACKENDS=jobq PROCS=1 ROUNDS=1 OUT=/tmp/r.md bench/rails/race.sh    one backend, one process count, once
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
BACKLOG=${BACKLOG:-100000}
BACKENDS=${BACKENDS:-jobq sidekiq delayed_job} PROCS=${PROCS:-1 2}   # experiments: fewer
MAX_WINDOW=${MAX_WINDOW:-60}   # seconds: a drain slower than this is measured over this long
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-bench/results/rails-race.md}

missing=()
for p in ruby ruby-pg ruby-activejob ruby-activerecord ruby-sidekiq redis-server ruby-delayed-job-active-record; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

start_cluster on
tmp=$(mktemp -d /tmp/jobq-race.XXXXXX)
redis_port=$((PORT + 1))
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$tmp" --daemonize no >"$tmp/redis.log" 2>&1 &
redis_pid=$!
workers=()
cleanup() {
  for p in "${workers[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  kill "$redis_pid" 2>/dev/null || true
  as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast stop >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

export RACE_DSN="postgresql://postgres@127.0.0.1:$PORT/bench" REDIS_URL="redis://127.0.0.1:$redis_port/0" RACE_THREADS=10
RUBYLIB=$PWD/clients/ruby/lib
export RUBYLIB
"${PSQL[@]}" -d bench <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS jobq;
-- DelayedJob's table, as its generator's migration makes it.
CREATE TABLE IF NOT EXISTS delayed_jobs (
  id bigserial PRIMARY KEY, priority integer NOT NULL DEFAULT 0, attempts integer NOT NULL DEFAULT 0,
  handler text NOT NULL, last_error text, run_at timestamp, locked_at timestamp, failed_at timestamp,
  locked_by varchar, queue varchar, created_at timestamp, updated_at timestamp);
CREATE INDEX IF NOT EXISTS delayed_jobs_priority ON delayed_jobs (priority, run_at);
SQL

# Empties the backend's queue.
reset_backend() {
  case $1 in
  jobq) "${PSQL[@]}" -d bench -c "SET client_min_messages = warning; DROP EXTENSION jobq CASCADE; CREATE EXTENSION jobq" >/dev/null ;;
  sidekiq) redis-cli -p "$redis_port" flushall >/dev/null ;;
  delayed_job) "${PSQL[@]}" -d bench -c "TRUNCATE delayed_jobs" >/dev/null ;;
  esac
  "${PSQL[@]}" -d bench -c "CHECKPOINT" -c "VACUUM ANALYZE" >/dev/null
}

race() { RACE_BACKEND=$1 ruby bench/rails/race.rb "${@:2}"; }

# enqueue_rate BACKEND MODE COUNT PROCS: jobs/s summed over PROCS concurrent processes.
enqueue_rate() {
  local pids=() i total=0
  for i in $(seq "$4"); do race "$1" enqueue "$2" "$3" >"$tmp/rate.$i" & pids+=($!); done
  wait "${pids[@]}"
  for i in $(seq "$4"); do total=$((total + $(cat "$tmp/rate.$i"))); done
  echo "$total"
}

# A backlog of BACKLOG jobs: the bulk call, or, for DelayedJob (no bulk call), one job through
# ActiveJob copied in SQL.
make_backlog() {
  case $1 in
  delayed_job)
    race delayed_job enqueue single 10 >/dev/null
    "${PSQL[@]}" -d bench -c "INSERT INTO delayed_jobs (priority, attempts, handler, run_at, queue, created_at, updated_at)
      SELECT priority, 0, handler, run_at, queue, created_at, updated_at FROM delayed_jobs, generate_series(1, $BACKLOG - 10)
      WHERE id = (SELECT min(id) FROM delayed_jobs)" >/dev/null ;;
  *) race "$1" enqueue bulk "$BACKLOG" >/dev/null ;;
  esac
  "${PSQL[@]}" -d bench -c "CHECKPOINT" -c "VACUUM ANALYZE" >/dev/null
}

# Jobs not yet done (cheap enough to ask four times a second: no Ruby process).
pending() {
  case $1 in
  jobq) "${PSQL[@]}" -d bench -c "SELECT coalesce(sum(ready + executing), 0) FROM jobq.queue_stats WHERE queue = 'race'" ;;
  sidekiq) redis-cli -p "$redis_port" llen queue:race ;;
  delayed_job) "${PSQL[@]}" -d bench -c "SELECT count(*) FROM delayed_jobs" ;;
  esac
}

start_worker() {
  case $1 in
  jobq) RACE_BACKEND=jobq ruby clients/ruby/exe/jobq-worker --require "$PWD/bench/rails/race_app.rb" --dsn "$RACE_DSN" \
          --queues race --threads 10 >"$tmp/worker.log" 2>&1 & ;;
  sidekiq) RACE_BACKEND=sidekiq sidekiq -r "$PWD/bench/rails/race_app.rb" -c 10 -q race >"$tmp/worker.log" 2>&1 & ;;
  delayed_job) RACE_BACKEND=delayed_job ruby bench/rails/race.rb delayed_job_worker >"$tmp/worker.log" 2>&1 & ;;
  esac
  workers+=($!)
}

# CPU ticks (1/100 s) of the given processes, and of every PostgreSQL process (+ redis-server).
ticks() { for p in "$@"; do awk '{s += $14 + $15} END {print s + 0}' "/proc/$p/stat" 2>/dev/null || echo 0; done | awk '{s += $1} END {print s}'; }
server_pids() { pgrep -u postgres -x postgres; echo "$redis_pid"; }

# drain BACKEND PROCS: "rate total_seconds ruby_cpu_per_1000 server_cpu_per_1000".
drain() {
  local left t0 t90 t10 r90 s90 r10 s10 high=$((BACKLOG * 9 / 10)) low=$((BACKLOG / 10)) end
  workers=()
  t0=$(date +%s.%N)
  for _ in $(seq "$2"); do start_worker "$1"; done
  t90='' t10=''
  while true; do
    left=$(pending "$1")
    if [ -z "$t90" ] && [ "$left" -le "$high" ]; then
      t90=$(date +%s.%N); r90=$(ticks "${workers[@]}"); s90=$(ticks $(server_pids))
    fi
    if [ -z "$t10" ] && [ "$left" -le "$low" ]; then
      t10=$(date +%s.%N); r10=$(ticks "${workers[@]}"); s10=$(ticks $(server_pids))
    fi
    [ "$left" -gt 0 ] || break
    if [ -n "$t90" ] && [ -z "$t10" ] && awk -v a="$t90" -v n="$(date +%s.%N)" -v m="$MAX_WINDOW" 'BEGIN { exit !(n - a > m) }'; then
      # Slower than the window allows (DelayedJob): its rate over MAX_WINDOW seconds.
      t10=$(date +%s.%N); r10=$(ticks "${workers[@]}"); s10=$(ticks $(server_pids)); low=$left
      break
    fi
    sleep 0.25
  done
  end=$(date +%s.%N)
  [ "$left" -eq 0 ] || end=''   # stopped before the end: no whole-drain time
  for p in "${workers[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${workers[@]}"; do wait "$p" 2>/dev/null || true; done
  workers=()
  awk -v a="$t90" -v b="$t10" -v t0="$t0" -v e="$end" -v n=$((high - low)) -v r=$((r10 - r90)) -v s=$((s10 - s90)) \
    'BEGIN { printf "%.0f %s %.2f %.2f\n", n / (b - a), (e == "" ? "-" : sprintf("%.1f", e - t0)), r / 100 / (n / 1000), s / 100 / (n / 1000) }'
}

# Every round's figures, space-separated per backend and process count; the table shows medians.
declare -A single bulkr rate total rcpu scpu
for procs in $PROCS; do
  for round in $(seq "$ROUNDS"); do
    for b in $BACKENDS; do
      echo "race: $b, $procs x 10 threads, round $round of $ROUNDS" >&2
      reset_backend "$b"
      s1=$(enqueue_rate "$b" single 10000 "$procs")
      reset_backend "$b"
      if [ "$b" = delayed_job ]; then b1='-'; else b1=$(enqueue_rate "$b" bulk 50000 "$procs"); fi
      reset_backend "$b"
      make_backlog "$b"
      read -r r1 t1 rc1 sc1 < <(drain "$b" "$procs")
      echo "race: $b $procs: single $s1/s, bulk $b1/s, drain $r1/s ($t1 s)" >&2
      single[$b,$procs]+=" $s1" bulkr[$b,$procs]+=" $b1" rate[$b,$procs]+=" $r1"
      total[$b,$procs]+=" $t1" rcpu[$b,$procs]+=" $rc1" scpu[$b,$procs]+=" $sc1"
    done
  done
done
# med "a b c": the median of a round's figures ("-" when a backend has none).
med() { case "$1" in *-*) echo - ;; *) echo "$1" | median ;; esac; }

execute_us=$(RACE_BACKEND=jobq ruby bench/rails/race.rb execute_cost)
commit=$(git rev-parse --short HEAD)
{
  echo "# The ActiveJob race: jobq, Sidekiq and DelayedJob"
  echo
  echo "Measured $(date -u +%Y-%m-%d) at commit $commit with \`$([ "$BACKLOG" = 100000 ] || echo "BACKLOG=$BACKLOG ")bench/rails/race.sh\`"
  echo "on $(machine), Ruby $(ruby -e 'print RUBY_VERSION'), ActiveJob $(ruby -ractive_job -e 'print ActiveJob.version'),"
  echo "Sidekiq $(ruby -rsidekiq -e 'print Sidekiq::VERSION') on Redis $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p') (default persistence),"
  echo "DelayedJob $(ruby -e 'print Gem::Specification.find_by_name("delayed_job_active_record").version'). Jobs do nothing; jobs/s (higher is better)."
  echo "jobq and DelayedJob commit each enqueue to PostgreSQL (synchronous_commit = on); Sidekiq's"
  echo "Redis acknowledges before any disk write (RDB snapshots)."
  echo
  echo "Each figure is the median of $ROUNDS rounds, in which the backends took turns; the drain's"
  echo "column \"rounds\" gives each round's rate."
  echo
  echo "| backend | processes x threads | perform_later, one per call | bulk | drain of $BACKLOG | drain, rounds | drain, whole (s) | Ruby CPU s / 1,000 jobs | server CPU s / 1,000 jobs |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for procs in $PROCS; do
    for b in $BACKENDS; do
      echo "| $b | $procs x 10 | $(med "${single[$b,$procs]}") | $(med "${bulkr[$b,$procs]}") | $(med "${rate[$b,$procs]}") | $(echo ${rate[$b,$procs]} | sed 's/ /, /g') | $(med "${total[$b,$procs]}") | $(med "${rcpu[$b,$procs]}") | $(med "${scpu[$b,$procs]}") |"
    done
  done
  echo
  echo "Drain: jobs/s from 90 % of the backlog left to 10 % left; \"whole\" from the workers' start"
  echo "(boot included) to an empty queue. CPU over the same 80 % window: the workers' Ruby processes,"
  echo "and the server side (every PostgreSQL process, and redis-server for Sidekiq). A drain that needed"
  echo "more than $MAX_WINDOW s for the window was measured over its first $MAX_WINDOW s and stopped (\"whole\": -)."
  echo "DelayedJob has no bulk enqueue: its backlog is one job copied in SQL."
  echo
  echo "ActiveJob's own execution of the job (ActiveJob::Base.execute: deserialize, callbacks, perform),"
  echo "which every backend's worker pays, costs $execute_us µs of CPU per job on one thread with no queue"
  echo "(\`ruby bench/rails/race.rb execute_cost\`)."
} > "$OUT"
cat "$OUT"
