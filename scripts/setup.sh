#!/usr/bin/env bash
# Idempotent set-up for a fresh machine of this kind (Debian 12, Rust 1.95, root):
# Debian packages, cargo-pgrx 0.18.0, and `cargo pgrx init` against the system PostgreSQL 15.
# Every step checks first and skips what is already there.
set -euo pipefail

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PKGS=(build-essential clang libclang-dev postgresql-15 postgresql-server-dev-15 sudo)

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Debian's postgresql package starts a cluster on 5432; jobq never uses it, leave it alone.

if ! cargo pgrx --version 2>/dev/null | grep -q "0.18.0"; then
  echo "setup: installing cargo-pgrx 0.18.0 (several minutes)"
  cargo install cargo-pgrx --version 0.18.0 --locked
fi

if ! grep -qs "pg15 = \"$PG_CONFIG\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
  echo "setup: cargo pgrx init --pg15 $PG_CONFIG"
  cargo pgrx init --pg15 "$PG_CONFIG"
fi
echo "setup: ok"
