# The hand-written queue (bench/systems/baseline.sh) with the least a kept history needs: the
# completion moves the row to a history table (with its state and finish time) instead of deleting
# it, and that table has only its primary key (a finished job's result is looked up by id;
# pruning by age would need one more index). No workers, heartbeats, fencing or keys. A floor for
# what keeping finished jobs costs in WAL (bench/walcost.sh), not a queue to compare: it has only
# the checkout+complete script.
baseline_hist_install() { :; }
baseline_hist_version() { echo "baseline_hist: the baseline, keeping finished jobs in a table with a primary key"; }

# baseline_hist_reset BACKLOG: fresh tables with BACKLOG ready jobs.
baseline_hist_reset() {
  "${PSQL[@]}" -d bench >/dev/null <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS baseline_hist_jobs, baseline_hist_history;
CREATE TABLE baseline_hist_jobs (
    id bigserial PRIMARY KEY, queue text NOT NULL, payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
    state text NOT NULL DEFAULT 'ready', attempts integer NOT NULL DEFAULT 0);
CREATE INDEX ON baseline_hist_jobs (queue, priority, run_at, id) WHERE state = 'ready';
CREATE TABLE baseline_hist_history (LIKE baseline_hist_jobs, finished_at timestamptz NOT NULL, PRIMARY KEY (id));
INSERT INTO baseline_hist_jobs (queue, payload) SELECT 'bench', '{}' FROM generate_series(1, $1);
SQL
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE baseline_hist_jobs" >/dev/null
}
