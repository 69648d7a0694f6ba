-- Workflows and durable jobs: dependencies (jobq_enqueue's depends_on), suspensions
-- (jobq_snooze, jobq_await_jobs, jobq_await_event), events (jobq_emit_event, jobq.events),
-- checkpoints (jobq_checkpoint) and outcomes (jobq_results).
--
-- One mechanism serves dependencies, awaited jobs and awaited events: a job in state
-- 'blocked' has no ready row (checkout never sees it) and one row in jobq.blocked saying what
-- it waits for. Whoever satisfies it deletes that row and makes the job ready, in the same
-- transaction (jobq._unblock); a row can be deleted once, so the job leaves 'blocked' once.

-- What a blocked job waits for: `waiting` unfinished jobs (the unsettled edges below that
-- name it as child), or the event `event` until `until`.
CREATE TABLE jobq.blocked (
    job_id     bigint PRIMARY KEY,
    waiting    integer NOT NULL,
    event      text,
    until      timestamptz,
    -- Suspended by its own handler (an await): due at once when it wakes. A dependent job
    -- that was never started keeps the run_at it was enqueued with.
    suspended  boolean NOT NULL
);
CREATE INDEX blocked_by_event ON jobq.blocked (event) WHERE event IS NOT NULL;
CREATE INDEX blocked_until ON jobq.blocked (until) WHERE until IS NOT NULL;

-- Job `child` depends on (depends_on) or awaits (jobq_await_jobs) job `parent`. Kept until
-- the child is pruned: a finished parent is not pruned while an edge names an unfinished
-- child, and jobq_retry of a parent finds the children its failure cancelled.
CREATE TABLE jobq.edges (
    parent    bigint NOT NULL,
    child     bigint NOT NULL,
    cancel    boolean NOT NULL,               -- on_parent_failure 'cancel'
    settled   boolean NOT NULL,               -- the parent finished and the child was told
    cascaded  boolean NOT NULL DEFAULT false, -- the parent's failure cancelled the child
    PRIMARY KEY (parent, child)
);
CREATE INDEX edges_by_child ON jobq.edges (child);
CREATE INDEX edges_unsettled ON jobq.edges (parent) WHERE NOT settled;

-- Whatever inserts edges notes its database in shared memory before it commits, so that a
-- completion in a database that never wrote one skips looking (src/edges.rs). ALWAYS: also in
-- a subscription's initial copy (and in any session whose session_replication_role is
-- replica). A subscription's apply fires row triggers only, never statement triggers:
-- `edges_replicated` notes the rows that arrive that way (REPLICA: only there, and in replica
-- sessions, where a second note is harmless).
CREATE FUNCTION jobq._edges_written() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._note_edges();
    RETURN NULL;
END $$;
CREATE TRIGGER edges_written AFTER INSERT ON jobq.edges
    FOR EACH STATEMENT EXECUTE FUNCTION jobq._edges_written();
ALTER TABLE jobq.edges ENABLE ALWAYS TRIGGER edges_written;
CREATE TRIGGER edges_replicated AFTER INSERT ON jobq.edges
    FOR EACH ROW EXECUTE FUNCTION jobq._edges_written();
ALTER TABLE jobq.edges ENABLE REPLICA TRIGGER edges_replicated;

-- Events by name. A row with emitted_at NULL is an await's placeholder: jobq_await_event and
-- jobq_emit_event both write the name's row (INSERT ... ON CONFLICT DO UPDATE), so the two
-- are ordered by its row lock in every isolation level and no wake-up falls between them.
CREATE TABLE jobq.event_log (
    name        text PRIMARY KEY,
    payload     jsonb,
    emitted_at  timestamptz,
    awaited_at  timestamptz
);
CREATE INDEX event_log_emitted ON jobq.event_log (emitted_at) WHERE emitted_at IS NOT NULL;

-- A limited role sees the events whose names its patterns cover (src/sql/grants.sql).
CREATE VIEW jobq.events WITH (security_barrier) AS
SELECT e.name, e.payload, e.emitted_at FROM jobq.event_log e
 WHERE e.emitted_at IS NOT NULL
   AND ((SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(e.name, (SELECT jobq._patterns('reader'))));

SELECT pg_catalog.pg_extension_config_dump('jobq.blocked', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.edges', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.event_log', '');

-- Makes blocked job `job` ready, its jobq.blocked row already deleted by the caller (which
-- is what makes this happen once). A suspended job is due now; a dependent one at its run_at.
CREATE FUNCTION jobq._unblock(job bigint, suspended boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j record;
BEGIN
    UPDATE jobq.live_jobs x
       SET state = 'ready', run_at = CASE WHEN suspended THEN clock_timestamp() ELSE x.run_at END
     WHERE x.id = job AND x.state = 'blocked'
    RETURNING x.queue, x.run_at INTO j;
    IF FOUND THEN
        PERFORM jobq._enter_ready(ARRAY[job]);
        IF j.run_at <= clock_timestamp() THEN
            PERFORM jobq._notify(j.queue);
        END IF;
    END IF;
END $$;

-- Cancels blocked job `job` whose parent `parent` ended `parent_state` (on_parent_failure
-- 'cancel'); its own dependents learn it through jobq._archive.
CREATE FUNCTION jobq._cancel_blocked(job bigint, parent bigint, parent_state text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j record;
BEGIN
    DELETE FROM jobq.blocked b WHERE b.job_id = job;
    IF NOT FOUND THEN
        RETURN;  -- no longer blocked: cancelled or woken by someone else first
    END IF;
    UPDATE jobq.live_jobs x
       SET state = 'cancelled', finished_at = clock_timestamp(),
           last_error = jsonb_build_object('parent', parent, 'parent_state', parent_state)
     WHERE x.id = job AND x.state = 'blocked'
    RETURNING x.queue, x.unique_key, x.unique_strategy, x.concurrency_key INTO j;
    IF FOUND THEN
        UPDATE jobq.edges e SET cascaded = true WHERE e.parent = _cancel_blocked.parent AND e.child = job;
        PERFORM jobq._archive(ARRAY[job]);
        PERFORM jobq._release_keys(job, j.queue, 'cancelled', j.unique_key, j.unique_strategy,
                                   j.concurrency_key, NULL);
    END IF;
END $$;

-- Jobs `parents` finished, as `states` (completed, dead, cancelled): each job that depends on
-- or awaits one of them counts it as finished (a decrement of its jobq.blocked row, which
-- orders concurrent finishers), becomes ready when it was the last, or is cancelled when a
-- parent failed and its on_parent_failure is 'cancel'. Called by every path that finishes a
-- job (jobq._archive, jobq._complete, src/complete.rs), so it costs a job without dependents
-- one index probe. Children in id order, so two finishers never lock them in opposite orders.
CREATE FUNCTION jobq._settle(parents bigint[], states text[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    e       record;
    b       record;
BEGIN
    IF parents IS NULL THEN
        RETURN;
    END IF;
    -- 40001 under REPEATABLE READ or SERIALIZABLE for an edge this snapshot cannot see.
    PERFORM jobq._refuse_unseen_edges(parents);
    IF NOT EXISTS (SELECT 1 FROM jobq.edges x WHERE x.parent = ANY (parents) AND NOT x.settled) THEN
        RETURN;
    END IF;
    FOR e IN
        WITH s AS (
            UPDATE jobq.edges x SET settled = true
              FROM unnest(parents, states) AS p(id, state)
             WHERE x.parent = p.id AND NOT x.settled
            RETURNING x.parent, x.child, x.cancel, p.state
        )
        SELECT * FROM s ORDER BY s.child, s.parent
    LOOP
        IF e.cancel AND e.state <> 'completed' THEN
            PERFORM jobq._cancel_blocked(e.child, e.parent, e.state);
        ELSE
            UPDATE jobq.blocked x SET waiting = x.waiting - 1
             WHERE x.job_id = e.child
            RETURNING x.waiting, x.event, x.suspended INTO b;
            IF FOUND AND b.waiting <= 0 AND b.event IS NULL THEN
                DELETE FROM jobq.blocked x WHERE x.job_id = e.child;
                PERFORM jobq._unblock(e.child, b.suspended);
            END IF;
        END IF;
    END LOOP;
END $$;

-- Batch calls (jobq_complete_many, jobq_fail_many, and the fused calls through them) finish
-- several jobs, each telling its dependents in child order. Two of them telling the same
-- children in crossing orders (a parent of the second child only, then one of the first;
-- against a parent of both) would each hold one child's jobq.blocked row and wait for the
-- other's. So a batch locks the blocked rows of all its jobs' waiting children first, in child
-- order, as one jobq._settle does.
CREATE FUNCTION jobq._lock_children(job_ids bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM jobq.edges e WHERE e.parent = ANY (job_ids) AND NOT e.settled) THEN
        -- The hot tables in their one lock order before any row (src/compact.rs).
        PERFORM jobq._hold_hot_tables();
        PERFORM 1 FROM jobq.blocked b
          WHERE b.job_id IN (SELECT e.child FROM jobq.edges e WHERE e.parent = ANY (job_ids) AND NOT e.settled)
          ORDER BY b.job_id
            FOR UPDATE;
    END IF;
END $$;

-- The jobs of `ids` (distinct, at most `most`, each existing, else 22023) that are not
-- finished, locked FOR KEY SHARE: compatible with their claim and checkpoints, not with their
-- finishing, which waits for this transaction and then sees the edges it wrote. Ids not in
-- the answer were finished when looked at (a statement later, in a new snapshot).
CREATE FUNCTION jobq._lock_unfinished(ids bigint[], what text, most integer) RETURNS bigint[]
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

-- jobq_enqueue's depends_on: the state job `job` starts in ('blocked', 'ready' or
-- 'cancelled'), its edges written. Called before the job row exists (its id drawn).
CREATE FUNCTION jobq._depend(job bigint, depends_on bigint[], on_parent_failure text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_live    bigint[];
    v_cancel  boolean := on_parent_failure = 'cancel';
    v_failed  boolean;
BEGIN
    -- The hot tables in their one lock order before a parent's row is locked (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    v_live := jobq._lock_unfinished(_depend.depends_on, 'depends_on', 1000);
    SELECT coalesce(bool_or(f.state <> 'completed'), false) INTO v_failed
      FROM jobq.finished_jobs f WHERE f.id = ANY (_depend.depends_on) AND f.id <> ALL (v_live);
    INSERT INTO jobq.edges (parent, child, cancel, settled, cascaded)
    SELECT DISTINCT p, job, v_cancel, p <> ALL (v_live),
           v_cancel AND EXISTS (SELECT 1 FROM jobq.finished_jobs f WHERE f.id = p AND f.state <> 'completed')
      FROM unnest(_depend.depends_on) p;
    IF v_cancel AND v_failed THEN
        RETURN 'cancelled';
    ELSIF cardinality(v_live) = 0 THEN
        RETURN 'ready';
    END IF;
    INSERT INTO jobq.blocked (job_id, waiting, suspended) VALUES (job, cardinality(v_live), false);
    RETURN 'blocked';
END $$;

-- jobq_retry of `job`: the children its failure cancelled are blocked again (their unique
-- key taken back; one taken meanwhile leaves the child cancelled), waiting for their parents
-- not finished now, and so on down the graph.
CREATE FUNCTION jobq._reblock(job bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    c record;
    n integer;
BEGIN
    FOR c IN
        SELECT f.id, f.unique_key, f.unique_strategy
          FROM jobq.edges e JOIN jobq.finished_jobs f ON f.id = e.child
         WHERE e.parent = job AND e.cascaded AND f.state = 'cancelled'
         ORDER BY f.id
           FOR UPDATE OF f
    LOOP
        IF c.unique_key IS NOT NULL AND c.unique_strategy <> 'while_executing'
           AND NOT jobq._take_key(c.unique_key, c.id) THEN
            CONTINUE;
        END IF;
        WITH moved AS (
            DELETE FROM jobq.finished_jobs x WHERE x.id = c.id RETURNING x.*
        )
        INSERT INTO jobq.live_jobs SELECT * FROM moved;
        UPDATE jobq.live_jobs x SET state = 'blocked', finished_at = NULL, last_error = NULL
         WHERE x.id = c.id;
        UPDATE jobq.edges e SET settled = false, cascaded = false
         WHERE e.child = c.id AND EXISTS (SELECT 1 FROM jobq.live_jobs p WHERE p.id = e.parent);
        SELECT count(*) INTO n FROM jobq.edges e WHERE e.child = c.id AND NOT e.settled;
        INSERT INTO jobq.blocked (job_id, waiting, suspended) VALUES (c.id, n, false);
        PERFORM jobq._reblock(c.id);
    END LOOP;
END $$;

-- The fence of the awaits, before they change anything: locks job `job`'s row when it is
-- executing under `worker`, a worker the caller may act for, and says so; otherwise false, or
-- 42501 for another role's worker, as jobq_complete.
CREATE FUNCTION jobq._lock_executing(job bigint, worker uuid) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM 1 FROM jobq.live_jobs x
      WHERE x.id = job AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
        AND EXISTS (SELECT 1 FROM jobq.workers w WHERE w.id = worker AND jobq._may_act_for(w.owner))
        FOR NO KEY UPDATE OF x;
    IF FOUND THEN
        RETURN true;
    END IF;
    PERFORM jobq._refuse_foreign_worker(worker);
    RETURN false;
END $$;

-- The suspension of job `job`, executing under `worker`: the job goes to `to_state`
-- ('ready' due at `due`, or 'blocked'), gives back its slots and while_executing key (its
-- other keys as for a waiting job), and its attempt does not count. A job whose cancellation
-- was requested is cancelled instead. False, changing nothing, when the job is not executing
-- under this worker (42501 for another role's worker), as jobq_complete.
CREATE FUNCTION jobq._suspend(job bigint, worker uuid, to_state text, due timestamptz) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j record;
BEGIN
    PERFORM jobq._hold_hot_tables();
    UPDATE jobq.live_jobs x
       SET state = CASE WHEN x.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE to_state END,
           attempt = x.attempt - 1,
           run_at = coalesce(due, x.run_at),
           finished_at = CASE WHEN x.cancel_requested_at IS NOT NULL THEN clock_timestamp() END
     WHERE x.id = job AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
       AND EXISTS (SELECT 1 FROM jobq.workers w WHERE w.id = worker AND jobq._may_act_for(w.owner))
    RETURNING x.state, x.queue, x.run_at, x.unique_key, x.unique_strategy, x.concurrency_key,
              x.concurrency_slot INTO j;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_foreign_worker(worker);
        RETURN NULL;
    END IF;
    PERFORM jobq._release_keys(job, j.queue, CASE WHEN j.state = 'cancelled' THEN 'cancelled' ELSE 'ready' END,
                               j.unique_key, j.unique_strategy, j.concurrency_key, j.concurrency_slot);
    IF j.state = 'cancelled' THEN
        PERFORM jobq._archive(ARRAY[job]);
    ELSIF j.state = 'ready' THEN
        PERFORM jobq._enter_ready(ARRAY[job]);
        IF j.run_at <= clock_timestamp() THEN
            PERFORM jobq._notify(j.queue);
        END IF;
    END IF;
    RETURN j.state;
END $$;

CREATE FUNCTION jobq_snooze(job_id bigint, worker uuid, until timestamptz) RETURNS boolean
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

CREATE FUNCTION jobq_await_jobs(job_id bigint, worker uuid, jobs bigint[]) RETURNS text
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

-- An awaited event's checkpoint: `event:<name>` = {"payload": …, "emitted_at": …}.
CREATE FUNCTION jobq._event_checkpoint(job bigint, name text, payload jsonb, emitted_at timestamptz) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, jobq, pg_temp AS $$
    UPDATE jobq.live_jobs x
       SET checkpoints = x.checkpoints || jsonb_build_object('event:' || _event_checkpoint.name,
                             jsonb_build_object('payload', _event_checkpoint.payload,
                                                'emitted_at', _event_checkpoint.emitted_at))
     WHERE x.id = _event_checkpoint.job
$$;

CREATE FUNCTION jobq_await_event(job_id bigint, worker uuid, event text, timeout interval DEFAULT NULL)
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

CREATE FUNCTION jobq_emit_event(name text, payload jsonb DEFAULT NULL) RETURNS integer
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

CREATE FUNCTION jobq_checkpoint(job_id bigint, worker uuid, step text, value jsonb) RETURNS boolean
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

CREATE FUNCTION jobq_results(ids bigint[])
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

-- A value of a graph element (jobq_enqueue_graph): `key` of `job` read as `type`, NULL when
-- absent; 22023 naming the element and key when it does not read as one.
CREATE FUNCTION jobq._graph_value(job jsonb, key text, type text, pos integer) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v text := job ->> key;
BEGIN
    IF v IS NOT NULL THEN
        EXECUTE format('SELECT %L::%s', v, type);
    END IF;
    RETURN v;
EXCEPTION WHEN data_exception THEN
    RAISE EXCEPTION 'jobq: jobs[%].% is not a %: %', pos, key, type, v USING ERRCODE = '22023';
END $$;

-- A whole graph of jobs in one call and one transaction (an addition to the contract): `jobs` is a JSON array
-- of objects, each with jobq_enqueue's arguments by name ("queue" required) and "after", the
-- 0-based positions of earlier elements it depends on (with its "depends_on" ids of existing
-- jobs, if any). Elements are enqueued in order, so a graph is acyclic by construction.
-- Returns the ids in array order; NULL where a unique key's conflict discarded the job (an
-- element after it is refused).
CREATE FUNCTION jobq_enqueue_graph(jobs jsonb) RETURNS SETOF bigint
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

-- The reap pass's share (src/sql/reap.sql): awaits of events past their timeout wake up
-- (without the checkpoint); events past retention, and placeholders no job awaits any more,
-- are removed; in the SQL edition, the dependents that a completion under REPEATABLE READ
-- could not see are told (jobq._settle_unseen, src/edges.rs).
CREATE FUNCTION jobq._workflow_pass(now timestamptz, cutoff timestamptz) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    b record;
BEGIN
    FOR b IN
        DELETE FROM jobq.blocked x
         WHERE x.job_id = ANY (ARRAY(SELECT y.job_id FROM jobq.blocked y
                                      WHERE y.until <= now ORDER BY y.job_id FOR UPDATE SKIP LOCKED))
           AND x.until <= now
        RETURNING x.job_id
    LOOP
        PERFORM jobq._unblock(b.job_id, true);
    END LOOP;
    PERFORM jobq._settle_unseen();
    DELETE FROM jobq.event_log l
     WHERE (l.emitted_at < cutoff)
        OR (l.emitted_at IS NULL AND l.awaited_at < cutoff
            AND NOT EXISTS (SELECT 1 FROM jobq.blocked a WHERE a.event = l.name));
END $$;
