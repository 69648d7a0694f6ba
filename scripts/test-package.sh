#!/usr/bin/env bash
# Installs the Debian packages of scripts/package.sh on this machine's PostgreSQL and checks
# them without the build tree: every jobq file a cluster uses comes from the packages.
#   1. Any jobq files already installed (by `cargo pgrx install`, or an earlier package) are
#      removed, then the three packages of PostgreSQL NN are installed with apt.
#   2. A fresh cluster with shared_preload_libraries = 'jobq': CREATE EXTENSION jobq gives the
#      packaged version; a job is enqueued, checked out and completed; the background worker
#      runs and reaps a worker whose session ended, with no client calling jobq_reap().
#   3. ALTER EXTENSION jobq UPDATE from the previous release (0.1.0, whose install script is
#      kept in sql/jobq--0.1.0.sql) reaches the packaged version with the job it held.
#   4. jobq_proxy installs (CREATE EXTENSION jobq_proxy CASCADE); jobq-dash serves its overview.
#      The SQL edition's file of jobq-sql installs with psql as a role with CREATEROLE that is no
#      superuser, and a job goes through it.
#   5. The SQL edition's cron twin answers as the packaged extension's Rust does
#      (scripts/check-cron-twin.sh, on a cluster of its own): the release build, which runs the
#      comparison's 198,000 cases about four times faster than the suites' unoptimised one.
#   6. The packages are removed again (scripts/test.sh reinstalls from the build tree after).
#   scripts/test-package.sh [NN]     (default 15; scripts/package.sh NN first)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
v=${1:-15}
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
ARCH=$(dpkg --print-architecture)
PKGS=(postgresql-$v-jobq postgresql-$v-jobq-proxy jobq-dash jobq-sql)
debs=()
for p in "${PKGS[@]}"; do
  f=$PWD/target/packages/${p}_${VERSION}_${ARCH}.deb
  [ -f "$f" ] || { echo "test-package: $f is missing (run scripts/package.sh $v)" >&2; exit 1; }
  debs+=("$f")
done
bindir=/usr/lib/postgresql/$v/bin
libdir=/usr/lib/postgresql/$v/lib ext=/usr/share/postgresql/$v/extension

fail() { echo "test-package: FAILED: $*" >&2; exit 1; }
passed=0
ok() { echo "test-package: ok: $*"; passed=$((passed + 1)); }

# 1. Nothing of jobq but the packages.
dpkg -r "${PKGS[@]}" >/dev/null 2>&1 || true
rm -f "$libdir/jobq.so" "$ext"/jobq.control "$ext"/jobq--*.sql "$ext"/jobq_proxy.control "$ext"/jobq_proxy--*.sql
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debs[@]}" >/dev/null
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status} ${Version}\n' "$p" | grep -q "install ok installed $VERSION" || fail "$p is not installed"
done
[ -f "$libdir/jobq.so" ] && [ -f "$ext/jobq--$VERSION.sql" ] \
  || fail "postgresql-$v-jobq lacks the library or the install script"
# Every upgrade script of sql/ (ALTER EXTENSION jobq UPDATE chains them).
for u in sql/jobq--*--*.sql; do
  [ -f "$ext/$(basename "$u")" ] || fail "postgresql-$v-jobq lacks the upgrade script $(basename "$u")"
done
ok "installed ${PKGS[*]} $VERSION"

# 2. A fresh cluster, run from a directory outside the build tree.
. scripts/lib/pg.sh
dash_pid=
pg_on_exit=('[ -z "$dash_pid" ] || kill "$dash_pid" 2>/dev/null')
pg_throwaway "$bindir" jobq-package
tmp=$pg_tmp data=$pg_data port=$pg_port
cd "$tmp"
sql() { local db=$1; shift; psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d "$db" "$@"; }
# poll DB SQL WHAT: waits up to 30 s for SQL to return t.
poll() {
  for _ in $(seq 150); do [ "$(sql "$1" -c "$2")" = t ] && return 0; sleep 0.2; done
  fail "timed out waiting for $3"
}

sql postgres -c "CREATE DATABASE app"
sql app -c "CREATE EXTENSION jobq"
[ "$(sql app -c "SELECT extversion FROM pg_extension WHERE extname = 'jobq'")" = "$VERSION" ] || fail "extversion"
out=$(sql app <<'SQL'
SELECT jobq_enqueue('mail', '{"to": 1}') \gset
SELECT jobq_register_worker('package-test') AS w \gset
SELECT id = :jobq_enqueue FROM jobq_checkout(:'w', ARRAY['mail']);
SELECT jobq_complete(:jobq_enqueue, :'w');
SQL
)
[ "$out" = $'t\nt' ] || fail "enqueue, checkout, complete: $out"
ok "CREATE EXTENSION jobq ($VERSION); a job enqueued, checked out and completed"
poll app "SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'jobq reaper' AND datname = 'app'" \
  "the background worker to serve database app"
# A worker bound to a session that ends: only the background worker removes it.
sql app -c "SELECT jobq_register_worker('gone', bind_to_session => true)" >/dev/null
poll app "SELECT NOT EXISTS (SELECT 1 FROM jobq.workers WHERE name = 'gone')" "the background worker to reap a dead worker"
ok "the background worker runs and reaps"

# 3. The previous release, then ALTER EXTENSION jobq UPDATE.
cp "$repo/sql/jobq--0.1.0.sql" "$ext/"
pg_on_exit+=('rm -f "$ext/jobq--0.1.0.sql"')
sql postgres -c "CREATE DATABASE old"
sql old -c "CREATE EXTENSION jobq VERSION '0.1.0'"
id=$(sql old -c "SELECT jobq_enqueue('kept', '{\"n\": 7}')")
sql old -c "ALTER EXTENSION jobq UPDATE"
rm -f "$ext/jobq--0.1.0.sql"
[ "$(sql old -c "SELECT extversion FROM pg_extension WHERE extname = 'jobq'")" = "$VERSION" ] || fail "the update's version"
out=$(sql old -v id="$id" <<'SQL'
SELECT jobq_register_worker('after-update') AS w \gset
SELECT id = :id AND payload = '{"n": 7}' FROM jobq_checkout(:'w', ARRAY['kept']);
SQL
)
[ "$out" = t ] || fail "the job made at 0.1.0 after the update: $out"
ok "ALTER EXTENSION jobq UPDATE from 0.1.0 to $VERSION keeps the job"

# 4. The proxy extension, the SQL edition and the dashboard.
sql postgres -c "CREATE DATABASE proxy"
sql proxy -c "CREATE EXTENSION jobq_proxy CASCADE"
ok "CREATE EXTENSION jobq_proxy CASCADE"
sql postgres -c "CREATE ROLE package_installer LOGIN CREATEROLE" -c "CREATE DATABASE sqled OWNER package_installer"
psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U package_installer -d sqled <"/usr/share/jobq/jobq-sql--$VERSION.sql" \
  || fail "the SQL edition's file did not install"
out=$(sql sqled <<'SQL'
SELECT version || ' ' || edition FROM jobq_version();
SELECT jobq_enqueue('mail') AS id \gset
SELECT jobq_register_worker('sql-edition') AS w \gset
SELECT jobq_complete(id, :'w') FROM jobq_checkout(:'w', ARRAY['mail']);
SQL
)
[ "$out" = "$VERSION sql"$'\nt' ] || fail "the SQL edition: $out"
ok "/usr/share/jobq/jobq-sql--$VERSION.sql installs as a role that is no superuser; a job goes through"
dash_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
/usr/bin/jobq-dash --database-url "host=127.0.0.1 port=$port user=postgres dbname=app" --listen "127.0.0.1:$dash_port" >"$tmp/dash.log" 2>&1 &
dash_pid=$!
for _ in $(seq 150); do
  page=$(python3 - "$dash_port" <<'PY' 2>/dev/null
import sys, urllib.request
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=2).read().decode())
PY
) && break
  sleep 0.2
done
grep -q "mail" <<<"${page:-}" || fail "jobq-dash did not serve an overview naming queue mail ($(cat "$tmp/dash.log"))"
ok "/usr/bin/jobq-dash serves the overview"
metrics=$(python3 - "$dash_port" <<'PY'
import sys, urllib.request
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode())
PY
) || fail "jobq-dash did not serve /metrics"
grep -q '^# TYPE jobq_jobs_completed_total counter' <<<"$metrics" || fail "/metrics has no completed counter"
grep -q '^jobq_reaper_last_pass_age_seconds{database="app"} ' <<<"$metrics" || fail "/metrics has no reaper figure for database app"
ok "/usr/bin/jobq-dash serves /metrics"
for f in prometheus/jobq-alerts.yml grafana/jobq.json; do
  [ -s "/usr/share/jobq-dash/$f" ] || fail "jobq-dash did not install /usr/share/jobq-dash/$f"
done
ok "/usr/share/jobq-dash has the alert rules and the Grafana dashboard"

kill "$dash_pid"; dash_pid=
cd "$repo"

# 5. The cron twin (src/sql/twins/schedules.sql) against the packaged extension's Rust.
scripts/check-cron-twin.sh "$bindir" || fail "the cron twin differs from the packaged extension"
ok "the SQL edition's cron twin answers as the packaged extension does"

# 6. Leave the machine as it was.
dpkg -r "${PKGS[@]}" >/dev/null
echo "test-package: $passed passed, 0 failed"
