# Layout prototype for the performance issue, not jobq: "split ready table". The job row keeps
# its data and its state; the ready set is a narrow table of its own with the one ordered
# index. A claim deletes the job's ready row and updates the job row in place, a completion
# updates it in place: no index of ps_jobs names a column either changes, so with free room
# on the page (fillfactor 50) both are HOT updates that write no index entry.
# Not in it (what a full design must add, and pay for): an index of executing jobs by worker,
# one of finished jobs by finish time for pruning, keys. What it measures is the floor of this
# layout's hot path. Scripts: bench/scripts/proto_split_*.sql.
proto_split_install() { :; }
proto_split_version() { echo "prototype: split ready table (bench/systems/proto_split.sh)"; }

# proto_split_reset BACKLOG: fresh tables with BACKLOG ready jobs.
proto_split_reset() {
  "${PSQL[@]}" -d bench >/dev/null <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS ps_jobs, ps_ready;
CREATE TABLE ps_jobs (
    id bigint PRIMARY KEY, queue text NOT NULL, payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
    state text NOT NULL DEFAULT 'ready', attempt integer NOT NULL DEFAULT 0, worker_id uuid,
    started_at timestamptz, finished_at timestamptz, result jsonb) WITH (fillfactor = 50);
CREATE TABLE ps_ready (id bigint NOT NULL, queue text NOT NULL, priority integer NOT NULL, run_at timestamptz NOT NULL);
CREATE INDEX ON ps_ready (queue, priority, run_at, id);
INSERT INTO ps_jobs (id, queue, payload) SELECT g, 'bench', '{}' FROM generate_series(1, $1) g;
INSERT INTO ps_ready SELECT id, queue, priority, run_at FROM ps_jobs;
SQL
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE ps_jobs, ps_ready" >/dev/null
}
