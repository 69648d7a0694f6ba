#!/usr/bin/env bash
# Scale-out: checkout+complete through the proxy extension jobq_proxy, beside a
# direct connection to a node, and the latency of a waiting checkout across nodes.
#
#   bench/proxy.sh [--clients "16 64"] [--runs 3] [--seconds 10] [--backlog 100000] [--wait-only]
#
# Four PostgreSQL 15 clusters on this machine (release build of jobq preloaded in each; PL/Proxy
# and jobq_proxy installed): nodes 0-2 on ports 5491-5493 (database bench, jobq_set_node(k),
# --backlog jobs in queue q<k>), the proxy on 5494 with two databases: px1, whose server `jobq`
# has one partition (node 0), and px3, with all three (queue q<k> pinned to node k).
# synchronous_commit = on everywhere. Rows, each a pgbench -M prepared run of a worker's two
# calls (bench/scripts/proxy_checkout_complete*.sql), median of --runs runs of --seconds:
#   direct        on node 0 itself (client c is a worker registered there), queue q0
#   proxy, 1 node through px1, queue q0: what the hop costs
#   proxy, 3 nodes, one queue each   through px3, client c works queue q<c % 3> (every call one node)
#   proxy, 3 nodes, every queue      through px3, checkout of any queue (the proxy asks the nodes in turn)
# The three nodes share this machine's 2 cores with the proxy and pgbench: what N nodes would do
# on N machines is argued in docs/scale-out.md, not measured here.
# Then bench/proxywait.py: 4 workers waiting through px3 (wait => 2 s) on q0 (one node) and on
# every queue (three nodes), 200 jobs enqueued one at a time; enqueue-to-checkout latency.
# Output: bench/results/proxy.md.
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS="16 64"; RUNS=3; SECS=10; BACKLOG=100000; WAIT_ONLY=false
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) CLIENTS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --backlog) BACKLOG=$2; shift 2 ;;
    --wait-only) WAIT_ONLY=true; shift ;;  # measure the waiting checkout again, keep the table
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
. bench/lib.sh
./scripts/setup.sh >/dev/null
cargo pgrx install --release --pg-config "$PGBIN/pg_config" >/dev/null
./scripts/install-proxy.sh "$PGBIN/pg_config"
"$PY" -c "import psycopg" 2>/dev/null || "$PY" -m pip install -q --target target/bench-py "psycopg[binary]"   # .venv's (bench/lib.sh)

ROOT=$PWD/target/bench-proxy
NODE_PORTS=(5491 5492 5493); PROXY_PORT=5494
q() { local port=$1 db=$2; shift 2; psql -h 127.0.0.1 -p "$port" -U postgres -d "$db" -v ON_ERROR_STOP=1 -qtA "$@"; }

stop_all() {
  [ -z "${KEEP:-}" ] || return 0  # KEEP=1: leave the clusters running, for a look
  for n in node0 node1 node2 proxy; do as_pg "$PGBIN/pg_ctl" -D "$ROOT/$n" -m fast stop >/dev/null 2>&1 || true; done
}
mkdir -p "$ROOT"; chmod 755 "$ROOT"
trap stop_all EXIT
for k in 0 1 2; do
  init_cluster "$ROOT/node$k" "${NODE_PORTS[$k]}" on 300
  q "${NODE_PORTS[$k]}" postgres -c "CREATE DATABASE bench"
done
init_cluster "$ROOT/proxy" "$PROXY_PORT" on 300
for px in px1 px3; do
  q "$PROXY_PORT" postgres -c "CREATE DATABASE $px"
  nodes=1; [ "$px" = px3 ] && nodes=3
  parts=$(for k in $(seq 0 $((nodes - 1))); do printf "%sp%s 'host=127.0.0.1 port=%s dbname=bench'" "$([ "$k" = 0 ] || echo ', ')" "$k" "${NODE_PORTS[$k]}"; done)
  q "$PROXY_PORT" "$px" <<SQL
SET client_min_messages = warning;
CREATE EXTENSION jobq_proxy CASCADE;
CREATE SERVER jobq FOREIGN DATA WRAPPER plproxy OPTIONS (modular_mapping '1', $parts);
CREATE USER MAPPING FOR PUBLIC SERVER jobq;
INSERT INTO jobq.placements SELECT 'q' || k, k FROM generate_series(0, $nodes - 1) k;
SQL
done

# reset TARGET [JOBS]: fresh jobq on every node with JOBS (--backlog) jobs in q<k>, and 256 workers registered
# where TARGET's clients call (direct: node 0; px1 / px3: through that proxy), heartbeats
# pushed a day ahead so that no reaper interferes.
reset() {
  local jobs=${2:-$BACKLOG}
  for k in 0 1 2; do
    q "${NODE_PORTS[$k]}" bench >/dev/null <<SQL
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE; DROP TABLE IF EXISTS bench_workers;
CREATE EXTENSION jobq; SELECT jobq_set_node($k);
SELECT count(*) FROM jobq_enqueue_batch('q$k', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, $jobs))) WHERE $jobs > 0;
SQL
  done
  local port=$PROXY_PORT db=$1
  [ "$1" = direct ] && { port=${NODE_PORTS[0]}; db=bench; }
  q "$port" "$db" >/dev/null <<SQL
DROP TABLE IF EXISTS bench_workers;
CREATE TABLE bench_workers AS SELECT c AS client, jobq_register_worker('bench-' || c) AS w FROM generate_series(0, 255) c;
ALTER TABLE bench_workers ADD PRIMARY KEY (client);
SQL
  for k in 0 1 2; do
    q "${NODE_PORTS[$k]}" bench -c "UPDATE jobq.workers SET heartbeat_at = clock_timestamp() + interval '1 day'" -c "VACUUM ANALYZE" >/dev/null
  done
}

# run TARGET SCRIPT NODES CLIENTS: jobs/s of one pgbench run (empty if a client failed).
run() {
  local port=$PROXY_PORT db=$1 out
  [ "$1" = direct ] && { port=${NODE_PORTS[0]}; db=bench; }
  out=$(pgbench -h 127.0.0.1 -p "$port" -U postgres -n -M prepared -c "$4" -j "$4" -T "$SECS" -D nodes="$3" -f "bench/scripts/$2" "$db" 2>&1) || true
  if echo "$out" | grep -qE 'aborted|ERROR|^number of failed transactions: [1-9]'; then echo "$out" >&2; return 0; fi
  echo "$out" | awk '/^tps = /{print int($3)}'
}

ROWS=("direct|direct|proxy_checkout_complete.sql|1"
      "proxy, 1 node|px1|proxy_checkout_complete.sql|1"
      "proxy, 3 nodes, one queue each|px3|proxy_checkout_complete.sql|3"
      "proxy, 3 nodes, every queue|px3|proxy_checkout_complete_all.sql|3")
OUT=bench/results/proxy.md
if $WAIT_ONLY; then
  sed -i '/^## A waiting checkout/,$d' "$OUT"; sed -i '${/^$/d}' "$OUT"
else
{
  echo "# Scale-out: checkout+complete through jobq_proxy"
  echo
  echo "\`bench/proxy.sh --clients \"$CLIENTS\" --runs $RUNS --seconds $SECS --backlog $BACKLOG\`, $(date -u +%Y-%m-%d), $(machine), jobq $(git rev-parse --short HEAD), PL/Proxy $(dpkg-query -W -f='${Version}' postgresql-15-plproxy 2>/dev/null). Three node clusters and the proxy's cluster on the same 2 cores, synchronous_commit = on; jobs/s, median of $RUNS runs of $SECS s, each on a fresh backlog of $BACKLOG jobs per node."
  echo
  printf '| row |'; for c in $CLIENTS; do printf ' %s clients | vs direct |' "$c"; done; echo
  printf '| --- |'; for c in $CLIENTS; do printf ' ---: | ---: |'; done; echo
} > "$OUT"
declare -A DIRECT
for row in "${ROWS[@]}"; do
  IFS='|' read -r name target script nodes <<< "$row"
  line="| $name |"
  for c in $CLIENTS; do
    runs=""
    for _ in $(seq "$RUNS"); do
      reset "$target"
      runs="$runs $(run "$target" "$script" "$nodes" "$c")"
    done
    echo "proxy: $name at $c clients:$runs" >&2
    m=$(echo "$runs" | median)
    [ "$target" = direct ] && DIRECT[$c]=$m
    line="$line ${m:--} | $(ratio "${m:-0}" "${DIRECT[$c]:-0}") |"
  done
  echo "$line" >> "$OUT"
done
fi

{
  echo
  echo "## A waiting checkout through the proxy"
  echo
  echo "4 workers on px3 looping \`jobq_checkout(w, queues, 1, wait => '2 s')\`, 200 jobs enqueued through the proxy one at a time 10-50 ms apart (\`bench/proxywait.py\`); enqueue-to-checkout latency, ms."
  echo
  echo "| queues waited on | p50 | p99 | max |"
  echo "| --- | ---: | ---: | ---: |"
} >> "$OUT"
reset px3 0
for mode in one all; do
  read -r p50 p99 mx < <(PYTHONPATH=target/bench-py "$PY" bench/proxywait.py "$PROXY_PORT" px3 "$mode" 4 200)
  label="q0 (one node: the node waits)"; [ "$mode" = all ] && label="every queue (three nodes: the proxy waits in 200 ms slices)"
  echo "proxy: wait $mode: p50 $p50 p99 $p99 max $mx" >&2
  echo "| $label | $p50 | $p99 | $mx |" >> "$OUT"
done
cat "$OUT"
