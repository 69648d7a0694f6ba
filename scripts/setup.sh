#!/usr/bin/env bash
# Idempotent set-up for a fresh machine of this kind (Debian 12, Rust 1.95, root):
# Debian packages, cargo-pgrx 0.18.0, PostgreSQL 17 and 18 built from Debian's source packages
# (scripts/build-postgres.sh, once per machine) with PL/Proxy (scripts/build-plproxy.sh) and
# pg_cron 1.6 (scripts/build-pg-cron.sh, for the SQL edition's tests), and
# `cargo pgrx init` against 15 (Debian's),
# 17 and 18. Then the client libraries and the example workers' dependencies. Every step checks
# first and skips what is already there. JOBQ_PG_VERSIONS (default "15 17 18") limits the
# versions it prepares; JOBQ_TEST_TOOLS=0 skips what only the tests use: Debian's chromium, Ruby's
# ActiveJob, ActiveRecord and minitest, and
# the npm dependencies of the dashboard's browser suite (dash/browser), pytest, mypy and build.
# Python packages go into a virtual environment of this checkout, .venv/ (ignored by git; a
# stock Debian 12 refuses `pip install` into its own Python, PEP 668): every script and test
# that runs the examples, the demo or clients/python runs .venv/bin/python.
# What must be there first: Debian 12 (amd64), root or sudo, and Rust 1.95 or newer with cargo
# (this script cannot install Rust: get it from https://rustup.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

# Rust first: everything below builds with it. The minimum is clients/rust's rust-version.
RUST_MIN=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' clients/rust/Cargo.toml)
RUST_MIN=${RUST_MIN:-1.95}
rust_v=$(cargo --version 2>/dev/null | sed -n 's/^cargo \([0-9][0-9.]*\).*/\1/p') || true
if [ -z "$rust_v" ] || [ "$(printf '%s\n' "$RUST_MIN" "$rust_v" | sort -V | head -1)" != "$RUST_MIN" ]; then
  echo "setup: Rust $RUST_MIN or newer with cargo must be installed first (found: ${rust_v:-no cargo on PATH});" \
    "this script does not install Rust: see https://rustup.rs" >&2
  exit 1
fi

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
# postgresql-15-plproxy: PL/Proxy, under the proxy extension jobq_proxy (proxy/).
# ruby, ruby-pg: clients/ruby (the demo runs a Ruby worker); Debian's, as RubyGems may be unreachable.
PKGS=(build-essential clang libclang-dev postgresql-15 postgresql-server-dev-15 postgresql-15-plproxy sudo pgbouncer
  ruby ruby-pg)

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# python3 -m venv needs Debian's python3-venv (ensurepip) on Debian's own Python; Node and npm
# from Debian only when there are none (an existing node, from any source, is kept).
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
# clients/ruby's tests: ActiveJob, ActiveRecord and Rails 6.1, minitest and rake, from Debian (tests only).
if [ "${JOBQ_TEST_TOOLS:-1}" = 1 ]; then
  for p in ruby-activejob ruby-activerecord ruby-railties ruby-minitest rake; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Debian's postgresql package starts a cluster on 5432; jobq never uses it, leave it alone.
# What only the tests use (Chromium for the dashboard's browser suite, the client libraries'
# test runners): the main job (scripts/demo.sh) runs none of it and sets JOBQ_TEST_TOOLS=0.
TEST_TOOLS=${JOBQ_TEST_TOOLS:-1}
if [ "$TEST_TOOLS" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  echo "setup: installing chromium chromium-driver"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver
fi
# Prometheus and promtool: /metrics is linted and scraped by the real tools, and the alert
# rules in deploy/prometheus are checked and unit-tested (dash/tests, scripts/test.sh).
if [ "$TEST_TOOLS" = 1 ] && ! command -v promtool >/dev/null; then
  echo "setup: installing prometheus"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
fi

if ! cargo pgrx --version 2>/dev/null | grep -q "0.18.0"; then
  echo "setup: installing cargo-pgrx 0.18.0 (several minutes)"
  cargo install cargo-pgrx --version 0.18.0 --locked
fi

# Every version pgrx should know: what config.toml already names, and those asked for here.
init_args=() missing_init=false
for v in 15 17 18; do
  if [ "$v" = 15 ]; then pgc=$PG_CONFIG; else pgc=/opt/jobq-pg/$v/bin/pg_config; fi
  if [[ " ${JOBQ_PG_VERSIONS:-15 17 18} " == *" $v "* ]]; then
    # 17 and 18: the server, then PL/Proxy for it (15 has Debian's postgresql-15-plproxy).
    [ "$v" = 15 ] || { ./scripts/build-postgres.sh "$v"; ./scripts/build-plproxy.sh "$v"; }
    # pg_cron 1.5 or later for the SQL edition's tests (Debian 12's is 1.4.2); tests only.
    [ "${JOBQ_TEST_TOOLS:-1}" = 0 ] || ./scripts/build-pg-cron.sh "$v"
    grep -qs "pg$v = \"$pgc\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml" || missing_init=true
  fi
  if [ -x "$pgc" ]; then init_args+=("--pg$v" "$pgc"); fi
done
if $missing_init; then
  echo "setup: cargo pgrx init ${init_args[*]}"
  cargo pgrx init "${init_args[@]}"
fi
# The example workers of examples/ (used by tests/cross_language.rs and the demo) and the client
# libraries they use: psycopg and this checkout's clients/python (editable) for Python, in
# .venv/; clients/node built (its dist/ is what examples/node's "jobq": "file:../../clients/node"
# loads) and examples/node's dependencies for Node; the Rust worker's release build (over
# clients/rust).
VENV=$PWD/.venv PY=$PWD/.venv/bin/python
if ! "$PY" -m pip --version >/dev/null 2>&1; then
  echo "setup: python3 -m venv .venv"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
fi
pip_install() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }
if ! "$PY" -c "import psycopg" 2>/dev/null; then
  echo "setup: .venv: pip install -r examples/python/requirements.txt"
  pip_install -r examples/python/requirements.txt
fi
if [ "$("$PY" -c 'import jobq; print(jobq.__file__)' 2>/dev/null)" != "$PWD/clients/python/src/jobq/__init__.py" ]; then
  echo "setup: .venv: pip install -e clients/python"
  pip_install -e clients/python
fi
if [ ! -d clients/node/node_modules/typescript ]; then
  echo "setup: npm ci in clients/node"
  (cd clients/node && npm ci --silent --no-audit --no-fund)
fi
(cd clients/node && npm run build --silent)
if [ ! -d examples/node/node_modules/pg ] || [ ! -e examples/node/node_modules/jobq ]; then
  echo "setup: npm ci in examples/node"
  (cd examples/node && npm ci --silent --no-audit --no-fund)
fi
cargo build -q --release --manifest-path examples/rust/Cargo.toml
# The client libraries' test runners, type checker and package builders (pytest, mypy, build,
# and setuptools for build --no-isolation; Node's TypeScript came with clients/node's npm ci
# above), in .venv/ too.
if [ "$TEST_TOOLS" = 1 ] && ! "$PY" -c "import pytest, pytest_asyncio, mypy, build, wheel, setuptools" 2>/dev/null; then
  echo "setup: .venv: pip install pytest pytest-asyncio mypy build wheel setuptools"
  pip_install pytest pytest-asyncio mypy build wheel "setuptools>=61"
fi
# The browser suite's driver (playwright-core, pointed at /usr/bin/chromium; no browser download).
if [ "$TEST_TOOLS" = 1 ] && [ ! -d dash/browser/node_modules/playwright-core ]; then
  echo "setup: npm ci in dash/browser"
  (cd dash/browser && npm ci --silent --no-audit --no-fund)
fi
echo "setup: ok"
