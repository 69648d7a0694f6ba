#!/usr/bin/env bash
# The one command that builds every release artifact: `scripts/package.sh` with no argument
# builds all of them (the extension's and jobq_proxy's packages for each of PostgreSQL 15, 17
# and 18, and jobq-dash's), into target/packages/.
# Debian packages of jobq, named as PGDG names its extension packages, written to
# target/packages/:
#   postgresql-NN-jobq_V_amd64.deb        the extension for PostgreSQL NN: jobq.so, jobq.control,
#                                         the install script of V and every upgrade script
#                                         (sql/jobq--A--B.sql); depends on postgresql-NN
#   postgresql-NN-jobq-proxy_V_amd64.deb  jobq_proxy, the scale-out extension (SQL only, proxy/);
#                                         depends on postgresql-NN and postgresql-NN-plproxy
#   jobq-dash_V_amd64.deb                 the dashboard, /usr/bin/jobq-dash (one for every NN), and
#                                         /usr/share/jobq-dash: alert rules, a Grafana dashboard
#   jobq-sql--V.sql                       the SQL edition (docs/sql-edition.md), for servers where
#                                         no library can be installed: one file, run with psql
#   jobq-sql_V_amd64.deb                  the same file in /usr/share/jobq/, for hosts that keep
#                                         their tools in packages
# Files go where Debian's postgresql-NN looks for them (/usr/lib/postgresql/NN/lib,
# /usr/share/postgresql/NN/extension), whatever prefix the build's PostgreSQL has (17 and 18
# are built under /opt/jobq-pg by scripts/build-postgres.sh). V is the workspace's version.
#   scripts/package.sh             every release artifact: 15, 17 and 18, and jobq-dash
#   scripts/package.sh NN ...      the packages of these versions only, and jobq-dash
# (each version needs that PostgreSQL set up: scripts/setup.sh does it).
# scripts/test-package.sh installs the packages of 15 on this machine and checks them.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
ARCH=$(dpkg --print-architecture)
OUT=$PWD/target/packages
MAINTAINER="jobq maintainers <jobq@localhost>"
mkdir -p "$OUT"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

pg_config_of() { if [ "$1" = 15 ]; then echo /usr/lib/postgresql/15/bin/pg_config; else echo "/opt/jobq-pg/$1/bin/pg_config"; fi; }

# shlibs FILE: the packages FILE's shared libraries come from, as dpkg-shlibdeps reads them.
shlibs() {
  (cd "$work" && mkdir -p debian && printf 'Source: jobq\n\nPackage: jobq\nArchitecture: any\n' > debian/control \
    && dpkg-shlibdeps -O "$1" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
}

# build_deb ROOT NAME DEPENDS SUMMARY BODY: writes ROOT/DEBIAN/control and builds the package.
build_deb() {
  local root=$1 name=$2 depends=$3 summary=$4 body=$5
  mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$name"
  printf 'jobq (%s)\nLicense: MIT\n' "$VERSION" > "$root/usr/share/doc/$name/copyright"
  local size; size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  cat > "$root/DEBIAN/control" <<CONTROL
Package: $name
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $size
Depends: $depends
Section: database
Priority: optional
Description: $summary
$(printf '%s\n' "$body" | fold -s -w 78 | sed 's/^/ /')
CONTROL
  find "$root" -type d -exec chmod 755 {} +
  fakeroot dpkg-deb --build -Zxz "$root" "$OUT/${name}_${VERSION}_${ARCH}.deb" >/dev/null
  echo "package: $OUT/${name}_${VERSION}_${ARCH}.deb"
}

for v in ${*:-15 17 18}; do
  pgc=$(pg_config_of "$v")
  [ -x "$pgc" ] || { echo "package: no PostgreSQL $v at $pgc (scripts/setup.sh builds it)" >&2; exit 1; }
  # The extension: cargo pgrx package builds the release library and lays the files out
  # under the build's own prefix; they move to Debian's places.
  staged=$work/pgrx-$v
  cargo pgrx package --pg-config "$pgc" --out-dir "$staged" >/dev/null
  root=$work/postgresql-$v-jobq
  lib=$root/usr/lib/postgresql/$v/lib ext=$root/usr/share/postgresql/$v/extension
  mkdir -p "$lib" "$ext"
  find "$staged" -name 'jobq.so' -exec install -m 644 {} "$lib/" \;
  find "$staged" -path '*/extension/*' \( -name 'jobq.control' -o -name 'jobq--*.sql' \) -exec install -m 644 {} "$ext/" \;
  [ -f "$lib/jobq.so" ] && [ -f "$ext/jobq.control" ] && [ -f "$ext/jobq--$VERSION.sql" ] \
    || { echo "package: cargo pgrx package gave no jobq.so / control / install script for $v" >&2; exit 1; }
  build_deb "$root" "postgresql-$v-jobq" "postgresql-$v, $(shlibs "$lib/jobq.so")" \
    "job queue whose coordination logic lives inside PostgreSQL $v" \
    "jobq keeps a job queue's whole coordination logic inside the database: enqueue, checkout, uniqueness, concurrency and rate limits, named locks, worker heartbeats and the reaping of work left by dead workers are SQL functions, and a background worker (shared_preload_libraries = 'jobq') reaps and runs schedules. Any client runs workers with plain SQL."

  root=$work/postgresql-$v-jobq-proxy
  ext=$root/usr/share/postgresql/$v/extension
  mkdir -p "$ext"
  install -m 644 proxy/jobq_proxy.control proxy/sql/jobq_proxy--*.sql "$ext/"
  build_deb "$root" "postgresql-$v-jobq-proxy" "postgresql-$v, postgresql-$v-plproxy" \
    "jobq over several PostgreSQL $v servers behind PL/Proxy" \
    "jobq_proxy offers jobq's SQL functions in a proxy database and routes each call to the node that holds its queue, job, lock or worker. The nodes run postgresql-$v-jobq."
done

# The dashboard: one binary for every PostgreSQL version.
cargo build --release -q -p jobq-dash
root=$work/jobq-dash
mkdir -p "$root/usr/bin"
install -m 755 target/release/jobq-dash "$root/usr/bin/jobq-dash"
# The alert rules and the Grafana dashboard for its /metrics (docs/monitoring.md).
install -D -m 644 deploy/prometheus/jobq-alerts.yml "$root/usr/share/jobq-dash/prometheus/jobq-alerts.yml"
install -D -m 644 deploy/grafana/jobq.json "$root/usr/share/jobq-dash/grafana/jobq.json"
build_deb "$root" jobq-dash "$(shlibs "$root/usr/bin/jobq-dash")" \
  "web dashboard for the jobq job queue" \
  "jobq-dash serves queues, jobs, workers, locks, schedules, rate limits and health of a database with jobq, read from the extension's views, as a login role granted jobq_reader (read-only) or jobq_admin (with actions), and its metrics for Prometheus at /metrics, with alert rules and a Grafana dashboard in /usr/share/jobq-dash. Basic auth is required off loopback."

# The SQL edition: one file, built from the same SQL (scripts/build-sql-edition.py).
python3 scripts/build-sql-edition.py "$OUT/jobq-sql--$VERSION.sql" >/dev/null
echo "package: $OUT/jobq-sql--$VERSION.sql"
root=$work/jobq-sql
install -D -m 644 "$OUT/jobq-sql--$VERSION.sql" "$root/usr/share/jobq/jobq-sql--$VERSION.sql"
build_deb "$root" jobq-sql "postgresql-client | postgresql-client-15" \
  "jobq for PostgreSQL where no library can be installed (SQL edition)" \
  "The SQL edition of jobq: the same SQL functions, in SQL and PL/pgSQL alone, installed into a database with psql -f /usr/share/jobq/jobq-sql--$VERSION.sql by a role with CREATEROLE that owns it (no superuser), as managed services (RDS, Cloud SQL, Azure, Supabase, Neon) allow."
