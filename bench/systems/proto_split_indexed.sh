# Layout prototype for the performance issue, not jobq: bench/systems/proto_split.sh plus the two
# lookups jobq needs on the job row, as jobq has them today: executing jobs by worker
# (heartbeat, reaping) and finished jobs by finish time (pruning), as partial indexes whose
# predicates name the state. Every update then changes an indexed column: none is HOT.
# Scripts: bench/scripts/proto_split_indexed_*.sql.
proto_split_indexed_install() { :; }
proto_split_indexed_version() { echo "prototype: split ready table + jobq's partial indexes (bench/systems/proto_split_indexed.sh)"; }

# proto_split_indexed_reset BACKLOG: fresh tables with BACKLOG ready jobs.
proto_split_indexed_reset() {
  "${PSQL[@]}" -d bench >/dev/null <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS psi_jobs, psi_ready;
CREATE TABLE psi_jobs (
    id bigint PRIMARY KEY, queue text NOT NULL, payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
    state text NOT NULL DEFAULT 'ready', attempt integer NOT NULL DEFAULT 0, worker_id uuid,
    started_at timestamptz, finished_at timestamptz, result jsonb) WITH (fillfactor = 50);
CREATE INDEX ON psi_jobs (worker_id) WHERE state = 'executing';
CREATE INDEX ON psi_jobs (finished_at) WHERE state IN ('completed', 'dead', 'cancelled');
CREATE TABLE psi_ready (id bigint NOT NULL, queue text NOT NULL, priority integer NOT NULL, run_at timestamptz NOT NULL);
CREATE INDEX ON psi_ready (queue, priority, run_at, id);
INSERT INTO psi_jobs (id, queue, payload) SELECT g, 'bench', '{}' FROM generate_series(1, $1) g;
INSERT INTO psi_ready SELECT id, queue, priority, run_at FROM psi_jobs;
SQL
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE psi_jobs, psi_ready" >/dev/null
}
