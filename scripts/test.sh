#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set-up, then `cargo pgrx test`, which runs the
# #[pg_test] unit tests in src/ and every integration test in tests/ (those start their own
# clusters). Everything runs as root except PostgreSQL itself, which runs as `postgres`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# cargo pgrx test initdb's as `postgres` under this directory, so postgres must own it; it
# lives under /tmp so that postgres can reach it whatever the permissions above the clone.
PGDATA_PARENT=/tmp/jobq-pgrx-test
rm -rf "$PGDATA_PARENT"
install -d -o postgres -g postgres "$PGDATA_PARENT"
cargo pgrx test pg15 --runas postgres --pgdata "$PGDATA_PARENT/data" "$@"
