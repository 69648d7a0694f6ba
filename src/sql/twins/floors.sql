-- Twins of src/floors.rs. Claim floors live in shared memory; without them checkout walks
-- the waiting set from its start, as the extension does without the preload.
-- Plain SQL without settings: the planner inlines them into the calling statement.
CREATE FUNCTION jobq._floor(ready oid, queue text)
RETURNS TABLE (priority integer, run_at timestamptz, id bigint)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (-2147483648)::integer, '-infinity'::timestamptz, (-9223372036854775808)::bigint
$$;

CREATE FUNCTION jobq._lower_floor(ready oid, queue text, priority integer, run_at timestamptz, id bigint)
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE AS $$ SELECT NULL::void $$;
