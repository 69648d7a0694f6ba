# jobq's SQL edition as a row of the benchmark (docs/sql-edition.md): the same SQL functions
# without the library, from target/sql-edition/jobq-sql--V.sql (scripts/build-sql-edition.py),
# installed into database `bench` by `bench_installer`, a role with CREATEROLE that is no
# superuser, in place of the extension (the cluster preloads the library, which the SQL
# edition never calls; its background worker serves no database without the extension).
# Same pgbench scripts as jobq's (bench/scripts/jobq_sql_* are links to jobq_*).
. bench/systems/jobq.sh
JOBQ_SQL_FILE=$PWD/target/sql-edition/jobq-sql.sql
jobq_sql_install() { python3 scripts/build-sql-edition.py "$JOBQ_SQL_FILE" >/dev/null; }
jobq_sql_version() { echo "jobq_sql: jobq's SQL edition, the same release"; }

# jobq_sql_reset BACKLOG: the SQL edition installed afresh, 256 workers, BACKLOG ready jobs.
jobq_sql_reset() {
  "${PSQL[@]}" -d bench >/dev/null <<SQL
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE; DROP TABLE IF EXISTS bench_workers;
SELECT bench_uninstall_jobq_sql();
DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'bench_installer') THEN
  CREATE ROLE bench_installer LOGIN CREATEROLE; END IF; END \$\$;
GRANT CREATE ON DATABASE bench TO bench_installer;
GRANT CREATE ON SCHEMA public TO bench_installer;
SQL
  psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U bench_installer -d bench -f "$JOBQ_SQL_FILE" >/dev/null
  "${PSQL[@]}" -d bench >/dev/null <<SQL
$BENCH_WORKERS
SELECT count(*) FROM jobq_enqueue_batch('bench', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, $1)));
VACUUM ANALYZE;
SQL
}
