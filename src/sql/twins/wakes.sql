-- Twin of src/wakes.rs: the NOTIFY that wakes listening workers, sent by the transaction that
-- makes a job ready (PostgreSQL sends one per queue however often a transaction asks).
CREATE FUNCTION jobq._notify(queue text) RETURNS void
LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM pg_notify('jobq', queue);
END $$;
