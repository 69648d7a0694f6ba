-- Twins of src/liveness.rs: the one liveness rule.
-- A worker is alive while its heartbeat is younger than jobq.heartbeat_timeout (read at each
-- call: a custom setting, 30 s when unset) and, when bound to its session, while a session
-- with that pid (and, where this role may see it, that start time) exists. The sessions are
-- read in the transaction's snapshot of them: a session that ended is seen gone by the next
-- transaction, so by the next reap pass at the latest.
-- A worker that looks dead by the caller's own setting is judged again by the guarded one
-- (jobq._guarded_setting, never shorter): a role that set a short timeout for itself may not
-- make another role's live worker dead. (A fresh heartbeat is alive by both: no more is read.)
CREATE FUNCTION jobq.worker_alive(heartbeat_at timestamptz, backend_pid integer, backend_start timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$
BEGIN
    IF heartbeat_at IS NULL
       OR (heartbeat_at <= clock_timestamp() - jobq._setting('jobq.heartbeat_timeout', '30 s')
           AND heartbeat_at <= clock_timestamp() - jobq._guarded_setting('jobq.heartbeat_timeout', '30 s')) THEN
        RETURN false;
    END IF;
    RETURN backend_pid IS NULL
        OR EXISTS (SELECT 1 FROM pg_stat_get_activity(worker_alive.backend_pid) a
                    WHERE a.pid = worker_alive.backend_pid
                      AND (a.backend_start IS NULL OR worker_alive.backend_start IS NULL
                           OR a.backend_start = worker_alive.backend_start));
END $$;

-- Checkout's test: registered, alive, not stopping, and the caller may act for it. The common
-- case (a fresh heartbeat, no bound session, the caller's own worker, no role set) is decided here without
-- calling the two functions that decide the others (each call of a function with a pinned
-- search_path costs a job about 10 µs: bench/results/instructions.md, row jobq_sql).
-- These twins leave the search_path to their callers, jobq's functions, which pin it (as the
-- keyed claim's helpers of src/sql/checkout.sql do): no jobq role may call them.
CREATE FUNCTION jobq._usable_worker(worker uuid) RETURNS boolean
LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE AS $$
DECLARE
    w jobq.workers;
BEGIN
    SELECT * INTO w FROM jobq.workers x WHERE x.id = worker;
    IF NOT FOUND OR w.stopping_at IS NOT NULL THEN
        RETURN false;
    END IF;
    IF w.backend_pid IS NULL AND w.heartbeat_at > clock_timestamp() - jobq._setting('jobq.heartbeat_timeout', '30 s')
       AND w.owner::oid = jobq._caller() AND pg_catalog.current_setting('role') = 'none' THEN  -- (a role set: the rule below)
        RETURN true;
    END IF;
    RETURN jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start) AND jobq._may_act_for(w.owner);
END $$;
