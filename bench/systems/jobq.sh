# jobq as a row of the benchmark. Source after bench/lib.sh, from the repo root. The extension
# (release build) is installed and preloaded by start_cluster. pgbench client c is the worker
# registered in row c of bench_workers. Scripts: bench/scripts/jobq_*.sql.
jobq_install() { :; }
jobq_version() { echo "jobq $(awk -F'"' '/^version/{print $2; exit}' Cargo.toml) ($(git rev-parse --short HEAD 2>/dev/null || echo unknown))"; }

# jobq_reset BACKLOG [plain|ckey|wkey|rkey|fkey]: a fresh extension, 256 workers, BACKLOG ready jobs in queue
# 'bench' through jobq_enqueue_batch in transactions of 1,000,000 (ckey: through jobq_enqueue, each
# job with one of 100 concurrency keys of limit 5; wkey: each with one of 100 while_executing
# unique keys (one job of a key at a time; consecutive jobs have different keys, so 16 clients
# are rarely held back); rkey: each with one of 100 rate keys limited
# to 1,000 starts per second, more than 16 clients reach, so the row measures what rate
# limiting costs a checkout, not the limit's throttling); fkey: BACKLOG / 100 jobs for each of
# 100 fairness keys, one batch a key).
jobq_reset() {
  reset_jobq >/dev/null
  if [ "${2:-plain}" = ckey ]; then
    "${PSQL[@]}" -d bench -c "SELECT count(jobq_enqueue('bench', concurrency_key => 'k' || (g % 100), concurrency_limit => 5)) FROM generate_series(1, $1) g" >/dev/null
  elif [ "${2:-plain}" = wkey ]; then
    "${PSQL[@]}" -d bench -c "SELECT count(jobq_enqueue('bench', unique_key => 'u' || (g % 100), unique_strategy => 'while_executing')) FROM generate_series(1, $1) g" >/dev/null
  elif [ "${2:-plain}" = fkey ]; then
    "${PSQL[@]}" -d bench -c "SELECT count(*) FROM generate_series(0, 99) k, jobq_enqueue_batch('bench', array_fill('{}'::jsonb, ARRAY[$1 / 100]), fairness_key => 'f' || k)" >/dev/null
  elif [ "${2:-plain}" = rkey ]; then
    "${PSQL[@]}" -d bench -c "SELECT count(jobq_set_rate_limit('r' || g, 1000, '1 second')) FROM generate_series(0, 99) g" >/dev/null
    "${PSQL[@]}" -d bench -c "SELECT count(jobq_enqueue('bench', rate_key => 'r' || (g % 100))) FROM generate_series(1, $1) g" >/dev/null
  else
    "${PSQL[@]}" -d bench >/dev/null <<SQL
DO \$\$ BEGIN
  FOR c IN 0 .. ($1 - 1) / 1000000 LOOP
    PERFORM count(*) FROM jobq_enqueue_batch('bench', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, least(1000000, $1 - c * 1000000))));
    COMMIT;
  END LOOP;
END \$\$;
SQL
  fi
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE" >/dev/null
}
