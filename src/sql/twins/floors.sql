-- Twins of src/floors.rs. Claim floors live in shared memory; without them checkout walks
-- the waiting set from its start, as the extension does without the preload.
CREATE FUNCTION jobq._floor(ready oid, queue text)
RETURNS TABLE (priority integer, run_at timestamptz, id bigint)
LANGUAGE plpgsql STABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    priority := -2147483648; run_at := '-infinity'; id := -9223372036854775808;
    RETURN NEXT;
END $$;

CREATE FUNCTION jobq._lower_floor(ready oid, queue text, priority integer, run_at timestamptz, id bigint)
RETURNS void
LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, jobq, pg_temp AS $$ BEGIN END $$;
