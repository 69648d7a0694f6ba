-- Enqueue: jobq_enqueue (its common case in src/enqueue.rs, every case in jobq._enqueue),
-- jobq_enqueue_batch, and the unique-key helpers they use.

-- Takes `key` in jobq.locks for job `job`. A named lock whose ttl has passed or whose worker
-- is dead is removed first. False when a live holder (a job or a worker) has it. Like any
-- unique index, this waits for a concurrent, uncommitted taker of the same key and then
-- sees its outcome: it conflicts if that one committed and succeeds if it rolled back.
CREATE FUNCTION jobq._take_key(key text, job bigint) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    INSERT INTO jobq.locks (key, job_id, acquired_at) VALUES (key, job, clock_timestamp())
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF jobq._remove_stale_lock(key) THEN
        INSERT INTO jobq.locks (key, job_id, acquired_at) VALUES (key, job, clock_timestamp())
        ON CONFLICT DO NOTHING;
        RETURN FOUND;
    END IF;
    RETURN false;
END $$;

-- Deletes the named lock `key` if its ttl has passed or its worker is dead. Rows held by
-- jobs are never touched (nor locked). Liveness is first judged on the snapshot, and only a
-- holder that looks dead is re-judged under a row lock (jobq._worker_dead), so contention
-- for a live lock takes no row lock at all.
CREATE FUNCTION jobq._remove_stale_lock(key text) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    DELETE FROM jobq.locks l
     WHERE l.key = _remove_stale_lock.key AND l.worker_id IS NOT NULL
       AND (l.expires_at <= clock_timestamp()
            OR (NOT EXISTS (SELECT 1 FROM jobq.workers w
                             WHERE w.id = l.worker_id
                               AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start))
                AND jobq._worker_dead(l.worker_id)));
    RETURN FOUND;
END $$;

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
