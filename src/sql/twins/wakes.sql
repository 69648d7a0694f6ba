-- Twin of src/wakes.rs: the NOTIFY that wakes listening workers, sent by the transaction that
-- makes a job ready (PostgreSQL sends one per queue however often a transaction asks).
CREATE FUNCTION jobq._notify(queue text) RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE AS $$ SELECT pg_catalog.pg_notify('jobq', queue) $$;
