#!/usr/bin/env bash
# Build pg_cron for PostgreSQL 15 (Debian's), 17 or 18 (/opt/jobq-pg/<version>,
# scripts/build-postgres.sh) from Debian's source package `pg-cron`, once per machine (skipped
# when that PostgreSQL already has a pg_cron of 1.5 or newer). Debian 12's postgresql-15-cron is
# 1.4.2, too old: schedules in seconds ('5 seconds') came with 1.5. The source comes through the
# separate sources list of scripts/lib/debsrc.sh (the system's own sources are never touched):
# sid's first (the newest, it builds for 15 to 18), then trixie's.
#
#   scripts/build-pg-cron.sh 15|17|18
#
# make install puts pg_cron.so into `pg_config --pkglibdir` and pg_cron.control with its SQL into
# `pg_config --sharedir`/extension. A server loads it with shared_preload_libraries.
#
# A mirror sometimes lists versions its pool does not hold (sid listed 1.6.8 and trixie 1.6.5, with
# neither in the pool, which held 1.6.7's upstream tarball without its .dsc): then that tarball is
# fetched and checked against the SHA-256 below (its contents are upstream's git tag v1.6.7).
set -euo pipefail
v=${1:?usage: build-pg-cron.sh 15|17|18}
case $v in
  15) pg_config=/usr/lib/postgresql/15/bin/pg_config deps=(postgresql-server-dev-15 libpq-dev) ;;
  17|18) pg_config=/opt/jobq-pg/$v/bin/pg_config deps=() ;;
  *) echo "build-pg-cron: PostgreSQL 15, 17 or 18 only" >&2; exit 2 ;;
esac
[ -x "$pg_config" ] || { echo "build-pg-cron: no PostgreSQL $v ($pg_config; scripts/setup.sh)" >&2; exit 1; }
control=$("$pg_config" --sharedir)/extension/pg_cron.control
have=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$control" 2>/dev/null || true)
if [ -n "$have" ] && [ "$(printf '%s\n' 1.5 "$have" | sort -V | head -1)" = 1.5 ]; then exit 0; fi
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
for p in build-essential curl "${deps[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
. "$(dirname "$0")/lib/debsrc.sh"
tarball=$(debsrc_orig sid pg-cron)
[ -n "$tarball" ] || tarball=$(debsrc_orig trixie pg-cron)
if [ -z "$tarball" ]; then
  tarball=/var/cache/jobq-pg/sid/src/pg-cron_1.6.7.orig.tar.gz
  as_root curl -fsS -o "$tarball.part" http://deb.debian.org/debian/pool/main/p/pg-cron/pg-cron_1.6.7.orig.tar.gz
  echo "d950bc29155f31017567e23a31d268ff672e98276c0e9d062512fb7870351f03  $tarball.part" | sha256sum -c --quiet
  as_root mv "$tarball.part" "$tarball"
fi
echo "build-pg-cron: pg_cron for PostgreSQL $v from $(basename "$tarball")"
build=/var/cache/jobq-pg/build-pg-cron-$v
rm -rf "$build"; mkdir -p "$build"
tar -xzf "$tarball" -C "$build"
cd "$build"/pg_cron-*
make -s PG_CONFIG="$pg_config" >"$build.log" 2>&1 || { tail -30 "$build.log"; exit 1; }
make -s PG_CONFIG="$pg_config" install >>"$build.log" 2>&1 || { tail -20 "$build.log"; exit 1; }
rm -rf "$build" "$build.log"
echo "build-pg-cron: pg_cron $(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$control") installed into PostgreSQL $v"
