#!/usr/bin/env bash
# What each client library's worker costs: jobs/s of the library's Worker against a hand-written
# loop on the same driver, one worker process, a no-op handler, 1, 4 and 16 jobs in flight.
#
#   bench/clients.sh [--quick]        (--quick: fewer jobs, one run per cell)
#   JOBQ_BENCH_LANGS=rust JOBQ_BENCH_INFLIGHT="4 16" bench/clients.sh --quick   (a subset)
#
# The programs are in bench/clients/: python/worker.py (psycopg 3, clients/python), node/worker.js
# (pg, clients/node, built here with `npm run build`), rust/ (tokio-postgres, clients/rust; its
# own cargo project and Cargo.lock, not a workspace member). Each runs in some of these modes:
#   raw      register, wait inside the server (jobq_checkout with wait), then
#            jobq_complete_and_checkout(worker, done, NULL, ARRAY[queue], C) in a loop: the C jobs
#            a call returns run with a no-op and are completed by the next call (one round trip
#            and one commit per C jobs), a heartbeat every heartbeat_timeout / 3;
#   shaped   (Python and Node) the raw loop in the library's shape, none of its machinery: the
#            job columns the library reads, and in Python psycopg's asyncio connection on an
#            asyncio event loop. library / shaped is what the library's own work costs;
#            shaped / raw what its model costs (the columns, asyncio), which any worker built
#            that way pays;
#   threads  (Python) the raw loop with a threaded worker's handoff, none of its bookkeeping:
#            the library's columns on the synchronous connection, each job submitted to a
#            thread pool of C threads, the next call once all C have ended;
#   library  the library's Worker with concurrency C and one no-op handler for the queue.
# Each run: a fresh jobq (DROP/CREATE EXTENSION) and a CHECKPOINT; the worker process starts
# and, once it waits inside the server (bench/clients/watch.py), N no-op jobs are enqueued in
# one jobq_enqueue_batch into a queue of their own; once no job of the queue is live, SIGTERM.
# jobs/s = N / (the last job's finished_at - the first job's started_at): start-up,
# registration and shutdown are left out. Every job must end completed at its first attempt.
# Also per run: jobs per call (N over the distinct started_at of the jobs: the mean number of
# jobs each checkout call that found work returned) and the worker process's CPU time per job
# between the enqueue and the drain (/proc/PID/stat, all its threads). Runs alternate the
# modes; each figure is the median of 3 runs.
#
# Its own throwaway PostgreSQL 15 on a free loopback port (jobq preloaded, synchronous_commit =
# on, fsync = on), stopped and removed at exit. Output: bench/results/clients.md (the figures;
# a reading of them is added by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
QUICK=0
case "${1:-}" in
  "") ;;
  --quick) QUICK=1 ;;
  *) echo "usage: bench/clients.sh [--quick]" >&2; exit 2 ;;
esac
LANGS=${JOBQ_BENCH_LANGS:-python node rust}
INFLIGHT=${JOBQ_BENCH_INFLIGHT:-1 4 16}
for lang in $LANGS; do
  case $lang in python | node | rust) ;; *) echo "clients: unknown language $lang (python, node, rust)" >&2; exit 2 ;; esac
done
if [ $QUICK = 1 ]; then RUNS=1; else RUNS=3; fi
# Jobs per run, by jobs in flight: a few seconds of work each.
jobs_for() {
  if [ $QUICK = 1 ]; then
    case $1 in 1) echo 1000 ;; 4) echo 2000 ;; *) echo 4000 ;; esac
  else
    case $1 in 1) echo 5000 ;; 4) echo 10000 ;; *) echo 20000 ;; esac
  fi
}
OUT=bench/results/clients.md
bindir=/usr/lib/postgresql/15/bin

# jobq, release build, installed into PostgreSQL 15.
if [ ! -f /usr/lib/postgresql/15/lib/jobq.so ]; then
  flock /tmp/jobq-cargo.lock cargo pgrx install --release --pg-config "$bindir/pg_config" >/dev/null
fi
# What is measured: the commit, and whether the libraries or programs differ from it.
commit=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain -- clients bench/clients bench/clients.sh)" ]; then commit="$commit + uncommitted changes in clients/ or bench/clients*"; fi
# A debug build of jobq would be measured as well: say which one ran.
if readelf -S /usr/lib/postgresql/15/lib/jobq.so | grep -q '\.debug_info'; then JOBQ_BUILD=debug; else JOBQ_BUILD=release; fi
[ $JOBQ_BUILD = release ] || echo "clients: warning: the installed jobq.so is a debug build" >&2
# The programs.
echo "clients: building (clients/node: npm run build; bench/clients/rust: cargo build --release)" >&2
(cd clients/node && { [ -d node_modules ] || npm ci --silent; } && npm run build --silent >/dev/null)
flock /tmp/jobq-cargo.lock cargo build --quiet --release --manifest-path bench/clients/rust/Cargo.toml
RUST_BIN=$repo/bench/clients/rust/target/release/jobq-bench-clients
export PYTHONPATH=$repo/clients/python/src NODE_PATH=$repo/clients/node/node_modules
# Python: the checkout's virtual environment (scripts/setup.sh makes it; psycopg is there).
PY=$repo/.venv/bin/python
[ -x "$PY" ] || { echo "clients: $PY is missing (run scripts/setup.sh)" >&2; exit 1; }

# The cluster.
. scripts/lib/pg.sh
worker_pid=
pg_on_exit=('[ -z "$worker_pid" ] || kill -KILL "$worker_pid" 2>/dev/null')
pg_throwaway "$bindir" jobq-bench-clients "jobq.database = 'bench'" "max_connections = 50" \
  "shared_buffers = '1GB'" "synchronous_commit = on" "fsync = on"
tmp=$pg_tmp data=$pg_data port=$pg_port
psql_() { psql -X -q -v ON_ERROR_STOP=1 -tA -h 127.0.0.1 -p "$port" -U postgres "$@"; }
psql_ -d postgres -c "CREATE DATABASE bench"
psql_ -d bench -c "SET client_min_messages = warning; CREATE EXTENSION jobq"
psql_ -d postgres -c "CREATE ROLE jobq_bench LOGIN; GRANT jobq_worker TO jobq_bench"
DSN="postgresql://jobq_bench@127.0.0.1:$port/bench"
ADMIN_DSN="postgresql://postgres@127.0.0.1:$port/bench"

worker_cmd() { # LANG: the worker program, in CMD
  case $1 in
    python) CMD=("$PY" bench/clients/python/worker.py) ;;
    node) CMD=(node bench/clients/node/worker.js) ;;
    rust) CMD=("$RUST_BIN") ;;
  esac
}

# cpu PID: the process's CPU time so far (user + system, all threads), in clock ticks.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)

# run LANG MODE C N RUN: one run; sets RUN_RATE (jobs/s), RUN_PER_CALL (jobs per checkout call
# that found work) and RUN_CPU (the worker process's CPU time per job, in microseconds).
run() {
  local lang=$1 mode=$2 c=$3 n=$4 r=$5 q="${1}_${2}_c${3}_r${5}"
  psql_ -d bench >/dev/null <<SQL
SET client_min_messages = warning;
DROP EXTENSION jobq CASCADE;
CREATE EXTENSION jobq;
CHECKPOINT;
SQL
  local log=$tmp/$q.log
  worker_cmd "$lang"
  "${CMD[@]}" "$mode" "$DSN" "$q" "$c" >"$log" 2>&1 &
  worker_pid=$!
  # Started, registered and waiting inside the server: what it has cost so far is start-up.
  if ! "$PY" bench/clients/watch.py waiting "$ADMIN_DSN" jobq_bench 60; then
    echo "clients: $q: the worker did not reach its waiting checkout within 60 s" >&2; cat "$log" >&2; exit 1
  fi
  local cpu0 cpu1
  cpu0=$(cpu "$worker_pid")
  psql_ -d bench -c "SELECT count(*) FROM jobq_enqueue_batch('$q', array_fill('{}'::jsonb, ARRAY[$n]))" >/dev/null
  if ! "$PY" bench/clients/watch.py drained "$ADMIN_DSN" "$q" 120; then
    echo "clients: $q was not drained within 120 s" >&2; cat "$log" >&2; exit 1
  fi
  cpu1=$(cpu "$worker_pid")
  kill -TERM "$worker_pid"
  local rc=0
  wait "$worker_pid" || rc=$?
  worker_pid=
  # The library drains and exits 0; the raw loops have no handler for SIGTERM (143).
  if [ $rc != 0 ] && { [ "$mode" = library ] || [ $rc != 143 ]; }; then
    echo "clients: $q exited $rc" >&2; cat "$log" >&2; exit 1
  fi
  local res total ok
  res=$(psql_ -d bench -F ' ' -c "
    SELECT count(*), count(*) FILTER (WHERE state = 'completed' AND attempt = 1),
           round(count(*) / extract(epoch FROM max(finished_at) - min(started_at))),
           round(count(*)::numeric / count(DISTINCT started_at), 1)
      FROM jobq.jobs WHERE queue = '$q'")
  read -r total ok RUN_RATE RUN_PER_CALL <<<"$res"
  if [ "$total" != "$n" ] || [ "$ok" != "$n" ]; then
    echo "clients: $q: $total jobs, $ok completed at their first attempt, of $n" >&2; exit 1
  fi
  RUN_CPU=$(( (cpu1 - cpu0) * 1000000 / TICK / n ))
}

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "-" }'; }

modes() { case $1 in rust) echo raw library ;; node) echo raw shaped library ;; python) echo raw shaped threads library ;; esac; }
declare -A RATE PERCALL CPU
start=$(date +%s)
for lang in $LANGS; do
  for c in $INFLIGHT; do
    n=$(jobs_for "$c")
    for r in $(seq "$RUNS"); do
      for mode in $(modes "$lang"); do
        run "$lang" "$mode" "$c" "$n" "$r"
        RATE[$lang,$mode,$c]="${RATE[$lang,$mode,$c]:-} $RUN_RATE"
        PERCALL[$lang,$mode,$c]="${PERCALL[$lang,$mode,$c]:-} $RUN_PER_CALL"
        CPU[$lang,$mode,$c]="${CPU[$lang,$mode,$c]:-} $RUN_CPU"
        echo "clients: $lang $mode, $c in flight, run $r: $RUN_RATE jobs/s, $RUN_PER_CALL jobs per call, $RUN_CPU µs of worker CPU per job" >&2
      done
    done
  done
done
elapsed=$(( $(date +%s) - start ))

label() { case $1 in python) echo Python ;; node) echo Node ;; rust) echo Rust ;; esac; }
versions() {
  case $1 in
    python) echo "Python $("$PY" -c 'import platform; print(platform.python_version())'), psycopg $("$PY" -c 'import psycopg; print(psycopg.__version__, psycopg.pq.__impl__)'), clients/python \`jobq\` $("$PY" -c 'import jobq; print(jobq.__version__)'), \`async def\` handler" ;;
    node) echo "Node $(node --version), pg $(node -p 'require("pg/package.json").version'), clients/node \`jobq\` $(node -p 'require("./clients/node/package.json").version')" ;;
    rust) echo "$(rustc --version | awk '{print "rustc " $2}'), tokio-postgres $(awk '/^name = "tokio-postgres"/{getline; gsub(/"/, "", $3); print $3}' bench/clients/rust/Cargo.lock), clients/rust \`jobq-client\` $(awk -F'"' '/^version/{print $2; exit}' clients/rust/Cargo.toml), release build" ;;
  esac
}
{
  echo "# Client libraries: the library's worker against a hand-written loop"
  echo
  echo "\`bench/clients.sh$([ $QUICK = 1 ] && echo ' --quick')\`, commit $commit, $(date -u +%Y-%m-%d), $(nproc) cores, $(awk '/MemTotal/{printf "%d GiB", $2/1048576}' /proc/meminfo), PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') (synchronous_commit = on, fsync = on), jobq $JOBQ_BUILD build, ${elapsed} s of runs."
  echo
  echo "One worker process, a no-op handler, C jobs in flight. **raw**: a hand-written loop on the"
  echo "same driver, \`jobq_complete_and_checkout(worker, done, NULL, ARRAY[queue], C)\` (one round"
  echo "trip and one commit per C jobs); **shaped** (Python, Node): that loop in the library's shape"
  echo "without its machinery (the job columns the library reads; in Python, psycopg's asyncio"
  echo "connection on an asyncio loop); **threads** (Python): that loop with a threaded worker's"
  echo "handoff (the library's columns, each job submitted to a thread pool of C threads), none"
  echo "of its bookkeeping; **library**: the library's \`Worker\` with concurrency C."
  echo "jobs/s = N jobs / (last finished_at - first started_at), N = $(jobs_for 1), $(jobs_for 4), $(jobs_for 16) at 1, 4, 16 in"
  echo "flight; library / raw is the goal's ratio, library / shaped what the library's own work"
  echo "costs; jobs per call: the mean number of jobs a checkout call that found work returned;"
  echo "worker CPU: the worker process's CPU time per job (user + system, all threads), from the"
  echo "enqueue to the drain. Medians of $RUNS run(s), the modes alternating."
  for lang in $LANGS; do
    echo
    echo "## $(label "$lang")"
    echo
    echo "$(versions "$lang")."
    echo
    echo "| in flight | raw jobs/s | shaped jobs/s | threads jobs/s | library jobs/s | library / raw | library / shaped | jobs per call, raw / library | worker CPU µs per job, raw / shaped / threads / library |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for c in $INFLIGHT; do
      raw_m=$(echo "${RATE[$lang,raw,$c]}" | median)
      lib_m=$(echo "${RATE[$lang,library,$c]}" | median)
      # A mode a language does not run (shaped in Rust, threads outside Python) has no runs:
      # median of nothing is empty, and the cell shows "-".
      shp_m=$(echo "${RATE[$lang,shaped,$c]:-}" | median || true); shp_cpu=$(echo "${CPU[$lang,shaped,$c]:-}" | median || true)
      thr_m=$(echo "${RATE[$lang,threads,$c]:-}" | median || true); thr_cpu=$(echo "${CPU[$lang,threads,$c]:-}" | median || true)
      echo "| $c | $raw_m | ${shp_m:--} | ${thr_m:--} | $lib_m | $(ratio "$lib_m" "$raw_m") | $([ -n "$shp_m" ] && ratio "$lib_m" "$shp_m" || echo -) | $(echo "${PERCALL[$lang,raw,$c]}" | median) / $(echo "${PERCALL[$lang,library,$c]}" | median) | $(echo "${CPU[$lang,raw,$c]}" | median) / ${shp_cpu:--} / ${thr_cpu:--} / $(echo "${CPU[$lang,library,$c]}" | median) |"
    done
  done
  echo
  echo "## Every run"
  echo
  echo "jobs/s of each run, in the order they ran."
  echo
  echo "| language | in flight | raw | shaped | threads | library |"
  echo "| --- | ---: | --- | --- | --- | --- |"
  for lang in $LANGS; do
    for c in $INFLIGHT; do
      echo "| $(label "$lang") | $c |${RATE[$lang,raw,$c]} |${RATE[$lang,shaped,$c]:- -} |${RATE[$lang,threads,$c]:- -} |${RATE[$lang,library,$c]} |"
    done
  done
} > "$OUT"
echo "clients: wrote $OUT (${elapsed} s)" >&2
