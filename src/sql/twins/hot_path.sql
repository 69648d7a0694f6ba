-- Twins of src/enqueue.rs, src/checkout.rs and src/complete.rs: the extension serves the
-- common enqueue, checkout and completion without a plan and hands every other case to the
-- SQL that serves them all (jobq._enqueue, jobq._checkout, jobq._complete). Here that SQL
-- serves every case.
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
BEGIN
    RETURN jobq._enqueue(queue, payload, kind, priority, run_at, max_attempts, unique_key, unique_strategy,
                         on_conflict, concurrency_key, concurrency_limit, rate_key, depends_on, on_parent_failure,
                         fairness_key);
END $$;

CREATE FUNCTION jobq_checkout(worker uuid, queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1,
                              wait interval DEFAULT NULL)
RETURNS SETOF jobq.job
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM jobq._checkout(worker, queues, max_jobs, wait);
END $$;

CREATE FUNCTION jobq_complete(job_id bigint, worker uuid, result jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN jobq._complete(job_id, worker, result);
END $$;
