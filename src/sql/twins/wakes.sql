-- Twin of src/wakes.rs: the NOTIFY that wakes listening workers. As in the extension,
-- jobq.notify = immediate sends it from the transaction that makes a job ready (PostgreSQL
-- sends one per queue however often a transaction asks); by default it is deferred, because
-- PostgreSQL serialises the commits of transactions that notify: that halved the enqueue rate
-- at 16 clients (docs/performance.md, "The SQL edition"). The extension's background worker sends
-- the deferred ones right after the commit; here the transaction notes its queue (once) in an
-- unlogged table, and the next pass sends them (jobq._note_pass, src/sql/twins/health.sql).
-- The common enqueue (jobq_enqueue's twin, src/sql/twins/hot_path.sql) writes no note: its
-- tally is one, and the pass sends a NOTIFY for each queue whose enqueues it counts
-- (jobq._take_tallies, src/sql/twins/counters.sql). So a queue is also woken by the pass after
-- a job scheduled for later, or after a NOTIFY sent at once (immediate): a wake-up that finds
-- nothing new, where a note more per enqueue would cost each one more than its counter.
CREATE UNLOGGED TABLE jobq.pending_notifies (queue text NOT NULL);

-- On every enqueue's path: it leaves the search_path to its callers, which pin it.
CREATE FUNCTION jobq._notify(queue text) RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $$
DECLARE
    v_noted text := coalesce(current_setting('jobq.notified', true), '');
BEGIN
    IF current_setting('jobq.notify', true) = 'immediate' THEN
        PERFORM pg_catalog.pg_notify('jobq', queue);
    ELSIF strpos(v_noted, E'\n' || queue || E'\n') = 0 THEN
        INSERT INTO jobq.pending_notifies VALUES (queue);
        -- (An assignment, not PERFORM: PL/pgSQL evaluates it without starting a plan.)
        v_noted := set_config('jobq.notified', coalesce(nullif(v_noted, ''), E'\n') || queue || E'\n', true);
    END IF;
END $$;
