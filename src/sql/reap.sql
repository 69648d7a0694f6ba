-- Reaping: crash recovery. One pass removes dead workers (their executing jobs go back to
-- the queue, their locks are released), releases expired locks and prunes old finished jobs.
-- Every step takes its rows with SKIP LOCKED, so concurrent passes share the work instead of
-- queueing behind each other, and no job is requeued twice.

CREATE FUNCTION jobq._retention() RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp
AS $$ SELECT jobq.retention_ms() * interval '1 millisecond' $$;

CREATE FUNCTION jobq._reap(
    OUT workers_reaped integer, OUT jobs_requeued integer, OUT jobs_dead integer,
    OUT locks_released integer, OUT jobs_pruned integer)
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_cutoff  timestamptz := v_now - jobq._retention();  -- once, not per row scanned
    w         record;
    r      record;
    n      integer;
BEGIN
    workers_reaped := 0; jobs_requeued := 0; jobs_dead := 0; locks_released := 0; jobs_pruned := 0;

    -- Dead workers. FOR UPDATE rechecks liveness on the newest row (a heartbeat that
    -- committed meanwhile saves the worker); SKIP LOCKED leaves a worker that another pass,
    -- an unregister or a checkout holds to them.
    FOR w IN
        SELECT x.id FROM jobq.workers x
         WHERE NOT jobq.worker_alive(x.heartbeat_at, x.backend_pid, x.backend_start)
         ORDER BY x.id
           FOR UPDATE SKIP LOCKED
    LOOP
        SELECT * INTO r FROM jobq._return_jobs(w.id, true);
        jobs_requeued := jobs_requeued + r.requeued;
        jobs_dead := jobs_dead + r.dead;
        DELETE FROM jobq.locks l WHERE l.worker_id = w.id;
        GET DIAGNOSTICS n = ROW_COUNT;
        locks_released := locks_released + n;
        DELETE FROM jobq.workers x WHERE x.id = w.id;
        workers_reaped := workers_reaped + 1;
    END LOOP;

    -- Orphaned jobs: executing under a worker that no longer exists. Checkout does not lock
    -- the worker's row, so a checkout that overlapped the pass that reaped its worker can
    -- commit its claims after that pass; they are interrupted attempts like any other.
    FOR w IN
        SELECT DISTINCT j.worker_id AS id FROM jobq.jobs j
         WHERE j.state = 'executing'
           AND NOT EXISTS (SELECT 1 FROM jobq.workers x WHERE x.id = j.worker_id)
    LOOP
        SELECT * INTO r FROM jobq._return_jobs(w.id, true);
        jobs_requeued := jobs_requeued + r.requeued;
        jobs_dead := jobs_dead + r.dead;
    END LOOP;

    -- Locks past their ttl.
    DELETE FROM jobq.locks l
     WHERE l.key = ANY (ARRAY(SELECT k.key FROM jobq.locks k
                               WHERE k.worker_id IS NOT NULL AND k.expires_at <= v_now
                                 FOR UPDATE SKIP LOCKED))
       AND l.expires_at <= v_now;
    GET DIAGNOSTICS n = ROW_COUNT;
    locks_released := locks_released + n;

    -- Finished jobs past retention, oldest first, in one bounded batch per pass so a pass
    -- never holds many row locks for long.
    -- The outer statement has nothing but id = ANY (ARRAY(...)), so its only plan is the
    -- primary key: with IN (...), or with a state condition, the planner could walk every
    -- finished job kept (jobs_finished) per pass. The rows are ours, locked by the subquery.
    DELETE FROM jobq.jobs j
     WHERE j.id = ANY (ARRAY(SELECT f.id FROM jobq.jobs f
                              WHERE f.state IN ('completed', 'dead', 'cancelled')
                                AND f.finished_at < v_cutoff
                              ORDER BY f.finished_at
                              LIMIT 10000
                                FOR UPDATE SKIP LOCKED));
    GET DIAGNOSTICS jobs_pruned = ROW_COUNT;
END $$;

CREATE FUNCTION jobq_reap()
RETURNS TABLE (workers_reaped integer, jobs_requeued integer, jobs_dead integer,
               locks_released integer, jobs_pruned integer)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp
AS $$ SELECT * FROM jobq._reap() $$;

-- What the background worker runs each tick: one pass with a short lock_timeout, its
-- errors logged rather than raised, so a bad pass never stops the next one.
CREATE FUNCTION jobq._reap_pass() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    r record;
BEGIN
    PERFORM set_config('lock_timeout', '2s', true);
    SELECT * INTO r FROM jobq._reap();
    IF r.workers_reaped + r.jobs_requeued + r.jobs_dead + r.locks_released + r.jobs_pruned > 0 THEN
        RAISE LOG 'jobq reaper: % workers reaped, % jobs requeued, % jobs dead, % locks released, % jobs pruned',
            r.workers_reaped, r.jobs_requeued, r.jobs_dead, r.locks_released, r.jobs_pruned;
    END IF;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'jobq reaper: pass failed: % (SQLSTATE %)', SQLERRM, SQLSTATE;
END $$;
