#!/usr/bin/env bash
# Build PostgreSQL 17 or 18 from Debian's source package into /opt/jobq-pg/<version>, once per
# machine (skipped when that prefix already has a server). Debian 12's registry has PostgreSQL
# 15 only; 17 comes from suite trixie, 18 from suite sid. apt reaches those suites through a
# separate sources list and a separate lists directory under /var/cache/jobq-pg/<suite>: the
# system's own sources are never touched (adding trixie or sid there would upgrade libc).
#
#   scripts/build-postgres.sh 17|18
#
# apt-get source downloads the version the suite's index lists and checks it against that index.
# A mirror sometimes lists a version its pool no longer (or not yet) holds (trixie listed 17.12
# when the pool had 17.9 to 17.11): then the newest older .dsc of the same Debian revision in the
# pool is fetched, and the orig tarball is checked against the SHA-256 that .dsc names.
set -euo pipefail
v=${1:?usage: build-postgres.sh 17|18}
prefix=/opt/jobq-pg/$v
if [ -x "$prefix/bin/postgres" ]; then exit 0; fi
case $v in
  17) suite=trixie ;;
  18) suite=sid ;;
  *) echo "build-postgres: no source suite known for PostgreSQL $v" >&2; exit 2 ;;
esac
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
cache=/var/cache/jobq-pg/$suite
as_root mkdir -p "$cache/lists/partial" "$cache/src"
echo "deb-src http://deb.debian.org/debian $suite main" | as_root tee "$cache/sources.list" >/dev/null
apt_suite=(apt-get -q -o Dir::Etc::sourcelist="$cache/sources.list" -o Dir::Etc::sourceparts=/dev/null
  -o Dir::State::Lists="$cache/lists" -o APT::Get::List-Cleanup=0)

echo "build-postgres: PostgreSQL $v from Debian $suite's source package (a few minutes, once)"
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  libreadline-dev zlib1g-dev libssl-dev pkg-config bison flex curl lz4 >/dev/null
as_root "${apt_suite[@]}" update >/dev/null
tarball=$(ls "$cache"/src/postgresql-${v}_*.orig.tar.bz2 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$tarball" ]; then
  (cd "$cache/src" && as_root "${apt_suite[@]}" source --download-only "postgresql-$v" >/dev/null 2>&1) || true
  tarball=$(ls "$cache"/src/postgresql-${v}_*.orig.tar.bz2 2>/dev/null | sort -V | tail -1 || true)
fi
if [ -z "$tarball" ]; then
  # The listed version is missing from the pool: walk down from it to the newest .dsc there is.
  listed=$(lz4cat "$cache"/lists/*_source_Sources.lz4 2>/dev/null \
    | awk -v p="postgresql-$v" '$1=="Package:"{hit=($2==p)} hit&&$1=="Version:"&&!v{v=$2} END{print v}')
  upstream=${listed%%-*}; debrev=${listed#*-}
  pool=http://deb.debian.org/debian/pool/main/p/postgresql-$v
  minor=${upstream#*.}
  while [ "$minor" -ge 0 ]; do
    dsc="postgresql-${v}_$v.$minor-$debrev.dsc"
    if curl -fsS -o "$cache/src/$dsc" "$pool/${dsc//+/%2b}" 2>/dev/null; then break; fi
    minor=$((minor - 1))
  done
  [ "$minor" -ge 0 ] || { echo "build-postgres: no postgresql-$v source in $pool" >&2; exit 1; }
  orig="postgresql-${v}_$v.$minor.orig.tar.bz2"
  sum=$(awk -v f="$orig" '/^Checksums-Sha256:/{s=1; next} /^[^ ]/{s=0} s&&$3==f{print $1}' "$cache/src/$dsc")
  curl -fsS -o "$cache/src/$orig.part" "$pool/$orig"
  echo "$sum  $cache/src/$orig.part" | sha256sum -c --quiet
  mv "$cache/src/$orig.part" "$cache/src/$orig"
  echo "build-postgres: $suite lists $listed, missing from its pool; building $v.$minor (checksum from its .dsc)"
  tarball=$cache/src/$orig
fi

build=/var/cache/jobq-pg/build-$v
rm -rf "$build"; mkdir -p "$build"
tar -xjf "$tarball" -C "$build"
cd "$build"/postgresql-"$v"*
./configure --prefix="$prefix" --without-icu --with-openssl >"$build/configure.log" 2>&1 \
  || { tail -20 "$build/configure.log"; exit 1; }
make -s -j"$(nproc)" >"$build/make.log" 2>&1 || { tail -40 "$build/make.log"; exit 1; }
make -s install >"$build/install.log" 2>&1 || { tail -20 "$build/install.log"; exit 1; }
rm -rf "$build"
echo "build-postgres: $("$prefix/bin/postgres" --version) in $prefix"
