-- Twin of src/bgworker.rs's `_serve_database`: there is no background worker to tell; the
-- passes are run by pg_cron (jobq_schedule_passes) or by the client libraries' workers
-- (src/sql/twins/edition.sql).
CREATE FUNCTION jobq._serve_database() RETURNS boolean
LANGUAGE plpgsql STRICT VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$ BEGIN RETURN true; END $$;

-- Twin of `_pass_if_due`, called by every heartbeat: with no pg_cron and no background worker,
-- the workers that beat run the passes. One pass when the last one (by anyone: a heartbeat,
-- pg_cron, jobq_reap) ended more than jobq.reap_interval ago and no other heartbeat is running
-- one; its errors are logged, never the heartbeat's (jobq._reap_pass). The pass judges and
-- prunes every role's workers and jobs: it runs with the guarded settings (jobq._guarded_setting),
-- set for the rest of the heartbeat's transaction, not with what the beating role set itself.
CREATE FUNCTION jobq._pass_if_due() RETURNS void
LANGUAGE plpgsql STRICT VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_set text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM jobq.last_pass p
                    WHERE p.ended_at > clock_timestamp() - jobq._guarded_setting('jobq.reap_interval', '1 s'))
       AND pg_try_advisory_xact_lock(1785684593, hashtext('jobq.pass')) THEN
        -- (Assignments, not PERFORM: PL/pgSQL evaluates them without starting a plan.)
        v_set := set_config('jobq.heartbeat_timeout', jobq._guarded_setting('jobq.heartbeat_timeout', '30 s')::text, true);
        v_set := set_config('jobq.retention', jobq._guarded_setting('jobq.retention', '1 day')::text, true);
        PERFORM jobq._reap_pass();
    END IF;
END $$;
