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
-- here a custom setting is any role's to set for its own session, connection or role. So the
-- caller's value holds as it is when the caller is a superuser or a member of jobq_admin, or
-- when it comes from the server's file or the database (ALTER DATABASE ... SET) or is unset;
-- otherwise the value is the larger of it and the database's (the default where the database
-- sets none): what a role sets for itself may make jobq slower to judge and prune, never
-- quicker. Read only where another role's worker or job is judged (jobq.worker_alive, when the
-- caller's own value finds a worker dead; jobq._pass_if_due, at each heartbeat): pg_settings
-- is read there, never on a job's path.
CREATE FUNCTION jobq._guarded_setting(name text, fallback interval) RETURNS interval
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_own interval := jobq._setting(name, fallback);
BEGIN
    IF pg_catalog.current_setting('is_superuser') = 'on'
       OR pg_catalog.pg_has_role(jobq._caller(), 'jobq_admin', 'MEMBER')
       OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_settings s
                       WHERE s.name = _guarded_setting.name
                         AND s.source NOT IN ('default', 'configuration file', 'command line',
                                              'environment variable', 'database')) THEN
        RETURN v_own;
    END IF;
    RETURN greatest(v_own,
                    coalesce((SELECT nullif(substr(c, length(name) + 2), '')::interval
                                FROM pg_catalog.pg_db_role_setting s, unnest(s.setconfig) c
                               WHERE s.setdatabase = (SELECT d.oid FROM pg_catalog.pg_database d
                                                       WHERE d.datname = pg_catalog.current_database())
                                 AND s.setrole = 0 AND left(c, length(name) + 1) = name || '='
                               LIMIT 1),
                             fallback));
END $$;

CREATE FUNCTION jobq.retention_ms() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (pg_catalog.date_part('epoch', jobq._setting('jobq.retention', '1 day')) * 1000)::bigint
$$;

-- Compaction needs shared memory (src/compact.rs): never, here.
CREATE FUNCTION jobq.compact_after() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT 0::bigint $$;
