#!/usr/bin/env bash
# The main job: set up everything (PostgreSQL 15, cargo-pgrx, the reference workers' Python and
# Node dependencies), install jobq, start a local PostgreSQL 15 with jobq preloaded (its
# background worker reaping in database jobq_demo), and run the demo (examples/demo.py): Python
# and Node workers, a stream of jobs, a worker killed mid-job and rescued. The server is left
# running.   scripts/demo.sh [SECONDS]   (how long jobs are enqueued; default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null
# Restart so a server that was already running loads the library just installed.
./scripts/cluster.sh stop
./scripts/cluster.sh start
JOBQ_DSN="postgresql://${JOBQ_APP_ROLE:-jobq_demo_app}@127.0.0.1:${JOBQ_PORT:-5499}/${JOBQ_DB:-jobq_demo}" \
JOBQ_ADMIN_DSN="postgresql://postgres@127.0.0.1:${JOBQ_PORT:-5499}/${JOBQ_DB:-jobq_demo}" \
  python3 examples/demo.py "${1:-20}"
cat <<MSG

The server is still running (data in .pgdata/, port ${JOBQ_PORT:-5499}, database ${JOBQ_DB:-jobq_demo}).
  connect:  scripts/cluster.sh psql        (or: psql -h 127.0.0.1 -p ${JOBQ_PORT:-5499} -U postgres ${JOBQ_DB:-jobq_demo})
  workers:  python3 examples/python/worker.py | node examples/node/worker.js | examples/rust/target/release/jobq-worker
  stop:     scripts/cluster.sh stop
MSG
