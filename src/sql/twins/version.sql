-- Twin of src/lib.rs's `_edition`: which jobq this is. The generator writes the release.
CREATE FUNCTION jobq._edition() RETURNS TABLE (version text, edition text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    version := '@VERSION@'; edition := 'sql';
    RETURN NEXT;
END $$;
