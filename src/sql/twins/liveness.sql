-- Twins of src/liveness.rs: the one liveness rule.
-- A worker is alive while its heartbeat is younger than jobq.heartbeat_timeout (read at each
-- call: a custom setting, 30 s when unset) and, when bound to its session, while a session
-- with that pid (and, where this role may see it, that start time) exists. The sessions are
-- read in the transaction's snapshot of them: a session that ended is seen gone by the next
-- transaction, so by the next reap pass at the latest.
CREATE FUNCTION jobq.worker_alive(heartbeat_at timestamptz, backend_pid integer, backend_start timestamptz)
RETURNS boolean
LANGUAGE sql VOLATILE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT heartbeat_at IS NOT NULL
       AND heartbeat_at > clock_timestamp() - jobq._setting('jobq.heartbeat_timeout', '30 s')
       AND (backend_pid IS NULL
            OR EXISTS (SELECT 1 FROM pg_stat_get_activity(backend_pid) a
                        WHERE a.pid = backend_pid
                          AND (a.backend_start IS NULL OR backend_start IS NULL
                               OR a.backend_start = backend_start)))
$$;

-- Checkout's test: registered, alive, not stopping, and the caller may act for it.
CREATE FUNCTION jobq._usable_worker(worker uuid) RETURNS boolean
LANGUAGE sql STRICT VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM jobq.workers w
                    WHERE w.id = worker AND w.stopping_at IS NULL
                      AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)
                      AND jobq._may_act_for(w.owner))
$$;
