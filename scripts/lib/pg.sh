# A PostgreSQL cluster of a script's own, sourced by the scripts that start one
# (scripts/cluster.sh, scripts/test-package.sh, scripts/test-clients.sh, bench/clients.sh): one
# set of steps for initdb, the settings, start and stop. The server runs as the OS user
# `postgres` (initdb refuses root), trusts local logins, listens on 127.0.0.1 and has jobq
# preloaded.
#   pg_free_port                        prints a free loopback port
#   pg_init BINDIR DATA PORT [LINE...]  a new cluster in DATA (created, owned by postgres) on
#                                       PORT, with LINE... appended to its postgresql.conf
#   pg_start BINDIR DATA                starts it (log: DATA/server.log), waits until it is up
#   pg_stop BINDIR DATA [MODE]          stops it (MODE: fast by default); quiet when it is down
#   pg_throwaway BINDIR PREFIX [LINE...]  a cluster in a new temporary directory $pg_tmp
#                                       (data $pg_data, port $pg_port), started; stopped and
#                                       removed at exit with whatever pg_on_exit names
pg_as() { if [ "$(id -un)" = postgres ]; then "$@"; else sudo -u postgres "$@"; fi; }

pg_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pg_init() {
  local bindir=$1 data=$2 port=$3
  shift 3
  mkdir -p "$data" && chown postgres:postgres "$data" && chmod 700 "$data"
  pg_as "$bindir/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null
  {
    echo "listen_addresses = '127.0.0.1'"
    echo "port = $port"
    echo "unix_socket_directories = '$data'"
    echo "shared_preload_libraries = 'jobq'"
    printf '%s\n' "$@"
  } >>"$data/postgresql.conf"
}

pg_start() { pg_as "$1/pg_ctl" -D "$2" -l "$2/server.log" -w start >/dev/null; }

pg_stop() { pg_as "$1/pg_ctl" -D "$2" -m "${3:-fast}" -w stop >/dev/null 2>&1 || true; }

# Commands the exit trap of pg_throwaway runs first (a worker or a pooler to kill).
pg_on_exit=()
pg_throwaway() {
  local bindir=$1 prefix=$2
  shift 2
  pg_tmp=$(mktemp -d "/tmp/$prefix-XXXXXX") && chmod 755 "$pg_tmp"
  pg_data=$pg_tmp/data pg_port=$(pg_free_port) pg_bindir=$bindir
  trap 'for c in "${pg_on_exit[@]}"; do eval "$c" || true; done; pg_stop "$pg_bindir" "$pg_data" immediate; rm -rf "$pg_tmp"' EXIT
  pg_init "$bindir" "$pg_data" "$pg_port" "$@"
  pg_start "$bindir" "$pg_data"
}
