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
-- cases (a fresh heartbeat, the caller's own worker, no role set, and the worker unbound or
-- bound to this very session, as the client libraries bind theirs) are decided here without
-- calling the two functions that decide the others (each call of a function with a pinned
-- search_path costs a job about 10 µs: bench/results/instructions.md, row jobq_sql).
-- A worker bound to this session's pid is alive by jobq.worker_alive's rule unless its row
-- names another start of the pid than this session's, as these functions' role sees it (a
-- start it may not see is no start: the pid alone decides). pg_stat_get_activity reads every
-- session's entry, so the session's start is read once a session, and kept in the session's
-- setting jobq.session_start (in microseconds since 1970, text that no setting of the session
-- renders otherwise); a start this role may not see is read again at each call, as the rule
-- reads it. A role that sets jobq.session_start itself can make only its own workers, bound
-- to its own pid, alive to itself. bench/bound.sh measures a bound worker's checkouts.
-- These twins leave the search_path to their callers, jobq's functions, which pin it (as the
-- keyed claim's helpers of src/sql/checkout.sql do): no jobq role may call them.
CREATE FUNCTION jobq._usable_worker(worker uuid) RETURNS boolean
LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE AS $$
DECLARE
    w       jobq.workers;
    v_start text;
BEGIN
    SELECT * INTO w FROM jobq.workers x WHERE x.id = worker;
    IF NOT FOUND OR w.stopping_at IS NOT NULL THEN
        RETURN false;
    END IF;
    IF w.heartbeat_at > clock_timestamp() - jobq._setting('jobq.heartbeat_timeout', '30 s')
       AND w.owner::oid = jobq._caller() AND pg_catalog.current_setting('role') = 'none' THEN  -- (a role set: the rule below)
        IF w.backend_pid IS NULL THEN
            RETURN true;
        ELSIF w.backend_pid = pg_catalog.pg_backend_pid() THEN
            IF w.backend_start IS NULL THEN
                RETURN true;  -- a start the registration could not see: the pid decides
            END IF;
            v_start := pg_catalog.current_setting('jobq.session_start', true);
            IF coalesce(v_start, '') = '' THEN
                SELECT (pg_catalog.date_part('epoch', a.backend_start) * 1e6)::bigint::text INTO v_start
                  FROM pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) a
                 WHERE a.pid = pg_catalog.pg_backend_pid();
                IF FOUND AND v_start IS NULL THEN
                    RETURN true;  -- a start this role may not see
                ELSIF v_start IS NOT NULL THEN
                    PERFORM pg_catalog.set_config('jobq.session_start', v_start, false);
                END IF;
            END IF;
            IF v_start = (pg_catalog.date_part('epoch', w.backend_start) * 1e6)::bigint::text THEN
                RETURN true;
            END IF;
        END IF;
    END IF;
    RETURN jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start) AND jobq._may_act_for(w.owner);
END $$;

-- The fast checkouts' test of a worker that their look (src/sql/twins/pasted/look_one.sql) did
-- not find usable as it is: `usable`, the look's answer but for the binding (the caller's own,
-- not stopping, a fresh heartbeat), with the session the worker is bound to. A worker bound to
-- this very session, as the client libraries bind theirs, is decided here from what the look
-- read and the session's start kept in jobq.session_start, or by its pid alone where its row
-- names no start (jobq._usable_worker's rule and setting); every other worker is
-- jobq._usable_worker's to decide whole, which reads its row again and sets jobq.session_start
-- on a session's first call. Through jobq._usable_worker, a job of a bound worker cost 89,000
-- instructions more than one of an unbound worker; through this, 25,000 more
-- (bench/instructions.sh, rows jobq_sql_worker and jobq_sql_bound: 812,663 and 901,913 at
-- 803ea29, 772,917 and 798,264 at df75f5a).
CREATE FUNCTION jobq._usable_here(worker uuid, usable boolean, pid integer, start timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $$
BEGIN
    IF usable AND pid = pg_catalog.pg_backend_pid()
       AND (start IS NULL  -- a start the registration could not see: the pid decides
            OR (pg_catalog.date_part('epoch', start) * 1e6)::bigint::text = pg_catalog.current_setting('jobq.session_start', true)) THEN
        RETURN true;
    END IF;
    RETURN jobq._usable_worker(worker);
END $$;
