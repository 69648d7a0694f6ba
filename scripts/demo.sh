#!/usr/bin/env bash
# The main job: set up what it runs (PostgreSQL 15, cargo-pgrx, the client libraries and the
# example workers' dependencies), install jobq, start a local PostgreSQL 15 with jobq preloaded (its
# background worker reaping in database jobq_demo), and run the demo (examples/demo.py, with the
# Python of .venv/ that setup.sh makes, psycopg and clients/python in it): Python,
# Node and Ruby workers, a stream of jobs, a worker killed mid-job and rescued; the dashboard
# (jobq-dash) watches it. The server and the dashboard are left running (scripts/cluster.sh stop
# stops both).   scripts/demo.sh [SECONDS]   (how long jobs are enqueued; default 20)
# With --sql, the same demo on the SQL edition (docs/sql-edition.md): a second local server
# without jobq's library (.pgdata-sql/, port 5498), jobq installed from jobq-sql--V.sql by
# jobq_demo_installer, a role with CREATEROLE that is no superuser, and the workers' heartbeats
# running the passes (reaping, schedules) in place of the background worker.
#                  scripts/demo.sh --sql [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --sql ]; then
  shift
  export JOBQ_EDITION=sql JOBQ_DATA=${JOBQ_DATA:-$PWD/.pgdata-sql} JOBQ_PORT=${JOBQ_PORT:-5498}
  ADMIN_ROLE=jobq_demo_installer DEFAULT_DASH=8081 CLUSTER_ENV="JOBQ_DATA=.pgdata-sql JOBQ_PORT=5498 "
else
  export JOBQ_EDITION=extension
  ADMIN_ROLE=postgres DEFAULT_DASH=8080 CLUSTER_ENV=""
fi
# Only what the demo runs: PostgreSQL 15 (not 17 and 18, which only the test suite needs), no
# browser, no test runners.
JOBQ_PG_VERSIONS=15 JOBQ_TEST_TOOLS=0 ./scripts/setup.sh
if [ "$JOBQ_EDITION" = sql ]; then
  # A fresh database each run (the extension's demo creates the extension afresh).
  ./scripts/cluster.sh start
  psql -h 127.0.0.1 -p "$JOBQ_PORT" -U postgres -d postgres -qc "DROP DATABASE IF EXISTS ${JOBQ_DB:-jobq_demo} WITH (FORCE)"
  ./scripts/cluster.sh start
else
  cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null
  # Restart so a server that was already running loads the library just installed.
  ./scripts/cluster.sh stop
  ./scripts/cluster.sh start
fi
# The dashboard, as a login role granted jobq_admin (its actions appear; jobq_reader would
# make it read-only), on loopback (no basic auth needed there).
DASH_PORT=${JOBQ_DASH_PORT:-$DEFAULT_DASH}
cargo build --release -q -p jobq-dash
./scripts/cluster.sh psql -qc "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'jobq_demo_ops') THEN CREATE ROLE jobq_demo_ops LOGIN; END IF; END \$\$; GRANT jobq_admin TO jobq_demo_ops;" 2>&1 | grep -v NOTICE || true
./scripts/cluster.sh dash "host=127.0.0.1 port=${JOBQ_PORT:-5499} user=jobq_demo_ops dbname=${JOBQ_DB:-jobq_demo}" "127.0.0.1:$DASH_PORT"
echo "demo: the dashboard is at http://127.0.0.1:$DASH_PORT/ (open it now to watch the demo)"
JOBQ_DSN="postgresql://${JOBQ_APP_ROLE:-jobq_demo_app}@127.0.0.1:${JOBQ_PORT:-5499}/${JOBQ_DB:-jobq_demo}" \
JOBQ_ADMIN_DSN="postgresql://$ADMIN_ROLE@127.0.0.1:${JOBQ_PORT:-5499}/${JOBQ_DB:-jobq_demo}" \
  .venv/bin/python examples/demo.py "${1:-20}"
cat <<MSG

The server is still running (data in ${JOBQ_DATA:-.pgdata}, port ${JOBQ_PORT:-5499}, database ${JOBQ_DB:-jobq_demo}; jobq, $JOBQ_EDITION edition).
  dashboard: http://127.0.0.1:$DASH_PORT/   (jobq-dash, as jobq_demo_ops; log in ${JOBQ_DATA:-.pgdata}/dash.log)
  connect:  ${CLUSTER_ENV}scripts/cluster.sh psql        (or: psql -h 127.0.0.1 -p ${JOBQ_PORT:-5499} -U postgres ${JOBQ_DB:-jobq_demo})
  workers:  .venv/bin/python examples/python/worker.py | node examples/node/worker.js | examples/rust/target/release/jobq-worker | ruby -Iclients/ruby/lib examples/ruby/worker.rb
  stop:     ${CLUSTER_ENV}scripts/cluster.sh stop        (the server and the dashboard)
MSG
