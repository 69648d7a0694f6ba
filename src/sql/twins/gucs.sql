-- Twins of src/gucs.rs. The extension defines the jobq.* settings; here they are custom
-- settings (ALTER DATABASE app SET jobq.retention = '2 days'), read at each call, the
-- contract's defaults when unset. A value is an interval ('30s', '1 day'); a bare number is
-- seconds, as the extension's settings read it.
CREATE FUNCTION jobq._setting(name text, fallback interval) RETURNS interval
LANGUAGE plpgsql STABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN coalesce(nullif(current_setting(name, true), '')::interval, fallback);
END $$;

CREATE FUNCTION jobq.retention_ms() RETURNS bigint
LANGUAGE plpgsql STRICT STABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN (extract(epoch FROM jobq._setting('jobq.retention', '1 day')) * 1000)::bigint;
END $$;

-- Compaction needs shared memory (src/compact.rs): never, here.
CREATE FUNCTION jobq.compact_after() RETURNS bigint
LANGUAGE plpgsql STRICT STABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$ BEGIN RETURN 0; END $$;
