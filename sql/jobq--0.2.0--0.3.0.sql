-- jobq 0.2.0 -> 0.3.0 (ALTER EXTENSION jobq UPDATE). Hand-written: a database updated with it has
-- exactly the objects of a fresh CREATE EXTENSION of 0.3.0 (tests/upgrade.rs checks it).
\echo Use "ALTER EXTENSION jobq UPDATE" to load this file. \quit

-- jobq_enqueue: its common case without a plan (src/enqueue.rs), every other case in
-- jobq._enqueue, which was jobq_enqueue's PL/pgSQL; the rows it writes, in jobq._insert_job.
-- The new functions come first: the C function sends to them.

-- Writes job `id` (its unique key, if any, already taken): the job row, its ready row, the
-- counter, the wake-ups. What src/enqueue.rs does without a plan, and its fallback for tables
-- that are not the ones it knows.
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
    state             text DEFAULT 'ready'     -- or 'blocked', or 'cancelled' (jobq._depend)
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
                           depends_on, finished_at)
    VALUES (id, queue, kind, payload, priority, run_at, v_now, _insert_job.state, max_attempts,
            unique_key, CASE WHEN unique_key IS NOT NULL THEN unique_strategy END,
            concurrency_key, CASE WHEN concurrency_key IS NOT NULL THEN concurrency_limit END, rate_key,
            _insert_job.depends_on, CASE WHEN _insert_job.state = 'cancelled' THEN v_now END);
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

-- jobq_enqueue, every case: the checks and their errors, a unique key's conflicts, then
-- jobq._insert_job. src/enqueue.rs does the common case itself and sends the rest here.
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
    on_parent_failure text
) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_run_at  timestamptz := coalesce(run_at, v_now);
    v_id      bigint;
    v_state   text := 'ready';
    v_holder  record;
    v_ready   tid;
    v_ready_queue text;
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
    ELSIF on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'jobq: unknown on_parent_failure "%"', on_parent_failure
            USING ERRCODE = '22023', HINT = 'Use cancel or run.';
    END IF;

    v_id := nextval('jobq.jobs_id_seq');

    IF unique_key IS NOT NULL AND unique_strategy <> 'while_executing' THEN
        LOOP
            EXIT WHEN jobq._take_key(unique_key, v_id);
            SELECT l.job_id, l.worker_id INTO v_holder FROM jobq.locks l WHERE l.key = unique_key;
            CONTINUE WHEN NOT FOUND;  -- the holder let go in between: try again
            IF on_conflict = 'replace' AND v_holder.job_id IS NOT NULL THEN
                -- Debounce: the waiting job takes the new payload, priority and run_at
                -- (its ready row first: jobq._lock_ready), after any compaction of the hot
                -- tables in progress (src/compact.rs).
                PERFORM jobq._hold_hot_tables();
                v_ready := jobq._lock_ready(v_holder.job_id);
                IF v_ready IS NOT NULL THEN
                    UPDATE jobq.ready r SET priority = _enqueue.priority, run_at = v_run_at
                     WHERE r.ctid = v_ready
                    RETURNING r.queue INTO v_ready_queue;  -- the holder's queue, maybe not this one
                    PERFORM jobq._lower_floor('jobq.ready'::regclass, v_ready_queue, _enqueue.priority,
                                              v_run_at, v_holder.job_id);
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
            ELSIF on_conflict = 'log' THEN
                RAISE NOTICE 'jobq: unique key "%" is held by %; job not enqueued', unique_key,
                    coalesce('job ' || v_holder.job_id, 'the lock of worker ' || v_holder.worker_id);
                RETURN NULL;
            END IF;
            RAISE EXCEPTION 'jobq: unique key "%" is already taken', unique_key
                USING ERRCODE = '23505',
                      DETAIL = coalesce('existing job id: ' || v_holder.job_id,
                                        'held by the lock of worker ' || v_holder.worker_id);
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
                            depends_on, v_state);
END $$;

-- jobq_enqueue gains depends_on and on_parent_failure (workflows, below): a new signature,
-- so the old function goes and the C function takes its place (grants below).
DROP FUNCTION jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text);
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
    on_parent_failure text        DEFAULT 'cancel'
) RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp
AS 'MODULE_PATHNAME', 'jobq_enqueue';

-- ==== Workflows and durable jobs ====
-- A job's dependencies and checkpoints (src/sql/schema.sql), returned by checkout too.
ALTER TABLE jobq.live_jobs ADD COLUMN depends_on bigint[], ADD COLUMN checkpoints jsonb NOT NULL DEFAULT '{}';
-- (finished_jobs is made LIKE live_jobs, without its defaults: the existing rows get '{}', the
-- column keeps no default, as in a fresh install)
ALTER TABLE jobq.finished_jobs ADD COLUMN depends_on bigint[], ADD COLUMN checkpoints jsonb NOT NULL DEFAULT '{}';
ALTER TABLE jobq.finished_jobs ALTER COLUMN checkpoints DROP DEFAULT;
-- PostgreSQL 18 names NOT NULL constraints, and LIKE keeps the source table's names: a fresh
-- install's finished_jobs has live_jobs_checkpoints_not_null.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
                WHERE conrelid = 'jobq.finished_jobs'::regclass AND conname = 'finished_jobs_checkpoints_not_null') THEN
        ALTER TABLE jobq.finished_jobs RENAME CONSTRAINT finished_jobs_checkpoints_not_null TO live_jobs_checkpoints_not_null;
    END IF;
END $$;
ALTER TYPE jobq.job ADD ATTRIBUTE depends_on bigint[], ADD ATTRIBUTE checkpoints jsonb;
CREATE OR REPLACE VIEW jobq.jobs AS
SELECT * FROM jobq.live_jobs
UNION ALL
SELECT * FROM jobq.finished_jobs;

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

-- Whatever inserts edges notes its database in shared memory (src/edges.rs).
CREATE  FUNCTION jobq."_note_edges"() RETURNS void
STRICT VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'note_edges_wrapper';
CREATE FUNCTION jobq._edges_written() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._note_edges();
    RETURN NULL;
END $$;
CREATE TRIGGER edges_written AFTER INSERT ON jobq.edges
    FOR EACH STATEMENT EXECUTE FUNCTION jobq._edges_written();
ALTER TABLE jobq.edges ENABLE ALWAYS TRIGGER edges_written;

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

CREATE VIEW jobq.events AS
SELECT e.name, e.payload, e.emitted_at FROM jobq.event_log e WHERE e.emitted_at IS NOT NULL;

SELECT pg_catalog.pg_extension_config_dump('jobq.blocked', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.edges', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.event_log', '');

-- 40001 for a finishing transaction whose snapshot cannot see a dependent's edge (src/edges.rs).
CREATE  FUNCTION jobq."_refuse_unseen_edges"(
	"parents" bigint[] /* Vec < i64 > */
) RETURNS void
STRICT VOLATILE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'refuse_unseen_edges_wrapper';

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

CREATE OR REPLACE FUNCTION jobq_complete_many(worker uuid, job_ids bigint[], results jsonb[] DEFAULT NULL)
RETURNS bigint[] LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_done  bigint[] := '{}';
    r       record;
BEGIN
    PERFORM jobq._check_batch(worker, job_ids, results);
    PERFORM jobq._lock_children(job_ids);  -- src/sql/workflows.sql
    FOR r IN SELECT i.id, i.ord FROM unnest(job_ids) WITH ORDINALITY AS i(id, ord) ORDER BY i.id, i.ord LOOP
        IF @extschema@.jobq_complete(r.id, worker, results[r.ord]) THEN
            v_done := v_done || r.id;
        END IF;
    END LOOP;
    RETURN ARRAY(SELECT d FROM unnest(job_ids) d WHERE d = ANY (v_done));
END $$;

CREATE OR REPLACE FUNCTION jobq_fail_many(worker uuid, job_ids bigint[], errors jsonb[] DEFAULT NULL)
RETURNS text[] LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_states  text[] := array_fill(NULL::text, ARRAY[cardinality(job_ids)]);
    r         record;
BEGIN
    PERFORM jobq._check_batch(worker, job_ids, errors);
    PERFORM jobq._lock_children(job_ids);  -- src/sql/workflows.sql
    FOR r IN SELECT i.id, i.ord FROM unnest(job_ids) WITH ORDINALITY AS i(id, ord) ORDER BY i.id, i.ord LOOP
        v_states[r.ord] := @extschema@.jobq_fail(r.id, worker, errors[r.ord]);
    END LOOP;
    RETURN v_states;
END $$;

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
BEGIN
    IF ids IS NULL THEN
        RAISE EXCEPTION 'jobq: ids must not be NULL' USING ERRCODE = '22004';
    ELSIF cardinality(ids) > 10000 THEN
        RAISE EXCEPTION 'jobq: ids names % jobs, at most 10000 allowed', cardinality(ids) USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT j.id, j.kind, j.state, j.attempt, j.result, j.last_error
      FROM jobq.jobs j
     WHERE j.id = ANY (ids)
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
                              'rate_key', 'depends_on', 'on_parent_failure', 'after'];
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
            coalesce(j ->> 'on_parent_failure', 'cancel'));
        i := i + 1;
    END LOOP;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord;
END $$;

-- The reap pass's share (src/sql/reap.sql): awaits of events past their timeout wake up
-- (without the checkpoint); edges a finishing transaction could not see (a REPEATABLE READ
-- completion whose snapshot predates a dependent's enqueue) are settled; events past
-- retention, and placeholders no job awaits any more, are removed.
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
    DELETE FROM jobq.event_log l
     WHERE (l.emitted_at < cutoff)
        OR (l.emitted_at IS NULL AND l.awaited_at < cutoff
            AND NOT EXISTS (SELECT 1 FROM jobq.blocked a WHERE a.event = l.name));
END $$;

-- The functions that finish, cancel, retry, prune or return jobs, now telling their
-- dependents (same signatures; their new text, as a fresh install has it).
-- Moves jobs `ids` that are in a finished state from jobq.live_jobs to jobq.finished_jobs,
-- and tells the jobs that depend on or await them (jobq._settle, src/sql/workflows.sql).
-- The paths that finish a job rarely (cancel, death, cancellation by the reaper) set the
-- state in place and then call this; completion, the hot path, moves its row in one step.
CREATE OR REPLACE FUNCTION jobq._archive(ids bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_moved  bigint[];
    v_states text[];
BEGIN
    WITH moved AS (
        DELETE FROM jobq.live_jobs j
         WHERE j.id = ANY (ids) AND j.state IN ('completed', 'dead', 'cancelled')
        RETURNING j.*
    ), kept AS (
        INSERT INTO jobq.finished_jobs SELECT * FROM moved RETURNING id, state
    )
    SELECT array_agg(k.id ORDER BY k.id), array_agg(k.state ORDER BY k.id) INTO v_moved, v_states FROM kept k;
    PERFORM jobq._settle(v_moved, v_states);
END $$;

CREATE OR REPLACE FUNCTION jobq._complete(job_id bigint, worker uuid, result jsonb) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
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
    DELETE FROM jobq.live_jobs x
     WHERE x.id = _complete.job_id AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
       AND EXISTS (SELECT 1 FROM jobq.workers w WHERE w.id = worker AND jobq._may_act_for(w.owner))
    RETURNING x.* INTO j;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_foreign_worker(worker);
        RETURN false;
    END IF;
    j.finished_at := clock_timestamp();
    -- Helpers are called in assignments, not with PERFORM: PL/pgSQL evaluates a lone call
    -- without starting an executor for it (docs/performance.md, "CPU per job").
    v_noted := jobq._tally(j.queue, 'completed', j.started_at, j.finished_at);  -- src/counters.rs
    IF jobq.retention_ms() > 0 THEN
        j.state := 'completed';
        j.result := _complete.result;
        INSERT INTO jobq.finished_jobs SELECT (j).*;
    END IF;
    IF j.unique_key IS NOT NULL OR j.concurrency_key IS NOT NULL THEN
        v_freed := jobq._release_keys(job_id, j.queue, 'completed', j.unique_key, j.unique_strategy,
                                      j.concurrency_key, j.concurrency_slot);
    END IF;
    -- The jobs that depend on or await this one (src/sql/workflows.sql).
    PERFORM jobq._settle(ARRAY[job_id], ARRAY['completed']);
    RETURN true;
END $$;

CREATE OR REPLACE FUNCTION jobq_cancel(job_id bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j          record;
    v_ready    tid;
    v_waiting  boolean;
    v_state    text;
BEGIN
    IF job_id IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id must not be NULL' USING ERRCODE = '22004';
    END IF;
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
            PERFORM jobq._archive(ARRAY[job_id]);
            PERFORM jobq._release_keys(job_id, j.queue, 'cancelled', j.unique_key, j.unique_strategy,
                                       j.concurrency_key, NULL);
            RETURN 'cancelled';
        END IF;
        BEGIN
            SELECT x.state INTO j FROM jobq.live_jobs x WHERE x.id = jobq_cancel.job_id FOR UPDATE;
            IF NOT FOUND THEN
                -- Finished, or no such job. One snapshot over both tables (jobq.jobs) sees a
                -- job that jobq_retry moved back meanwhile in jobq.live_jobs: look again then.
                SELECT x.state INTO v_state FROM jobq.jobs x WHERE x.id = jobq_cancel.job_id;
                CONTINUE WHEN v_state IN ('ready', 'executing', 'blocked');
                RETURN v_state;
            ELSIF j.state IN ('ready', 'blocked') THEN
                -- It became ready again since we looked (a retry, a requeue): give the job
                -- row back (this block's subtransaction ends) and take the ready row first.
                RAISE EXCEPTION USING ERRCODE = 'JQ900';
            END IF;
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
        RETURN false;
    END IF;
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

CREATE OR REPLACE FUNCTION jobq._reap(
    OUT workers_reaped integer, OUT jobs_requeued integer, OUT jobs_dead integer,
    OUT locks_released integer, OUT jobs_pruned integer)
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp SET lock_timeout = '100ms' SET jit = off AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_cutoff  timestamptz := v_now - jobq._retention();  -- once, not per row scanned
    w         record;
    r         record;
    n         integer;
BEGIN
    workers_reaped := 0; jobs_requeued := 0; jobs_dead := 0; locks_released := 0; jobs_pruned := 0;
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends; 40001 for a manual jobq_reap() in an older REPEATABLE READ snapshot,
    -- which would see no job of a dead worker to requeue (src/compact.rs).
    PERFORM jobq._hold_hot_tables();

    -- A worker counts as alive while a checkout of it waits (src/waits.rs): the heartbeat of
    -- a live worker that waits now is refreshed before anyone is judged.
    UPDATE jobq.workers x SET heartbeat_at = v_now
     WHERE x.id IN (SELECT y.id FROM jobq.workers y
                     WHERE y.id = ANY (jobq._waiting_workers())
                       AND jobq.worker_alive(y.heartbeat_at, y.backend_pid, y.backend_start)
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
END $$;

-- plan_cache_mode: PL/pgSQL keeps each statement's plan, but PostgreSQL re-plans a
-- parameterised statement on every call when it estimates the generic plan dearer than
-- custom ones, which it does for the candidate query; that cost ~170 us per checkout
-- (measured: docs/performance.md). The generic plan is the right one here: an ordered index scan.
-- jit = off: the generic plan's cost is estimated for a LIMIT it cannot know (10% of the
-- table), so on a large table it crosses jit_above_cost and every checkout compiled its
-- statements with LLVM: 1.7 s of JIT per call at 1.4M ready jobs (bench/soak.sh found it).
-- A checkout reads a handful of rows; JIT never pays here.
-- wait: see jobq._checkout_waiting below; a call without it pays one IS NOT NULL test.
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
BEGIN
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
    IF v_rc AND v_live THEN
        IF v_queue IS NOT NULL THEN
            RETURN QUERY
            WITH cand AS (
                SELECT r.ctid AS rid, r.id, r.keyed
                  FROM jobq.ready r
                 WHERE r.queue_hash = hashtext(v_queue) AND r.queue = v_queue AND r.run_at <= v_now
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
                   j.unique_strategy, j.concurrency_limit, j.started_at, j.depends_on, j.checkpoints
              FROM claimed j
             ORDER BY j.priority, j.run_at, j.id;
        ELSE
            RETURN QUERY
            WITH cand AS (
                SELECT r.ctid AS rid, r.id, r.keyed
                  FROM jobq.ready r
                 WHERE (queues IS NULL OR r.queue = ANY (queues)) AND r.run_at <= v_now
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
                   j.unique_strategy, j.concurrency_limit, j.started_at, j.depends_on, j.checkpoints
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
    IF NOT v_rc THEN
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
                     WHERE r.queue_hash = hashtext(v_queue) AND r.queue = v_queue AND r.run_at <= v_now
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
                     WHERE (queues IS NULL OR r.queue = ANY (queues)) AND r.run_at <= v_now
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
           j.unique_strategy, j.concurrency_limit, j.started_at, j.depends_on, j.checkpoints
      FROM unnest(v_claimed) WITH ORDINALITY AS k(id, ord)
      JOIN jobq.live_jobs j ON j.id = k.id
     ORDER BY k.ord;
END $$;

-- ==== Rate limits (src/sql/rate_limits.sql) ====
-- A change of a limit and the key's takers meet on an advisory lock of the key instead of the
-- slot rows, which a change locked one after another and could deadlock on with a taker.
CREATE OR REPLACE FUNCTION jobq_set_rate_limit(key text, max_starts integer, per interval) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_recent timestamptz[];
    v_noted  boolean;
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'jobq: key must not be NULL' USING ERRCODE = '22004';
    ELSIF key = '' OR octet_length(key) > 1000 THEN
        RAISE EXCEPTION 'jobq: key must be 1 to 1000 bytes' USING ERRCODE = '22023';
    ELSIF max_starts IS NOT NULL THEN
        IF per IS NULL THEN
            RAISE EXCEPTION 'jobq: per must not be NULL' USING ERRCODE = '22004';
        ELSIF max_starts < 1 OR max_starts > 10000 THEN
            RAISE EXCEPTION 'jobq: max_starts must be between 1 and 10000, got %', max_starts USING ERRCODE = '22023';
        ELSIF per <= interval '0' OR NOT isfinite(per) THEN
            RAISE EXCEPTION 'jobq: per must be a finite interval greater than 0, got %', per USING ERRCODE = '22023';
        END IF;
    END IF;
    -- The key's lock (above): from here to the commit no start of the key is in progress.
    PERFORM pg_advisory_xact_lock(1785684593, hashtext('r:' || key));
    -- A limit removed or changed may let waiting jobs start now: every waiting checkout of
    -- this database looks again after the commit (src/waits.rs).
    v_noted := jobq._wake(NULL, '-infinity', 10000);
    IF max_starts IS NULL THEN
        -- No limit any more: the key's jobs start as plain ones.
        DELETE FROM jobq.rate_slots s WHERE s.key = jobq_set_rate_limit.key;
        DELETE FROM jobq.rate_limits l WHERE l.key = jobq_set_rate_limit.key;
        RETURN;
    END IF;
    INSERT INTO jobq.rate_limits AS l (key, max_starts, per, set_at)
    VALUES (key, max_starts, per, clock_timestamp())
    ON CONFLICT ON CONSTRAINT rate_limits_pkey
    DO UPDATE SET max_starts = EXCLUDED.max_starts, per = EXCLUDED.per, set_at = EXCLUDED.set_at;
    -- The slots anew, keeping every start already made, the most recent in the slots the
    -- limit uses (1..max_starts) and the older ones in spare slots above it, which a start
    -- never takes but a later raise of the limit finds again: so a limit lowered and raised
    -- again counts the starts made meanwhile, and no window ever holds more starts than the
    -- highest limit it saw. (Under READ COMMITTED this statement's snapshot, taken after the
    -- lock, sees every start made; under REPEATABLE READ a start committed since the
    -- transaction's snapshot makes the DELETE raise 40001.)
    v_recent := ARRAY(SELECT s.last_start FROM jobq.rate_slots s WHERE s.key = jobq_set_rate_limit.key
                       ORDER BY s.last_start DESC);
    DELETE FROM jobq.rate_slots s WHERE s.key = jobq_set_rate_limit.key;
    INSERT INTO jobq.rate_slots (key, slot, last_start)
    SELECT key, g.slot, coalesce(v_recent[g.slot], '-infinity')
      FROM generate_series(1, greatest(max_starts, cardinality(v_recent))) AS g(slot);
END $$;

CREATE OR REPLACE FUNCTION jobq._take_rate(key text, started timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    -- A full window, or a key without a limit, is answered without the key's lock: only a
    -- checkout that finds a slot free holds it, so a change waits for the checkouts that
    -- went to take a start, not for every one that found the window full.
    IF NOT EXISTS (SELECT 1 FROM jobq.rate_slots x JOIN jobq.rate_limits l ON l.key = x.key
                    WHERE x.key = _take_rate.key AND x.last_start < started - l.per
                      AND x.slot <= l.max_starts) THEN
        RETURN NOT EXISTS (SELECT 1 FROM jobq.rate_limits l WHERE l.key = _take_rate.key);
    END IF;
    -- The key's lock, shared with its other takers and tried without waiting: a change of
    -- the key's limit holds it (or, rarely, another key's of the same hash), and the key has
    -- no start for this call; that change's commit wakes the waiting checkouts (once its
    -- locks are released, src/xact.rs).
    IF NOT pg_try_advisory_xact_lock_shared(1785684593, hashtext('r:' || key)) THEN
        RETURN false;
    END IF;
    -- The window and the slots are read by one statement, so a limit changed meanwhile is
    -- seen whole or not at all (jobq_set_rate_limit rewrites the slots with the limit).
    UPDATE jobq.rate_slots s SET last_start = started
     WHERE s.ctid = (SELECT x.ctid FROM jobq.rate_slots x JOIN jobq.rate_limits l ON l.key = x.key
                      WHERE x.key = _take_rate.key AND x.last_start < started - l.per
                        AND x.slot <= l.max_starts
                      ORDER BY x.last_start
                      LIMIT 1
                        FOR UPDATE OF x SKIP LOCKED);
    RETURN FOUND OR NOT EXISTS (SELECT 1 FROM jobq.rate_limits l WHERE l.key = _take_rate.key);
END $$;

-- ==== Counters for monitoring (src/sql/counters.sql) ====
-- The histograms' sums, and per-queue totals that only go up, started from the minutes kept.
ALTER TABLE jobq.queue_minutes ADD COLUMN wait_us bigint NOT NULL DEFAULT 0,
                               ADD COLUMN run_us bigint NOT NULL DEFAULT 0;
CREATE TABLE jobq.queue_totals (
    queue      text     PRIMARY KEY,
    enqueued   bigint   NOT NULL,
    started    bigint   NOT NULL,
    completed  bigint   NOT NULL,
    failed     bigint   NOT NULL,
    dead       bigint   NOT NULL,
    wait_ms    bigint[] NOT NULL,
    run_ms     bigint[] NOT NULL,
    wait_us    bigint   NOT NULL,
    run_us     bigint   NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('jobq.queue_totals', '');
INSERT INTO jobq.queue_totals
SELECT m.queue, sum(m.enqueued), sum(m.started), sum(m.completed), sum(m.failed), sum(m.dead),
       jobq.histogram_sum(m.wait_ms), jobq.histogram_sum(m.run_ms), 0, 0
  FROM jobq.queue_minutes m
 GROUP BY m.queue;
DROP FUNCTION jobq._take_tallies();
CREATE  FUNCTION jobq."_take_tallies"() RETURNS TABLE (
	"queue" TEXT,  /* String */
	"minute" timestamp with time zone,  /* TimestampWithTimeZone */
	"enqueued" bigint,  /* i64 */
	"started" bigint,  /* i64 */
	"completed" bigint,  /* i64 */
	"failed" bigint,  /* i64 */
	"dead" bigint,  /* i64 */
	"wait_ms" bigint[],  /* Vec < i64 > */
	"run_ms" bigint[],  /* Vec < i64 > */
	"wait_us" bigint,  /* i64 */
	"run_us" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'take_tallies_wrapper';
CREATE OR REPLACE FUNCTION jobq._flush_tallies(now timestamptz, keep interval) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    -- A transaction-level advisory lock of class 'jobq', as in jobq._take_slot.
    IF NOT pg_try_advisory_xact_lock(1785684593, hashtext('jobq.queue_minutes')) THEN
        RETURN;
    END IF;
    WITH t AS (
        SELECT * FROM jobq._take_tallies()
    ), minutes AS (
        INSERT INTO jobq.queue_minutes AS m
        SELECT * FROM t
        ON CONFLICT (queue, minute) DO UPDATE
           SET enqueued = m.enqueued + excluded.enqueued, started = m.started + excluded.started,
               completed = m.completed + excluded.completed, failed = m.failed + excluded.failed,
               dead = m.dead + excluded.dead,
               wait_ms = jobq._histogram_add(m.wait_ms, excluded.wait_ms),
               run_ms = jobq._histogram_add(m.run_ms, excluded.run_ms),
               wait_us = m.wait_us + excluded.wait_us, run_us = m.run_us + excluded.run_us
    )
    INSERT INTO jobq.queue_totals AS q
    SELECT t.queue, sum(t.enqueued), sum(t.started), sum(t.completed), sum(t.failed), sum(t.dead),
           jobq.histogram_sum(t.wait_ms), jobq.histogram_sum(t.run_ms), sum(t.wait_us), sum(t.run_us)
      FROM t
     GROUP BY t.queue
    ON CONFLICT (queue) DO UPDATE
       SET enqueued = q.enqueued + excluded.enqueued, started = q.started + excluded.started,
           completed = q.completed + excluded.completed, failed = q.failed + excluded.failed,
           dead = q.dead + excluded.dead,
           wait_ms = jobq._histogram_add(q.wait_ms, excluded.wait_ms),
           run_ms = jobq._histogram_add(q.run_ms, excluded.run_ms),
           wait_us = q.wait_us + excluded.wait_us, run_us = q.run_us + excluded.run_us;
    DELETE FROM jobq.queue_minutes m WHERE m.minute < now - greatest(keep, interval '1 hour');
END $$;
GRANT SELECT ON jobq.queue_totals TO jobq_reader, jobq_admin;

-- Nothing for PUBLIC (src/sql/privileges.sql); the roles' rows of the contract.
REVOKE ALL ON FUNCTION
    jobq._take_tallies(),
    jobq._refuse_unseen_edges(bigint[]),
    jobq._note_edges(),
    jobq._edges_written(),
    jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text),
    jobq._enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text),
    jobq._insert_job(bigint, text, jsonb, text, integer, timestamptz, integer, text, text, text, integer, text, bigint[], text),
    jobq._unblock(bigint, boolean),
    jobq._cancel_blocked(bigint, bigint, text),
    jobq._settle(bigint[], text[]),
    jobq._lock_children(bigint[]),
    jobq._lock_unfinished(bigint[], text, integer),
    jobq._depend(bigint, bigint[], text),
    jobq._reblock(bigint),
    jobq._lock_executing(bigint, uuid),
    jobq._suspend(bigint, uuid, text, timestamptz),
    jobq_snooze(bigint, uuid, timestamptz),
    jobq_await_jobs(bigint, uuid, bigint[]),
    jobq._event_checkpoint(bigint, text, jsonb, timestamptz),
    jobq_await_event(bigint, uuid, text, interval),
    jobq_emit_event(text, jsonb),
    jobq_checkpoint(bigint, uuid, text, jsonb),
    jobq_results(bigint[]),
    jobq._graph_value(jsonb, text, text, integer),
    jobq_enqueue_graph(jsonb),
    jobq._workflow_pass(timestamptz, timestamptz)
FROM PUBLIC;
GRANT SELECT ON jobq.events, jobq.blocked, jobq.edges TO jobq_reader;
GRANT EXECUTE ON FUNCTION jobq_results(bigint[]) TO jobq_reader;
GRANT EXECUTE ON FUNCTION
    jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text),
    jobq_emit_event(text, jsonb),
    jobq_enqueue_graph(jsonb)
TO jobq_producer;
GRANT EXECUTE ON FUNCTION
    jobq_checkpoint(bigint, uuid, text, jsonb),
    jobq_snooze(bigint, uuid, timestamptz),
    jobq_await_jobs(bigint, uuid, bigint[]),
    jobq_await_event(bigint, uuid, text, interval)
TO jobq_worker;
GRANT SELECT ON jobq.blocked, jobq.edges, jobq.event_log, jobq.events TO jobq_admin;

-- ==== jobq_stop_checkouts: a stopping worker's checkouts, waiting ones included, claim nothing ====
ALTER TABLE jobq.workers ADD COLUMN stopping_at timestamptz;
CREATE FUNCTION jobq."_stop_checkouts"(
	"worker" uuid /* pgrx::Uuid */
) RETURNS bool /* bool */
STRICT VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'stop_checkouts_wrapper';
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
              FROM jobq.ready r
             WHERE (queues IS NULL OR (r.queue_hash = ANY (v_hashes) AND r.queue = ANY (queues)));
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
CREATE FUNCTION jobq_stop_checkouts(worker uuid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    UPDATE jobq.workers w SET stopping_at = coalesce(w.stopping_at, clock_timestamp())
     WHERE w.id = worker AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)
       AND jobq._may_act_for(w.owner);
    IF NOT FOUND THEN
        PERFORM jobq._refuse_worker(worker);
    END IF;
    PERFORM jobq._stop_checkouts(worker);
END $$;
REVOKE ALL ON FUNCTION jobq._stop_checkouts(uuid), jobq_stop_checkouts(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq_stop_checkouts(uuid) TO jobq_worker;

-- ==== jobq.queue_stats at the cost of the unfinished jobs and the queues (src/sql/stats.sql) ====
-- Builds over the whole history once, here (ALTER EXTENSION holds the table meanwhile).
CREATE INDEX jobs_finished_by_queue ON jobq.finished_jobs (queue);
CREATE OR REPLACE VIEW jobq.queue_stats AS
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
  LEFT JOIN dead d ON d.queue = q.queue;

-- The paused queues, readable by the dashboard's role (src/sql/privileges.sql); granted again
-- to jobq_admin after it, so that the table's privileges read as a fresh install's.
REVOKE SELECT ON jobq.pauses FROM jobq_admin;
GRANT SELECT ON jobq.pauses TO jobq_reader, jobq_admin;
