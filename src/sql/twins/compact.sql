-- Twins of src/compact.rs. Compacting the hot tables with TRUNCATE is safe only with the
-- compacting transaction recorded in shared memory; the SQL edition never compacts
-- (jobq.compact_after() is 0), so there is nothing to record and nothing to wait for.
-- Called on every job's path: plain SQL without settings, which the planner inlines into the
-- calling statement (no call at run time); their callers pin the search_path.
CREATE FUNCTION jobq._note_compaction() RETURNS boolean
LANGUAGE sql VOLATILE AS $$ SELECT false $$;

CREATE FUNCTION jobq._hold_hot_tables() RETURNS void
LANGUAGE sql VOLATILE AS $$ SELECT NULL::void $$;
