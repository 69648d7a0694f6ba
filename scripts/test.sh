#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set-up and clippy,
# then for each PostgreSQL version `cargo pgrx test pgNN` (in the `suite` profile: Cargo.toml
# says why), which runs the #[pg_test] unit tests in src/, and every integration suite in tests/
# (those start their own clusters, of the version under test; scripts/run-suites.py runs them two
# at a time), and on 15 and 18 the same suites against the SQL edition
# (scripts/test-sql-edition.sh). Everything runs as root except
# PostgreSQL itself, which runs as `postgres`.
#   scripts/test.sh                        PostgreSQL 15, 17 and 18
#   JOBQ_PG_VERSIONS=17 scripts/test.sh    one version (or any list: "15 18")
# After each version's suite, the scale-out tests (proxy/: jobq_proxy over three node clusters
# and a proxy cluster of that version, with the jobq the suite installed). Then the Debian
# packages of PostgreSQL 15, built and installed (scripts/package.sh, scripts/test-package.sh,
# which also holds the SQL edition's cron twin to the packaged extension's Rust),
# docs/getting-started.md run block by block as a reader would (scripts/test-getting-started.py),
# and the dashboard's tests (dash/: handlers over HTTP, and the browser suite in headless
# Chromium), against PostgreSQL 15 with jobq installed; last the client libraries (clients/:
# pytest, node --test, cargo test, minitest, through scripts/test-clients.sh), mypy --strict (the
# Python library and its tests), and their packages (wheel and sdist, npm pack, cargo package,
# gem build). Python is .venv/bin/python, the virtual environment scripts/setup.sh makes.
# Extra arguments go to the integration suites' binaries (a test name filter, --skip NAME).
set -euo pipefail
cd "$(dirname "$0")/.."
export JOBQ_PG_VERSIONS=${JOBQ_PG_VERSIONS:-15 17 18}
# Each step's name, with the seconds the run has taken so far (where a slow run spends them).
phase() { echo "test: $* (at ${SECONDS} s)"; }
phase "set-up"
./scripts/setup.sh
phase "clippy, the docs' links, the upgrade script"
# No clippy warning anywhere in the workspace (PostgreSQL 15's build of each member).
cargo clippy --workspace --all-targets -- -D warnings
# Every relative link and anchor of README.md, CHANGELOG.md and docs/ resolves (the docs' SQL
# examples run in tests/docs.rs, with each version's suite).
python3 scripts/check-docs.py
# The upgrade script carries the current text of every function it re-creates.
python3 scripts/sync-upgrade.py --check
# cargo pgrx test initdb's as `postgres` under this directory, so postgres must own it; it
# lives under /tmp so that postgres can reach it whatever the permissions above the clone.
PGDATA_PARENT=/tmp/jobq-pgrx-test
for v in $JOBQ_PG_VERSIONS; do
  phase "PostgreSQL $v"
  rm -rf "$PGDATA_PARENT"
  install -d -o postgres -g postgres "$PGDATA_PARENT"
  # The unit tests (#[pg_test] in the server cargo pgrx starts, and plain #[test]), whose names
  # are all in a module (tests::, unit::) where the integration tests' are not; the integration
  # suites' binaries are built by the same command, and then run two at a time.
  cargo pgrx test "pg$v" --profile suite --runas postgres --pgdata "$PGDATA_PARENT/data" "::"
  ./scripts/run-suites.py --profile suite --no-default-features --features "pg_test pg$v" -- "$@"
  phase "jobq-proxy (PostgreSQL $v, PL/Proxy)"
  if [ "$v" = 15 ]; then pgc=/usr/lib/postgresql/15/bin/pg_config; feature=(); else pgc=/opt/jobq-pg/$v/bin/pg_config; feature=(--features "jobq-proxy/pg$v"); fi
  ./scripts/install-proxy.sh "$pgc"
  cargo test -p jobq-proxy --profile suite "${feature[@]}"
  # The suites of the guarantees again, against the SQL edition (jobq-sql--V.sql installed by a
  # role that is no superuser, no library), on the oldest and the newest version.
  if [ "$v" = 15 ] || [ "$v" = 18 ]; then
    phase "the SQL edition (PostgreSQL $v)"
    ./scripts/test-sql-edition.sh "$v" --profile suite
  fi
done
phase "the Debian packages (PostgreSQL 15)"
./scripts/package.sh 15
./scripts/test-package.sh 15
phase "docs/getting-started.md, run as written on Debian's cluster 15/main"
./scripts/test-getting-started.py
phase "jobq-dash (PostgreSQL 15)"
cargo pgrx install --profile suite --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null
cargo test -p jobq-dash --profile suite
phase "jobq-dash on the SQL edition (PostgreSQL 15)"
python3 scripts/build-sql-edition.py >/dev/null
JOBQ_SQL_EDITION=$(ls "$PWD"/target/sql-edition/jobq-sql--*.sql) cargo test -p jobq-dash --profile suite
phase "the client libraries (PostgreSQL 15)"
./scripts/test-clients.sh python node rust ruby
phase "the client libraries on the SQL edition (PostgreSQL 15)"
JOBQ_SQL_EDITION=$(ls "$PWD"/target/sql-edition/jobq-sql--*.sql) ./scripts/test-clients.sh python node rust ruby
# Each typed as its ecosystem checks it, and packaged as its registry expects, with the
# project's version (the workspace's, which the Debian packages also carry).
phase "the client libraries' versions, types and packages"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
for manifest in dash/Cargo.toml proxy/Cargo.toml clients/rust/Cargo.toml clients/python/pyproject.toml; do
  grep -q "^version = \"$version\"$" "$manifest" || { echo "test: $manifest is not at version $version" >&2; exit 1; }
done
grep -q "^__version__ = \"$version\"$" clients/python/src/jobq/__init__.py || { echo "test: jobq.__version__ is not $version" >&2; exit 1; }
grep -q "^  VERSION = \"$version\"$" clients/ruby/lib/jobq/version.rb || { echo "test: Jobq::VERSION is not $version" >&2; exit 1; }
rm -rf target/clients target/package/jobq-client-*
mkdir -p target/clients
(cd clients/python && ../../.venv/bin/python -m mypy --strict src tests && ../../.venv/bin/python -m build --no-isolation --outdir ../../target/clients/python >/dev/null)
(cd clients/node && npm pack --silent --pack-destination ../../target/clients >/dev/null)
cargo package -q -p jobq-client --allow-dirty
(cd clients/ruby && gem build -q jobq.gemspec --output "../../target/clients/jobq-$version.gem" >/dev/null 2>&1)
ls "target/clients/jobq-$version.gem" "target/clients/python/jobq-$version-py3-none-any.whl" "target/clients/python/jobq-$version.tar.gz" "target/clients/jobq-$version.tgz" "target/package/jobq-client-$version.crate"
phase "done"
