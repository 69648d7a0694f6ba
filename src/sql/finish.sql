-- The end of an attempt (jobq_complete, jobq_fail) and what operators do to jobs
-- (jobq_cancel, jobq_retry).
--
-- Fencing: complete and fail change a job only while it is 'executing' under the calling
-- worker, judged on the job row under its row lock. A worker that was reaped, or whose job
-- was cancelled or finished, gets false / NULL and changes nothing. A worker of another role
-- gets 42501 (src/privileges.rs): the statement that changes the job requires the caller to
-- be allowed to act for the worker, and only when it changed nothing is the reason looked up.
--
-- The fence is written `(CASE WHEN state = 'executing' THEN worker_id END) = worker` on
-- purpose: with `state = 'executing' AND worker_id = worker` the planner may prefer the
-- worker's partial index (jobs_executing_by_worker) to the primary key, and that index keeps
-- an entry for every job the worker ever ran until vacuum removes it: forever under a
-- snapshot held elsewhere. Measured under bench/pressure.sh: 44 million index entries read in
-- 5 s, and completion slower with every job. This form leaves the primary key as the only path.

-- jobq_complete: the common completion is done in Rust, without a plan (src/complete.rs);
-- every other case, before anything changed, by jobq._complete below, the SQL that serves
-- them all. Both give the same answers, rows and locks.
CREATE FUNCTION jobq_complete(job_id bigint, worker uuid, result jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp
AS 'MODULE_PATHNAME', 'jobq_complete';

-- Only jobq_complete calls it, and keeps its search_path: a setting of its own would be applied
-- and undone at every call (tests/lifecycle.rs checks that no role may call it).
CREATE FUNCTION jobq._complete(job_id bigint, worker uuid, result jsonb) RETURNS boolean
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

-- The default retry delay: 2^attempt seconds, +/-25% jitter (so failed jobs of one burst do
-- not come back together), capped at one hour.
CREATE FUNCTION jobq._backoff(attempt integer) RETURNS interval
LANGUAGE sql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT make_interval(secs => least(3600, power(2, least($1, 30)) * (0.75 + random() * 0.5)))
$$;

CREATE FUNCTION jobq_fail(job_id bigint, worker uuid, error jsonb DEFAULT NULL,
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

CREATE FUNCTION jobq_cancel(job_id bigint) RETURNS text
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

CREATE FUNCTION jobq_retry(job_id bigint) RETURNS boolean
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

-- Batch calls: many jobs of one worker in one call, so one round trip and one commit. Each job
-- goes through jobq_complete / jobq_fail, so fencing, keys and ownership are exactly theirs,
-- in ascending id order (two batches never lock the same jobs in opposite orders). At most
-- 10,000 ids a call.

-- Completes each job of `job_ids` executing under `worker` (with results[i] as the result of
-- job_ids[i] when `results` is given) and returns the ids it completed; an id left out of the
-- answer was not this worker's to complete (jobq_complete's false).
CREATE FUNCTION jobq_complete_many(worker uuid, job_ids bigint[], results jsonb[] DEFAULT NULL)
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

-- Fails each job of `job_ids` executing under `worker` (with errors[i] as the error of
-- job_ids[i] when `errors` is given) as jobq_fail does with its default backoff, and returns
-- the new states in job_ids order: 'ready', 'dead' or 'cancelled', NULL where the job was not
-- this worker's to fail.
CREATE FUNCTION jobq_fail_many(worker uuid, job_ids bigint[], errors jsonb[] DEFAULT NULL)
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

-- The arguments of a batch call: 22004 for a NULL worker, id list or id, 22023 for more than
-- 10,000 ids, a repeated id, or a list of results / errors of another length; 42501 for a
-- worker of another role, even with no id (each job's call would say it too).
CREATE FUNCTION jobq._check_batch(worker uuid, job_ids bigint[], per_job jsonb[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF worker IS NULL OR job_ids IS NULL OR array_position(job_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: worker, job_ids and every id must not be NULL' USING ERRCODE = '22004';
    ELSIF cardinality(job_ids) > 10000 THEN
        RAISE EXCEPTION 'jobq: at most 10000 job ids a call, got %', cardinality(job_ids) USING ERRCODE = '22023';
    ELSIF cardinality(job_ids) <> (SELECT count(DISTINCT d) FROM unnest(job_ids) d) THEN
        RAISE EXCEPTION 'jobq: job_ids must not repeat an id' USING ERRCODE = '22023';
    ELSIF per_job IS NOT NULL AND cardinality(per_job) <> cardinality(job_ids) THEN
        RAISE EXCEPTION 'jobq: % job ids but % results or errors', cardinality(job_ids), cardinality(per_job)
            USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._refuse_foreign_worker(worker);
END $$;

-- One round trip and one commit per job, or per batch: the worker's protocol. Completes (or
-- fails) the jobs in hand through jobq_complete_many (jobq_fail_many), then checks out the
-- next ones through jobq_checkout, all in the caller's one transaction; `job_ids` empty for
-- the first call. Fencing is all or nothing: if any job in hand is no longer executing under
-- this worker (cancelled and finished, or reaped), the call raises JQ002 naming them and
-- nothing is completed, failed or checked out; a reaped or unknown worker gets JQ001, as
-- from jobq_checkout. Checks and refusals are those of the two calls (22004, 22023, 42501).
CREATE FUNCTION jobq._refuse_fenced(worker uuid, job_ids bigint[], kept bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF cardinality(kept) = cardinality(job_ids) THEN
        RETURN;
    END IF;
    PERFORM 1 FROM jobq.workers w
      WHERE w.id = worker AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start);
    IF NOT FOUND THEN
        PERFORM jobq._refuse_worker(worker);
    END IF;
    RAISE EXCEPTION 'jobq: jobs % are no longer executing under worker %; nothing was finished or checked out',
        ARRAY(SELECT d FROM unnest(job_ids) d WHERE d <> ALL (kept)), worker
        USING ERRCODE = 'JQ002',
              HINT = 'Stop working on those jobs (cancelled, or finished elsewhere); finish the others and check out again.';
END $$;

-- jobq_complete_and_checkout: one job in hand, a worker's common call, is done in Rust
-- (src/complete.rs): that job completed by jobq_complete and the next checked out by
-- jobq_checkout, both called as C functions into this call's result; a job no longer in hand
-- is refused by jobq._refuse_fenced. Every other call is jobq._complete_and_checkout's.
CREATE FUNCTION jobq_complete_and_checkout(worker uuid, job_ids bigint[], results jsonb[] DEFAULT NULL,
                                           queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1)
RETURNS SETOF jobq.job LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp
AS 'MODULE_PATHNAME', 'jobq_complete_and_checkout';

-- A batch in hand, or none: through jobq_complete_many, whose checks of the batch (ids that
-- could repeat, lists of other lengths, the caller's worker) and lock of the children (the
-- tellings of several jobs in order, src/sql/workflows.sql) one job does not need: through it,
-- one job in hand cost the call 702,634 instructions a job where the Rust's costs 330,352
-- (bench/instructions.sh, row jobq_worker).
CREATE FUNCTION jobq._complete_and_checkout(worker uuid, job_ids bigint[], results jsonb[], queues text[],
                                            max_jobs integer)
RETURNS SETOF jobq.job LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._refuse_fenced(worker, job_ids, @extschema@.jobq_complete_many(worker, job_ids, results));
    RETURN QUERY SELECT * FROM @extschema@.jobq_checkout(worker, queues, max_jobs);
END $$;

CREATE FUNCTION jobq_fail_and_checkout(worker uuid, job_ids bigint[], errors jsonb[] DEFAULT NULL,
                                       queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1)
RETURNS SETOF jobq.job LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_states text[];
BEGIN
    v_states := @extschema@.jobq_fail_many(worker, job_ids, errors);
    PERFORM jobq._refuse_fenced(worker, job_ids, ARRAY(
        SELECT i.id FROM unnest(job_ids, v_states) AS i(id, state) WHERE i.state IS NOT NULL));
    RETURN QUERY SELECT * FROM @extschema@.jobq_checkout(worker, queues, max_jobs);
END $$;
