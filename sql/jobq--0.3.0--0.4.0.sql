-- jobq 0.3.0 -> 0.4.0 (ALTER EXTENSION jobq UPDATE). Hand-written: a database updated with it has
-- exactly the objects of a fresh CREATE EXTENSION of 0.4.0 (tests/upgrade.rs checks it). The
-- function bodies are copies of src/sql's, kept by scripts/sync-upgrade.py.
\echo Use "ALTER EXTENSION jobq UPDATE" to load this file. \quit

-- jobq_version(): which release and which edition runs here (src/lib.rs, src/sql/observe.sql).
CREATE FUNCTION jobq."_edition"() RETURNS TABLE (
	"version" TEXT,
	"edition" TEXT
)
STRICT STABLE
LANGUAGE c
AS 'MODULE_PATHNAME', 'edition_wrapper';

CREATE FUNCTION jobq_version() RETURNS TABLE (version text, edition text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp
AS $$ SELECT e.version, e.edition FROM jobq._edition() e $$;

REVOKE ALL ON FUNCTION jobq._edition(), jobq_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq_version() TO jobq_reader;

-- jobq_reap() notes its pass for jobq.health, as the background worker's passes are noted.
CREATE OR REPLACE FUNCTION jobq_reap()
RETURNS TABLE (workers_reaped integer, jobs_requeued integer, jobs_dead integer,
               locks_released integer, jobs_pruned integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_start timestamptz := clock_timestamp();
BEGIN
    SELECT r.workers_reaped, r.jobs_requeued, r.jobs_dead, r.locks_released, r.jobs_pruned
      INTO workers_reaped, jobs_requeued, jobs_dead, locks_released, jobs_pruned
      FROM jobq._reap() r;
    PERFORM jobq._note_pass(clock_timestamp(), (extract(epoch FROM clock_timestamp() - v_start) * 1e6)::bigint,
                            ARRAY[workers_reaped, jobs_requeued, jobs_dead, locks_released, jobs_pruned], NULL);
    RETURN NEXT;
END $$;

-- The reap pass settles what the SQL edition's completions under REPEATABLE READ could not
-- see; the extension's refuse it (40001), so its jobq._settle_unseen does nothing (src/edges.rs).
CREATE FUNCTION jobq."_settle_unseen"() RETURNS void
STRICT VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'settle_unseen_wrapper';
REVOKE ALL ON FUNCTION jobq._settle_unseen() FROM PUBLIC;

CREATE OR REPLACE FUNCTION jobq._workflow_pass(now timestamptz, cutoff timestamptz) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    b record;
BEGIN
    FOR b IN
        DELETE FROM jobq.blocked x
         WHERE x.job_id = ANY (ARRAY(SELECT y.job_id FROM jobq.blocked y
                                      WHERE y.until <= now ORDER BY y.job_id FOR UPDATE SKIP LOCKED))
           AND x.until <= now
        RETURNING x.job_id
    LOOP
        PERFORM jobq._unblock(b.job_id, true);
    END LOOP;
    PERFORM jobq._settle_unseen();
    DELETE FROM jobq.event_log l
     WHERE (l.emitted_at < cutoff)
        OR (l.emitted_at IS NULL AND l.awaited_at < cutoff
            AND NOT EXISTS (SELECT 1 FROM jobq.blocked a WHERE a.event = l.name));
END $$;

-- Every heartbeat calls jobq._pass_if_due: nothing in the extension (src/bgworker.rs); the SQL
-- edition's workers run the passes with it.
CREATE FUNCTION jobq."_pass_if_due"() RETURNS void
STRICT VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'pass_if_due_wrapper';
REVOKE ALL ON FUNCTION jobq._pass_if_due() FROM PUBLIC;

CREATE OR REPLACE FUNCTION jobq_heartbeat(worker uuid, holding bigint[] DEFAULT NULL) RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    ELSIF array_position(holding, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: holding must not contain NULL' USING ERRCODE = '22004';
    END IF;
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    -- One row write, however many jobs the worker holds.
    UPDATE jobq.workers w SET heartbeat_at = clock_timestamp()
     WHERE w.id = worker AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)
       AND jobq._may_act_for(w.owner);
    IF NOT FOUND THEN
        PERFORM jobq._refuse_worker(worker);
    END IF;
    IF holding IS NOT NULL THEN
        PERFORM jobq._return_jobs(worker, true, ARRAY(
            SELECT j.id FROM jobq.live_jobs j
             WHERE j.worker_id = worker AND j.state = 'executing' AND j.id <> ALL (holding)));
    END IF;
    -- The SQL edition's workers run the passes as they beat (src/bgworker.rs); nothing here.
    PERFORM jobq._pass_if_due();
    RETURN ARRAY(SELECT j.id FROM jobq.live_jobs j
                  WHERE j.worker_id = worker AND j.state = 'executing'
                    AND j.cancel_requested_at IS NOT NULL
                  ORDER BY j.id);
END $$;

-- The dead jobs' arm names its columns, so that pg_dump restores the view as it was.
CREATE OR REPLACE VIEW jobq.queue_depths AS
WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now),
parts AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS ready,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at > t.now) AS scheduled,
           count(*) FILTER (WHERE j.state = 'executing') AS executing,
           0 AS dead,
           min(j.run_at) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS oldest_due
      FROM jobq.live_jobs j CROSS JOIN t
     GROUP BY j.queue
    UNION ALL
    -- Named columns: pg_dump writes this arm back as it reads it (an unnamed NULL comes back
    -- from a restore named after its type).
    SELECT f.queue, 0, 0, 0, count(*) AS dead, NULL::timestamptz AS oldest_due
      FROM jobq.finished_jobs f
     WHERE f.state = 'dead'
     GROUP BY f.queue
)
SELECT p.queue, sum(p.ready)::bigint AS ready, sum(p.scheduled)::bigint AS scheduled,
       sum(p.executing)::bigint AS executing, sum(p.dead)::bigint AS dead,
       t.now - min(p.oldest_due) AS oldest_ready_age
  FROM parts p CROSS JOIN t
 GROUP BY p.queue, t.now;
