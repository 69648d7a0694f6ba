-- Queues granted per role (the contract, "Tenants"): which queues a role may read, enqueue
-- into or work on, when an administrator limits it to some of them.
--
-- A role that holds at least one row here is *limited*, unless it is a member of jobq_admin
-- or of the role jobq's functions run as (the installing role; superusers are members of
-- every role). A role without rows is not limited: every check below is then one index probe
-- that finds nothing, and every filter one test of NULL per row. Grants are the caller's own
-- (jobq._caller(), src/privileges.rs): not inherited through membership. A session that set a
-- role is limited by the grants of both its login role and the role it set (jobq._limits).
--
-- A limited role's calls are checked where each function names a queue or finds its job
-- (jobq._require, jobq._require_jobs: 42501, and the error undoes the call); its reads are
-- filtered in the views (their WHERE; every one a security barrier, so that no condition of the
-- reader's sees a row before the filter; jobq.jobs by its tables' policies) and, for the tables
-- jobq_reader reads directly, by row level security (the policies at the end of src/sql/privileges.sql). jobq's own functions run
-- as the tables' owner, whom no policy filters. The fast paths in Rust (src/grants.rs) hand a
-- limited caller's call to the SQL, which checks it.

-- One row per role, privilege and pattern. A pattern is a queue name, or a prefix ending in
-- `*` ('tenant-42:*'); lock keys and event names are matched against the same patterns.
CREATE TABLE jobq.queue_grants (
    role       regrole NOT NULL,
    privilege  text NOT NULL,   -- 'reader', 'producer' or 'worker', each including the one before
    pattern    text NOT NULL,
    granted_at timestamptz NOT NULL,
    PRIMARY KEY (role, privilege, pattern)
);
SELECT pg_catalog.pg_extension_config_dump('jobq.queue_grants', '');

-- The patterns the caller may use at `privilege` ('reader', 'producer' or 'worker') or a
-- stronger one; NULL when the caller is not limited (it may use every queue). An empty array:
-- limited, with no grant that strong. The caller is two roles when a session has set a role
-- (SET ROLE): the role it logged in as and the role it set. Each may limit it, and a name must
-- then be covered by both (jobq._limits_of each, intersected): setting a role never widens a
-- limited login, and a login that is not limited acts as the role it sets.
-- Like the keyed claim's helpers (src/sql/checkout.sql, the header), it and jobq._require and
-- jobq._require_jobs below leave the search_path to their callers, jobq's own functions, which
-- pin it: a pinned setting is applied and undone at every call, which cost each job of the SQL
-- edition about 57,000 instructions (bench/instructions.sh, row jobq_sql). The hot paths call
-- them only where a grant exists (`EXISTS (SELECT 1 FROM jobq.queue_grants)`, folded into a
-- statement they run anyway where they can).
-- No role but the owner may call them (src/sql/privileges.sql; tests/lifecycle.rs checks both).
CREATE FUNCTION jobq._limits(privilege text) RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_caller  oid := jobq._caller();
    v_login   oid := to_regrole(quote_ident(session_user::text))::oid;
    v_set     text[];
    v_logged  text[];
BEGIN
    IF v_caller IS NULL OR v_login IS NULL THEN
        -- A role renamed or dropped under a live session (the SQL edition finds the set role by
        -- name): limited, with nothing granted, wherever a grant exists.
        RETURN CASE WHEN EXISTS (SELECT 1 FROM jobq.queue_grants) THEN '{}'::text[] END;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM jobq.queue_grants g WHERE g.role IN (v_caller, v_login)) THEN
        RETURN NULL;
    END IF;
    v_set := jobq._limits_of(v_caller, privilege);
    IF v_login = v_caller THEN
        RETURN v_set;
    END IF;
    v_logged := jobq._limits_of(v_login, privilege);
    IF v_set IS NULL OR v_logged IS NULL THEN
        RETURN coalesce(v_set, v_logged);
    END IF;
    -- Both limit: of two patterns that overlap, the narrower one (a name, or the longer prefix).
    RETURN ARRAY(SELECT DISTINCT CASE WHEN jobq._sees(a, ARRAY[b]) THEN a ELSE b END
                   FROM unnest(v_set) a, unnest(v_logged) b
                  WHERE jobq._sees(a, ARRAY[b]) OR jobq._sees(b, ARRAY[a]));
END $$;

-- The patterns of one role, as jobq._limits above says: NULL when it holds no grant or is a
-- member of jobq_admin or of the role jobq's functions run as.
CREATE FUNCTION jobq._limits_of(role oid, privilege text) RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM jobq.queue_grants g WHERE g.role = _limits_of.role) THEN
        RETURN NULL;
    END IF;
    IF pg_has_role(_limits_of.role, (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'jobq'), 'MEMBER')
       OR (to_regrole('jobq_admin') IS NOT NULL AND pg_has_role(_limits_of.role, 'jobq_admin', 'MEMBER')) THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY(SELECT g.pattern FROM jobq.queue_grants g
                  WHERE g.role = _limits_of.role
                    AND g.privilege = ANY (CASE _limits_of.privilege
                                               WHEN 'reader' THEN ARRAY['reader', 'producer', 'worker']
                                               WHEN 'producer' THEN ARRAY['producer', 'worker']
                                               ELSE ARRAY['worker'] END));
END $$;

-- The same for the views and policies, which call it as the role that reads them: that role
-- may not read jobq.queue_grants, and its search_path is its own. Each filters with
--     (SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(x, (SELECT jobq._patterns('reader')))
-- written out where it is used: PostgreSQL evaluates the sub-selects once per statement (an
-- InitPlan), so a role without grants pays one test of NULL per row, where a function
-- wrapping the whole test would look the caller's grants up for every row.
CREATE FUNCTION jobq._patterns(privilege text) RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT jobq._limits(privilege)
$$;

-- Whether `name` (a queue, lock key or event name) is covered by one of `patterns`: equal to
-- one, or starting with the prefix of one that ends in `*`. NULL patterns cover everything.
-- Its search_path is pinned, although that keeps it from being inlined: the policies call it in
-- the reading role's session, whose search_path must not choose its operators. Views and
-- policies test `patterns IS NULL` first, so a role that is not limited never calls it.
CREATE FUNCTION jobq._sees(name text, patterns text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT patterns IS NULL
        OR EXISTS (SELECT 1 FROM unnest(patterns) p
                    WHERE p = name OR (right(p, 1) = '*' AND starts_with(name, left(p, -1))))
$$;

-- Raises 42501 unless the caller may use every one of `names` (a `what`: 'queue', 'lock key',
-- 'event') at `privilege`; true otherwise (a value, so that the hot paths call it in an
-- assignment, without an executor). NULL names are skipped (the caller refuses them itself).
CREATE FUNCTION jobq._require(privilege text, names text[], what text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_patterns text[] := jobq._limits(privilege);
    v_name     text;
BEGIN
    IF v_patterns IS NULL THEN
        RETURN true;
    END IF;
    FOREACH v_name IN ARRAY coalesce(names, '{}') LOOP
        IF v_name IS NOT NULL AND NOT jobq._sees(v_name, v_patterns) THEN
            RAISE EXCEPTION 'jobq: role % holds no % grant for % "%"', jobq._caller()::regrole, privilege, what, v_name
                USING ERRCODE = '42501',
                      HINT = 'An administrator grants queues with jobq_grant_queues(role, privilege, queues).';
        END IF;
    END LOOP;
    RETURN true;
END $$;

-- The first of jobs `ids` whose queue the caller may not use at `privilege`; NULL when there is
-- none (unknown ids are skipped: the caller answers for them) or the caller is not limited.
CREATE FUNCTION jobq._outside_jobs(privilege text, ids bigint[]) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_patterns text[] := jobq._limits(privilege);
BEGIN
    IF v_patterns IS NULL THEN  -- not limited: no job's queue to look up
        RETURN NULL;
    END IF;
    RETURN (SELECT x.id FROM (SELECT j.id, j.queue FROM jobq.live_jobs j WHERE j.id = ANY (ids)
                              UNION ALL
                              SELECT f.id, f.queue FROM jobq.finished_jobs f WHERE f.id = ANY (ids)) x
             WHERE NOT jobq._sees(x.queue, v_patterns)
             ORDER BY x.id LIMIT 1);
END $$;

-- Raises 42501 unless the caller may use the queues of jobs `ids` at `privilege`. The error
-- names the job, not its queue: a job id is easy to guess, another tenant's queue names are
-- not the caller's to learn.
CREATE FUNCTION jobq._require_jobs(privilege text, ids bigint[]) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_job bigint := jobq._outside_jobs(privilege, ids);
BEGIN
    IF v_job IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: job % is in a queue this session holds no % grant for', v_job, privilege
            USING ERRCODE = '42501',
                  HINT = 'An administrator grants queues with jobq_grant_queues(role, privilege, queues).';
    END IF;
END $$;

-- The same for job `job` of queue `queue`, read by the caller from a row it holds: true, or
-- 42501 (a value, for use in a statement's condition). A NULL queue (no such job) passes.
CREATE FUNCTION jobq._require_job(privilege text, job bigint, queue text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF queue IS NOT NULL AND NOT jobq._sees(queue, jobq._limits(privilege)) THEN
        RAISE EXCEPTION 'jobq: job % is in a queue this session holds no % grant for', job, privilege
            USING ERRCODE = '42501',
                  HINT = 'An administrator grants queues with jobq_grant_queues(role, privilege, queues).';
    END IF;
    RETURN true;
END $$;

-- Whether the caller may read job `id`: its queue is granted to the caller, or the caller is
-- not limited. For the policies of the tables that name jobs (src/sql/privileges.sql), whose
-- readers may not read the job's row to find its queue.
CREATE FUNCTION jobq._sees_job(id bigint) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT jobq._sees(coalesce((SELECT j.queue FROM jobq.live_jobs j WHERE j.id = _sees_job.id),
                               (SELECT f.queue FROM jobq.finished_jobs f WHERE f.id = _sees_job.id)),
                      jobq._limits('reader'))
$$;

-- jobq.jobs: every job, live and finished; a limited role sees its queues' jobs only. It reads
-- the two tables as the role reading it (security_invoker), so their row level security filters
-- it (src/sql/privileges.sql) and a condition of the reader's runs only on rows the filter kept,
-- while PostgreSQL still flattens the UNION ALL (a dashboard's ORDER BY id LIMIT n reads n rows
-- of the two primary keys).
CREATE VIEW jobq.jobs WITH (security_invoker) AS
SELECT * FROM jobq.live_jobs
UNION ALL
SELECT * FROM jobq.finished_jobs;

-- jobq_grant_queues(role, privilege, queues): `role` may use `queues` (names, or prefixes
-- ending in `*`) at `privilege` ('reader', 'producer' or 'worker'), and is limited to the
-- queues it is granted from then on. Granting what is granted changes nothing.
CREATE FUNCTION jobq_grant_queues(role regrole, privilege text, queues text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._check_grant(role, privilege, queues);
    INSERT INTO jobq.queue_grants (role, privilege, pattern, granted_at)
    SELECT DISTINCT jobq_grant_queues.role, jobq_grant_queues.privilege, q, clock_timestamp()
      FROM unnest(queues) q
    ON CONFLICT DO NOTHING;
END $$;

-- jobq_revoke_queues(role, privilege, queues): takes back the grants of these patterns at
-- this privilege (exactly as granted). A role left without any grant is no longer limited.
CREATE FUNCTION jobq_revoke_queues(role regrole, privilege text, queues text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._check_grant(role, privilege, queues);
    DELETE FROM jobq.queue_grants g
     WHERE g.role = jobq_revoke_queues.role AND g.privilege = jobq_revoke_queues.privilege
       AND g.pattern = ANY (queues);
END $$;

-- The arguments of both: 22004 for a NULL, 22023 for an unknown privilege, an array of more
-- than one dimension, more than 1,000 patterns, or a pattern that is empty, over 1,000 bytes,
-- or has `*` anywhere but at its end.
CREATE FUNCTION jobq._check_grant(role regrole, privilege text, queues text[]) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_bad text;
BEGIN
    IF array_ndims(queues) > 1 THEN  -- (array_position below would raise 0A000)
        RAISE EXCEPTION 'jobq: queues must be a one-dimensional array' USING ERRCODE = '22023';
    ELSIF role IS NULL OR privilege IS NULL OR queues IS NULL OR array_position(queues, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: role, privilege and queues (and each of them) must not be NULL' USING ERRCODE = '22004';
    ELSIF privilege NOT IN ('reader', 'producer', 'worker') THEN
        RAISE EXCEPTION 'jobq: privilege must be reader, producer or worker, got "%"', privilege USING ERRCODE = '22023';
    ELSIF cardinality(queues) > 1000 THEN
        RAISE EXCEPTION 'jobq: at most 1000 queues per call, got %', cardinality(queues) USING ERRCODE = '22023';
    END IF;
    SELECT q INTO v_bad FROM unnest(queues) q
     WHERE q = '' OR octet_length(q) > 1000 OR strpos(left(q, -1), '*') > 0
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq: a queue pattern is a name, or a prefix ending in *, of 1 to 1000 bytes; got "%"', left(v_bad, 100)
            USING ERRCODE = '22023';
    END IF;
END $$;
