-- Twins of src/enqueue.rs, src/checkout.rs and src/complete.rs: the extension serves the
-- common enqueue, checkout and completion without a plan and hands every other case to the
-- SQL that serves them all (jobq._enqueue, jobq._checkout, jobq._complete). Here that SQL
-- serves every case but the enqueue of a job without keys, the checkout of one plain job and
-- the completion of a job without keys, which jobq_enqueue, jobq_checkout and jobq_complete
-- below serve with statements of their own, as the extension serves them in Rust; and
-- jobq_complete_and_checkout with one job in hand, which completes it with jobq_complete's
-- statements and checks out one plain job with jobq_checkout's (src/sql/twins/pasted/).
-- Every twin is PL/pgSQL, not SQL: PL/pgSQL keeps its statements' plans for the session, where
-- a SQL function called from another statement is parsed and planned again at each call (that
-- cost a job ten times the extension's instructions: bench/results/instructions.md).
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
    fairness_key      text        DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now     timestamptz;
    v_run_at  timestamptz;
    v_id      bigint;
BEGIN
    -- The twin of src/enqueue.rs's fast path: a job with no key of any kind but a fairness key,
    -- no parents and arguments jobq._enqueue accepts, under READ COMMITTED where no queue grant
    -- limits a role, is written here, as jobq._insert_job and jobq._enter_ready write it (the
    -- ready row first: the hot tables' one lock order; a fairness key's turns by
    -- jobq._fair_keys), without their three function layers and the start-up of their general
    -- statements, which cost such a job half as much again (docs/performance.md, "The SQL
    -- edition"). This edition has no claim floors to lower, and it rings its waiting
    -- checkouts from a trigger on jobq.ready (src/sql/twins/edition.sql). Anything else, and
    -- any argument the SQL refuses, goes to jobq._enqueue; tests/lifecycle.rs holds the two
    -- paths' rows equal. The arguments such a job does not use are served here at their
    -- defaults only: jobq._enqueue alone knows which other values are valid.
    IF unique_key IS NULL AND concurrency_key IS NULL AND rate_key IS NULL AND depends_on IS NULL
       AND (fairness_key IS NULL OR fairness_key <> '' AND octet_length(fairness_key) <= 1000)
       AND queue <> '' AND octet_length(queue) <= 1000 AND payload IS NOT NULL
       AND priority IS NOT NULL AND (kind IS NULL OR octet_length(kind) <= 1000) AND max_attempts >= 1
       AND (run_at IS NULL OR isfinite(run_at))
       AND unique_strategy = 'until_executed' AND on_conflict = 'reject' AND concurrency_limit = 1
       AND on_parent_failure = 'cancel'
       AND current_setting('transaction_isolation') = 'read committed'
       AND NOT EXISTS (SELECT 1 FROM jobq.queue_grants) THEN
        v_now := clock_timestamp();
        v_run_at := coalesce(run_at, v_now);
        v_id := nextval('jobq.jobs_id_seq');
        INSERT INTO jobq.ready (queue, priority, run_at, id, kind, keyed, fairness_key)
        VALUES (queue, priority, v_run_at, v_id, kind, false, fairness_key);
        INSERT INTO jobq.live_jobs (id, queue, kind, payload, priority, run_at, enqueued_at, state, max_attempts,
                                    fairness_key)
        VALUES (v_id, queue, kind, payload, priority, v_run_at, v_now, 'ready', max_attempts, fairness_key);
        IF fairness_key IS NOT NULL THEN
            PERFORM jobq._fair_keys(queue, priority, ARRAY[fairness_key]);  -- src/sql/fairness.sql
        END IF;
        IF octet_length(queue) <= 200 THEN  -- jobq._tally_row's row (src/sql/twins/counters.sql)
            INSERT INTO jobq.tallies VALUES (queue, jobq._tally_minute(v_now), 1::smallint, NULL);
        END IF;
        -- The tally is the queue's note for the deferred NOTIFY: the next pass sends one for
        -- each queue whose enqueues it counts (jobq._take_tallies). jobq._notify, whose note
        -- (a row of its own, and a call) cost each enqueue some 60,000 instructions
        -- (bench/instructions.sh, row jobq_sql_enqueue), only where no tally is written or the
        -- NOTIFY is sent at once (jobq.notify = immediate).
        IF v_run_at <= v_now AND (octet_length(queue) > 200 OR current_setting('jobq.notify', true) = 'immediate') THEN
            PERFORM jobq._notify(queue);
        END IF;
        RETURN v_id;
    END IF;
    RETURN jobq._enqueue(queue, payload, kind, priority, run_at, max_attempts, unique_key, unique_strategy,
                         on_conflict, concurrency_key, concurrency_limit, rate_key, depends_on, on_parent_failure,
                         fairness_key);
END $$;

-- jobq_checkout: the twin of src/checkout.rs's fast path. A call for one job claims it with
-- three short statements when nothing calls for the general path: no wait, READ COMMITTED,
-- queue names that are all there (or none: every queue), no pause, no queue grant, no fair
-- queue among them (src/sql/twins/pasted/look_one.sql), a worker usable as it is (the
-- caller's own, unbound or bound to this session, decided from the look; any other worker by
-- jobq._usable_worker, whole), and a first waiting job with no key to take (a concurrency, rate
-- or unique key: the whole call goes to jobq._checkout, which takes the keys, and finds that
-- row locked by this transaction): src/sql/twins/pasted/checkout_one.sql, the statements
-- jobq_complete_and_checkout runs too. (The look, a statement apart from the checkout's
-- condition so that jobq_complete_and_checkout makes it once for both its steps, costs this
-- call some 12,000 instructions more than one statement would: row jobq_sql, 866,814 at
-- 803ea29 against 878,464 at df75f5a.) Every other call is jobq._checkout's, whose one statement
-- claims up to max_jobs jobs: its layers and its start-up (some forty plan nodes) make a job
-- checked out alone there cost a quarter more CPU, checkout and completion together
-- (bench/instructions.sh, row jobq_sql; docs/performance.md). A near-copy of jobq._checkout's
-- first statement for that saving, which counts the start itself (jobq._tally_row's row, as VALUES);
-- tests/sql_edition.rs holds the two paths equal. Generic plans: a custom plan of each
-- statement would be made at every call (the queue and the time are parameters).
CREATE FUNCTION jobq_checkout(worker uuid, queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1,
                              wait interval DEFAULT NULL)
RETURNS SETOF jobq.job
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_queue  text := queues[1];
    v_now    timestamptz;
    c        record;
    j        jobq.job;
    v_mine      boolean;  -- the look (src/sql/twins/pasted/look_one.sql)
    v_ungranted boolean;
    v_live      boolean;
    v_pid       integer;
    v_start     timestamptz;
    v_plain     boolean;
BEGIN
    IF max_jobs = 1 AND wait IS NULL THEN
        @paste look_one@
        @paste checkout_one@
    END IF;
    RETURN QUERY SELECT * FROM jobq._checkout(worker, queues, max_jobs, wait);
END $$;

-- jobq_complete: the twin of src/complete.rs's fast path. Under READ COMMITTED, a job with no
-- unique or concurrency key to release, executing under the caller's own worker (its role, no
-- role set), where no queue grant limits a role, leaves jobq.live_jobs here, as jobq._complete
-- moves it: the same DELETE, the same counter, the same copy in jobq.finished_jobs, the same
-- look for the edges that wait on it (src/sql/twins/pasted/complete_one.sql, the statements
-- jobq_complete_and_checkout runs too, after a DELETE of its own that tests the same job
-- without testing the worker: its look at the worker, look_one.sql, does). The test of the
-- worker and of the queue grants is this DELETE's, where the look, a statement of its own, would
-- cost this call some 14,000 instructions more (bench/instructions.sh, row jobq_sql). Without
-- jobq._complete's layer, its call of jobq._tally and its wait for a compaction (never, in this
-- edition: src/sql/twins/compact.sql), which cost each job some 50,000 instructions
-- (bench/instructions.sh, row jobq_sql). Every other
-- completion, and any call whose DELETE finds nothing here (another worker's job, a job not
-- executing, a NULL argument), is jobq._complete's, which decides it whole; tests/sql_edition.rs
-- holds the two paths' rows equal.
CREATE FUNCTION jobq_complete(job_id bigint, worker uuid, result jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_done    boolean;
    d         jobq.live_jobs;
BEGIN
    v_done := false;
    IF current_setting('transaction_isolation') = 'read committed' THEN
        DELETE FROM jobq.live_jobs x
         WHERE x.id = job_id AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
           AND x.unique_key IS NULL AND x.concurrency_key IS NULL
           AND EXISTS (SELECT 1 FROM jobq.workers w
                        WHERE w.id = worker AND w.owner::oid = jobq._caller()
                          AND pg_catalog.current_setting('role') = 'none')
           AND NOT EXISTS (SELECT 1 FROM jobq.queue_grants)
        RETURNING x.* INTO d;
        @paste complete_one@
    END IF;
    IF v_done THEN
        RETURN true;
    END IF;
    RETURN jobq._complete(job_id, worker, result);
END $$;

-- jobq_complete_and_checkout: the twin of src/complete.rs's. One job in hand, a worker's
-- common call: that job completed as jobq_complete completes it (a job no longer in hand
-- refused by jobq._refuse_fenced: JQ001 or JQ002) and the next checked out as jobq_checkout
-- checks out one job; through jobq._complete_and_checkout, which completes through
-- jobq_complete_many, one job in hand cost the call 1,243,492 instructions against 822,698
-- (bench/instructions.sh, row jobq_sql_worker, 5a79413). Every other call is
-- jobq._complete_and_checkout's. Both steps run here as in those two functions, the same
-- statements pasted into each body by scripts/build-sql-edition.py
-- (src/sql/twins/pasted/look_one.sql, complete_one.sql, checkout_one.sql), but for the
-- completion's DELETE, which tests only the job: the look, made once for both steps, tested the
-- worker and the grants (40,000 instructions a job less than each step's own tests and the
-- checkout's look at pauses and fair queues in its condition: row jobq_sql_worker, 812,663 at
-- 803ea29 against 772,917 at df75f5a). Called as jobq_checkout (a
-- statement of its own, a function scan, its settings and its rows copied twice) the checkout
-- cost each job 53,000 instructions more (902,208 at 02c5f8b against 849,202 at cbdbf83), and
-- called as jobq_complete (a function call with its settings) the completion 16,000 more
-- (849,709 at 9920aa1 against 833,425 with only that changed); a function both share, called
-- as an expression, cost the two-call path 12,000 more (its call and its composite result).
-- tests/sql_edition.rs holds this call's checkout to the general path as it holds
-- jobq_checkout's. The function makes its statements' plans generic (plan_cache_mode), as
-- jobq_checkout does; the setting holds for what it calls as well (jobq._complete, and for a
-- batch jobq._complete_and_checkout), whose plans are then generic too.
CREATE FUNCTION jobq_complete_and_checkout(worker uuid, job_ids bigint[], results jsonb[] DEFAULT NULL,
                                           queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1)
RETURNS SETOF jobq.job LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_queue  text := queues[1];
    v_now    timestamptz;
    c        record;
    j        jobq.job;
    job_id   bigint;
    result   jsonb;
    v_done   boolean;
    d        jobq.live_jobs;
    v_mine      boolean;  -- the look (src/sql/twins/pasted/look_one.sql)
    v_ungranted boolean;
    v_live      boolean;
    v_pid       integer;
    v_start     timestamptz;
    v_plain     boolean;
BEGIN
    IF cardinality(job_ids) = 1 AND job_ids[1] IS NOT NULL AND worker IS NOT NULL
       AND (results IS NULL OR cardinality(results) = 1) THEN
        job_id := job_ids[1];
        result := results[1];
        @paste look_one@
        v_done := false;
        IF v_mine AND v_ungranted THEN
            DELETE FROM jobq.live_jobs x
             WHERE x.id = job_id AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
               AND x.unique_key IS NULL AND x.concurrency_key IS NULL
            RETURNING x.* INTO d;
            @paste complete_one@
        END IF;
        IF NOT v_done AND NOT jobq._complete(job_id, worker, result) THEN
            PERFORM jobq._refuse_fenced(worker, job_ids, '{}');
        END IF;
        IF max_jobs = 1 THEN
            @paste checkout_one@
        END IF;
        RETURN QUERY SELECT * FROM jobq._checkout(worker, queues, max_jobs, NULL);
    ELSE
        RETURN QUERY SELECT * FROM jobq._complete_and_checkout(worker, job_ids, results, queues, max_jobs);
    END IF;
END $$;
