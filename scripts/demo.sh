#!/usr/bin/env bash
# The main job: set up everything, start a local PostgreSQL 15 with jobq preloaded, and run
# the demo (examples/demo.rs). The server is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo pgrx install --pg-config /usr/lib/postgresql/15/bin/pg_config
# Restart so a server that was already running loads the library just installed.
./scripts/cluster.sh stop
./scripts/cluster.sh start
cargo run --quiet --example demo
cat <<MSG

The server is still running (data in .pgdata/, port ${JOBQ_PORT:-5499}, database ${JOBQ_DB:-jobq_demo}).
  connect:  scripts/cluster.sh psql        (or: psql -h 127.0.0.1 -p ${JOBQ_PORT:-5499} -U postgres ${JOBQ_DB:-jobq_demo})
  stop:     scripts/cluster.sh stop
MSG
