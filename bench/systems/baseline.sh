# The hand-written SKIP LOCKED queue, the smallest that works: one table, one partial index,
# UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING, then DELETE. No
# workers, heartbeats, fencing, keys or history. Scripts: bench/scripts/baseline_*.sql.
baseline_install() { :; }
baseline_version() { echo "baseline (hand-written, bench/systems/baseline.sh)"; }

# baseline_reset BACKLOG: a fresh table with BACKLOG ready jobs.
baseline_reset() {
  "${PSQL[@]}" -d bench >/dev/null <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS baseline_jobs;
CREATE TABLE baseline_jobs (
    id bigserial PRIMARY KEY, queue text NOT NULL, payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
    state text NOT NULL DEFAULT 'ready', attempts integer NOT NULL DEFAULT 0);
CREATE INDEX ON baseline_jobs (queue, priority, run_at, id) WHERE state = 'ready';
INSERT INTO baseline_jobs (queue, payload) SELECT 'bench', '{}' FROM generate_series(1, $1);
SQL
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE baseline_jobs" >/dev/null
}
