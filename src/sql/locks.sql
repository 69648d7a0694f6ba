-- Named locks. They live in jobq.locks beside the unique keys of jobs: one namespace.

CREATE FUNCTION jobq_acquire_lock(key text, worker uuid, ttl interval DEFAULT '5 minutes')
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_expires  timestamptz;
BEGIN
    IF key IS NULL OR ttl IS NULL THEN
        RAISE EXCEPTION 'jobq: key and ttl must not be NULL' USING ERRCODE = '22004';
    ELSIF key = '' THEN
        RAISE EXCEPTION 'jobq: lock key must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(key) > 1000 THEN
        RAISE EXCEPTION 'jobq: lock key must be at most 1000 bytes, got %', octet_length(key) USING ERRCODE = '22023';
    ELSIF ttl <= interval '0' OR ttl > interval '100000 years' THEN
        -- The bound keeps now() + ttl a timestamp (the largest is in the year 294276).
        RAISE EXCEPTION 'jobq: ttl must be positive and at most 100000 years, got %', ttl USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._require('worker', ARRAY[key], 'lock key');  -- src/sql/grants.sql
    PERFORM jobq._live_worker(worker);
    v_expires := v_now + ttl;

    -- Held by this worker already: extend it.
    UPDATE jobq.locks l SET expires_at = v_expires
     WHERE l.key = jobq_acquire_lock.key AND l.worker_id = worker;
    IF FOUND THEN
        RETURN true;
    END IF;
    -- Free: take it. Held by a stale named lock: remove that holder, then take it.
    INSERT INTO jobq.locks (key, worker_id, acquired_at, expires_at) VALUES (key, worker, v_now, v_expires)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF jobq._remove_stale_lock(key) THEN
        INSERT INTO jobq.locks (key, worker_id, acquired_at, expires_at) VALUES (key, worker, v_now, v_expires)
        ON CONFLICT DO NOTHING;
        RETURN FOUND;
    END IF;
    RETURN false;
END $$;

CREATE FUNCTION jobq_release_lock(key text, worker uuid) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'jobq: key must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM jobq._require('worker', ARRAY[key], 'lock key');  -- src/sql/grants.sql
    PERFORM jobq._live_worker(worker);
    DELETE FROM jobq.locks l WHERE l.key = jobq_release_lock.key AND l.worker_id = worker;
    RETURN FOUND;
END $$;

CREATE FUNCTION jobq_lock_holder(key text) RETURNS uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._require('worker', ARRAY[key], 'lock key');  -- src/sql/grants.sql
    RETURN (SELECT l.worker_id
              FROM jobq.locks l JOIN jobq.workers w ON w.id = l.worker_id
             WHERE l.key = jobq_lock_holder.key AND l.expires_at > clock_timestamp()
               AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start));
END $$;
