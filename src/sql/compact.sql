-- Compaction of the hot tables (docs/internals.md, "Compaction"; the safety of it for every other
-- transaction is in src/compact.rs).
--
-- While a transaction elsewhere holds the xmin horizon (an idle `BEGIN`, a report, a replication
-- slot catching up), every version a job leaves in jobq.live_jobs and jobq.ready (and a keyed
-- job's attempt in jobq.slots) stays, vacuum cannot remove it, and the tables grow by every job
-- that runs. TRUNCATE removes a table's rows whatever snapshot is held. So once these hot
-- tables hold `min_dead` dead versions and four times as many as live rows, while something has
-- held the horizon for more than 10 s, jobq._compact, under an ACCESS EXCLUSIVE lock on the
-- three, copies their live rows out, truncates them and writes the rows back, unchanged (ids,
-- states, keys, slots, claim order): the tables are then the size of the work in flight again.
-- jobq.slots goes with the other two because every reader of it has locked jobq.ready or
-- jobq.live_jobs first in the same transaction (checkout, completion, fail, cancel, the
-- reaper's returns), so whatever holds off a compaction of those holds off one of it too.
--
-- What it costs and when it does not run:
-- - Every call of jobq's functions on these tables waits while it runs: for as long as copying
--   the live rows takes (measured: docs/performance.md, "Under a long transaction elsewhere"). So it does not
--   run with more than 100,000 live rows.
-- - It never waits long for its locks (`lock_wait` for the three together, 50 ms unless the
--   background worker's last tries missed them, and never more than half of deadlock_timeout;
--   the background worker tries again after 1 s, 2 s, 4 s … up to a minute, each time waiting
--   twice as long), and does not try
--   while a transaction that started more than a second ago (or a prepared one) holds a lock on
--   any of them (a REPEATABLE READ reader of them): TRUNCATE cannot run before it ends. Nor
--   while pg_dump is connected (jobq._dump_connected).
-- - Rows visible to a snapshot taken before the truncation are not visible to it afterwards
--   (TRUNCATE is not MVCC-safe): jobq's functions guard against it (jobq._hold_hot_tables), but a
--   REPEATABLE READ transaction of a client that reads jobq.jobs, jobq.live_jobs or
--   jobq.concurrency_slots directly sees no live job (no slot in use) after a compaction
--   committed since its snapshot.
-- min_dead = 0 compacts now, whatever the tables hold (tests, an operator).
-- pg_dump takes its snapshot first and locks the tables it dumps after: a compaction
-- committed in between would leave the queue's live jobs and their slots out of the dump (and
-- keep their unique keys, jobq.locks, in it). It names itself (application_name 'pg_dump', and
-- pg_dumpall's 'pg_dumpall') unless told otherwise. Reads the sessions anew, not this
-- transaction's copy.
CREATE FUNCTION jobq._dump_connected() RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM pg_stat_clear_snapshot();
    RETURN EXISTS (SELECT 1 FROM pg_stat_activity a
                    WHERE a.datname = current_database() AND a.application_name LIKE 'pg\_dump%');
END $$;

-- True: compacted. False: nothing to do (or not now: a condition above). NULL: its locks (of
-- the three tables, and those its TRUNCATE takes) were not granted within `lock_wait`.
-- It sets lock_timeout for its own locks; the SET clause restores the caller's at its return.
CREATE FUNCTION jobq._compact(min_dead bigint, lock_wait interval DEFAULT '50 ms') RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp SET lock_timeout = 0 AS $$
DECLARE
    v_live     jobq.live_jobs[];
    v_ready    jobq.ready[];
    v_slots    jobq.slots[];
    v_dead     bigint;
    v_rows     bigint;
    v_before   bigint;
    v_start    timestamptz;
    v_until    timestamptz;
    v_table    regclass;
    -- The hot tables, in the order they are locked (checkout's).
    v_tables   regclass[] := ARRAY['jobq.ready'::regclass, 'jobq.live_jobs'::regclass, 'jobq.slots'::regclass];
BEGIN
    -- Its copy must see every row committed before it got its lock: a statement's snapshot
    -- taken after the LOCK, which only READ COMMITTED gives (a transaction snapshot taken
    -- before it would miss rows, and the TRUNCATE would lose them).
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobq: compaction needs READ COMMITTED' USING ERRCODE = '0A000';
    END IF;
    IF min_dead > 0 THEN
        SELECT sum(pg_stat_get_dead_tuples(t)), sum(pg_stat_get_live_tuples(t)) INTO v_dead, v_rows
          FROM unnest(v_tables) t;
        IF v_dead < greatest(min_dead, 4 * v_rows) OR v_rows > 100000 THEN
            RETURN false;
        END IF;
        -- Only where vacuum cannot do it: something has held the xmin horizon for more than
        -- 10 s (a replication slot or a prepared transaction for any time). Without that, the
        -- dead versions are autovacuum's, however many pile up between its visits.
        IF NOT EXISTS (SELECT 1 FROM jobq._oldest_horizon() h
                        WHERE h.xact_age IS NULL OR h.xact_age > interval '10 seconds') THEN
            RETURN false;
        END IF;
        -- A prepared transaction's locks have no pid: they count as old.
        IF EXISTS (SELECT 1 FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
                    WHERE l.locktype = 'relation' AND l.granted
                      AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                      AND l.relation = ANY (v_tables::oid[])
                      AND l.pid IS DISTINCT FROM pg_backend_pid()
                      AND (l.pid IS NULL OR a.xact_start < clock_timestamp() - interval '1 second')) THEN
            RETURN false;
        END IF;
        IF jobq._dump_connected() THEN
            RETURN false;
        END IF;
    END IF;
    -- In checkout's order (jobq.ready, jobq.live_jobs, then jobq.slots), and never waiting as
    -- long as the deadlock detector would: every call that comes meanwhile queues behind this
    -- request, and one that waited deadlock_timeout would run the detector and could be picked.
    -- One budget for the three (lock_timeout counts each wait on its own): each table gets
    -- what the ones before it left. A lock not granted in time is NULL, tried again later.
    v_until := clock_timestamp() + least(coalesce(lock_wait, interval '50 ms'),
                                         current_setting('deadlock_timeout')::interval / 2);
    BEGIN
        FOREACH v_table IN ARRAY v_tables LOOP
            PERFORM set_config('lock_timeout',
                greatest(1, extract(epoch FROM v_until - clock_timestamp()) * 1000)::integer || 'ms', true);
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_table);
        END LOOP;
    EXCEPTION WHEN lock_not_available THEN
        RETURN NULL;
    END;
    -- Once more under the lock: a pg_dump that connected since the look above may have taken
    -- its snapshot already (a narrow window remains: one that connects from here to the commit).
    IF min_dead > 0 AND jobq._dump_connected() THEN
        RETURN false;
    END IF;
    v_start := clock_timestamp();
    -- Before the truncation, under the lock: whoever locks the tables next reads it.
    IF NOT jobq._note_compaction() THEN
        RAISE EXCEPTION 'jobq: compaction needs jobq in shared_preload_libraries'
            USING ERRCODE = '55000';
    END IF;
    v_before := (SELECT sum(pg_total_relation_size(t)) FROM unnest(v_tables) t);
    SELECT array_agg(j) INTO v_live FROM jobq.live_jobs j;
    SELECT array_agg(r) INTO v_ready FROM jobq.ready r;
    SELECT array_agg(s) INTO v_slots FROM jobq.slots s;
    -- TRUNCATE locks what LOCK TABLE cannot name, each table's TOAST table and indexes (which
    -- autovacuum locks on their own), within what is left of the budget: not granted in time,
    -- the compaction gives up as above. (Its note stays: a compaction that did not commit, as
    -- one that failed later would leave, which at worst sends an older snapshot's reader to
    -- retry with 40001.)
    BEGIN
        TRUNCATE jobq.live_jobs, jobq.ready, jobq.slots;
    EXCEPTION WHEN lock_not_available THEN
        RETURN NULL;
    END;
    INSERT INTO jobq.live_jobs SELECT * FROM unnest(v_live);
    INSERT INTO jobq.slots SELECT * FROM unnest(v_slots);
    -- ready's stored queue_hash is computed again, not copied.
    INSERT INTO jobq.ready (queue, priority, run_at, id, kind, keyed, concurrency_key,
                            concurrency_limit, while_key, rate_key, fairness_key)
    SELECT r.queue, r.priority, r.run_at, r.id, r.kind, r.keyed, r.concurrency_key,
           r.concurrency_limit, r.while_key, r.rate_key, r.fairness_key
      FROM unnest(v_ready) r;
    RAISE LOG 'jobq: compacted the hot tables in % ms: % jobs kept, % MB before, % MB after',
        round(extract(epoch FROM clock_timestamp() - v_start) * 1000, 1),
        coalesce(array_length(v_live, 1), 0), round(v_before / 1048576.0, 1),
        round((SELECT sum(pg_total_relation_size(t)) FROM unnest(v_tables) t) / 1048576.0, 1);
    RETURN true;
END $$;

-- The background worker's call, after each reap pass, in a transaction of its own: a failure is
-- logged and never stops the reaper.
-- 1: compacted; 0: nothing to do; -1: it could not (its lock not granted in time, or an
-- error): the background worker then waits longer before the next try (src/bgworker.rs).
-- `missed`: how many tries in a row could not. Each waits twice as long for the locks as the
-- one before (50 ms, 100 ms, 200 ms …, at most half of deadlock_timeout): where the tables'
-- other transactions take longer than 50 ms (a bulk enqueue of thousands of jobs, or checkouts
-- already slowed by the dead versions a compaction would remove), a fixed 50 ms may never be
-- granted, and the tables would grow while the horizon is held.
CREATE FUNCTION jobq._compact_pass(missed integer DEFAULT 0) RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_after bigint := jobq.compact_after();
    v_done  boolean;
BEGIN
    IF v_after <= 0 THEN
        RETURN 0;
    END IF;
    v_done := jobq._compact(v_after, interval '50 ms' * power(2, least(coalesce(missed, 0), 10)));
    RETURN CASE WHEN v_done THEN 1 WHEN NOT v_done THEN 0 ELSE -1 END;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'jobq reaper: compaction failed: % (SQLSTATE %)', SQLERRM, SQLSTATE;
    RETURN -1;
END $$;
