-- Twins of src/gucs.rs. The extension defines the jobq.* settings; here they are custom
-- settings (ALTER DATABASE app SET jobq.retention = '2 days'), read at each call, the
-- contract's defaults when unset. A value is an interval ('30s', '1 day'): a bare number is
-- seconds, where the extension reads milliseconds for jobq.heartbeat_timeout and
-- jobq.reap_interval (docs/sql-edition.md says to give the unit; reading it here would cost
-- every job's path some 20,000 instructions, measured).
-- Plain SQL without settings, inlined into the calling statement (each is on a job's path).
CREATE FUNCTION jobq._setting(name text, fallback interval) RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(nullif(pg_catalog.current_setting(name, true), '')::interval, fallback)
$$;

-- A setting that decides over other roles' workers and jobs: jobq.heartbeat_timeout (who is
-- dead), jobq.retention (what the pass prunes), jobq.reap_interval (how often heartbeats run
-- passes). In the extension only the server's file or a superuser sets them (src/gucs.rs);
-- here a custom setting is any role's to SET for its own session (a role's default, ALTER ROLE
-- ... SET, is a superuser's to give). So the caller's value holds as it is for a superuser or a
-- member of jobq_admin; otherwise it counts only where it is longer than the value the session
-- would have without its own SET (RESET, undone at once: the server's file, the database's,
-- the role's): what a role sets for itself may make jobq slower to judge and prune, never
-- quicker. (PostgreSQL shows no source for a custom setting, so a connection's options count
-- as the server's: docs/sql-edition.md.) Read only
-- where another role's worker or job is judged (jobq.worker_alive, when the caller's own value
-- finds a worker dead; jobq._pass_if_due, at each heartbeat), never on a job's path.
CREATE FUNCTION jobq._guarded_setting(name text, fallback interval) RETURNS interval
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_own   interval := jobq._setting(name, fallback);
    v_base  interval;
BEGIN
    IF pg_catalog.current_setting('is_superuser') = 'on'
       OR pg_catalog.pg_has_role(jobq._caller(), 'jobq_admin', 'MEMBER') THEN
        RETURN v_own;
    END IF;
    BEGIN
        EXECUTE 'RESET ' || name;  -- (one of the three names above, never the caller's text)
        v_base := jobq._setting(name, fallback);
        RAISE EXCEPTION USING ERRCODE = 'JQ0RS';  -- undoes the RESET
    EXCEPTION WHEN SQLSTATE 'JQ0RS' THEN
        NULL;
    END;
    RETURN greatest(v_own, v_base);
END $$;

CREATE FUNCTION jobq.retention_ms() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (pg_catalog.date_part('epoch', jobq._setting('jobq.retention', '1 day')) * 1000)::bigint
$$;

-- Compaction needs shared memory (src/compact.rs): never, here.
CREATE FUNCTION jobq.compact_after() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT 0::bigint $$;
