#!/usr/bin/env bash
# CPU per job, counted instead of timed: the instructions the server executes for one job's
# checkout + complete, counted by valgrind's callgrind in a single-user backend (`postgres
# --single`) that runs the job's two statements as prepared statements, each in its own
# transaction, as a worker does. The count for 400 jobs minus the count for 200, over 200:
# per job, without start-up, planning or the first call's compilation. Repeatable to a fraction
# of a percent whatever else the machine does, where jobs/s here moves by 10-20 % between runs.
# No network, no pgbench, no flush waits: what the server's CPU does per job, which is what
# bounds jobs/s once both cores are busy (16 and 64 clients; docs/performance.md).
#
#   bench/instructions.sh [--rows "baseline jobq jobq_tenant jobq_any jobq_ckey jobq_fair jobq_sql statements layout
#                                  jobq_worker jobq_sql_worker jobq_sql_bound jobq_enqueue jobq_sql_enqueue"]
#   bench/instructions.sh --check   CI: rows baseline and jobq only; fails when jobq/baseline is more than
#                                   10 % above bench/results/instructions-reference, a CPU regression of
#                                   the hot path that jobs/s here (10-20 % noise) could not show. Writes
#                                   only target/instructions-check.md. A full run re-records the reference.
#
# Rows:
#   baseline       the hand-written queue's UPDATE ... SKIP LOCKED and DELETE
#   jobq           jobq_checkout(worker, ARRAY['bench']) and jobq_complete(id, worker)
#   jobq_tenant    the same two calls by a role limited to queue 'bench' (jobq_grant_queues,
#                  docs/tenants.md) with a worker of its own: the fast paths' check of its grants
#   jobq_any       the same with jobq_checkout(worker, NULL): a worker of every queue (ready_any)
#   jobq_ckey      the same for jobs with a concurrency key (100 keys of limit 5, queue 'keyed'):
#                  the keyed claim and the slot's release
#   jobq_fair      the same for jobs with a fairness key (100 keys), in a database of its own
#                  (bench_fair): the claim in the keys' turns (src/fairness.rs), each key moved to
#                  the back of the turns
#   jobq_sql       jobq's SQL edition (docs/sql-edition.md), the same two calls, in a database of
#                  its own (bench_sql) where a role that is no superuser installed it
#   statements     the job's two steps as plain statements, issued directly, as the SQL does them
#                  (jobq._checkout's first statement, jobq._complete's DELETE and INSERT, with the
#                  worker test, floor read and counters): what the common checkout and completion
#                  cost before they moved to Rust (src/checkout.rs, src/complete.rs)
#   layout         the layout's own writes and nothing else: the ready row deleted and the job row
#                  claimed in one statement, the job row moved to the history in another
#   jobq_worker, jobq_sql_worker
#                  the workers' protocol instead (clients/*): one call and one transaction a job,
#                  jobq_complete_and_checkout(worker, ARRAY[the job in hand], NULL, ARRAY['bench']),
#                  by the extension (database bench) and by the SQL edition (bench_sql)
#   jobq_sql_bound row jobq_sql_worker with its worker bound to the backend's session, as the client
#                  libraries bind theirs: its row names the backend's pid and a start, which the
#                  session's setting jobq.session_start names too, as the SQL edition keeps it after a
#                  session's first call (a single-user backend has no entry in pg_stat_activity)
#   jobq_enqueue, jobq_sql_enqueue
#                  an enqueue instead: jobq_enqueue('enq') of one job without keys, one transaction
#                  per job, by the extension (database bench) and by the SQL edition (bench_sql)
# A second table splits each row's count by what PostgreSQL spends it on (inclusive counts of a few
# of its functions, from callgrind's profiles): the rows' own work (heap and index access, commit,
# WAL) against the machinery that runs statements (plan cache, executor start-up and end, locks).
# The profiles stay in target/instr-profiles (ROW.N.out, for callgrind_annotate).
# Output: bench/results/instructions.md. Needs valgrind (Debian's package; installed if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="baseline jobq jobq_tenant jobq_any jobq_ckey jobq_fair jobq_sql statements layout jobq_worker jobq_sql_worker jobq_sql_bound jobq_enqueue jobq_sql_enqueue"; CHECK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS=$2; shift 2 ;;
    --check) CHECK=1; ROWS="baseline jobq"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || apt-get install -y -qq valgrind >/dev/null
export BENCH_DATA=$PWD/target/instr-data BENCH_PORT=5489
. bench/lib.sh
. bench/systems/jobq.sh
. bench/systems/baseline.sh
SNAP=$PWD/target/instr-snap WORK=$PWD/target/instr-work PROF=$PWD/target/instr-profiles
rm -rf "$PROF"; install -d -o postgres -g postgres "$PROF"
OUT=bench/results/instructions.md; [ $CHECK = 1 ] && OUT=target/instructions-check.md
W=00000000-0000-0000-0000-0000000000b0   # the one worker of the measured jobs
WT=00000000-0000-0000-0000-0000000000b1  # row jobq_tenant's, owned by its limited role
# The worker $W, alive for a day, in a database of a row of its own (bench_sql, bench_fair).
WORKER_W="INSERT INTO jobq.workers (id, owner, name, metadata, registered_at, heartbeat_at)
  SELECT '$W', 'postgres'::regrole, 'bench-0', '{}', now(), now() + interval '1 day';"

# The cluster: jobq and the baseline side by side with 2,000 ready jobs each (jobq's ids 1 to
# 2,000), and 2,000 jobs with a concurrency key in jobq's queue 'keyed' (ids 2,001 to 4,000); one
# worker with the id $W, alive for a day. Then stopped and kept as the snapshot every run starts from.
start_cluster on
jobq_reset 2000
baseline_reset 2000
"${PSQL[@]}" -d bench -c "SELECT count(jobq_enqueue('keyed', concurrency_key => 'k' || (g % 100), concurrency_limit => 5)) FROM generate_series(1, 2000) g" >/dev/null
"${PSQL[@]}" -d bench -c "UPDATE jobq.workers SET id = '$W' WHERE name = 'bench-0'"
# The SQL edition in database bench_sql, its worker $W and 2,000 ready jobs (ids 1 to 2,000).
if [[ " $ROWS " == *" jobq_sql "* || " $ROWS " == *" jobq_sql_worker "* || " $ROWS " == *" jobq_sql_bound "* || " $ROWS " == *" jobq_sql_enqueue "* ]]; then
  sqlfile=$(python3 scripts/build-sql-edition.py)
  "${PSQL[@]}" -d postgres -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'bench_installer') THEN CREATE ROLE bench_installer LOGIN CREATEROLE; END IF; END \$\$" -c "CREATE DATABASE bench_sql OWNER bench_installer" >/dev/null
  psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U bench_installer -d bench_sql -f "$sqlfile" >/dev/null
  "${PSQL[@]}" -d bench_sql >/dev/null <<SQL
SELECT count(*) FROM jobq_enqueue_batch('bench', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 2000)));
$WORKER_W
VACUUM ANALYZE;
SQL
fi
# Jobs with a fairness key in a database of their own (bench_fair: where a queue takes turns, a
# checkout of another queue looks whether it is one), 2,000 in queue 'bench' (ids 1 to 2,000); job
# g's key is g % 100, the keys' turns in the order of their first jobs, so that the claims take the
# ids in order; the worker $W.
if [[ " $ROWS " == *" jobq_fair "* ]]; then
  "${PSQL[@]}" -d postgres -c "CREATE DATABASE bench_fair" >/dev/null
  "${PSQL[@]}" -d bench_fair >/dev/null <<SQL
CREATE EXTENSION jobq;
SELECT count(jobq_enqueue('bench', fairness_key => 'k' || (g % 100))) FROM generate_series(1, 2000) g;
$WORKER_W
VACUUM ANALYZE;
SQL
fi
as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
rm -rf "$SNAP"; cp -a "$DATA" "$SNAP"

# The prepared statements of a row, then N jobs' EXECUTEs (the row's ids are claimed in order).
# complete's fence (the job executing under this worker), and its move to the history (rows
# statements and layout).
FENCE="x.id = \$1 AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = '$W'"
HISTORY="INSERT INTO jobq.finished_jobs SELECT id, queue, kind, payload, priority, run_at, enqueued_at, 'completed', attempt, max_attempts, unique_key, unique_strategy, concurrency_key, concurrency_limit, worker_id, started_at, clock_timestamp(), interrupted_at, cancel_requested_at, concurrency_slot, last_error, NULL, rate_key, errors, depends_on, checkpoints FROM d"
script() {
  local row=$1 n=$2
  case $row in
    baseline)
      echo "PREPARE ck AS UPDATE baseline_jobs SET state = 'running', attempts = attempts + 1 WHERE id = (SELECT id FROM baseline_jobs WHERE state = 'ready' AND queue = 'bench' AND run_at <= now() ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id;"
      echo "PREPARE cm(bigint) AS DELETE FROM baseline_jobs WHERE id = \$1;" ;;
    jobq|jobq_any|jobq_ckey|jobq_fair|jobq_sql)
      echo "PREPARE ck AS SELECT j.id FROM jobq_checkout('$W', $(queues "$row")) j;"
      echo "PREPARE cm(bigint) AS SELECT jobq_complete(\$1, '$W');" ;;
    jobq_tenant)
      # Made here, not in the snapshot, so that the other rows run where no grant exists.
      echo "CREATE ROLE bench_tenant; GRANT jobq_worker TO bench_tenant;"
      echo "SELECT jobq_grant_queues('bench_tenant', 'worker', ARRAY['bench']);"
      echo "INSERT INTO jobq.workers (id, owner, name, metadata, registered_at, heartbeat_at) VALUES ('$WT', 'bench_tenant'::regrole, 'tenant', '{}', now(), now() + interval '1 day');"
      echo "SET ROLE bench_tenant;"
      echo "PREPARE ck AS SELECT j.id FROM jobq_checkout('$WT', ARRAY['bench']) j;"
      echo "PREPARE cm(bigint) AS SELECT jobq_complete(\$1, '$WT');" ;;
    statements)
      # jobq_checkout's fast path and jobq_complete's statements for a job without keys, as
      # src/sql/checkout.sql and src/sql/finish.sql have them (the floor read in the statement).
      echo "PREPARE ck AS WITH fl AS (SELECT * FROM jobq._floor('jobq.ready'::regclass, 'bench')), cand AS (SELECT r.ctid AS rid, r.id, r.keyed FROM jobq.ready r, fl WHERE (SELECT jobq._usable_worker('$W')) AND r.queue_hash = hashtext('bench') AND r.queue = 'bench' AND r.fairness_key IS NULL AND r.run_at <= clock_timestamp() AND (r.priority, r.run_at, r.id) >= (fl.priority, fl.run_at, fl.id) AND (NOT EXISTS (SELECT 1 FROM jobq.pauses) OR NOT EXISTS (SELECT 1 FROM jobq.pauses p WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind)) OR (p.queue IS NULL AND p.kind = r.kind))) ORDER BY r.priority, r.run_at, r.id LIMIT 1 FOR UPDATE OF r SKIP LOCKED), keys AS (SELECT cand.rid, cand.id, CASE WHEN cand.keyed THEN jobq._take_keys(cand.id, cand.rid, clock_timestamp()) END AS slot FROM cand), taken AS (DELETE FROM jobq.ready r WHERE r.ctid = ANY (ARRAY(SELECT keys.rid FROM keys WHERE keys.slot IS NULL)) RETURNING r.id), claimed AS (UPDATE jobq.live_jobs j SET state = 'executing', worker_id = '$W', attempt = j.attempt + 1, started_at = clock_timestamp(), concurrency_slot = (SELECT nullif(keys.slot, 0) FROM keys WHERE keys.id = j.id) WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken UNION ALL SELECT keys.id FROM keys WHERE keys.slot >= 0)) AND j.state = 'ready' RETURNING j.*, jobq._tally(j.queue, 'started', j.run_at, clock_timestamp()) AS counted) SELECT j.id FROM claimed j ORDER BY j.priority, j.run_at, j.id;"
      echo "PREPARE cm(bigint) AS WITH d AS (DELETE FROM jobq.live_jobs x WHERE $FENCE AND EXISTS (SELECT 1 FROM jobq.workers w WHERE w.id = '$W' AND jobq._may_act_for(w.owner)) RETURNING x.*, jobq._tally(x.queue, 'completed', x.started_at, clock_timestamp()) AS counted) $HISTORY WHERE jobq.retention_ms() > 0;" ;;
    layout)
      echo "PREPARE ck AS WITH cand AS (SELECT r.ctid AS rid FROM jobq.ready r WHERE r.queue_hash = hashtext('bench') AND r.queue = 'bench' AND r.fairness_key IS NULL AND r.run_at <= clock_timestamp() ORDER BY r.priority, r.run_at, r.id LIMIT 1 FOR UPDATE OF r SKIP LOCKED), taken AS (DELETE FROM jobq.ready r WHERE r.ctid = ANY (ARRAY(SELECT cand.rid FROM cand)) RETURNING r.id) UPDATE jobq.live_jobs j SET state = 'executing', worker_id = '$W', attempt = j.attempt + 1, started_at = clock_timestamp() WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken)) AND j.state = 'ready' RETURNING j.id;"
      echo "PREPARE cm(bigint) AS WITH d AS (DELETE FROM jobq.live_jobs x WHERE $FENCE RETURNING x.*) $HISTORY;" ;;
    jobq_worker|jobq_sql_worker|jobq_sql_bound)
      if [ "$row" = jobq_sql_bound ]; then
        echo "UPDATE jobq.workers SET backend_pid = pg_backend_pid(), backend_start = '2026-01-01 00:00:00+00' WHERE id = '$W';"
        echo "SET jobq.session_start = '$(date -u -d '2026-01-01 00:00:00' +%s)000000';"
      fi
      # The first call has no job in hand; each after completes the job the one before took.
      echo "PREPARE wk(bigint[]) AS SELECT j.id FROM jobq_complete_and_checkout('$W', \$1, NULL, ARRAY['bench']) j;"
      echo "EXECUTE wk('{}');"
      for k in $(seq 1 "$n"); do echo "EXECUTE wk('{$k}');"; done
      return ;;
    jobq_enqueue|jobq_sql_enqueue)
      echo "PREPARE en AS SELECT jobq_enqueue('enq');"
      for _ in $(seq 1 "$n"); do echo "EXECUTE en;"; done
      return ;;
    *) echo "instructions.sh: unknown row $row" >&2; exit 2 ;;
  esac
  for k in $(seq $(($(first "$row") + 1)) $(($(first "$row") + n))); do echo "EXECUTE ck;"; echo "EXECUTE cm($k);"; done
}
# The queues a row's checkout names (jobq_any: every queue, whose first jobs in claim order are
# those of 'bench', enqueued first).
queues() { case $1 in jobq_ckey) echo "ARRAY['keyed']" ;; jobq_any) echo "NULL" ;; *) echo "ARRAY['bench']" ;; esac; }
first() { if [ "$1" = jobq_ckey ]; then echo 2000; else echo 0; fi; }  # the id before the row's first job

# count ROW N: instructions of a single-user backend that runs N jobs of ROW from the snapshot.
# Fails unless every job was claimed and completed.
count() {
  local row=$1 n=$2
  rm -rf "$WORK"; cp -a "$SNAP" "$WORK"
  script "$row" "$n" > "$WORK.in"; chmod 644 "$WORK.in"
  local db=bench
  case $row in jobq_sql|jobq_sql_worker|jobq_sql_bound|jobq_sql_enqueue) db=bench_sql ;; jobq_fair) db=bench_fair ;; esac
  as_pg valgrind --tool=callgrind --callgrind-out-file="$PROF/$row.$n.out" "$PGBIN/postgres" --single -D "$WORK" "$db" \
    < "$WORK.in" > "$WORK.out" 2> "$WORK.err"
  if grep -q 'ERROR' "$WORK.out"; then grep -m3 ERROR "$WORK.out" >&2; exit 1; fi
  # The backend's own check: every job's rows moved as they should.
  local done="(SELECT count(*) FROM jobq.finished_jobs WHERE id > $(first "$row") AND id <= $(first "$row") + $n AND state = 'completed') = $n"
  [ "$row" = baseline ] && done="(SELECT count(*) FROM baseline_jobs WHERE id <= $n) = 0"
  [[ $row == *_enqueue ]] && done="(SELECT count(*) FROM jobq.live_jobs WHERE queue = 'enq' AND state = 'ready') = $n"
  as_pg "$PGBIN/postgres" --single -D "$WORK" "$db" > "$WORK.check" 2>&1 <<SQL
SELECT $done AS all_done
SQL
  grep -q 'all_done = "t"' "$WORK.check" || { echo "instructions.sh: row $row did not complete its $n jobs" >&2; cat "$WORK.check" >&2; exit 1; }
  grep -o 'Collected : [0-9]*' "$WORK.err" | awk '{print $3}'
}

{
  echo "# Instructions per job: checkout + complete, and enqueue"
  echo
  echo "\`bench/instructions.sh\`, $(date -u +%Y-%m-%d), $(machine), $(jobq_version). callgrind's instruction count of a single-user backend running 400 jobs minus the count for 200, over 200; two transactions per job (one in the rows of the workers' protocol and of the enqueue); statements prepared once."
  echo
  echo "| row | instructions / job | / baseline |"
  echo "| --- | ---: | ---: |"
} > "$OUT"
base=""
for row in $ROWS; do
  a=$(count "$row" 200); b=$(count "$row" 400)
  per=$(( (b - a) / 200 ))
  [ "$row" = baseline ] && base=$per
  [ "$row" = jobq ] && mine=$per
  echo "instructions: $row $per per job" >&2
  # (An enqueue is not compared with the baseline's checkout and completion.)
  echo "| $row | $per | $( [ -n "$base" ] && [[ $row != *_enqueue ]] && ratio "$per" "$base" || echo -) |" >> "$OUT"
done
rm -rf "$WORK" "$SNAP" "$WORK".*
[ $CHECK = 1 ] || python3 - "$PROF" $ROWS >> "$OUT" <<'PY'
# Per job (400-job profile minus 200-job profile, over 200), inclusive instructions of:
import re, subprocess, sys
parts = [
    ("heap: delete, update, insert, lock", ["heap_delete", "heap_update", "heap_insert", "heap_lock_tuple"]),
    ("index scans", ["index_getnext_slot"]),
    ("index entries inserted", ["ExecInsertIndexTuples"]),
    ("commit", ["CommitTransactionCommand"]),
    ("plan cache (revalidation, locks)", ["GetCachedPlan"]),
    ("executor start-up", ["ExecutorStart"]),
    ("executor end", ["ExecutorEnd"]),
]
def load(path):
    out = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=yes", path], capture_output=True, text=True).stdout
    d = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S*?:([A-Za-z_]\w*)(?:'\d+)?\s", line)
        if m and m.group(2) not in d:  # the outermost (first, largest) entry of a recursive function
            d[m.group(2)] = int(m.group(1).replace(",", ""))
    return d
prof, rows = sys.argv[1], sys.argv[2:]
per = {}
for r in rows:
    a, b = load(f"{prof}/{r}.200.out"), load(f"{prof}/{r}.400.out")
    per[r] = {k: (b.get(k, 0) - a.get(k, 0)) / 200 for k in set(a) | set(b)}
print()
print("Where the instructions go, per job (inclusive counts of PostgreSQL's functions; the rows overlap where one calls another):")
print()
print("| part | " + " | ".join(rows) + " |")
print("| --- |" + " ---: |" * len(rows))
for name, fns in parts:
    print(f"| {name} | " + " | ".join(f"{sum(per[r].get(f, 0) for f in fns):,.0f}" for r in rows) + " |")
PY
cat "$OUT"
if [ -n "$base" ] && [ -n "${mine:-}" ]; then
  R=$(ratio "$mine" "$base")
  if [ $CHECK = 1 ]; then
    REF=$(cat bench/results/instructions-reference)
    echo "instructions --check: jobq/baseline = $R instructions per job (reference $REF, failing above 1.1x it)"
    awk -v r="$R" -v ref="$REF" 'BEGIN { exit !(r <= ref * 1.1) }' || { echo "instructions --check: the hot path costs more than 10 % more CPU per job" >&2; exit 1; }
  else
    echo "$R" > bench/results/instructions-reference
  fi
fi
