-- Twins of src/health.rs: the last reap pass, for jobq.health. The extension keeps it in
-- shared memory; here one row of a table, written by each pass (jobq_reap).
CREATE TABLE jobq.last_pass (
    one            boolean PRIMARY KEY DEFAULT true CHECK (one),
    ended_at       timestamptz NOT NULL,
    took_ms        double precision NOT NULL,
    workers_reaped integer NOT NULL,
    jobs_requeued  integer NOT NULL,
    jobs_dead      integer NOT NULL,
    locks_released integer NOT NULL,
    jobs_pruned    integer NOT NULL,
    error          text
);

-- Skips the write when another pass holds the row: its note is as recent. Every pass ends
-- here: it also sends the NOTIFYs deferred since the last one (src/sql/twins/wakes.sql).
CREATE FUNCTION jobq._note_pass(ended timestamptz, took_us bigint, counts integer[], error text)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_sent bigint;
BEGIN
    WITH taken AS (
        DELETE FROM jobq.pending_notifies RETURNING queue
    )
    SELECT count(pg_notify('jobq', q.queue)) INTO v_sent FROM (SELECT DISTINCT t.queue FROM taken t) q;
    IF pg_try_advisory_xact_lock(1785684593, hashtext('jobq.last_pass')) THEN
        INSERT INTO jobq.last_pass AS p VALUES (true, ended, took_us / 1000.0, counts[1], counts[2], counts[3],
                                                counts[4], counts[5], error)
        ON CONFLICT (one) DO UPDATE
           SET ended_at = excluded.ended_at, took_ms = excluded.took_ms,
               workers_reaped = excluded.workers_reaped, jobs_requeued = excluded.jobs_requeued,
               jobs_dead = excluded.jobs_dead, locks_released = excluded.locks_released,
               jobs_pruned = excluded.jobs_pruned, error = excluded.error
         WHERE p.ended_at < excluded.ended_at;
    END IF;
END $$;

CREATE FUNCTION jobq._last_pass()
RETURNS TABLE (ended_at timestamptz, took_ms double precision, workers_reaped integer, jobs_requeued integer,
               jobs_dead integer, locks_released integer, jobs_pruned integer, error text)
LANGUAGE sql STRICT STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT p.ended_at, p.took_ms, p.workers_reaped, p.jobs_requeued, p.jobs_dead, p.locks_released,
           p.jobs_pruned, p.error
      FROM jobq.last_pass p
$$;
