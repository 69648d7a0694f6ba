-- Twins of src/gucs.rs. The extension defines the jobq.* settings; here they are custom
-- settings (ALTER DATABASE app SET jobq.retention = '2 days'), read at each call, the
-- contract's defaults when unset. A value is an interval ('30s', '1 day'); a bare number is
-- seconds, as the extension's settings read it.
-- Plain SQL without settings, inlined into the calling statement (each is on a job's path).
CREATE FUNCTION jobq._setting(name text, fallback interval) RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(nullif(pg_catalog.current_setting(name, true), '')::interval, fallback)
$$;

CREATE FUNCTION jobq.retention_ms() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (pg_catalog.date_part('epoch', jobq._setting('jobq.retention', '1 day')) * 1000)::bigint
$$;

-- Compaction needs shared memory (src/compact.rs): never, here.
CREATE FUNCTION jobq.compact_after() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT 0::bigint $$;
