-- Reaping: crash recovery. One pass removes dead workers (their executing jobs go back to
-- the queue, their locks are released), releases expired locks and prunes old finished jobs.
--
-- A pass never waits for a row another transaction holds: every step takes its rows with
-- SKIP LOCKED, so concurrent passes share the work instead of queueing behind each other (and
-- no job is requeued twice), and a row held by an open transaction anywhere (a jobq_cancel
-- or a jobq_complete left uncommitted) is passed over and picked up by a later pass. Each
-- dead worker is recovered in a subtransaction of its own: an error there is logged and
-- undoes that worker's recovery only. The one wait SKIP LOCKED cannot avoid, re-taking an
-- until_executing key that another open transaction is inserting, is cut short by the
-- function's lock_timeout and retried by a later pass.

CREATE FUNCTION jobq._retention() RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp
AS $$ SELECT jobq.retention_ms() * interval '1 millisecond' $$;

-- Recovers what the dead (or deleted) worker `worker` left: its executing jobs go back to the
-- queue or die, its locks are released, and its row is deleted once nothing of it is left
-- (`removed`). Rows another transaction holds stay for a later pass.
CREATE FUNCTION jobq._reap_worker(worker uuid, OUT requeued integer, OUT dead integer,
                                  OUT locks integer, OUT removed boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    BEGIN
        SELECT r.requeued, r.dead INTO requeued, dead
          FROM jobq._return_jobs(worker, true, ARRAY(
                   SELECT j.id FROM jobq.live_jobs j
                    WHERE j.worker_id = worker AND j.state = 'executing'
                    ORDER BY j.id
                      FOR UPDATE SKIP LOCKED)) r;
        DELETE FROM jobq.locks l
         WHERE l.key = ANY (ARRAY(SELECT k.key FROM jobq.locks k WHERE k.worker_id = worker
                                     FOR UPDATE SKIP LOCKED))
           AND l.worker_id = worker;
        GET DIAGNOSTICS locks = ROW_COUNT;
        DELETE FROM jobq.workers w
         WHERE w.id = worker
           AND NOT EXISTS (SELECT 1 FROM jobq.live_jobs j WHERE j.worker_id = worker AND j.state = 'executing')
           AND NOT EXISTS (SELECT 1 FROM jobq.locks l WHERE l.worker_id = worker);
        removed := FOUND;
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'jobq: recovering worker % failed: % (SQLSTATE %); a later pass retries',
            worker, SQLERRM, SQLSTATE;
        requeued := 0; dead := 0; locks := 0; removed := false;
    END;
END $$;

CREATE FUNCTION jobq._reap(
    OUT workers_reaped integer, OUT jobs_requeued integer, OUT jobs_dead integer,
    OUT locks_released integer, OUT jobs_pruned integer)
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp SET lock_timeout = '100ms' SET jit = off AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_cutoff  timestamptz := v_now - jobq._retention();  -- once, not per row scanned
    v_waiting uuid[];
    w         record;
    r         record;
    n         integer;
BEGIN
    workers_reaped := 0; jobs_requeued := 0; jobs_dead := 0; locks_released := 0; jobs_pruned := 0;
    -- The sessions read afresh (the SQL edition's jobq.worker_alive reads them through
    -- pg_stat_get_activity, which keeps what a transaction read first for the rest of it): a
    -- heartbeat that runs this pass judged its own worker earlier in its transaction, and a
    -- worker registered since, in a session started since, would be judged dead and reaped.
    -- (The extension reads them live; there this clears nothing it uses.)
    PERFORM pg_catalog.pg_stat_clear_snapshot();
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends; 40001 for a manual jobq_reap() in an older REPEATABLE READ snapshot,
    -- which would see no job of a dead worker to requeue (src/compact.rs).
    PERFORM jobq._hold_hot_tables();

    -- A worker counts as alive while a checkout of it waits (src/waits.rs): the heartbeat of
    -- a worker that waits now is refreshed before anyone is judged, however long since the
    -- last pass (the SQL edition's passes may be minutes apart; the wait proves its session).
    -- The waiting workers are found once (a call in the condition ran once per worker's row,
    -- and the SQL edition's reads pg_locks for each worker).
    v_waiting := jobq._waiting_workers();
    UPDATE jobq.workers x SET heartbeat_at = v_now
     WHERE x.id IN (SELECT y.id FROM jobq.workers y
                     WHERE y.id = ANY (v_waiting)
                       FOR UPDATE SKIP LOCKED);

    -- Dead workers, then orphaned jobs: executing under a worker that no longer exists.
    -- Checkout does not lock the worker's row, so a checkout that overlapped the pass that
    -- reaped its worker can commit its claims after that pass; they are interrupted attempts
    -- like any other. FOR UPDATE rechecks liveness on the newest row (a heartbeat that
    -- committed meanwhile saves the worker); SKIP LOCKED leaves a worker that another pass,
    -- an unregister or a heartbeat holds to them.
    FOR w IN
        SELECT x.id FROM jobq.workers x
         WHERE NOT jobq.worker_alive(x.heartbeat_at, x.backend_pid, x.backend_start)
         ORDER BY x.id
           FOR UPDATE SKIP LOCKED
    LOOP
        SELECT * INTO r FROM jobq._reap_worker(w.id);
        jobs_requeued := jobs_requeued + r.requeued;
        jobs_dead := jobs_dead + r.dead;
        locks_released := locks_released + r.locks;
        workers_reaped := workers_reaped + r.removed::integer;
    END LOOP;
    FOR w IN
        SELECT DISTINCT j.worker_id AS id FROM jobq.live_jobs j
         WHERE j.state = 'executing'
           AND NOT EXISTS (SELECT 1 FROM jobq.workers x WHERE x.id = j.worker_id)
    LOOP
        SELECT * INTO r FROM jobq._reap_worker(w.id);
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

    -- Recurring jobs: the due ticks of every schedule (src/sql/schedules.sql). Not part of
    -- what jobq_reap() returns (the contract fixes its columns); jobq.schedules shows them.
    PERFORM jobq._enqueue_due_ticks(v_now);

    -- The dashboard's counters: what shared memory counted since the last pass goes to
    -- jobq.queue_minutes (src/sql/counters.sql).
    PERFORM jobq._flush_tallies(v_now, jobq._retention());

    -- Workflows: timed-out awaits, old events (src/sql/workflows.sql).
    PERFORM jobq._workflow_pass(v_now, v_cutoff);

    -- Queue grants of roles dropped since (src/sql/grants.sql): a role's oid is not a
    -- dependency PostgreSQL tracks, and a new role that drew the same oid must not be limited.
    DELETE FROM jobq.queue_grants g
     WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles x WHERE x.oid = g.role);

    -- Finished jobs past retention, oldest first, in batches of 10,000 until none is left
    -- or the pass has pruned for a second (the rest waits for the next pass), so pruning
    -- keeps up with any completion rate without one pass becoming a long transaction.
    -- The rows are ours, locked by the subquery (a jobq_retry holding one keeps it).
    LOOP
        WITH pruned AS (
            DELETE FROM jobq.finished_jobs j
             WHERE j.id = ANY (ARRAY(SELECT f.id FROM jobq.finished_jobs f
                                      WHERE f.finished_at < v_cutoff
                                        -- kept while a job that depends on it or awaits it is not finished
                                        AND NOT EXISTS (SELECT 1 FROM jobq.edges e JOIN jobq.live_jobs c ON c.id = e.child
                                                         WHERE e.parent = f.id)
                                      ORDER BY f.finished_at
                                      LIMIT 10000
                                        FOR UPDATE SKIP LOCKED))
            RETURNING j.id
        ), edges AS (
            -- a pruned job's own edges go with it (src/sql/workflows.sql)
            DELETE FROM jobq.edges e WHERE e.child IN (SELECT p.id FROM pruned p)
        )
        SELECT count(*) INTO n FROM pruned;
        jobs_pruned := jobs_pruned + n;
        EXIT WHEN n < 10000 OR clock_timestamp() - v_now > interval '1 second';
    END LOOP;

    -- Fair checkout: the turns of keys that have no waiting job (src/sql/fairness.sql). Last:
    -- it holds a fair queue's lock until the pass commits, and keyed enqueues into that queue
    -- wait for it.
    PERFORM jobq._prune_fairness();
END $$;

-- One whole pass, as the background worker runs it each tick (and, in the SQL edition, pg_cron
-- or the client libraries' workers), noted for jobq.health like the background worker's.
CREATE FUNCTION jobq_reap()
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

-- What the background worker runs each tick: one pass, its errors logged rather than
-- raised, so a bad pass never stops the next one. The pass's outcome is noted for
-- jobq.health (src/health.rs).
CREATE FUNCTION jobq._reap_pass() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_start   timestamptz := clock_timestamp();
    v_counts  integer[] := ARRAY[0, 0, 0, 0, 0];
    v_error   text;
    r         record;
BEGIN
    BEGIN
        SELECT * INTO r FROM jobq._reap();
        v_counts := ARRAY[r.workers_reaped, r.jobs_requeued, r.jobs_dead, r.locks_released, r.jobs_pruned];
        IF r.workers_reaped + r.jobs_requeued + r.jobs_dead + r.locks_released + r.jobs_pruned > 0 THEN
            RAISE LOG 'jobq reaper: % workers reaped, % jobs requeued, % jobs dead, % locks released, % jobs pruned',
                r.workers_reaped, r.jobs_requeued, r.jobs_dead, r.locks_released, r.jobs_pruned;
        END IF;
    EXCEPTION WHEN OTHERS THEN
        v_error := format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE);
        RAISE WARNING 'jobq reaper: pass failed: %', v_error;
    END;
    PERFORM jobq._note_pass(clock_timestamp(), (extract(epoch FROM clock_timestamp() - v_start) * 1e6)::bigint,
                            v_counts, v_error);
END $$;

-- CREATE EXTENSION tells the launcher to serve this database from its commit on
-- (src/bgworker.rs), and says so where no background worker will: without the preload, or
-- with jobq.database naming another database, nothing reaps here unless something calls
-- jobq_reap().
DO $$
DECLARE
    v_preloaded boolean;
BEGIN
    IF NOT jobq._serve_database() THEN
        v_preloaded := 'jobq' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','));
        RAISE WARNING 'jobq: no background worker reaps database "%"', current_database()
            USING DETAIL = CASE WHEN NOT v_preloaded THEN 'jobq is not in shared_preload_libraries.'
                                ELSE format('The background worker serves database "%s" (jobq.database) only.',
                                            current_setting('jobq.database', true)) END,
                  HINT = 'Until it does, dead workers are reaped and old jobs pruned only when something calls jobq_reap() (every few seconds).';
    END IF;
END $$;
