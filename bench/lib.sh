# Shared by the benchmark scripts: a throwaway PostgreSQL 15 cluster on loopback with jobq
# (release build) preloaded, and helpers to run pgbench against it. Source it from the repo root.
PGBIN=/usr/lib/postgresql/15/bin
DATA=${BENCH_DATA:-$PWD/target/bench-data}
PORT=${BENCH_PORT:-5488}
PSQL=(psql -h 127.0.0.1 -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -qtA)
# The Python of the programs that import psycopg or jobq: the checkout's virtual environment,
# which scripts/setup.sh makes (psycopg and clients/python in it; never the system's Python).
PY=$PWD/.venv/bin/python

as_pg() { if [ "$(id -u)" = 0 ]; then sudo -u postgres "$@"; else "$@"; fi; }

# init_cluster DIR PORT SYNC MAX_CONNECTIONS [PRELOAD]: a fresh cluster in DIR (one running there
# is stopped first), jobq preloaded and serving database `bench` (PRELOAD '' for a server without
# jobq's library: the SQL edition's), synchronous_commit=SYNC, started.
# BENCH_CONF, when set, is appended to postgresql.conf (experiments: BENCH_CONF="wal_compression = on").
init_cluster() {
  as_pg "$PGBIN/pg_ctl" -D "$1" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$1"; install -d -o postgres -g postgres "$1"
  as_pg "$PGBIN/initdb" -D "$1" -U postgres --auth=trust -E UTF8 >/dev/null
  cat >> "$1/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $2
unix_socket_directories = '$1'
max_connections = $4
shared_buffers = '1GB'
synchronous_commit = $3
shared_preload_libraries = '${5-jobq}'
jobq.database = 'bench'
${BENCH_CONF:-}
CONF
  as_pg "$PGBIN/pg_ctl" -D "$1" -l "$1/server.log" -w start >/dev/null
}

# start_cluster SYNC: initdb and start, synchronous_commit=SYNC, database `bench`.
start_cluster() {
  ./scripts/setup.sh >/dev/null
  cargo pgrx install --release --pg-config "$PGBIN/pg_config" >/dev/null
  init_cluster "$DATA" "$PORT" "$1" 200
  trap 'as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast stop >/dev/null 2>&1 || true' EXIT
  "${PSQL[@]}" -d postgres -c "CREATE DATABASE bench"
  # Removes the SQL edition (docs/sql-edition.md, Uninstalling) where a run installed it.
  "${PSQL[@]}" -d bench >/dev/null <<'SQL'
-- The id of pgbench client c's worker, written into the scripts as the peers' scripts write
-- theirs (Graphile Worker's 'pool-bench-<client id>'), so that no script looks it up per job.
CREATE FUNCTION public.bench_worker(c integer) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
  SELECT ('00000000-0000-4000-8000-' || lpad(c::text, 12, '0'))::uuid
$$;
CREATE FUNCTION public.bench_uninstall_jobq_sql() RETURNS void LANGUAGE plpgsql AS $$
DECLARE f regprocedure;
BEGIN
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'jobq') THEN RETURN; END IF;
  DROP SCHEMA IF EXISTS jobq CASCADE;
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'jobq\_%' LOOP
    EXECUTE format('DROP FUNCTION %s', f);
  END LOOP;
END $$;
SQL
}

# One worker per pgbench client, registered by jobq_register_worker, then given the id
# bench_worker(c) (bench/scripts/jobq_*.sql) and a heartbeat that outlives the run; table
# bench_workers keeps client -> worker for the programs that read it.
BENCH_WORKERS="CREATE TABLE bench_workers AS SELECT c AS client, jobq_register_worker('bench-' || c) AS w FROM generate_series(0, 255) c;
UPDATE jobq.workers x SET id = bench_worker(b.client), heartbeat_at = clock_timestamp() + interval '1 day' FROM bench_workers b WHERE x.id = b.w;
UPDATE bench_workers SET w = bench_worker(client);
ALTER TABLE bench_workers ADD PRIMARY KEY (client);"

# reset_jobq [DB]: a fresh jobq in database DB (default bench) with one registered worker per
# pgbench client (table bench_workers). The SQL edition (bench/systems/jobq_sql.sh), if a run
# installed it, goes first.
reset_jobq() {
  "${PSQL[@]}" -d "${1:-bench}" <<SQL
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE; DROP TABLE IF EXISTS bench_workers;
SELECT bench_uninstall_jobq_sql();
CREATE EXTENSION jobq;
$BENCH_WORKERS
SQL
}

# pgbench_run SCRIPT CLIENTS SECONDS [PGBENCH ARGS...]: the output of one pgbench run of
# bench/scripts/SCRIPT, in database BENCH_DB (default bench). Prints nothing (and the output on
# stderr) if any client failed.
pgbench_run() {
  local out
  out=$(pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared -c "$2" -j "$2" -T "$3" "${@:4}" -f "bench/scripts/$1" "${BENCH_DB:-bench}" 2>&1) || true
  if echo "$out" | grep -qE 'aborted|ERROR|^number of failed transactions: [1-9]'; then echo "$out" >&2; return 0; fi
  echo "$out"
}

# tps SCRIPT CLIENTS SECONDS: jobs/s of one pgbench run (nothing if any client failed).
tps() {
  pgbench_run "$@" | awk '/^tps = /{print int($3)}'
}

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0 && a ~ /^[0-9.]+$/) printf "%.2f", a/b; else print "-" }'; }
machine() { echo "$(nproc) cores, $(awk '/MemTotal/{printf "%d GiB", $2/1048576}' /proc/meminfo), PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}')"; }
