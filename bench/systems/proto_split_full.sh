# Layout prototype for the performance issue, not jobq: bench/systems/proto_split.sh plus the two
# lookups jobq needs, kept off the job row so that its updates stay HOT: a narrow claims table
# (one row per executing job: the fence, and executing jobs by worker through its index) and
# an append-only log of finished jobs (finish time and id, BRIN-indexed: what pruning reads,
# oldest first). Claim: delete the ready row, insert the claim, update the job row (HOT).
# Complete: delete the claim (the fence: only the claiming worker's row matches), update the
# job row (HOT), append to the log. Scripts: bench/scripts/proto_split_full_*.sql.
proto_split_full_install() { :; }
proto_split_full_version() { echo "prototype: split ready table + claims + finished log (bench/systems/proto_split_full.sh)"; }

# proto_split_full_reset BACKLOG: fresh tables with BACKLOG ready jobs.
proto_split_full_reset() {
  "${PSQL[@]}" -d bench >/dev/null <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS psf_jobs, psf_ready, psf_claims, psf_finished;
CREATE TABLE psf_jobs (
    id bigint PRIMARY KEY, queue text NOT NULL, payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
    state text NOT NULL DEFAULT 'ready', attempt integer NOT NULL DEFAULT 0, worker_id uuid,
    started_at timestamptz, finished_at timestamptz, result jsonb) WITH (fillfactor = 50);
CREATE TABLE psf_ready (id bigint NOT NULL, queue text NOT NULL, priority integer NOT NULL, run_at timestamptz NOT NULL);
CREATE INDEX ON psf_ready (queue, priority, run_at, id);
CREATE TABLE psf_claims (job_id bigint PRIMARY KEY, worker_id uuid NOT NULL);
CREATE INDEX ON psf_claims (worker_id);
CREATE TABLE psf_finished (finished_at timestamptz NOT NULL, job_id bigint NOT NULL);
CREATE INDEX ON psf_finished USING brin (finished_at);
INSERT INTO psf_jobs (id, queue, payload) SELECT g, 'bench', '{}' FROM generate_series(1, $1) g;
INSERT INTO psf_ready SELECT id, queue, priority, run_at FROM psf_jobs;
SQL
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE psf_jobs, psf_ready, psf_claims, psf_finished" >/dev/null
}
