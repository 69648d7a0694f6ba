# Procrastinate (PyPI) as a peer row of the benchmark. Source after bench/lib.sh, from the repo root.
# Its schema lives in `public` as procrastinate_* tables, types and functions. Scripts:
# bench/scripts/procrastinate_{checkout_complete,enqueue,enqueue_batch,mixed}.sql, all on queue and
# task name 'bench'. pgbench client c acts as worker id c+1 (registered by procrastinate_reset).
PROCRASTINATE_VERSION=3.10.0  # latest on PyPI; needs Python >= 3.10, its schema runs on PostgreSQL 15
PROCRASTINATE_DIR=target/bench-peers/procrastinate

# Into target/, never into the repo; skipped when this version is already there.
procrastinate_install() {
  [ -d "$PROCRASTINATE_DIR/procrastinate-$PROCRASTINATE_VERSION.dist-info" ] && return
  rm -rf "$PROCRASTINATE_DIR"
  "$PY" -m pip install -q --disable-pip-version-check --no-warn-conflicts --root-user-action=ignore \
    --target "$PROCRASTINATE_DIR" "procrastinate==$PROCRASTINATE_VERSION" >&2
}
procrastinate_cli() { PYTHONPATH="$PROCRASTINATE_DIR" "$PY" -m procrastinate "$@"; }   # .venv's Python (bench/lib.sh)
procrastinate_version() { procrastinate_cli --version | awk '{print "procrastinate", $3}'; }

# procrastinate_reset BACKLOG: a fresh schema from the package (`procrastinate schema --read` prints
# the packaged sql/schema.sql, which is what `schema --apply` runs), 256 registered workers, and
# BACKLOG ready jobs deferred through procrastinate_defer_jobs_v1, its batch defer function, in
# transactions of 100000: the per-row insert triggers (event row, two pg_notify) still fire.
procrastinate_reset() {
  "${PSQL[@]}" -d bench >/dev/null <<'SQL'
SET client_min_messages = warning;
DROP TABLE IF EXISTS procrastinate_events, procrastinate_periodic_defers, procrastinate_jobs, procrastinate_workers CASCADE;
DO $$ DECLARE f regprocedure; BEGIN
  FOR f IN SELECT oid FROM pg_proc WHERE pronamespace = 'public'::regnamespace AND proname LIKE 'procrastinate\_%' LOOP
    EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', f);
  END LOOP;
END $$;
DROP TYPE IF EXISTS procrastinate_job_to_defer_v1, procrastinate_job_event_type, procrastinate_job_status CASCADE;
SQL
  procrastinate_cli schema --read | PGOPTIONS="-c client_min_messages=warning" "${PSQL[@]}" -d bench >/dev/null
  # The worker's own registration call; on a fresh identity the ids are 1..256, which the scripts use.
  [ "$("${PSQL[@]}" -d bench -c "SELECT min(w) || '-' || max(w) FROM (SELECT procrastinate_register_worker_v1() w FROM generate_series(1, 256)) r")" = 1-256 ] \
    || { echo "procrastinate_reset: unexpected worker ids" >&2; return 1; }
  "${PSQL[@]}" -d bench >/dev/null <<SQL
DO \$\$ BEGIN
  FOR c IN 0 .. ($1 - 1) / 100000 LOOP
    PERFORM procrastinate_defer_jobs_v1(ARRAY(
      SELECT ROW('bench', 'bench', 0, NULL, NULL, '{}', NULL)::procrastinate_job_to_defer_v1
      FROM generate_series(1, least(100000, $1 - c * 100000))));
    COMMIT;
  END LOOP;
END \$\$;
VACUUM ANALYZE procrastinate_jobs, procrastinate_events, procrastinate_workers;
SQL
}
