#!/usr/bin/env bash
# jobq benchmarks, driven at the SQL level by pgbench on a throwaway PostgreSQL 15 cluster.
#   bench/run.sh [--seconds N] [--runs N] [--clients "1 4 16"] [--async]
# Prints a markdown table (median jobs/s over the runs) and writes it to bench/results/keys.md.
#
# Workloads (issue 3: the cost of uniqueness and concurrency keys):
#   enqueue          jobq_enqueue, autocommit, one job per transaction
#   enqueue+unique   the same with a unique_key (until_executed)
#   checkout         jobq_checkout + jobq_complete against a pre-filled backlog (two transactions)
#   checkout+ckey    the same, every job with a concurrency key (100 keys, limit 5)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=10; RUNS=3; CLIENTS="1 4 16"; SYNC=on
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --async) SYNC=off; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

./scripts/setup.sh >/dev/null
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null

PGBIN=/usr/lib/postgresql/15/bin
DATA=$PWD/target/bench-data
PORT=${BENCH_PORT:-5488}
as_pg() { if [ "$(id -u)" = 0 ]; then sudo -u postgres "$@"; else "$@"; fi; }
install -d -o postgres -g postgres "$PWD/target" 2>/dev/null || true
as_pg "$PGBIN/pg_ctl" -D "$DATA" -m immediate stop >/dev/null 2>&1 || true
rm -rf "$DATA"; install -d -o postgres -g postgres "$DATA"
as_pg "$PGBIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 >/dev/null
cat >> "$DATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DATA'
max_connections = 200
shared_buffers = '1GB'
synchronous_commit = $SYNC
shared_preload_libraries = 'jobq'
jobq.database = 'bench'
CONF
as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w start >/dev/null
trap 'as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast stop >/dev/null 2>&1 || true' EXIT
PSQL=(psql -h 127.0.0.1 -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -qtA)
"${PSQL[@]}" -d postgres -c "CREATE DATABASE bench"

reset_db() {  # a fresh extension, workers for every client, and a backlog
  "${PSQL[@]}" -d bench <<SQL
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE; DROP TABLE IF EXISTS bench_workers;
CREATE EXTENSION jobq;
SET jobq.heartbeat_timeout = '1h';
CREATE TABLE bench_workers AS SELECT c AS client, jobq_register_worker('bench-' || c) AS w FROM generate_series(0, 255) c;
UPDATE jobq.workers SET heartbeat_at = clock_timestamp() + interval '1 day';
SQL
  case "$1" in
    plain) "${PSQL[@]}" -d bench -c "SELECT count(*) FROM jobq_enqueue_batch('bench', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, $2)))" >/dev/null ;;
    ckey)  "${PSQL[@]}" -d bench -c "SELECT count(jobq_enqueue('bench', concurrency_key => 'k' || (g % 100), concurrency_limit => 5)) FROM generate_series(1, $2) g" >/dev/null ;;
  esac
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE" >/dev/null
}

tps() {  # script clients -> jobs/s of one run
  as_pg true
  pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared -c "$2" -j "$2" -T "$SECONDS_PER_RUN" -f "bench/scripts/$1" bench 2>&1 \
    | awk '/^tps = /{print int($3)}'
}

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

OUT=bench/results/keys.md
mkdir -p bench/results
{
  echo "# jobq: the cost of unique and concurrency keys"
  echo
  echo "\`bench/run.sh --seconds $SECONDS_PER_RUN --runs $RUNS --clients \"$CLIENTS\"$( [ $SYNC = off ] && echo ' --async')\`, $(date -u +%Y-%m-%d), $(nproc) cores, $(awk '/MemTotal/{printf "%d GiB", $2/1048576}' /proc/meminfo), PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'), synchronous_commit=$SYNC, shared_buffers=1GB, pgbench -M prepared on the same machine. Median jobs/s over $RUNS runs of ${SECONDS_PER_RUN}s."
  echo
  echo "| clients | enqueue | enqueue+unique | ratio | checkout+complete | checkout+complete, concurrency keys | ratio |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
} > "$OUT"
for c in $CLIENTS; do
  declare -A r=()
  for w in enqueue_plain enqueue_unique checkout_plain checkout_ckey; do
    vals=""
    for _ in $(seq "$RUNS"); do
      case $w in
        enqueue_plain)  reset_db none 0; v=$(tps enqueue_plain.sql "$c") ;;
        enqueue_unique) reset_db none 0; v=$(tps enqueue_unique.sql "$c") ;;
        checkout_plain) reset_db plain 300000; v=$(tps checkout_complete.sql "$c") ;;
        checkout_ckey)  reset_db ckey 300000; v=$(tps checkout_complete.sql "$c") ;;
      esac
      vals="$vals $v"
    done
    r[$w]=$(echo "$vals" | median)
    echo "clients=$c $w runs:$vals -> ${r[$w]}" >&2
  done
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "-" }'; }
  echo "| $c | ${r[enqueue_plain]} | ${r[enqueue_unique]} | $(ratio "${r[enqueue_unique]}" "${r[enqueue_plain]}") | ${r[checkout_plain]} | ${r[checkout_ckey]} | $(ratio "${r[checkout_ckey]}" "${r[checkout_plain]}") |" >> "$OUT"
done
cat "$OUT"
