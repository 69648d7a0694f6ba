-- Privileges: who may call what (the contract, section Privileges). Runs last, once every object of
-- the extension exists.
--
-- PUBLIC gets nothing. Four NOLOGIN roles carry the rights, each including the one before:
-- jobq_reader < jobq_producer < jobq_worker < jobq_admin. An administrator grants them to
-- login roles (`GRANT jobq_worker TO app;`). Roles are cluster-wide: a second database, or a
-- CREATE EXTENSION after a DROP EXTENSION, finds them and reuses them.
-- Which worker a call may name is decided at run time by jobq._may_act_for
-- (src/privileges.rs): its own role's, or any for jobq_admin.

DO $$
DECLARE
    r text;
    v_prev text;
BEGIN
    -- Two databases running CREATE EXTENSION at once would both find a role missing and
    -- both create it; the loser would fail. Serialise the check-and-create across the
    -- cluster on the catalog of roles (CREATE ROLE's own lock conflicts with this one; logins
    -- only read it and do not wait). The SQL edition's installer is no superuser and may not
    -- lock that catalog: there a concurrent install may fail, and changes nothing.
    IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
        LOCK TABLE pg_catalog.pg_authid IN SHARE ROW EXCLUSIVE MODE;
    END IF;
    FOREACH r IN ARRAY ARRAY['jobq_reader', 'jobq_producer', 'jobq_worker', 'jobq_admin'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
        IF v_prev IS NOT NULL AND NOT pg_catalog.pg_has_role(r, v_prev, 'MEMBER') THEN
            EXECUTE format('GRANT %I TO %I', v_prev, r);
        END IF;
        v_prev := r;
    END LOOP;
END $$;

-- Nothing for PUBLIC: not the jobq_* functions, not the internal helpers (PostgreSQL gives
-- PUBLIC EXECUTE on every new function), whichever schema they are in: the extension's
-- functions, or in the SQL edition (no extension) those of schema jobq and the jobq_* ones.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT d.objid::regprocedure FROM pg_catalog.pg_depend d
         WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.deptype = 'e'
           AND d.refclassid = 'pg_catalog.pg_extension'::regclass
           AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'jobq')
        UNION
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
         WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'jobq')
           AND (p.pronamespace = 'jobq'::regnamespace
                OR (p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'jobq\_%'))
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END $$;

GRANT USAGE ON SCHEMA jobq TO jobq_reader;

-- jobq_reader: the dashboards' tables and views.
GRANT SELECT ON jobq.queue_stats, jobq.jobs, jobq.workers, jobq.locks, jobq.schedules, jobq.events TO jobq_reader;
-- Workflows (src/sql/workflows.sql): what parents or awaited jobs produced, and what blocked
-- jobs wait for (the dashboard's job page).
GRANT EXECUTE ON FUNCTION jobq_results(bigint[]) TO jobq_reader;
-- What the views and policies call, as the role reading them, to show a limited role its
-- queues' rows only (src/sql/grants.sql).
GRANT EXECUTE ON FUNCTION jobq._patterns(text), jobq._sees(text, text[]), jobq._sees_job(bigint) TO jobq_reader;
-- Which release and edition runs here (src/sql/observe.sql).
GRANT EXECUTE ON FUNCTION jobq_version() TO jobq_reader;
GRANT SELECT ON jobq.blocked, jobq.edges TO jobq_reader;
-- The dashboard's views (src/sql/observe.sql), and the two read-only helpers jobq.health calls
-- (a view's functions run with the privileges of the role reading it).
GRANT SELECT ON jobq.concurrency_slots, jobq.rate_windows, jobq.table_stats, jobq.health TO jobq_reader;
-- Which queues and kinds are paused (the dashboard's /metrics says so, and the alert on a
-- backlog spares a queue paused on purpose).
GRANT SELECT ON jobq.pauses TO jobq_reader;
GRANT EXECUTE ON FUNCTION jobq._last_pass(), jobq._oldest_horizon() TO jobq_reader;
-- The per-minute counters (src/sql/counters.sql) and what reads them.
GRANT SELECT ON jobq.queue_minutes, jobq.queue_totals, jobq.queue_depths TO jobq_reader;
-- The two tables behind jobq.jobs (the same rows): a dashboard that looks for waiting or
-- executing jobs reads jobq.live_jobs and never walks the history.
GRANT SELECT ON jobq.live_jobs, jobq.finished_jobs TO jobq_reader;
GRANT EXECUTE ON FUNCTION jobq.throughput(timestamptz, interval), jobq.histogram_bounds(),
    jobq.histogram_quantile(bigint[], double precision), jobq.histogram_sum(bigint[]),
    jobq._histogram_add(bigint[], bigint[])
TO jobq_reader;

-- jobq_producer (and what jobq_reader may).
GRANT EXECUTE ON FUNCTION
    jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text, text),
    jobq_enqueue_batch(text, jsonb[], text, integer, timestamptz, integer, text),
    jobq_cancel(bigint),
    jobq_retry(bigint),
    jobq_emit_event(text, jsonb),
    jobq_enqueue_graph(jsonb)
TO jobq_producer;

-- jobq_worker (and what jobq_producer may: a worker enqueues follow-up jobs).
GRANT EXECUTE ON FUNCTION
    jobq_register_worker(text, jsonb, boolean),
    jobq._register_worker(uuid, text, jsonb, boolean),  -- the proxy's registration (jobq_proxy)
    jobq_heartbeat(uuid, bigint[]),
    jobq_unregister_worker(uuid),
    jobq_stop_checkouts(uuid),
    jobq_checkout(uuid, text[], integer, interval),
    jobq_complete(bigint, uuid, jsonb),
    jobq_fail(bigint, uuid, jsonb, interval, boolean),
    jobq_complete_many(uuid, bigint[], jsonb[]),
    jobq_fail_many(uuid, bigint[], jsonb[]),
    jobq_complete_and_checkout(uuid, bigint[], jsonb[], text[], integer),
    jobq_fail_and_checkout(uuid, bigint[], jsonb[], text[], integer),
    jobq_acquire_lock(text, uuid, interval),
    jobq_release_lock(text, uuid),
    jobq_lock_holder(text),
    jobq_checkpoint(bigint, uuid, text, jsonb),
    jobq_snooze(bigint, uuid, timestamptz),
    jobq_await_jobs(bigint, uuid, bigint[]),
    jobq_await_event(bigint, uuid, text, interval)
TO jobq_worker;

-- jobq_admin: everything (and any worker, jobq._may_act_for).
GRANT EXECUTE ON FUNCTION
    jobq_pause(text, text),
    jobq_resume(text, text),
    jobq_reap(),
    jobq_schedule(text, text, text, jsonb, text, integer, integer, text, boolean),
    jobq_unschedule(text),
    jobq_set_rate_limit(text, integer, interval),
    jobq_set_node(integer),
    jobq_grant_queues(regrole, text, text[]),
    jobq_revoke_queues(regrole, text, text[]),
    jobq_set_fairness_weight(text, text, integer)
TO jobq_admin;
GRANT SELECT ON ALL TABLES IN SCHEMA jobq TO jobq_admin;

-- Row level security on the tables jobq_reader reads directly: a limited role (src/sql/grants.sql)
-- reads the rows of its queues only; its own workers; the locks whose keys its patterns cover or
-- whose jobs it may read; the dependencies and waits of jobs it may read. Everyone else's filter
-- is one test of NULL per row (jobq._patterns is evaluated once per query). jobq's functions and
-- views read these tables as their owner, whom no policy filters.
ALTER TABLE jobq.live_jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY granted_queues ON jobq.live_jobs FOR SELECT
    USING ((SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(queue, (SELECT jobq._patterns('reader'))));
ALTER TABLE jobq.finished_jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY granted_queues ON jobq.finished_jobs FOR SELECT
    USING ((SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(queue, (SELECT jobq._patterns('reader'))));
ALTER TABLE jobq.queue_minutes ENABLE ROW LEVEL SECURITY;
CREATE POLICY granted_queues ON jobq.queue_minutes FOR SELECT
    USING ((SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(queue, (SELECT jobq._patterns('reader'))));
ALTER TABLE jobq.queue_totals ENABLE ROW LEVEL SECURITY;
CREATE POLICY granted_queues ON jobq.queue_totals FOR SELECT
    USING ((SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(queue, (SELECT jobq._patterns('reader'))));
-- A pause of a kind in every queue (queue NULL) is no queue's: every reader sees it.
ALTER TABLE jobq.pauses ENABLE ROW LEVEL SECURITY;
CREATE POLICY granted_queues ON jobq.pauses FOR SELECT
    USING ((SELECT jobq._patterns('reader')) IS NULL OR queue IS NULL OR jobq._sees(queue, (SELECT jobq._patterns('reader'))));
ALTER TABLE jobq.workers ENABLE ROW LEVEL SECURITY;
CREATE POLICY granted_queues ON jobq.workers FOR SELECT
    USING ((SELECT jobq._patterns('reader')) IS NULL
           OR owner::oid = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user));
ALTER TABLE jobq.locks ENABLE ROW LEVEL SECURITY;
CREATE POLICY granted_queues ON jobq.locks FOR SELECT
    USING ((SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(key, (SELECT jobq._patterns('reader')))
           OR (job_id IS NOT NULL AND jobq._sees_job(job_id)));
ALTER TABLE jobq.blocked ENABLE ROW LEVEL SECURITY;
CREATE POLICY granted_queues ON jobq.blocked FOR SELECT
    USING ((SELECT jobq._patterns('reader')) IS NULL OR jobq._sees_job(job_id));
ALTER TABLE jobq.edges ENABLE ROW LEVEL SECURITY;
CREATE POLICY granted_queues ON jobq.edges FOR SELECT
    USING ((SELECT jobq._patterns('reader')) IS NULL OR jobq._sees_job(child));
