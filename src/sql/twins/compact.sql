-- Twins of src/compact.rs. Compacting the hot tables with TRUNCATE is safe only with the
-- compacting transaction recorded in shared memory; the SQL edition never compacts
-- (jobq.compact_after() is 0), so there is nothing to record and nothing to wait for.
CREATE FUNCTION jobq._note_compaction() RETURNS boolean
LANGUAGE plpgsql STRICT VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$ BEGIN RETURN false; END $$;

CREATE FUNCTION jobq._hold_hot_tables() RETURNS void
LANGUAGE plpgsql STRICT VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$ BEGIN END $$;
