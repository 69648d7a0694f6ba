#!/usr/bin/env bash
# Installs the proxy extension jobq_proxy (proxy/: a control file and SQL, no library) into a
# PostgreSQL's extension directory. It needs PL/Proxy there: Debian's postgresql-15-plproxy,
# or scripts/build-plproxy.sh for 17 and 18 (scripts/setup.sh installs both).
#
#   scripts/install-proxy.sh [PG_CONFIG]     (default: Debian's PostgreSQL 15)
set -euo pipefail
cd "$(dirname "$0")/.."
pg_config=${1:-/usr/lib/postgresql/15/bin/pg_config}
dir=$("$pg_config" --sharedir)/extension
install -m 644 proxy/jobq_proxy.control proxy/sql/jobq_proxy--*.sql "$dir/"
