-- Twins of src/waits.rs: jobq_checkout(..., wait) without shared memory.
--
-- What makes a job available rings a bell at its commit: a deferred constraint trigger
-- (src/sql/twins/edition.sql, jobq._ring) on the tables whose changes free a job (a row made
-- ready, a slot freed, a pause lifted, a rate limit changed, a worker told to stop) takes the
-- next value of the sequence jobq.rings, once per row changed, as it commits. The waiting calls
-- learn that it moved from one of them, the leader, which reads it every 10 ms (one page, no
-- lock) while the others sleep on an advisory lock it holds, and lets go of the lock to wake
-- them all when it moved (jobq._doze). So 64 idle waiting calls cost the server 100 wake-ups a
-- second, as one does (bench/results/wait-sql.md).
-- A ring comes just before its commit becomes visible (the WAL flush lies between), so the
-- look it causes may miss it: a call that saw a ring looks once more 10 ms later.
-- A ring is for every waiting call of the database; before a whole look (a checkout), a call
-- asks one index probe whether it could find anything: a due waiting job of its queues, one that
-- comes due before the call's alarm (the look then sets the alarm at it), or its worker told
-- to stop. When a job is there, the first call to look takes it and the others,
-- whose probes come after its commit, sleep on.
-- A waiting call holds an advisory lock named after its worker for the rest of its transaction:
-- jobq._waiting_workers() finds it, and the reap pass refreshes that worker's heartbeat (a
-- worker counts as alive while it waits), as the extension's does.
-- Unlike the extension's, a waiting call keeps its statement's snapshot: PL/pgSQL cannot let
-- go of it (docs/sql-edition.md).
CREATE SEQUENCE jobq.rings AS bigint CYCLE;

-- The sequence's last ring, as text ('0' before the first). A plain expression
-- (pg_sequence_last_value, not a query on the sequence), which a PL/pgSQL caller evaluates
-- without the executor; no pinned search_path (everything in it is qualified), so that it is
-- inlined there.
CREATE FUNCTION jobq._rung() RETURNS text
LANGUAGE sql VOLATILE AS $$ SELECT coalesce(pg_catalog.pg_sequence_last_value('jobq.rings'::pg_catalog.regclass), 0)::pg_catalog.text $$;

-- The advisory lock of a waiting worker: class 'jobq' (as jobq._take_slot's), then the worker.
CREATE FUNCTION jobq._waiter_key(worker uuid) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN hashtext('waiting ' || worker::text);
END $$;

CREATE FUNCTION jobq._wait_begin(worker uuid, queues text[]) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1785684593, jobq._waiter_key(worker));
    PERFORM set_config('jobq.rung', jobq._rung(), true);
    PERFORM set_config('jobq.relook', '', true);
    PERFORM set_config('jobq.waiter', worker::text, true);
    PERFORM set_config('jobq.wait_queues', coalesce(queues::text, ''), true);
    RETURN true;
END $$;

-- Whether a look could find anything: a due waiting job of the call's queues, or its worker
-- told to stop; or one that comes due before `alarm`, the end of the wait as the last look set
-- it (a job failed with a retry delay, or scheduled): the look sets the alarm at it, as a
-- commit moves the extension's.
CREATE FUNCTION jobq._worth_a_look(alarm timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_queues text[] := nullif(current_setting('jobq.wait_queues', true), '')::text[];
BEGIN
    -- (Jobs without a fairness key through ready_by_queue, those with one through ready_fair.)
    RETURN EXISTS (SELECT 1 FROM jobq.ready r
                    WHERE r.fairness_key IS NULL
                      AND r.run_at < greatest(alarm, clock_timestamp() + interval '1 microsecond')
                      AND (v_queues IS NULL
                           OR (r.queue_hash = ANY (ARRAY(SELECT hashtext(q) FROM unnest(v_queues) q))
                               AND r.queue = ANY (v_queues))))
        OR EXISTS (SELECT 1 FROM jobq.ready r
                    WHERE r.fairness_key IS NOT NULL
                      AND r.run_at < greatest(alarm, clock_timestamp() + interval '1 microsecond')
                      AND (v_queues IS NULL
                           OR (r.queue_hash = ANY (ARRAY(SELECT hashtext(q) FROM unnest(v_queues) q))
                               AND r.queue = ANY (v_queues))))
        OR EXISTS (SELECT 1 FROM jobq.workers w
                    WHERE w.id = current_setting('jobq.waiter')::uuid AND w.stopping_at IS NOT NULL);
END $$;

-- Returns when the sequence jobq.rings moved from `seen`, or at `until`, and costs the server one
-- wake-up every 10 ms for all the waiting calls of the database together. The first call to
-- take the advisory lock (class 'jobq', 0) leads: it reads the sequence every 10 ms, holding the
-- lock. Every other call waits for the lock, shared, and so sleeps until the leader lets go of
-- it: when the sequence moved, at the leader's own end, or when its session ends or fails
-- (and it wakes just before deadlock_timeout, to wait anew: so the server runs no deadlock
-- check for it and, with log_lock_waits on, logs nothing). The lock is taken in a block that
-- ends by an exception (JQ000), which rolls the block's subtransaction back: that lets go of the
-- lock (an advisory lock of the transaction otherwise lasts until it ends) and of the
-- lock_timeout set inside it, so nothing outlives the call. The leader waits for no lock while
-- it holds this one, so no deadlock can run through it. A call that got the lock shared at once
-- (no leader: another call let go of it a moment ago) sleeps 5 ms and tries to lead again.
CREATE FUNCTION jobq._doze(seen text, until timestamptz) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_left   double precision;
    v_asked  timestamptz;
    v_void   text;
BEGIN
    LOOP
        v_left := extract(epoch FROM until - clock_timestamp());
        EXIT WHEN v_left <= 0;
        BEGIN
            IF pg_try_advisory_xact_lock(1785684593, 0) THEN
                -- Simple expressions, not queries (PERFORM, SELECT): the poll costs no executor.
                WHILE jobq._rung() = seen
                      AND clock_timestamp() < until LOOP
                    v_void := pg_sleep(least(0.01, greatest(0, extract(epoch FROM until - clock_timestamp()))))::text;
                END LOOP;
                RAISE SQLSTATE 'JQ000';
            END IF;
            -- Woken at the latest just before deadlock_timeout, when the server would run its
            -- deadlock check for this wait and, with log_lock_waits on, log it.
            PERFORM set_config('lock_timeout', ceil(least(v_left * 1000,
                greatest(10, 0.9 * extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1000)))::bigint::text, true);
            v_asked := clock_timestamp();
            PERFORM pg_advisory_xact_lock_shared(1785684593, 0);
            RAISE SQLSTATE 'JQ000';
        EXCEPTION WHEN SQLSTATE 'JQ000' OR lock_not_available THEN
            NULL;
        END;
        -- Led, or woken by the leader: the caller reads the sequence.
        EXIT WHEN v_asked IS NULL OR clock_timestamp() - v_asked > interval '1 ms';
        v_void := pg_sleep(0.005)::text;
        v_asked := NULL;
    END LOOP;
END $$;

-- Waits until a ring since the last look that a probe finds worth a look,
-- `due`, `opens`, `until`, or five seconds (the extension's net is one second; here each look of
-- 64 idle waiters a second would cost more than all their polls: bench/results/wait-sql.md); `keys`,
-- `rate` and `opening` are the extension's finer wake-ups, which a ring covers. A ring whose
-- probe finds nothing is probed again 10 ms later, in case its commit was not visible yet.
CREATE FUNCTION jobq._wait(until timestamptz, due timestamptz, keys text[] DEFAULT NULL, rate text DEFAULT NULL,
                           opens timestamptz DEFAULT NULL, opening integer DEFAULT 1)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_end     timestamptz := least(until, due, opens, clock_timestamp() + interval '5 seconds');
    v_seen    text := current_setting('jobq.rung', true);
    v_recheck boolean := current_setting('jobq.relook', true) = 'yes';
    v_now     text;
BEGIN
    LOOP
        IF v_recheck THEN
            PERFORM pg_sleep(0.01);
            v_recheck := false;
            IF jobq._worth_a_look(v_end) THEN
                PERFORM set_config('jobq.relook', '', true);
                RETURN;
            END IF;
        END IF;
        v_now := jobq._rung();
        IF v_now IS DISTINCT FROM v_seen THEN
            v_seen := v_now;
            PERFORM set_config('jobq.rung', v_now, true);
            -- Looked at now, and once more 10 ms later whatever this look finds.
            PERFORM set_config('jobq.relook', 'yes', true);
            IF jobq._worth_a_look(v_end) THEN
                RETURN;
            END IF;
            v_recheck := true;
            CONTINUE;
        END IF;
        PERFORM set_config('jobq.relook', '', true);
        EXIT WHEN clock_timestamp() >= v_end;
        PERFORM jobq._doze(v_seen, v_end);
    END LOOP;
END $$;

CREATE FUNCTION jobq._wait_end(took_nothing boolean) RETURNS void
LANGUAGE plpgsql STRICT VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$ BEGIN END $$;

-- The extension rings at commit what these note; here the triggers of edition.sql ring.
CREATE FUNCTION jobq._wake(queue text, run_at timestamptz, jobs bigint) RETURNS boolean
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$ SELECT true $$;

CREATE FUNCTION jobq._freed(key text) RETURNS boolean
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$ SELECT true $$;

CREATE FUNCTION jobq._stop_checkouts(worker uuid) RETURNS boolean
LANGUAGE plpgsql STRICT VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$ BEGIN RETURN true; END $$;

-- The workers whose checkouts wait now, in this database (their advisory locks).
CREATE FUNCTION jobq._waiting_workers() RETURNS uuid[]
LANGUAGE sql STRICT VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT coalesce(array_agg(w.id), '{}')
      FROM jobq.workers w
     WHERE EXISTS (SELECT 1 FROM pg_locks l
                    WHERE l.locktype = 'advisory' AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                      AND l.classid = 1785684593::oid AND l.objid = jobq._waiter_key(w.id)::oid
                      AND l.objsubid = 2 AND l.granted)
$$;
