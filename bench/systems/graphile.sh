# Graphile Worker (npm) as a peer row of the benchmark. Source after bench/lib.sh, from the repo root.
# Its schema is `graphile_worker`. Scripts: bench/scripts/graphile_{checkout_complete,enqueue,
# enqueue_batch,mixed}.sql. Jobs are of task identifier 'bench' with no queue_name: a Graphile
# "named queue" runs its jobs one at a time, so the parallel queue 'bench' of the other rows is a
# task identifier here. pgbench client c locks jobs as worker pool 'pool-bench-c'.
GRAPHILE_VERSION=0.18.0  # latest on npm; declares node >= 22.18 but its CLI and worker ran on node 20
GRAPHILE_DIR=target/bench-peers/graphile

# Into target/, never into the repo; skipped when this version is already there.
graphile_install() {
  grep -qs "\"version\": \"$GRAPHILE_VERSION\"" "$GRAPHILE_DIR/node_modules/graphile-worker/package.json" && return
  rm -rf "$GRAPHILE_DIR"; mkdir -p "$GRAPHILE_DIR"
  npm install --loglevel=error --no-audit --no-fund --prefix "$GRAPHILE_DIR" "graphile-worker@$GRAPHILE_VERSION" >&2
}
graphile_version() {
  echo "graphile-worker $(node -p 'require(require("path").resolve(process.argv[1])).version' \
    "$GRAPHILE_DIR/node_modules/graphile-worker/package.json")"
}

# graphile_reset BACKLOG: a fresh schema from its own migrations (`graphile-worker --schema-only`),
# the task 'bench' registered with the worker's own statement (taskIdentifiers.js; it gets id 1,
# which the scripts pass as the worker does), and BACKLOG ready jobs through graphile_worker.add_jobs,
# its batch function, 100000 per call (one set-based INSERT each; arrays stay far below 1 GB).
graphile_reset() {
  "${PSQL[@]}" -d bench -c "SET client_min_messages = warning" -c "DROP SCHEMA IF EXISTS graphile_worker CASCADE"
  "$GRAPHILE_DIR/node_modules/.bin/graphile-worker" --schema-only -c "postgres://postgres@127.0.0.1:$PORT/bench" >/dev/null
  "${PSQL[@]}" -d bench -c "insert into \"graphile_worker\"._private_tasks as tasks (identifier) select i from unnest('{bench}'::text[]) as u(i) where not exists (select 1 from \"graphile_worker\"._private_tasks as existing where existing.identifier = u.i) on conflict do nothing"
  [ "$("${PSQL[@]}" -d bench -c "SELECT id FROM graphile_worker._private_tasks WHERE identifier = 'bench'")" = 1 ] \
    || { echo "graphile_reset: task 'bench' does not have id 1" >&2; return 1; }
  "${PSQL[@]}" -d bench >/dev/null <<SQL
DO \$\$ BEGIN
  FOR c IN 0 .. ($1 - 1) / 100000 LOOP
    PERFORM graphile_worker.add_jobs(ARRAY(
      SELECT ('bench', '{}', NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
      FROM generate_series(1, least(100000, $1 - c * 100000))));
    COMMIT;
  END LOOP;
END \$\$;
VACUUM ANALYZE graphile_worker._private_jobs, graphile_worker._private_tasks, graphile_worker._private_job_queues;
SQL
}
