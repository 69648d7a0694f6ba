-- jobq 0.4.0 -> 0.5.0 (ALTER EXTENSION jobq UPDATE). Hand-written: a database updated with it has
-- exactly the objects of a fresh CREATE EXTENSION of 0.5.0 (tests/upgrade.rs checks it). The
-- function bodies and views are copies of src/sql's, kept by scripts/sync-upgrade.py. The SQL
-- edition's file of 0.5.0 runs the same statements, with the SQL twins of the C functions
-- (scripts/build-sql-edition.py).
\echo Use "ALTER EXTENSION jobq UPDATE" to load this file. \quit

-- Fair checkout (src/sql/fairness.sql): a job's fairness key, on its rows and in jobq.job. The
-- plain checkout's indexes keep the jobs without one; ready_fair holds those with one.
ALTER TABLE jobq.live_jobs ADD COLUMN fairness_key text;
ALTER TABLE jobq.finished_jobs ADD COLUMN fairness_key text;
ALTER TABLE jobq.ready ADD COLUMN fairness_key text;
DROP INDEX jobq.ready_by_queue;
DROP INDEX jobq.ready_any;
CREATE INDEX ready_by_queue ON jobq.ready (queue_hash, priority, run_at, id) WHERE fairness_key IS NULL;
CREATE INDEX ready_any ON jobq.ready (priority, run_at, id) WHERE fairness_key IS NULL;
CREATE INDEX ready_fair ON jobq.ready (queue_hash, priority, fairness_key, run_at, id) WHERE fairness_key IS NOT NULL;
ALTER TYPE jobq.job ADD ATTRIBUTE fairness_key text;
CREATE SEQUENCE jobq.fairness_turns AS bigint;
CREATE SEQUENCE jobq.fairness_pruned AS bigint;
CREATE TABLE jobq.fairness (
    queue         text NOT NULL,
    fairness_key  text,
    priority      integer,                      -- the turns of this priority; NULL: the weight only
    weight        integer NOT NULL DEFAULT 1,   -- jobs per turn (jobq_set_fairness_weight)
    served        bigint NOT NULL DEFAULT nextval('jobq.fairness_turns'),
    taken         integer NOT NULL DEFAULT 0,   -- jobs taken since `served` last moved
    queue_hash    integer NOT NULL GENERATED ALWAYS AS (pg_catalog.hashtext(queue)) STORED
)
WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
      autovacuum_vacuum_cost_delay = 0);
CREATE INDEX fairness_by_turn ON jobq.fairness (queue_hash, priority, served);
ALTER TABLE jobq.fairness ALTER COLUMN queue SET (n_distinct = 1000), ALTER COLUMN queue_hash SET (n_distinct = 1000);
SELECT pg_catalog.pg_extension_config_dump('jobq.fairness', '');
CREATE TABLE jobq.fairness_keys (
    queue         text NOT NULL,
    fairness_key  text,
    priority      integer,
    weight        integer NOT NULL DEFAULT 1
);
CREATE INDEX fairness_by_key ON jobq.fairness_keys (queue, fairness_key, priority);
ALTER TABLE jobq.fairness_keys ALTER COLUMN queue SET (n_distinct = 1000);
SELECT pg_catalog.pg_extension_config_dump('jobq.fairness_keys', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.fairness_turns', '');
CREATE FUNCTION jobq._note_fairness(low bigint) RETURNS void
VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'note_fairness_wrapper';
CREATE FUNCTION jobq._fairness_written() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._note_fairness((SELECT min(a.served) FROM added a WHERE a.priority IS NOT NULL));
    RETURN NULL;
END $$;
CREATE TRIGGER fairness_written AFTER INSERT ON jobq.fairness REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION jobq._fairness_written();
ALTER TABLE jobq.fairness ENABLE ALWAYS TRIGGER fairness_written;
CREATE FUNCTION jobq._fairness_replicated() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._note_fairness(CASE WHEN NEW.priority IS NOT NULL THEN NEW.served END);
    RETURN NULL;
END $$;
CREATE TRIGGER fairness_replicated AFTER INSERT ON jobq.fairness
    FOR EACH ROW EXECUTE FUNCTION jobq._fairness_replicated();
ALTER TABLE jobq.fairness ENABLE REPLICA TRIGGER fairness_replicated;
-- A subscription's apply fires row triggers only: edges that arrive that way (src/sql/workflows.sql).
CREATE TRIGGER edges_replicated AFTER INSERT ON jobq.edges
    FOR EACH ROW EXECUTE FUNCTION jobq._edges_written();
ALTER TABLE jobq.edges ENABLE REPLICA TRIGGER edges_replicated;

-- Queues granted per role (src/sql/grants.sql).
CREATE TABLE jobq.queue_grants (
    role       regrole NOT NULL,
    privilege  text NOT NULL,   -- 'reader', 'producer' or 'worker', each including the one before
    pattern    text NOT NULL,
    granted_at timestamptz NOT NULL,
    PRIMARY KEY (role, privilege, pattern)
);
SELECT pg_catalog.pg_extension_config_dump('jobq.queue_grants', '');

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

CREATE FUNCTION jobq._patterns(privilege text) RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT jobq._limits(privilege)
$$;

CREATE FUNCTION jobq._sees(name text, patterns text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT patterns IS NULL
        OR EXISTS (SELECT 1 FROM unnest(patterns) p
                    WHERE p = name OR (right(p, 1) = '*' AND starts_with(name, left(p, -1))))
$$;

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

CREATE FUNCTION jobq._sees_job(id bigint) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT jobq._sees(coalesce((SELECT j.queue FROM jobq.live_jobs j WHERE j.id = _sees_job.id),
                               (SELECT f.queue FROM jobq.finished_jobs f WHERE f.id = _sees_job.id)),
                      jobq._limits('reader'))
$$;

CREATE OR REPLACE VIEW jobq.jobs WITH (security_invoker) AS
SELECT * FROM jobq.live_jobs
UNION ALL
SELECT * FROM jobq.finished_jobs;

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

CREATE FUNCTION jobq_grant_queues(role regrole, privilege text, queues text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._check_grant(role, privilege, queues);
    INSERT INTO jobq.queue_grants (role, privilege, pattern, granted_at)
    SELECT DISTINCT jobq_grant_queues.role, jobq_grant_queues.privilege, q, clock_timestamp()
      FROM unnest(queues) q
    ON CONFLICT DO NOTHING;
END $$;

CREATE FUNCTION jobq_revoke_queues(role regrole, privilege text, queues text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._check_grant(role, privilege, queues);
    DELETE FROM jobq.queue_grants g
     WHERE g.role = jobq_revoke_queues.role AND g.privilege = jobq_revoke_queues.privilege
       AND g.pattern = ANY (queues);
END $$;


-- Fair checkout (src/sql/fairness.sql).
CREATE FUNCTION jobq._fair_queues() RETURNS SETOF text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    WITH RECURSIVE q(queue) AS (
        (SELECT f.queue FROM jobq.fairness_keys f ORDER BY f.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT f.queue FROM jobq.fairness_keys f WHERE f.queue > q.queue ORDER BY f.queue LIMIT 1)
          FROM q WHERE q.queue IS NOT NULL)
    SELECT q.queue FROM q WHERE q.queue IS NOT NULL;
END $$;

CREATE FUNCTION jobq._fair_keys(queue text, priority integer, keys text[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_rc      boolean := current_setting('transaction_isolation') = 'read committed';
    v_missing text[];
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1785684593, hashtext('fairness:' || queue));
    IF NOT v_rc THEN
        -- (Read after the lock: a pass that prunes this queue from now on waits for this
        -- transaction; one that pruned it since the snapshot set its id before.)
        v_rc := pg_visible_in_snapshot(coalesce(pg_sequence_last_value('jobq.fairness_pruned'), 1)::text::xid8,
                                       pg_current_snapshot());
    END IF;
    -- A key's rows are looked up by `fairness_key = k` or `IS NULL`, each a condition of
    -- fairness_by_key (`IS NOT DISTINCT FROM` is none: it read every row of the queue).
    -- Each look a subquery with LIMIT, not EXISTS: the planner made that a hashed subplan that
    -- read every row of the queue at each call (5 ms with 16,000 keys).
    v_missing := ARRAY(
        SELECT k FROM unnest(keys || CASE WHEN _fair_keys.priority IS NOT NULL THEN ARRAY[NULL::text] END) k
         WHERE NOT v_rc
            OR CASE WHEN k IS NULL
                    THEN (SELECT true FROM jobq.fairness_keys f
                           WHERE f.queue = _fair_keys.queue AND f.fairness_key IS NULL
                             AND f.priority IS NOT DISTINCT FROM _fair_keys.priority LIMIT 1)
                    ELSE (SELECT true FROM jobq.fairness_keys f
                           WHERE f.queue = _fair_keys.queue AND f.fairness_key = k
                             AND f.priority IS NOT DISTINCT FROM _fair_keys.priority LIMIT 1) END IS NULL);
    IF cardinality(v_missing) = 0 THEN
        RETURN;
    END IF;
    WITH added AS (
        INSERT INTO jobq.fairness_keys (queue, fairness_key, priority, weight)
        SELECT _fair_keys.queue, k, _fair_keys.priority,
               coalesce(CASE WHEN k IS NULL
                             THEN (SELECT max(g.weight) FROM jobq.fairness_keys g
                                    WHERE g.queue = _fair_keys.queue AND g.fairness_key IS NULL)
                             ELSE (SELECT max(g.weight) FROM jobq.fairness_keys g
                                    WHERE g.queue = _fair_keys.queue AND g.fairness_key = k) END, 1)
          FROM unnest(v_missing) k
        RETURNING fairness_keys.queue, fairness_keys.fairness_key, fairness_keys.priority, fairness_keys.weight)
    INSERT INTO jobq.fairness (queue, fairness_key, priority, weight)
    SELECT a.queue, a.fairness_key, a.priority, a.weight FROM added a;
END $$;

CREATE FUNCTION jobq_set_fairness_weight(queue text, fairness_key text, weight integer) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF queue IS NULL OR weight IS NULL THEN
        RAISE EXCEPTION 'jobq: queue and weight must not be NULL' USING ERRCODE = '22004';
    ELSIF queue = '' OR octet_length(queue) > 1000 THEN
        RAISE EXCEPTION 'jobq: queue must be 1 to 1000 bytes' USING ERRCODE = '22023';
    ELSIF fairness_key = '' OR octet_length(fairness_key) > 1000 THEN
        RAISE EXCEPTION 'jobq: fairness_key must be 1 to 1000 bytes (NULL: the jobs without a key)'
            USING ERRCODE = '22023';
    ELSIF weight < 1 OR weight > 100 THEN
        RAISE EXCEPTION 'jobq: weight must be between 1 and 100, got %', weight USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._fair_keys(queue, NULL, ARRAY[fairness_key]);  -- the row that keeps the weight
    -- The key's copies by fairness_by_key: `= fairness_key` or `IS NULL`, each a condition of
    -- the index (`IS NOT DISTINCT FROM` is none: it read every row of the queue).
    UPDATE jobq.fairness_keys f SET weight = jobq_set_fairness_weight.weight
     WHERE f.queue = jobq_set_fairness_weight.queue
       AND (f.fairness_key = jobq_set_fairness_weight.fairness_key
            OR f.fairness_key IS NULL AND jobq_set_fairness_weight.fairness_key IS NULL);
    -- Its rows of turns, among the queue's (fairness_by_turn has no key: a call that changes a
    -- weight reads every row of the queue, so that no claim writes an entry by key).
    UPDATE jobq.fairness f SET weight = jobq_set_fairness_weight.weight, taken = 0
     WHERE f.queue_hash = hashtext(jobq_set_fairness_weight.queue) AND f.queue = jobq_set_fairness_weight.queue
       AND (f.fairness_key = jobq_set_fairness_weight.fairness_key
            OR f.fairness_key IS NULL AND jobq_set_fairness_weight.fairness_key IS NULL);
END $$;

CREATE FUNCTION jobq._fair_claim(worker uuid, queue text, now timestamptz, paused boolean,
                                 locked boolean, INOUT skip text[], OUT job bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_hash     integer := hashtext(queue);
    v_from     integer := -2147483648;   -- the lowest priority still to look at
    v_p        integer;
    k          record;
    c          record;
    v_blocked  "char";
    v_rows     tid[];                    -- the key's rows to move to the back
    v_last     bigint;                   -- the last turn jobq.fairness_turns gave
    v_skip_c   text[] := '{}';           -- as jobq._checkout's: the keys of jobs that could
    v_skip_l   integer[] := '{}';        -- not start in this claim
    v_skip_u   text[] := '{}';
    v_skip_r   text[] := '{}';
BEGIN
    LOOP
        v_p := jobq._fair_top(v_hash, queue, v_from, now);
        IF v_p IS NULL THEN
            RETURN;
        END IF;
        LOOP
            -- The key whose turn it is: least recently served, with a due, unpaused job at v_p,
            -- not yielded in this call; its row locked, or any when every one is locked.
            -- A row whose xmax is a transaction running at this statement's snapshot is held
            -- (locked or moved) by another checkout: SKIP LOCKED would pass it, and it is
            -- passed before the look for its key's due job, as the Rust passes it by its header
            -- (src/fairness.rs); a key held so is still served by the look below when no other
            -- key can be. (An xmax that is a multixact's id is compared as it is: at worst its
            -- key is left to that look.) The look for a due job is jobq._fair_due's, written
            -- out: a PL/pgSQL call per key passed (about 6 a claim at 16 clients) cost the fair
            -- rate some 7 % (two pairs of 20 s runs, 1,053 against 1,136 and 1,231 against 1,312
            -- jobs/s), and a SQL function with a subquery is never inlined.
            k := NULL;
            IF locked THEN
                SELECT f.ctid AS fid, f.fairness_key INTO k FROM jobq.fairness f
                 WHERE f.queue_hash = v_hash AND f.queue = _fair_claim.queue AND f.priority = v_p
                   AND jobq._fair_skip_entry(v_p, _fair_claim.queue, f.fairness_key) <> ALL (skip)
                   AND f.xmax <> ALL (ARRAY(SELECT pg_catalog.xid(x) FROM pg_catalog.pg_snapshot_xip(pg_catalog.pg_current_snapshot()) x))
                   AND CASE WHEN f.fairness_key IS NULL
                            THEN EXISTS (SELECT 1 FROM jobq.ready r
                                          WHERE r.queue_hash = v_hash AND r.queue = _fair_claim.queue AND r.fairness_key IS NULL
                                            AND r.priority = v_p AND r.run_at <= now
                                            AND (NOT paused OR NOT jobq._paused(r.queue, r.kind)))
                            ELSE EXISTS (SELECT 1 FROM jobq.ready r
                                          WHERE r.queue_hash = v_hash AND r.priority = v_p
                                            AND r.fairness_key = f.fairness_key AND r.queue = _fair_claim.queue
                                            AND r.run_at <= now
                                            AND (NOT paused OR NOT jobq._paused(r.queue, r.kind))) END
                 ORDER BY f.served
                 LIMIT 1
                   FOR UPDATE OF f SKIP LOCKED;
            END IF;
            IF k IS NULL THEN
                SELECT NULL::tid AS fid, f.fairness_key INTO k FROM jobq.fairness f
                 WHERE f.queue_hash = v_hash AND f.queue = _fair_claim.queue AND f.priority = v_p
                   AND jobq._fair_skip_entry(v_p, _fair_claim.queue, f.fairness_key) <> ALL (skip)
                   AND jobq._fair_due(v_hash, _fair_claim.queue, f.fairness_key, v_p, now, paused)
                 ORDER BY f.served
                 LIMIT 1;
                IF NOT FOUND THEN
                    -- No key's turn at v_p. Where no key has a job there, the jobs without one
                    -- are all there is, and take no turns: they are served, unless they yielded.
                    EXIT WHEN EXISTS (SELECT 1 FROM jobq.fairness f
                                       WHERE f.queue_hash = v_hash AND f.queue = _fair_claim.queue AND f.priority = v_p)
                           OR jobq._fair_skip_entry(v_p, _fair_claim.queue, NULL) = ANY (skip);
                    SELECT NULL::tid AS fid, NULL::text AS fairness_key INTO k;
                END IF;
            END IF;
            -- Its oldest due job that no other checkout holds and that can start.
            LOOP
                IF k.fairness_key IS NULL THEN
                    SELECT r.ctid AS rid, r.id, r.keyed, r.concurrency_key, r.concurrency_limit, r.while_key,
                           r.rate_key INTO c FROM jobq.ready r
                     WHERE r.queue_hash = v_hash AND r.queue = _fair_claim.queue AND r.fairness_key IS NULL
                       AND r.priority = v_p AND r.run_at <= now
                       AND (NOT paused OR NOT jobq._paused(r.queue, r.kind))
                       AND (r.concurrency_key IS NULL OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                                WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                       AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                       AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                     ORDER BY r.priority, r.run_at, r.id
                     LIMIT 1
                       FOR UPDATE OF r SKIP LOCKED;
                ELSE
                    SELECT r.ctid AS rid, r.id, r.keyed, r.concurrency_key, r.concurrency_limit, r.while_key,
                           r.rate_key INTO c FROM jobq.ready r
                     WHERE r.queue_hash = v_hash AND r.priority = v_p AND r.fairness_key = k.fairness_key
                       AND r.queue = _fair_claim.queue AND r.run_at <= now
                       AND (NOT paused OR NOT jobq._paused(r.queue, r.kind))
                       AND (r.concurrency_key IS NULL OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                                WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                       AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                       AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                     ORDER BY r.priority, r.fairness_key, r.run_at, r.id
                     LIMIT 1
                       FOR UPDATE OF r SKIP LOCKED;
                END IF;
                EXIT WHEN NOT FOUND;
                IF c.keyed THEN
                    v_blocked := jobq._claim_keyed(c.id, c.rid, worker, now);
                ELSE
                    DELETE FROM jobq.ready r WHERE r.ctid = c.rid;
                    UPDATE jobq.live_jobs j
                       SET state = 'executing', worker_id = _fair_claim.worker, attempt = j.attempt + 1,
                           started_at = now
                     WHERE j.id = c.id AND j.state = 'ready';
                    v_blocked := NULL;
                END IF;
                EXIT WHEN v_blocked IS NULL;
                IF v_blocked = 'c' THEN
                    v_skip_c := v_skip_c || c.concurrency_key;
                    v_skip_l := v_skip_l || c.concurrency_limit;
                ELSIF v_blocked = 'u' THEN
                    v_skip_u := v_skip_u || c.while_key;
                ELSE
                    v_skip_r := v_skip_r || c.rate_key;
                END IF;
            END LOOP;
            IF FOUND AND v_blocked IS NULL THEN  -- (FOUND: the claim's last statement found its row)
                -- Served: to the back once it had its weight's jobs in this turn. Its row is
                -- the one locked above; a key picked without its lock (REPEATABLE READ,
                -- SERIALIZABLE) has its rows locked now, never waiting for another checkout's
                -- hold. A key taken from while another checkout holds it stays where it is.
                v_rows := CASE WHEN k.fid IS NOT NULL THEN ARRAY[k.fid] ELSE '{}' END;
                IF k.fid IS NULL AND NOT locked THEN
                    BEGIN
                        v_rows := ARRAY(SELECT f.ctid FROM jobq.fairness f
                                         WHERE f.queue_hash = v_hash AND f.queue = _fair_claim.queue AND f.priority = v_p
                                           AND (f.fairness_key = k.fairness_key
                                                OR f.fairness_key IS NULL AND k.fairness_key IS NULL)
                                           FOR UPDATE NOWAIT);
                    EXCEPTION WHEN serialization_failure OR lock_not_available THEN
                        NULL;  -- held, or moved by a transaction after our snapshot: it stays where that one put it
                    END;
                END IF;
                v_last := pg_sequence_last_value('jobq.fairness_turns');
                -- A key already at the back stays there: its `served` is the last the
                -- sequence gave, so no row is behind it, and a row added later comes behind it
                -- either way. A key served alone is then not written at all (weight 1).
                UPDATE jobq.fairness f
                   SET taken = CASE WHEN f.taken + 1 >= f.weight THEN 0 ELSE f.taken + 1 END,
                       served = CASE WHEN f.taken + 1 >= f.weight AND f.served IS DISTINCT FROM v_last
                                     THEN nextval('jobq.fairness_turns') ELSE f.served END
                 WHERE f.ctid = ANY (v_rows)
                   AND (f.taken + 1 < f.weight OR f.taken <> 0 OR f.served IS DISTINCT FROM v_last);
                job := c.id;
                RETURN;
            END IF;
            -- Its jobs are all held by other checkouts, or none can start: the key yields its
            -- turn at this priority for the rest of this call.
            skip := skip || jobq._fair_skip_entry(v_p, _fair_claim.queue, k.fairness_key);
        END LOOP;
        EXIT WHEN v_p = 2147483647;
        v_from := v_p + 1;
    END LOOP;
END $$;

CREATE FUNCTION jobq._fair_skip_entry(priority integer, queue text, fairness_key text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT priority::text || E'\n' || queue || E'\n' || coalesce(fairness_key, '')
$$;

CREATE FUNCTION jobq._fair_top(hash integer, queue text, lowest integer, now timestamptz) RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT min(x.priority)
              FROM ((SELECT r.priority FROM jobq.ready r
                      WHERE r.queue_hash = hash AND r.queue = _fair_top.queue AND r.fairness_key IS NULL
                        AND r.priority >= lowest AND r.run_at <= now
                      ORDER BY r.priority, r.run_at, r.id LIMIT 1)
                    UNION ALL
                    (SELECT r.priority FROM jobq.ready r
                      WHERE r.queue_hash = hash AND r.queue = _fair_top.queue AND r.fairness_key IS NOT NULL
                        AND r.priority >= lowest AND r.run_at <= now
                      ORDER BY r.priority, r.fairness_key, r.run_at, r.id LIMIT 1)) x);
END $$;

CREATE FUNCTION jobq._fair_due(hash integer, queue text, fairness_key text, priority integer,
                               now timestamptz, paused boolean) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF fairness_key IS NULL THEN
        RETURN EXISTS (SELECT 1 FROM jobq.ready r
                        WHERE r.queue_hash = hash AND r.queue = _fair_due.queue AND r.fairness_key IS NULL
                          AND r.priority = _fair_due.priority AND r.run_at <= now
                          AND (NOT paused OR NOT jobq._paused(r.queue, r.kind)));
    END IF;
    RETURN EXISTS (SELECT 1 FROM jobq.ready r
                    WHERE r.queue_hash = hash AND r.priority = _fair_due.priority
                      AND r.fairness_key = _fair_due.fairness_key AND r.queue = _fair_due.queue
                      AND r.run_at <= now
                      AND (NOT paused OR NOT jobq._paused(r.queue, r.kind)));
END $$;

CREATE FUNCTION jobq._paused(queue text, kind text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM jobq.pauses p
                    WHERE (p.queue = _paused.queue AND (p.kind IS NULL OR p.kind = _paused.kind))
                       OR (p.queue IS NULL AND p.kind = _paused.kind));
END $$;

CREATE FUNCTION jobq._checkout_fair(worker uuid, queues text[], max_jobs integer, now timestamptz,
                                    grants text[])
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_rc       boolean := current_setting('transaction_isolation') = 'read committed';
    v_paused   boolean := EXISTS (SELECT 1 FROM jobq.pauses);
    v_fair     text[];             -- the fair queues this call may take from
    v_plain    boolean;            -- whether it may take from other queues too
    v_claimed  bigint[] := '{}';
    v_skip     text[] := '{}';     -- fairness keys that yielded their turn (jobq._fair_claim)
    v_skip_c   text[] := '{}';     -- as jobq._checkout's: keys of the other queues that
    v_skip_l   integer[] := '{}';  -- could not start in this call
    v_skip_u   text[] := '{}';
    v_skip_r   text[] := '{}';
    v_best     record;
    v_job      bigint;
    c          record;
    v_blocked  "char";
BEGIN
    -- One descent of fairness_by_key per queue named, or per fair queue for a call of every
    -- queue (never a read of every key's row).
    IF queues IS NOT NULL THEN
        v_fair := ARRAY(SELECT DISTINCT q FROM unnest(queues) q
                         WHERE (SELECT true FROM jobq.fairness_keys f WHERE f.queue = q LIMIT 1));
    ELSE
        v_fair := ARRAY(SELECT q FROM jobq._fair_queues() q WHERE grants IS NULL OR jobq._sees(q, grants));
    END IF;
    v_plain := queues IS NULL OR NOT queues <@ v_fair;
    WHILE cardinality(v_claimed) < max_jobs AND (v_plain OR cardinality(v_fair) > 0) LOOP
        -- What each source would give next: (priority, run_at, id), the first wins. A call
        -- of one fair queue has nothing to compare.
        IF NOT v_plain AND cardinality(v_fair) = 1 THEN
            SELECT v_fair[1] AS src INTO v_best;
        ELSE
            SELECT s.src, s.priority, s.run_at, s.id INTO v_best
              FROM (SELECT NULL::text AS src, r.priority, r.run_at, r.id
                      FROM jobq.ready r
                     WHERE v_plain AND r.fairness_key IS NULL
                       AND (queues IS NULL OR r.queue = ANY (queues)) AND r.queue <> ALL (v_fair)
                       AND (grants IS NULL OR jobq._sees(r.queue, grants))
                       AND r.run_at <= now
                       AND (NOT v_paused OR NOT jobq._paused(r.queue, r.kind))
                       AND (r.concurrency_key IS NULL OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                                WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                       AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                       AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                     ORDER BY r.priority, r.run_at, r.id
                     LIMIT 1) s
            UNION ALL
            SELECT q, n.priority, n.run_at, n.id
              FROM unnest(v_fair) q CROSS JOIN LATERAL jobq._fair_next(q, now, v_paused, v_skip) n
             ORDER BY 2, 3, 4
             LIMIT 1;
            IF NOT FOUND THEN
                EXIT;
            END IF;
        END IF;
        v_job := NULL;
        IF v_rc AND v_best.src IS NOT NULL THEN
            -- READ COMMITTED raises no 40001 here: the claim needs no subtransaction (one
            -- cost a claim about a third of its time).
            SELECT x.skip, x.job INTO v_skip, v_job FROM jobq._fair_claim(worker, v_best.src, now, v_paused, true, v_skip) x;
            IF v_job IS NULL THEN
                v_fair := array_remove(v_fair, v_best.src);  -- nothing more it can give
            END IF;
        ELSE
        BEGIN
            IF v_best.src IS NOT NULL THEN
                SELECT x.skip, x.job INTO v_skip, v_job FROM jobq._fair_claim(worker, v_best.src, now, v_paused, v_rc, v_skip) x;
                IF v_job IS NULL THEN
                    v_fair := array_remove(v_fair, v_best.src);  -- nothing more it can give
                END IF;
            ELSE
                SELECT r.ctid AS rid, r.id, r.keyed, r.concurrency_key, r.concurrency_limit, r.while_key, r.rate_key INTO c
                  FROM jobq.ready r
                 WHERE r.fairness_key IS NULL
                   AND (queues IS NULL OR r.queue = ANY (queues)) AND r.queue <> ALL (v_fair)
                   AND (grants IS NULL OR jobq._sees(r.queue, grants))
                   AND r.run_at <= now
                   AND (r.priority, r.run_at, r.id) >= (v_best.priority, v_best.run_at, v_best.id)
                   AND (NOT v_paused OR NOT jobq._paused(r.queue, r.kind))
                   AND (r.concurrency_key IS NULL OR NOT EXISTS (
                           SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                            WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                   AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                   AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                 ORDER BY r.priority, r.run_at, r.id
                 LIMIT 1
                   FOR UPDATE OF r SKIP LOCKED;
                IF NOT FOUND THEN
                    v_plain := false;  -- every one held by other checkouts
                ELSIF NOT c.keyed THEN
                    DELETE FROM jobq.ready r WHERE r.ctid = c.rid;
                    UPDATE jobq.live_jobs j
                       SET state = 'executing', worker_id = _checkout_fair.worker, attempt = j.attempt + 1,
                           started_at = now
                     WHERE j.id = c.id AND j.state = 'ready';
                    v_job := c.id;
                ELSE
                    v_blocked := jobq._claim_keyed(c.id, c.rid, worker, now);
                    IF v_blocked IS NULL THEN
                        v_job := c.id;
                    ELSIF v_blocked = 'c' THEN
                        v_skip_c := v_skip_c || c.concurrency_key;
                        v_skip_l := v_skip_l || c.concurrency_limit;
                    ELSIF v_blocked = 'u' THEN
                        v_skip_u := v_skip_u || c.while_key;
                    ELSE
                        v_skip_r := v_skip_r || c.rate_key;
                    END IF;
                END IF;
            END IF;
        EXCEPTION WHEN serialization_failure THEN
            -- (REPEATABLE READ, SERIALIZABLE) a row changed since our snapshot: that source
            -- gives nothing more to this call.
            IF v_best.src IS NOT NULL THEN
                v_fair := array_remove(v_fair, v_best.src);
            ELSE
                v_plain := false;
            END IF;
        END;
        END IF;
        IF v_job IS NOT NULL THEN
            v_claimed := v_claimed || v_job;
        END IF;
    END LOOP;
    RETURN v_claimed;
END $$;

CREATE FUNCTION jobq._fair_next(queue text, now timestamptz, paused boolean, skip text[],
                                OUT priority integer, OUT run_at timestamptz, OUT id bigint)
RETURNS SETOF record
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_hash  integer := hashtext(queue);
    v_from  integer := -2147483648;
    v_p     integer;
    v_key   text;
BEGIN
    LOOP
        v_p := jobq._fair_top(v_hash, queue, v_from, now);
        IF v_p IS NULL THEN
            RETURN;
        END IF;
        SELECT f.fairness_key INTO v_key FROM jobq.fairness f
         WHERE f.queue_hash = v_hash AND f.queue = _fair_next.queue AND f.priority = v_p
           AND jobq._fair_skip_entry(v_p, _fair_next.queue, f.fairness_key) <> ALL (skip)
           AND jobq._fair_due(v_hash, _fair_next.queue, f.fairness_key, v_p, now, paused)
         ORDER BY f.served
         LIMIT 1;
        IF NOT FOUND THEN
            -- (As jobq._fair_claim: where no key has a job at v_p, those without one.)
            v_key := NULL;
            FOUND := NOT EXISTS (SELECT 1 FROM jobq.fairness f WHERE f.queue_hash = v_hash AND f.queue = _fair_next.queue AND f.priority = v_p)
                     AND jobq._fair_skip_entry(v_p, _fair_next.queue, NULL) <> ALL (skip)
                     AND jobq._fair_due(v_hash, _fair_next.queue, NULL, v_p, now, paused);
        END IF;
        IF FOUND THEN
            IF v_key IS NULL THEN
                RETURN QUERY SELECT r.priority, r.run_at, r.id FROM jobq.ready r
                 WHERE r.queue_hash = v_hash AND r.queue = _fair_next.queue AND r.fairness_key IS NULL
                   AND r.priority = v_p AND r.run_at <= now
                   AND (NOT paused OR NOT jobq._paused(r.queue, r.kind))
                 ORDER BY r.priority, r.run_at, r.id
                 LIMIT 1;
            ELSE
                RETURN QUERY SELECT r.priority, r.run_at, r.id FROM jobq.ready r
                 WHERE r.queue_hash = v_hash AND r.priority = v_p AND r.fairness_key = v_key
                   AND r.queue = _fair_next.queue AND r.run_at <= now
                   AND (NOT paused OR NOT jobq._paused(r.queue, r.kind))
                 ORDER BY r.priority, r.fairness_key, r.run_at, r.id
                 LIMIT 1;
            END IF;
            RETURN;
        END IF;
        EXIT WHEN v_p = 2147483647;
        v_from := v_p + 1;
    END LOOP;
END $$;

CREATE FUNCTION jobq._prune_fairness() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    q        text;
    v_set    bigint;
    v_idle   tid[];
    v_twins  tid[];
    v_gone   jobq.fairness_keys[];  -- the identities of the rows deleted
    v_more   jobq.fairness_keys[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed'
       OR NOT pg_try_advisory_xact_lock(1785684593, hashtext('fairness:prune')) THEN
        RETURN;  -- (another pass is pruning)
    END IF;
    FOR q IN SELECT jobq._fair_queues() LOOP
        -- What may go is found first, without the queue's lock: a key's row at a priority where
        -- the key has no waiting job, a weight row back at weight 1, and of two rows of one key
        -- at one priority (jobq._fair_keys) the one served more recently. That reads every row of
        -- the queue, and the queue's keyed enqueues waited for it while the lock was held (with
        -- 55,000 keys, some 75 ms of every second); under the lock only the rows found are looked
        -- at again. A key's look for a waiting job is one probe of ready_fair by its leading
        -- columns, a subquery per row (not NOT EXISTS: the planner made that an anti-join that
        -- read the queue's whole backlog).
        -- Not while a transaction is making one of the queue's keyed jobs ready (the lock is
        -- tried, and let go, first: the read would be for nothing).
        CONTINUE WHEN NOT pg_try_advisory_lock(1785684593, hashtext('fairness:' || q));
        PERFORM pg_advisory_unlock(1785684593, hashtext('fairness:' || q));
        v_idle := ARRAY(
            SELECT g.ctid FROM jobq.fairness g
             WHERE g.queue_hash = hashtext(q) AND g.queue = q
               AND CASE WHEN g.priority IS NULL THEN g.weight = 1
                        WHEN g.fairness_key IS NULL THEN false
                        ELSE (SELECT true FROM jobq.ready r
                               WHERE r.queue_hash = hashtext(q) AND r.priority = g.priority
                                 AND r.fairness_key = g.fairness_key AND r.queue = q
                               LIMIT 1) IS NULL END);
        -- One read of the queue's rows (an EXISTS per row read them all for each).
        v_twins := ARRAY(
            SELECT t.ctid
              FROM (SELECT h.ctid, row_number() OVER (PARTITION BY h.fairness_key, h.priority
                                                      ORDER BY h.served, h.ctid) AS n
                      FROM jobq.fairness h WHERE h.queue_hash = hashtext(q) AND h.queue = q) t
             WHERE t.n > 1);
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(1785684593, hashtext('fairness:' || q));
        -- Before any deletion (an assignment, not PERFORM: no plan started).
        v_set := coalesce(v_set, setval('jobq.fairness_pruned', pg_current_xact_id()::text::bigint));
        -- Under the lock, in a statement whose snapshot is taken after it, the rows found, each
        -- looked at again as above (an enqueue may have made a job of the key ready since; a
        -- moved row is no longer there), and locked before they are deleted. (The look for a
        -- waiting job is written out twice, here and above: the price of not holding enqueues.)
        WITH gone AS (
        DELETE FROM jobq.fairness f
         WHERE f.ctid = ANY (ARRAY(
                   SELECT g.ctid FROM jobq.fairness g
                    WHERE g.ctid = ANY (v_idle || v_twins) AND g.queue = q
                      AND CASE WHEN g.ctid = ANY (v_twins)
                               THEN (SELECT true FROM jobq.fairness h
                                      WHERE h.queue_hash = hashtext(q) AND h.queue = q AND h.priority IS NOT DISTINCT FROM g.priority
                                        AND (h.fairness_key = g.fairness_key OR h.fairness_key IS NULL AND g.fairness_key IS NULL)
                                        AND (h.served, h.ctid) < (g.served, g.ctid)
                                      LIMIT 1)
                               WHEN g.priority IS NULL THEN g.weight = 1
                               WHEN g.fairness_key IS NULL THEN false
                               ELSE (SELECT true FROM jobq.ready r
                                      WHERE r.queue_hash = hashtext(q) AND r.priority = g.priority
                                        AND r.fairness_key = g.fairness_key AND r.queue = q
                                      LIMIT 1) IS NULL END
                      FOR UPDATE OF g SKIP LOCKED))
        RETURNING f.queue, f.fairness_key, f.priority, f.weight)
        SELECT ARRAY(SELECT (g.queue, g.fairness_key, g.priority, g.weight)::jobq.fairness_keys FROM gone g) INTO v_gone;
        -- The queue's row for its jobs without a key at a priority where no key's row is left.
        WITH gone AS (
        DELETE FROM jobq.fairness f
         WHERE f.ctid = ANY (ARRAY(
                   SELECT g.ctid FROM jobq.fairness g
                    WHERE g.queue_hash = hashtext(q) AND g.queue = q AND g.fairness_key IS NULL AND g.priority IS NOT NULL
                      AND (SELECT true FROM jobq.fairness h
                            WHERE h.queue_hash = hashtext(q) AND h.queue = q AND h.fairness_key IS NOT NULL
                              AND h.priority = g.priority
                            LIMIT 1) IS NULL
                      FOR UPDATE SKIP LOCKED))
        RETURNING f.queue, f.fairness_key, f.priority, f.weight)
        SELECT ARRAY(SELECT (g.queue, g.fairness_key, g.priority, g.weight)::jobq.fairness_keys FROM gone g) INTO v_more;
        -- A copy for each row deleted: the n-th deleted row of an identity takes its n-th copy,
        -- found by fairness_by_key (`= fairness_key` or `IS NULL`, as in jobq._fair_keys).
        DELETE FROM jobq.fairness_keys k
         WHERE k.ctid = ANY (ARRAY(
                   SELECT CASE WHEN d.fairness_key IS NULL
                               THEN (SELECT c.ctid FROM jobq.fairness_keys c
                                      WHERE c.queue = q AND c.fairness_key IS NULL
                                        AND c.priority IS NOT DISTINCT FROM d.priority
                                      ORDER BY c.ctid OFFSET d.n - 1 LIMIT 1)
                               ELSE (SELECT c.ctid FROM jobq.fairness_keys c
                                      WHERE c.queue = q AND c.fairness_key = d.fairness_key
                                        AND c.priority IS NOT DISTINCT FROM d.priority
                                      ORDER BY c.ctid OFFSET d.n - 1 LIMIT 1) END
                     FROM (SELECT u.fairness_key, u.priority,
                                  row_number() OVER (PARTITION BY u.fairness_key, u.priority) AS n
                             FROM unnest(v_gone || v_more) u) d));
    END LOOP;
END $$;

-- A job's fairness key reaches its ready row, its lookups, the compaction and the waits.
CREATE OR REPLACE FUNCTION jobq._enter_ready(ids bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp SET enable_seqscan = off AS $$
DECLARE
    v_groups integer;
BEGIN
    -- One pass: the inserted rows' keys feed the floors. The rows of one call share queue,
    -- priority and run_at but for a requeue by the reaper.
    WITH ins AS (
        INSERT INTO jobq.ready (queue, priority, run_at, id, kind, keyed, concurrency_key,
                                concurrency_limit, while_key, rate_key, fairness_key)
        SELECT j.queue, j.priority, j.run_at, j.id, j.kind,
               j.concurrency_key IS NOT NULL OR j.rate_key IS NOT NULL
                   OR coalesce(j.unique_strategy IN ('while_executing', 'until_executing'), false),
               j.concurrency_key, j.concurrency_limit,
               CASE WHEN j.unique_strategy = 'while_executing' THEN j.unique_key END, j.rate_key,
               j.fairness_key
          FROM jobq.live_jobs j
         WHERE j.id = ANY (ids) AND j.state = 'ready'
        RETURNING queue, priority, run_at, id, fairness_key
    )
    SELECT count(*) INTO v_groups
      FROM (SELECT jobq._lower_floor('jobq.ready'::regclass, i.queue, i.priority, i.run_at, min(i.id)),
                   jobq._wake(i.queue, i.run_at, count(*)),  -- waiting checkouts, at commit
                   -- a fairness key's turn (src/sql/fairness.sql)
                   CASE WHEN bool_or(i.fairness_key IS NOT NULL) THEN
                       jobq._fair_keys(i.queue, i.priority, array_agg(DISTINCT i.fairness_key) FILTER (WHERE i.fairness_key IS NOT NULL))
                   END
              FROM ins i
             GROUP BY i.queue, i.priority, i.run_at) g;
END $$;

CREATE OR REPLACE FUNCTION jobq._lock_ready(job bigint) RETURNS tid
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j     record;
    prev  text;   -- what the last look found: the same twice means no ready row to lock
    v     tid;
BEGIN
    LOOP
        SELECT x.queue, x.priority, x.run_at, x.state, x.fairness_key INTO j FROM jobq.live_jobs x WHERE x.id = job;
        IF NOT FOUND OR j.state <> 'ready' OR j::text = prev THEN
            RETURN NULL;
        END IF;
        IF j.fairness_key IS NULL THEN
            SELECT r.ctid INTO v FROM jobq.ready r
             WHERE r.queue_hash = hashtext(j.queue) AND r.queue = j.queue AND r.fairness_key IS NULL
               AND r.priority = j.priority AND r.run_at = j.run_at AND r.id = job
               FOR UPDATE OF r;
        ELSE
            SELECT r.ctid INTO v FROM jobq.ready r
             WHERE r.queue_hash = hashtext(j.queue) AND r.queue = j.queue AND r.fairness_key = j.fairness_key
               AND r.priority = j.priority AND r.run_at = j.run_at AND r.id = job
               FOR UPDATE OF r;
        END IF;
        IF FOUND THEN
            RETURN v;
        END IF;
        prev := j::text;
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION jobq._compact(min_dead bigint, lock_wait interval DEFAULT '50 ms') RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp SET lock_timeout = 0 AS $$
DECLARE
    v_live     jobq.live_jobs[];
    v_ready    jobq.ready[];
    v_slots    jobq.slots[];
    v_dead     bigint;
    v_rows     bigint;
    v_before   bigint;
    v_start    timestamptz;
    v_until    timestamptz;
    v_table    regclass;
    -- The hot tables, in the order they are locked (checkout's).
    v_tables   regclass[] := ARRAY['jobq.ready'::regclass, 'jobq.live_jobs'::regclass, 'jobq.slots'::regclass];
BEGIN
    -- Its copy must see every row committed before it got its lock: a statement's snapshot
    -- taken after the LOCK, which only READ COMMITTED gives (a transaction snapshot taken
    -- before it would miss rows, and the TRUNCATE would lose them).
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobq: compaction needs READ COMMITTED' USING ERRCODE = '0A000';
    END IF;
    IF min_dead > 0 THEN
        SELECT sum(pg_stat_get_dead_tuples(t)), sum(pg_stat_get_live_tuples(t)) INTO v_dead, v_rows
          FROM unnest(v_tables) t;
        IF v_dead < greatest(min_dead, 4 * v_rows) OR v_rows > 100000 THEN
            RETURN false;
        END IF;
        -- Only where vacuum cannot do it: something has held the xmin horizon for more than
        -- 10 s (a replication slot or a prepared transaction for any time). Without that, the
        -- dead versions are autovacuum's, however many pile up between its visits.
        IF NOT EXISTS (SELECT 1 FROM jobq._oldest_horizon() h
                        WHERE h.xact_age IS NULL OR h.xact_age > interval '10 seconds') THEN
            RETURN false;
        END IF;
        -- A prepared transaction's locks have no pid: they count as old.
        IF EXISTS (SELECT 1 FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
                    WHERE l.locktype = 'relation' AND l.granted
                      AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                      AND l.relation = ANY (v_tables::oid[])
                      AND l.pid IS DISTINCT FROM pg_backend_pid()
                      AND (l.pid IS NULL OR a.xact_start < clock_timestamp() - interval '1 second')) THEN
            RETURN false;
        END IF;
        IF jobq._dump_connected() THEN
            RETURN false;
        END IF;
    END IF;
    -- In checkout's order (jobq.ready, jobq.live_jobs, then jobq.slots), and never waiting as
    -- long as the deadlock detector would: every call that comes meanwhile queues behind this
    -- request, and one that waited deadlock_timeout would run the detector and could be picked.
    -- One budget for the three (lock_timeout counts each wait on its own): each table gets
    -- what the ones before it left. A lock not granted in time is NULL, tried again later.
    v_until := clock_timestamp() + least(coalesce(lock_wait, interval '50 ms'),
                                         current_setting('deadlock_timeout')::interval / 2);
    BEGIN
        FOREACH v_table IN ARRAY v_tables LOOP
            PERFORM set_config('lock_timeout',
                greatest(1, extract(epoch FROM v_until - clock_timestamp()) * 1000)::integer || 'ms', true);
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_table);
        END LOOP;
    EXCEPTION WHEN lock_not_available THEN
        RETURN NULL;
    END;
    -- Once more under the lock: a pg_dump that connected since the look above may have taken
    -- its snapshot already (a narrow window remains: one that connects from here to the commit).
    IF min_dead > 0 AND jobq._dump_connected() THEN
        RETURN false;
    END IF;
    v_start := clock_timestamp();
    -- Before the truncation, under the lock: whoever locks the tables next reads it.
    IF NOT jobq._note_compaction() THEN
        RAISE EXCEPTION 'jobq: compaction needs jobq in shared_preload_libraries'
            USING ERRCODE = '55000';
    END IF;
    v_before := (SELECT sum(pg_total_relation_size(t)) FROM unnest(v_tables) t);
    SELECT array_agg(j) INTO v_live FROM jobq.live_jobs j;
    SELECT array_agg(r) INTO v_ready FROM jobq.ready r;
    SELECT array_agg(s) INTO v_slots FROM jobq.slots s;
    -- TRUNCATE locks what LOCK TABLE cannot name, each table's TOAST table and indexes (which
    -- autovacuum locks on their own), within what is left of the budget: not granted in time,
    -- the compaction gives up as above. (Its note stays: a compaction that did not commit, as
    -- one that failed later would leave, which at worst sends an older snapshot's reader to
    -- retry with 40001.)
    BEGIN
        TRUNCATE jobq.live_jobs, jobq.ready, jobq.slots;
    EXCEPTION WHEN lock_not_available THEN
        RETURN NULL;
    END;
    INSERT INTO jobq.live_jobs SELECT * FROM unnest(v_live);
    INSERT INTO jobq.slots SELECT * FROM unnest(v_slots);
    -- ready's stored queue_hash is computed again, not copied.
    INSERT INTO jobq.ready (queue, priority, run_at, id, kind, keyed, concurrency_key,
                            concurrency_limit, while_key, rate_key, fairness_key)
    SELECT r.queue, r.priority, r.run_at, r.id, r.kind, r.keyed, r.concurrency_key,
           r.concurrency_limit, r.while_key, r.rate_key, r.fairness_key
      FROM unnest(v_ready) r;
    RAISE LOG 'jobq: compacted the hot tables in % ms: % jobs kept, % MB before, % MB after',
        round(extract(epoch FROM clock_timestamp() - v_start) * 1000, 1),
        coalesce(array_length(v_live, 1), 0), round(v_before / 1048576.0, 1),
        round((SELECT sum(pg_total_relation_size(t)) FROM unnest(v_tables) t) / 1048576.0, 1);
    RETURN true;
END $$;

CREATE OR REPLACE FUNCTION jobq._checkout_waiting(worker uuid, queues text[], max_jobs integer, wait interval)
RETURNS SETOF jobq.job
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_until  timestamptz;
    v_look   timestamptz;
    v_due    timestamptz;
    v_keys   text[];
    v_rates  text[];
    v_rate   text;
    v_opens  timestamptz;
    v_opening integer;
    v_hashes integer[] := ARRAY(SELECT hashtext(q) FROM unnest(queues) q);  -- ready_by_queue's keys
BEGIN
    IF wait <= interval '0' OR wait > interval '1 hour' THEN
        RAISE EXCEPTION 'jobq: wait must be more than 0 and at most 1 hour, got %', wait USING ERRCODE = '22023';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobq: jobq_checkout with wait needs READ COMMITTED'
            USING ERRCODE = '0A000',
                  DETAIL = 'A transaction snapshot never sees the jobs committed after it was taken.';
    END IF;
    v_until := clock_timestamp() + wait;
    IF NOT jobq._wait_begin(worker, queues) THEN
        -- No waiter slot (no preload, or all taken): no reap pass keeps this worker alive
        -- while it waits, so the wait ends before its heartbeat could run out.
        v_until := least(v_until, clock_timestamp() + current_setting('jobq.heartbeat_timeout')::interval / 2);
    END IF;
    LOOP
        -- A worker that stops checking out (jobq_stop_checkouts, src/sql/workers.sql) waits no
        -- more: read before each look, so a call rung for it, or begun after it, returns at
        -- once (its looks would claim nothing).
        EXIT WHEN EXISTS (SELECT 1 FROM jobq.workers w
                           WHERE w.id = worker AND w.stopping_at IS NOT NULL AND jobq._may_act_for(w.owner));
        BEGIN
            v_look := clock_timestamp();
            RETURN QUERY SELECT * FROM @extschema@.jobq_checkout(worker, queues, max_jobs);
            IF FOUND THEN
                PERFORM jobq._wait_end(false);  -- no longer a waiter, whatever the transaction does next
                RETURN;
            END IF;
            -- What no commit for these queues announces, read anew at each look (a scan of
            -- these queues' waiting rows: none of them could start): the earliest scheduled job
            -- comes due (the waiter's alarm; a commit that schedules an earlier one moves it);
            -- a slot is freed, by a job of any queue, of a key that holds back a due job
            -- (`_freed`'s names: 'c' and a concurrency key, 'u' and a while_executing key); a
            -- rate window that holds one back opens.
            SELECT min(r.run_at) FILTER (WHERE r.run_at > v_look),
                   array_agg(DISTINCT 'c' || r.concurrency_key) FILTER (WHERE r.run_at <= v_look AND r.concurrency_key IS NOT NULL)
                   || array_agg(DISTINCT 'u' || r.while_key) FILTER (WHERE r.run_at <= v_look AND r.while_key IS NOT NULL),
                   array_agg(DISTINCT r.rate_key) FILTER (WHERE r.run_at <= v_look AND r.rate_key IS NOT NULL)
              INTO v_due, v_keys, v_rates
              FROM (SELECT x.run_at, x.concurrency_key, x.while_key, x.rate_key FROM jobq.ready x
                     WHERE x.fairness_key IS NULL  -- ready_by_queue
                       AND (queues IS NULL OR (x.queue_hash = ANY (v_hashes) AND x.queue = ANY (queues)))
                    UNION ALL
                    SELECT x.run_at, x.concurrency_key, x.while_key, x.rate_key FROM jobq.ready x
                     WHERE x.fairness_key IS NOT NULL  -- ready_fair (src/sql/fairness.sql)
                       AND (queues IS NULL OR (x.queue_hash = ANY (v_hashes) AND x.queue = ANY (queues)))) r;
            -- The earliest of their full windows (its oldest start, through rate_slots_oldest,
            -- still in it) opens when that start leaves it, strictly after last_start + per
            -- (jobq._take_rate), with every start made at the same moment.
            SELECT l.key, o.oldest + l.per + interval '1 ms',
                   (SELECT count(*) FROM jobq.rate_slots s
                     WHERE s.key = l.key AND s.last_start = o.oldest AND s.slot <= l.max_starts)
              INTO v_rate, v_opens, v_opening
              FROM jobq.rate_limits l
             CROSS JOIN LATERAL (SELECT s.last_start AS oldest FROM jobq.rate_slots s
                                  WHERE s.key = l.key AND s.slot <= l.max_starts
                                  ORDER BY s.last_start LIMIT 1) o
             WHERE l.key = ANY (v_rates) AND o.oldest >= v_look - l.per
             ORDER BY 2
             LIMIT 1;
            -- Nothing claimed: let go of whatever the look locked, and of the locks on the
            -- tables it read (held, they would block DDL on them for the whole wait).
            RAISE SQLSTATE 'JQ000';
        EXCEPTION WHEN SQLSTATE 'JQ000' THEN
            NULL;
        END;
        EXIT WHEN clock_timestamp() >= v_until;
        PERFORM jobq._wait(v_until, v_due, v_keys, v_rate, v_opens, coalesce(v_opening, 1));
    END LOOP;
    PERFORM jobq._wait_end(true);  -- ran out: what its last look could not use goes on
END $$;

-- A new last argument (fairness_key): the old functions go.
DROP FUNCTION jobq._insert_job(bigint, text, jsonb, text, integer, timestamptz, integer, text, text, text, integer, text, bigint[], text);
CREATE FUNCTION jobq._insert_job(
    id                bigint,
    queue             text,
    payload           jsonb,
    kind              text,
    priority          integer,
    run_at            timestamptz,
    max_attempts      integer,
    unique_key        text,
    unique_strategy   text,
    concurrency_key   text,
    concurrency_limit integer,
    rate_key          text,
    depends_on        bigint[] DEFAULT NULL,
    state             text DEFAULT 'ready',    -- or 'blocked', or 'cancelled' (jobq._depend)
    fairness_key      text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
BEGIN
    -- The hot tables in their one lock order: jobq.ready before jobq.live_jobs, as checkout and
    -- the compaction (src/sql/compact.sql) take them. Inserting the job row first would hold
    -- live_jobs while waiting for ready: a compaction holding ready and waiting for live_jobs
    -- then never gets it (measured: keyed enqueues kept every compaction off after the first).
    LOCK TABLE jobq.ready IN ROW EXCLUSIVE MODE;
    INSERT INTO jobq.live_jobs (id, queue, kind, payload, priority, run_at, enqueued_at, state, max_attempts,
                           unique_key, unique_strategy, concurrency_key, concurrency_limit, rate_key,
                           depends_on, finished_at, fairness_key)
    VALUES (id, queue, kind, payload, priority, run_at, v_now, _insert_job.state, max_attempts,
            unique_key, CASE WHEN unique_key IS NOT NULL THEN unique_strategy END,
            concurrency_key, CASE WHEN concurrency_key IS NOT NULL THEN concurrency_limit END, rate_key,
            _insert_job.depends_on, CASE WHEN _insert_job.state = 'cancelled' THEN v_now END,
            _insert_job.fairness_key);
    PERFORM jobq._tally(queue, 'enqueued', NULL, v_now);  -- the dashboard's counters (src/counters.rs)
    IF _insert_job.state = 'cancelled' THEN
        -- A parent already failed (on_parent_failure 'cancel'): finished at once, keys freed.
        PERFORM jobq._archive(ARRAY[id]);
        PERFORM jobq._release_keys(id, queue, 'cancelled', unique_key, unique_strategy, NULL, NULL);
        RETURN id;
    END IF;
    PERFORM jobq._enter_ready(ARRAY[id]);  -- nothing for a blocked job

    -- One notification per queue per transaction: PostgreSQL folds identical ones, and
    -- jobq._notify (deferred) notes a queue once.
    IF run_at <= v_now THEN
        PERFORM jobq._notify(queue);
    END IF;
    RETURN id;
END $$;

DROP FUNCTION jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text);
CREATE FUNCTION jobq_enqueue(
    queue             text,
    payload           jsonb       DEFAULT '{}',
    kind              text        DEFAULT NULL,
    priority          integer     DEFAULT 0,
    run_at            timestamptz DEFAULT NULL,
    max_attempts      integer     DEFAULT 25,
    unique_key        text        DEFAULT NULL,
    unique_strategy   text        DEFAULT 'until_executed',
    on_conflict       text        DEFAULT 'reject',
    concurrency_key   text        DEFAULT NULL,
    concurrency_limit integer     DEFAULT 1,
    rate_key          text        DEFAULT NULL,
    depends_on        bigint[]    DEFAULT NULL,
    on_parent_failure text        DEFAULT 'cancel',
    fairness_key      text        DEFAULT NULL    -- its turn in a fair checkout (src/sql/fairness.sql)
) RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp
AS 'MODULE_PATHNAME', 'jobq_enqueue';
DROP FUNCTION jobq_enqueue_batch(text, jsonb[], text, integer, timestamptz, integer);

-- The functions that check a limited role's queues, and the views that show it its rows.

-- A new last argument (checked): the old function goes.
DROP FUNCTION jobq._enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text);
CREATE FUNCTION jobq._enqueue(
    queue             text,
    payload           jsonb,
    kind              text,
    priority          integer,
    run_at            timestamptz,
    max_attempts      integer,
    unique_key        text,
    unique_strategy   text,
    on_conflict       text,
    concurrency_key   text,
    concurrency_limit integer,
    rate_key          text,
    depends_on        bigint[],
    on_parent_failure text,
    fairness_key      text DEFAULT NULL,
    checked           boolean DEFAULT true  -- false: the caller's grants are not checked (schedules' ticks)
) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_run_at  timestamptz := coalesce(run_at, v_now);
    v_id      bigint;
    v_state   text := 'ready';
    v_holder  record;
    v_hidden  boolean;   -- the key's holder is not the caller's to know (src/sql/grants.sql)
    v_ready   tid;
    v_ready_queue text;
    v_ready_key   text;
    v_ok      boolean;
BEGIN
    IF queue IS NULL OR payload IS NULL OR priority IS NULL OR max_attempts IS NULL
       OR unique_strategy IS NULL OR on_conflict IS NULL OR concurrency_limit IS NULL OR on_parent_failure IS NULL THEN
        RAISE EXCEPTION 'jobq: queue, payload, priority, max_attempts, unique_strategy, on_conflict, concurrency_limit and on_parent_failure must not be NULL'
            USING ERRCODE = '22004';
    ELSIF queue = '' THEN
        RAISE EXCEPTION 'jobq: queue must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(queue) > 1000 OR octet_length(kind) > 1000 OR octet_length(unique_key) > 1000
          OR octet_length(concurrency_key) > 1000 OR octet_length(rate_key) > 1000 THEN
        RAISE EXCEPTION 'jobq: queue, kind, unique_key, concurrency_key and rate_key must be at most 1000 bytes'
            USING ERRCODE = '22023';
    ELSIF NOT isfinite(v_run_at) THEN
        RAISE EXCEPTION 'jobq: run_at must be a finite time, got %', run_at USING ERRCODE = '22023';
    ELSIF max_attempts < 1 THEN
        RAISE EXCEPTION 'jobq: max_attempts must be at least 1, got %', max_attempts USING ERRCODE = '22023';
    ELSIF unique_strategy NOT IN ('until_executed', 'until_executing', 'while_executing') THEN
        RAISE EXCEPTION 'jobq: unknown unique_strategy "%"', unique_strategy
            USING ERRCODE = '22023', HINT = 'Use until_executed, until_executing or while_executing.';
    ELSIF on_conflict NOT IN ('reject', 'discard', 'log', 'replace') THEN
        RAISE EXCEPTION 'jobq: unknown on_conflict "%"', on_conflict
            USING ERRCODE = '22023', HINT = 'Use reject, discard, log or replace.';
    ELSIF concurrency_limit < 1 OR concurrency_limit > 10000 THEN
        -- The bound: checkout looks for a free slot number among 1..limit.
        RAISE EXCEPTION 'jobq: concurrency_limit must be between 1 and 10000, got %', concurrency_limit
            USING ERRCODE = '22023';
    ELSIF unique_key = '' THEN
        RAISE EXCEPTION 'jobq: unique_key must not be empty (use NULL for none)' USING ERRCODE = '22023';
    ELSIF concurrency_key = '' THEN
        RAISE EXCEPTION 'jobq: concurrency_key must not be empty (use NULL for none)' USING ERRCODE = '22023';
    ELSIF rate_key = '' THEN
        RAISE EXCEPTION 'jobq: rate_key must not be empty (use NULL for none)' USING ERRCODE = '22023';
    ELSIF fairness_key = '' OR octet_length(fairness_key) > 1000 THEN
        RAISE EXCEPTION 'jobq: fairness_key must be 1 to 1000 bytes (use NULL for none)' USING ERRCODE = '22023';
    ELSIF on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'jobq: unknown on_parent_failure "%"', on_parent_failure
            USING ERRCODE = '22023', HINT = 'Use cancel or run.';
    END IF;
    -- A limited role enqueues into its queues, after parents it may read (src/sql/grants.sql);
    -- where no grant exists, no role is limited. The parents are checked here, before an id is
    -- drawn, and again where they are locked (jobq._lock_unfinished), for a parent committed
    -- in between.
    IF checked AND EXISTS (SELECT 1 FROM jobq.queue_grants) THEN
        v_ok := jobq._require('producer', ARRAY[queue], 'queue');
        IF depends_on IS NOT NULL THEN
            PERFORM jobq._require_jobs('reader', depends_on);
        END IF;
    END IF;

    v_id := nextval('jobq.jobs_id_seq');

    IF unique_key IS NOT NULL AND unique_strategy <> 'while_executing' THEN
        LOOP
            EXIT WHEN jobq._take_key(unique_key, v_id);
            SELECT l.job_id, l.worker_id INTO v_holder FROM jobq.locks l WHERE l.key = unique_key;
            CONTINUE WHEN NOT FOUND;  -- the holder let go in between: try again
            -- Debounce replaces only a job of a queue the caller may enqueue into: another
            -- tenant's holder is a conflict like any other (src/sql/grants.sql).
            IF on_conflict = 'replace' AND v_holder.job_id IS NOT NULL
               AND (NOT checked OR NOT EXISTS (SELECT 1 FROM jobq.queue_grants)
                    OR jobq._outside_jobs('producer', ARRAY[v_holder.job_id]) IS NULL) THEN
                -- Debounce: the waiting job takes the new payload, priority and run_at
                -- (its ready row first: jobq._lock_ready), after any compaction of the hot
                -- tables in progress (src/compact.rs).
                PERFORM jobq._hold_hot_tables();
                v_ready := jobq._lock_ready(v_holder.job_id);
                IF v_ready IS NOT NULL THEN
                    UPDATE jobq.ready r SET priority = _enqueue.priority, run_at = v_run_at
                     WHERE r.ctid = v_ready
                    RETURNING r.queue, r.fairness_key INTO v_ready_queue, v_ready_key;  -- the holder's, maybe not this one's
                    PERFORM jobq._lower_floor('jobq.ready'::regclass, v_ready_queue, _enqueue.priority,
                                              v_run_at, v_holder.job_id);
                    IF v_ready_key IS NOT NULL THEN  -- its key's turns at its new priority
                        PERFORM jobq._fair_keys(v_ready_queue, _enqueue.priority, ARRAY[v_ready_key]);
                    END IF;
                    UPDATE jobq.live_jobs j
                       SET payload = _enqueue.payload, priority = _enqueue.priority, run_at = v_run_at
                     WHERE j.id = v_holder.job_id;
                    PERFORM jobq._wake(v_ready_queue, v_run_at, 1);
                    IF v_run_at <= v_now THEN
                        PERFORM jobq._notify(v_ready_queue);  -- where the job waits
                    END IF;
                    RETURN v_holder.job_id;
                END IF;
                -- The holder is no longer waiting: it started (or finished) between the
                -- conflict and the update. If it let go of the key (an until_executing key
                -- is released when its job starts), take the key again; if it still holds
                -- it, this is a conflict with an executing job, which rejects.
                CONTINUE WHEN NOT EXISTS (SELECT 1 FROM jobq.locks l
                                           WHERE l.key = unique_key AND l.job_id = v_holder.job_id);
            ELSIF on_conflict = 'discard' THEN
                RETURN NULL;
            END IF;
            -- Keys are global: a limited role (src/sql/grants.sql) learns that the key is
            -- taken, and which job holds it only when it may read that job.
            -- (A lock holder: shown where the caller's patterns cover the key, as jobq.locks does.)
            v_hidden := EXISTS (SELECT 1 FROM jobq.queue_grants)
                        AND NOT CASE WHEN v_holder.job_id IS NOT NULL THEN jobq._sees_job(v_holder.job_id)
                                     ELSE jobq._sees(unique_key, jobq._limits('reader')) END;
            IF on_conflict = 'log' THEN
                RAISE NOTICE 'jobq: unique key "%" is held by %; job not enqueued', unique_key,
                    CASE WHEN v_hidden THEN 'a job or lock outside this role''s queues'
                         ELSE coalesce('job ' || v_holder.job_id, 'the lock of worker ' || v_holder.worker_id) END;
                RETURN NULL;
            END IF;
            RAISE EXCEPTION 'jobq: unique key "%" is already taken', unique_key
                USING ERRCODE = '23505',
                      DETAIL = CASE WHEN v_hidden THEN 'held by a job or lock outside this role''s queues'
                                    ELSE coalesce('existing job id: ' || v_holder.job_id,
                                                  'held by the lock of worker ' || v_holder.worker_id) END;
        END LOOP;
    END IF;

    -- Its parents, each once in the order first named (duplicates are ignored), checked and
    -- locked, its edges written (src/sql/workflows.sql).
    IF depends_on IS NOT NULL THEN
        depends_on := ARRAY(SELECT d.p FROM unnest(_enqueue.depends_on) WITH ORDINALITY AS d(p, n)
                             GROUP BY d.p ORDER BY min(d.n));
        v_state := jobq._depend(v_id, depends_on, on_parent_failure);
    END IF;
    RETURN jobq._insert_job(v_id, queue, payload, kind, priority, v_run_at, max_attempts,
                            unique_key, unique_strategy, concurrency_key, concurrency_limit, rate_key,
                            depends_on, v_state, fairness_key);
END $$;

CREATE FUNCTION jobq_enqueue_batch(
    queue        text,
    payloads     jsonb[],
    kind         text        DEFAULT NULL,
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT NULL,
    max_attempts integer     DEFAULT 25,
    fairness_key text        DEFAULT NULL   -- every job's (src/sql/fairness.sql)
) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_run_at  timestamptz := coalesce(run_at, v_now);
    v_ids     bigint[];
BEGIN
    IF queue IS NULL OR payloads IS NULL OR priority IS NULL OR max_attempts IS NULL THEN
        RAISE EXCEPTION 'jobq: queue, payloads, priority and max_attempts must not be NULL' USING ERRCODE = '22004';
    ELSIF array_position(payloads, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: payloads must not contain NULL (element %)', array_position(payloads, NULL)
            USING ERRCODE = '22004';
    ELSIF queue = '' THEN
        RAISE EXCEPTION 'jobq: queue must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(queue) > 1000 OR octet_length(kind) > 1000 THEN
        RAISE EXCEPTION 'jobq: queue and kind must be at most 1000 bytes' USING ERRCODE = '22023';
    ELSIF NOT isfinite(v_run_at) THEN
        RAISE EXCEPTION 'jobq: run_at must be a finite time, got %', run_at USING ERRCODE = '22023';
    ELSIF max_attempts < 1 THEN
        RAISE EXCEPTION 'jobq: max_attempts must be at least 1, got %', max_attempts USING ERRCODE = '22023';
    ELSIF fairness_key = '' OR octet_length(fairness_key) > 1000 THEN
        RAISE EXCEPTION 'jobq: fairness_key must be 1 to 1000 bytes (use NULL for none)' USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._require('producer', ARRAY[queue], 'queue');  -- src/sql/grants.sql
    IF cardinality(payloads) = 0 THEN
        RETURN;
    END IF;
    -- jobq.ready before jobq.live_jobs (see jobq_enqueue).
    LOCK TABLE jobq.ready IN ROW EXCLUSIVE MODE;
    -- Ids come from the sequence in row order, so ordering by id is payload order.
    WITH ins AS (
        INSERT INTO jobq.live_jobs (queue, kind, payload, priority, run_at, enqueued_at, state, max_attempts, fairness_key)
        SELECT queue, kind, p.payload, priority, v_run_at, v_now, 'ready', max_attempts, fairness_key
          FROM unnest(payloads) WITH ORDINALITY AS p(payload, ord)
         ORDER BY p.ord
        RETURNING id
    )
    SELECT array_agg(ins.id ORDER BY ins.id) INTO v_ids FROM ins;
    PERFORM jobq._enter_ready(v_ids);
    PERFORM jobq._tally(queue, 'enqueued', NULL, v_now) FROM unnest(v_ids);
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
    IF v_run_at <= v_now THEN
        PERFORM jobq._notify(queue);
    END IF;
END $$;

CREATE OR REPLACE FUNCTION jobq._checkout_in_snapshot(worker uuid, queues text[], max_jobs integer,
                                           now timestamptz, paused boolean,
                                           fp integer, fr timestamptz, fi bigint)
RETURNS bigint[]
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_claimed  bigint[] := '{}';
    v_skip_c   text[] := '{}';
    v_skip_l   integer[] := '{}';
    v_skip_u   text[] := '{}';
    v_skip_r   text[] := '{}';
    v_blocked  "char";
    c          record;
    -- A limited role's checkout of every queue takes from those granted to it (src/sql/grants.sql).
    v_grants   text[] := CASE WHEN queues IS NULL AND EXISTS (SELECT 1 FROM jobq.queue_grants) THEN jobq._limits('worker') END;
BEGIN
    FOR c IN
        SELECT r.ctid AS rid, r.id, r.keyed, r.concurrency_key, r.concurrency_limit, r.while_key, r.rate_key
          FROM jobq.ready r
         WHERE (queues IS NULL OR r.queue = ANY (queues)) AND r.fairness_key IS NULL AND r.run_at <= now
           AND (v_grants IS NULL OR jobq._sees(r.queue, v_grants))  -- a limited role's queues
           AND (r.priority, r.run_at, r.id) >= (fp, fr, fi)  -- the claim floor (fp, fr, fi)
           AND (NOT paused OR NOT EXISTS (
                   SELECT 1 FROM jobq.pauses p
                    WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                       OR (p.queue IS NULL AND p.kind = r.kind)))
         ORDER BY r.priority, r.run_at, r.id
    LOOP
        EXIT WHEN cardinality(v_claimed) >= max_jobs;
        CONTINUE WHEN c.while_key = ANY (v_skip_u) OR c.rate_key = ANY (v_skip_r);
        CONTINUE WHEN c.concurrency_key IS NOT NULL AND EXISTS (
            SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
             WHERE s.key = c.concurrency_key AND c.concurrency_limit <= s.lim);
        BEGIN
            PERFORM 1 FROM jobq.ready r WHERE r.ctid = c.rid FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            IF NOT c.keyed THEN
                DELETE FROM jobq.ready r WHERE r.ctid = c.rid;
                UPDATE jobq.live_jobs x
                   SET state = 'executing', worker_id = _checkout_in_snapshot.worker,
                       attempt = x.attempt + 1, started_at = now
                 WHERE x.id = c.id;
                v_blocked := NULL;
            ELSE
                v_blocked := jobq._claim_keyed(c.id, c.rid, worker, now);
            END IF;
            IF v_blocked IS NULL THEN
                v_claimed := v_claimed || c.id;
            ELSIF v_blocked = 'c' THEN
                v_skip_c := v_skip_c || c.concurrency_key;
                v_skip_l := v_skip_l || c.concurrency_limit;
            ELSIF v_blocked = 'u' THEN
                v_skip_u := v_skip_u || c.while_key;
            ELSE
                v_skip_r := v_skip_r || c.rate_key;
            END IF;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- changed since our snapshot: skip it, as if it were locked
        END;
    END LOOP;
    RETURN v_claimed;
END $$;

CREATE OR REPLACE FUNCTION jobq._checkout(worker uuid, queues text[], max_jobs integer, wait interval)
RETURNS SETOF jobq.job
LANGUAGE plpgsql
SET search_path = pg_catalog, jobq, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_queue    text;                 -- set when exactly one queue is asked for
    v_paused   boolean;
    v_rc       boolean;              -- READ COMMITTED: the fast path may run
    v_live     boolean;              -- the worker is registered, alive and the caller's
    v_fp       integer;              -- the claim floor: no ready row of these queues has a
    v_fr       timestamptz;          -- claim key (priority, run_at, id) below it
    v_fi       bigint;
    v_claimed  bigint[] := '{}';
    v_skip_c   text[] := '{}';       -- concurrency keys found full during this call,
    v_skip_l   integer[] := '{}';    -- for jobs with this limit or a lower one
    v_skip_u   text[] := '{}';       -- while_executing keys found busy during this call
    v_skip_r   text[] := '{}';       -- rate keys found without a start left during this call
    v_fast     integer := 0;         -- claimed (and returned) by the fast path
    v_want     integer;
    v_seen     integer;
    v_blocked  "char";
    c          record;
    cur        refcursor;
    v_grants   text[];               -- a limited role's worker patterns, for a call of every queue
    v_ok       boolean;
    v_fair     boolean;              -- the call may take from a fair queue
BEGIN
    -- A limited role (src/sql/grants.sql) checks out of the queues granted to it as a worker:
    -- those it names must be, and a call of every queue (NULL) walks past the others.
    -- (Where no grant exists, no role is limited: one look at an empty table.)
    IF EXISTS (SELECT 1 FROM jobq.queue_grants) THEN
        v_grants := jobq._limits('worker');
        IF v_grants IS NOT NULL AND queues IS NOT NULL THEN
            v_ok := jobq._require('worker', queues, 'queue');
            v_grants := NULL;
        END IF;
    END IF;
    IF wait IS NOT NULL THEN
        RETURN QUERY SELECT * FROM jobq._checkout_waiting(worker, queues, max_jobs, wait);
        RETURN;
    END IF;
    IF max_jobs IS NULL THEN
        RAISE EXCEPTION 'jobq: max_jobs must not be NULL' USING ERRCODE = '22004';
    ELSIF max_jobs < 1 OR max_jobs > 10000 THEN
        RAISE EXCEPTION 'jobq: max_jobs must be between 1 and 10000, got %', max_jobs USING ERRCODE = '22023';
    END IF;
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF cardinality(queues) = 1 THEN
        v_queue := queues[1];
    END IF;
    v_rc := current_setting('transaction_isolation') = 'read committed';
    -- The worker, judged by one lookup by primary key (src/liveness.rs), not by a part of the
    -- claim statement: that part cost every checkout ~39,000 instructions.
    v_live := jobq._usable_worker(worker);
    -- A call that may take from a fair queue is jobq._checkout_fair's (src/sql/fairness.sql);
    -- where no queue is fair, one look at an empty table.
    v_fair := CASE WHEN queues IS NULL THEN EXISTS (SELECT 1 FROM jobq.fairness_keys)
                   ELSE EXISTS (SELECT 1 FROM jobq.fairness_keys f WHERE f.queue = ANY (queues)) END;
    -- Where the walk starts: past the dead entries of earlier claims (src/floors.rs).
    SELECT f.priority, f.run_at, f.id INTO v_fp, v_fr, v_fi FROM jobq._floor('jobq.ready'::regclass, v_queue) f;

    -- Fast path, one statement: if the worker is alive and the caller's to act for, lock the
    -- first max_jobs unpaused candidates, take the keys of
    -- the keyed ones, claim every one that can start and return them. When that is fewer
    -- than max_jobs (a queue with fewer jobs, a key that cannot start, a dead worker), the
    -- general path below looks for the rest: it raises JQ001 for a dead worker and looks past
    -- the keys that cannot start. The candidates that could not start stay locked by us.
    -- No row lock on the worker (it would cost a WAL record per checkout): a reap pass that
    -- deletes this worker while we claim leaves our claims orphaned, and the next pass
    -- requeues them (jobq._reap, orphaned jobs).
    -- Plan shape: the claim goes through the primary key with id = ANY (ARRAY(...)); a join
    -- with `cand` gets a hash join over the whole table in the generic plan (which guesses
    -- LIMIT max_jobs at 10% of the table). The two statements differ only in the queue
    -- condition, so that each gets the index that serves its order.
    IF v_rc AND v_live AND NOT v_fair THEN
        IF v_queue IS NOT NULL THEN
            RETURN QUERY
            WITH cand AS (
                SELECT r.ctid AS rid, r.id, r.keyed
                  FROM jobq.ready r
                 WHERE r.queue_hash = hashtext(v_queue) AND r.queue = v_queue AND r.fairness_key IS NULL
                   AND r.run_at <= v_now
                   AND (r.priority, r.run_at, r.id) >= (v_fp, v_fr, v_fi)  -- the claim floor
                   AND (NOT EXISTS (SELECT 1 FROM jobq.pauses) OR NOT EXISTS (
                           SELECT 1 FROM jobq.pauses p
                            WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                               OR (p.queue IS NULL AND p.kind = r.kind)))
                 ORDER BY r.priority, r.run_at, r.id
                 LIMIT max_jobs
                 FOR UPDATE SKIP LOCKED
            ), keys AS (
                -- A keyed candidate takes what it needs to start, in claim order, and its
                -- ready row goes (jobq._take_keys): its concurrency slot (0: none), or < 0
                -- when it cannot start now. NULL for the others.
                SELECT cand.rid, cand.id, CASE WHEN cand.keyed THEN jobq._take_keys(cand.id, cand.rid, v_now) END AS slot
                  FROM cand
            ), taken AS (
                DELETE FROM jobq.ready r
                 WHERE r.ctid = ANY (ARRAY(SELECT keys.rid FROM keys WHERE keys.slot IS NULL))
                RETURNING r.id
            ), claimed AS (
                UPDATE jobq.live_jobs j
                   SET state = 'executing', worker_id = _checkout.worker, attempt = j.attempt + 1,
                       started_at = v_now,
                       concurrency_slot = (SELECT nullif(keys.slot, 0) FROM keys WHERE keys.id = j.id)
                 WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken UNION ALL SELECT keys.id FROM keys WHERE keys.slot >= 0))
                   AND j.state = 'ready'
                RETURNING j.*, jobq._tally(j.queue, 'started', j.run_at, v_now) AS counted  -- src/counters.rs
            )
            SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.run_at,
                   j.enqueued_at, j.unique_key, j.concurrency_key, j.interrupted_at, j.last_error,
                   j.unique_strategy, j.concurrency_limit, j.started_at, j.depends_on, j.checkpoints, j.fairness_key
              FROM claimed j
             ORDER BY j.priority, j.run_at, j.id;
        ELSE
            RETURN QUERY
            WITH cand AS (
                SELECT r.ctid AS rid, r.id, r.keyed
                  FROM jobq.ready r
                 WHERE (queues IS NULL OR r.queue = ANY (queues)) AND r.fairness_key IS NULL
                   AND r.run_at <= v_now
                   AND (v_grants IS NULL OR jobq._sees(r.queue, v_grants))  -- a limited role's queues
                   AND (r.priority, r.run_at, r.id) >= (v_fp, v_fr, v_fi)  -- the claim floor
                   AND (NOT EXISTS (SELECT 1 FROM jobq.pauses) OR NOT EXISTS (
                           SELECT 1 FROM jobq.pauses p
                            WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                               OR (p.queue IS NULL AND p.kind = r.kind)))
                 ORDER BY r.priority, r.run_at, r.id
                 LIMIT max_jobs
                 FOR UPDATE SKIP LOCKED
            ), keys AS (
                -- A keyed candidate takes what it needs to start, in claim order, and its
                -- ready row goes (jobq._take_keys): its concurrency slot (0: none), or < 0
                -- when it cannot start now. NULL for the others.
                SELECT cand.rid, cand.id, CASE WHEN cand.keyed THEN jobq._take_keys(cand.id, cand.rid, v_now) END AS slot
                  FROM cand
            ), taken AS (
                DELETE FROM jobq.ready r
                 WHERE r.ctid = ANY (ARRAY(SELECT keys.rid FROM keys WHERE keys.slot IS NULL))
                RETURNING r.id
            ), claimed AS (
                UPDATE jobq.live_jobs j
                   SET state = 'executing', worker_id = _checkout.worker, attempt = j.attempt + 1,
                       started_at = v_now,
                       concurrency_slot = (SELECT nullif(keys.slot, 0) FROM keys WHERE keys.id = j.id)
                 WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken UNION ALL SELECT keys.id FROM keys WHERE keys.slot >= 0))
                   AND j.state = 'ready'
                RETURNING j.*, jobq._tally(j.queue, 'started', j.run_at, v_now) AS counted  -- src/counters.rs
            )
            SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.run_at,
                   j.enqueued_at, j.unique_key, j.concurrency_key, j.interrupted_at, j.last_error,
                   j.unique_strategy, j.concurrency_limit, j.started_at, j.depends_on, j.checkpoints, j.fairness_key
              FROM claimed j
             ORDER BY j.priority, j.run_at, j.id;
        END IF;
        GET DIAGNOSTICS v_fast = ROW_COUNT;
        IF v_fast >= max_jobs THEN
            RETURN;
        END IF;
    END IF;

    -- The general path. jobq._live_worker without its row lock (see the fast path); a worker
    -- that stops checking out (jobq_stop_checkouts, src/sql/workers.sql) claims nothing.
    IF NOT v_live THEN
        IF EXISTS (SELECT 1 FROM jobq.workers w
                    WHERE w.id = worker AND w.stopping_at IS NOT NULL AND jobq._may_act_for(w.owner)
                      AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)) THEN
            RETURN;
        END IF;
        PERFORM jobq._refuse_worker(worker);
    END IF;
    v_paused := EXISTS (SELECT 1 FROM jobq.pauses);
    IF v_fair THEN
        v_claimed := jobq._checkout_fair(worker, queues, max_jobs, v_now, v_grants);
    ELSIF NOT v_rc THEN
        v_claimed := jobq._checkout_in_snapshot(worker, queues, max_jobs, v_now, v_paused, v_fp, v_fr, v_fi);
    ELSE
        LOOP
            v_want := max_jobs - v_fast - cardinality(v_claimed);
            v_seen := 0;
            -- The two statements differ only in the queue condition, so that each gets the index
            -- that serves its order: one queue, or any/several queues.
            IF v_queue IS NOT NULL THEN
                OPEN cur FOR
                WITH cand AS (
                    SELECT r.ctid AS rid, r.id, r.priority, r.run_at, r.keyed, r.concurrency_key,
                           r.concurrency_limit, r.while_key, r.rate_key
                      FROM jobq.ready r
                     WHERE r.queue_hash = hashtext(v_queue) AND r.queue = v_queue AND r.fairness_key IS NULL
                   AND r.run_at <= v_now
                       AND (r.priority, r.run_at, r.id) >= (v_fp, v_fr, v_fi)  -- the claim floor
                       AND (NOT v_paused OR NOT EXISTS (
                               SELECT 1 FROM jobq.pauses p
                                WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                                   OR (p.queue IS NULL AND p.kind = r.kind)))
                       AND (r.concurrency_key IS NULL OR cardinality(v_skip_c) = 0 OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                                WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                       AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                       AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                     ORDER BY r.priority, r.run_at, r.id
                     LIMIT v_want
                     FOR UPDATE SKIP LOCKED
                ), taken AS (
                    DELETE FROM jobq.ready r
                     WHERE r.ctid = ANY (ARRAY(SELECT cand.rid FROM cand WHERE NOT cand.keyed))
                    RETURNING r.id
                ), claimed AS (
                    UPDATE jobq.live_jobs j
                       SET state = 'executing', worker_id = _checkout.worker, attempt = j.attempt + 1,
                           started_at = v_now
                     WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken)) AND j.state = 'ready'
                    RETURNING j.id
                )
                SELECT cand.rid, cand.id, claimed.id IS NOT NULL AS claimed, cand.keyed,
                       cand.concurrency_key, cand.concurrency_limit, cand.while_key, cand.rate_key
                  FROM cand LEFT JOIN claimed ON claimed.id = cand.id
                 ORDER BY cand.priority, cand.run_at, cand.id;
            ELSE
                OPEN cur FOR
                WITH cand AS (
                    SELECT r.ctid AS rid, r.id, r.priority, r.run_at, r.keyed, r.concurrency_key,
                           r.concurrency_limit, r.while_key, r.rate_key
                      FROM jobq.ready r
                     WHERE (queues IS NULL OR r.queue = ANY (queues)) AND r.fairness_key IS NULL
                   AND r.run_at <= v_now
                       AND (v_grants IS NULL OR jobq._sees(r.queue, v_grants))  -- a limited role's queues
                       AND (r.priority, r.run_at, r.id) >= (v_fp, v_fr, v_fi)  -- the claim floor
                       AND (NOT v_paused OR NOT EXISTS (
                               SELECT 1 FROM jobq.pauses p
                                WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                                   OR (p.queue IS NULL AND p.kind = r.kind)))
                       AND (r.concurrency_key IS NULL OR cardinality(v_skip_c) = 0 OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                                WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                       AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                       AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                     ORDER BY r.priority, r.run_at, r.id
                     LIMIT v_want
                     FOR UPDATE SKIP LOCKED
                ), taken AS (
                    DELETE FROM jobq.ready r
                     WHERE r.ctid = ANY (ARRAY(SELECT cand.rid FROM cand WHERE NOT cand.keyed))
                    RETURNING r.id
                ), claimed AS (
                    UPDATE jobq.live_jobs j
                       SET state = 'executing', worker_id = _checkout.worker, attempt = j.attempt + 1,
                           started_at = v_now
                     WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken)) AND j.state = 'ready'
                    RETURNING j.id
                )
                SELECT cand.rid, cand.id, claimed.id IS NOT NULL AS claimed, cand.keyed,
                       cand.concurrency_key, cand.concurrency_limit, cand.while_key, cand.rate_key
                  FROM cand LEFT JOIN claimed ON claimed.id = cand.id
                 ORDER BY cand.priority, cand.run_at, cand.id;
            END IF;

            v_blocked := NULL;
            LOOP
                FETCH cur INTO c;
                EXIT WHEN NOT FOUND;
                v_seen := v_seen + 1;
                IF c.claimed THEN
                    v_claimed := v_claimed || c.id;
                    CONTINUE;
                END IF;
                CONTINUE WHEN NOT c.keyed;  -- its job was not 'ready' (cannot happen): the ready row is gone
                v_blocked := jobq._claim_keyed(c.id, c.rid, worker, v_now);
                IF v_blocked IS NULL THEN
                    v_claimed := v_claimed || c.id;
                ELSIF v_blocked = 'c' THEN
                    -- No free slot up to this job's limit: jobs of this key with a limit no
                    -- higher are blocked too; a job with a higher limit may still find one.
                    v_skip_c := v_skip_c || c.concurrency_key;
                    v_skip_l := v_skip_l || c.concurrency_limit;
                ELSIF v_blocked = 'u' THEN
                    v_skip_u := v_skip_u || c.while_key;
                ELSE
                    v_skip_r := v_skip_r || c.rate_key;
                END IF;
            END LOOP;
            CLOSE cur;
            -- Stop when enough were claimed, or when the batch came back short (nothing more is
            -- available); otherwise look again past the keys that could not start.
            EXIT WHEN v_fast + cardinality(v_claimed) >= max_jobs OR v_seen < v_want;
        END LOOP;
    END IF;

    -- The claimed jobs, in the order they were claimed.
    PERFORM jobq._tally(j.queue, 'started', j.run_at, j.started_at)  -- src/counters.rs
       FROM jobq.live_jobs j WHERE j.id = ANY (v_claimed);
    RETURN QUERY
    SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.run_at,
           j.enqueued_at, j.unique_key, j.concurrency_key, j.interrupted_at, j.last_error,
           j.unique_strategy, j.concurrency_limit, j.started_at, j.depends_on, j.checkpoints, j.fairness_key
      FROM unnest(v_claimed) WITH ORDINALITY AS k(id, ord)
      JOIN jobq.live_jobs j ON j.id = k.id
     ORDER BY k.ord;
END $$;

CREATE OR REPLACE FUNCTION jobq._complete(job_id bigint, worker uuid, result jsonb) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    j        jobq.live_jobs;
    v_noted  boolean;
    v_freed  integer;
BEGIN
    IF job_id IS NULL OR worker IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id and worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    -- The job leaves jobq.live_jobs; with jobq.retention = 0 nothing is kept, otherwise it
    -- goes to jobq.finished_jobs. One DELETE and one INSERT, not jobq._archive's UPDATE first:
    -- the hot path writes each row version once (docs/performance.md).
    -- A limited role's job must be of its queues (src/sql/grants.sql): where no grant exists,
    -- one look at an empty table, in this statement rather than in a call or a statement of
    -- its own, which cost each job of the SQL edition tens of thousands of instructions more
    -- (bench/instructions.sh, row jobq_sql).
    DELETE FROM jobq.live_jobs x
     WHERE x.id = _complete.job_id AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
       AND EXISTS (SELECT 1 FROM jobq.workers w
                    WHERE w.id = worker
                      -- The caller's own worker with no role set, which jobq._may_act_for
                      -- always allows, judged without its call.
                      AND ((w.owner::oid = jobq._caller() AND pg_catalog.current_setting('role') = 'none')
                           OR jobq._may_act_for(w.owner)))
       AND (NOT EXISTS (SELECT 1 FROM jobq.queue_grants) OR jobq._require_job('worker', x.id, x.queue))
    RETURNING x.* INTO j;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_foreign_worker(worker);
        PERFORM jobq._require_jobs('worker', ARRAY[job_id]);  -- another tenant's job: 42501, not false
        RETURN false;
    END IF;
    j.finished_at := clock_timestamp();
    -- Helpers are called in assignments, not with PERFORM: PL/pgSQL evaluates a lone call
    -- without starting an executor for it (docs/performance.md, "CPU per job").
    v_noted := jobq._tally(j.queue, 'completed', j.started_at, j.finished_at);  -- src/counters.rs
    IF jobq.retention_ms() > 0 THEN
        j.state := 'completed';
        j.result := _complete.result;
        -- The row as one function scan's columns: `SELECT (j).*` reads each column out of the
        -- record in an expression of its own, which cost each job 19,000 instructions more
        -- (bench/instructions.sh, row jobq_sql).
        INSERT INTO jobq.finished_jobs SELECT * FROM pg_catalog.unnest(ARRAY[j]);
    END IF;
    IF j.unique_key IS NOT NULL OR j.concurrency_key IS NOT NULL THEN
        v_freed := jobq._release_keys(job_id, j.queue, 'completed', j.unique_key, j.unique_strategy,
                                      j.concurrency_key, j.concurrency_slot);
    END IF;
    -- The jobs that depend on or await this one (src/sql/workflows.sql). Under READ COMMITTED
    -- jobq._settle's first look is this one, in a snapshot taken after the delete: the call is
    -- spared where no edge waits on the job.
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed'
       OR EXISTS (SELECT 1 FROM jobq.edges x WHERE x.parent = job_id AND NOT x.settled) THEN
        PERFORM jobq._settle(ARRAY[job_id], ARRAY['completed']);
    END IF;
    RETURN true;
END $$;

CREATE OR REPLACE FUNCTION jobq_fail(job_id bigint, worker uuid, error jsonb DEFAULT NULL,
                          retry_in interval DEFAULT NULL, discard boolean DEFAULT false)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now    timestamptz := clock_timestamp();
    j        record;
    v_state  text;
BEGIN
    IF job_id IS NULL OR worker IS NULL OR discard IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id, worker and discard must not be NULL' USING ERRCODE = '22004';
    ELSIF retry_in < interval '0' OR retry_in > interval '100000 years' THEN
        -- The bound keeps now() + retry_in a timestamp (the largest is in the year 294276).
        RAISE EXCEPTION 'jobq: retry_in must be between 0 and 100000 years, got %', retry_in
            USING ERRCODE = '22023';
    END IF;
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    SELECT x.queue, x.attempt, x.max_attempts, x.cancel_requested_at, x.unique_key, x.unique_strategy,
           x.concurrency_key, x.concurrency_slot, x.started_at INTO j
      FROM jobq.live_jobs x
     WHERE x.id = jobq_fail.job_id AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
       AND EXISTS (SELECT 1 FROM jobq.workers w WHERE w.id = worker AND jobq._may_act_for(w.owner))
       FOR UPDATE OF x;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_foreign_worker(worker);
        PERFORM jobq._require_jobs('worker', ARRAY[job_id]);  -- another tenant's job: 42501, not NULL
        RETURN NULL;
    END IF;
    PERFORM jobq._require_job('worker', job_id, j.queue);  -- src/sql/grants.sql
    v_state := CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                    WHEN discard OR j.attempt >= j.max_attempts THEN 'dead'
                    ELSE 'ready' END;
    UPDATE jobq.live_jobs x
       SET state = v_state,
           last_error = error,
           errors = jobq._add_error(x.errors, jsonb_build_object('attempt', x.attempt, 'at', v_now, 'error', error)),
           run_at = CASE WHEN v_state = 'ready' THEN v_now + coalesce(retry_in, jobq._backoff(x.attempt))
                         ELSE x.run_at END,
           finished_at = CASE WHEN v_state <> 'ready' THEN v_now END
     WHERE x.id = jobq_fail.job_id;
    IF v_state = 'ready' THEN
        PERFORM jobq._enter_ready(ARRAY[job_id]);
    ELSE
        PERFORM jobq._archive(ARRAY[job_id]);
    END IF;
    -- The dashboard's counters (src/counters.rs): a failed attempt, and maybe a dead job.
    PERFORM jobq._tally(j.queue, 'failed', j.started_at, v_now);
    IF v_state = 'dead' THEN
        PERFORM jobq._tally(j.queue, 'dead', NULL, v_now);
    END IF;
    PERFORM jobq._release_keys(job_id, j.queue, v_state, j.unique_key, j.unique_strategy,
                               j.concurrency_key, j.concurrency_slot);
    IF v_state = 'ready' AND retry_in = interval '0' THEN
        PERFORM jobq._notify(j.queue);
    END IF;
    RETURN v_state;
END $$;

CREATE OR REPLACE FUNCTION jobq_cancel(job_id bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j          record;
    v_ready    tid;
    v_waiting  boolean;
    v_state    text;
    v_queue    text;
BEGIN
    IF job_id IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- A limited role cancels jobs of its queues only (src/sql/grants.sql): checked on the row
    -- this call acts on (a job's queue never changes), so that a job committed meanwhile is
    -- checked too; the error undoes what the call did.
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    LOOP
        -- A job not started yet: its jobq.blocked row (a blocked job, src/sql/workflows.sql) or
        -- its ready row (a waiting job, jobq._lock_ready) first, as whoever wakes or claims it
        -- takes them, then the job row.
        DELETE FROM jobq.blocked b WHERE b.job_id = jobq_cancel.job_id;
        v_waiting := FOUND;
        IF NOT v_waiting THEN
            v_ready := jobq._lock_ready(job_id);
            IF v_ready IS NOT NULL THEN
                DELETE FROM jobq.ready r WHERE r.ctid = v_ready;
                v_waiting := true;
            END IF;
        END IF;
        IF v_waiting THEN
            UPDATE jobq.live_jobs x SET state = 'cancelled', finished_at = clock_timestamp()
             WHERE x.id = jobq_cancel.job_id
            RETURNING x.queue, x.unique_key, x.unique_strategy, x.concurrency_key INTO j;
            PERFORM jobq._require_job('producer', job_id, j.queue);
            PERFORM jobq._archive(ARRAY[job_id]);
            PERFORM jobq._release_keys(job_id, j.queue, 'cancelled', j.unique_key, j.unique_strategy,
                                       j.concurrency_key, NULL);
            RETURN 'cancelled';
        END IF;
        BEGIN
            SELECT x.state, x.queue INTO j FROM jobq.live_jobs x WHERE x.id = jobq_cancel.job_id FOR UPDATE;
            IF NOT FOUND THEN
                -- Finished, or no such job. One snapshot over both tables (jobq.jobs) sees a
                -- job that jobq_retry moved back meanwhile in jobq.live_jobs: look again then.
                SELECT x.state, x.queue INTO v_state, v_queue FROM jobq.jobs x WHERE x.id = jobq_cancel.job_id;
                CONTINUE WHEN v_state IN ('ready', 'executing', 'blocked');
                PERFORM jobq._require_job('producer', job_id, v_queue);  -- (NULL: no such job)
                RETURN v_state;
            ELSIF j.state IN ('ready', 'blocked') THEN
                -- It became ready again since we looked (a retry, a requeue): give the job
                -- row back (this block's subtransaction ends) and take the ready row first.
                RAISE EXCEPTION USING ERRCODE = 'JQ900';
            END IF;
            PERFORM jobq._require_job('producer', job_id, j.queue);
            -- Executing: the worker sees the request in jobq_heartbeat; the reaper cancels
            -- it if the worker dies.
            UPDATE jobq.live_jobs x SET cancel_requested_at = coalesce(x.cancel_requested_at, clock_timestamp())
             WHERE x.id = jobq_cancel.job_id;
            RETURN j.state;
        EXCEPTION WHEN SQLSTATE 'JQ900' THEN
            NULL;
        END;
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION jobq_retry(job_id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j record;
BEGIN
    IF job_id IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT x.queue, x.unique_key, x.unique_strategy INTO j
      FROM jobq.finished_jobs x
     WHERE x.id = jobq_retry.job_id AND x.state IN ('dead', 'cancelled')
       FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM jobq._require_jobs('producer', ARRAY[job_id]);  -- another tenant's job: 42501, not false
        RETURN false;
    END IF;
    PERFORM jobq._require_job('producer', job_id, j.queue);  -- src/sql/grants.sql
    IF j.unique_key IS NOT NULL AND j.unique_strategy <> 'while_executing'
       AND NOT jobq._take_key(j.unique_key, job_id) THEN
        RETURN false;
    END IF;
    -- Back to jobq.live_jobs, waiting again; jobq.ready locked first (see jobq_enqueue).
    LOCK TABLE jobq.ready IN ROW EXCLUSIVE MODE;
    WITH moved AS (
        DELETE FROM jobq.finished_jobs x WHERE x.id = jobq_retry.job_id RETURNING x.*
    )
    INSERT INTO jobq.live_jobs SELECT * FROM moved;
    UPDATE jobq.live_jobs x
       SET state = 'ready', attempt = 0, run_at = clock_timestamp(), finished_at = NULL,
           cancel_requested_at = NULL, interrupted_at = NULL
     WHERE x.id = jobq_retry.job_id;
    PERFORM jobq._enter_ready(ARRAY[job_id]);
    PERFORM jobq._notify(j.queue);
    -- The children this job's failure cancelled wait for it again (src/sql/workflows.sql).
    PERFORM jobq._reblock(job_id);
    RETURN true;
END $$;

-- One job in hand is served in Rust (src/complete.rs), every other call by
-- jobq._complete_and_checkout.
CREATE OR REPLACE FUNCTION jobq_complete_and_checkout(worker uuid, job_ids bigint[], results jsonb[] DEFAULT NULL,
                                           queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1)
RETURNS SETOF jobq.job LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp
AS 'MODULE_PATHNAME', 'jobq_complete_and_checkout';

CREATE FUNCTION jobq._complete_and_checkout(worker uuid, job_ids bigint[], results jsonb[], queues text[],
                                            max_jobs integer)
RETURNS SETOF jobq.job LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._refuse_fenced(worker, job_ids, @extschema@.jobq_complete_many(worker, job_ids, results));
    RETURN QUERY SELECT * FROM @extschema@.jobq_checkout(worker, queues, max_jobs);
END $$;
REVOKE ALL ON FUNCTION jobq._complete_and_checkout(uuid, bigint[], jsonb[], text[], integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION jobq_acquire_lock(key text, worker uuid, ttl interval DEFAULT '5 minutes')
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

CREATE OR REPLACE FUNCTION jobq_release_lock(key text, worker uuid) RETURNS boolean
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

CREATE OR REPLACE FUNCTION jobq_lock_holder(key text) RETURNS uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._require('worker', ARRAY[key], 'lock key');  -- src/sql/grants.sql
    RETURN (SELECT l.worker_id
              FROM jobq.locks l JOIN jobq.workers w ON w.id = l.worker_id
             WHERE l.key = jobq_lock_holder.key AND l.expires_at > clock_timestamp()
               AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start));
END $$;

CREATE OR REPLACE FUNCTION jobq_snooze(job_id bigint, worker uuid, until timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF job_id IS NULL OR worker IS NULL OR until IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id, worker and until must not be NULL' USING ERRCODE = '22004';
    ELSIF NOT isfinite(until) THEN
        RAISE EXCEPTION 'jobq: until must be a finite time, got %', until USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._require_jobs('worker', ARRAY[job_id]);  -- src/sql/grants.sql
    RETURN jobq._suspend(job_id, worker, 'ready', until) IS NOT NULL;
END $$;

-- The parents and awaited jobs a limited role names are checked where they are locked.
CREATE OR REPLACE FUNCTION jobq._lock_unfinished(ids bigint[], what text, most integer) RETURNS bigint[]
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_ids   bigint[] := ARRAY(SELECT DISTINCT i FROM unnest(ids) i ORDER BY i);
    v_live  bigint[];
    v_known integer;
BEGIN
    IF array_position(v_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: % must not contain NULL', what USING ERRCODE = '22023';
    ELSIF cardinality(v_ids) > most THEN
        RAISE EXCEPTION 'jobq: % names % jobs, at most % allowed', what, cardinality(v_ids), most
            USING ERRCODE = '22023';
    END IF;
    v_live := ARRAY(SELECT x.id FROM jobq.live_jobs x WHERE x.id = ANY (v_ids) ORDER BY x.id FOR KEY SHARE);
    SELECT count(*) INTO v_known FROM jobq.finished_jobs f WHERE f.id = ANY (v_ids) AND f.id <> ALL (v_live);
    IF v_known + cardinality(v_live) < cardinality(v_ids) THEN
        RAISE EXCEPTION 'jobq: % names jobs that do not exist or were pruned: %', what,
            ARRAY(SELECT i FROM unnest(v_ids) i
                   WHERE NOT EXISTS (SELECT 1 FROM jobq.jobs j WHERE j.id = i) LIMIT 10)
            USING ERRCODE = '22023';
    END IF;
    -- A limited role names only jobs it may read (src/sql/grants.sql): checked here, where every
    -- one exists and none can change its queue before this call ends.
    PERFORM jobq._require_jobs('reader', v_ids);
    RETURN v_live;
END $$;

CREATE OR REPLACE FUNCTION jobq_await_jobs(job_id bigint, worker uuid, jobs bigint[]) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_live  bigint[];
BEGIN
    IF job_id IS NULL OR worker IS NULL OR jobs IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id, worker and jobs must not be NULL' USING ERRCODE = '22004';
    ELSIF job_id = ANY (jobs) THEN
        RAISE EXCEPTION 'jobq: job % cannot await itself', job_id USING ERRCODE = '22023';
    END IF;
    -- A limited role works on its own queues and reads only those (src/sql/grants.sql).
    PERFORM jobq._require_jobs('worker', ARRAY[job_id]);  -- `jobs`: jobq._lock_unfinished
    -- A compaction of the hot tables in progress is waited for (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    -- The fence first, without changing anything: NULL for a job not executing under worker.
    IF NOT jobq._lock_executing(job_id, worker) THEN
        RETURN NULL;
    END IF;
    v_live := jobq._lock_unfinished(jobs, 'jobs', 10000);
    -- Every awaited job gets an edge (a finished one keeps it from pruning while this job
    -- may still read its result); the unfinished ones are what the job waits for.
    INSERT INTO jobq.edges AS e (parent, child, cancel, settled)
    SELECT DISTINCT a.id, job_id, false, l.id IS NULL
      FROM unnest(jobs) AS a(id) LEFT JOIN unnest(v_live) AS l(id) ON l.id = a.id
    ON CONFLICT (parent, child) DO UPDATE SET settled = excluded.settled, cancel = false;
    IF cardinality(v_live) = 0 THEN
        RETURN 'finished';
    END IF;
    IF jobq._suspend(job_id, worker, 'blocked', NULL) = 'blocked' THEN
        INSERT INTO jobq.blocked (job_id, waiting, suspended) VALUES (job_id, cardinality(v_live), true);
    END IF;
    RETURN 'waiting';
END $$;

CREATE OR REPLACE FUNCTION jobq_await_event(job_id bigint, worker uuid, event text, timeout interval DEFAULT NULL)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    e record;
BEGIN
    IF job_id IS NULL OR worker IS NULL OR event IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id, worker and event must not be NULL' USING ERRCODE = '22004';
    ELSIF event = '' OR octet_length(event) > 1000 THEN
        RAISE EXCEPTION 'jobq: event must be non-empty and at most 1000 bytes' USING ERRCODE = '22023';
    ELSIF timeout < interval '0' OR timeout > interval '100000 years' THEN
        RAISE EXCEPTION 'jobq: timeout must be between 0 and 100000 years, got %', timeout USING ERRCODE = '22023';
    END IF;
    -- Event names are matched against a limited role's patterns, as lock keys are (src/sql/grants.sql).
    PERFORM jobq._require_jobs('worker', ARRAY[job_id]);
    PERFORM jobq._require('worker', ARRAY[event], 'event');
    PERFORM jobq._hold_hot_tables();  -- src/compact.rs
    IF NOT jobq._lock_executing(job_id, worker) THEN
        RETURN NULL;
    END IF;
    -- The event's row, written either way (jobq.event_log): an emit in progress is waited
    -- for and then seen.
    INSERT INTO jobq.event_log AS l (name, awaited_at) VALUES (event, clock_timestamp())
    ON CONFLICT (name) DO UPDATE SET awaited_at = excluded.awaited_at
    RETURNING l.payload, l.emitted_at INTO e;
    IF e.emitted_at IS NOT NULL THEN
        PERFORM jobq._event_checkpoint(job_id, event, e.payload, e.emitted_at);
        RETURN 'emitted';
    END IF;
    IF jobq._suspend(job_id, worker, 'blocked', NULL) = 'blocked' THEN
        INSERT INTO jobq.blocked (job_id, waiting, event, until, suspended)
        VALUES (job_id, 0, event, clock_timestamp() + timeout, true);
    END IF;
    RETURN 'waiting';
END $$;

CREATE OR REPLACE FUNCTION jobq_emit_event(name text, payload jsonb DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_at  timestamptz := clock_timestamp();
    n     integer := 0;
    b     record;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'jobq: name must not be NULL' USING ERRCODE = '22004';
    ELSIF name = '' OR octet_length(name) > 1000 THEN
        RAISE EXCEPTION 'jobq: name must be non-empty and at most 1000 bytes' USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._require('producer', ARRAY[name], 'event');  -- src/sql/grants.sql
    PERFORM jobq._hold_hot_tables();  -- src/compact.rs
    -- The first emit wins: a name already emitted changes nothing.
    INSERT INTO jobq.event_log AS l (name, payload, emitted_at) VALUES (name, payload, v_at)
    ON CONFLICT ON CONSTRAINT event_log_pkey DO UPDATE SET payload = excluded.payload, emitted_at = excluded.emitted_at
     WHERE l.emitted_at IS NULL;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    FOR b IN
        DELETE FROM jobq.blocked x
         WHERE x.job_id = ANY (ARRAY(SELECT y.job_id FROM jobq.blocked y
                                      WHERE y.event = jobq_emit_event.name ORDER BY y.job_id))
           AND x.event = jobq_emit_event.name
        RETURNING x.job_id
    LOOP
        PERFORM jobq._event_checkpoint(b.job_id, name, payload, v_at);
        PERFORM jobq._unblock(b.job_id, true);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

CREATE OR REPLACE FUNCTION jobq_checkpoint(job_id bigint, worker uuid, step text, value jsonb) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_steps jsonb;
BEGIN
    IF job_id IS NULL OR worker IS NULL OR step IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id, worker and step must not be NULL' USING ERRCODE = '22004';
    ELSIF step = '' OR octet_length(step) > 1000 THEN
        RAISE EXCEPTION 'jobq: step must be non-empty and at most 1000 bytes' USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._require_jobs('worker', ARRAY[job_id]);  -- src/sql/grants.sql
    PERFORM jobq._hold_hot_tables();  -- src/compact.rs
    UPDATE jobq.live_jobs x
       SET checkpoints = x.checkpoints || jsonb_build_object(step, coalesce(value, 'null'::jsonb))
     WHERE x.id = job_id AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
       AND EXISTS (SELECT 1 FROM jobq.workers w WHERE w.id = worker AND jobq._may_act_for(w.owner))
    RETURNING x.checkpoints INTO v_steps;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_foreign_worker(worker);
        RETURN false;
    END IF;
    IF (SELECT count(*) FROM jsonb_object_keys(v_steps)) > 1000 THEN
        RAISE EXCEPTION 'jobq: job % would hold more than 1000 checkpoints', job_id USING ERRCODE = '22023';
    END IF;
    RETURN true;
END $$;

CREATE OR REPLACE FUNCTION jobq_enqueue_graph(jobs jsonb) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_keys    text[] := ARRAY['queue', 'payload', 'kind', 'priority', 'run_at', 'max_attempts', 'unique_key',
                              'unique_strategy', 'on_conflict', 'concurrency_key', 'concurrency_limit',
                              'rate_key', 'depends_on', 'on_parent_failure', 'fairness_key', 'after'];
    v_ids     bigint[] := '{}';
    v_parents bigint[];
    v_bad     text;
    j         jsonb;
    i         integer := 0;
    a         integer;
BEGIN
    IF jobs IS NULL THEN
        RAISE EXCEPTION 'jobq: jobs must not be NULL' USING ERRCODE = '22004';
    ELSIF jsonb_typeof(jobs) <> 'array' THEN
        RAISE EXCEPTION 'jobq: jobs must be a JSON array of job objects' USING ERRCODE = '22023';
    ELSIF jsonb_array_length(jobs) > 10000 THEN
        RAISE EXCEPTION 'jobq: jobs holds % jobs, at most 10000 allowed', jsonb_array_length(jobs) USING ERRCODE = '22023';
    END IF;
    -- A limited role's queues, all of them before any job is enqueued, so that a refusal draws
    -- no id (src/sql/grants.sql).
    PERFORM jobq._require('producer', ARRAY(SELECT e ->> 'queue' FROM jsonb_array_elements(jobs) e
                                             WHERE jsonb_typeof(e) = 'object'), 'queue');
    FOR j IN SELECT e FROM jsonb_array_elements(jobs) e LOOP
        IF jsonb_typeof(j) <> 'object' THEN
            RAISE EXCEPTION 'jobq: jobs[%] is not a JSON object', i USING ERRCODE = '22023';
        END IF;
        SELECT string_agg(k, ', ') INTO v_bad FROM jsonb_object_keys(j) k WHERE k <> ALL (v_keys);
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION 'jobq: jobs[%] has unknown keys: %', i, v_bad
                USING ERRCODE = '22023', HINT = 'Use the arguments of jobq_enqueue, and "after".';
        ELSIF jsonb_typeof(coalesce(j -> 'after', '[]')) <> 'array' OR jsonb_typeof(coalesce(j -> 'depends_on', '[]')) <> 'array' THEN
            RAISE EXCEPTION 'jobq: jobs[%]: "after" and "depends_on" must be JSON arrays', i USING ERRCODE = '22023';
        END IF;
        v_parents := ARRAY(SELECT jobq._graph_value(jsonb_build_object('id', d), 'id', 'bigint', i)::bigint
                             FROM jsonb_array_elements(coalesce(j -> 'depends_on', '[]')) d);
        FOR a IN SELECT jobq._graph_value(jsonb_build_object('after', x), 'after', 'integer', i)::integer
                   FROM jsonb_array_elements(coalesce(j -> 'after', '[]')) x LOOP
            IF a IS NULL OR a < 0 OR a >= i THEN
                RAISE EXCEPTION 'jobq: jobs[%].after names %: only an earlier element (0 to %) may be named', i, a, i - 1
                    USING ERRCODE = '22023';
            ELSIF v_ids[a + 1] IS NULL THEN
                RAISE EXCEPTION 'jobq: jobs[%].after names jobs[%], which was not enqueued (its unique key was taken)', i, a
                    USING ERRCODE = '22023';
            END IF;
            v_parents := v_parents || v_ids[a + 1];
        END LOOP;
        v_ids := v_ids || jobq._enqueue(
            j ->> 'queue',
            coalesce(j -> 'payload', '{}'),
            j ->> 'kind',
            coalesce(jobq._graph_value(j, 'priority', 'integer', i)::integer, 0),
            jobq._graph_value(j, 'run_at', 'timestamptz', i)::timestamptz,
            coalesce(jobq._graph_value(j, 'max_attempts', 'integer', i)::integer, 25),
            j ->> 'unique_key',
            coalesce(j ->> 'unique_strategy', 'until_executed'),
            coalesce(j ->> 'on_conflict', 'reject'),
            j ->> 'concurrency_key',
            coalesce(jobq._graph_value(j, 'concurrency_limit', 'integer', i)::integer, 1),
            j ->> 'rate_key',
            CASE WHEN cardinality(v_parents) > 0 THEN v_parents END,
            coalesce(j ->> 'on_parent_failure', 'cancel'),
            j ->> 'fairness_key');
        i := i + 1;
    END LOOP;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord;
END $$;

CREATE OR REPLACE VIEW jobq.queue_stats WITH (security_barrier) AS
WITH RECURSIVE t AS MATERIALIZED (SELECT clock_timestamp() AS now),
history (queue) AS (
    (SELECT f.queue FROM jobq.finished_jobs f ORDER BY f.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT f.queue FROM jobq.finished_jobs f WHERE f.queue > h.queue ORDER BY f.queue LIMIT 1)
      FROM history h
     WHERE h.queue IS NOT NULL
),
live AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS ready,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at > t.now) AS scheduled,
           count(*) FILTER (WHERE j.state = 'executing') AS executing,
           min(j.run_at) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS oldest_due
      FROM jobq.live_jobs j CROSS JOIN t
     GROUP BY j.queue
),
dead AS (
    SELECT f.queue, count(*) AS dead FROM jobq.finished_jobs f WHERE f.state = 'dead' GROUP BY f.queue
),
queues AS (
    SELECT h.queue FROM history h WHERE h.queue IS NOT NULL
    UNION
    SELECT l.queue FROM live l
)
SELECT q.queue,
       coalesce(l.ready, 0) AS ready,
       coalesce(l.scheduled, 0) AS scheduled,
       coalesce(l.executing, 0) AS executing,
       coalesce(d.dead, 0) AS dead,
       t.now - l.oldest_due AS oldest_ready_age
  FROM queues q CROSS JOIN t
  LEFT JOIN live l ON l.queue = q.queue
  LEFT JOIN dead d ON d.queue = q.queue
 -- a limited role's queues (src/sql/grants.sql)
 WHERE (SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(q.queue, (SELECT jobq._patterns('reader')));

CREATE OR REPLACE VIEW jobq.queue_depths WITH (security_barrier) AS
WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now),
parts AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS ready,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at > t.now) AS scheduled,
           count(*) FILTER (WHERE j.state = 'executing') AS executing,
           0 AS dead,
           min(j.run_at) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS oldest_due
      FROM jobq.live_jobs j CROSS JOIN t
     GROUP BY j.queue
    UNION ALL
    -- Named columns: pg_dump writes this arm back as it reads it (an unnamed NULL comes back
    -- from a restore named after its type).
    SELECT f.queue, 0, 0, 0, count(*) AS dead, NULL::timestamptz AS oldest_due
      FROM jobq.finished_jobs f
     WHERE f.state = 'dead'
     GROUP BY f.queue
)
SELECT p.queue, sum(p.ready)::bigint AS ready, sum(p.scheduled)::bigint AS scheduled,
       sum(p.executing)::bigint AS executing, sum(p.dead)::bigint AS dead,
       t.now - min(p.oldest_due) AS oldest_ready_age
  FROM parts p CROSS JOIN t
 WHERE (SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(p.queue, (SELECT jobq._patterns('reader')))  -- src/sql/grants.sql
 GROUP BY p.queue, t.now;

-- A schedule's ticks are enqueued unchecked (src/sql/schedules.sql).
CREATE OR REPLACE FUNCTION jobq._enqueue_ticks(s jobq.crontab, now timestamptz) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_tick  timestamptz := s.next_run_at;
    v_last  timestamptz := s.last_run_at;
    v_n     integer := 0;
BEGIN
    IF NOT s.catch_up THEN
        v_tick := greatest(v_tick, jobq._cron_latest(s.cron, s.time_zone, now));
    END IF;
    WHILE v_tick <= now AND v_n < 1000 LOOP
        -- Unchecked: a schedule's queue was chosen by jobq_admin, and the pass that enqueues its
        -- ticks may run in any worker's session (the SQL edition's heartbeats), limited or not.
        PERFORM jobq._enqueue(s.queue, s.payload, s.kind, s.priority, v_tick, s.max_attempts, NULL,
                              'until_executed', 'reject', NULL, 1, NULL, NULL, 'cancel', checked => false);
        v_last := v_tick;
        v_n := v_n + 1;
        v_tick := jobq._cron_next(s.cron, s.time_zone, v_tick);
    END LOOP;
    UPDATE jobq.crontab c SET next_run_at = v_tick, last_run_at = v_last WHERE c.name = s.name;
END $$;

CREATE OR REPLACE VIEW jobq.schedules WITH (security_barrier) AS
SELECT c.name, c.cron, c.time_zone, c.queue, c.kind, c.next_run_at, c.last_run_at,
       c.payload, c.priority, c.max_attempts, c.catch_up
  FROM jobq.crontab c
 -- a limited role's queues (src/sql/grants.sql)
 WHERE (SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(c.queue, (SELECT jobq._patterns('reader')));

CREATE OR REPLACE VIEW jobq.events WITH (security_barrier) AS
SELECT e.name, e.payload, e.emitted_at FROM jobq.event_log e
 WHERE e.emitted_at IS NOT NULL
   AND ((SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(e.name, (SELECT jobq._patterns('reader'))));

CREATE OR REPLACE VIEW jobq.concurrency_slots WITH (security_barrier) AS
SELECT CASE s.ns WHEN 'c' THEN 'concurrency' ELSE 'while_executing' END AS kind,
       s.key,
       count(*) AS executing,
       max(CASE WHEN s.ns = 'c' THEN j.concurrency_limit ELSE 1 END) AS max_limit,
       min(j.started_at) AS oldest_started_at
  FROM jobq.live_jobs j  -- before jobq.slots: the hot tables' lock order (src/sql/compact.sql)
  JOIN jobq.slots s ON s.job_id = j.id
 WHERE (SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(j.queue, (SELECT jobq._patterns('reader')))  -- a limited role's queues' jobs (src/sql/grants.sql)
 GROUP BY s.ns, s.key;

CREATE OR REPLACE VIEW jobq.rate_windows WITH (security_barrier) AS
WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now)
SELECT l.key, l.max_starts, l.per,
       count(s.slot) FILTER (WHERE s.last_start > t.now - l.per) AS starts_in_window,
       CASE WHEN count(s.slot) FILTER (WHERE s.last_start > t.now - l.per) >= l.max_starts
            THEN min(s.last_start) FILTER (WHERE s.slot <= l.max_starts) + l.per END AS next_start_at
  FROM jobq.rate_limits l
 CROSS JOIN t
  LEFT JOIN jobq.rate_slots s ON s.key = l.key
 WHERE (SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(l.key, (SELECT jobq._patterns('reader')))  -- rate keys as lock keys (src/sql/grants.sql)
 GROUP BY l.key, l.max_starts, l.per, t.now;


-- jobq_results filters a limited role's reads itself: jobq.jobs is read as its owner here
-- (src/sql/workflows.sql).
CREATE OR REPLACE FUNCTION jobq_results(ids bigint[])
RETURNS TABLE (id bigint, kind text, state text, attempt integer, result jsonb, last_error jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_patterns text[] := jobq._limits('reader');  -- a limited role's queues (src/sql/grants.sql)
BEGIN
    IF ids IS NULL THEN
        RAISE EXCEPTION 'jobq: ids must not be NULL' USING ERRCODE = '22004';
    ELSIF cardinality(ids) > 10000 THEN
        RAISE EXCEPTION 'jobq: ids names % jobs, at most 10000 allowed', cardinality(ids) USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT j.id, j.kind, j.state, j.attempt, j.result, j.last_error
      FROM jobq.jobs j
     WHERE j.id = ANY (ids) AND (v_patterns IS NULL OR jobq._sees(j.queue, v_patterns))
     ORDER BY array_position(ids, j.id);
END $$;

-- The pass drops the queue grants of roles dropped since (src/sql/reap.sql).
CREATE OR REPLACE FUNCTION jobq._reap(
    OUT workers_reaped integer, OUT jobs_requeued integer, OUT jobs_dead integer,
    OUT locks_released integer, OUT jobs_pruned integer)
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp SET lock_timeout = '100ms' SET jit = off AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_cutoff  timestamptz := v_now - jobq._retention();  -- once, not per row scanned
    v_waiting uuid[];
    w         record;
    r         record;
    n         integer;
BEGIN
    workers_reaped := 0; jobs_requeued := 0; jobs_dead := 0; locks_released := 0; jobs_pruned := 0;
    -- The sessions read afresh (the SQL edition's jobq.worker_alive reads them through
    -- pg_stat_get_activity, which keeps what a transaction read first for the rest of it): a
    -- heartbeat that runs this pass judged its own worker earlier in its transaction, and a
    -- worker registered since, in a session started since, would be judged dead and reaped.
    -- (The extension reads them live; there this clears nothing it uses.)
    PERFORM pg_catalog.pg_stat_clear_snapshot();
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends; 40001 for a manual jobq_reap() in an older REPEATABLE READ snapshot,
    -- which would see no job of a dead worker to requeue (src/compact.rs).
    PERFORM jobq._hold_hot_tables();

    -- A worker counts as alive while a checkout of it waits (src/waits.rs): the heartbeat of
    -- a worker that waits now is refreshed before anyone is judged, however long since the
    -- last pass (the SQL edition's passes may be minutes apart; the wait proves its session).
    -- The waiting workers are found once (a call in the condition ran once per worker's row,
    -- and the SQL edition's reads pg_locks for each worker).
    v_waiting := jobq._waiting_workers();
    UPDATE jobq.workers x SET heartbeat_at = v_now
     WHERE x.id IN (SELECT y.id FROM jobq.workers y
                     WHERE y.id = ANY (v_waiting)
                       FOR UPDATE SKIP LOCKED);

    -- Dead workers, then orphaned jobs: executing under a worker that no longer exists.
    -- Checkout does not lock the worker's row, so a checkout that overlapped the pass that
    -- reaped its worker can commit its claims after that pass; they are interrupted attempts
    -- like any other. FOR UPDATE rechecks liveness on the newest row (a heartbeat that
    -- committed meanwhile saves the worker); SKIP LOCKED leaves a worker that another pass,
    -- an unregister or a heartbeat holds to them.
    FOR w IN
        SELECT x.id FROM jobq.workers x
         WHERE NOT jobq.worker_alive(x.heartbeat_at, x.backend_pid, x.backend_start)
         ORDER BY x.id
           FOR UPDATE SKIP LOCKED
    LOOP
        SELECT * INTO r FROM jobq._reap_worker(w.id);
        jobs_requeued := jobs_requeued + r.requeued;
        jobs_dead := jobs_dead + r.dead;
        locks_released := locks_released + r.locks;
        workers_reaped := workers_reaped + r.removed::integer;
    END LOOP;
    FOR w IN
        SELECT DISTINCT j.worker_id AS id FROM jobq.live_jobs j
         WHERE j.state = 'executing'
           AND NOT EXISTS (SELECT 1 FROM jobq.workers x WHERE x.id = j.worker_id)
    LOOP
        SELECT * INTO r FROM jobq._reap_worker(w.id);
        jobs_requeued := jobs_requeued + r.requeued;
        jobs_dead := jobs_dead + r.dead;
    END LOOP;

    -- Locks past their ttl.
    DELETE FROM jobq.locks l
     WHERE l.key = ANY (ARRAY(SELECT k.key FROM jobq.locks k
                               WHERE k.worker_id IS NOT NULL AND k.expires_at <= v_now
                                 FOR UPDATE SKIP LOCKED))
       AND l.expires_at <= v_now;
    GET DIAGNOSTICS n = ROW_COUNT;
    locks_released := locks_released + n;

    -- Recurring jobs: the due ticks of every schedule (src/sql/schedules.sql). Not part of
    -- what jobq_reap() returns (the contract fixes its columns); jobq.schedules shows them.
    PERFORM jobq._enqueue_due_ticks(v_now);

    -- The dashboard's counters: what shared memory counted since the last pass goes to
    -- jobq.queue_minutes (src/sql/counters.sql).
    PERFORM jobq._flush_tallies(v_now, jobq._retention());

    -- Workflows: timed-out awaits, old events (src/sql/workflows.sql).
    PERFORM jobq._workflow_pass(v_now, v_cutoff);

    -- Queue grants of roles dropped since (src/sql/grants.sql): a role's oid is not a
    -- dependency PostgreSQL tracks, and a new role that drew the same oid must not be limited.
    DELETE FROM jobq.queue_grants g
     WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles x WHERE x.oid = g.role);

    -- Finished jobs past retention, oldest first, in batches of 10,000 until none is left
    -- or the pass has pruned for a second (the rest waits for the next pass), so pruning
    -- keeps up with any completion rate without one pass becoming a long transaction.
    -- The rows are ours, locked by the subquery (a jobq_retry holding one keeps it).
    LOOP
        WITH pruned AS (
            DELETE FROM jobq.finished_jobs j
             WHERE j.id = ANY (ARRAY(SELECT f.id FROM jobq.finished_jobs f
                                      WHERE f.finished_at < v_cutoff
                                        -- kept while a job that depends on it or awaits it is not finished
                                        AND NOT EXISTS (SELECT 1 FROM jobq.edges e JOIN jobq.live_jobs c ON c.id = e.child
                                                         WHERE e.parent = f.id)
                                      ORDER BY f.finished_at
                                      LIMIT 10000
                                        FOR UPDATE SKIP LOCKED))
            RETURNING j.id
        ), edges AS (
            -- a pruned job's own edges go with it (src/sql/workflows.sql)
            DELETE FROM jobq.edges e WHERE e.child IN (SELECT p.id FROM pruned p)
        )
        SELECT count(*) INTO n FROM pruned;
        jobs_pruned := jobs_pruned + n;
        EXIT WHEN n < 10000 OR clock_timestamp() - v_now > interval '1 second';
    END LOOP;

    -- Fair checkout: the turns of keys that have no waiting job (src/sql/fairness.sql). Last:
    -- it holds a fair queue's lock until the pass commits, and keyed enqueues into that queue
    -- wait for it.
    PERFORM jobq._prune_fairness();
END $$;

-- A login limited to some queues that set another role acts for no worker (src/privileges.rs;
-- the SQL edition's twin changes with it), and registers none.
CREATE OR REPLACE FUNCTION jobq._may_act_for(owner oid) RETURNS boolean
STRICT STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'may_act_for_wrapper';

CREATE OR REPLACE FUNCTION jobq._usable_worker(worker uuid) RETURNS boolean
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'usable_worker_wrapper';

CREATE OR REPLACE FUNCTION jobq._register_worker(worker uuid, name text, metadata jsonb, bind_to_session boolean)
RETURNS uuid LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
BEGIN
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    ELSIF bind_to_session IS NULL THEN
        RAISE EXCEPTION 'jobq: bind_to_session must not be NULL' USING ERRCODE = '22004';
    ELSIF NOT jobq._may_act_for(jobq._caller()) THEN
        -- A login limited to some queues that set another role (src/privileges.rs).
        RAISE EXCEPTION 'jobq: a session whose login role % is limited to some queues registers workers as that role', session_user
            USING ERRCODE = '42501', HINT = 'RESET ROLE, then register.';
    END IF;
    INSERT INTO jobq.workers (id, owner, name, metadata, registered_at, heartbeat_at, backend_pid, backend_start)
    SELECT worker, jobq._caller(), _register_worker.name, coalesce(metadata, '{}'), v_now, v_now, a.pid, a.backend_start
      FROM (SELECT NULL::integer AS pid, NULL::timestamptz AS backend_start WHERE NOT bind_to_session
            UNION ALL
            SELECT s.pid, s.backend_start FROM pg_stat_get_activity(pg_backend_pid()) s WHERE bind_to_session) a;
    RETURN worker;
END $$;

-- Privileges (src/sql/privileges.sql).
REVOKE ALL ON FUNCTION jobq._limits(text), jobq._limits_of(oid, text), jobq._outside_jobs(text, bigint[]),
    jobq._require_job(text, bigint, text), jobq._enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text, text, boolean),
    jobq._patterns(text), jobq._sees(text, text[]), jobq._require(text, text[], text),
    jobq._require_jobs(text, bigint[]), jobq._sees_job(bigint), jobq._check_grant(regrole, text, text[]),
    jobq_grant_queues(regrole, text, text[]), jobq_revoke_queues(regrole, text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._patterns(text), jobq._sees(text, text[]), jobq._sees_job(bigint) TO jobq_reader;
GRANT EXECUTE ON FUNCTION jobq_grant_queues(regrole, text, text[]), jobq_revoke_queues(regrole, text, text[]) TO jobq_admin;
REVOKE ALL ON FUNCTION jobq._fair_keys(text, integer, text[]), jobq_set_fairness_weight(text, text, integer),
    jobq._note_fairness(bigint), jobq._fairness_written(), jobq._fairness_replicated(),
    jobq._fair_claim(uuid, text, timestamptz, boolean, boolean, text[]),
    jobq._fair_top(integer, text, integer, timestamptz), jobq._fair_skip_entry(integer, text, text),
    jobq._fair_due(integer, text, text, integer, timestamptz, boolean), jobq._paused(text, text),
    jobq._checkout_fair(uuid, text[], integer, timestamptz, text[]),
    jobq._fair_next(text, timestamptz, boolean, text[]), jobq._prune_fairness(), jobq._fair_queues(),
    jobq._insert_job(bigint, text, jsonb, text, integer, timestamptz, integer, text, text, text, integer, text, bigint[], text, text),
    jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text, text),
    jobq_enqueue_batch(text, jsonb[], text, integer, timestamptz, integer, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text, text),
    jobq_enqueue_batch(text, jsonb[], text, integer, timestamptz, integer, text)
TO jobq_producer;
GRANT EXECUTE ON FUNCTION jobq_set_fairness_weight(text, text, integer) TO jobq_admin;
GRANT SELECT ON jobq.queue_grants, jobq.fairness, jobq.fairness_keys TO jobq_admin;

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
