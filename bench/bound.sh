#!/usr/bin/env bash
# The SQL edition's checkout+complete as the client libraries' workers run it, each bound to its
# session (bench/scripts/sql_bound_worker.sql): the SQL edition of a commit (A) against the
# working tree's (B), each built by its own scripts/build-sql-edition.py, alternately ROUNDS
# times at each client count, so that both sides see the same drift of this machine. One
# throwaway PostgreSQL 15 cluster without jobq's library; the edition installed by a role with
# CREATEROLE and no superuser, the workers a plain login role (jobq_worker), as on a managed
# service; a backlog of 300,000 jobs for each run. The installer's role does not see the
# workers' sessions' start, so their rows name none and the pid alone decides (as on a managed
# service whose installing role lacks pg_read_all_stats). Prints each run and writes
# bench/results/bound.md.
#   bench/bound.sh [REF (default HEAD)] [ROUNDS (default 2)] [CLIENTS (default "16 64")] [SECONDS (default 15)]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
REF=${1:-HEAD}; ROUNDS=${2:-2}; CLIENTS=${3:-16 64}; SECS=${4:-15}
WORK=${TMPDIR:-/tmp}/jobq-bound; D=$WORK/data; P=5491
as_pg "$PGBIN/pg_ctl" -D "$D" -m immediate stop >/dev/null 2>&1 || true  # one left by a killed run
rm -rf "$WORK"; mkdir -p "$WORK/a"
git archive "$REF" | tar -x -C "$WORK/a"
(cd "$WORK/a" && python3 scripts/build-sql-edition.py "$WORK/A.sql" >/dev/null)
python3 scripts/build-sql-edition.py "$WORK/B.sql" >/dev/null
init_cluster "$D" "$P" on 200 ""
trap 'as_pg "$PGBIN/pg_ctl" -D "$D" -m fast stop >/dev/null 2>&1 || true' EXIT
Q=(env PGOPTIONS='-c client_min_messages=warning' psql -X -q -h 127.0.0.1 -p $P -v ON_ERROR_STOP=1)
"${Q[@]}" -U postgres -d postgres -c "CREATE ROLE bench_installer LOGIN CREATEROLE" -c "CREATE ROLE bench_app LOGIN"
run() {  # run SIDE CLIENTS: jobs/s
  "${Q[@]}" -U postgres -d postgres -c "DROP DATABASE IF EXISTS bound WITH (FORCE)" -c "CREATE DATABASE bound OWNER bench_installer"
  "${Q[@]}" -U bench_installer -d bound -f "$WORK/$1.sql" >/dev/null
  # The workers never heartbeat: alive for the run whatever its length.
  "${Q[@]}" -U postgres -d postgres -c "ALTER DATABASE bound SET jobq.heartbeat_timeout = '1 h'"
  "${Q[@]}" -U bench_installer -d bound -c "GRANT jobq_worker TO bench_app" \
    -c "SELECT count(*) FROM jobq_enqueue_batch('bench', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 300000)))" >/dev/null
  "${Q[@]}" -U postgres -d bound -c "VACUUM ANALYZE" -c "CHECKPOINT"
  "$PGBIN/pgbench" -h 127.0.0.1 -p $P -U bench_app -n -M prepared -c "$2" -j "$2" -T "$SECS" -D ids={} \
    -f bench/scripts/sql_bound_worker.sql bound > "$WORK/pgbench.out" 2>&1 || true
  if grep -q aborted "$WORK/pgbench.out"; then echo "bench/bound.sh: side $1 at $2 clients:" >&2; grep -m3 -E 'aborted|ERROR' "$WORK/pgbench.out" >&2; exit 1; fi
  sed -n 's/^tps = \([0-9]*\).*/\1/p' "$WORK/pgbench.out"
}
out=bench/results/bound.md
{ echo "# bench/bound.sh $REF $ROUNDS \"$CLIENTS\" $SECS"
  echo
  echo "$(date -u +%Y-%m-%d), $(machine). A = the SQL edition at $(git rev-parse --short "$REF"), B = the working tree of $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src sql scripts || echo ' (changed)'). Jobs/s of runs of $SECS s, workers bound to their sessions, one call a job."
  echo
  echo "| round | clients | A | B | B / A |"
  echo "| ---: | ---: | ---: | ---: | ---: |"; } > "$out"
for round in $(seq "$ROUNDS"); do
  for c in $CLIENTS; do
    a=$(run A "$c"); b=$(run B "$c")
    line="| $round | $c | $a | $b | $(ratio "$b" "$a") |"
    echo "$line"; echo "$line" >> "$out"
  done
done
