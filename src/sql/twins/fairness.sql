-- Twin of src/fairness.rs. The extension notes in shared memory which databases ever had a
-- fair queue, so that its fast path of checkout skips jobq.fairness elsewhere; the SQL edition
-- has no fast path to spare.
CREATE FUNCTION jobq._note_fairness(low bigint) RETURNS void
LANGUAGE sql VOLATILE AS $$ SELECT NULL::void $$;
