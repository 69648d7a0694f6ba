# Layout prototype for the performance issue, not jobq: bench/systems/proto_split.sh with one
# change, the column order. The columns a claim or a completion changes come first and the
# ones that never change (queue, payload, …) after them: PostgreSQL logs an update whose new
# version stays on the same page without the bytes it shares with the old one at the start
# and at the end of the tuple, so the payload stops being written to WAL on every update.
# Scripts: bench/scripts/proto_split_ordered_*.sql.
proto_split_ordered_install() { :; }
proto_split_ordered_version() { echo "prototype: split ready table, changing columns first (bench/systems/proto_split_ordered.sh)"; }

# proto_split_ordered_reset BACKLOG: fresh tables with BACKLOG ready jobs.
proto_split_ordered_reset() {
  "${PSQL[@]}" -d bench >/dev/null <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS pso_jobs, pso_ready;
CREATE TABLE pso_jobs (
    state text NOT NULL DEFAULT 'ready', attempt integer NOT NULL DEFAULT 0, worker_id uuid,
    started_at timestamptz, finished_at timestamptz, result jsonb,
    id bigint PRIMARY KEY, queue text NOT NULL, payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now()) WITH (fillfactor = 50);
CREATE TABLE pso_ready (id bigint NOT NULL, queue text NOT NULL, priority integer NOT NULL, run_at timestamptz NOT NULL);
CREATE INDEX ON pso_ready (queue, priority, run_at, id);
INSERT INTO pso_jobs (id, queue, payload) SELECT g, 'bench', '{}' FROM generate_series(1, $1) g;
INSERT INTO pso_ready SELECT id, queue, priority, run_at FROM pso_jobs;
SQL
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE pso_jobs, pso_ready" >/dev/null
}
