# Layout prototype for the performance issue, not jobq: "live table + history". Only ready and
# executing jobs live in pl_live, under one ordered index with no predicate; a claim sets the
# worker in place (a HOT update: no index names worker_id or attempt), and checkout passes over
# claimed rows at the head of the index. Completing moves the job to pl_history, which is only
# ever appended to (a BRIN index on finish time serves pruning) and written nowhere else.
# Not in it (what a full design must add, and pay for): an index of executing jobs by worker,
# keys. Scripts: bench/scripts/proto_live_*.sql.
proto_live_install() { :; }
proto_live_version() { echo "prototype: live table + history (bench/systems/proto_live.sh)"; }

# proto_live_reset BACKLOG: fresh tables with BACKLOG ready jobs.
proto_live_reset() {
  "${PSQL[@]}" -d bench >/dev/null <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS pl_live, pl_history;
CREATE TABLE pl_live (
    id bigint PRIMARY KEY, queue text NOT NULL, payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
    attempt integer NOT NULL DEFAULT 0, worker_id uuid, started_at timestamptz) WITH (fillfactor = 50);
CREATE INDEX ON pl_live (queue, priority, run_at, id);
CREATE TABLE pl_history (
    id bigint NOT NULL, queue text NOT NULL, payload jsonb NOT NULL, attempt integer NOT NULL,
    worker_id uuid, started_at timestamptz, finished_at timestamptz NOT NULL, state text NOT NULL, result jsonb);
CREATE INDEX ON pl_history USING brin (finished_at);
INSERT INTO pl_live (id, queue, payload) SELECT g, 'bench', '{}' FROM generate_series(1, $1) g;
SQL
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE pl_live, pl_history" >/dev/null
}
