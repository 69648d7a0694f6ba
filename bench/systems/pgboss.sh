# pg-boss (npm) as a peer row of the benchmark. Source after bench/lib.sh, from the repo root.
# Its schema is `pgboss`. Scripts: bench/scripts/pgboss_{checkout_complete,enqueue,enqueue_batch,
# mixed}.sql, all on queue 'bench', created with default options: policy 'standard', not
# partitioned, so its jobs live in pgboss.job_common (the default partition of pgboss.job), and
# notify off, so no pg_notify on insert. No pg-boss process runs during the benchmark (no
# maintenance or monitoring), as no Graphile or Procrastinate worker does.
PGBOSS_VERSION=12.38.0  # latest on npm; declares node >= 22.12 but start, send, insert and work ran on node 20
PGBOSS_DIR=target/bench-peers/pgboss

# Into target/, never into the repo; skipped when this version is already there.
pgboss_install() {
  grep -qs "\"version\": \"$PGBOSS_VERSION\"" "$PGBOSS_DIR/node_modules/pg-boss/package.json" && return
  rm -rf "$PGBOSS_DIR"; mkdir -p "$PGBOSS_DIR"
  npm install --loglevel=error --no-audit --no-fund --prefix "$PGBOSS_DIR" "pg-boss@$PGBOSS_VERSION" >&2
}
pgboss_version() {
  echo "pg-boss $(node -p 'require(require("path").resolve(process.argv[1])).version' \
    "$PGBOSS_DIR/node_modules/pg-boss/package.json")"
}

# pgboss_reset BACKLOG: a fresh schema created by pg-boss itself (`new PgBoss(conn).start()` runs its
# construction plans), queue 'bench' from createQueue with default options, and BACKLOG ready jobs
# (data {}) through boss.insert, its batch path (plans.insertJobs in dist/plans.js: one set-based
# INSERT ... SELECT FROM json_to_recordset), 100000 per call; then boss.stop().
pgboss_reset() {
  "${PSQL[@]}" -d bench -c "SET client_min_messages = warning" -c "DROP SCHEMA IF EXISTS pgboss CASCADE"
  node --input-type=module -e '
    const [mod, conn, backlog] = process.argv.slice(1);
    const { PgBoss } = await import(mod);
    const boss = new PgBoss(conn);
    boss.on("error", err => { console.error(err); process.exitCode = 1; });
    await boss.start();
    await boss.createQueue("bench");
    for (let left = Number(backlog); left > 0; left -= 100000)
      await boss.insert("bench", Array.from({ length: Math.min(100000, left) }, () => ({ data: {} })));
    await boss.stop();
  ' "$(realpath "$PGBOSS_DIR/node_modules/pg-boss/dist/index.js")" "postgres://postgres@127.0.0.1:$PORT/bench" "$1" || return
  [ "$("${PSQL[@]}" -d bench -c "SELECT count(*) FROM pgboss.job_common WHERE name = 'bench' AND state = 'created'")" = "$1" ] \
    || { echo "pgboss_reset: expected $1 jobs in queue 'bench'" >&2; return 1; }
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE pgboss.job, pgboss.queue"
}
