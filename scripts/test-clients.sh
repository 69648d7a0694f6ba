#!/usr/bin/env bash
# The client libraries' tests (clients/python, clients/node, clients/rust, clients/ruby), each in its own
# runner, against a real PostgreSQL 15 with jobq and a PgBouncer in transaction mode in front
# of it. jobq is either the extension (installed already: `cargo pgrx install`, as
# scripts/test.sh leaves it), or, with JOBQ_SQL_EDITION naming a built jobq-sql--V.sql (an
# absolute path; scripts/build-sql-edition.py), the SQL edition (docs/sql-edition.md). One
# throwaway cluster per run, on free loopback ports, stopped and removed at exit:
#   - jobq.reap_interval = 200ms, jobq.heartbeat_timeout = 3s (so that a killed worker's jobs
#     come back within seconds); the extension: shared_preload_libraries = 'jobq'; the SQL
#     edition: shared_preload_libraries = '' (no library, no background worker: the jobq.*
#     lines are custom settings, and the workers' heartbeats run the passes);
#   - databases jobq_python, jobq_node, jobq_rust, jobq_ruby, each with jobq: CREATE EXTENSION jobq (by
#     postgres), or the SQL edition's file run into it with psql by jobq_installer, a login
#     role with CREATEROLE that is no superuser and owns the four databases;
#   - login roles: jobq_test_app (granted jobq_worker), jobq_test_producer (jobq_producer),
#     jobq_test_reader (jobq_reader), jobq_test_admin (jobq_admin), jobq_test_nobody (nothing);
#     the superuser is postgres; every login is trusted on loopback.
# The suites read, from the environment:
#   JOBQ_TEST_HOST=127.0.0.1  JOBQ_TEST_PORT (the server)  JOBQ_TEST_SERVER_LOG (its log)
#   JOBQ_TEST_EDITION    extension, or sql (the SQL edition)
#   JOBQ_TEST_POOLER_PORT (PgBouncer,
#   pool_mode = transaction, every database above, every role above)
#   JOBQ_TEST_DSN        postgresql://jobq_test_app@HOST:PORT/jobq_<language>   (a worker's)
#   JOBQ_TEST_ADMIN_DSN  postgresql://postgres@HOST:PORT/jobq_<language>        (superuser)
#   JOBQ_TEST_POOLER_DSN postgresql://jobq_test_app@HOST:POOLER_PORT/jobq_<language>
#   scripts/test-clients.sh [python] [node] [rust] [ruby]   (default: all four)
#   JOBQ_SQL_EDITION=/abs/jobq-sql--V.sql scripts/test-clients.sh [...]   the same, SQL edition
#   JOBQ_TEST_KEEP=1 scripts/test-clients.sh shell     a cluster for trying things: prints the
#                                                     variables and waits until interrupted
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
langs=("${@:-python node rust ruby}")
# shellcheck disable=SC2206
langs=(${langs[*]})
bindir=/usr/lib/postgresql/15/bin
sql_file=${JOBQ_SQL_EDITION:-}
if [ -n "$sql_file" ]; then
  case $sql_file in /*) ;; *) echo "test-clients: JOBQ_SQL_EDITION must be an absolute path" >&2; exit 2 ;; esac
  [ -f "$sql_file" ] || { echo "test-clients: $sql_file does not exist (scripts/build-sql-edition.py)" >&2; exit 1; }
  edition=sql preload=("shared_preload_libraries = ''")   # a later line: overrides pg_init's
else
  [ -f /usr/lib/postgresql/15/lib/jobq.so ] || { echo "test-clients: jobq is not installed (cargo pgrx install)" >&2; exit 1; }
  edition=extension preload=()
fi

# The cluster and, at exit, its removal with the pooler (scripts/lib/pg.sh).
. scripts/lib/pg.sh
bouncer_pid=
pg_on_exit=('[ -z "$bouncer_pid" ] || kill "$bouncer_pid" 2>/dev/null')
pg_throwaway "$bindir" jobq-clients "max_connections = 300" "fsync = off" \
  "jobq.reap_interval = '200ms'" "jobq.heartbeat_timeout = '3s'" "${preload[@]}"
tmp=$pg_tmp data=$pg_data port=$pg_port pooler_port=$(pg_free_port)
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres "$@"; }
if [ "$edition" = sql ]; then
  psql_ -d postgres -c "CREATE ROLE jobq_installer LOGIN CREATEROLE"
  for db in jobq_python jobq_node jobq_rust jobq_ruby; do
    psql_ -d postgres -c "CREATE DATABASE $db OWNER jobq_installer"
    # On stdin: the server's OS user may not read the checkout. As the docs say to run it.
    psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U jobq_installer -d "$db" -f - <"$sql_file" >/dev/null
  done
else
  for db in jobq_python jobq_node jobq_rust jobq_ruby; do
    psql_ -d postgres -c "CREATE DATABASE $db"
    psql_ -d "$db" -c "SET client_min_messages = warning; CREATE EXTENSION jobq"
  done
fi
psql_ -d postgres <<'SQL'
CREATE ROLE jobq_test_app LOGIN;      GRANT jobq_worker TO jobq_test_app;
CREATE ROLE jobq_test_producer LOGIN; GRANT jobq_producer TO jobq_test_producer;
CREATE ROLE jobq_test_reader LOGIN;   GRANT jobq_reader TO jobq_test_reader;
CREATE ROLE jobq_test_admin LOGIN;    GRANT jobq_admin TO jobq_test_admin;
CREATE ROLE jobq_test_nobody LOGIN;
SQL

# PgBouncer in transaction mode, in front of every database, for every role.
users=$tmp/users.txt ini=$tmp/pgbouncer.ini
for r in postgres jobq_test_app jobq_test_producer jobq_test_reader jobq_test_admin jobq_test_nobody; do
  printf '"%s" ""\n' "$r"
done > "$users"
cat > "$ini" <<INI
[databases]
* = host=127.0.0.1 port=$port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $pooler_port
unix_socket_dir =
auth_type = trust
auth_file = $users
pool_mode = transaction
default_pool_size = 20
max_client_conn = 400
ignore_startup_parameters = extra_float_digits,options
logfile = $tmp/pgbouncer.log
INI
chmod 644 "$users" "$ini"; chmod 777 "$tmp"
sudo -u postgres /usr/sbin/pgbouncer "$ini" >/dev/null 2>&1 &
bouncer_pid=$!
for try in $(seq 100); do
  psql -X -q -h 127.0.0.1 -p "$pooler_port" -U postgres -d jobq_python -c "SELECT 1" >/dev/null 2>&1 && break
  if [ "$try" = 100 ]; then
    echo "test-clients: PgBouncer is not up on 127.0.0.1:$pooler_port after 10 s; the end of its log:" >&2
    tail -n 20 "$tmp/pgbouncer.log" >&2 || true
    exit 1
  fi
  sleep 0.1
done

export JOBQ_TEST_HOST=127.0.0.1 JOBQ_TEST_PORT=$port JOBQ_TEST_POOLER_PORT=$pooler_port
export JOBQ_TEST_EDITION=$edition
# The server's log, which the suites read to prove that a clean shutdown logs no error.
export JOBQ_TEST_SERVER_LOG=$data/server.log
env_for() {
  export JOBQ_TEST_DSN="postgresql://jobq_test_app@127.0.0.1:$port/jobq_$1"
  export JOBQ_TEST_ADMIN_DSN="postgresql://postgres@127.0.0.1:$port/jobq_$1"
  export JOBQ_TEST_POOLER_DSN="postgresql://jobq_test_app@127.0.0.1:$pooler_port/jobq_$1"
}

status=0
for lang in "${langs[@]}"; do
  case $lang in
  python)
    env_for python
    echo "test-clients: Python (clients/python, pytest)"
    (cd clients/python && "$repo/.venv/bin/python" -m pytest -q tests) || status=1   # setup.sh's venv
    ;;
  node)
    env_for node
    echo "test-clients: Node (clients/node, node --test)"
    (cd clients/node && npm test --silent) || status=1
    ;;
  rust)
    env_for rust
    echo "test-clients: Rust (clients/rust, cargo test)"
    # In the suite's profile (Cargo.toml), whose build of tokio-postgres and the rest the
    # dashboard's tests have made already.
    (cd "$repo" && cargo test -p jobq-client --profile suite) || status=1
    ;;
  ruby)
    env_for ruby
    echo "test-clients: Ruby (clients/ruby, minitest)"
    (cd clients/ruby && rake test) || status=1
    ;;
  shell)
    env_for "${JOBQ_TEST_SHELL_LANG:-python}"
    env | grep '^JOBQ_TEST_' | sort
    echo "test-clients: cluster up ($edition edition; databases jobq_python, jobq_node, jobq_rust, jobq_ruby); Ctrl-C stops it"
    while true; do sleep 3600; done
    ;;
  *) echo "test-clients: unknown suite $lang (python, node, rust, ruby, shell)" >&2; exit 2 ;;
  esac
done
exit $status
