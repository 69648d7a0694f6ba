# Debian source packages from a suite the system's sources do not name (trixie, sid), sourced by
# scripts/build-plproxy.sh and scripts/build-pg-cron.sh. apt reaches SUITE through a separate
# sources list and lists directory under /var/cache/jobq-pg/SUITE (the one build-postgres.sh
# uses): the system's own sources are never touched (adding trixie or sid there would upgrade libc).
#   debsrc_orig SUITE PACKAGE   prints the newest upstream tarball of source package PACKAGE
#                               in SUITE's cache, downloading it first when there is none (and
#                               nothing when SUITE yields none); apt checks it against the index
debsrc_orig() {
  local cache=/var/cache/jobq-pg/$1 found
  found=$(ls "$cache"/src/"$2"_*.orig.tar.* 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$found" ]; then
    as_root mkdir -p "$cache/lists/partial" "$cache/src"
    echo "deb-src http://deb.debian.org/debian $1 main" | as_root tee "$cache/sources.list" >/dev/null
    local apt_suite=(apt-get -q -o Dir::Etc::sourcelist="$cache/sources.list" -o Dir::Etc::sourceparts=/dev/null
      -o Dir::State::Lists="$cache/lists" -o APT::Get::List-Cleanup=0)
    as_root "${apt_suite[@]}" update >/dev/null
    (cd "$cache/src" && as_root "${apt_suite[@]}" source --download-only "$2" >/dev/null 2>&1) || true
    found=$(ls "$cache"/src/"$2"_*.orig.tar.* 2>/dev/null | sort -V | tail -1 || true)
  fi
  echo "$found"
}
