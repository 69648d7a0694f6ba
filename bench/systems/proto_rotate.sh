# Layout prototype for the long-transaction issue, not jobq: the TRUNCATE rotation of the README
# (Performance, "The rotation, as it would be built"), reduced to what bench/pressure.sh needs.
# The job rows (pr_jobs) and the waiting set (pr_ready) are LIST-partitioned by generation into
# two partitions; new jobs go to the current generation (pr_state); pr_rotate(), called every
# second by bench/pressure.py, truncates the other generation once it is empty (under a 50 ms
# lock_timeout, emptiness checked under the lock) and makes it the current one. Stragglers are
# not moved: every job here runs 1 ms and is claimed oldest first, so a generation drains by
# itself within a second or two. A completion moves the job to an append-only history (pr_history).
# No claim floors, fencing, keys or liveness: what it measures is whether truncation keeps the
# hot tables small and the rate up while a snapshot is held.
proto_rotate_install() { :; }
proto_rotate_version() { echo "prototype: TRUNCATE rotation of two generations (bench/systems/proto_rotate.sh)"; }

# proto_rotate_reset BACKLOG: fresh tables with BACKLOG ready jobs.
proto_rotate_reset() {
  "${PSQL[@]}" -d bench >/dev/null <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS pr_jobs, pr_ready, pr_history, pr_state;
DROP SEQUENCE IF EXISTS pr_ids;
DROP FUNCTION IF EXISTS pr_rotate();
CREATE SEQUENCE pr_ids;
CREATE TABLE pr_state (cur smallint NOT NULL);
INSERT INTO pr_state VALUES (0);
CREATE TABLE pr_jobs (
    id bigint NOT NULL, gen smallint NOT NULL, queue text NOT NULL, payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
    state text NOT NULL DEFAULT 'ready', attempt integer NOT NULL DEFAULT 0, worker_id uuid,
    started_at timestamptz, PRIMARY KEY (id, gen)) PARTITION BY LIST (gen);
CREATE TABLE pr_jobs_0 PARTITION OF pr_jobs FOR VALUES IN (0);
CREATE TABLE pr_jobs_1 PARTITION OF pr_jobs FOR VALUES IN (1);
CREATE INDEX ON pr_jobs (worker_id) WHERE state = 'executing';
CREATE TABLE pr_ready (id bigint NOT NULL, gen smallint NOT NULL, queue text NOT NULL, priority integer NOT NULL,
    run_at timestamptz NOT NULL) PARTITION BY LIST (gen);
CREATE TABLE pr_ready_0 PARTITION OF pr_ready FOR VALUES IN (0);
CREATE TABLE pr_ready_1 PARTITION OF pr_ready FOR VALUES IN (1);
CREATE INDEX ON pr_ready (queue, priority, run_at, id);
CREATE TABLE pr_history (id bigint NOT NULL, queue text NOT NULL, payload jsonb NOT NULL, finished_at timestamptz NOT NULL);
CREATE FUNCTION pr_rotate() RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE
    v_cur smallint;
    v_old smallint;
BEGIN
    SELECT s.cur INTO v_cur FROM pr_state s;
    v_old := 1 - v_cur;
    IF EXISTS (SELECT 1 FROM pr_ready WHERE gen = v_old) OR EXISTS (SELECT 1 FROM pr_jobs WHERE gen = v_old) THEN
        RETURN 'draining';
    END IF;
    SET LOCAL lock_timeout = '50ms';
    EXECUTE format('LOCK TABLE pr_ready_%s, pr_jobs_%s IN ACCESS EXCLUSIVE MODE', v_old, v_old);
    -- Under the lock every writer of the old generation has ended: look again, then empty it.
    IF EXISTS (SELECT 1 FROM pr_ready WHERE gen = v_old) OR EXISTS (SELECT 1 FROM pr_jobs WHERE gen = v_old) THEN
        RETURN 'draining';
    END IF;
    EXECUTE format('TRUNCATE pr_ready_%s, pr_jobs_%s', v_old, v_old);
    UPDATE pr_state SET cur = v_old;
    RETURN 'rotated';
END \$\$;
WITH j AS (
    INSERT INTO pr_jobs (id, gen, queue, payload) SELECT nextval('pr_ids'), 0, 'bench', '{}' FROM generate_series(1, $1)
    RETURNING id, gen, queue, priority, run_at)
INSERT INTO pr_ready SELECT id, gen, queue, priority, run_at FROM j;
SQL
  "${PSQL[@]}" -d bench -c "VACUUM ANALYZE pr_jobs, pr_ready" >/dev/null
}
