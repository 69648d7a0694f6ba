#!/usr/bin/env bash
# A project-local PostgreSQL 15 cluster with jobq preloaded.
#   scripts/cluster.sh start        initdb (once), start it, create $JOBQ_DB (default jobq_demo) with jobq,
#                                   and the login role $JOBQ_APP_ROLE (default jobq_demo_app) granted jobq_worker
#   JOBQ_EDITION=sql scripts/cluster.sh start   the same without the library (not preloaded), jobq
#                                   being the SQL edition (target/sql-edition/jobq-sql--V.sql, built
#                                   by scripts/build-sql-edition.py), installed by the login role
#                                   jobq_demo_installer (CREATEROLE, no superuser), which owns $JOBQ_DB
#   scripts/cluster.sh stop         stop it (and the dashboard started by `dash`)
#   scripts/cluster.sh psql [ARGS]  psql into it
#   scripts/cluster.sh dash DSN ADDR  (re)start jobq-dash (release build) on ADDR, connected with DSN, in the background
# The data directory is .pgdata/ in the repository (or $JOBQ_DATA); the server runs as the OS user
# `postgres` (initdb refuses root) and listens on 127.0.0.1:${JOBQ_PORT:-5499}.
set -euo pipefail
cd "$(dirname "$0")/.."
PGBIN=/usr/lib/postgresql/15/bin
PORT=${JOBQ_PORT:-5499}
DATA=${JOBQ_DATA:-$PWD/.pgdata}
DB=${JOBQ_DB:-jobq_demo}
APP_ROLE=${JOBQ_APP_ROLE:-jobq_demo_app}

. scripts/lib/pg.sh

EDITION=${JOBQ_EDITION:-extension}
case "${1:-}" in
start)
  if [ ! -f "$DATA/PG_VERSION" ]; then
    if [ "$EDITION" = sql ]; then pg_init "$PGBIN" "$DATA" "$PORT" "shared_preload_libraries = ''"; else pg_init "$PGBIN" "$DATA" "$PORT"; fi
  fi
  if ! pg_as "$PGBIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    pg_start "$PGBIN" "$DATA"
  fi
  if [ "$EDITION" = sql ]; then
    psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qtAc "SELECT 1 FROM pg_roles WHERE rolname = 'jobq_demo_installer'" | grep -q 1 \
      || psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qc "CREATE ROLE jobq_demo_installer LOGIN CREATEROLE"
    psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qtAc "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1 \
      || psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qc "CREATE DATABASE $DB OWNER jobq_demo_installer"
    # The file as the documentation says to run it (docs/sql-edition.md); again, it changes nothing.
    file=$(python3 scripts/build-sql-edition.py)
    psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U jobq_demo_installer -d "$DB" -f "$file" >/dev/null
  else
    psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qtAc "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1 \
      || psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qc "CREATE DATABASE $DB"
    psql -h 127.0.0.1 -p "$PORT" -U postgres -d "$DB" -qc "CREATE EXTENSION IF NOT EXISTS jobq" 2>&1 | grep -v NOTICE || true
  fi
  # The demo's workers and producers log in as $APP_ROLE, which holds jobq_worker and nothing
  # else (not the superuser): what an application role should have.
  psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qtAc "SELECT 1 FROM pg_roles WHERE rolname = '$APP_ROLE'" | grep -q 1 \
    || psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qc "CREATE ROLE $APP_ROLE LOGIN"
  psql -h 127.0.0.1 -p "$PORT" -U postgres -d "$DB" -qc "GRANT jobq_worker TO $APP_ROLE" 2>&1 | grep -v NOTICE || true
  ;;
stop)
  if [ -f "$DATA/dash.pid" ]; then kill "$(cat "$DATA/dash.pid")" 2>/dev/null || true; rm -f "$DATA/dash.pid"; fi
  # Nothing to stop on a fresh checkout (no cluster yet): not an error.
  if [ -f "$DATA/PG_VERSION" ]; then pg_stop "$PGBIN" "$DATA"; fi
  ;;
dash)
  if [ -f "$DATA/dash.pid" ]; then kill "$(cat "$DATA/dash.pid")" 2>/dev/null || true; fi
  nohup target/release/jobq-dash --database-url "$2" --listen "$3" >"$DATA/dash.log" 2>&1 &
  echo $! >"$DATA/dash.pid"
  for _ in $(seq 50); do curl -fs -o /dev/null "http://$3/health" && exit 0; sleep 0.1; done
  echo "cluster: jobq-dash did not answer on $3; see $DATA/dash.log" >&2; exit 1
  ;;
psql)
  shift; exec psql -h 127.0.0.1 -p "$PORT" -U postgres -d "$DB" "$@"
  ;;
*)
  echo "usage: $0 start|stop|psql|dash" >&2; exit 2 ;;
esac
