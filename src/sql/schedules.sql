-- Recurring jobs: jobq_schedule, jobq_unschedule, the view jobq.schedules, and
-- jobq._enqueue_due_ticks, which every reap pass runs (the background worker's, or any
-- jobq_reap() call). When ticks fall is src/schedules.rs (jobq._cron_next, jobq._cron_latest).
--
-- Exactly one job per tick: a schedule's row says which tick comes next (next_run_at). A pass
-- locks each due row with SKIP LOCKED, enqueues its due ticks and moves next_run_at past them
-- in the same transaction, so a tick's job and the row's move commit together or not at all:
-- a concurrent pass skips the row (or, once it is committed, sees it no longer due), a crash
-- before the commit leaves neither, and a standby promoted after a failover has both or
-- neither, as it has every other row.

CREATE TABLE jobq.crontab (
    name          text PRIMARY KEY,
    cron          text NOT NULL,
    time_zone     text NOT NULL,
    queue         text NOT NULL,
    payload       jsonb NOT NULL,
    kind          text,
    priority      integer NOT NULL,
    max_attempts  integer NOT NULL,
    catch_up      boolean NOT NULL,
    next_run_at   timestamptz NOT NULL,    -- the next tick to enqueue
    last_run_at   timestamptz,             -- the last tick enqueued
    updated_at    timestamptz NOT NULL
);
CREATE INDEX crontab_due ON jobq.crontab (next_run_at);
SELECT pg_catalog.pg_extension_config_dump('jobq.crontab', '');

CREATE VIEW jobq.schedules WITH (security_barrier) AS
SELECT c.name, c.cron, c.time_zone, c.queue, c.kind, c.next_run_at, c.last_run_at,
       c.payload, c.priority, c.max_attempts, c.catch_up
  FROM jobq.crontab c
 -- a limited role's queues (src/sql/grants.sql)
 WHERE (SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(c.queue, (SELECT jobq._patterns('reader')));

-- Enqueues the due ticks of schedule `s` (its row locked by the caller) up to `now` — all
-- of them with catch_up, else only the latest — and moves the row past them. At most 1,000
-- per call: a schedule further behind (catch_up after a
-- long downtime) goes on in the next passes, so no pass becomes a long transaction.
CREATE FUNCTION jobq._enqueue_ticks(s jobq.crontab, now timestamptz) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_tick  timestamptz := s.next_run_at;
    v_last  timestamptz := s.last_run_at;
    v_n     integer := 0;
BEGIN
    IF NOT s.catch_up THEN
        v_tick := greatest(v_tick, jobq._cron_latest(s.cron, s.time_zone, now));
    END IF;
    WHILE v_tick <= now AND v_n < 1000 LOOP
        -- Unchecked: a schedule's queue was chosen by jobq_admin, and the pass that enqueues its
        -- ticks may run in any worker's session (the SQL edition's heartbeats), limited or not.
        PERFORM jobq._enqueue(s.queue, s.payload, s.kind, s.priority, v_tick, s.max_attempts, NULL,
                              'until_executed', 'reject', NULL, 1, NULL, NULL, 'cancel', checked => false);
        v_last := v_tick;
        v_n := v_n + 1;
        v_tick := jobq._cron_next(s.cron, s.time_zone, v_tick);
    END LOOP;
    UPDATE jobq.crontab c SET next_run_at = v_tick, last_run_at = v_last WHERE c.name = s.name;
END $$;

-- The reap pass's part: every due schedule that no other transaction holds. A schedule whose
-- enqueue fails is logged and left for the next pass; under REPEATABLE READ a row another
-- pass moved since this transaction's snapshot ends this step (40001 caught) and the next
-- pass goes on.
CREATE FUNCTION jobq._enqueue_due_ticks(now timestamptz) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    s  jobq.crontab;
BEGIN
    BEGIN
        FOR s IN
            SELECT c.* FROM jobq.crontab c WHERE c.next_run_at <= now ORDER BY c.next_run_at
               FOR UPDATE SKIP LOCKED
        LOOP
            BEGIN
                PERFORM jobq._enqueue_ticks(s, now);
            EXCEPTION WHEN serialization_failure THEN
                RAISE;  -- ends this step (below)
            WHEN OTHERS THEN
                RAISE WARNING 'jobq: schedule "%" failed to enqueue: % (SQLSTATE %); a later pass retries',
                    s.name, SQLERRM, SQLSTATE;
            END;
        END LOOP;
    EXCEPTION WHEN serialization_failure THEN
        NULL;
    END;
END $$;

CREATE FUNCTION jobq_schedule(
    name          text,
    cron          text,
    queue         text,
    payload       jsonb   DEFAULT '{}',
    kind          text    DEFAULT NULL,
    priority      integer DEFAULT 0,
    max_attempts  integer DEFAULT 25,
    time_zone     text    DEFAULT 'UTC',
    catch_up      boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_next  timestamptz;
    s       jobq.crontab;
BEGIN
    IF name IS NULL OR cron IS NULL OR queue IS NULL OR payload IS NULL OR priority IS NULL
       OR max_attempts IS NULL OR time_zone IS NULL OR catch_up IS NULL THEN
        RAISE EXCEPTION 'jobq: name, cron, queue, payload, priority, max_attempts, time_zone and catch_up must not be NULL'
            USING ERRCODE = '22004';
    ELSIF name = '' OR queue = '' THEN
        RAISE EXCEPTION 'jobq: name and queue must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(name) > 1000 OR octet_length(queue) > 1000 OR octet_length(kind) > 1000 THEN
        RAISE EXCEPTION 'jobq: name, queue and kind must be at most 1000 bytes' USING ERRCODE = '22023';
    ELSIF max_attempts < 1 THEN
        RAISE EXCEPTION 'jobq: max_attempts must be at least 1, got %', max_attempts USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._cron_next(cron, time_zone, v_now);  -- 22023 for a bad expression or zone
    -- Replacing takes effect from the next tick: what the old definition made due before
    -- this call is enqueued first, as the next pass would have. The time is read once the
    -- row is ours: a pass that moved the row while we waited enqueued ticks up to its own
    -- time, and the next tick is computed from a later one.
    SELECT c.* INTO s FROM jobq.crontab c WHERE c.name = jobq_schedule.name FOR UPDATE;
    v_now := clock_timestamp();
    IF s.next_run_at <= v_now THEN  -- (NULL when there was no such schedule)
        PERFORM jobq._enqueue_ticks(s, v_now);
    END IF;
    v_next := jobq._cron_next(cron, time_zone, v_now);
    INSERT INTO jobq.crontab AS c (name, cron, time_zone, queue, payload, kind, priority, max_attempts,
                                   catch_up, next_run_at, updated_at)
    VALUES (name, cron, time_zone, queue, payload, kind, priority, max_attempts, catch_up, v_next, v_now)
    ON CONFLICT ON CONSTRAINT crontab_pkey DO UPDATE
       SET cron = EXCLUDED.cron, time_zone = EXCLUDED.time_zone, queue = EXCLUDED.queue,
           payload = EXCLUDED.payload, kind = EXCLUDED.kind, priority = EXCLUDED.priority,
           max_attempts = EXCLUDED.max_attempts, catch_up = EXCLUDED.catch_up,
           next_run_at = EXCLUDED.next_run_at, updated_at = EXCLUDED.updated_at;
END $$;

CREATE FUNCTION jobq_unschedule(name text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'jobq: name must not be NULL' USING ERRCODE = '22004';
    END IF;
    DELETE FROM jobq.crontab c WHERE c.name = jobq_unschedule.name;
    RETURN FOUND;
END $$;
