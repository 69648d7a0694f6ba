#!/usr/bin/env bash
# Build PL/Proxy for PostgreSQL 17 or 18 (/opt/jobq-pg/<version>, scripts/build-postgres.sh)
# from Debian's source package `postgresql-plproxy`, once per machine (skipped when that PostgreSQL has it).
# PostgreSQL 15 gets Debian's binary package postgresql-15-plproxy (scripts/setup.sh). The
# source comes through the same separate sources list and lists directory as PostgreSQL's
# (suite trixie for 17, sid for 18; the system's own sources are never touched).
#
#   scripts/build-plproxy.sh 17|18
set -euo pipefail
v=${1:?usage: build-plproxy.sh 17|18}
pg_config=/opt/jobq-pg/$v/bin/pg_config
[ -x "$pg_config" ] || { echo "build-plproxy: no PostgreSQL $v in /opt/jobq-pg/$v (scripts/build-postgres.sh $v)" >&2; exit 1; }
if [ -f "$("$pg_config" --sharedir)/extension/plproxy.control" ]; then exit 0; fi
case $v in
  17) suite=trixie ;;
  18) suite=sid ;;
  *) echo "build-plproxy: no source suite known for PostgreSQL $v" >&2; exit 2 ;;
esac
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
echo "build-plproxy: PL/Proxy for PostgreSQL $v from Debian $suite's source package"
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bison flex >/dev/null
# apt checks what it downloads against the suite's index. A mirror sometimes lacks the listed
# version's files (sid listed 2.12.0 with none of its files in the pool; trixie's .dsc of 2.11.0
# was missing while its upstream tarball was there): only the upstream tarball is needed, and
# when the suite yields none, trixie's is used (2.11.0, which builds for 17 and 18).
. "$(dirname "$0")/lib/debsrc.sh"
tarball=$(debsrc_orig "$suite" postgresql-plproxy)
[ -n "$tarball" ] || tarball=$(debsrc_orig trixie postgresql-plproxy)
[ -n "$tarball" ] || { echo "build-plproxy: no postgresql-plproxy source could be fetched" >&2; exit 1; }
echo "build-plproxy: from $(basename "$tarball")"
build=/var/cache/jobq-pg/build-plproxy-$v
rm -rf "$build"; mkdir -p "$build"
tar -xf "$tarball" -C "$build"
cd "$build"/plproxy-*
make -s PG_CONFIG="$pg_config" >"$build.log" 2>&1 || { tail -30 "$build.log"; exit 1; }
make -s PG_CONFIG="$pg_config" install >>"$build.log" 2>&1 || { tail -20 "$build.log"; exit 1; }
rm -rf "$build" "$build.log"
echo "build-plproxy: plproxy installed into PostgreSQL $v"
