-- What only the SQL edition has, after the shared SQL (scripts/build-sql-edition.py appends
-- it): the commit-time rings of waiting checkouts (src/sql/twins/waits.sql), and the passes
-- run by pg_cron.

-- Rings the bell of waiting checkouts (jobq.rings) at the commit of a transaction that changed
-- one of the rows below: a deferred constraint trigger runs as the transaction commits, as the
-- session's role, outside the jobq function that changed the row (hence SECURITY DEFINER).
-- Once per row: a leader that sees the sequence move wakes every waiting call, whether it moved
-- by one or by many. (Once per transaction, remembered in a setting, cost the common enqueue,
-- one row, some 23,000 instructions more: bench/instructions.sh, row jobq_sql_enqueue; a row
-- more of a batch costs a nextval either way.)
CREATE FUNCTION jobq._ring() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_rung bigint;
BEGIN
    v_rung := nextval('jobq.rings');  -- (an assignment, not PERFORM: no plan to start)
    RETURN NULL;
END $$;

-- What may make a job available to a waiting checkout: a row made ready (an enqueue, a retry,
-- a resume of a snoozed or blocked job), a slot freed, a pause lifted, a rate limit changed,
-- a worker told to stop (its waiting calls return).
CREATE CONSTRAINT TRIGGER ring_ready AFTER INSERT ON jobq.ready
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobq._ring();
CREATE CONSTRAINT TRIGGER ring_slots AFTER DELETE ON jobq.slots
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobq._ring();
CREATE CONSTRAINT TRIGGER ring_pauses AFTER DELETE ON jobq.pauses
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobq._ring();
CREATE CONSTRAINT TRIGGER ring_rate_limits AFTER INSERT OR UPDATE OR DELETE ON jobq.rate_limits
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobq._ring();
CREATE CONSTRAINT TRIGGER ring_stopping AFTER UPDATE OF stopping_at ON jobq.workers
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobq._ring();

-- The pg_cron job that runs this database's passes: its name, and its schedule for
-- jobq.reap_interval rounded up to whole seconds (pg_cron runs at most every second, and
-- every N seconds for N < 60; longer intervals become whole minutes).
CREATE FUNCTION jobq._passes_job() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT 'jobq passes: ' || current_database()
$$;

CREATE FUNCTION jobq._passes_schedule() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT CASE WHEN s <= 59 THEN s || ' seconds'
                WHEN s <= 59 * 60 THEN '*/' || ceil(s / 60.0)::integer || ' * * * *'
                ELSE '0 * * * *' END
      FROM (SELECT greatest(1, ceil(extract(epoch FROM jobq._setting('jobq.reap_interval', '1 s'))))::integer AS s) i
$$;

-- pg_cron 1.5 or later, in this database; otherwise 0A000 saying what to do instead.
CREATE FUNCTION jobq._require_pg_cron() RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_version text := (SELECT e.extversion FROM pg_extension e WHERE e.extname = 'pg_cron');
BEGIN
    IF v_version IS NULL THEN
        RAISE EXCEPTION 'jobq: pg_cron is not installed in database "%"', current_database()
            USING ERRCODE = '0A000',
                  HINT = format('Where pg_cron lives in another database (cron.database_name), run there: SELECT cron.schedule_in_database(%L, %L, %L, %L); or let the client libraries'' workers run the passes.',
                                jobq._passes_job(), jobq._passes_schedule(), 'SELECT jobq_reap()', current_database());
    END IF;
    -- (Its leading numbers only: pg_cron 1.4 installs as version '1.4-1'.)
    IF string_to_array(substring(v_version FROM '^[0-9]+(?:\.[0-9]+)*'), '.')::integer[] < ARRAY[1, 5] THEN
        RAISE EXCEPTION 'jobq: pg_cron % runs jobs at most once a minute; jobq''s passes need pg_cron 1.5 or later', v_version
            USING ERRCODE = '0A000';
    END IF;
END $$;

-- jobq_schedule_passes(): pg_cron runs jobq_reap() every jobq.reap_interval in this database,
-- as the role that installed jobq. Again: the schedule follows a changed jobq.reap_interval.
-- Returns pg_cron's job id.
CREATE FUNCTION jobq_schedule_passes() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._require_pg_cron();
    RETURN cron.schedule(jobq._passes_job(), jobq._passes_schedule(), 'SELECT jobq_reap()');
END $$;

-- jobq_unschedule_passes(): pg_cron stops running them. False when they were not scheduled.
CREATE FUNCTION jobq_unschedule_passes() RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._require_pg_cron();
    IF NOT EXISTS (SELECT 1 FROM cron.job j WHERE j.jobname = jobq._passes_job() AND j.username = current_user) THEN
        RETURN false;
    END IF;
    RETURN cron.unschedule(jobq._passes_job());
END $$;

REVOKE ALL ON FUNCTION jobq._ring(), jobq._passes_job(), jobq._passes_schedule(), jobq._require_pg_cron(),
    jobq_schedule_passes(), jobq_unschedule_passes() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq_schedule_passes(), jobq_unschedule_passes() TO jobq_admin;
-- jobq.health reads the last pass through jobq._last_pass, as its reader (src/sql/twins/health.sql).
GRANT SELECT ON jobq.last_pass TO jobq_reader;
