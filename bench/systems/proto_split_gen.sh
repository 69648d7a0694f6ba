# Layout prototype for the long-transaction issue, not jobq: bench/systems/proto_split_indexed.sh
# with both tables LIST-partitioned by a generation column into two partitions, the layout a
# TRUNCATE rotation needs (new rows go to the current generation; the other is emptied and
# truncated). Every row is in generation 0 here: what it measures is what the partitioning
# itself costs the clean hot path (a lookup by id probes both partitions' indexes; a claim
# deletes its ready row by (tableoid, ctid)). Scripts: bench/scripts/proto_split_gen_*.sql.
proto_split_gen_install() { :; }
proto_split_gen_version() { echo "prototype: proto_split_indexed, both tables partitioned by generation (bench/systems/proto_split_gen.sh)"; }

# proto_split_gen_reset BACKLOG: fresh tables with BACKLOG ready jobs.
proto_split_gen_reset() {
  "${PSQL[@]}" -d bench >/dev/null <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS psg_jobs, psg_ready;
CREATE TABLE psg_jobs (
    id bigint NOT NULL, gen smallint NOT NULL DEFAULT 0, queue text NOT NULL, payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
    state text NOT NULL DEFAULT 'ready', attempt integer NOT NULL DEFAULT 0, worker_id uuid,
    started_at timestamptz, finished_at timestamptz, result jsonb, PRIMARY KEY (id, gen)) PARTITION BY LIST (gen);
CREATE TABLE psg_jobs_0 PARTITION OF psg_jobs FOR VALUES IN (0) WITH (fillfactor = 50);
CREATE TABLE psg_jobs_1 PARTITION OF psg_jobs FOR VALUES IN (1) WITH (fillfactor = 50);
CREATE INDEX ON psg_jobs (worker_id) WHERE state = 'executing';
CREATE INDEX ON psg_jobs (finished_at) WHERE state IN ('completed', 'dead', 'cancelled');
CREATE TABLE psg_ready (id bigint NOT NULL, gen smallint NOT NULL DEFAULT 0, queue text NOT NULL, priority integer NOT NULL, run_at timestamptz NOT NULL) PARTITION BY LIST (gen);
CREATE TABLE psg_ready_0 PARTITION OF psg_ready FOR VALUES IN (0);
CREATE TABLE psg_ready_1 PARTITION OF psg_ready FOR VALUES IN (1);
CREATE INDEX ON psg_ready (queue, priority, run_at, id);
INSERT INTO psg_jobs (id, queue, payload) SELECT g, 'bench', '{}' FROM generate_series(1, $1) g;
INSERT INTO psg_ready SELECT id, 0, queue, priority, run_at FROM psg_jobs;
SQL
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE psg_jobs, psg_ready" >/dev/null
}
