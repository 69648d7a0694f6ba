-- Workers: registration, heartbeat, graceful shutdown, and the liveness rule every other
-- function uses.

-- The liveness rule is jobq.worker_alive(heartbeat_at, backend_pid, backend_start), in Rust
-- (src/liveness.rs): a fresh heartbeat and, for a worker bound to a session, that session.

-- Raises 42501 when `worker` exists and belongs to a role the caller may not act for
-- (src/privileges.rs), alive or not: a worker's id alone grants nothing.
CREATE FUNCTION jobq._refuse_foreign_worker(worker uuid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_owner regrole;
BEGIN
    SELECT w.owner INTO v_owner FROM jobq.workers w WHERE w.id = worker;
    IF FOUND AND NOT jobq._may_act_for(v_owner) THEN
        RAISE EXCEPTION 'jobq: permission denied for worker %', worker
            USING ERRCODE = '42501',
                  DETAIL = format('The worker belongs to role %s.', v_owner),
                  HINT = 'Only the role that registered a worker, and members of jobq_admin, may act for it.';
    END IF;
END $$;

-- The refusal of a call naming `worker` that found no live worker the caller may act for:
-- 42501 for another role's worker, JQ001 (unknown or dead) otherwise.
CREATE FUNCTION jobq._refuse_worker(worker uuid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._refuse_foreign_worker(worker);
    PERFORM jobq._unknown_worker(worker);
END $$;

-- Checks that `worker` is registered, alive and the caller's to act for (42501 or JQ001
-- otherwise, jobq._refuse_worker) and holds a KEY SHARE lock on its row until the caller's
-- transaction ends, so a concurrent reap pass cannot remove the worker while the caller is
-- giving it locks.
CREATE FUNCTION jobq._live_worker(worker uuid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM 1 FROM jobq.workers w
      WHERE w.id = worker AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)
        AND jobq._may_act_for(w.owner)
      FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_worker(worker);
    END IF;
END $$;

-- True when `worker` is gone or dead, judged on its newest committed row: the FOR SHARE
-- lock waits out a heartbeat in flight and makes a later heartbeat wait for the caller, so
-- a worker is never declared dead while its own heartbeat is told it lives.
CREATE FUNCTION jobq._worker_dead(worker uuid) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_alive boolean;
BEGIN
    SELECT jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start) INTO v_alive
      FROM jobq.workers w WHERE w.id = worker FOR SHARE;
    RETURN NOT coalesce(v_alive, false);
END $$;

-- Registers worker `worker` (an id the caller chose): the body of jobq_register_worker, and
-- what the proxy extension (jobq_proxy, proxy/) calls on every node so that one worker has one
-- id everywhere (the contract, Scale-out). An id that exists already is refused by the primary key
-- (23505), whoever owns it: choosing an id grants nothing.
CREATE FUNCTION jobq._register_worker(worker uuid, name text, metadata jsonb, bind_to_session boolean)
RETURNS uuid LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
BEGIN
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    ELSIF bind_to_session IS NULL THEN
        RAISE EXCEPTION 'jobq: bind_to_session must not be NULL' USING ERRCODE = '22004';
    ELSIF NOT jobq._may_act_for(jobq._caller()) THEN
        -- A login limited to some queues that set another role (src/privileges.rs).
        RAISE EXCEPTION 'jobq: a session whose login role % is limited to some queues registers workers as that role', session_user
            USING ERRCODE = '42501', HINT = 'RESET ROLE, then register.';
    END IF;
    INSERT INTO jobq.workers (id, owner, name, metadata, registered_at, heartbeat_at, backend_pid, backend_start)
    SELECT worker, jobq._caller(), _register_worker.name, coalesce(metadata, '{}'), v_now, v_now, a.pid, a.backend_start
      FROM (SELECT NULL::integer AS pid, NULL::timestamptz AS backend_start WHERE NOT bind_to_session
            UNION ALL
            SELECT s.pid, s.backend_start FROM pg_stat_get_activity(pg_backend_pid()) s WHERE bind_to_session) a;
    RETURN worker;
END $$;

CREATE FUNCTION jobq_register_worker(name text DEFAULT NULL, metadata jsonb DEFAULT '{}', bind_to_session boolean DEFAULT false)
RETURNS uuid LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT jobq._register_worker(gen_random_uuid(), name, metadata, bind_to_session);
$$;

-- With `holding`, the worker's executing jobs that it does not list go back to the queue as
-- interrupted (jobq._return_jobs, as the reaper does): a checkout whose reply never reached
-- the worker, or a job whose thread died, does not stay executing while the worker lives on.
CREATE FUNCTION jobq_heartbeat(worker uuid, holding bigint[] DEFAULT NULL) RETURNS bigint[]
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

-- Leaving 'executing' or 'ready' for `new_state`: frees the job's execution slots and
-- releases or keeps its unique key as its strategy says. A job that waits again with an
-- until_executing key takes the key back if it is free; if another job took the key in the
-- meantime, it waits without it (it is not dropped: no job is lost). Returns the number of
-- execution slots it freed.
CREATE FUNCTION jobq._release_keys(job bigint, queue text, new_state text, unique_key text,
                                   unique_strategy text, concurrency_key text, concurrency_slot integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_freed integer := 0;  -- execution slots freed: a concurrency slot, a while_executing key's
    v_noted boolean;
BEGIN
    -- A freed slot may let a waiting job of any queue start: each is noted for the waiting
    -- checkouts its key held back (src/waits.rs), rung at commit. (Assignments: see
    -- jobq._complete.)
    IF concurrency_slot IS NOT NULL THEN
        DELETE FROM jobq.slots s
         WHERE s.ns = 'c' AND s.key = concurrency_key AND s.slot = concurrency_slot AND s.job_id = job;
        IF FOUND THEN
            v_freed := 1;
            v_noted := jobq._freed('c' || concurrency_key);
        END IF;
    END IF;
    IF unique_key IS NULL THEN
        RETURN v_freed;
    ELSIF unique_strategy = 'while_executing' THEN
        DELETE FROM jobq.slots s
         WHERE s.ns = 'u' AND s.key = unique_key AND s.slot = 1 AND s.job_id = job;
        IF FOUND THEN
            v_freed := v_freed + 1;
            v_noted := jobq._freed('u' || unique_key);
        END IF;
    ELSIF new_state IN ('completed', 'dead', 'cancelled') THEN
        DELETE FROM jobq.locks l WHERE l.key = unique_key AND l.job_id = job;
    ELSIF new_state = 'ready' AND unique_strategy = 'until_executing' THEN
        PERFORM jobq._take_key(unique_key, job);
    END IF;
    RETURN v_freed;
END $$;

-- Returns jobs `ids` of `worker` to the queue, those of them still executing under it. Each
-- caller picks the ids and how they are locked (the reaper takes them SKIP LOCKED, so it
-- never waits for a row another transaction holds). interrupted => true is the reaper's way
-- (the attempt counts, interrupted_at is set, attempts exhausted make the job dead); false
-- is a graceful unregister (the attempt is given back). A job whose cancellation was
-- requested becomes cancelled either way.
CREATE FUNCTION jobq._return_jobs(worker uuid, interrupted boolean, ids bigint[],
                                  OUT requeued integer, OUT dead integer)
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    r     record;
BEGIN
    requeued := 0;
    dead := 0;
    FOR r IN
        UPDATE jobq.live_jobs j SET
            state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                         WHEN interrupted AND j.attempt >= j.max_attempts THEN 'dead'
                         ELSE 'ready' END,
            attempt = CASE WHEN interrupted OR j.cancel_requested_at IS NOT NULL THEN j.attempt
                           ELSE j.attempt - 1 END,
            interrupted_at = CASE WHEN interrupted THEN v_now ELSE j.interrupted_at END,
            errors = CASE WHEN interrupted
                          THEN jobq._add_error(j.errors, jsonb_build_object('attempt', j.attempt, 'at', v_now, 'interrupted', true))
                          ELSE j.errors END,
            finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL
                                 OR (interrupted AND j.attempt >= j.max_attempts) THEN v_now END
         WHERE j.id = ANY (ids) AND (CASE WHEN j.state = 'executing' THEN j.worker_id END) = worker  -- primary key only (finish.sql)
        RETURNING j.id, j.state, j.queue, j.unique_key, j.unique_strategy, j.concurrency_key,
                  j.concurrency_slot
    LOOP
        PERFORM jobq._release_keys(r.id, r.queue, r.state, r.unique_key, r.unique_strategy,
                                   r.concurrency_key, r.concurrency_slot);
        -- The dashboard's counters (src/counters.rs): an interrupted attempt failed (its run
        -- time, up to the reap, is not measured); a given-back one did not count.
        IF interrupted THEN
            PERFORM jobq._tally(r.queue, 'failed', NULL, v_now);
        END IF;
        IF r.state = 'dead' THEN
            PERFORM jobq._tally(r.queue, 'dead', NULL, v_now);
        END IF;
        IF r.state = 'ready' THEN
            PERFORM jobq._enter_ready(ARRAY[r.id]);
            requeued := requeued + 1;
            PERFORM jobq._notify(r.queue);
        ELSE
            PERFORM jobq._archive(ARRAY[r.id]);
            dead := dead + (r.state = 'dead')::integer;
        END IF;
    END LOOP;
END $$;

CREATE FUNCTION jobq_unregister_worker(worker uuid) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_requeued integer;
BEGIN
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    -- Same lock order as the reaper (worker row, then its jobs): one of the two wins.
    PERFORM 1 FROM jobq.workers w
      WHERE w.id = worker AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)
        AND jobq._may_act_for(w.owner)
      FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_worker(worker);
    END IF;
    SELECT r.requeued INTO v_requeued FROM jobq._return_jobs(worker, false, ARRAY(
        SELECT j.id FROM jobq.live_jobs j WHERE j.worker_id = worker AND j.state = 'executing')) r;
    DELETE FROM jobq.locks l WHERE l.worker_id = worker;
    DELETE FROM jobq.workers w WHERE w.id = worker;
    RETURN v_requeued;
END $$;

-- The first step of a graceful shutdown (an addition to the contract): the worker's checkouts claim nothing
-- more. One waiting now (jobq_checkout with `wait`), in any session, returns at once with no
-- job once this transaction commits (rung through src/waits.rs; without the preload within its
-- 100 ms poll), and every later checkout of the worker (jobq_complete_and_checkout's included)
-- returns none, until the worker unregisters. A client stops its idle worker with it from a
-- second connection instead of cancelling the waiting statement, so a clean shutdown logs no
-- error. Its jobs, heartbeats, completions and failures are untouched. Worker rules as
-- jobq_heartbeat: 22004, 42501, JQ001.
CREATE FUNCTION jobq_stop_checkouts(worker uuid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    UPDATE jobq.workers w SET stopping_at = coalesce(w.stopping_at, clock_timestamp())
     WHERE w.id = worker AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)
       AND jobq._may_act_for(w.owner);
    IF NOT FOUND THEN
        PERFORM jobq._refuse_worker(worker);
    END IF;
    PERFORM jobq._stop_checkouts(worker);
END $$;
