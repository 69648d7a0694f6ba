#!/usr/bin/env bash
# jobq against a hand-written SKIP LOCKED queue, Procrastinate and Graphile Worker, on one throwaway
# PostgreSQL 15 cluster on loopback. Every system is driven at the SQL level by pgbench custom
# scripts (bench/scripts/<system>_*.sql), so the client cost is identical; the peers are installed
# from PyPI / npm into target/bench-peers (bench/systems/*.sh), never vendored.
#
#   bench/compare.sh [--workloads a,b,c,d,e,f] [--systems "jobq jobq_r0 jobq_im baseline pgboss procrastinate graphile"]
#                    [--runs N] [--seconds N] [--steady-seconds N] [--big-backlog N] [--async]
#   STEADY_SYSTEMS="jobq baseline" bench/compare.sh ...   workload c for these systems only
#   Other systems of bench/systems/: jobq_sql (the SQL edition), jobq_w and jobq_sql_w (each
#   edition as jobq's workers run it, one call a job: workload a only), jobq_ckey, jobq_fair.
#   bench/compare.sh --quick      CI: jobq vs baseline only, a regression check (below)
#
# Workloads (jobs/s are medians over --runs runs of --seconds each, each run on a fresh backlog
# and from a checkpoint):
#   a  checkout+complete (two transactions per job) with a pre-filled backlog, 1/4/16/64 clients
#   b  enqueue: one job per transaction (1, 4, 16 and 64 clients), 100 per transaction (4 clients)
#   c  steady state: enqueue+checkout+complete (three transactions), 16 clients, --steady-seconds
#      (default 600); throughput of the first and the last minute, dead tuples, autovacuum runs
#   d  backlog: the same mixed workload (so the backlog stays put) at 16 clients over 10k, 1M and
#      --big-backlog (default 10M) ready jobs, one fill and --runs runs per size
#   e  enqueue-to-checkout latency, p50/p99, a worker waiting with LISTEN (bench/latency.py)
#   f  jobq with keys: enqueue with a unique key, and with one of 1,000 fairness keys, vs plain,
#      checkout+complete of jobs with
#      concurrency keys (100 keys, limit 5), with while_executing keys (100 keys) and with rate keys (100 keys, limits of
#      1,000 starts/s that 16 clients do not reach) vs plain, 16 clients (jobq only: the
#      others' keys are other features)
# Output: bench/results/compare.md (one section per workload, from bench/results/parts/), the
# chart bench/results/throughput.png (workload a), bench/results/reference-ratio (a, 16 clients).
#
# --quick (a minute or two, what .ci/run runs): workload a at 16 clients for jobq and the baseline,
# 3 runs of 5 s; fails if jobq/baseline falls below half of bench/results/reference-ratio, i.e. a
# hot-path regression of more than 2x. Writes only target/bench-quick.md.
set -euo pipefail
cd "$(dirname "$0")/.."
WORKLOADS=a,b,c,d,e,f; SYSTEMS="jobq jobq_r0 jobq_im baseline pgboss procrastinate graphile"; RUNS=3; SECS=10
STEADY=600; BIG=10000000; SYNC=on; QUICK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --workloads) WORKLOADS=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --steady-seconds) STEADY=$2; shift 2 ;;
    --big-backlog) BIG=$2; shift 2 ;;
    --async) SYNC=off; shift ;;
    --quick) QUICK=1; WORKLOADS=a; SYSTEMS="jobq baseline"; RUNS=3; SECS=5; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
BIG_SYSTEMS=${BIG_SYSTEMS:-jobq baseline}  # systems filled to --big-backlog in workload d
STEADY_SYSTEMS=${STEADY_SYSTEMS:-$SYSTEMS}  # systems run for --steady-seconds each in workload c
ARGS="--workloads $WORKLOADS --systems \"$SYSTEMS\" --runs $RUNS --seconds $SECS"
has_() { [[ ",$WORKLOADS," == *",$1,"* ]]; }
has_ c && ARGS="$ARGS --steady-seconds $STEADY" && [ "$STEADY_SYSTEMS" != "$SYSTEMS" ] && ENVP="STEADY_SYSTEMS=\"$STEADY_SYSTEMS\" "
has_ d && ARGS="$ARGS --big-backlog $BIG"
[ $SYNC = off ] && ARGS="$ARGS --async"
. bench/lib.sh
[ -x "$PY" ] || ./scripts/setup.sh >/dev/null   # .venv/, the Python of bench/lib.sh
for s in $SYSTEMS; do . "bench/systems/$s.sh"; "${s}_install"; done
# Python for the latency probe and the chart, into target/, skipped when there.
if [ $QUICK = 0 ] && ! PYTHONPATH=target/bench-py "$PY" -c "import psycopg, matplotlib" 2>/dev/null; then
  "$PY" -m pip install -q --disable-pip-version-check --target target/bench-py "psycopg[binary]==3.3.9" "matplotlib==3.10.7" >&2
fi
start_cluster "$SYNC"
has() { [[ ",$WORKLOADS," == *",$1,"* ]]; }
PARTS=bench/results/parts; [ $QUICK = 1 ] && PARTS=target/bench-quick-parts
mkdir -p "$PARTS"
log() { echo "compare: $*" >&2; }
VERSIONS=$(for s in $SYSTEMS; do "${s}_version"; done | paste -sd ';' | sed 's/;/; /g')
SETTINGS=$("${PSQL[@]}" -d bench -c "SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name) FROM pg_settings WHERE name IN ('synchronous_commit', 'shared_buffers', 'max_connections', 'fsync', 'wal_level', 'max_wal_size', 'checkpoint_timeout', 'autovacuum', 'autovacuum_naptime', 'jobq.retention', 'jobq.reap_interval')")
header() { echo "\`${ENVP:-}bench/compare.sh $ARGS\`, $(date -u +%Y-%m-%d), $(machine), pgbench -M prepared on the same machine. $VERSIONS."; echo; }

# run SYSTEM SCRIPT CLIENTS SECONDS -> tps (pgbench transactions = script iterations per second),
# with the system's own pgbench arguments where it has some (SYSTEM_PGBENCH, bench/systems/).
# Each run starts from a checkpoint: the WAL of the backlog a reset wrote would otherwise start one
# during some runs and not others, writing its buffers under one system's run.
run() {
  "${PSQL[@]}" -d bench -c CHECKPOINT >/dev/null
  local v opts="${1}_PGOPTIONS" extra="${1}_PGBENCH"
  # shellcheck disable=SC2086  # (the arguments are words: -D name=value)
  v=$(PGOPTIONS="${!opts:-}" tps "$2" "$3" "$4" ${!extra:-})
  [ -n "$v" ] || { echo "compare: pgbench failed: $1 $2 with $3 clients" >&2; exit 1; }
  echo "$v"
}

# --- a: checkout+complete vs clients ---------------------------------------------------------
if has a; then
  CLIENTS="1 4 16 64"; [ $QUICK = 1 ] && CLIENTS=16
  {
    echo "## a. checkout+complete, backlog of 100,000 ready jobs"; echo; header
    printf '| clients |'; for s in $SYSTEMS; do printf ' %s |' "$s"; done
    for s in $SYSTEMS; do [ $s != baseline ] && printf ' %s / baseline |' "$s"; done; echo
    printf '| ---: |'; for s in $SYSTEMS; do printf ' ---: |'; [ $s != baseline ] && printf ' ---: |'; done; echo
  } > "$PARTS/a.md"
  echo "clients,$(echo $SYSTEMS | tr ' ' ,)" > "$PARTS/a.csv"
  for c in $CLIENTS; do
    declare -A v=()
    for _ in $(seq "$RUNS"); do    # systems interleaved, so drift hits all alike
      for s in $SYSTEMS; do "${s}_reset" 100000; v[$s]="${v[$s]:-} $(run $s ${s}_checkout_complete.sql "$c" "$SECS")"; done
    done
    declare -A m=(); for s in $SYSTEMS; do m[$s]=$(echo "${v[$s]}" | median); log "a clients=$c $s:${v[$s]} -> ${m[$s]}"; done
    { printf '| %s |' "$c"; for s in $SYSTEMS; do printf ' %s |' "${m[$s]}"; done
      for s in $SYSTEMS; do [ $s != baseline ] && printf ' %s |' "$(ratio "${m[$s]}" "${m[baseline]:-0}")"; done; echo; } >> "$PARTS/a.md"
    echo "$c,$(for s in $SYSTEMS; do printf '%s,' "${m[$s]}"; done | sed 's/,$//')" >> "$PARTS/a.csv"
    [ "$c" = 16 ] && R16=$(ratio "${m[jobq]}" "${m[baseline]}")
  done
  if [ $QUICK = 1 ]; then
    REF=$(cat bench/results/reference-ratio)
    cat "$PARTS/a.md" > target/bench-quick.md
    echo "compare --quick: jobq/baseline at 16 clients = $R16 (reference $REF, failing below half of it)"
    awk -v r="$R16" -v ref="$REF" 'BEGIN { exit !(r >= ref / 2) }' || { echo "compare --quick: hot-path regression of more than 2x" >&2; exit 1; }
    exit 0
  fi
  [ -n "${R16:-}" ] && echo "$R16" > bench/results/reference-ratio
  PYTHONPATH=target/bench-py "$PY" bench/chart.py "$PARTS/a.csv" bench/results/throughput.png || log "chart not drawn"
fi

# --- b: enqueue -----------------------------------------------------------------------------
if has b; then
  { echo "## b. enqueue"; echo; header
    echo "| system | single, 1 client | single, 4 clients | single, 16 clients | single, 64 clients | batch of 100, 4 clients | single 16 / baseline | batch / baseline |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"; } > "$PARTS/b.md"
  # Cells: one job per transaction at 1, 4, 16 and 64 clients; batch: 100 per call, 4 clients.
  CELLS="1 4 16 64 batch"
  declare -A B=() M=()
  for _ in $(seq "$RUNS"); do
    for s in $SYSTEMS; do
      for c in $CELLS; do
        "${s}_reset" 0
        if [ "$c" = batch ]; then v=$(( $(run $s ${s}_enqueue_batch.sql 4 "$SECS") * 100 )); else v=$(run $s ${s}_enqueue.sql "$c" "$SECS"); fi
        B[$s,$c]="${B[$s,$c]:-} $v"
      done
    done
  done
  for s in $SYSTEMS; do
    said=""
    for c in $CELLS; do M[$s,$c]=$(echo "${B[$s,$c]}" | median); said="$said $c:${B[$s,$c]}"; done
    log "b $s$said"
  done
  for s in $SYSTEMS; do
    row="| $s |"
    for c in $CELLS; do row="$row ${M[$s,$c]} |"; done
    echo "$row $(ratio "${M[$s,16]}" "${M[baseline,16]:-0}") | $(ratio "${M[$s,batch]}" "${M[baseline,batch]:-0}") |" >> "$PARTS/b.md"
  done
  if [[ " $SYSTEMS " == *" baseline "* ]]; then
    # The baseline's enqueue plus the NOTIFY a LISTENing worker needs, as jobq and both peers send
    # per enqueue: PostgreSQL serialises the commits of notifying transactions (a database-wide
    # lock from pre-commit to the end of commit), so this shows what that alone costs.
    n1=""; n16=""
    for _ in $(seq "$RUNS"); do
      baseline_reset 0; n1="$n1 $(run baseline baseline_enqueue_notify.sql 1 "$SECS")"
      baseline_reset 0; n16="$n16 $(run baseline baseline_enqueue_notify.sql 16 "$SECS")"
    done
    n1=$(echo "$n1" | median); n16=$(echo "$n16" | median); log "b baseline+NOTIFY single1=$n1 single16=$n16"
    echo "| baseline + NOTIFY | $n1 | - | $n16 | - | - | $(ratio "$n16" "${M[baseline,16]}") | - |" >> "$PARTS/b.md"
  fi
fi

# --- c: steady state --------------------------------------------------------------------------
# main table of each system, for dead tuples and autovacuum runs
table_of() { case $1 in jobq|jobq_r0|jobq_im) echo jobq.live_jobs ;; pgboss) echo pgboss.job_common ;; baseline) echo public.baseline_jobs ;; procrastinate) echo public.procrastinate_jobs ;; graphile) echo graphile_worker._private_jobs ;; esac; }
if has c; then
  { echo "## c. steady state: enqueue+checkout+complete, 16 clients, ${STEADY}s"; echo; header
    echo "Backlog of 10,000 ready jobs at the start; each iteration enqueues one job and works one, so it stays put. Jobs/s per minute from \`pgbench -P 60\`."
    echo
    echo "| system | first minute | last minute | last / first | whole run | dead tuples at the end | autovacuum runs |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"; } > "$PARTS/c.md"
  for s in $STEADY_SYSTEMS; do
    "${s}_reset" 10000
    t=$(table_of $s)
    out=$(pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -M prepared -c 16 -j 16 -T "$STEADY" -P 60 -f "bench/scripts/${s}_mixed.sql" bench 2>&1)
    first=$(echo "$out" | awk '/^progress: /{print int($4); exit}')
    last=$(echo "$out" | awk '/^progress: /{v=int($4)} END{print v}')
    whole=$(echo "$out" | awk '/^tps = /{print int($3)}')
    st=$("${PSQL[@]}" -d bench -c "SELECT n_dead_tup || ' ' || autovacuum_count FROM pg_stat_user_tables WHERE relid = '$t'::regclass")
    log "c $s first=$first last=$last whole=$whole dead/autovacuum=$st"
    echo "| $s | $first | $last | $(ratio "$last" "$first") | $whole | ${st% *} | ${st#* } |" >> "$PARTS/c.md"
  done
fi

# --- d: backlog size ----------------------------------------------------------------------------
if has d; then
  { echo "## d. backlog size: enqueue+checkout+complete, 16 clients"; echo; header
    echo "The mixed workload keeps the backlog at its size. Median of $RUNS runs of ${SECS}s on one fill. The largest backlog is filled for $BIG_SYSTEMS only (\`BIG_SYSTEMS\` to change; Procrastinate's own batch defer takes ~8 min for 10M)."
    echo
    echo "| system | 10,000 | 1,000,000 | $(echo "$BIG" | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta') | largest / 10,000 |"
    echo "| --- | ---: | ---: | ---: | ---: |"; } > "$PARTS/d.md"
  for s in $SYSTEMS; do
    declare -A dm=()
    dm[$BIG]="-"
    for n in 10000 1000000 "$BIG"; do
      [ "$n" = "$BIG" ] && [[ " $BIG_SYSTEMS " != *" $s "* ]] && continue
      start=$(date +%s); "${s}_reset" "$n"; log "d $s fill $n: $(( $(date +%s) - start ))s"
      vals=""; for _ in $(seq "$RUNS"); do vals="$vals $(run $s ${s}_mixed.sql 16 "$SECS")"; done
      dm[$n]=$(echo "$vals" | median); log "d $s backlog=$n:$vals -> ${dm[$n]}"
    done
    echo "| $s | ${dm[10000]} | ${dm[1000000]} | ${dm[$BIG]} | $(ratio "${dm[$BIG]}" "${dm[10000]}") |" >> "$PARTS/d.md"
  done
fi

# --- e: latency with LISTEN -------------------------------------------------------------------------
if has e; then
  { echo "## e. enqueue-to-checkout latency, a worker waiting with LISTEN"; echo; header
    echo "One job at a time, 10-50 ms apart, 300 samples (bench/latency.py); fallback polls counts the worker's 1 s polling fallback firing (0: every job came by notification)."
    echo
    echo "| system | p50 ms | p99 ms | max ms | fallback polls |"
    echo "| --- | ---: | ---: | ---: | ---: |"; } > "$PARTS/e.md"
  for s in $SYSTEMS; do
    # pg-boss sends no NOTIFY with its default queue options (its workers poll).
    [ "$s" = pgboss ] && { echo "| $s | - | - | - | (no NOTIFY: its workers poll) |" >> "$PARTS/e.md"; continue; }
    "${s}_reset" 0
    opts="${s}_PGOPTIONS"
    read -r p50 p99 mx polls < <(PGOPTIONS="${!opts:-}" PYTHONPATH=target/bench-py "$PY" bench/latency.py "$s" "$PORT" 300)
    log "e $s p50=$p50 p99=$p99 max=$mx polls=$polls"
    echo "| $s | $p50 | $p99 | $mx | $polls |" >> "$PARTS/e.md"
  done
fi

# --- f: jobq with keys ---------------------------------------------------------------------------------
if has f && [[ " $SYSTEMS " == *" jobq "* ]]; then
  { echo "## f. jobq with uniqueness, fairness, concurrency and rate keys, 16 clients"; echo; header
    echo "| enqueue | enqueue, unique key | ratio | enqueue, fairness key | ratio | checkout+complete | checkout+complete, concurrency keys | ratio | checkout+complete, while_executing keys | ratio | checkout+complete, rate keys | ratio |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"; } > "$PARTS/f.md"
  declare -A f=()
  for _ in $(seq "$RUNS"); do
    jobq_reset 0; f[ep]="${f[ep]:-} $(run jobq jobq_enqueue.sql 16 "$SECS")"
    jobq_reset 0; f[eu]="${f[eu]:-} $(run jobq jobq_enqueue_unique.sql 16 "$SECS")"
    jobq_reset 0; f[ef]="${f[ef]:-} $(run jobq jobq_enqueue_fair.sql 16 "$SECS")"
    jobq_reset 100000; f[cp]="${f[cp]:-} $(run jobq jobq_checkout_complete.sql 16 "$SECS")"
    jobq_reset 100000 ckey; f[ck]="${f[ck]:-} $(run jobq jobq_checkout_complete.sql 16 "$SECS")"
    jobq_reset 100000 wkey; f[wk]="${f[wk]:-} $(run jobq jobq_checkout_complete.sql 16 "$SECS")"
    jobq_reset 100000 rkey; f[rk]="${f[rk]:-} $(run jobq jobq_checkout_complete.sql 16 "$SECS")"
  done
  for k in ep eu ef cp ck wk rk; do f[$k]=$(echo "${f[$k]}" | median); done
  log "f ${f[*]}"
  echo "| ${f[ep]} | ${f[eu]} | $(ratio "${f[eu]}" "${f[ep]}") | ${f[ef]} | $(ratio "${f[ef]}" "${f[ep]}") | ${f[cp]} | ${f[ck]} | $(ratio "${f[ck]}" "${f[cp]}") | ${f[wk]} | $(ratio "${f[wk]}" "${f[cp]}") | ${f[rk]} | $(ratio "${f[rk]}" "${f[cp]}") |" >> "$PARTS/f.md"
fi

# --- the results file: every part there is, newest run of each ------------------------------------------
{
  echo "# jobq and its peers: benchmark results"; echo
  echo "Written by \`bench/compare.sh\` (see its header for the workloads). Cluster settings: $SETTINGS."
  echo; echo "![throughput vs clients](throughput.png)"; echo
  for p in a b c d e f; do [ -f "bench/results/parts/$p.md" ] && { cat "bench/results/parts/$p.md"; echo; }; done
} > bench/results/compare.md
cat bench/results/compare.md
