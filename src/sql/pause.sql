-- Pausing: checkout skips a paused queue, a paused kind (in every queue, or in one queue).
-- Enqueue still works. Each pause is undone only by the resume with the same arguments.

CREATE FUNCTION jobq_pause(queue text, kind text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF queue IS NULL AND kind IS NULL THEN
        RAISE EXCEPTION 'jobq: queue and kind must not both be NULL' USING ERRCODE = '22004';
    ELSIF queue = '' OR kind = '' THEN
        RAISE EXCEPTION 'jobq: queue and kind must not be empty (use NULL)' USING ERRCODE = '22023';
    ELSIF octet_length(queue) > 1000 OR octet_length(kind) > 1000 THEN
        RAISE EXCEPTION 'jobq: queue and kind must be at most 1000 bytes' USING ERRCODE = '22023';
    END IF;
    INSERT INTO jobq.pauses (queue, kind, paused_at) VALUES (queue, kind, clock_timestamp())
    ON CONFLICT DO NOTHING;
END $$;

CREATE FUNCTION jobq_resume(queue text, kind text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF queue IS NULL AND kind IS NULL THEN
        RAISE EXCEPTION 'jobq: queue and kind must not both be NULL' USING ERRCODE = '22004';
    END IF;
    DELETE FROM jobq.pauses p
     WHERE p.queue IS NOT DISTINCT FROM jobq_resume.queue AND p.kind IS NOT DISTINCT FROM jobq_resume.kind;
    -- Wake the workers of a resumed queue (waiting checkouts: all of them; of every queue
    -- when a kind is resumed everywhere).
    IF FOUND THEN
        PERFORM jobq._wake(queue, '-infinity', 10000);
        IF queue IS NOT NULL THEN
            PERFORM jobq._notify(queue);
        END IF;
    END IF;
END $$;
